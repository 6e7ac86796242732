"""SRC-31's freedom in the checker (conformance/areas/sources_orders.py): a reader restored from
several old readers' states may hold their blocks in any order, and reads its splits in that order
(SRC-39); the order inside a block, and one order per reader and restore point, are not free."""

from __future__ import annotations

from flink_semantics.conformance.checker import compare
from flink_semantics.reference.sources import Model
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.areas.sources import (
    BarrierStep,
    CheckpointStep,
    CompleteStep,
    FailEnumeratorStep,
    PollStep,
    RegisterStep,
    RequestStep,
    RescaleStep,
    SourcesConfig,
)
from flink_semantics.spec.schedule import Event, Schedule, Step, Trace

# r0 holds s0 then s1, r1 holds s2; a checkpoint; a rescale to one reader, which registers and reads.
STEPS: tuple[Step, ...] = (
    RegisterStep(0), RegisterStep(1), RequestStep(0), RequestStep(0), RequestStep(1), CheckpointStep(1),
    BarrierStep(1), CompleteStep(1), RescaleStep(1), RegisterStep(0), PollStep(0, 1), PollStep(0, 1))
SCHEDULE = Schedule("sources", SourcesConfig(readers=2, splits=(1, 1, 1)), STEPS)


def _trace(schedule: Schedule, orders: dict[tuple[int, int, int], tuple[int, ...]]) -> Trace:
    model = Model(schedule.config)
    model.block_orders.update(orders)
    return Trace(tuple(e for i, s in enumerate(schedule.steps) for e in model.apply(i, s)))


def _registered_at(trace: Trace, step: int, splits: tuple[tuple[int, int], ...]) -> Trace:
    """The trace with the `registered` event of `step` listing `splits` instead."""
    return Trace(tuple(Event(e.step, e.event, (e.reader, splits), e.kind)
                       if e.step == step and e.event == "registered" else e for e in trace.events))


def test_the_blocks_in_another_order_are_accepted_and_read_in_it() -> None:
    """Checkpoint 1, one reader, its blocks r1's [s2] then r0's [s0, s1]: it registers with s2 first and
    reads s2 first (SRC-39); the reference's trace differs, the checker accepts it."""
    other = _trace(SCHEDULE, {(1, 1, 0): (1, 0)})
    assert [e.splits for e in other.events if e.step == 9] == [((2, 0), (0, 0), (1, 0))]
    assert [e.split for e in other.events if e.event == "record"] == [2, 0]
    reference = _trace(SCHEDULE, {})
    assert other != reference
    assert compare(SCHEDULE, reference, other, SCRIPTED) is None


def test_splits_reordered_inside_a_block_break_src31() -> None:
    reference = _trace(SCHEDULE, {})
    wrong = _registered_at(reference, 9, ((1, 0), (0, 0), (2, 0)))  # s1 before s0: r0's block reordered
    mismatch = compare(SCHEDULE, reference, wrong, SCRIPTED)
    assert mismatch is not None and mismatch.step == 9 and mismatch.rules == ("SRC-31",)


def test_a_restore_from_the_same_point_keeps_its_order() -> None:
    """A global failover after the rescale restores from checkpoint 1 at one reader again: the same
    handles, so the same order; another order there is not legal."""
    steps = (*STEPS[:10], FailEnumeratorStep(), RegisterStep(0))
    schedule = Schedule("sources", SCHEDULE.config, steps)
    same = _trace(schedule, {(1, 1, 0): (1, 0)})
    reference = _trace(schedule, {})
    assert compare(schedule, reference, same, SCRIPTED) is None
    switched = _registered_at(same, 11, ((0, 0), (1, 0), (2, 0)))  # back to old reader order
    mismatch = compare(schedule, reference, switched, SCRIPTED)
    assert mismatch is not None and mismatch.step == 11
