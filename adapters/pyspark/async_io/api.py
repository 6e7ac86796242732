"""async_map: Flink's async wait operator on a Spark DataFrame.

    out = async_map(df, fetch, columns=["id", "url"], result="body string, status int",
                    capacity=100, ordered=True, timeout=5.0)

`fn` is an `async def` taking the row's `columns` and returning a list of results; the output is
each input row, all its columns unchanged, once per result, with the result columns after them
(row mode, rows.py).  Each Spark task runs one asyncio event loop over the Arrow batches of its
partition (`mapInArrow`) and drives `AsyncWaitOperator` (adapters/pyspark/async_io/operator.py,
the same class the conformance adapter drives) with the loop's clock and real coroutines:

* at most `capacity` records (and in-band watermarks) are in flight per
  partition (AIO-6, AIO-9); a full queue blocks the input (AIO-7);
* `ordered=True` emits in input order (AIO-12); `ordered=False` emits in
  completion order but never lets a record pass a watermark row (AIO-13..15);
* in-band watermarks (`kind_col`): rows of kind "W" are watermarks, rows of
  kind "S" watermark statuses, which bypass the queue (AIO-51);
* on a batch DataFrame the end of the partition is end of input: the queue is
  drained before the task ends (AIO-42).  As in Flink, end of input also ends
  retrying (AIO-39): pending retries fire at once and every outcome after it is
  final, so the calls still in flight at the end of a partition get no retry;
* on a streaming DataFrame the end of a micro-batch's partition is not end of
  input: the task waits until its queue is empty (calls complete, retries and
  timeouts run their course) and the micro-batch commits with nothing in flight
  (so Spark's checkpoint never holds an element of the queue); a row of kind "E"
  is end of input;
* rows of kind "X" stop their group's operator at once (a cancellation: what is
  queued or waiting is dropped, nothing more is emitted or called, AIO-58), as a
  stop without drain does (AIO-43);
* a failed call (after retries), a timeout with `on_timeout="fail"` or a
  `None` result fails the Spark task (AIO-20, AIO-23, AIO-28) with the row and
  the user's exception in the error, or, with `errors=<column>`, comes out as
  the row with null results and the error's text (an opt-in, not Flink's).

Value mode (no `result`, used by the conformance runners): input columns `value_col` (the value
passed to `fn`), optional `kind_col` and `ts_col` (the record's timestamp, or the watermark);
output columns `kind`, `ts` (the input record's timestamp, AIO-18) and `value`.
Times in this API are seconds; the operator counts milliseconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import math
import selectors
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Sequence
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
    WatermarkStatus,
    any_error,
    empty_result,
)
from flink_semantics.adapters.pyspark.async_io.rows import (
    IndexedOutput,
    KeptInput,
    RowSpec,
    call_row,
    describe,
    error_result,
    error_text,
    input_rows,
    lowest_waiting,
    outer_predicate,
    output_table,
    row_timeout,
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
        return RetryStrategy(kind="fixed_delay", delay=_ms(delay), **common)
    return RetryStrategy(kind="exponential_backoff", initial_delay=_ms(initial_delay),
                         max_delay=_ms(max_delay), multiplier=multiplier, **common)


def _ms(seconds: float) -> float:
    """Seconds -> the operator's milliseconds; a whole number of ms stays an int (the backoff then
    grows in whole milliseconds, as Java's (long) cast does, AIO-40)."""
    ms = seconds * 1000.0
    whole = round(ms)
    return whole if abs(ms - whole) < 1e-6 else ms


def _is_instance(error: BaseException, types: Any) -> bool:
    return isinstance(error, types)


def _const(result: list, *args: Any) -> list:
    return list(result)


