"""The sources and failover area on Spark: a FLIP-27 source (spec/sources.md).

* `engine.py`: the enumerator, the assignment tracker, the coordinator with its valve, the readers,
  the two-phase-commit sinks, the job graph's regions (standard library and networkx; rule IDs in
  comments);
* `conformance.py`: a schedule of the area run on them, failures as real Spark task failures
  (`Run`, `CAPABILITIES`);
* `api.py`: the public API on Structured Streaming: the Python data source `Flip27Source`
  (`flip27_options`) and the `foreachBatch` sink `IdempotentSink`;
* `scripted.py`: a job of that source driven by a schedule's steps, laid out in micro-batches;
* `stream.py`: the conformance runner through that API (`run_many`, `STREAM_UNSUPPORTED`;
  `--adapter pyspark-stream`), and the API's names as before;
* `faults.py`: the fault-injection run (`python -m flink_semantics.adapters.pyspark.sources.faults`).

pyspark itself is imported only when a Spark session is needed.
"""

from flink_semantics.adapters.pyspark.sources.conformance import CAPABILITIES, Run

__all__ = ["CAPABILITIES", "Run"]
