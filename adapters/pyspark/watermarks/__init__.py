"""The watermarks area on Spark: per-split generation, idleness, combining inputs, alignment
(spec/watermarks.md).

* `engine.py`: the generators and their idleness on pausable clocks, a reader's multiplexer,
  idleness manager and output, the samplers and the alignment of readers and splits, the
  coordinator, and the valve of the downstream task (standard library; rule IDs in comments);
* `conformance.py`: a schedule of the area run on them, a failover as a real Spark task failure
  (`Run`, `CAPABILITIES`).

pyspark itself is imported only when a Spark session is needed.
"""

from flink_semantics.adapters.pyspark.watermarks.conformance import CAPABILITIES, Run

__all__ = ["CAPABILITIES", "Run"]
