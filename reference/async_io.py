"""Reference model of the async wait operator (spec/async-io.md).

An explicit-state, single-threaded, deterministic model that runs a schedule
step by step (`AsyncIoModel.apply`) following the execution model of
spec/schedules.md.  Each step costs time proportional to the events it
produces (plus logarithmic timer bookkeeping), so a schedule runs in time
roughly linear in its length.  Standard library only; comments name the rules
they implement.

State of one incarnation:

* the input channel: elements that arrived but were not taken yet;
* the queue (`_OrderedQueue` or `_UnorderedQueue`): admitted entries until emission;
* the timers: timeouts and retry backoffs, fired by (deadline, registration);
* per admitted record: its attempt number and its state:
  IN_FLIGHT (a call is outstanding), BACKOFF (waiting for a retry timer),
  STALLED (the timeout cancelled its retry and the handler did nothing, AIO-37),
  DONE (its final result is applied).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

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
    RetryConfig,
    StatusStep,
    WatermarkStep,
    event,
    retry_enabled,
)
from flink_semantics.spec.schedule import Event, ScheduleError, Step

IN_FLIGHT = "in_flight"
BACKOFF = "backoff"
STALLED = "stalled"
DONE = "done"

Snapshot = tuple[tuple[str, int], ...]  # ("record", id) / ("watermark", timestamp), in stored order


# --------------------------------------------------------------------------
# Queue entries and the two queues
# --------------------------------------------------------------------------


@dataclass(eq=False)
class _Record:
    id: int
    value: int
    timestamp: int | None
    admitted_at: int  # AIO-59: the time it left the input channel
    attempt: int = 1
    state: str = IN_FLIGHT
    result: tuple[int, ...] = ()
    timeout_timer: int | None = None
    retry_timer: int | None = None
    segment: _Segment | None = None  # unordered mode only


@dataclass(eq=False)
class _Watermark:
    timestamp: int


Entry = _Record | _Watermark


def _is_complete(entry: Entry) -> bool:
    return isinstance(entry, _Watermark) or entry.state == DONE  # AIO-12: watermarks are always complete


def _stored(entry: Entry) -> tuple[str, int]:
    if isinstance(entry, _Watermark):
        return ("watermark", entry.timestamp)
    return ("record", entry.id)


class _OrderedQueue:
    """AIO-12: emit in admission order, only the complete head."""

    def __init__(self) -> None:
        self._entries: deque[Entry] = deque()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, entry: Entry) -> None:
        self._entries.append(entry)

    def mark_complete(self, record: _Record) -> None:
        pass  # the head check in pop_ready sees the new state

    def pop_ready(self) -> Entry | None:
        if self._entries and _is_complete(self._entries[0]):
            return self._entries.popleft()
        return None

    def snapshot(self) -> Snapshot:
        return tuple(_stored(e) for e in self._entries)  # AIO-45: admission order


@dataclass(eq=False)
class _Segment:
    watermark: bool  # a watermark's own segment (AIO-13)
    incomplete: dict[int, _Record] = field(default_factory=dict)  # admission order (AIO-55)
    completed: deque[Entry] = field(default_factory=deque)  # completion order (AIO-14)


class _UnorderedQueue:
    """AIO-13/AIO-14: segments in order; inside a segment, completion order."""

    def __init__(self) -> None:
        self._segments: deque[_Segment] = deque()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, entry: Entry) -> None:
        self._size += 1
        if isinstance(entry, _Watermark):
            segment = _Segment(watermark=True)
            segment.completed.append(entry)
            self._segments.append(segment)
            return
        if not self._segments or self._segments[-1].watermark:
            self._segments.append(_Segment(watermark=False))
        segment = self._segments[-1]
        segment.incomplete[entry.id] = entry
        entry.segment = segment

    def mark_complete(self, record: _Record) -> None:
        segment = record.segment
        assert segment is not None
        del segment.incomplete[record.id]
        segment.completed.append(record)

    def pop_ready(self) -> Entry | None:
        while self._segments:
            first = self._segments[0]
            if first.completed:
                self._size -= 1
                return first.completed.popleft()
            if first.incomplete:
                return None
            self._segments.popleft()  # an emptied segment
        return None

    def snapshot(self) -> Snapshot:
        # AIO-45: segment by segment, completed first; AIO-55 (deviation D1): incomplete in admission order
        out: list[tuple[str, int]] = []
        for segment in self._segments:
            out.extend(_stored(e) for e in segment.completed)
            out.extend(_stored(r) for r in segment.incomplete.values())
        return tuple(out)


Queue = _OrderedQueue | _UnorderedQueue


# --------------------------------------------------------------------------
# Backoff (AIO-40)
# --------------------------------------------------------------------------


def backoff(retry: RetryConfig, attempt: int) -> int:
    """Delay in ms before the retry that follows attempt `attempt` (AIO-40, after FLINK-33698)."""
    if retry.strategy == "fixed_delay":
        return retry.delay
    if attempt <= 1:
        return retry.initial_delay  # the first retry is not capped
    if retry.initial_delay == 0:
        return 0
    try:
        scaled = retry.initial_delay * float(retry.multiplier) ** (attempt - 1)
    except OverflowError:
        return retry.max_delay
    return retry.max_delay if scaled >= retry.max_delay else int(scaled)  # Java's (long) cast truncates


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------


class AsyncIoModel:
    """The async wait operator under a schedule: `apply` one step at a time."""

    def __init__(self, config: AsyncIoConfig) -> None:
        self.config = config
        self._retry: RetryConfig | None = config.retry if retry_enabled(config) else None  # AIO-4
        self.now = 0
        self.taken_checkpoints: set[int] = set()
        self._snapshots: dict[int, Snapshot] = {}
        self._inputs: list[RecordStep] = []  # every record step so far, by record id
        self._timer_ids = 0
        self._events: list[Event] = []
        self._step = -1
        self._start_incarnation(config.capacity, ())

    # ---- observation -----------------------------------------------------

    def outstanding(self) -> list[int]:
        """Records with a call in flight (a complete/error step would apply), in admission order."""
        if not self.alive:
            return []
        return [r.id for r in self._admitted.values() if r.state == IN_FLIGHT]

    def admitted(self) -> list[int]:
        """Records admitted in this incarnation (a complete/error step on them is well formed)."""
        return list(self._admitted)

    def pending_timers(self) -> list[int]:
        return sorted(deadline for deadline, _, _ in self._timers.values())

    def queue_size(self) -> int:
        return len(self._queue)

    def waiting_inputs(self) -> int:
        return len(self._channel)

    # ---- steps -----------------------------------------------------------

    def apply(self, index: int, step: Step) -> list[Event]:
        """Run one step to quiescence and return its events (spec/schedules.md)."""
        self._events = []
        self._step = index
        if not self.alive and not isinstance(step, RestoreStep):
            raise ScheduleError(index, "SCH-7", "the task has failed; only a restore may follow", step.op)
        if isinstance(step, RecordStep):
            self._channel.append(("record", len(self._inputs)))
            self._inputs.append(step)
        elif isinstance(step, WatermarkStep):
            self._channel.append(("watermark", step.timestamp))
        elif isinstance(step, StatusStep):
            self._channel.append(("status", step.idle))
        elif isinstance(step, CheckpointStep):
            self._channel.append(("checkpoint", step.id))
        elif isinstance(step, EndStep):
            self._channel.append(("end", 0))
        elif isinstance(step, (CompleteStep, ErrorStep)):
            self._completion_step(index, step)
        elif isinstance(step, AdvanceStep):
            self._advance(step.ms)
            return self._events
        elif isinstance(step, CrashStep):
            self._end_incarnation()  # AIO-58: no event
            return self._events
        elif isinstance(step, RestoreStep):
            self._restore(index, step)
        else:  # pragma: no cover - validate_schedule refuses other steps
            raise ScheduleError(index, "SCH-1", f"not an async_io step: {step!r}")
        self._settle()
        return self._events

    def _completion_step(self, index: int, step: CompleteStep | ErrorStep) -> None:
        record = self._admitted.get(step.record)
        if record is None:
            raise ScheduleError(index, "SCH-4", f"record {step.record} has no call: it was not admitted in "
                                "this incarnation (still in the input channel, or not restored)", step.op)
        if record.state != IN_FLIGHT:
            return  # AIO-21, AIO-38: no call is outstanding; the completion is ignored
        if isinstance(step, ErrorStep):
            self._outcome(record, None, "error")
        else:
            self._outcome(record, step.result, None)

    def _advance(self, ms: int) -> None:
        """AIO-54: fire due timers one at a time, each at its deadline, then set the clock."""
        target = self.now + ms
        while self.alive:
            deadline = self._earliest_deadline()
            if deadline is None or deadline > target:
                break
            self.now = deadline
            self._settle()
        self.now = target
        self._settle()

    def _restore(self, index: int, step: RestoreStep) -> None:
        if self.alive:
            raise ScheduleError(index, "SCH-7", "restore while the task is alive", step.op)
        if step.checkpoint is not None and step.checkpoint not in self._snapshots:
            raise ScheduleError(index, "SCH-5", f"checkpoint {step.checkpoint} was never taken", step.op)
        stored = () if step.checkpoint is None else self._snapshots[step.checkpoint]
        capacity = self.config.capacity if step.capacity is None else step.capacity  # AIO-57
        self._start_incarnation(capacity, stored)  # AIO-46: stored elements first, in snapshot order

    # ---- incarnations ----------------------------------------------------

    def _start_incarnation(self, capacity: int, stored: Snapshot) -> None:
        self.alive = True
        self.ended = False
        self.finished = False
        self._capacity = capacity
        self._queue: Queue = _OrderedQueue() if self.config.mode == "ordered" else _UnorderedQueue()
        self._channel: deque[tuple[str, int]] = deque(stored)
        self._admitted: dict[int, _Record] = {}  # in admission order
        self._timers: dict[int, tuple[int, str, _Record]] = {}  # id -> (deadline, kind, record)
        self._heap: list[tuple[int, int]] = []  # (deadline, id); cancelled ids are skipped lazily

    def _end_incarnation(self) -> None:
        """AIO-58: discard the queue, the waiting input and the timers; emit nothing more."""
        self.alive = False
        self._queue = _OrderedQueue()
        self._channel.clear()
        self._timers.clear()
        self._heap.clear()

    # ---- quiescence ------------------------------------------------------

    def _settle(self) -> None:
        """Run until nothing more can happen without a new step (spec/schedules.md item 4)."""
        while self.alive:
            self._emit_ready()
            self._maybe_finish()
            if self._take_input():
                continue
            if self._fire_due_timer():
                continue
            return

    def _emit_ready(self) -> None:
        while (entry := self._queue.pop_ready()) is not None:
            if isinstance(entry, _Watermark):
                self._emit("watermark", timestamp=entry.timestamp)
            else:
                for value in entry.result:  # AIO-18: one run, the input's timestamp
                    self._emit("emit", record=entry.id, value=value, timestamp=entry.timestamp)

    def _maybe_finish(self) -> None:
        if self.ended and not self.finished and len(self._queue) == 0:  # AIO-42, AIO-56
            self.finished = True
            self._emit("finished")

    def _take_input(self) -> bool:
        """Take the head of the input channel if it can be taken (AIO-6, AIO-7)."""
        if not self._channel:
            return False
        kind, x = self._channel[0]
        if kind in ("record", "watermark") and len(self._queue) >= self._capacity:
            return False  # AIO-7: the head waits, and everything behind it
        self._channel.popleft()
        if kind == "record":
            self._admit(x)
        elif kind == "watermark":
            self._queue.add(_Watermark(x))  # AIO-16: emitted at once if nothing is before it
        elif kind == "status":
            self._emit("status", idle=bool(x))  # AIO-51: forwarded, no slot, not stored
        elif kind == "checkpoint":
            self._checkpoint(x)
        else:
            self._end_of_input()
        return True

    def _admit(self, record_id: int) -> None:
        step = self._inputs[record_id]
        record = _Record(record_id, step.value, step.timestamp, admitted_at=self.now)
        self._admitted[record_id] = record
        self._queue.add(record)
        self._emit("invoke", record=record_id, attempt=1)  # AIO-9: called after admission
        if self.config.timeout > 0:  # AIO-2, AIO-26, AIO-59: from admission
            record.timeout_timer = self._add_timer(self.now + self.config.timeout, "timeout", record)

    def _checkpoint(self, checkpoint_id: int) -> None:
        snapshot = self._queue.snapshot()  # AIO-44, AIO-45: queued input elements only
        self._snapshots[checkpoint_id] = snapshot
        self.taken_checkpoints.add(checkpoint_id)
        self._emit("checkpoint", id=checkpoint_id, snapshot=snapshot)

    def _end_of_input(self) -> None:
        """AIO-39 (deviation D2: admission order), AIO-60 (deviation D3: only records without a call)."""
        self.ended = True
        for record in self._admitted.values():
            if record.state in (BACKOFF, STALLED):
                self._cancel(record.retry_timer)
                record.retry_timer = None
                self._start_attempt(record)

    # ---- timers ----------------------------------------------------------

    def _add_timer(self, deadline: int, kind: str, record: _Record) -> int:
        timer_id = self._timer_ids
        self._timer_ids += 1
        self._timers[timer_id] = (deadline, kind, record)
        heapq.heappush(self._heap, (deadline, timer_id))
        return timer_id

    def _cancel(self, timer_id: int | None) -> None:
        if timer_id is not None:
            self._timers.pop(timer_id, None)

    def _earliest_deadline(self) -> int | None:
        while self._heap and self._heap[0][1] not in self._timers:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def _fire_due_timer(self) -> bool:
        """AIO-54: the earliest due timer, ties in registration order (the heap key)."""
        deadline = self._earliest_deadline()
        if deadline is None or deadline > self.now:
            return False
        _, timer_id = heapq.heappop(self._heap)
        _, kind, record = self._timers.pop(timer_id)
        if kind == "timeout":
            self._on_timeout(record)
        else:
            record.retry_timer = None
            self._start_attempt(record)  # AIO-35
        return True

    def _on_timeout(self, record: _Record) -> None:
        """AIO-27..AIO-30, AIO-37."""
        record.timeout_timer = None
        self._emit("timeout", record=record.id)
        if record.state == BACKOFF:  # AIO-37: the timeout cancels the pending retry
            self._cancel(record.retry_timer)
            record.retry_timer = None
            record.state = STALLED
        handler = self.config.on_timeout
        if handler == "fail":
            self._outcome(record, None, "timeout")  # AIO-28
        elif handler == "complete":
            self._outcome(record, self.config.timeout_result, None)  # AIO-29
        # "ignore": AIO-30, the record keeps waiting (or stays stalled, AIO-37)

    # ---- outcomes --------------------------------------------------------

    def _start_attempt(self, record: _Record) -> None:
        record.attempt += 1
        record.state = IN_FLIGHT
        self._emit("invoke", record=record.id, attempt=record.attempt)

    def _outcome(self, record: _Record, result: tuple[int, ...] | None, error: str | None) -> None:
        """An attempt ended (or the timeout handler completed): retry, fail or complete."""
        if error is None and result is None:  # AIO-20
            if self._retry is not None:
                return  # refused at the call: the call stays outstanding
            self._fail(record, "null_result")
            return
        if self._should_retry(record, result, error):
            record.state = BACKOFF
            assert self._retry is not None
            delay = backoff(self._retry, record.attempt)  # AIO-40
            record.retry_timer = self._add_timer(self.now + delay, "retry", record)
            return
        if error is not None:
            self._fail(record, error)  # AIO-23, AIO-36
            return
        assert result is not None
        self._complete(record, result)

    def _should_retry(self, record: _Record, result: tuple[int, ...] | None, error: str | None) -> bool:
        """AIO-33, AIO-34: predicate, attempt budget, not ended, before the deadline (FLINK-38082)."""
        retry = self._retry
        if retry is None or self.ended:
            return False
        empty = result is not None and len(result) == 0
        wanted = (error is not None and retry.if_error) or (empty and retry.if_empty)
        return wanted and record.attempt <= retry.max_attempts and self._before_deadline(record)

    def _before_deadline(self, record: _Record) -> bool:
        """AIO-33: an outcome is retried only before admission time + `timeout` (FLINK-38082)."""
        return self.now < record.admitted_at + self.config.timeout

    def _complete(self, record: _Record, result: tuple[int, ...]) -> None:
        record.state = DONE
        record.result = tuple(result)
        self._cancel(record.timeout_timer)  # AIO-32
        self._cancel(record.retry_timer)
        record.timeout_timer = record.retry_timer = None
        self._queue.mark_complete(record)

    def _fail(self, record: _Record, reason: str) -> None:
        self._emit("fail", record=record.id, reason=reason)
        self._end_incarnation()  # AIO-58

    def _emit(self, kind: str, **fields: object) -> None:
        self._events.append(event(self._step, kind, **fields))


Model = AsyncIoModel  # the area's model, found by reference/__init__.py