def operator_config(*, capacity: int = 100, ordered: bool = True, timeout: float | None = None,
                    on_timeout: str | list | Callable[[Any], list | None] = "fail",
                    retry: RetryStrategy | None = None) -> OperatorConfig:
    """Build and validate (ValueError naming AIO-1 / AIO-3) the operator configuration."""
    timeout_ms = 0 if timeout is None else _ms(timeout)
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
    """The operator's timers on an asyncio loop's clock (ms).

    Timers with the same deadline fire in registration order (AIO-54): asyncio's own timer heap
    does not keep that order for equal times, so each deadline has one loop timer and a FIFO.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._due: dict[float, list[list[Any]]] = {}

    def now(self) -> float:
        return self.loop.time() * 1000.0

    def register(self, deadline: float, callback: Callable[[], None]) -> list[Any]:
        handle = [callback]
        bucket = self._due.get(deadline)
        if bucket is None:
            bucket = self._due[deadline] = []
            self.loop.call_at(deadline / 1000.0, self._fire, deadline)
        bucket.append(handle)
        return handle

    def _fire(self, deadline: float) -> None:
        for handle in self._due.pop(deadline, []):
            if handle[0] is not None:
                handle[0]()

    def cancel(self, handle: list[Any]) -> None:
        handle[0] = None


class _VirtualSelector(selectors.BaseSelector):
    """A selector whose waits take no wall time: a wait of t seconds moves the virtual clock by t."""

    def __init__(self) -> None:
        self._inner = selectors.SelectSelector()
        self.now = 0.0
        self.on_stuck: Callable[[], bool] | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_map(self) -> Any:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            if self.on_stuck is not None and self.on_stuck():
                return []  # the handler made something ready
            raise RuntimeError("virtual_time_loop: every task waits and no timer is set (a deadlock)")
        # Idle: jump to the next timer (at least one float step, so that time always moves).
        self.now = max(self.now + timeout, math.nextafter(self.now, math.inf))
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock starting at 0 s: when nothing is ready it jumps to the next
    timer instead of sleeping, so `asyncio.sleep(60)` takes no wall time.  Deterministic.

    When nothing is ready and no timer is set, nothing can ever happen again: the loop calls
    `on_stuck` (async_map closes the operators that can never finish, see `async_map`), and raises
    RuntimeError if there is none or it changed nothing.
    """

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)

    @property
    def on_stuck(self) -> Callable[[], bool] | None:
        return self._virtual.on_stuck

    @on_stuck.setter
    def on_stuck(self, handler: Callable[[], bool] | None) -> None:
        self._virtual.on_stuck = handler

    def time(self) -> float:
        return self._virtual.now


def virtual_time_loop() -> asyncio.AbstractEventLoop:
    """A `loop_factory` for `async_map`: each task runs on a `VirtualTimeLoop` (simulated time)."""
    return VirtualTimeLoop()


def wall_clock_loop() -> asyncio.AbstractEventLoop:
    """The default `loop_factory`: a selector loop on the wall clock.

    select() sleeps to the microsecond; epoll rounds every wait up to a whole millisecond, which adds
    ~0.5 ms to each call's time in the queue (10 ms services lose ~5% of throughput).
    """
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


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


# An output row: (group, kind, ts, value, seq, attempt, at, reason)
OutRow = tuple[Any, str, Any, Any, Any, Any, float, Any]


class RowOutput:
    """Collects a group's output rows; with `audit`, the operator's notifications too.

    Kinds: R (a result value), W (a watermark), S (a watermark status: ts 1 idle, 0 active); audit
    only: I (a call of the function, `attempt`),
    T (the timeout handler ran), F (the operator failed, `reason`), E (end of input processed).
    `seq` is the input record's number in its group (0, 1, ...), `at` the loop time in seconds.
    """

    def __init__(self, group: Any, loop: asyncio.AbstractEventLoop, audit: bool) -> None:
        self.group = group
        self.loop = loop
        self.audit = audit
        self.rows: list[OutRow] = []

    def _add(self, kind: str, ts: Any = None, value: Any = None, seq: Any = None, attempt: Any = None,
             reason: Any = None) -> None:
        self.rows.append((self.group, kind, ts, value, seq, attempt, self.loop.time(), reason))

    def emit(self, record: Record, value: Any) -> None:
        self._add("R", record.timestamp, value, record.key)

    def control(self, kind: str, value: Any) -> None:
        """A W or S row is pushed (its output row is made from its timestamp)."""

    def watermark(self, timestamp: int) -> None:
        self._add("W", timestamp)

    def status(self, idle: bool) -> None:
        self._add("S", 1 if idle else 0)  # AIO-51: a status bypasses the queue

    def invoked(self, record: Record, attempt: int) -> None:
        if self.audit:
            self._add("I", seq=record.key, attempt=attempt)

    def timed_out(self, record: Record) -> None:
        if self.audit:
            self._add("T", seq=record.key)

    def checkpoint(self, id: int, snapshot: list[Stored]) -> None:
        pass

    def failed(self, record: Record | None, reason: str, error: BaseException | None) -> None:
        if self.audit:
            self._add("F", seq=None if record is None else record.key, reason=reason)

    def finished(self) -> None:
        if self.audit:
            self._add("E")

    def take(self) -> list[OutRow]:
        out, self.rows = self.rows, []
        return out


