"""The reference model of the watermarks area (spec/watermarks.md).

Three layers, as Flink 2.3.0 builds them, each a small class:

* per split, a generator (bounded out-of-orderness, periodic or punctuated, optionally with
  idleness) and a partial watermark; per reader, the multiplexer that combines the partial
  watermarks (`Multiplexer`, WatermarkOutputMultiplexer + CombinedWatermarkStatus), the idleness
  manager of its main and split-local outputs, and the output that sends watermarks and statuses
  downstream (`ReaderOutput`, WatermarkToDataOutput);
* downstream, the valve that combines the readers' outputs (`Valve`, StatusWatermarkValve with
  the FLINK-40475 fix: deviation D1);
* alignment (FLIP-182, FLIP-217): not modelled yet (issue 8).

Standard library and `spec` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from spec.areas.watermarks import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    AddSplitStep,
    AlignStep,
    EndStep,
    FailoverStep,
    FinishSplitStep,
    RecordStep,
    TickStep,
    WatermarksConfig,
    event,
)
from spec.schedule import Event, ScheduleError, Step

Emit = Callable[[Event], None]

# --------------------------------------------------------------------------
# Generators (WM-1..WM-3, WM-13)
# --------------------------------------------------------------------------


class Output:
    """What a generator writes to: emitWatermark / markIdle."""

    def emit_watermark(self, value: int) -> None:
        raise NotImplementedError

    def mark_idle(self) -> None:
        raise NotImplementedError


class Generator:
    """Bounded out-of-orderness with bound D (WM-2), periodic or punctuated (WM-8), optionally
    wrapped by withIdleness(T) on the clock `now` (WM-13)."""

    def __init__(self, config: WatermarksConfig, now: Callable[[], int]):
        self.bound = config.bound
        self.punctuated = config.punctuated
        self.max_ts = MIN_WATERMARK + config.bound + 1  # so that the first watermark is MIN (WM-2)
        self.idleness = config.idleness
        self.now = now
        self.counter = 0  # events seen (IdlenessTimer.activity)
        self.last_counter = 0
        self.inactive_since: int | None = None  # the idleness timer; None: not started (choice C2)
        self.idle_now = False

    def watermark(self) -> int:
        return self.max_ts - self.bound - 1

    def on_event(self, ts: int, output: Output) -> None:
        self.max_ts = max(self.max_ts, ts)
        if self.punctuated:  # WM-8: a punctuated generator emits on the event, to the immediate output
            output.emit_watermark(self.watermark())
        self.counter += 1
        self.idle_now = False

    def _timed_out(self) -> bool:
        """IdlenessTimer.checkIfIdle (WM-13): activity resets the timer; the first periodic check
        without activity starts it; idle once more than T has passed since (strictly)."""
        if self.counter != self.last_counter:
            self.last_counter = self.counter
            self.inactive_since = None
            return False
        if self.inactive_since is None:
            self.inactive_since = self.now()
            return False
        return self.now() - self.inactive_since > (self.idleness or 0)

    def on_periodic_emit(self, output: Output) -> None:
        if self.idleness is not None and self._timed_out():
            if not self.idle_now:  # IDLE once per idle spell, and no watermark while idle
                output.mark_idle()
                self.idle_now = True
            return
        if not self.punctuated:
            output.emit_watermark(self.watermark())


# --------------------------------------------------------------------------
# A reader's output: WatermarkToDataOutput and the idleness manager (WM-11, WM-12)
# --------------------------------------------------------------------------


class ReaderOutput:
    """What one reader sends downstream: a watermark only when strictly above every one it sent
    (ACTIVE first if it was idle); IDLE once per idle period (WM-11)."""

    def __init__(self, reader: int, emit: Emit, step: Callable[[], int]):
        self.reader, self.emit, self.step = reader, emit, step
        self.max_so_far = MIN_WATERMARK
        self.idle = False

    def emit_watermark(self, value: int) -> None:
        if value <= self.max_so_far:
            return
        self.max_so_far = value
        if self.idle:
            self.idle = False
            self.emit(event(self.step(), "status", reader=self.reader, idle=False))
        self.emit(event(self.step(), "watermark", reader=self.reader, value=value))

    def mark_idle(self) -> None:
        if not self.idle:
            self.idle = True
            self.emit(event(self.step(), "status", reader=self.reader, idle=True))


class IdlenessAware(Output):
    """One of the two outputs of the idleness manager (main, split-local): both start idle; the
    reader goes IDLE only when both are (WM-12)."""

    def __init__(self, manager: IdlenessManager):
        self.manager = manager
        self.idle = True

    def emit_watermark(self, value: int) -> None:
        self.manager.underlying.emit_watermark(value)
        self.idle = False  # even when the reader's output drops the watermark

    def mark_idle(self) -> None:
        self.idle = True
        if self.manager.main.idle and self.manager.split_local.idle:
            self.manager.underlying.mark_idle()


class IdlenessManager:
    def __init__(self, underlying: ReaderOutput):
        self.underlying = underlying
        self.main = IdlenessAware(self)
        self.split_local = IdlenessAware(self)


# --------------------------------------------------------------------------
# The multiplexer of a reader's splits (WM-4..WM-10)
# --------------------------------------------------------------------------


@dataclass
class Partial:
    """A split's partial watermark: only increases; any watermark set clears idle (WM-5)."""

    watermark: int = MIN_WATERMARK
    idle: bool = False

    def set_watermark(self, value: int) -> bool:
        self.idle = False
        if value > self.watermark:
            self.watermark = value
            return True
        return False


