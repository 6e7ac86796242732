"""Async I/O on Flink itself: PyFlink's `AsyncDataStream.ordered_wait` / `unordered_wait`.

**What runs.**  PyFlink 2.3.0 does not use Flink's Java `AsyncWaitOperator`.  `AsyncDataStream`
wraps the Python function in an `AsyncFunctionDescriptor` and hands it to a plain
`ExternalPythonProcessOperator` (the Java operator of every Python `process`); the Python worker
recognises the descriptor (`beam_operations.StatelessFunctionOperation.generate_operation`) and
runs PyFlink's own re-implementation of the operator (pyflink/fn_execution/datastream/process/
async_function/operation.py and queue.py): an `OrderedStreamElementQueue` or
`UnorderedStreamElementQueue` of the given capacity, the function's coroutines on an asyncio loop in
a thread of their own, an emitter thread writing completed entries to the worker's output, timeouts
and retry backoffs on `threading.Timer`s, and `AsyncOperation.finish()` waiting until the queue is
empty, at end of input and at the end of every Beam bundle.  Watermarks never enter that queue as
elements (they take no slot): the worker learns the current watermark with the next record (in
unordered mode it then starts a new segment), and the Java operator emits watermarks itself
(`AbstractPythonFunctionOperator.processWatermark`).  Only the process execution mode runs it
(`AsyncDataStream._validate`: "AsyncFunction is still not supported for 'thread' mode"), so these
jobs start a Python process per Python operator.  The verdicts of this area are about that Python
queue inside Flink's Python operator, not about `AsyncWaitOperator`.

**How a batch runs.**  Calls cannot be completed from outside the function, so the adapter's
completion order for this area is FREE (the checker compares outputs as a partial order,
conformance/checker.py).  The schedules of a batch with the same (mode, capacity) share one
pipeline of one job: a bounded source of their records `((schedule, record), timestamp)` in
schedule order, Flink's Java `CustomTimestampAssigner` (the one PyFlink's own
`assign_timestamps_and_watermarks` uses) with `WatermarkStrategy.noWatermarks()`, and the async
operator at parallelism 1; the pipelines' outputs are unioned into one Python `ProcessFunction` (a
separate operator: Python operator chaining is off) that reads each output's timestamp as Flink
delivers it downstream, and collected with `execute_and_collect`.  The function is scripted: it
counts its own calls of each record (the attempt), waits until the call of the record completed
just before in its schedule's completion order has returned (an asyncio event per schedule and
rank: unordered mode then emits in the schedule's order), and returns a marker `(schedule, record,
INVOKE, attempt)` followed by the schedule's result values.  Each marker becomes the `invoke`
event and each value an `emit` event, in the order the job emitted them; `finished` comes last when
the schedule has `end` and the job finished normally (Flink finishes the operator only after
`AsyncOperation.finish` has waited for its queue to drain).  Events carry the step that caused them
(the record's step for `invoke`, its `complete` step for `emit`, the later of `end` and the last
completion for `finished`), which FREE ignores.  Sharing a pipeline changes nothing the FREE
comparison looks at: a schedule's outputs keep their order relative to each other (its records
precede the next schedule's in the input, so its completion chain never waits for a slot another
schedule holds), and its calls are compared as a multiset.

The job's Beam bundles are longer than its input (BUNDLE).  With PyFlink's defaults (1000 elements
or 1 s) a bundle may end between a record and a later one its call waits for; the worker then
waits for the call before taking the later record, forever (seen with bundles of 2 elements, and
once with the default 1 s on the first, slow job of a process).  A call waits at most CHAIN_SECONDS
for the one before it, in case a bundle ends anyway.

**Timestamps.**  PyFlink's Java side hands the worker `StreamRecord.getTimestamp()`, which is
Long.MIN_VALUE for a record without timestamp, and erases the timestamp of an output whose input had
Long.MIN_VALUE (`RunnerOutputCollector.collect`).  So a record without timestamp is stamped
Long.MIN_VALUE, which is exactly what the operator receives for one without (its outputs come out
without timestamp), and the observer reads Long.MIN_VALUE for "none".  PyFlink has no other
deterministic source of such a mix: an assigner stamps every record, and a union of a stamped and an
unstamped stream interleaves them as the network delivers.

**What cannot be driven or observed**, and why (CAPABILITIES):

* watermarks.  Driving: a watermark that advances can be placed exactly, from a Table
  (`from_data_stream` with `WATERMARK FOR rt AS <a column set on carrier rows only>` and
  `pipeline.auto-watermark-interval` 0: Flink's `WatermarkAssignerOperator` emits it right after
  its carrier row, which a filter drops), but one that does not advance cannot
  (`WatermarkAssignerOperator` emits only advancing watermarks, and every network input drops the
  others), and the strategies draw such steps.  Observing: any Python operator downstream holds a
  watermark that arrives while its Beam bundle has elements and replaces it with the next one
  (`AbstractPythonFunctionOperator.processWatermark`: `bundleFinishedCallback`), so a Python
  observer does not see the watermarks it is given.  With a Java operator compiled for the
  experiment as observer, the async operator's input is exactly the schedule's and its output shows
  PyFlink's own deviations (below);
* statuses: PyFlink cannot emit a watermark status at a chosen element (no source of its own;
  idleness comes from a wall-clock timeout), and a Python observer does not see them;
* timeouts and retries: PyFlink's timers are `threading.Timer`s on the wall clock, racing the
  scripted completions, and FREE checking is defined without timers;
* checkpoints, crashes and restores: a savepoint and a second job per schedule, with barriers at
  chosen steps; FREE checking is defined without them;
* errors and null results fail the task (FREE checking is defined without them); completions of
  a call that has returned (AIO-21) cannot be scripted: the function returns once.

**Deviations found by experiment that the suite does not run** (parallelism 1, default bundles):

* watermarks: the Java operator holds a watermark while its bundle has elements and emits it when
  the bundle ends (here at end of input), and a later watermark replaces a held one.  So with
  `0 record 7 @1`, `1 watermark 5`, `2 record 8 @6`, `3 end`, `4 complete r0 [70]`,
  `5 complete r1 [80]`, both modes emit r0 70, r1 80, then watermark 5 (AIO-12, AIO-15: r1
  overtakes the watermark admitted before it); with `0 record 7 @1`, `1 watermark 5`,
  `2 watermark 6`, `3 end`, `4 complete r0 [70]`: r0 70, watermark 6 (AIO-17: 5 is never emitted).
  With `python.fn-execution.bundle.size` 1 the order is the spec's, and one call runs at a time;
* bundle ends stall the input: at the end of every bundle the worker takes no record until every
  call in flight has completed, however many slots are free (above), where the spec admits a
  record as soon as a slot is free (AIO-7, AIO-9).  A FREE comparison cannot see it.

**Refused configurations.**  A retry strategy without a timeout (AIO-3) is refused by PyFlink's
own check (`AsyncDataStream._validate`, or the strategy's constructor, which also refuses
`max_attempts` 0 and zero delays), without a job: the `rejected` event carries its message.  A
capacity <= 0 (AIO-1) is not refused: PyFlink checks nothing, and the worker's queue waits forever
for a free slot at the first record (`StreamElementQueue.put` loops while size >= capacity; the
call is made only after `put`).  Such schedules run in a second job, submitted before the main one:
one pipeline per (mode, capacity), whose worker blocks at its first record, so the schedules sharing
it show together what each shows alone; what the job emits within HANG_SECONDS of its submission is
their trace (nothing: no call, no `finished`), then it is cancelled (the cancelled Python workers
log gRPC "Multiplexer hanging up" errors).

**Costs**, measured on the 2-core machine with nothing else running (`run_batch` of 64 drawn
schedules of up to 20 steps, ordered and unordered, capacities 1 to 5: 5 to 10 pipelines): a job
takes 6 to 9 s (7 to 9.5 schedules/s; 44 to 54 schedules take about as long), the first job of a
process 18 to 21 s (the JVM and the Python environment start).  A batch with capacities <= 0 takes
at least HANG_SECONDS (its second job runs alongside the main one): 39 configuration schedules, 20
of them with capacity <= 0, in 22 s.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flink_semantics.spec.adapter import FREE, unsupported
from flink_semantics.spec.areas.async_io import (
    AsyncIoConfig,
    CompleteStep,
    EndStep,
    RecordStep,
    RetryConfig,
    event,
    required_capabilities,
)
from flink_semantics.spec.schedule import Event, Schedule, Trace, rejected

COMPLETION_ORDER = FREE  # the calls complete in the Python worker's order, compared as a partial order

CAPABILITIES: dict[str, str | None] = {
    "async_io": None,
    "async_io.ordered": None,
    "async_io.unordered": None,
    "async_io.watermarks":
        "a watermark that does not advance cannot be driven (Flink's WatermarkAssignerOperator and every "
        "network input drop it), and output watermarks cannot be observed from PyFlink: a Python observer "
        "holds a watermark while its bundle has elements and replaces it with the next "
        "(AbstractPythonFunctionOperator.processWatermark), as the async operator itself does",
    "async_io.status": "PyFlink cannot emit a watermark status at a chosen element (no source of its own, "
                       "idleness only by a wall-clock timeout), and a Python observer does not see statuses",
    "async_io.timeout": "PyFlink's timeouts are threading.Timers on the wall clock, racing the scripted "
                        "completions; FREE checking is defined without timers",
    "async_io.retry": "PyFlink's retry backoffs are threading.Timers on the wall clock (and retries need "
                      "timeouts); FREE checking is defined without timers",
    "async_io.checkpoint": "not built: checkpoint, crash and restore need a savepoint and a second job per "
                           "schedule, with barriers at chosen steps; FREE checking is defined without them",
    "async_io.config_validation": None,
}

EXPECTED_FAILURES: dict[str, str] = {
    "AIO-1": "PyFlink 2.3.0 accepts a capacity of 0 or less: AsyncDataStream checks nothing (Flink's "
             "AsyncWaitOperator, which does, is not used) and the Python worker's queue waits forever for "
             "a free slot at the first record (StreamElementQueue.put loops while size >= capacity): the "
             "job hangs, with no call made, instead of being refused",
}

# Beam bundles longer than any job's input (elements, ms): PyFlink's worker drains its queue at the end of
# every bundle (AsyncOperation.finish), so a call that completes only after a later record arrives
# would wait for that record across a bundle boundary, forever.
BUNDLE = {"python.fn-execution.bundle.size": str(2**31 - 1), "python.fn-execution.bundle.time": str(10**9)}
CHAIN_SECONDS = 5.0  # how long a call waits for the one completed before it in its schedule, at most
HANG_SECONDS = 15.0  # how long a job with capacity <= 0 is watched, from its submission
JOB_SECONDS = 600.0  # a main job that takes longer is an AdapterError
INVOKE, EMIT = 0, 1  # the kinds of the function's outputs: a call's marker, a result value
NO_TIMESTAMP = -(2**63)  # Long.MIN_VALUE: what PyFlink's Java side passes for "no timestamp"

Plan = dict[tuple[int, int], tuple[tuple[int, ...], int]]  # (schedule, record) -> (result, rank)
Observed = tuple[int, int, int, int, "int | None"]  # (schedule, record, kind, value, timestamp) as observed


def unsupported_reason(schedule: Schedule) -> str | None:
    """What the schedule needs that the adapter cannot run (its capabilities, or a description), or None.
    Beyond the capabilities, FREE checking needs every record completed exactly once (except with
    capacity <= 0: no call is ever made), and no error or null result (each fails the task)."""
    lacking = sorted(cap for cap in required_capabilities(schedule) if unsupported(CAPABILITIES, cap))
    if lacking:
        return ", ".join(lacking)
    c = schedule.config
    completed: Counter[int] = Counter()
    records = 0
    for s in schedule.steps:
        if isinstance(s, RecordStep):
            records += 1
        elif isinstance(s, CompleteStep):
            if s.result is None:
                return "null results (AIO-20: a task failure)"
            completed[s.record] += 1
        elif s.op == "error":
            return "errors (AIO-23: a task failure)"
    if c.capacity > 0 and any(completed[r] != 1 for r in range(records)):
        return "every record completed exactly once (a call never completed, or a repeated completion)"
    return None


# --------------------------------------------------------------------------
# PyFlink's own checks (no job)
# --------------------------------------------------------------------------


def _strategy(retry: RetryConfig) -> Any:
    """PyFlink's retry strategy for the configuration's (its constructor may refuse it)."""
    from pyflink.datastream import async_retry_strategies as strategies

    on_empty = (lambda result: not result) if retry.if_empty else None
    on_error = (lambda error: True) if retry.if_error else None
    if retry.strategy == "fixed_delay":
        return strategies.FixedDelayRetryStrategy(retry.max_attempts, retry.delay, on_empty, on_error)
    return strategies.ExponentialBackoffDelayRetryStrategy(
        retry.max_attempts, retry.initial_delay, retry.max_delay, retry.multiplier, on_empty, on_error)


def refusal(config: AsyncIoConfig, probe: Any) -> str | None:
    """PyFlink's reason to refuse a configuration with a retry strategy, or None: the strategy's
    constructor and `AsyncDataStream.*_wait_with_retry` on `probe`, a stream of a throwaway
    environment (no job).  PyFlink checks nothing else: not the capacity (AIO-1)."""
    from pyflink.common import Time
    from pyflink.datastream import AsyncDataStream

    if config.retry is None:
        return None
    wait = (AsyncDataStream.ordered_wait_with_retry if config.mode == "ordered"
            else AsyncDataStream.unordered_wait_with_retry)
    try:
        wait(probe, _scripted({}), Time.milliseconds(config.timeout), _strategy(config.retry),
             config.capacity)
    except Exception as e:  # PyFlink raises plain Exceptions, its strategies AssertionErrors
        return str(e) or type(e).__name__
    return None


# --------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------


def _scripted(plan: Plan) -> Any:
    """The async function: each call completes with its schedule's result, in its schedule's
    completion order, and reports itself with a marker before the result's values."""
    from pyflink.datastream import AsyncFunction

    class Scripted(AsyncFunction):
        def __init__(self, plan: Plan):
            self.plan = plan

        def open(self, runtime_context: Any) -> None:
            self.calls: Counter[tuple[int, int]] = Counter()
            self.returned: dict[tuple[int, int], Any] = {}  # (schedule, rank) -> asyncio.Event

        def _returned(self, sid: int, rank: int) -> Any:
            import asyncio

            return self.returned.setdefault((sid, rank), asyncio.Event())

        async def async_invoke(self, value: Any) -> list[Any]:
            import asyncio

            from pyflink.common import Row

            sid, rec = int(value[0][0]), int(value[0][1])
            self.calls[(sid, rec)] += 1
            attempt = self.calls[(sid, rec)]
            if (sid, rec) not in self.plan:  # the schedule never completes this call
                await self._returned(sid, -1).wait()
            result, rank = self.plan[(sid, rec)]
            if rank > 0:
                try:  # in case a bundle ends before the record it waits for arrives (BUNDLE)
                    await asyncio.wait_for(self._returned(sid, rank - 1).wait(), CHAIN_SECONDS)
                except TimeoutError:
                    pass
            # The wrapper applies the result as this coroutine returns, on the loop's thread, before
            # the next call of the chain resumes.
            self._returned(sid, rank).set()
            return [Row(sid, rec, INVOKE, attempt)] + [Row(sid, rec, EMIT, v) for v in result]

        def timeout(self, value: Any) -> list[Any]:  # no schedule of this adapter has a timeout
            return []

    return Scripted(plan)


