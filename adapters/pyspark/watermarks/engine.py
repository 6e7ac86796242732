"""Event-time watermarks as the engine runs them: generators, idleness, combination, alignment.

Flink 2.3.0's parts (spec/watermarks.md), in the same shape, standard library only (no pyspark, no
`reference`).  In Spark terms a *reader* is the source reader of one partition of the source stage
(one Spark task), and the *valve* sits in the first task of the stage after the shuffle: its input
channels are the upstream partitions, in partition order.

* generation: `BoundedOutOfOrderness` (periodic, or punctuated: spec C1), `WithIdleness` with its
  `IdlenessTimer` on a `PausableClock` (WM-2, WM-3, WM-13, WM-14);
* one reader's output: `CombinedWatermarkStatus` and `WatermarkOutputMultiplexer` (the splits'
  partial watermarks, immediate and deferred outputs: WM-4..WM-10), `IdlenessManager` (the
  split-local and the main output: WM-12) and `WatermarkToDataOutput` (what the partition sends
  downstream: WM-11);
* alignment: `WatermarkSampler`, `ReaderAlignment` (the reader's wait and its splits' pauses:
  WM-25, WM-26) and `AlignmentCoordinator` (reports and the maximum allowed watermark: WM-22..WM-24);
* `StatusWatermarkValve`: the downstream combination of the channels (WM-17..WM-21), with the fix
  of FLINK-40475 (spec D1);
* `SourceReader`: one reader with its splits, the records available to it, and what it holds back.

Every part starts fresh in a new incarnation (WM-16): nothing here is checkpointed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MIN = -(2**63)  # Long.MIN_VALUE: no promise at all
MAX = 2**63 - 1  # Long.MAX_VALUE: the end of the stream

Emit = Callable[..., None]  # emit(kind, **fields): an event of the trace


# --------------------------------------------------------------------------
# Clocks and generators
# --------------------------------------------------------------------------


class PausableClock:
    """Flink's `PausableRelativeClock` on the processing-time clock: time while paused does not
    count; pauses nest (WM-14: a split's clock while the split is paused by alignment, the main
    clock while the reader waits for alignment)."""

    def __init__(self, base: Callable[[], int]):
        self.base = base
        self.paused = 0  # pause() calls not yet matched by unpause()
        self.blocked = 0  # accumulated paused time
        self.blocked_since = 0

    def now(self) -> int:
        t = self.base()
        return t - self.blocked - (t - self.blocked_since if self.paused else 0)

    def pause(self) -> None:
        if self.paused == 0:
            self.blocked_since = self.base()
        self.paused += 1

    def unpause(self) -> None:
        assert self.paused >= 1, "unpause without pause"
        self.paused -= 1
        if self.paused == 0:
            self.blocked += self.base() - self.blocked_since


class WatermarkOutput:
    """What a generator writes into (Flink's `WatermarkOutput`)."""

    def emit_watermark(self, value: int) -> None:
        raise NotImplementedError

    def mark_idle(self) -> None:
        raise NotImplementedError

    def mark_active(self) -> None:
        raise NotImplementedError


class Generator:
    def on_event(self, ts: int, output: WatermarkOutput) -> None:
        raise NotImplementedError

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        raise NotImplementedError


class BoundedOutOfOrderness(Generator):
    """WM-2: the watermark is `max ts − D − 1`, `MIN` before any record (the maximum starts at
    `MIN + D + 1`).  Periodic: on every periodic emit, even unchanged, never on events (WM-3).
    Punctuated (spec C1): on every record, into the immediate output, never periodically (WM-8)."""

    def __init__(self, bound: int, punctuated: bool):
        self.bound = bound
        self.punctuated = punctuated
        self.max_ts = MIN + bound + 1

    def current(self) -> int:
        return self.max_ts - self.bound - 1

    def on_event(self, ts: int, output: WatermarkOutput) -> None:
        self.max_ts = max(self.max_ts, ts)
        if self.punctuated:
            output.emit_watermark(self.current())

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if not self.punctuated:
            output.emit_watermark(self.current())


class IdlenessTimer:
    """WM-13: activity is a counter; a periodic check that sees activity resets the timer, the
    first one without starts it, a later one finds it idle once `elapsed > timeout` (strict).
    "Not started" is a state of its own (spec C2: Flink's 0 sentinel would restart a timer started
    when the clock reads 0)."""

    def __init__(self, clock: PausableClock, timeout: int):
        self.clock = clock
        self.timeout = timeout
        self.counter = 0
        self.last_counter = 0
        self.start: int | None = None  # None: not started (C2)

    def activity(self) -> None:
        self.counter += 1

    def check_if_idle(self) -> bool:
        if self.counter != self.last_counter:
            self.last_counter = self.counter
            self.start = None
            return False
        if self.start is None:
            self.start = self.clock.now()
            return False
        return self.clock.now() - self.start > self.timeout


class WithIdleness(Generator):
    """`WatermarksWithIdleness` (WM-13): while idle the inner generator is not asked to emit, and
    markIdle is called once per idle spell; an event ends the spell (no markActive)."""

    def __init__(self, inner: Generator, clock: PausableClock, timeout: int):
        self.inner = inner
        self.timer = IdlenessTimer(clock, timeout)
        self.idle_now = False

    def on_event(self, ts: int, output: WatermarkOutput) -> None:
        self.inner.on_event(ts, output)
        self.timer.activity()
        self.idle_now = False

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self.timer.check_if_idle():
            if not self.idle_now:
                output.mark_idle()
                self.idle_now = True
        else:
            self.inner.on_periodic_emit(output)


def make_generator(bound: int, punctuated: bool, idleness: int | None, clock: PausableClock) -> Generator:
    """The strategy every split (and every reader's main output) uses: bounded out-of-orderness,
    periodic or punctuated, optionally `withIdleness(T)` on the given clock."""
    g: Generator = BoundedOutOfOrderness(bound, punctuated)
    return g if idleness is None else WithIdleness(g, clock, idleness)


# --------------------------------------------------------------------------
# One reader's output: the splits' partial watermarks combined
# --------------------------------------------------------------------------


class SplitListener:
    """What a partial watermark tells the reader's alignment (Flink's WatermarkUpdateListener)."""

    def on_watermark_update(self, split: int, value: int) -> None:
        raise NotImplementedError

    def on_idle_update(self, split: int, idle: bool) -> None:
        raise NotImplementedError


class PartialWatermark:
    """A split's partial watermark (WM-5): only increases; setting one clears the idle flag.  Every
    set of the idle flag is reported, and every raise, before it is stored."""

    def __init__(self, split: int, listener: SplitListener):
        self.split = split
        self.listener = listener
        self.watermark = MIN  # WM-10: a new output starts at MIN, active
        self.idle = False

    def set_watermark(self, value: int) -> bool:
        self.set_idle(False)
        updated = value > self.watermark
        if updated:
            self.listener.on_watermark_update(self.split, value)
            self.watermark = value
        return updated

    def set_idle(self, idle: bool) -> None:
        self.idle = idle
        self.listener.on_idle_update(self.split, idle)


class CombinedWatermarkStatus:
    """WM-6, WM-7: the minimum over the active partials, or, when all are idle, the maximum over all
    (FLINK-38454) with the status IDLE; adopted only if strictly greater.  With no partials nothing
    changes, the idle flag included."""

    def __init__(self) -> None:
        self.partials: list[PartialWatermark] = []
        self.combined = MIN
        self.idle = False

    def update(self) -> bool:
        if not self.partials:
            return False
        all_idle = all(p.idle for p in self.partials)
        self.idle = all_idle
        if all_idle:
            candidate = max(p.watermark for p in self.partials)
        else:
            candidate = min(p.watermark for p in self.partials if not p.idle)
        if candidate > self.combined:
            self.combined = candidate
            return True
        return False


class WatermarkOutputMultiplexer:
    """WM-4, WM-8, WM-9: one partial per split, each with an immediate output (an on-event raise
    above the combined watermark recombines at once; markIdle/markActive always recombine) and a
    deferred one (state only, combined at the next periodic emit).  Registering and unregistering
    emit nothing; the multiplexer never marks its output active."""

    def __init__(self, underlying: WatermarkOutput):
        self.underlying = underlying
        self.status = CombinedWatermarkStatus()
        self.by_split: dict[int, PartialWatermark] = {}

    def register(self, split: int, listener: SplitListener) -> None:
        assert split not in self.by_split, f"already contains an output for split {split}"
        p = PartialWatermark(split, listener)
        self.by_split[split] = p
        self.status.partials.append(p)

    def unregister(self, split: int) -> None:
        p = self.by_split.pop(split, None)
        if p is not None:
            self.status.partials.remove(p)  # WM-9: no recombination here

    def on_periodic_emit(self) -> None:
        self.update_combined()

    def update_combined(self) -> None:
        if self.status.update():
            self.underlying.emit_watermark(self.status.combined)
        if self.status.idle:  # after the all-idle flush; on every combine while idle
            self.underlying.mark_idle()

    def immediate(self, split: int) -> WatermarkOutput:
        return _ImmediateOutput(self, self.by_split[split])

    def deferred(self, split: int) -> WatermarkOutput:
        return _DeferredOutput(self.by_split[split])


class _ImmediateOutput(WatermarkOutput):
    def __init__(self, mux: WatermarkOutputMultiplexer, state: PartialWatermark):
        self.mux = mux
        self.state = state

    def emit_watermark(self, value: int) -> None:
        if self.state.set_watermark(value) and value > self.mux.status.combined:
            self.mux.update_combined()

    def mark_idle(self) -> None:
        self.state.set_idle(True)
        self.mux.update_combined()

    def mark_active(self) -> None:
        self.state.set_idle(False)
        self.mux.update_combined()


class _DeferredOutput(WatermarkOutput):
    def __init__(self, state: PartialWatermark):
        self.state = state

    def emit_watermark(self, value: int) -> None:
        self.state.set_watermark(value)

    def mark_idle(self) -> None:
        self.state.set_idle(True)

    def mark_active(self) -> None:
        self.state.set_idle(False)


class _IdlenessAwareOutput(WatermarkOutput):
    def __init__(self, manager: IdlenessManager):
        self.manager = manager
        self.idle = True  # both outputs start idle

    def emit_watermark(self, value: int) -> None:
        self.manager.underlying.emit_watermark(value)
        self.idle = False  # even when the underlying output drops the watermark

    def mark_idle(self) -> None:
        self.idle = True
        self.manager.maybe_mark_idle()

    def mark_active(self) -> None:
        self.idle = False
        self.manager.underlying.mark_active()


class IdlenessManager:
    """WM-12: the reader's output goes IDLE only when both the split-local output (the
    multiplexer's) and the main output (the main generator's) are idle."""

    def __init__(self, underlying: WatermarkOutput):
        self.underlying = underlying
        self.main = _IdlenessAwareOutput(self)
        self.split_local = _IdlenessAwareOutput(self)

    def maybe_mark_idle(self) -> None:
        if self.main.idle and self.split_local.idle:
            self.underlying.mark_idle()


class OutputListener:
    """What the reader's output tells its alignment (Flink's WatermarkUpdateListener, subtask part)."""

    def on_effective_watermark(self, value: int) -> None:
        raise NotImplementedError

    def on_idle(self, idle: bool) -> None:
        raise NotImplementedError


class WatermarkToDataOutput(WatermarkOutput):
    """WM-11: what the reader sends downstream.  A watermark goes only if strictly above every one
    sent before (MIN never goes); the alignment hears of it first, then ACTIVE goes if the output
    was idle, then the watermark.  IDLE goes once per idle spell.  A non-advancing watermark after
    IDLE is dropped and the output stays IDLE (2.3.0)."""

    def __init__(self, send_watermark: Callable[[int], None], send_status: Callable[[bool], None],
                 listener: OutputListener):
        self.send_watermark = send_watermark
        self.send_status = send_status
        self.listener = listener
        self.max_so_far = MIN
        self.idle = False

    def emit_watermark(self, value: int) -> None:
        if value <= self.max_so_far:
            return
        self.max_so_far = value
        self.listener.on_effective_watermark(value)
        self._mark_active()
        self.send_watermark(value)

    def mark_idle(self) -> None:
        if self.idle:
            return
        self.send_status(True)
        self.listener.on_idle(True)
        self.idle = True

    def mark_active(self) -> None:
        self._mark_active()

    def _mark_active(self) -> None:
        if self.idle:
            self.send_status(False)
            self.listener.on_idle(False)
            self.idle = False


# --------------------------------------------------------------------------
# Alignment
# --------------------------------------------------------------------------


class WatermarkSampler:
    """`WatermarkSampler`: a ring of `capacity` samples filled with MIN; each sample pushes the latest
    value and drops the oldest; capacity 0 means the latest value (FLINK-37399)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.ring = [MIN] * capacity
        self.latest = MIN

    def add_latest(self, value: int) -> None:
        self.latest = value

    def sample(self) -> None:
        if self.capacity:
            self.ring.append(self.latest)
            del self.ring[0]

    def oldest(self) -> int:
        return self.ring[0] if self.capacity else self.latest


class ReaderAlignment(SplitListener, OutputListener):
    """The alignment part of one reader (Flink's `SourceOperator`): the maximum allowed watermark,
    the samplers, the wait of the whole reader (WM-25) and the pauses of its splits (WM-26).

    Strict comparisons: the reader waits iff `maxAllowed < oldest sample of its latest watermark`;
    a split that is not idle is paused iff `oldest sample > maxAllowed`.  Idle splits are neither
    paused nor resumed (2.3.0); a lone split is paused like any other (no single-split exemption).
    `enabled` is off without alignment and while the input ends (spec C5: no pausing)."""

    def __init__(self, reader: int, buffer: int, enabled: bool, emit: Emit,
                 on_block: Callable[[bool], None], on_pause: Callable[[list[int], list[int]], None]):
        self.reader = reader
        self.buffer = buffer
        self.enabled = enabled
        self.emit = emit
        self.on_block = on_block  # the reader's main clock (WM-14)
        self.on_pause = on_pause  # (paused, resumed): the reader and the splits' clocks
        self.max_allowed = MAX
        self.latest = WatermarkSampler(buffer)
        self.splits: dict[int, WatermarkSampler] = {}  # in the order the splits were added
        self.idle = False  # the reader's output is IDLE
        self.idle_splits: set[int] = set()
        self.paused: set[int] = set()
        self.blocked = False

    # ---- the splits ------------------------------------------------------

    def add_split(self, split: int) -> None:
        self.splits[split] = WatermarkSampler(self.buffer)

    def split_finished(self, split: int) -> None:
        self.splits.pop(split, None)
        self.idle_splits.discard(split)
        self.paused.discard(split)

    def on_watermark_update(self, split: int, value: int) -> None:
        """A split's partial watermark rose: sampled, and the split maybe paused at once."""
        self.splits[split].add_latest(value)
        if split not in self.idle_splits:
            self.maybe_pause(split)

    def on_idle_update(self, split: int, idle: bool) -> None:
        if idle == (split in self.idle_splits):
            return
        if idle:
            self.idle_splits.add(split)
        else:
            self.idle_splits.discard(split)
            self.maybe_pause(split)

    def maybe_pause(self, split: int) -> None:
        if not self.enabled:
            return
        if self.splits[split].oldest() > self.max_allowed and split not in self.paused:
            self._pause_or_resume([split], [])

    def check_splits(self) -> None:
        if not self.enabled:
            return
        pause, resume = [], []
        for split, sampler in self.splits.items():
            if split in self.idle_splits:
                continue  # 2.3.0: an idle split is neither paused nor resumed
            if sampler.oldest() > self.max_allowed:
                if split not in self.paused:
                    pause.append(split)
            elif split in self.paused:
                resume.append(split)
        if pause or resume:
            self._pause_or_resume(pause, resume)

    def _pause_or_resume(self, pause: list[int], resume: list[int]) -> None:
        self.paused.update(pause)
        self.paused.difference_update(resume)
        self.on_pause(pause, resume)
        for s in pause:
            self.emit("paused", split=s)
        for s in resume:
            self.emit("resumed", split=s)

    # ---- the reader ------------------------------------------------------

    def on_effective_watermark(self, value: int) -> None:
        self.latest.add_latest(value)
        self.check_wait()

    def on_idle(self, idle: bool) -> None:
        self.idle = idle

    def check_wait(self) -> None:
        if not self.enabled:
            return
        wait = self.max_allowed < self.latest.oldest()
        if wait != self.blocked:
            self.blocked = wait
            self.on_block(wait)
            self.emit("blocked" if wait else "unblocked", reader=self.reader)

    def sample(self) -> None:
        """One update interval (WM-22): every sampler takes its latest value, then both checks."""
        for sampler in self.splits.values():
            sampler.sample()
        self.latest.sample()
        self.check_wait()
        self.check_splits()

    def report(self) -> int | None:
        """WM-22: nothing before a first watermark (FLINK-32414), MAX while idle (FLINK-32496)."""
        if self.latest.latest == MIN:
            return None
        return MAX if self.idle else self.latest.latest

    def announce(self, max_allowed: int) -> None:
        """A WatermarkAlignmentEvent: the new maximum (it may go down, WM-24), then both checks."""
        self.max_allowed = max_allowed
        self.check_wait()
        self.check_splits()


class AlignmentCoordinator:
    """WM-23: the latest report of each reader (replaced, may go down); the maximum allowed
    watermark is their minimum plus the drift, saturating at MAX (FLINK-31632), announced to the
    readers that have reported; nothing while none has."""

    def __init__(self, drift: int):
        self.drift = drift
        self.reports: dict[int, int] = {}

    def report(self, reader: int, value: int) -> None:
        self.reports[reader] = value

    def announcement(self) -> tuple[int, list[int]] | None:
        if not self.reports:
            return None
        return min(min(self.reports.values()) + self.drift, MAX), sorted(self.reports)


# --------------------------------------------------------------------------
# The valve downstream
# --------------------------------------------------------------------------


@dataclass
class Channel:
    watermark: int = MIN  # WM-17: every channel starts ACTIVE at MIN, aligned
    idle: bool = False
    aligned: bool = True


@dataclass
class StatusWatermarkValve:
    """`StatusWatermarkValve` of the downstream task, one channel per upstream partition (WM-17..
    WM-21), with FLINK-40475's fix (spec D1): when the last active channel goes idle the maximum
    over all channels is flushed whatever that channel's watermark; after a channel comes back
    (after ACTIVE is sent) the minimum over the aligned channels is emitted if above the last output.
    As in Flink, the aligned channels are kept in a heap (here with stale entries dropped when they
    come to the top), so an input costs O(log channels).

    `emit(kind, **fields)` records `output_watermark` / `output_status`."""

    channels: int
    emit: Emit
    state: list[Channel] = field(default_factory=list)
    last_watermark: int = MIN
    idle: bool = False
    active: int = 0  # channels not idle
    heap: list[tuple[int, int]] = field(default_factory=list)  # (watermark, channel), aligned ones

    def __post_init__(self) -> None:
        self.state = [Channel() for _ in range(self.channels)]
        self.active = self.channels
        self.heap = [(MIN, ch) for ch in range(self.channels)]

    def _align(self, ch: int) -> None:
        self.state[ch].aligned = True
        heapq.heappush(self.heap, (self.state[ch].watermark, ch))

    def input_watermark(self, value: int, ch: int) -> None:
        c = self.state[ch]
        if self.idle or c.idle:  # WM-17: ignored, not recorded
            return
        if value > c.watermark:
            c.watermark = value
            if c.aligned:
                heapq.heappush(self.heap, (value, ch))
            elif value >= self.last_watermark:  # WM-20
                self._align(ch)
            self._emit_aligned_min()

    def input_status(self, idle: bool, ch: int) -> None:
        c = self.state[ch]
        if idle and not c.idle:  # WM-19
            c.idle = True
            c.aligned = False
            self.active -= 1
            if not self.active:
                self._emit_max()  # D1: unconditionally (FLINK-40475)
                self.idle = True
                self.emit("output_status", idle=True)  # WM-21
            elif c.watermark == self.last_watermark:
                self._emit_aligned_min()
        elif not idle and c.idle:  # WM-20
            c.idle = False
            self.active += 1
            if c.watermark >= self.last_watermark:
                self._align(ch)
            if self.idle:
                self.idle = False
                self.emit("output_status", idle=False)  # WM-21
            self._emit_aligned_min()  # D1: after ACTIVE (FLINK-40475)

    def _emit_aligned_min(self) -> None:
        """WM-18: the minimum over the aligned channels, if above the last output."""
        heap = self.heap
        while heap and (not self.state[heap[0][1]].aligned or self.state[heap[0][1]].watermark != heap[0][0]):
            heapq.heappop(heap)  # a channel no longer aligned, or a watermark it has since raised
        if heap and heap[0][0] > self.last_watermark:
            self.last_watermark = heap[0][0]
            self.emit("output_watermark", value=self.last_watermark)

    def _emit_max(self) -> None:
        top = max(c.watermark for c in self.state)
        if top > self.last_watermark:
            self.last_watermark = top
            self.emit("output_watermark", value=top)


# --------------------------------------------------------------------------
# A reader
# --------------------------------------------------------------------------


@dataclass
class Split:
    split: int
    clock: PausableClock
    generator: Generator
    immediate: WatermarkOutput
    deferred: WatermarkOutput


class SourceReader:
    """One reader (the source reader of one Spark partition): its splits, each with its generator,
    clock and partial watermark; the main output with its own generator and clock; the records
    available to it, in the order they became available, read unless the reader waits for
    alignment or the record's split is paused (held back, each split's order kept).

    `send(kind, **fields)` carries `watermark` / `status` downstream (the event, then the valve)."""

    def __init__(self, index: int, config: Any, now: Callable[[], int], emit: Emit,
                 send: Callable[..., None], alignment: bool):
        self.index = index
        self.config = config
        self.now = now
        self.emit = emit
        self.align = ReaderAlignment(index, config.alignment_buffer, alignment, emit,
                                     self._on_block, self._on_pause)
        self.out = WatermarkToDataOutput(lambda v: send("watermark", reader=index, value=v),
                                         lambda idle: send("status", reader=index, idle=idle),
                                         self.align)
        self.idleness = IdlenessManager(self.out)
        self.mux = WatermarkOutputMultiplexer(self.idleness.split_local)
        self.main_clock = PausableClock(now)
        self.main_generator = make_generator(config.bound, config.punctuated, config.idleness,
                                             self.main_clock)
        self.splits: dict[int, Split] = {}  # in the order they were added
        # (split, ts) records and (split, None) split ends, in the order they became available: a
        # split's end is read like its records, so it too waits while the split is paused.
        self.available: list[tuple[int, int | None]] = []
        self.ending = False

    # ---- splits ----------------------------------------------------------

    def add_split(self, split: int) -> None:
        """WM-4, WM-10: the split's output is registered at once, at MIN and active; nothing sent."""
        clock = PausableClock(self.now)
        self.align.add_split(split)
        self.mux.register(split, self.align)
        c = self.config
        self.splits[split] = Split(split, clock, make_generator(c.bound, c.punctuated, c.idleness, clock),
                                   self.mux.immediate(split), self.mux.deferred(split))

    def finish_split(self, split: int) -> None:
        self.available.append((split, None))
        self.pump()

    def _finish(self, split: int) -> None:
        self.emit("split_finished", split=split)
        self.splits.pop(split)
        self.align.split_finished(split)
        self.mux.unregister(split)  # WM-9: nothing emitted, no recombination

    # ---- records ---------------------------------------------------------

    def add_record(self, split: int, ts: int) -> None:
        self.available.append((split, ts))
        self.pump()

    def pump(self) -> None:
        """Read what can be read: nothing while waiting for alignment (WM-25); the records of a
        paused split are held back (WM-26); a record read can make the reader wait at once."""
        while self.ending or not self.align.blocked:
            i = next((i for i, (s, _) in enumerate(self.available)
                      if self.ending or s not in self.align.paused), None)
            if i is None:
                return
            split, ts = self.available.pop(i)
            if ts is None:
                self._finish(split)
            else:
                self.read(split, ts)

    def read(self, split: int, ts: int) -> None:
        """WM-1: the record goes out first, then the split's generator sees it (punctuated: an
        immediate watermark, WM-8)."""
        self.emit("record", split=split, ts=ts)
        s = self.splits[split]
        s.generator.on_event(ts, s.immediate)

    # ---- periodic emission -----------------------------------------------

    def periodic_emit(self) -> None:
        """WM-3: every split's generator into its deferred output, in the order the splits were
        added; one combination; then the main output's generator."""
        for s in list(self.splits.values()):
            s.generator.on_periodic_emit(s.deferred)
        self.mux.on_periodic_emit()
        self.main_generator.on_periodic_emit(self.idleness.main)

    # ---- end of input ----------------------------------------------------

    def read_to_end(self) -> None:
        """Spec C5: everything held back is read, in the order it became available, without pausing."""
        self.ending = True
        self.align.enabled = False
        self.pump()

    def finish_all(self) -> None:
        for split in list(self.splits):
            self._finish(split)

    def end(self, send: Callable[..., None]) -> None:
        """WM-15 with spec D2: MAX past the output, after ACTIVE if the output is idle."""
        if self.out.idle:
            send("status", reader=self.index, idle=False)
            self.out.idle = False
        send("watermark", reader=self.index, value=MAX)

    # ---- alignment hooks -------------------------------------------------

    def _on_block(self, wait: bool) -> None:
        """WM-14: the main clock stands still while the reader waits for alignment."""
        if wait:
            self.main_clock.pause()
        else:
            self.main_clock.unpause()

    def _on_pause(self, pause: list[int], resume: list[int]) -> None:
        for split in pause:
            self.splits[split].clock.pause()
        for split in resume:
            self.splits[split].clock.unpause()

    # ---- state that outlives an incarnation ------------------------------

    def to_json(self) -> dict[str, Any]:
        """What a restart keeps (WM-16: no watermark): the unfinished splits in the order they were
        added, and the records and split ends available and not read."""
        return {"splits": list(self.splits), "available": [list(r) for r in self.available]}