class Multiplexer:
    """The combined watermark of a reader's splits (WM-6): with a split active, the minimum over the
    active ones; with every split idle, the maximum over all, and idle; with no split, nothing.  Sent
    to the split-local output only when strictly higher (WM-7), IDLE re-sent on every combination
    while every split is idle; never ACTIVE."""

    def __init__(self, output: Output):
        self.output = output
        self.partials: dict[int, Partial] = {}  # split -> partial, in registration order
        self.combined = MIN_WATERMARK
        self.idle = False

    def register(self, split: int) -> None:  # WM-10: at MIN, active; nothing emitted
        self.partials[split] = Partial()

    def unregister(self, split: int) -> None:  # WM-9: nothing emitted, no recombination
        del self.partials[split]

    def combine(self) -> None:
        if self.partials:
            parts = list(self.partials.values())
            active = [p.watermark for p in parts if not p.idle]
            self.idle = not active
            candidate = min(active) if active else max(p.watermark for p in parts)
            if candidate > self.combined:
                self.combined = candidate
                self.output.emit_watermark(candidate)
        if self.idle:
            self.output.mark_idle()

    def immediate(self, split: int) -> Output:
        """The on-event output of a split: combines at once when its watermark rose above the
        combined one, and on idleness (WM-8)."""
        mux, partial = self, self.partials[split]

        class Immediate(Output):
            def emit_watermark(self, value: int) -> None:
                if partial.set_watermark(value) and value > mux.combined:
                    mux.combine()

            def mark_idle(self) -> None:
                partial.idle = True
                mux.combine()

        return Immediate()

    def deferred(self, split: int) -> Output:
        """The periodic output of a split: stores only; combined at the next periodic emit (WM-8)."""
        partial = self.partials[split]

        class Deferred(Output):
            def emit_watermark(self, value: int) -> None:
                partial.set_watermark(value)

            def mark_idle(self) -> None:
                partial.idle = True

        return Deferred()


# --------------------------------------------------------------------------
# A reader (source subtask)
# --------------------------------------------------------------------------


@dataclass
class Split:
    reader: int
    generator: Generator
    finished: bool = False


@dataclass
class Reader:
    output: ReaderOutput
    manager: IdlenessManager
    mux: Multiplexer
    main: Generator  # the main output's generator: it sees no records (WM-12)
    splits: list[int] = field(default_factory=list)  # unfinished, in the order they were added


# --------------------------------------------------------------------------
# The valve (WM-17..WM-21), with the FLINK-40475 fix (D1)
# --------------------------------------------------------------------------


@dataclass
class Channel:
    watermark: int = MIN_WATERMARK
    idle: bool = False
    aligned: bool = True


class Valve:
    def __init__(self, channels: int, emit: Emit, step: Callable[[], int]):
        self.channels = [Channel() for _ in range(channels)]
        self.last = MIN_WATERMARK
        self.idle = False
        self.emit, self.step = emit, step

    def _output(self, value: int) -> None:
        self.last = value
        self.emit(event(self.step(), "output_watermark", value=value))

    def _status(self, idle: bool) -> None:
        self.idle = idle
        self.emit(event(self.step(), "output_status", idle=idle))

    def _new_min(self) -> None:
        """WM-18: the minimum over the aligned channels, when above the last output."""
        aligned = [c.watermark for c in self.channels if c.aligned]
        if aligned and min(aligned) > self.last:
            self._output(min(aligned))

    def watermark(self, channel: int, value: int) -> None:
        c = self.channels[channel]
        if self.idle or c.idle or value <= c.watermark:  # WM-17
            return
        c.watermark = value
        if not c.aligned and value >= self.last:  # WM-20
            c.aligned = True
        self._new_min()

    def status(self, channel: int, idle: bool) -> None:
        c = self.channels[channel]
        if idle and not c.idle:
            c.idle, c.aligned = True, False  # WM-19: it leaves the minimum
            if not any(not x.idle for x in self.channels):
                top = max(x.watermark for x in self.channels)  # D1: whichever channel went idle last
                if top > self.last:
                    self._output(top)
                self._status(True)  # WM-21
            elif c.watermark == self.last:
                self._new_min()
        elif not idle and c.idle:
            c.idle = False
            if c.watermark >= self.last:  # WM-20
                c.aligned = True
            if self.idle:
                self._status(False)  # WM-21
            self._new_min()  # D1: a channel that comes back aligned can move the output


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------


