"""The sources and failover area on Spark: a FLIP-27 source (spec/sources.md).

* `engine.py`: the enumerator, the assignment tracker, the coordinator with its valve, the readers,
  the two-phase-commit sinks, the job graph's regions (standard library and networkx; rule IDs in
  comments);
* `conformance.py`: a schedule of the area run on them, failures as real Spark task failures
  (`Run`, `CAPABILITIES`);
* `flip27.py`: the FLIP-27 interface on Structured Streaming (`Split`, `SplitEnumerator`,
  `SplitReader`, and `SplitSource`, the Python data source that runs them);
* `files.py`, `api.py`: the public API: the built-in file source `Flip27Source` (format `flip27`,
  `flip27_options`) and the `foreachBatch` sink `IdempotentSink`;
* `scripted.py`: the harness's source `ScriptedSource` (format `flip27-scripted`): jobs of inline
  record counts, or driven by a schedule's steps laid out in micro-batches, its fault points;
* `stream.py`: the conformance runner through it (`run_many`, `STREAM_UNSUPPORTED`;
  `--adapter pyspark-stream`);
* `faults.py`: the fault-injection run (`python -m flink_semantics.adapters.pyspark.sources.faults`).

pyspark itself is imported only when a Spark session is needed; the conformance run's names
(`CAPABILITIES`, `Run`) only when asked for, so that importing the user's API (api.py) loads
nothing of the harness.
"""

from typing import Any

__all__ = ["CAPABILITIES", "Run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from flink_semantics.adapters.pyspark.sources import conformance

        return getattr(conformance, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