# An input row: (kind, ts, value, at)
TIME_RESOLUTION = 1e-9  # seconds: asyncio runs a timer due within its clock's resolution (1 ns)
InRow = tuple[str, Any, Any, Any]


_CONTROL_KINDS = frozenset("XEWS")  # the kinds of input row that are not records


class _Group:
    """One operator: its input buffer and the coroutine that feeds it (`_GroupedRun.feed`)."""

    def __init__(self, key: Any, loop: asyncio.AbstractEventLoop, fn: AsyncFn, config: OperatorConfig,
                 audit: bool, output: Callable[..., Any] | None = None):
        self.key = key
        self.buffer: deque[InRow] = deque()
        self.output = (output or RowOutput)(key, loop, audit)
        self.service = CoroutineService(loop, fn)
        self.progress = asyncio.Event()
        self.op = AsyncWaitOperator(config, LoopTimers(loop), self.service, self.output,
                                    on_progress=self._on_progress)
        self.service.operator = self.op
        self.seq = 0
        self.ended = False  # end of input pushed
        self.task: asyncio.Task | None = None
        self._pumping = False

    def _on_progress(self) -> None:
        """The operator made progress: refill its input channel from the buffer at once, then wake
        the feeder.

        Only plain records without an arrival time are pushed here, and only while the channel is
        empty, the same rows in the same order as `_GroupedRun.feed` would push them (the feeder
        takes everything else, from the same front of the same buffer).  This spares a wake-up of
        the feeder for every completion while the queue is full.  A push runs the operator, which
        calls back here: the nested call returns at once and the loop below goes on.
        """
        if not self._pumping:
            self._pumping = True
            try:
                op, buffer = self.op, self.buffer
                while buffer and op.alive and not self.ended and op.pending_input == 0:
                    kind, ts, value, at = buffer[0]
                    if at is not None or kind in _CONTROL_KINDS:
                        break
                    buffer.popleft()
                    seq, self.seq = self.seq, self.seq + 1  # before the push, which calls back here
                    op.push(Record(seq, value, ts))
            finally:
                self._pumping = False
        self.progress.set()


