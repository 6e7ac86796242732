"""Deliberately wrong adapters of the mini-batch area, to show that the suite catches them
(tests/test_wrong_mini_batch.py).

Each runs the reference model with one rule broken (a subclass of `reference.mini_batch.Model`);
they are test doubles, so unlike real adapters they may import `reference`.  Schedules of other
areas go to the reference unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from flink_semantics.conformance.areas.mini_batch import UnboundedModel
from flink_semantics.conformance.strength import Mutant
from flink_semantics.reference.mini_batch import RETRACTIONS, Acc, Bundle, Model
from flink_semantics.spec.areas.mini_batch import MiniBatchConfig, event

from tests.wrong_area import WrongArea


class WrongMiniBatch(WrongArea):
    """Runs mini-batch schedules on `model` (a broken Model), the rest on the reference."""

    area = "mini_batch"
    model = Model


# ---- the size trigger counts keys instead of records (breaks MB-10)


class _KeyCountingBundle(Bundle):
    def add(self, index: int, key: int, item: object) -> None:
        if key not in self.items:
            self.count += 1
        self.items.setdefault(key, []).append(item)
        if self.count >= self.size:
            self.finish(index)


class _SizeCountsKeys(Model):
    def _open(self) -> None:
        super()._open()
        self.bundle = _KeyCountingBundle(self.c.size, self.bundle._finish)
        self.local = _KeyCountingBundle(self.c.size, self.local._finish)


class SizeCountsKeys(WrongMiniBatch):
    model = _SizeCountsKeys


# ---- the count is reset only when the size finishes a bundle (breaks MB-11)


class _CountingOnBundle(Bundle):
    def add(self, index: int, key: int, item: object) -> None:
        self.items.setdefault(key, []).append(item)
        self.count += 1
        if self.count >= self.size:
            self.count = 0
            self.finish(index)

    def finish(self, index: int) -> None:
        count = self.count
        super().finish(index)
        self.count = count


class _CountNotReset(Model):
    def _open(self) -> None:
        super()._open()
        self.bundle = _CountingOnBundle(self.c.size, self.bundle._finish)
        self.local = _CountingOnBundle(self.c.size, self.local._finish)


class CountNotReset(WrongMiniBatch):
    model = _CountNotReset


# ---- the watermark is forwarded without finishing the bundle (breaks MB-12)


class _NoFinishBeforeWatermark(Model):
    def _to_exchange(self, index: int, ts: int) -> None:
        if ts <= self.valve_last:
            return
        self.valve_last = ts
        self.out.append(event(index, "watermark", timestamp=ts))


class NoFinishBeforeWatermark(WrongMiniBatch):
    model = _NoFinishBeforeWatermark


# ---- -U emitted although the sink did not ask for update-before (breaks MB-20)


class _UpdateBeforeAlways(Model):
    def __init__(self, config: MiniBatchConfig):
        super().__init__(replace(config, update_before=True))


class UpdateBeforeAlways(WrongMiniBatch):
    model = _UpdateBeforeAlways


# ---- nothing emitted for an unchanged result with state retention on: before FLINK-33936 (MB-22)


class _NoRefreshWithTtl(Model):
    def __init__(self, config: MiniBatchConfig):
        super().__init__(replace(config, ttl=False))


class NoRefreshWithTtl(WrongMiniBatch):
    model = _NoRefreshWithTtl


# ---- a retraction for a key without state is applied (breaks MB-18, FLINK-10674)


class _RetractsStatelessKeys(Model):
    def _apply_rows(self, index: int, key: int, rows: list[tuple[str, int]]) -> None:
        acc = self.state.get(key)
        prev = acc.value() if acc is not None else None
        acc = acc.copy() if acc is not None else Acc()
        for kind, v in rows:
            acc.apply(kind, v)
        self._result(index, key, prev, acc)


class RetractsStatelessKeys(WrongMiniBatch):
    model = _RetractsStatelessKeys


# ---- a key with nothing but leading retractions ends the bundle: FLINK-35661's `return` (MB-18)


class _StopsAtRetractedKey(Model):
    def _finish_one_phase(self, items: dict[int, list], index: int) -> None:
        for key, rows in items.items():
            if key not in self.state and all(kind in RETRACTIONS for kind, _ in rows):
                return  # the keys after it are lost with the bundle
            self._apply_rows(index, key, rows)


class StopsAtRetractedKey(WrongMiniBatch):
    model = _StopsAtRetractedKey


# ---- the assigner's watermarks pass while the input is idle (breaks MB-15)


class _IdleKeepsWatermarks(Model):
    def _assigner_emits(self, index: int, ts: int) -> None:
        if self.two_phase:
            self.local.finish(index)
        self._to_exchange(index, ts)


class IdleKeepsWatermarks(WrongMiniBatch):
    model = _IdleKeepsWatermarks


# ---- the valve remembers the last watermark across a restore (breaks MB-29)


class _ValveSurvivesRestore(Model):
    def _open(self) -> None:
        last = getattr(self, "valve_last", -(2**63))
        super()._open()
        self.valve_last = last


class ValveSurvivesRestore(WrongMiniBatch):
    model = _ValveSurvivesRestore


# ---- SUM in Python's unbounded integers: a sum beyond a long does not wrap around (breaks MB-30)


class SumDoesNotWrap(WrongMiniBatch):
    model = UnboundedModel  # the coverage state SUM_WRAPS is where it differs from the reference


# ---- two-phase: a local flush at a watermark, barrier or end of input adds its accumulators to the
# global bundle without asking the global size trigger, which fires only at its next input (breaks
# MB-10: the global bundle counts every local accumulator and finishes as soon as it reaches the size)


class _FlushSkipsGlobalTrigger(Model):
    def _open(self) -> None:
        super()._open()
        self.sizing = False
        add = self.local.add

        def sized_add(index: int, key: int, item: object) -> None:
            self.sizing = True  # a local finish now is the local size trigger's
            try:
                add(index, key, item)
            finally:
                self.sizing = False

        self.local.add = sized_add  # type: ignore[method-assign]

    def _finish_local(self, items: dict[int, list], index: int) -> None:
        if self.sizing:
            super()._finish_local(items, index)
            return
        for key, rows in items.items():
            acc = self.accumulator()
            for kind, v in rows:
                acc.apply(kind, v)
            self.bundle.items.setdefault(key, []).append(acc)
            self.bundle.count += 1  # counted, but the trigger is not asked


class FlushSkipsGlobalTrigger(WrongMiniBatch):
    model = _FlushSkipsGlobalTrigger


# The registry (`strength`, tests/test_wrong_mini_batch.py): the property that
# must catch each mutant, and a rule its failure report must name.
MUTANTS = [
    Mutant("SizeCountsKeys", "test_processing_time_bundles", "MB-10"),
    Mutant("CountNotReset", "test_processing_time_bundles", "MB-11"),
    Mutant("NoFinishBeforeWatermark", "test_row_time_bundles", "MB-12"),
    Mutant("UpdateBeforeAlways", "test_per_row_aggregation", "MB-20"),
    Mutant("NoRefreshWithTtl", "test_processing_time_bundles", "MB-22"),
    Mutant("RetractsStatelessKeys", "test_per_row_aggregation", "MB-18"),
    Mutant("StopsAtRetractedKey", "test_processing_time_bundles", "MB-18"),
    Mutant("IdleKeepsWatermarks", "test_idle_statuses", "MB-15"),
    Mutant("ValveSurvivesRestore", "test_everything_together", "MB-29"),
    Mutant("SumDoesNotWrap", "test_per_row_changelog", "MB-30"),
    Mutant("FlushSkipsGlobalTrigger", "test_local_global", "MB-10"),
]


class SizeCountsKeysKnown(SizeCountsKeys):
    """SizeCountsKeys with every mini-batch rule listed as an expected failure: its divergences are
    known, so they stay out of the corpus (tests/test_corpus_coverage_progress.py)."""

    expected_failures = {f"MB-{i}": "a test double's known difference" for i in range(1, 33)}
