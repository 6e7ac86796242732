"""Flink's semantics on Apache Spark, through PySpark: the APIs a Spark user imports, and the
conformance runners that drive them.

The library: each area's `api.py` (`adapters/pyspark/<area>/api.py`) and the engine it runs
(`<area>/engine.py`, `<area>/operator.py`), `session.py` (`get_spark()`) and `timers.py`.  The
runners, which a user's code never imports: `adapter.py` (`PySparkAdapter`, task mode),
`streaming.py` (`pyspark-stream`), `runtime.py`, `runner_session.py`, `chaos.py`, `daemon.py`,
and each area's `conformance.py` and `stream.py`.  Importing this package imports neither.
"""

from typing import Any

__all__ = ["PySparkAdapter"]


def __getattr__(name: str) -> Any:
    if name == "PySparkAdapter":  # the task-mode runner, imported only when asked for
        from flink_semantics.adapters.pyspark.adapter import PySparkAdapter

        return PySparkAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