class Model:
    def __init__(self, config: WatermarksConfig):
        self.config = config
        self.now = 0  # processing time, ms
        self.split_reader: dict[int, int] = {}  # every split added, and its reader
        self._start()

    def _start(self) -> None:
        """A fresh job (at the start and after a failover): every watermark at MIN (WM-16)."""
        self.events: list[Event] = []
        self.step_index = -1
        self.valve = Valve(self.config.readers, self.events.append, lambda: self.step_index)
        self.readers = [self._reader(r) for r in range(self.config.readers)]
        self.split_gens: dict[int, Generator] = {}
        self.next_emit = self.now + self.config.interval  # the periodic timer starts when the job does

    def _reader(self, r: int) -> Reader:
        step = lambda: self.step_index  # noqa: E731

        def emit(e: Event) -> None:  # what a reader sends reaches the valve's channel r at once
            self.events.append(e)
            if e.event == "watermark":
                self.valve.watermark(r, e.value)
            else:
                self.valve.status(r, e.idle)

        output = ReaderOutput(r, emit, step)
        manager = IdlenessManager(output)
        main = Generator(self.config, lambda: self.now)
        return Reader(output, manager, Multiplexer(manager.split_local), main)

    def _add(self, reader: int, split: int) -> None:
        """WM-4: the split's output is registered when it is added, with its own generator."""
        self.readers[reader].splits.append(split)
        self.readers[reader].mux.register(split)
        self.split_gens[split] = Generator(self.config, lambda: self.now)

    def _periodic_emit(self) -> None:
        """WM-3: per reader in index order: each split's generator in the order added (deferred),
        then the multiplexer combines, then the main output's generator."""
        for reader in self.readers:
            for split in reader.splits:
                self.split_gens[split].on_periodic_emit(reader.mux.deferred(split))
            reader.mux.combine()
            reader.main.on_periodic_emit(reader.manager.main)

    def _finish(self, split: int) -> None:
        """WM-9: the split's output is released; nothing is emitted."""
        reader = self.readers[self.split_reader[split]]
        reader.splits.remove(split)
        reader.mux.unregister(split)
        del self.split_gens[split]
        self.events.append(event(self.step_index, "split_finished", split=split))

    def apply(self, index: int, step: Step) -> list[Event]:
        self.step_index = index
        self.events.clear()
        if isinstance(step, AddSplitStep):
            self.split_reader[step.split] = step.reader
            self._add(step.reader, step.split)
        elif isinstance(step, RecordStep):
            # WM-1: the record first, then the generator sees it
            self.events.append(event(index, "record", split=step.split, ts=step.ts))
            reader = self.readers[self.split_reader[step.split]]
            self.split_gens[step.split].on_event(step.ts, reader.mux.immediate(step.split))
        elif isinstance(step, TickStep):
            target = self.now + step.ms
            while self.config.interval > 0 and self.next_emit <= target:
                self.now = self.next_emit
                self._periodic_emit()
                self.next_emit += self.config.interval
            self.now = target
        elif isinstance(step, FinishSplitStep):
            self._finish(step.split)
        elif isinstance(step, FailoverStep):
            splits = [(r, s) for r, reader in enumerate(self.readers) for s in reader.splits]
            self._start()
            self.step_index = index
            self.events.append(event(index, "restarted"))
            for r, s in splits:  # WM-4, WM-16: restored splits registered at once, at MIN
                self._add(r, s)
        elif isinstance(step, EndStep):
            for reader in self.readers:
                for split in list(reader.splits):
                    self._finish(split)
            for r, reader in enumerate(self.readers):  # WM-15; D2: ACTIVE first if it was idle
                if reader.output.idle:
                    reader.output.idle = False
                    reader.output.emit(event(index, "status", reader=r, idle=False))
                reader.output.emit(event(index, "watermark", reader=r, value=MAX_WATERMARK))
        elif isinstance(step, AlignStep):
            raise ScheduleError(index, "WM-22", "alignment is not modelled yet", step.op)
        return list(self.events)
