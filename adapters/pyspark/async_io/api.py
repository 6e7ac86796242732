"""async_map: Flink's async wait operator on a Spark DataFrame.

    out = async_map(df, fetch, capacity=100, ordered=True, timeout=5.0)

`fn` is an `async def` taking a value and returning a list of results.  Each
Spark task runs one asyncio event loop over the Arrow batches of its partition
(`mapInArrow`) and drives `AsyncWaitOperator` (adapters/pyspark/async_io/operator.py, the
same class the conformance adapter drives) with the loop's clock and real
coroutines:

* at most `capacity` records (and in-band watermarks) are in flight per
  partition (AIO-6, AIO-9); a full queue blocks the input (AIO-7);
* `ordered=True` emits in input order (AIO-12); `ordered=False` emits in
  completion order but never lets a record pass a watermark row (AIO-13..15);
* in-band watermarks: rows whose `kind` column is "W" carry a watermark in
  their `ts` column and are emitted as "W" rows in the output stream;
* the end of the partition (of the micro-batch, in a streaming query) is end
  of input: the queue is drained before the task ends (AIO-42).  As in Flink,
  end of input also ends retrying (AIO-39): pending retries fire at once and
  every outcome after it is final, so the calls still in flight at the end of a
  partition get no retry;
* a failed call (after retries), a timeout with `on_timeout="fail"` or a
  `None` result fails the Spark task (AIO-20, AIO-23, AIO-28).

Input columns: `value_col` (the value passed to `fn`), optional `kind_col`
("R" record / "W" watermark; all rows are records without it) and optional
`ts_col` (the record's timestamp, or the watermark).  Output columns: `kind`,
`ts` (the input record's timestamp, AIO-18) and `value` (one row per result).
Times in this API are seconds; the operator counts milliseconds.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import selectors
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from flink_semantics.adapters.pyspark.async_io.operator import (
    AsyncWaitOperator,
    EndOfInput,
    Entry,
    OperatorConfig,
    Record,
    RetryStrategy,
    Stored,
    Watermark,
    any_error,
    empty_result,
)

AsyncFn = Callable[[Any], Coroutine[Any, Any, Any]]  # an `async def` taking a value, returning a list


class AsyncFunctionFailed(RuntimeError):
    """The task fails: a call failed, timed out or returned None (AIO-20, AIO-23, AIO-28)."""


def retry_strategy(max_attempts: int, *, delay: float = 0.0, initial_delay: float | None = None,
                   max_delay: float = 0.0, multiplier: float = 2.0, on_empty: bool = False,
                   on_error: bool | type[BaseException] | tuple[type[BaseException], ...] = True
                   ) -> RetryStrategy:
    """A fixed-delay strategy, or exponential backoff when `initial_delay` is given (seconds).

    `max_attempts` counts retries (AIO-34).  `on_empty` retries an empty result; `on_error`
    retries any error (True) or errors of the given types.
    """
    exc_pred: Callable[[BaseException], bool] | None
    if on_error is True:
        exc_pred = any_error
    elif on_error is False:
        exc_pred = None
    else:
        exc_pred = functools.partial(_is_instance, types=on_error)
    common: dict[str, Any] = dict(max_attempts=max_attempts,
                                  result_predicate=empty_result if on_empty else None,
                                  exception_predicate=exc_pred)
    if initial_delay is None:
        return RetryStrategy(kind="fixed_delay", delay=delay * 1000.0, **common)
    return RetryStrategy(kind="exponential_backoff", initial_delay=initial_delay * 1000.0,
                         max_delay=max_delay * 1000.0, multiplier=multiplier, **common)


def _is_instance(error: BaseException, types: Any) -> bool:
    return isinstance(error, types)


def _const(result: list, value: Any) -> list:
    return list(result)


def operator_config(*, capacity: int = 100, ordered: bool = True, timeout: float | None = None,
                    on_timeout: str | list | Callable[[Any], list | None] = "fail",
                    retry: RetryStrategy | None = None) -> OperatorConfig:
    """Build and validate (ValueError naming AIO-1 / AIO-3) the operator configuration."""
    timeout_ms = 0.0 if timeout is None else timeout * 1000.0
    if callable(on_timeout):
        action, result_fn = "complete", on_timeout  # a None result leaves the call in flight (AIO-30)
    elif isinstance(on_timeout, list):
        action, result_fn = "complete", functools.partial(_const, list(on_timeout))
    else:
        action, result_fn = on_timeout, functools.partial(_const, [])
    config = OperatorConfig(ordered=ordered, capacity=capacity, timeout=timeout_ms, on_timeout=action,
                            timeout_result=result_fn, retry=retry)
    config.validate()
    return config


# --------------------------------------------------------------------------
# The asyncio environment of the operator
# --------------------------------------------------------------------------


class LoopTimers:
    """The operator's timers on an asyncio loop's clock (ms)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop

    def now(self) -> float:
        return self.loop.time() * 1000.0

    def register(self, deadline: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return self.loop.call_at(deadline / 1000.0, callback)

    def cancel(self, handle: asyncio.TimerHandle) -> None:
        handle.cancel()


class CoroutineService:
    """Each invocation is a task on the loop; its outcome completes the entry's future."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fn: AsyncFn):
        self.loop = loop
        self.fn = fn
        self.operator: AsyncWaitOperator | None = None

    def invoke(self, entry: Entry) -> None:
        task = self.loop.create_task(self.fn(entry.record.value))
        entry.call = task
        task.add_done_callback(functools.partial(self._done, entry))

    def _done(self, entry: Entry, task: asyncio.Task) -> None:
        op = self.operator
        if op is None or task.cancelled():
            return
        error = task.exception()
        if error is not None:
            op.complete_exceptionally(entry, error)
        else:
            op.complete(entry, task.result())

    def cancel(self, entry: Entry) -> None:
        if entry.call is not None and not entry.call.done():
            entry.call.cancel()


class RowOutput:
    """Collects output rows (kind, ts, value); side effects are not part of the output stream."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.ts: list[int | None] = []
        self.values: list[Any] = []

    def emit(self, record: Record, value: Any) -> None:
        self.kinds.append("R")
        self.ts.append(record.timestamp)
        self.values.append(value)

    def watermark(self, timestamp: int) -> None:
        self.kinds.append("W")
        self.ts.append(timestamp)
        self.values.append(None)

    def status(self, idle: bool) -> None:
        pass

    def invoked(self, record: Record, attempt: int) -> None:
        pass

    def timed_out(self, record: Record) -> None:
        pass

    def checkpoint(self, id: int, snapshot: list[Stored]) -> None:
        pass

    def failed(self, record: Record | None, reason: str, error: BaseException | None) -> None:
        pass

    def finished(self) -> None:
        pass

    def take(self) -> tuple[list[str], list[int | None], list[Any]]:
        out = (self.kinds, self.ts, self.values)
        self.kinds, self.ts, self.values = [], [], []
        return out


class LoopDriver:
    """Runs the operator on an event loop until a condition holds (or the task fails)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fn: AsyncFn,
                 config: OperatorConfig):
        self.loop = loop
        self.output = RowOutput()
        self.service = CoroutineService(loop, fn)
        self._waiter: asyncio.Future | None = None
        self.op = AsyncWaitOperator(config, LoopTimers(loop), self.service, self.output,
                                    on_progress=self._wake)
        self.service.operator = self.op

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _until(self, cond: Callable[[], bool]) -> None:
        while self.op.alive and not cond():
            self._waiter = self.loop.create_future()
            await self._waiter

    def run_until(self, cond: Callable[[], bool]) -> None:
        self.loop.run_until_complete(self._until(cond))
        f = self.op.failure
        if f is not None:
            what = "the input" if f.record is None else f"the stream element {f.record.value!r}"
            raise AsyncFunctionFailed(f"AIO-23: could not complete {what} ({f.reason})") from f.error

    def close(self) -> None:
        self.op.close()
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def run_operator(rows: Iterator[tuple[str, int | None, Any]], fn: AsyncFn,
                 config: OperatorConfig, flush_every: int = 10_000
                 ) -> Iterator[tuple[list[str], list[int | None], list[Any]]]:
    """Drive one operator over (kind, ts, value) rows on a fresh event loop; yield output chunks.

    Rows are pushed in groups of `flush_every`; the loop runs until the group is admitted,
    then the output so far is yielded.  At the end, end of input drains the queue (AIO-42).
    """
    # select() sleeps to the microsecond; epoll rounds every wait up to a whole millisecond,
    # which adds ~0.5 ms to each call's time in the queue (10 ms services lose ~5% of throughput).
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    driver = LoopDriver(loop, fn, config)
    op = driver.op
    try:
        seq = 0
        pushed = 0
        for kind, ts, value in rows:
            if kind == "W":
                op.push(Watermark(ts if ts is not None else 0))
            else:
                op.push(Record(seq, value, ts))
                seq += 1
            pushed += 1
            if pushed % flush_every == 0:
                driver.run_until(lambda: op.pending_input == 0)
                yield driver.output.take()
        op.push(EndOfInput())
        driver.run_until(lambda: op.finished)
        yield driver.output.take()
    finally:
        driver.close()
        loop.close()


def _arrow_task(batches: Iterator[Any], *, fn: AsyncFn, config: OperatorConfig,
                value_col: str, kind_col: str | None, ts_col: str | None, value_type: Any
                ) -> Iterator[Any]:
    """The Spark task (mapInArrow): one event loop and one operator per partition."""
    import pyarrow as pa

    schema = pa.schema([("kind", pa.string()), ("ts", pa.int64()), ("value", value_type)])

    def rows() -> Iterator[tuple[str, int | None, Any]]:
        for b in batches:
            n = b.num_rows
            values = b.column(value_col).to_pylist()
            kinds = b.column(kind_col).to_pylist() if kind_col else ["R"] * n
            ts = b.column(ts_col).to_pylist() if ts_col else [None] * n
            yield from zip(kinds, ts, values)

    for kinds, ts, values in run_operator(rows(), fn, config):
        if kinds:
            yield pa.RecordBatch.from_arrays(
                [pa.array(kinds, pa.string()), pa.array(ts, pa.int64()), pa.array(values, value_type)],
                schema=schema)


def async_map(df: Any, fn: AsyncFn, *, capacity: int = 100, ordered: bool = True,
              timeout: float | None = None, on_timeout: str | list | Callable[[Any], list | None] = "fail",
              retry: RetryStrategy | None = None, value_col: str = "value", kind_col: str | None = "kind",
              ts_col: str | None = "ts", result_type: str = "long") -> Any:
    """Apply the async function `fn` to every record of `df` through an async wait operator.

    `timeout` (seconds, None = no timeout) runs from admission over all retries (AIO-26);
    `on_timeout` is "fail" (the task fails), "ignore" (wait for the call), a list (the result)
    or a function value -> list (None: wait for the call).  `retry` comes from
    `retry_strategy(...)` and needs a timeout (AIO-3).  Raises ValueError for an invalid
    configuration (AIO-1, AIO-3) before any Spark job runs.
    """
    if not inspect.iscoroutinefunction(fn):
        raise TypeError("async_map: fn must be an `async def` function taking a value and returning a list")
    config = operator_config(capacity=capacity, ordered=ordered, timeout=timeout, on_timeout=on_timeout,
                             retry=retry)
    import pyarrow as pa

    arrow_types = {"long": pa.int64(), "bigint": pa.int64(), "int": pa.int32(), "double": pa.float64(),
                   "float": pa.float32(), "string": pa.string(), "boolean": pa.bool_(), "binary": pa.binary()}
    if result_type not in arrow_types:
        raise ValueError(f"async_map: result_type must be one of {sorted(arrow_types)}, not {result_type!r}")
    columns = set(df.columns)
    if value_col not in columns:
        raise ValueError(f"async_map: no column {value_col!r} in {sorted(columns)}")
    value_type = arrow_types[result_type]
    task = functools.partial(
        _arrow_task, fn=fn, config=config, value_col=value_col,
        kind_col=kind_col if kind_col in columns else None,
        ts_col=ts_col if ts_col in columns else None, value_type=value_type)
    return df.mapInArrow(task, f"kind string, ts long, value {result_type}")
