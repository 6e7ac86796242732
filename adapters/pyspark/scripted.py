"""Conformance mode of the operator: a virtual clock, scripted calls and a durable sink.

A schedule (spec/schedules.md) is run against the same `AsyncWaitOperator`
that `async_map` uses; only the environment differs:

* `VirtualTimers`: processing time changes only on `advance` steps; due timers
  fire in (deadline, registration) order, each at its own deadline
  (execution model 1 and 5);
* `ScriptedService`: an invocation starts a call that completes only when a
  `complete` or `error` step says so (execution model 6);
* `ScheduleStore`: a directory on durable storage holding the task's sink
  (the trace events, written with the crash or done marker that ends them)
  and the checkpoint snapshots.

A `crash` step, and a task failure (a `fail` event), raise `InjectedFailure`
out of the Spark task after a crash marker is written.  Spark runs the task
again; `run_schedule` then finds the marker, keeps the events emitted before
it, and continues with the step after it (normally a `restore`, which reads
the snapshot back from the store).  No Spark here: this module is also run
directly by the unit tests.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.pyspark.core import (
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
from spec.adapter import CAPABILITIES, SCRIPTED
from spec.schedule import (
    AdvanceStep,
    AsyncIoConfig,
    CheckpointStep,
    CompleteStep,
    CrashStep,
    EndStep,
    ErrorStep,
    Event,
    RecordStep,
    RestoreStep,
    Schedule,
    StatusStep,
    Step,
    Trace,
    WatermarkStep,
    event,
    event_from_dict,
    make_trace,
)


class InjectedFailure(RuntimeError):
    """A crash step or a task failure: raised so that the Spark task really fails."""


# --------------------------------------------------------------------------
# Virtual time and scripted calls
# --------------------------------------------------------------------------


class VirtualClock:
    def __init__(self, now: int = 0):
        self.now = now  # ms; runs on across crashes and restores (execution model 1)


class _Timer:
    __slots__ = ("deadline", "seq", "callback", "cancelled")

    def __init__(self, deadline: float, seq: int, callback: Callable[[], None]):
        self.deadline = deadline
        self.seq = seq
        self.callback = callback
        self.cancelled = False

    def __lt__(self, other: _Timer) -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)


class VirtualTimers:
    """The timer service of one incarnation on the shared virtual clock."""

    def __init__(self, clock: VirtualClock):
        self.clock = clock
        self._heap: list[_Timer] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.clock.now

    def register(self, deadline: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(deadline, next(self._seq), callback)
        heapq.heappush(self._heap, timer)
        return timer

    def cancel(self, handle: _Timer) -> None:
        handle.cancelled = True

    def advance(self, ms: int, alive: Callable[[], bool]) -> None:
        """Execution model 5: fire due timers one by one at their deadlines, then set the new time."""
        target = self.clock.now + ms
        while alive() and self._heap and self._heap[0].deadline <= target:
            timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self.clock.now = int(timer.deadline)
            timer.callback()
        self.clock.now = target


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


# --------------------------------------------------------------------------
# The durable store of one schedule
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Progress:
    events: list[Event]
    resume_step: int = 0  # the first step still to run
    clock: int = 0
    done: bool = False


def _stored_to_json(el: Stored) -> dict[str, Any]:
    if isinstance(el, Watermark):
        return {"watermark": el.timestamp}
    return {"record": el.key, "value": el.value, "timestamp": el.timestamp}


def _stored_from_json(d: dict[str, Any]) -> Stored:
    if "watermark" in d:
        return Watermark(d["watermark"])
    return Record(d["record"], d["value"], d["timestamp"])


class ScheduleStore:
    """`<dir>/sink.jsonl` (events, crash markers, done marker) and `<dir>/ckpt-<id>.json`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._sink = self.path / "sink.jsonl"

    def load(self) -> Progress:
        """What an earlier attempt left: the events up to its last crash marker (or all, if done)."""
        progress = Progress([])
        pending: list[Event] = []
        if self._sink.exists():
            for line in self._sink.read_text().splitlines():
                rec = json.loads(line)
                if "event" in rec:
                    pending.append(event_from_dict(rec["event"]))
                elif "crash" in rec:
                    progress.events += pending
                    pending = []
                    progress.resume_step, progress.clock = rec["crash"] + 1, rec["clock"]
                elif "done" in rec:
                    progress.events += pending
                    progress.done = True
                    return progress
        # Events after the last marker belong to an attempt that died unexpectedly: dropped.
        self._rewrite(progress)
        return progress

    def _rewrite(self, progress: Progress) -> None:
        lines = [json.dumps({"event": e.to_dict()}) for e in progress.events]
        if progress.resume_step:
            lines.append(json.dumps({"crash": progress.resume_step - 1, "clock": progress.clock}))
        tmp = self.path / "sink.jsonl.tmp"
        tmp.write_text("".join(line + "\n" for line in lines))
        os.replace(tmp, self._sink)

    def _commit(self, events: list[Event], marker: dict[str, Any]) -> None:
        """Append events and the marker that ends them in one durable write.

        Only events followed by a marker count (`load`), so nothing is written before one.
        """
        lines = [json.dumps({"event": e.to_dict()}) for e in events] + [json.dumps(marker)]
        with open(self._sink, "a") as fh:
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())

    def mark_crash(self, events: list[Event], step: int, clock: int) -> None:
        self._commit(events, {"crash": step, "clock": clock})

    def mark_done(self, events: list[Event]) -> None:
        self._commit(events, {"done": True})

    def write_checkpoint(self, id: int, elements: list[Stored]) -> None:
        tmp = self.path / f"ckpt-{id}.json.tmp"
        tmp.write_text(json.dumps([_stored_to_json(el) for el in elements]))
        os.replace(tmp, self.path / f"ckpt-{id}.json")

    def read_checkpoint(self, id: int) -> list[Stored]:
        return [_stored_from_json(d) for d in json.loads((self.path / f"ckpt-{id}.json").read_text())]


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


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

    def __init__(self, run: ScheduleRun):
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
        self.run.store.write_checkpoint(id, snapshot)  # durable before the checkpoint counts
        pairs = [("watermark", el.timestamp) if isinstance(el, Watermark) else ("record", el.key)
                 for el in snapshot]
        self._add("checkpoint", id=id, snapshot=pairs)

    def failed(self, record: Record | None, reason: str, error: BaseException | None) -> None:
        self._add("fail", record=None if record is None else record.key, reason=reason)

    def finished(self) -> None:
        self._add("finished")


