"""The async I/O area on Spark: Flink's async wait operator.

* `operator.py`: `AsyncWaitOperator`, the operator core (standard library only; rule IDs in comments);
* `api.py`: the user API `async_map(df, fn, ...)` over a batch or streaming DataFrame (`mapInArrow`);
* `rows.py`: async_map's row mode (the row kept, the result columns, the error output);
* `stream.py`: schedules of the area through `async_map` in a streaming query (`run_many`);
* `conformance.py`: a schedule of the area run on the same operator (`Run`, `CAPABILITIES`).

pyspark itself is imported only when a Spark session is needed.  The conformance mode's `Run` and
`CAPABILITIES` are loaded on first use (PEP 562), so that importing the user API loads nothing of
the conformance harness.
"""

from typing import Any

from flink_semantics.adapters.pyspark.async_io.api import (
    AsyncFunctionFailed,
    async_map,
    operator_config,
    retry_strategy,
    run_operator,
    virtual_time_loop,
    wall_clock_loop,
)
from flink_semantics.adapters.pyspark.async_io.rows import ResultTypeError

__all__ = ["CAPABILITIES", "AsyncFunctionFailed", "ResultTypeError", "Run", "async_map", "operator_config",
           "retry_strategy", "run_operator", "virtual_time_loop", "wall_clock_loop"]

_CONFORMANCE = ("CAPABILITIES", "Run")


def __getattr__(name: str) -> Any:
    if name in _CONFORMANCE:
        from flink_semantics.adapters.pyspark.async_io import conformance

        return getattr(conformance, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