def _observer() -> Any:
    from pyflink.common import Row
    from pyflink.datastream import ProcessFunction

    class Observe(ProcessFunction):
        """Each output of the async operators with the timestamp Flink delivers it with."""

        def process_element(self, value: Any, ctx: Any) -> Any:
            yield Row(value[0], value[1], value[2], value[3], ctx.timestamp())

    return Observe()


@dataclass
class _Pipeline:
    mode: str
    capacity: int
    schedules: list[tuple[int, Schedule]] = field(default_factory=list)

    def plan(self) -> Plan:
        """(schedule, record) -> (its result, the rank of its completion in its schedule)."""
        out: Plan = {}
        for sid, s in self.schedules:
            for rank, step in enumerate(x for x in s.steps if isinstance(x, CompleteStep)):
                out[(sid, step.record)] = (tuple(step.result or ()), rank)
        return out

    def records(self) -> list[tuple[tuple[int, int], int]]:
        """The source: ((schedule, record), timestamp), schedule after schedule."""
        return [((sid, r), NO_TIMESTAMP if step.timestamp is None else step.timestamp)
                for sid, s in self.schedules
                for r, step in enumerate(x for x in s.steps if isinstance(x, RecordStep))]


def _stream(env: Any, pipelines: list[_Pipeline]) -> Any:
    """The job's pipelines, their outputs unioned into the observer: the stream to collect."""
    from flink_semantics.adapters.pyflink.session import jvm
    from pyflink.common import Time, Types
    from pyflink.datastream import AsyncDataStream, DataStream

    in_type = Types.TUPLE([Types.TUPLE([Types.INT(), Types.INT()]), Types.LONG()])
    out_type = Types.ROW([Types.INT(), Types.INT(), Types.INT(), Types.LONG()])
    flink = jvm().org.apache.flink
    outs = []
    for p in pipelines:
        source = env.from_collection(p.records(), type_info=in_type)
        stamps = flink.api.common.eventtime.WatermarkStrategy.noWatermarks().withTimestampAssigner(
            flink.streaming.api.functions.python.eventtime.CustomTimestampAssigner())
        stamped = DataStream(source._j_data_stream.assignTimestampsAndWatermarks(stamps))
        wait = AsyncDataStream.ordered_wait if p.mode == "ordered" else AsyncDataStream.unordered_wait
        outs.append(wait(stamped, _scripted(p.plan()), Time.milliseconds(0), p.capacity, out_type))
    union = outs[0].union(*outs[1:]) if len(outs) > 1 else outs[0]
    return union.process(_observer(), Types.ROW([Types.INT(), Types.INT(), Types.INT(), Types.LONG(),
                                                  Types.LONG()]))


