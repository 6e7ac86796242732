"""Deliberately wrong adapters of the watermarks area, to show that the suite catches them
(tests/test_wrong_watermarks.py).

Each runs the reference model with one rule broken (a subclass of `reference.watermarks.Model`, or
of one of its parts); they are test doubles, so unlike real adapters they may import `reference`.
Schedules of other areas go to the reference unchanged.
"""

from __future__ import annotations

from flink_semantics.conformance.strength import Mutant
from flink_semantics.reference.watermarks import Model, Multiplexer, Reader, ReaderOutput, Valve
from flink_semantics.spec.areas.watermarks import (
    MIN_WATERMARK,
    FailoverStep,
    FinishSplitStep,
    RecordStep,
    event,
)
from flink_semantics.spec.schedule import Event, Step

from tests.wrong_area import WrongArea


class WrongWatermarks(WrongArea):
    """Runs watermarks schedules on `model` (a broken Model), the rest on the reference."""

    area = "watermarks"
    model = Model


# ---- the valve of Flink 2.3.0, before FLINK-40475 (breaks WM-19, WM-20 as this spec has them: D1).
# Each half of the fix is left out on its own by one mutant: the flush when the last channel goes idle
# (WM-19), the minimum re-derived when a channel comes back (WM-20).  Both together are 2.3.0's valve
# (`FlinkValve230`, checked against Flink's own class by tests/test_flink_valve_watermarks.py); it is
# not in MUTANTS, since its first divergence may be either half, so its report names either rule.


class _Valve230(Valve):
    flush_unfixed = True  # the maximum is flushed only if the last channel to go idle held the output
    stall_unfixed = True  # a channel that comes back does not re-derive the minimum

    def status(self, channel: int, idle: bool) -> None:
        c = self.channels[channel]
        if idle and not c.idle:
            c.idle, c.aligned = True, False
            if not any(not x.idle for x in self.channels):
                if not self.flush_unfixed or c.watermark == self.last:  # 2.3.0: depends on the order
                    top = max(x.watermark for x in self.channels)
                    if top > self.last:
                        self._output(top)
                self._status(True)
            elif c.watermark == self.last:
                self._new_min()
        elif not idle and c.idle:
            c.idle = False
            if c.watermark >= self.last:
                c.aligned = True
            if self.idle:
                self._status(False)
            if not self.stall_unfixed:  # 2.3.0: no new minimum after a channel comes back
                self._new_min()


class _FlushUnfixed(_Valve230):
    stall_unfixed = False


class _StallUnfixed(_Valve230):
    flush_unfixed = False


class _WithValve230(Model):
    valve_type: type[Valve] = _Valve230

    def _start(self) -> None:
        super()._start()
        self.valve = self.valve_type(self.config.readers, self.events.append, lambda: self.step_index)


class _WithFlushUnfixed(_WithValve230):
    valve_type = _FlushUnfixed


class _WithStallUnfixed(_WithValve230):
    valve_type = _StallUnfixed


class FlinkValve230(WrongWatermarks):
    """The valve of Flink 2.3.0 (FLINK-40475 unfixed): breaks WM-19/WM-20 of this spec (D1)."""

    model = _WithValve230


class FlinkValve230Flush(WrongWatermarks):
    """Flink 2.3.0's flush only: when the last active channel goes idle, the maximum goes out only if
    that channel's watermark is the last output (breaks WM-19, D1)."""

    model = _WithFlushUnfixed


class FlinkValve230Stall(WrongWatermarks):
    """Flink 2.3.0's stall only: a channel that comes back from idle does not re-derive the minimum,
    so one that comes back as the only aligned channel leaves the output where it was until its next
    watermark (breaks WM-20, D1)."""

    model = _WithStallUnfixed


# ---- idle splits counted in the minimum (breaks WM-6)


class _CountsIdle(Multiplexer):
    def combine(self) -> None:
        if self.partials:
            parts = list(self.partials.values())
            self.idle = all(p.idle for p in parts)
            candidate = min(p.watermark for p in parts)  # idle splits hold the others back
            if candidate > self.combined:
                self.combined = candidate
                self.output.emit_watermark(candidate)
        if self.idle:
            self.output.mark_idle()


class _CountsIdleSplits(Model):
    def _reader(self, r: int) -> Reader:
        reader = super()._reader(r)
        reader.mux = _CountsIdle(reader.manager.split_local)
        return reader


class IdleSplitsCounted(WrongWatermarks):
    """Idle splits stay in the reader's minimum (breaks WM-6)."""

    model = _CountsIdleSplits


# ---- the combination sent again at every periodic emission, even unchanged (breaks WM-7, WM-11)


