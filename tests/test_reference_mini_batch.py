"""Unit tests of the mini-batch reference model's arithmetic and of the suite's MB-31/MB-32
invariants (the rules' examples are checked by tests/test_spec_examples.py)."""

from __future__ import annotations

from flink_semantics.conformance.areas.mini_batch import compaction_problems, final_results
from flink_semantics.conformance.examples import notation
from flink_semantics.reference.mini_batch import Acc, batch_start, jlong, jrem
from flink_semantics.spec.schedule import Trace

MB = notation("mini_batch")
MAX = 2**63 - 1
MIN = -(2**63)


def test_java_long_arithmetic() -> None:
    assert jlong(MAX + 1) == MIN and jlong(MIN - 1) == MAX and jlong(5) == 5
    assert (jrem(7, 3), jrem(-7, 3), jrem(-9, 3)) == (1, -1, 0)  # the dividend's sign, as Java's %


def test_batch_start() -> None:
    """MB-6's start(t) = t - ((t + I) mod I), by hand: a batch starts at a multiple of I for t >= 0;
    below zero Java's remainder keeps the sign; at Long.MAX_VALUE the sum wraps around."""
    assert [batch_start(t, 10) for t in (0, 9, 10, 25)] == [0, 0, 10, 20]
    assert batch_start(-5, 10) == -10  # -5 - ((5) % 10)
    assert batch_start(-15, 10) == -10  # -15 - ((-5) % 10) = -15 + 5
    # MAX + 10 wraps to MIN + 9, whose remainder is -9; MAX + 9 wraps to MIN + 8.
    assert batch_start(MAX, 10) == MIN + 8


def test_accumulators_merge_negative_multiplicities() -> None:
    """A local accumulator of a bundle that only retracts holds a negative count (MB-25); merged
    into the state's it takes the value back (MB-26)."""
    state, local = Acc(), Acc()
    for v in (5, 2, 9):
        state.apply("+I", v)
    local.apply("-U", 9)
    local.apply("+U", 4)
    assert local.value()[:2] == (0, -5)
    state.merge(local)
    assert state.value() == (3, 11, 2, 5)


def _trace(*events: str) -> Trace:
    return MB.trace("\n".join(events))


def test_final_results_apply_the_changelog() -> None:
    t = _trace("@0 +I k1 count=1 sum=5 min=5 max=5", "@1 +I k2 count=1 sum=1 min=1 max=1",
               "@2 -U k1 count=1 sum=5 min=5 max=5", "@2 +U k1 count=2 sum=7 min=2 max=5",
               "@3 -D k2 count=1 sum=1 min=1 max=1")
    assert final_results(t) == {1: (2, 7, 2, 5)}


def test_compaction_problems_can_fail() -> None:
    per_row = _trace("@0 +I k1 count=1 sum=1 min=1 max=1", "@1 +U k1 count=2 sum=3 min=1 max=2")
    assert compaction_problems(per_row, _trace("@1 +I k1 count=2 sum=3 min=1 max=2"), True) == []
    # a result the per-row aggregation never reaches
    assert compaction_problems(per_row, _trace("@1 +I k1 count=2 sum=4 min=1 max=3"), True)
    # results out of order
    assert compaction_problems(per_row, _trace("@1 +I k1 count=2 sum=3 min=1 max=2",
                                               "@2 +U k1 count=1 sum=1 min=1 max=1"), True)
    # two changes of a key in one bundle (no marker between them in one step)
    twice = _trace("@1 +I k1 count=1 sum=1 min=1 max=1", "@1 +U k1 count=2 sum=3 min=1 max=2")
    assert compaction_problems(per_row, twice, True)
    assert not compaction_problems(per_row, twice, False)  # two-phase: global bundles of one step
