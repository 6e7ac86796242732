"""Conformance mode of the async wait operator: a schedule of the async I/O area run on it.

A schedule (spec/schedules.md) runs against the same `AsyncWaitOperator` that `async_map` uses;
only the environment differs: the virtual timers and the durable store of
adapters/pyspark/runtime.py, and `ScriptedService`, whose calls complete only when a `complete` or
`error` step says so (execution model 6).  A crash step, and a task failure (a `fail` event), end
the incarnation; the runtime then fails the Spark task, and the next attempt resumes here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flink_semantics.adapters.pyspark.async_io.operator import (
    AsyncWaitOperator,
    Barrier,
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
from flink_semantics.adapters.pyspark.runtime import ScheduleRun, ScheduleStore
from flink_semantics.adapters.pyspark.timers import VirtualTimers
from flink_semantics.spec.areas.async_io import (
    AdvanceStep,
    AsyncIoConfig,
    CheckpointStep,
    CompleteStep,
    CrashStep,
    EndStep,
    ErrorStep,
    RecordStep,
    RestoreStep,
    StatusStep,
    WatermarkStep,
    event,
)
from flink_semantics.spec.schedule import Schedule, Step

# Opt-in (spec/adapter.py): every async I/O capability this implementation supports, by name.
CAPABILITIES: dict[str, str | None] = {
    "async_io.ordered": None,
    "async_io.unordered": None,
    "async_io.watermarks": None,
    "async_io.timeout": None,
    "async_io.retry": None,
    "async_io.checkpoint": None,
    "async_io.status": None,
    "async_io.config_validation": None,
}


# --------------------------------------------------------------------------
# Scripted calls, snapshots, configuration
# --------------------------------------------------------------------------


class ScriptedService:
    """Calls complete only when the schedule says so."""

    def __init__(self) -> None:
        self.calls: dict[int, Entry] = {}

    def invoke(self, entry: Entry) -> None:
        self.calls[entry.record.key] = entry

    def cancel(self, entry: Entry) -> None:
        pass  # a later completion step for it is ignored by the operator (AIO-21)

    def entry(self, record_id: int) -> Entry | None:
        return self.calls.get(record_id)


def _stored_to_json(el: Stored) -> dict[str, Any]:
    if isinstance(el, Watermark):
        return {"watermark": el.timestamp}
    return {"record": el.key, "value": el.value, "timestamp": el.timestamp}


def _stored_from_json(d: dict[str, Any]) -> Stored:
    if "watermark" in d:
        return Watermark(d["watermark"])
    return Record(d["record"], d["value"], d["timestamp"])


def operator_config(c: AsyncIoConfig) -> OperatorConfig:
    """The operator configuration for a schedule's configuration (ValueError if refused)."""
    if c.mode not in ("ordered", "unordered"):
        raise ValueError(f"AIO-12: mode must be 'ordered' or 'unordered', not {c.mode!r}")
    retry = None
    if c.retry is not None:
        r = c.retry
        retry = RetryStrategy(
            kind=r.strategy, max_attempts=r.max_attempts, delay=r.delay, initial_delay=r.initial_delay,
            max_delay=r.max_delay, multiplier=r.multiplier,
            result_predicate=empty_result if r.if_empty else None,
            exception_predicate=any_error if r.if_error else None,
        )
    result = list(c.timeout_result)
    return OperatorConfig(
        ordered=c.mode == "ordered", capacity=c.capacity, timeout=c.timeout, on_timeout=c.on_timeout,
        timeout_result=lambda value: list(result), retry=retry,
    )


# --------------------------------------------------------------------------
# Running a schedule
# --------------------------------------------------------------------------


class _Recorder:
    """The operator's Output: trace events stamped with the current step, persisted to the sink."""

    def __init__(self, run: Run):
        self.run = run

    def _add(self, kind: str, **kw: Any) -> None:
        self.run.record_event(event(self.run.step, kind, **kw))

    def emit(self, record: Record, value: Any) -> None:
        self._add("emit", record=record.key, value=value, timestamp=record.timestamp)

    def watermark(self, timestamp: int) -> None:
        self._add("watermark", timestamp=timestamp)

    def status(self, idle: bool) -> None:
        self._add("status", idle=idle)

    def invoked(self, record: Record, attempt: int) -> None:
        self._add("invoke", record=record.key, attempt=attempt)

    def timed_out(self, record: Record) -> None:
        self._add("timeout", record=record.key)

    def checkpoint(self, id: int, snapshot: list[Stored]) -> None:
        self.run.store.write_checkpoint(id, [_stored_to_json(el) for el in snapshot])  # durable first
        pairs = [("watermark", el.timestamp) if isinstance(el, Watermark) else ("record", el.key)
                 for el in snapshot]
        self._add("checkpoint", id=id, snapshot=pairs)

    def failed(self, record: Record | None, reason: str, error: BaseException | None) -> None:
        self._add("fail", record=None if record is None else record.key, reason=reason)

    def finished(self) -> None:
        self._add("finished")


