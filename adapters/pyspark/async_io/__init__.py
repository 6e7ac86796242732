"""The async I/O area on Spark: Flink's async wait operator.

* `operator.py`: `AsyncWaitOperator`, the operator core (standard library only; rule IDs in comments);
* `api.py`: the user API `async_map(df, fn, ...)` over a batch or streaming DataFrame (`mapInArrow`);
* `stream.py`: schedules of the area through `async_map` in a streaming query (`run_many`);
* `conformance.py`: a schedule of the area run on the same operator (`Run`, `CAPABILITIES`).

pyspark itself is imported only when a Spark session is needed.
"""

from flink_semantics.adapters.pyspark.async_io.api import (
    AsyncFunctionFailed,
    async_map,
    operator_config,
    retry_strategy,
    run_operator,
    virtual_time_loop,
    wall_clock_loop,
)
from flink_semantics.adapters.pyspark.async_io.conformance import CAPABILITIES, Run

__all__ = ["CAPABILITIES", "AsyncFunctionFailed", "Run", "async_map", "operator_config", "retry_strategy",
           "run_operator", "virtual_time_loop", "wall_clock_loop"]
