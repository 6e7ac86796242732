"""The async wait operator core: one class for the user API and for conformance mode.

`AsyncWaitOperator` holds the queue (ordered, or unordered with watermark
segments), the input channel, the timeouts, the retries and the snapshot.  It
is single-threaded and event-driven: input elements are pushed into its
channel, calls complete through `complete` / `complete_exceptionally`, and
timers call back into it.  Everything that depends on the environment is
injected:

* `Timers`: the clock and timer service (an asyncio loop in `api.py`,
  a virtual clock in conformance mode, `conformance.py`);
* `Service`: starts a call of the async function for an entry
  (real coroutines, or scripted futures completed by schedule steps);
* `Output`: receives output elements and side-effect notifications.

Rule IDs (AIO-n, spec/async-io.md) mark where each rule is implemented.
Standard library only: the module runs inside Spark's Python workers.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_CAPACITY = 100  # AIO-5
TIMEOUT_ACTIONS = ("fail", "complete", "ignore")
RETRY_KINDS = ("fixed_delay", "exponential_backoff")


# --------------------------------------------------------------------------
# Input elements
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """An input record.  `key` identifies it in outputs (a record id or a sequence number)."""

    key: Any
    value: Any
    timestamp: int | None = None


@dataclass(frozen=True)
class Watermark:
    timestamp: int


@dataclass(frozen=True)
class WatermarkStatus:
    idle: bool


@dataclass(frozen=True)
class Barrier:
    """A checkpoint barrier."""

    id: int


@dataclass(frozen=True)
class EndOfInput:
    pass


Element = Record | Watermark | WatermarkStatus | Barrier | EndOfInput
Stored = Record | Watermark  # what a snapshot holds (AIO-44)


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryStrategy:
    """A retry strategy (FLIP-232).  Times are in the operator's time unit (ms)."""

    kind: str = "fixed_delay"
    max_attempts: int = 1  # counts retries (AIO-34)
    delay: float = 0
    initial_delay: float = 0
    max_delay: float = 0
    multiplier: float = 2.0
    result_predicate: Callable[[list], bool] | None = None
    exception_predicate: Callable[[BaseException], bool] | None = None

    def enabled(self) -> bool:
        # AIO-4: a strategy without any predicate never retries.
        return self.result_predicate is not None or self.exception_predicate is not None

    def can_retry(self, attempt: int) -> bool:
        return attempt <= self.max_attempts  # AIO-34

    def backoff(self, attempt: int) -> float:
        """The delay before the retry that follows attempt `attempt` (AIO-40)."""
        if self.kind == "fixed_delay":
            return self.delay
        if attempt <= 1:
            return self.initial_delay
        grown = self.initial_delay * self.multiplier ** (attempt - 1)
        if isinstance(self.initial_delay, int):
            grown = int(grown)  # whole milliseconds, as Java's (long) cast
        return min(grown, self.max_delay)


def empty_result(result: list) -> bool:
    """The result predicate of Flink's EMPTY_RESULT_PREDICATE: retry an empty result."""
    return len(result) == 0


def any_error(error: BaseException) -> bool:
    """The exception predicate of Flink's HAS_EXCEPTION_PREDICATE: retry any error."""
    return True


def _no_timeout_result(value: Any) -> list | None:
    return []