class _GroupedRun:
    """The operators of one Spark task (one per group) on one event loop.

    Input rows are dispatched to their group's buffer; each group's feeder pushes them into its
    operator: at once while nothing waits in the operator's input channel (backpressure, AIO-7), or,
    with arrival times, when the loop's clock reaches the row's time.  A row of kind "E" is end of
    input for its group, a row of kind "X" stops it (AIO-58).  The end of the task's input is end of
    input for every group (AIO-42), or with `drain_at_end` (a streaming micro-batch) only the wait
    until every group's queue is empty.
    """

    def __init__(self, fn: AsyncFn, config_for: Callable[[Any], OperatorConfig],
                 loop: asyncio.AbstractEventLoop, audit: bool, on_failure: str, drain_at_end: bool = False,
                 output: Callable[..., Any] | None = None):
        self.fn, self.config_for, self.loop, self.output = fn, config_for, loop, output
        self.audit, self.on_failure, self.drain_at_end = audit, on_failure, drain_at_end
        self.groups: dict[Any, _Group] = {}
        self.closed = False  # no more input rows
        if isinstance(loop, VirtualTimeLoop):
            loop.on_stuck = self._stuck

    def _stuck(self) -> bool:
        """Virtual time, nothing can happen any more: an operator still waiting can never finish (for
        example end of input queued behind a record whose stalled call is never made again, AIO-37);
        it is closed without finishing (no E row)."""
        stuck = [g for g in self.groups.values() if self.closed and not self._settled(g)]
        for g in stuck:
            g.op.close()
            g.progress.set()
        return bool(stuck)

    def _settled(self, g: _Group) -> bool:
        """Nothing more to do for the group: stopped, failed, finished, or (`drain_at_end`, the input
        over) its queue and input channel empty."""
        op = g.op
        if not op.alive or op.finished:
            return True
        return self.drain_at_end and not g.ended and self.closed and not g.buffer \
            and len(op) == 0 and op.pending_input == 0

    def group(self, key: Any) -> _Group:
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = _Group(key, self.loop, self.fn, self.config_for(key), self.audit,
                                               self.output)
            g.task = self.loop.create_task(self.feed(g))
        return g

    def add(self, key: Any, row: InRow) -> None:
        g = self.group(key)
        g.buffer.append(row)
        g.progress.set()

    async def _sleep_until(self, at: float) -> None:
        fut = self.loop.create_future()
        self.loop.call_at(at, _resolve, fut)
        await fut

    async def _wait(self, g: _Group) -> None:
        g.progress.clear()
        await g.progress.wait()

    async def feed(self, g: _Group) -> None:
        op = g.op
        while op.alive:
            if not g.buffer:
                if self.closed:
                    break
                await self._wait(g)
                continue
            kind, ts, value, at = g.buffer[0]
            if at is not None and at - self.loop.time() > TIME_RESOLUTION:
                await self._sleep_until(at)  # (within the resolution asyncio's timer is due already)
                continue
            if at is None and op.pending_input > 0 and kind != "X" and not g.ended:
                await self._wait(g)  # AIO-7: the input waits while the channel is blocked
                continue
            g.buffer.popleft()
            if kind == "X":
                g.ended = True
                op.close()  # AIO-58: a stop from outside; the operator emits and calls nothing more
            elif g.ended:
                continue  # after end of input only a stop counts
            elif kind == "E":
                g.ended = True
                op.push(EndOfInput())
            elif kind == "W":
                g.output.control(kind, value)
                op.push(Watermark(ts if ts is not None else 0))
            elif kind == "S":
                g.output.control(kind, value)
                op.push(WatermarkStatus(bool(ts)))  # AIO-51
            else:
                seq, g.seq = g.seq, g.seq + 1  # before the push: its progress callback pushes too
                op.push(Record(seq, value, ts))
        if op.alive and not g.ended and not self.drain_at_end:
            g.ended = True
            op.push(EndOfInput())  # AIO-42: the end of the partition is end of input
        while not self._settled(g):
            await self._wait(g)

    def _failure(self) -> None:
        if self.on_failure != "fail":
            return
        for g in self.groups.values():
            f = g.op.failure
            if f is not None:
                what = "the input" if f.record is None else describe(f.record.value)
                raise AsyncFunctionFailed(f"AIO-23: could not complete {what} ({f.reason}): "
                                          f"{error_text(f.reason, f.error)}") from f.error

    async def _until_buffers_taken(self) -> None:
        for g in list(self.groups.values()):
            while g.buffer and g.op.alive and not g.task.done():  # type: ignore[union-attr]
                await self._wait(g)
                if self.on_failure == "fail" and any(x.op.failure for x in self.groups.values()):
                    return

    async def _until_done(self) -> None:
        for g in list(self.groups.values()):
            await g.task  # type: ignore[misc]
            if self.on_failure == "fail" and g.op.failure is not None:
                return

    def run(self, until: str) -> list[OutRow]:
        """Run the loop until every buffered row is taken ("taken") or every group is done ("done")."""
        if until == "done":
            self.closed = True
            for g in self.groups.values():
                g.progress.set()
        self.loop.run_until_complete(self._until_done() if until == "done" else self._until_buffers_taken())
        self._failure()
        return [r for g in self.groups.values() for r in g.output.take()]

    def close(self) -> None:
        for g in self.groups.values():
            g.op.close()
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def run_groups(rows: Iterator[tuple[Any, InRow]], fn: AsyncFn, config_for: Callable[[Any], OperatorConfig],
               *, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
               audit: bool = False, on_failure: str = "fail", flush_every: int = 10_000,
               read_all: bool = False, drain_at_end: bool = False) -> Iterator[list[OutRow]]:
    """Drive one operator per group over (group, (kind, ts, value, at)) rows on one event loop.

    Rows are dispatched in chunks of `flush_every` (all of them first with `read_all`, which arrival
    times need); the loop runs until each chunk is taken in, then the output so far is yielded.  At
    the end, end of input drains every group's queue (AIO-42); with `drain_at_end` (a streaming
    micro-batch) the queues are drained without end of input.
    """
    loop = (loop_factory or wall_clock_loop)()
    run = _GroupedRun(fn, config_for, loop, audit, on_failure, drain_at_end)
    yield from _drive(run, rows, flush_every, read_all)


def _drive(run: _GroupedRun, rows: Iterator[tuple[Any, InRow]], flush_every: int, read_all: bool
           ) -> Iterator[list[Any]]:
    """`run_groups` on a given run; its loop is closed at the end."""
    loop = run.loop
    try:
        n = 0
        for key, row in rows:
            run.add(key, row)
            n += 1
            if not read_all and n % flush_every == 0:
                yield run.run("taken")
        yield run.run("done")
    finally:
        run.close()
        loop.close()