class _Job:
    """A submitted job, its outputs collected by a thread of its own."""

    def __init__(self, pipelines: list[_Pipeline], name: str):
        from flink_semantics.adapters.pyflink.session import stream_environment

        env = stream_environment(**{"python.execution-mode": "process",
                                    "python.operator-chaining.enabled": "false", **BUNDLE})
        env.set_parallelism(1)
        self.name, self.pipelines = name, pipelines
        self.rows: list[Observed] = []
        self.finished = False  # the collect iterator ended: the job finished normally
        self.error: BaseException | None = None
        self.submitted = time.monotonic()
        self.results = _stream(env, pipelines).execute_and_collect(name)
        self.thread = threading.Thread(target=self._read, name=name, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for sid, rec, kind, value, ts in self.results:
                self.rows.append((int(sid), int(rec), int(kind), int(value),
                                  None if ts is None or ts == NO_TIMESTAMP else int(ts)))
            self.finished = True
        except BaseException as e:  # noqa: BLE001 - the caller reports it
            self.error = e

    def wait(self, seconds: float) -> bool:
        """Whether the job ended within `seconds`."""
        self.thread.join(max(0.0, seconds))
        return not self.thread.is_alive()

    def cancel(self) -> None:
        try:
            self.results.close()  # cancels the job
        except Exception:  # noqa: BLE001 - it is being cancelled either way
            pass
        self.thread.join(60)


# --------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------


def _trace(schedule: Schedule, rows: list[Observed], finished: bool) -> Trace:
    """One schedule's observed outputs as its trace, in the order the job emitted them."""
    record_step = [i for i, s in enumerate(schedule.steps) if isinstance(s, RecordStep)]
    complete_step = {s.record: i for i, s in enumerate(schedule.steps) if isinstance(s, CompleteStep)}
    events: list[Event] = []
    for _, rec, kind, value, ts in rows:
        if kind == INVOKE:
            events.append(event(record_step[rec], "invoke", record=rec, attempt=value))
        else:
            events.append(event(complete_step[rec], "emit", record=rec, value=value, timestamp=ts))
    ends = [i for i, s in enumerate(schedule.steps) if isinstance(s, EndStep)]
    if ends and finished:
        events.append(event(max([ends[0], *complete_step.values()]), "finished"))
    return Trace(tuple(events))


def run_batch(schedules: Sequence[Schedule]) -> list[Trace]:
    from flink_semantics.adapters.pyflink.session import stream_environment
    from flink_semantics.spec.adapter import AdapterError

    probe = None
    refused: dict[int, str] = {}
    main: dict[tuple[str, int], _Pipeline] = {}
    hanging: dict[tuple[str, int], _Pipeline] = {}
    for sid, s in enumerate(schedules):
        c = s.config
        if c.retry is not None:
            if probe is None:
                from pyflink.common import Types

                env = stream_environment(**{"python.execution-mode": "process"})
                probe = env.from_collection([0], type_info=Types.INT())
            reason = refusal(c, probe)
            if reason is not None:
                refused[sid] = reason
                continue
        why = unsupported_reason(s)
        if why is not None:
            raise ValueError(f"pyflink adapter: schedule {sid} needs {why}, which the adapter does not "
                             f"support: {s.to_json()}")
        group = main if c.capacity > 0 else hanging
        group.setdefault((c.mode, c.capacity), _Pipeline(c.mode, c.capacity)).schedules.append((sid, s))
    jobs: list[_Job] = []
    try:
        if hanging:  # first: it is watched for HANG_SECONDS from its submission, while the main job runs
            jobs.append(_Job(sorted(hanging.values(), key=lambda p: (p.mode, p.capacity)),
                             "conformance async_io, capacity <= 0"))
        if main:
            job = _Job(sorted(main.values(), key=lambda p: (p.mode, p.capacity)), "conformance async_io")
            jobs.append(job)
            if not job.wait(JOB_SECONDS):
                raise AdapterError(f"pyflink adapter: job '{job.name}' did not finish in {JOB_SECONDS:.0f} s")
        for job in jobs:  # a job that failed by itself (not cancelled below) is the adapter's failure
            if job.wait(job.submitted + HANG_SECONDS - time.monotonic()) and job.error is not None:
                raise AdapterError(f"pyflink adapter: job '{job.name}' failed: {job.error}") from job.error
    finally:
        for job in jobs:
            if job.thread.is_alive():
                job.cancel()
    rows: dict[int, list[Observed]] = {}
    finished: dict[int, bool] = {}
    for job in jobs:
        for p in job.pipelines:
            for sid, _ in p.schedules:
                rows[sid], finished[sid] = [], job.finished
        for row in job.rows:
            rows[row[0]].append(row)
    return [Trace((rejected(refused[sid]),)) if sid in refused else _trace(s, rows[sid], finished[sid])
            for sid, s in enumerate(schedules)]