@dataclass(frozen=True)
class OperatorConfig:
    ordered: bool = True
    capacity: int = DEFAULT_CAPACITY
    timeout: float = 0  # from admission; 0 means none (AIO-2)
    on_timeout: str = "fail"  # fail | complete | ignore (AIO-27..AIO-30)
    # For on_timeout == "complete": the result for a value; None means "do nothing" (AIO-30).
    timeout_result: Callable[[Any], list | None] = _no_timeout_result
    retry: RetryStrategy | None = None
    # An opt-in of async_map, not a Flink option: a record that would fail the task (AIO-20, AIO-23,
    # AIO-24, AIO-28) completes with error_result(reason, error) instead, in its queue position.
    error_result: Callable[[str, BaseException | None], list] | None = None

    def validate(self) -> None:
        """Raise ValueError naming the rule for a configuration the operator refuses."""
        cap = self.capacity
        if not isinstance(cap, int) or isinstance(cap, bool) or cap <= 0:
            raise ValueError(f"AIO-1: capacity must be a positive integer, not {cap!r}")
        if not isinstance(self.timeout, (int, float)) or self.timeout < 0:
            raise ValueError(f"AIO-2: timeout must be >= 0 (0 means no timeout), not {self.timeout!r}")
        if self.on_timeout not in TIMEOUT_ACTIONS:
            raise ValueError(f"AIO-27: on_timeout must be one of {TIMEOUT_ACTIONS}, not {self.on_timeout!r}")
        r = self.retry
        if r is not None:
            if r.kind not in RETRY_KINDS:
                raise ValueError(f"AIO-40: retry strategy must be one of {RETRY_KINDS}, not {r.kind!r}")
            if r.max_attempts < 0:
                raise ValueError(f"AIO-34: max_attempts must be >= 0, not {r.max_attempts}")
            if not self.timeout > 0:
                raise ValueError("AIO-3: a retry strategy needs a timeout > 0")

    @property
    def retry_enabled(self) -> bool:
        return self.retry is not None and self.retry.enabled()  # AIO-4


# --------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------


class Timers(Protocol):
    def now(self) -> float: ...

    def register(self, deadline: float, callback: Callable[[], None]) -> Any: ...

    def cancel(self, handle: Any) -> None: ...


class Service(Protocol):
    def invoke(self, entry: Entry) -> None:
        """Start a call of the async function for `entry.record` (attempt `entry.attempt`)."""

    def cancel(self, entry: Entry) -> None:
        """The entry's result is final: an outstanding call may be dropped."""


class Output(Protocol):
    def emit(self, record: Record, value: Any) -> None: ...

    def watermark(self, timestamp: int) -> None: ...

    def status(self, idle: bool) -> None: ...

    def invoked(self, record: Record, attempt: int) -> None: ...

    def timed_out(self, record: Record) -> None: ...

    def checkpoint(self, id: int, snapshot: list[Stored]) -> None: ...

    def failed(self, record: Record | None, reason: str, error: BaseException | None) -> None: ...

    def finished(self) -> None: ...


@dataclass(frozen=True)
class Failure:
    record: Record | None
    reason: str  # error | timeout | null_result
    error: BaseException | None


# --------------------------------------------------------------------------
# Queue entries and the two queues
# --------------------------------------------------------------------------


class Entry:
    """One queue slot: a record (with its call state) or a watermark (AIO-6)."""

    __slots__ = ("element", "done", "result", "attempt", "start", "accepting",
                 "timeout_timer", "retry_timer", "seq", "call", "segment", "expired", "stalled")

    def __init__(self, element: Stored, start: float, seq: int = 0):
        self.element = element
        self.seq = seq  # admission order
        self.done = isinstance(element, Watermark)  # a watermark is always complete (AIO-12)
        self.result: list = []
        self.attempt = 0
        self.start = start  # admission time: the timeout is measured from here (AIO-26)
        self.accepting = False  # a completion would be taken now (AIO-21, AIO-38)
        self.timeout_timer: Any = None
        self.retry_timer: Any = None
        self.call: Any = None  # the service's handle of the outstanding call
        self.segment: Any = None
        self.expired = False  # the timeout fired: no more retries (AIO-33, AIO-37)
        self.stalled = False  # timed out while waiting for a retry, handler did nothing (AIO-37)

    @property
    def record(self) -> Record:
        assert isinstance(self.element, Record)
        return self.element