class ScheduleRun:
    """Runs one schedule (or resumes it after an injected failure) against the operator."""

    def __init__(self, schedule: Schedule, store: ScheduleStore):
        self.schedule = schedule
        self.store = store
        self.events: list[Event] = []
        self._unwritten: list[Event] = []  # events since the last marker in the sink
        self.step = -1
        self.clock = VirtualClock()
        self.op: AsyncWaitOperator | None = None
        self.timers: VirtualTimers | None = None
        self.service: ScriptedService | None = None
        self.config: OperatorConfig | None = None
        self._record_ids: dict[int, int] = {}
        for i, s in enumerate(schedule.steps):
            if isinstance(s, RecordStep):
                self._record_ids[i] = len(self._record_ids)

    def record_event(self, e: Event) -> None:
        self.events.append(e)
        self._unwritten.append(e)

    def _take_unwritten(self) -> list[Event]:
        out, self._unwritten = self._unwritten, []
        return out

    def run(self) -> list[Event]:
        progress = self.store.load()
        if progress.done:
            return progress.events
        self.events = progress.events
        self.clock.now = progress.clock
        if not self._start(progress.resume_step):
            return self.events
        for i in range(progress.resume_step, len(self.schedule.steps)):
            self.step = i
            was_alive = self.op is not None and self.op.alive
            self._apply(self.schedule.steps[i])
            self._fire_due_timers()
            if was_alive and not (self.op is not None and self.op.alive):
                self.store.mark_crash(self._take_unwritten(), i, self.clock.now)
                raise InjectedFailure(f"step {i}: the task failed ({self._cause(i)}); Spark retries it")
        self.store.mark_done(self._take_unwritten())
        return self.events

    def _fire_due_timers(self) -> None:
        """AIO-54: a timer registered during a step with a deadline not after now fires in that step."""
        op, timers = self.op, self.timers
        if op is not None and timers is not None and op.alive:
            timers.advance(0, lambda: op.alive)

    def _cause(self, i: int) -> str:
        if isinstance(self.schedule.steps[i], CrashStep):
            return "crash step"
        f = self.op.failure if self.op is not None else None
        return f"fail event: record {f.record.key if f and f.record else None}, {f.reason if f else '?'}"

    def _start(self, resume_step: int) -> bool:
        """A fresh operator, or none while resuming after a failure.  False if the config is refused."""
        try:
            self.config = operator_config(self.schedule.config)
            if resume_step == 0:
                self._new_incarnation(self.config.capacity, [])
            return True
        except ValueError as e:  # AIO-1, AIO-3
            self.events = [event(-1, "rejected", reason=str(e))]
            self.store.mark_done(self.events)
            return False

    def _new_incarnation(self, capacity: int, restored: list[Stored]) -> None:
        assert self.config is not None
        config = dataclasses.replace(self.config, capacity=capacity)
        self.timers = VirtualTimers(self.clock)
        self.service = ScriptedService()
        self.op = AsyncWaitOperator(config, self.timers, self.service, _Recorder(self))
        for el in restored:  # execution model 8, AIO-46/47
            self.op.push(el)

    def _apply(self, s: Step) -> None:
        op = self.op
        if isinstance(s, RestoreStep):
            assert self.config is not None
            restored = [] if s.checkpoint is None else self.store.read_checkpoint(s.checkpoint)
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


def run_schedule(schedule: Schedule, store: ScheduleStore) -> list[Event]:
    return ScheduleRun(schedule, store).run()


def run_with_retries(schedule: Schedule, path: str | Path, max_attempts: int = 1000) -> list[Event]:
    """Run a schedule in this process, re-running it after each injected failure as Spark would."""
    for _ in range(max_attempts):
        try:
            return run_schedule(schedule, ScheduleStore(path))
        except InjectedFailure:
            continue
    raise RuntimeError(f"schedule still failing after {max_attempts} attempts")


class LocalScriptedAdapter:
    """The conformance-mode operator without Spark (same runner and store, retries in-process).

    For fast checks while developing: `--adapter adapters.pyspark.scripted:LocalScriptedAdapter`.
    """

    name = "pyspark-local"
    completion_order = SCRIPTED

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pyspark-local-async-io-"))
        self._n = itertools.count()

    def capabilities(self) -> dict[str, str | None]:
        return {name: None for name in CAPABILITIES}

    def run_batch(self, schedules: list[Schedule]) -> list[Trace]:
        return [make_trace(run_with_retries(s, self.root / str(next(self._n)))) for s in schedules]

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