def run_operator(rows: Iterator[tuple[str, int | None, Any]], fn: AsyncFn,
                 config: OperatorConfig, flush_every: int = 10_000
                 ) -> Iterator[tuple[list[str], list[int | None], list[Any]]]:
    """Drive one operator over (kind, ts, value) rows on a fresh wall-clock loop; yield output chunks
    (kinds, timestamps, values).  At the end, end of input drains the queue (AIO-42)."""
    grouped = ((None, (kind, ts, value, None)) for kind, ts, value in rows)
    for chunk in run_groups(grouped, fn, lambda _: config, flush_every=flush_every):
        yield [r[1] for r in chunk], [r[2] for r in chunk], [r[3] for r in chunk]


# --------------------------------------------------------------------------
# The Spark task and the API
# --------------------------------------------------------------------------

AUDIT_COLUMNS = "seq long, attempt long, at double, reason string"
ON_FAILURE = ("fail", "report")


def _arrow_task(batches: Iterator[Any], *, fn: AsyncFn, config_for: Callable[[Any], OperatorConfig],
                value_col: str, kind_col: str | None, ts_col: str | None, group_col: str | None,
                arrival_col: str | None, value_type: Any, group_type: Any, audit: bool, on_failure: str,
                loop_factory: Callable[[], asyncio.AbstractEventLoop] | None, streaming: bool = False
                ) -> Iterator[Any]:
    """The Spark task (mapInArrow): one event loop, one operator per group of the partition; on a
    streaming DataFrame the end of the micro-batch drains the queues without end of input."""
    import pyarrow as pa

    fields = ([(group_col, group_type)] if group_col else []) + [
        ("kind", pa.string()), ("ts", pa.int64()), ("value", value_type)]
    if audit:
        fields += [("seq", pa.int64()), ("attempt", pa.int64()), ("at", pa.float64()),
                   ("reason", pa.string())]
    schema = pa.schema(fields)
    width = 8 if audit else 4

    def rows() -> Iterator[tuple[Any, InRow]]:
        for b in batches:
            n = b.num_rows
            values = b.column(value_col).to_pylist()
            kinds = b.column(kind_col).to_pylist() if kind_col else ["R"] * n
            ts = b.column(ts_col).to_pylist() if ts_col else [None] * n
            groups = b.column(group_col).to_pylist() if group_col else [None] * n
            at = b.column(arrival_col).to_pylist() if arrival_col else [None] * n
            for row in zip(groups, kinds, ts, values, at):
                yield row[0], row[1:]

    for chunk in run_groups(rows(), fn, config_for, loop_factory=loop_factory, audit=audit,
                            on_failure=on_failure, read_all=arrival_col is not None, drain_at_end=streaming):
        if chunk:
            columns = list(zip(*chunk))[0 if group_col else 1:width]
            yield pa.RecordBatch.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, schema)],
                                             schema=schema)


ARROW_TYPES = ("long", "bigint", "int", "double", "float", "string", "boolean", "binary")


def _arrow_type(name: str) -> Any:
    import pyarrow as pa

    return {"long": pa.int64(), "bigint": pa.int64(), "int": pa.int32(), "double": pa.float64(),
            "float": pa.float32(), "string": pa.string(), "boolean": pa.bool_(), "binary": pa.binary()}[name]


def _same_config(config: OperatorConfig, group: Any) -> OperatorConfig:
    return config


FLUSH_EVERY = 10_000  # input rows taken in between two output chunks


def _row_task(batches: Iterator[Any], *, fn: AsyncFn, spec: RowSpec,
              config_for: Callable[[Any], OperatorConfig], kind_col: str | None, group_col: str | None,
              loop_factory: Callable[[], asyncio.AbstractEventLoop] | None, streaming: bool) -> Iterator[Any]:
    """The Spark task of row mode: as `_arrow_task`, the output rows taken from the kept input."""
    kept = KeptInput()
    loop = (loop_factory or wall_clock_loop)()
    call = functools.partial(call_row, fn=fn, names=spec.names, outer=spec.outer)
    run = _GroupedRun(call, config_for, loop, False, "fail", streaming, output=IndexedOutput)
    for chunk in _drive(run, input_rows(batches, spec, kind_col, group_col, kept), FLUSH_EVERY, False):
        if chunk:
            yield from output_table(chunk, kept, spec).to_batches()
        kept.release(lowest_waiting(run.groups.values(), kept.next))