class OrderedQueue:
    """AIO-12: emit only the head, and only when it is complete."""

    def __init__(self) -> None:
        self._q: deque[Entry] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def put(self, entry: Entry) -> None:
        self._q.append(entry)

    def completed(self, entry: Entry) -> None:
        pass

    def pop_ready(self) -> Entry | None:
        if self._q and self._q[0].done:
            return self._q.popleft()
        return None

    def values(self) -> list[Entry]:
        return list(self._q)  # AIO-45: input order


class _Segment:
    def __init__(self, watermark: bool):
        self.watermark = watermark
        self.entries: dict[int, Entry] = {}  # unemitted entries in admission order
        self.completed: deque[Entry] = deque()  # completed, unemitted, in completion order


class UnorderedQueue:
    """AIO-13/14: watermark segments; inside the head segment, completion order."""

    def __init__(self) -> None:
        self._segments: deque[_Segment] = deque()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def put(self, entry: Entry) -> None:
        is_wm = isinstance(entry.element, Watermark)
        if is_wm or not self._segments or self._segments[-1].watermark:
            self._segments.append(_Segment(is_wm))
        seg = self._segments[-1]
        seg.entries[id(entry)] = entry
        entry.segment = seg
        if is_wm:
            seg.completed.append(entry)
        self._size += 1

    def completed(self, entry: Entry) -> None:
        entry.segment.completed.append(entry)

    def pop_ready(self) -> Entry | None:
        while self._segments:
            head = self._segments[0]
            if head.completed:
                entry = head.completed.popleft()
                del head.entries[id(entry)]
                self._size -= 1
                return entry
            if head.entries or len(self._segments) == 1:
                return None  # AIO-13: nothing of a later segment may pass
            self._segments.popleft()
        return None

    def values(self) -> list[Entry]:
        # AIO-45: segment by segment; completed entries first, then the incomplete ones
        # (admission order here, where Flink's order is unspecified).
        out: list[Entry] = []
        for seg in self._segments:
            out.extend(seg.completed)
            out.extend(e for e in seg.entries.values() if not e.done)
        return out


# --------------------------------------------------------------------------
# The operator
# --------------------------------------------------------------------------