class Run(ScheduleRun):
    """One async I/O schedule on the operator (adapters/pyspark/runtime.py runs the steps)."""

    def __init__(self, schedule: Schedule, store: ScheduleStore):
        super().__init__(schedule, store)
        self.op: AsyncWaitOperator | None = None
        self.timers: VirtualTimers | None = None
        self.service: ScriptedService | None = None
        self.config: OperatorConfig | None = None
        self._record_ids: dict[int, int] = {}
        for i, s in enumerate(schedule.steps):
            if isinstance(s, RecordStep):
                self._record_ids[i] = len(self._record_ids)

    @property
    def alive(self) -> bool:
        return self.op is not None and self.op.alive

    def cause(self, index: int) -> str:
        if isinstance(self.schedule.steps[index], CrashStep):
            return "crash step"
        f = self.op.failure if self.op is not None else None
        return f"fail event: record {f.record.key if f and f.record else None}, {f.reason if f else '?'}"

    def start(self, resume_step: int) -> bool:
        """A fresh operator, or none while resuming after a failure.  False if the config is refused."""
        try:
            self.config = operator_config(self.schedule.config)
            if resume_step == 0:
                self._new_incarnation(self.config.capacity, [])  # the operator validates (AIO-1, AIO-3)
            return True
        except ValueError as e:
            self.reject(str(e))
            return False

    def _new_incarnation(self, capacity: int, restored: list[Stored]) -> None:
        assert self.config is not None
        config = dataclasses.replace(self.config, capacity=capacity)
        self.timers = VirtualTimers(self.clock)
        self.service = ScriptedService()
        self.op = AsyncWaitOperator(config, self.timers, self.service, _Recorder(self))
        for el in restored:  # execution model 8, AIO-46/47
            self.op.push(el)

    def apply(self, index: int, s: Step) -> None:
        self._apply(s)
        self._fire_due_timers()

    def _fire_due_timers(self) -> None:
        """AIO-54: a timer registered during a step with a deadline not after now fires in that step."""
        op, timers = self.op, self.timers
        if op is not None and timers is not None and op.alive:
            timers.advance(0, lambda: op.alive)

    def _apply(self, s: Step) -> None:
        op = self.op
        if isinstance(s, RestoreStep):
            assert self.config is not None
            restored = [] if s.checkpoint is None else \
                [_stored_from_json(d) for d in self.store.read_checkpoint(s.checkpoint)]
            self._new_incarnation(s.capacity or self.config.capacity, restored)
            return
        if op is None or not op.alive:
            return  # nothing happens in a failed task (SCH-7 makes this unreachable)
        if isinstance(s, RecordStep):
            op.push(Record(self._record_ids[self.step], s.value, s.timestamp))
        elif isinstance(s, WatermarkStep):
            op.push(Watermark(s.timestamp))
        elif isinstance(s, StatusStep):
            op.push(WatermarkStatus(s.idle))
        elif isinstance(s, CheckpointStep):
            op.push(Barrier(s.id))
        elif isinstance(s, EndStep):
            op.push(EndOfInput())
        elif isinstance(s, (CompleteStep, ErrorStep)):
            self._complete(op, s)
        elif isinstance(s, AdvanceStep):
            assert self.timers is not None
            self.timers.advance(s.ms, lambda: op.alive)
        elif isinstance(s, CrashStep):
            op.close()

    def _complete(self, op: AsyncWaitOperator, s: CompleteStep | ErrorStep) -> None:
        assert self.service is not None
        entry = self.service.entry(s.record)
        if entry is None:
            return  # SCH-4: not admitted in this incarnation; the reference refuses such schedules
        if isinstance(s, CompleteStep):
            op.complete(entry, None if s.result is None else list(s.result))
        else:
            op.complete_exceptionally(entry, RuntimeError(s.message))