def _row_config(config: OperatorConfig, *, spec: RowSpec) -> OperatorConfig:
    """A configuration in row mode: the timeout handler gets the row's arguments and gives column
    tuples; with the error output a failed record completes with its error (OperatorConfig.error_result);
    with `outer` a retry's result predicate sees OUTER_EMPTY as the empty result."""
    handler = functools.partial(row_timeout, handler=config.timeout_result, names=spec.names,
                                outer=spec.outer)
    retry = config.retry
    if spec.outer and retry is not None and retry.result_predicate is not None:
        retry = dataclasses.replace(retry, result_predicate=functools.partial(
            outer_predicate, predicate=retry.result_predicate))
    return dataclasses.replace(config, timeout_result=handler, retry=retry,
                               error_result=error_result if spec.error_col is not None else None)


def _row_config_for(group: Any, *, config_for: Callable[[Any], OperatorConfig],
                    spec: RowSpec) -> OperatorConfig:
    return _row_config(config_for(group), spec=spec)


def _result_fields(session: Any, result: Any) -> list[Any]:
    """The result columns: a DDL string ("body string, status int"), a StructType, or one DataType
    (a column named `result`).  ValueError for anything else."""
    from pyspark.sql.types import DataType, StructField, StructType

    dt = result
    if isinstance(result, str):
        try:
            dt = session._parse_ddl(result)  # the DataFrame's own session: classic or Spark Connect
        except Exception as e:
            raise ValueError(f"async_map: result: {result!r} is not a DDL schema or type: {e}") from e
    if isinstance(dt, StructType):
        if not dt.fields:
            raise ValueError("async_map: result: at least one result column is needed")
        return [StructField(f.name, f.dataType, True) for f in dt.fields]
    if isinstance(dt, DataType):
        return [StructField("result", dt, True)]
    raise ValueError(f"async_map: result must be a DDL string, a StructType or a DataType, not {result!r}")


def _row_mode(df: Any, fn: AsyncFn, config: OperatorConfig, *, columns: Any, result: Any,
              errors: str | None, outer: bool, kind_col: str | None, group_col: str | None,
              group_config: Callable[[Any], OperatorConfig] | None,
              loop_factory: Callable[[], asyncio.AbstractEventLoop] | None) -> Any:
    """async_map with `result`: the checks (ValueError naming the parameter) and the mapInArrow call."""
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StringType, StructField, StructType

    present = list(df.columns)
    args = (columns,) if isinstance(columns, str) else None if columns is None else tuple(columns)
    for name, cols in (("columns", args or ()), ("kind_col", (kind_col,) if kind_col else ()),
                       ("group_col", (group_col,) if group_col else ())):
        for col in cols:
            if col not in present:
                raise ValueError(f"async_map: {name}: no column {col!r} in {present}")
    _check_arguments(fn, args)
    fields = _result_fields(df.sparkSession, result)
    if errors is not None:
        if not isinstance(errors, str) or not errors:
            raise ValueError(f"async_map: errors must be the name of the error column, not {errors!r}")
        fields_all = fields + [StructField(errors, StringType(), True)]
    else:
        fields_all = fields
    names = [f.name for f in fields_all]
    taken = [n for n in names if n in present or names.count(n) > 1]
    if taken:
        raise ValueError(f"async_map: result/errors: the column names {sorted(set(taken))} are taken "
                         f"(input columns {present}); name the result columns otherwise")
    if group_col is not None:
        _check_group_type(df, group_col)
    try:
        types = tuple(to_arrow_type(f.dataType, timezone="UTC") for f in fields)
    except Exception as e:
        raise ValueError(f"async_map: result: a type Arrow cannot carry: {e}") from e
    spec = RowSpec(columns=args, names=tuple(f.name for f in fields), types=types, error_col=errors,
                   outer=bool(outer))
    config_for = group_config or functools.partial(_same_config, config)
    row_cfg = functools.partial(_row_config_for, config_for=config_for, spec=spec)
    task = functools.partial(_row_task, fn=fn, spec=spec, config_for=row_cfg, kind_col=kind_col,
                             group_col=group_col, loop_factory=loop_factory,
                             streaming=bool(getattr(df, "isStreaming", False)))
    return df.mapInArrow(task, StructType(list(df.schema.fields) + fields_all))