class AsyncWaitOperator:
    def __init__(self, config: OperatorConfig, timers: Timers, service: Service, output: Output,
                 on_progress: Callable[[], None] | None = None):
        config.validate()  # AIO-1, AIO-3
        self.config = config
        self.timers = timers
        self.service = service
        self.output = output
        self.on_progress = on_progress
        self.queue: OrderedQueue | UnorderedQueue = OrderedQueue() if config.ordered else UnorderedQueue()
        self.channel: deque[Element] = deque()
        self.failure: Failure | None = None
        self.ended = False
        self.finished = False
        self._retry_disabled = False  # AIO-39: set at end of input
        self._admissions = itertools.count()
        self._running = False
        self._closed = False

    # ----- state -----

    @property
    def alive(self) -> bool:
        return self.failure is None and not self._closed

    @property
    def pending_input(self) -> int:
        """Elements waiting in the input channel (behind a full queue)."""
        return len(self.channel)

    def __len__(self) -> int:
        return len(self.queue)

    def snapshot(self) -> list[Stored]:
        """AIO-44/45: the input elements of all queued entries, in queue order."""
        return [e.element for e in self.queue.values()]

    # ----- input -----

    def push(self, element: Element) -> None:
        """An input element arrives at the tail of the channel (it waits there while blocked, AIO-7)."""
        self.channel.append(element)
        self._run()

    # ----- completions (the ResultFuture of an entry) -----

    def complete(self, entry: Entry, result: Any) -> None:
        if not self.alive or entry.done or not entry.accepting:
            return  # AIO-21, AIO-38: only the first completion of a call counts
        if result is None and self.config.retry_enabled:
            return  # AIO-20: the retrying future refuses null at the call; the call stays outstanding
        entry.accepting = False
        self._settle(entry, result)

    def complete_exceptionally(self, entry: Entry, error: BaseException) -> None:
        if not self.alive or entry.done or not entry.accepting:
            return  # AIO-21
        entry.accepting = False
        self._settle_error(entry, error, "error")

    def _settle(self, entry: Entry, result: Any) -> None:
        """An attempt ended with a result: retry it, or apply it as final."""
        if result is None:
            self._fail(entry, "null_result", None)  # AIO-20
            return
        if not isinstance(result, (list, tuple)):
            self._fail(entry, "error", TypeError(f"the async function must return a list, not {result!r}"))
            return
        result = list(result)
        if self._retry_wanted(entry, result, None):
            self._schedule_retry(entry)
            return
        self._finish(entry, result)  # AIO-36
        self._run()

    def _settle_error(self, entry: Entry, error: BaseException, reason: str) -> None:
        if self._retry_wanted(entry, None, error):
            self._schedule_retry(entry)
            return
        self._fail(entry, reason, error)  # AIO-23, AIO-36

    # ----- the main loop -----

    def _run(self) -> None:
        """Run to quiescence: emit what may be emitted, take what may be taken (execution model 4)."""
        if self._running:
            return
        self._running = True
        try:
            while self.alive and (self._emit_one() or self._take_one()):
                pass
            if self.alive and self.ended and not self.finished and not self.queue and not self.channel:
                self.finished = True  # AIO-42
                self.output.finished()
        finally:
            self._running = False
        if self.on_progress is not None:
            self.on_progress()

    def _emit_one(self) -> bool:
        entry = self.queue.pop_ready()  # AIO-12..AIO-15; the slot is freed here (AIO-8)
        if entry is None:
            return False
        el = entry.element
        if isinstance(el, Watermark):
            self.output.watermark(el.timestamp)
        else:
            for value in entry.result:  # AIO-18: one contiguous run, the input's timestamp
                self.output.emit(el, value)
        return True

    def _take_one(self) -> bool:
        if not self.channel:
            return False
        el = self.channel[0]
        if isinstance(el, (Record, Watermark)) and len(self.queue) >= self.config.capacity:
            return False  # AIO-6, AIO-7: block, keep order
        self.channel.popleft()
        if isinstance(el, Record):
            self._admit(el)
        elif isinstance(el, Watermark):
            self.queue.put(Entry(el, self.timers.now()))  # AIO-6; emitted at once if first (AIO-16)
        elif isinstance(el, WatermarkStatus):
            self.output.status(el.idle)  # AIO-51 (Flink 2.3.0): a status bypasses the queue
        elif isinstance(el, Barrier):
            self.output.checkpoint(el.id, self.snapshot())  # AIO-44: only between input elements
        else:
            self._end_input()
        return True

    def _admit(self, record: Record) -> None:
        # AIO-9/10: admitted one at a time, in order, then invoked.
        entry = Entry(record, self.timers.now(), next(self._admissions))
        self.queue.put(entry)
        if self.config.timeout > 0:  # AIO-2, AIO-26: one timer per record, from admission
            deadline = entry.start + self.config.timeout
            entry.timeout_timer = self.timers.register(deadline, lambda: self._timeout_fired(entry))
        self._invoke(entry)

    def _invoke(self, entry: Entry) -> None:
        entry.attempt += 1  # AIO-33: attempts count from 1
        entry.accepting = True
        self.output.invoked(entry.record, entry.attempt)
        try:
            self.service.invoke(entry)
        except Exception as e:  # AIO-24: a synchronous exception fails the task
            self._fail(entry, "error", e)

    def _end_input(self) -> None:
        self.ended = True
        if self.config.retry_enabled:
            # AIO-39: fire every delayed retry at once, then retry no more.
            # AIO-60: only records with no call outstanding: waiting for a retry, or stalled (AIO-37).
            self._retry_disabled = True
            waiting = [e for e in self.queue.values()
                       if not e.done and (e.retry_timer is not None or e.stalled)]
            for entry in sorted(waiting, key=lambda e: e.seq):  # admission order (deviation D2)
                self._cancel_timer(entry, "retry_timer")
                entry.stalled = False
                if self.alive:
                    self._invoke(entry)

    # ----- timeouts and retries -----

    def _timeout_fired(self, entry: Entry) -> None:
        entry.timeout_timer = None
        if not self.alive or entry.done:
            return  # AIO-31/32: a completed entry has no timeout
        waiting_for_retry = entry.retry_timer is not None
        self._cancel_timer(entry, "retry_timer")  # AIO-37: no more attempts
        entry.expired = True
        self.output.timed_out(entry.record)  # AIO-27
        action = self.config.on_timeout
        result = self.config.timeout_result(entry.record.value) if action == "complete" else None
        if action == "fail":
            # AIO-28: the default handler completes exceptionally; past the deadline no retry (AIO-33).
            entry.accepting = False
            self._settle_error(entry, TimeoutError("Async function call has timed out."), "timeout")
        elif result is not None:
            entry.accepting = False
            self._settle(entry, result)  # AIO-29; later results are ignored (AIO-21)
        elif waiting_for_retry:
            entry.stalled = True  # AIO-37: no call outstanding; only end of input calls again
        # otherwise the call stays outstanding (AIO-30)
        self._run()

    def _retry_wanted(self, entry: Entry, result: list | None, error: BaseException | None) -> bool:
        r = self.config.retry
        if r is None or not r.enabled() or self._retry_disabled or entry.expired:
            return False  # AIO-4, AIO-39
        wanted = (result is not None and r.result_predicate is not None and r.result_predicate(result)) or (
            error is not None and r.exception_predicate is not None and r.exception_predicate(error))
        elapsed = self.timers.now() - entry.start
        # AIO-33/34; FLINK-38082: no retry once the timeout has passed.
        return bool(wanted) and r.can_retry(entry.attempt) and elapsed < self.config.timeout

    def _schedule_retry(self, entry: Entry) -> None:
        assert self.config.retry is not None
        deadline = self.timers.now() + self.config.retry.backoff(entry.attempt)  # AIO-35
        entry.retry_timer = self.timers.register(deadline, lambda: self._retry_fired(entry))

    def _retry_fired(self, entry: Entry) -> None:
        entry.retry_timer = None
        if self.alive and not entry.done:
            self._invoke(entry)  # AIO-35: same input, same queue entry
            self._run()

    def _cancel_timer(self, entry: Entry, name: str) -> None:
        handle = getattr(entry, name)
        if handle is not None:
            self.timers.cancel(handle)
            setattr(entry, name, None)

    # ----- results and failures -----

    def _finish(self, entry: Entry, result: list) -> None:
        entry.done = True
        entry.result = result
        entry.accepting = False
        self._cancel_timer(entry, "timeout_timer")  # AIO-32
        self._cancel_timer(entry, "retry_timer")
        self.service.cancel(entry)
        self.queue.completed(entry)

    def _fail(self, entry: Entry | None, reason: str, error: BaseException | None) -> None:
        """The task fails (AIO-23): this operator does nothing more.  With `error_result` the record
        completes with that result instead and the operator goes on (async_map's error output)."""
        if entry is not None and self.config.error_result is not None:
            self._finish(entry, self.config.error_result(reason, error))
            self._run()
            return
        record = entry.record if entry is not None else None
        self._discard()
        self.failure = Failure(record, reason, error)
        self.output.failed(record, reason, error)
        if self.on_progress is not None:
            self.on_progress()

    def close(self) -> None:
        """Discard everything (a crash or the end of the task): no more output."""
        if self.failure is None:  # a failure has discarded everything already
            self._discard()

    def _discard(self) -> None:
        """Cancel every timer and outstanding call, drop the waiting input, stop."""
        for e in self.queue.values():
            self._cancel_timer(e, "timeout_timer")
            self._cancel_timer(e, "retry_timer")
            if not e.done:
                self.service.cancel(e)
        self.channel.clear()
        self._closed = True