class _Resends(Multiplexer):
    def combine(self) -> None:
        if self.partials:
            parts = list(self.partials.values())
            active = [p.watermark for p in parts if not p.idle]
            self.idle = not active
            candidate = min(active) if active else max(p.watermark for p in parts)
            if candidate >= self.combined and candidate != MIN_WATERMARK:  # should be >
                self.combined = candidate
                self.output.emit_watermark(candidate)
        if self.idle:
            self.output.mark_idle()


class _SendsEqual(ReaderOutput):
    def emit_watermark(self, value: int) -> None:
        if value == self.max_so_far and value != MIN_WATERMARK:  # should be dropped
            self.emit(event(self.step(), "watermark", reader=self.reader, value=value))
        else:
            super().emit_watermark(value)


class _EqualWatermarks(Model):
    def _reader(self, r: int) -> Reader:
        reader = super()._reader(r)
        reader.mux = _Resends(reader.manager.split_local)
        reader.output.__class__ = _SendsEqual
        return reader


class SendsEqualWatermarks(WrongWatermarks):
    """A reader sends its watermark at every periodic emission, also when it did not rise (breaks
    WM-7 inside the reader, and WM-11, which the trace shows: a watermark not above the last one the
    reader sent; the verdict table fails WM-11 and leaves WM-7 inconclusive)."""

    model = _EqualWatermarks


# ---- watermarks kept across a failover (breaks WM-16)


class _KeepsWatermarks(Model):
    def apply(self, index: int, step: Step) -> list[Event]:
        if not isinstance(step, FailoverStep):
            return super().apply(index, step)
        valve, sent = self.valve, [(r.output.max_so_far, r.output.idle) for r in self.readers]
        events = super().apply(index, step)
        self.valve = valve  # as if restored from a checkpoint
        for reader, (top, idle) in zip(self.readers, sent):
            reader.output.max_so_far, reader.output.idle = top, idle
        return events


class RestoresWatermarks(WrongWatermarks):
    """A failover restores the readers' and the valve's watermarks (breaks WM-16)."""

    model = _KeepsWatermarks


# ---- a split's output created at its first record (breaks WM-4, WM-10: FLINK-26018)


class _LazySplitOutputs(Model):
    def __init__(self, config):  # type: ignore[no-untyped-def]
        self.lazy: dict[int, int] = {}
        super().__init__(config)

    def _add(self, r: int, split: int) -> None:
        self.lazy[split] = r  # registered later, at its first record

    def apply(self, index: int, step: Step) -> list[Event]:
        if isinstance(step, (RecordStep, FinishSplitStep)) and step.split in self.lazy:
            Model._add(self, self.lazy.pop(step.split), step.split)
        return super().apply(index, step)


class LazySplitOutputs(WrongWatermarks):
    """A split's output is registered at its first record, not when the split is added (breaks WM-4,
    WM-10)."""

    model = _LazySplitOutputs


# ---- a reader blocks when its watermark equals the allowed maximum (breaks WM-25)


class _BlocksWhenEqual(Model):
    def _waits(self, reader: Reader) -> bool:
        return reader.max_allowed <= reader.latest.oldest()  # should be <


class BlocksWhenEqual(WrongWatermarks):
    """A reader stops reading when its watermark equals the allowed maximum (breaks WM-25)."""

    model = _BlocksWhenEqual


# ---- idle splits paused and resumed by alignment (breaks WM-26: in 2.3.0 they are neither)


class _PausesIdleSplits(Model):
    def _check_splits(self, reader: Reader) -> None:
        idle = {split: state.idle for split, state in reader.splits.items()}
        for state in reader.splits.values():
            state.idle = False  # checked like the active ones
        try:
            super()._check_splits(reader)
        finally:
            for split, was in idle.items():
                reader.splits[split].idle = was


class PausesIdleSplits(WrongWatermarks):
    """An alignment round pauses (and resumes) idle splits too, where 2.3.0 leaves them alone
    (breaks WM-26).  Caught only where idleness and split alignment meet: a split idle while its
    watermark is above the allowed maximum."""

    model = _PausesIdleSplits


# The registry (`strength`, tests/test_wrong_watermarks.py): the property that
# must catch each mutant, and a rule its failure report must name.
MUTANTS = [
    Mutant("FlinkValve230Flush", "test_valve", "WM-19"),
    Mutant("FlinkValve230Stall", "test_valve", "WM-20"),
    Mutant("IdleSplitsCounted", "test_idleness", "WM-6"),
    Mutant("SendsEqualWatermarks", "test_generation_and_combination", "WM-11"),
    Mutant("RestoresWatermarks", "test_failover", "WM-16"),
    Mutant("LazySplitOutputs", "test_generation_and_combination", "WM-4"),
    Mutant("BlocksWhenEqual", "test_alignment", "WM-25"),  # SHOULD: fails the run only with --strict
    Mutant("PausesIdleSplits", "test_alignment", "WM-26"),  # SHOULD, as above
]