def _check_arguments(fn: AsyncFn, args: tuple[str, ...] | None) -> None:
    """ValueError when `fn` cannot be called with the argument columns (or the row, one dict)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no signature to check (a builtin): the call will tell
    names = ["row"] if args is None else list(args)
    try:
        signature.bind(*names)
    except TypeError as e:
        what = "the whole row (one dict, columns=None)" if args is None else f"the columns {names}"
        raise ValueError(f"async_map: fn{signature} cannot take {what} as its arguments: {e}") from None


def _check_group_type(df: Any, group_col: str) -> str:
    type_name = df.schema[group_col].dataType.simpleString()
    if type_name not in ARROW_TYPES:
        raise ValueError(f"async_map: group_col {group_col!r} must be one of {sorted(ARROW_TYPES)}, "
                         f"not {type_name}")
    return type_name


def async_map(df: Any, fn: AsyncFn, *, columns: str | Sequence[str] | None = None, result: Any = None,
              errors: str | None = None, outer: bool = False, capacity: int = 100, ordered: bool = True,
              timeout: float | None = None, on_timeout: str | list | Callable[..., list | None] = "fail",
              retry: RetryStrategy | None = None, kind_col: str | None = None, group_col: str | None = None,
              group_config: Callable[[Any], OperatorConfig] | None = None,
              loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
              value_col: str = "value", ts_col: str | None = None, result_type: str = "long",
              arrival_col: str | None = None, audit: bool = False, on_failure: str = "fail") -> Any:
    """Apply the async function `fn` to every row of `df` through an async wait operator.

        out = async_map(df, fetch, columns=["id", "url"], result="body string, status int",
                        capacity=100, timeout=5.0)

    `fn` is an `async def` taking the `columns` as arguments (`fetch(id, url)`; with
    `columns=None`, the whole row as one dict, struct values as dicts) and returning a list of
    results, one output row each (an empty list: the row does not appear).  `result` declares the
    result columns: a DDL string ("body string, status int"), a StructType, or one DataType (a
    column named `result`).  With one result column a result is its value (a dict or tuple for a
    struct column); with several, a tuple of their values or a dict by name (a missing name is
    null).  The output is every input column, unchanged, then the result columns.  With
    `outer=True` a row with no results comes out once with null results (as `explode_outer`).

    Works on a batch or a streaming DataFrame (`mapInArrow`, a narrow transformation): each Spark
    task runs one asyncio event loop over the Arrow batches of its partition and drives
    `AsyncWaitOperator` (operator.py) with real coroutines:

    * at most `capacity` rows are in flight per partition (AIO-6, AIO-9); a full queue blocks the
      input (AIO-7);
    * `ordered=True` emits in input order (AIO-12); `ordered=False` in completion order (AIO-13);
    * on a batch DataFrame the end of a partition is end of input: the queue is drained before the
      task ends (AIO-42), and, as in Flink, end of input ends retrying (AIO-39): the calls still in
      flight at the end of a partition get no retry;
    * on a streaming DataFrame every micro-batch's partition is one task, which ends when its queue
      is empty (calls complete, retries and timeouts run their course): the micro-batch commits
      with nothing in flight, so Spark's checkpoint never holds an element of the queue (Flink's
      snapshot of in-flight elements, AIO-44, has no counterpart: nothing is in flight to keep).

    `timeout` (seconds, None = no timeout) runs from admission over all retries (AIO-26);
    `on_timeout` is "fail", "ignore" (wait for the call), a list (the results) or a function of
    the same arguments as `fn` returning a list (None: wait for the call).  `retry` comes from
    `retry_strategy(...)` and needs a timeout (AIO-3).  A bad option is a ValueError before any
    Spark job runs (AIO-1, AIO-3, and unknown columns, a bad `result`, a taken column name, an `fn`
    whose signature cannot take the `columns`).

    Failures.  A call that fails after its retries, a timeout with `on_timeout="fail"` or a None
    result fails the Spark task (AIO-20, AIO-23, AIO-28) with `AsyncFunctionFailed`, raised from
    the function's own exception; its message names the rule, the row (its `columns` and values)
    and the exception, e.g. "AIO-23: could not complete the row id=42 (error): ValueError: no
    such user 42": the text Spark shows in the job's failure or the StreamingQueryException.
    With `errors="error"` such a row instead appears once, in its place, with null results and
    the error's "TypeName: message" in a nullable string column of that name (null for the rows
    with results), and the task goes on.  This error output is not Flink's: Flink's async I/O
    has no error output and fails the job (AIO-23); it is an opt-in, like a side output.  A
    result that does not fit its column fails the task with ResultTypeError naming the row and
    column.

    Further options:

    * `kind_col`: rows whose kind is "W" are in-band watermarks and "S" watermark statuses: they
      take a queue slot (W, AIO-6) or bypass it (S, AIO-51) and come out as their own input row,
      with null results, in their place (an unordered queue never lets a row pass a W row,
      AIO-13); "E" is end of input, "X" stops the operator at once (AIO-58, AIO-43); every other
      kind is a record.  Without `kind_col` every row is a record.
    * `group_col`: one operator per value of that column (its own queue and capacity; the rows
      of a group in input order) instead of one per partition; `group_config(group)` may give a
      group its own configuration (`operator_config(...)`).
    * `loop_factory`: makes each task's event loop (default `wall_clock_loop`); with
      `virtual_time_loop` time is simulated and a run is deterministic when `fn` is.  On virtual
      time an operator that can never finish after the end of the input (nothing left to happen)
      is closed, where a wall-clock task would wait forever.

    Value mode (without `result`; the conformance runners use it): `fn` gets the `value_col`
    column and returns values of `result_type` (one of ARROW_TYPES); the output columns are
    `kind`, `ts` (the input's `ts_col`, AIO-18) and `value` (with `group_col`, that column first);
    `kind_col`/`ts_col` default to the columns `kind`/`ts` when present.  Only there:
    `arrival_col` (double, seconds on the loop's clock: a row enters its operator when the loop's
    clock reaches it; the partition is read first), `audit=True` (the columns `seq`, `attempt`,
    `at`, `reason` and rows for the operator's notifications: I a call, AIO-33; T a timeout,
    AIO-27; F a failure, AIO-23; E finished, AIO-42) and `on_failure="report"` (needs `audit`: a
    failed group's operator stops at once, AIO-58, an F row reports it, the task goes on).
    """
    if not inspect.iscoroutinefunction(fn):
        raise TypeError("async_map: fn must be an `async def` function returning a list")
    config = operator_config(capacity=capacity, ordered=ordered, timeout=timeout, on_timeout=on_timeout,
                             retry=retry)
    if on_failure not in ON_FAILURE:
        raise ValueError(f"async_map: on_failure must be one of {ON_FAILURE}, not {on_failure!r}")
    if result is not None:
        value_only = [name for name, given in (
            ("ts_col", ts_col is not None), ("arrival_col", arrival_col is not None), ("audit", audit),
            ("on_failure", on_failure != "fail"), ("result_type", result_type != "long"),
            ("value_col", value_col != "value")) if given]
        if value_only:
            raise ValueError(f"async_map: {', '.join(value_only)}: only in value mode (without result=); "
                             "with result= the whole row is kept")
        return _row_mode(df, fn, config, columns=columns, result=result, errors=errors, outer=outer,
                         kind_col=kind_col,
                         group_col=group_col, group_config=group_config, loop_factory=loop_factory)
    if columns is not None or errors is not None or outer:
        raise ValueError("async_map: columns, errors and outer need result= (the result columns' schema)")
    if result_type not in ARROW_TYPES:
        raise ValueError(f"async_map: result_type must be one of {sorted(ARROW_TYPES)}, not {result_type!r}")
    if on_failure == "report" and not audit:
        raise ValueError("async_map: on_failure='report' needs audit=True (the F rows report failures)")
    present = set(df.columns)
    for name, col in (("value_col", value_col), ("group_col", group_col), ("arrival_col", arrival_col)):
        if col is not None and col not in present:
            raise ValueError(f"async_map: {name}: no column {col!r} in {sorted(present)}")
    kind_col = kind_col if kind_col is not None else "kind"
    ts_col = ts_col if ts_col is not None else "ts"
    group_type = None
    prefix = ""
    if group_col is not None:
        type_name = _check_group_type(df, group_col)
        group_type = _arrow_type(type_name)
        prefix = f"{group_col} {type_name}, "
    task = functools.partial(
        _arrow_task, fn=fn, config_for=group_config or functools.partial(_same_config, config),
        value_col=value_col, kind_col=kind_col if kind_col in present else None,
        ts_col=ts_col if ts_col in present else None, group_col=group_col, arrival_col=arrival_col,
        value_type=_arrow_type(result_type), group_type=group_type, audit=audit, on_failure=on_failure,
        loop_factory=loop_factory, streaming=bool(getattr(df, "isStreaming", False)))
    schema = f"{prefix}kind string, ts long, value {result_type}" + (f", {AUDIT_COLUMNS}" if audit else "")
    return df.mapInArrow(task, schema)
