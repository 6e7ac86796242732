"""The watermarks area on Spark: per-split generation, idleness, combining inputs, alignment
(spec/watermarks.md).

* `engine.py`: the generators and their idleness on pausable clocks, a reader's multiplexer,
  idleness manager and output, the samplers and the alignment of readers and splits, the
  coordinator, and the valve of the downstream task (standard library; rule IDs in comments);
* `api.py`: the public functions `event_time_windows` (tumbling windows closed by Flink's
  watermark, on Spark's processing-time clock) and `flink_watermarks` (the watermark events of a
  source log), with `snapshots.py` for their state between micro-batches; `stream.py` drives the
  latter for the `pyspark-stream` runner;
* `conformance.py`: a schedule of the area run on them, a failover as a real Spark task failure
  (`Run`, `CAPABILITIES`).

pyspark itself is imported only when a Spark session is needed.  `CAPABILITIES` and `Run` (the
conformance runner's) are loaded when first asked for, so that importing `api.py`, which imports this
package first, loads nothing of the conformance harness.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CAPABILITIES", "Run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from flink_semantics.adapters.pyspark.watermarks import conformance

        return getattr(conformance, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
