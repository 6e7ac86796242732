"""Unit tests of the mini-batch reference model's arithmetic, of the area's long keys and values, and
of the suite's MB-31/MB-32 invariants (the rules' examples are checked by
tests/test_spec_examples.py)."""

from __future__ import annotations

from typing import Any

import pytest
from flink_semantics.conformance import coverage
from flink_semantics.conformance.areas.mini_batch import SUM_WRAPS, compaction_problems, final_results
from flink_semantics.conformance.examples import notation
from flink_semantics.reference import expected_trace
from flink_semantics.reference.mini_batch import Acc, batch_start, jlong, jrem
from flink_semantics.spec.schedule import ScheduleError, Trace, schedule_from_dict

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


# --------------------------------------------------------------------------
# BIGINT keys and values; SUM wraps around (MB-30)
# --------------------------------------------------------------------------


def test_sum_wraps_around_as_a_java_long() -> None:
    """MB-30 by hand: 2^63 - 1 + 1 is -2^63; -2^63 - 1 is 2^63 - 1; retracting the 1 takes the
    wrapped sum back; 2^62 + 2^62 + 2^62 + 2^62 is 2^64, which wraps to 0."""
    acc = Acc()
    acc.apply("+I", MAX)
    acc.apply("+I", 1)
    assert acc.value() == (2, MIN, 1, MAX)
    acc.apply("-U", 1)
    assert acc.value() == (1, MAX, MAX, MAX)
    low = Acc()
    low.apply("+I", MIN)
    low.apply("+U", -1)
    assert low.value() == (2, MAX, MIN, -1)
    quarters = Acc()
    for _ in range(4):
        quarters.apply("+I", 2**62)
    assert quarters.value() == (4, 0, 2**62, 2**62)


def test_merged_local_sums_wrap_to_the_same_result() -> None:
    """MB-26, MB-30: two local accumulators of MAX + MAX (each -2 after wrapping) merged into a state
    of 4: 4 + 4 * (2^63 - 1) = 2^65 + 4 - 4 = 2^65, which is 0 modulo 2^64."""
    state = Acc()
    state.apply("+I", 4)
    for _ in range(2):
        local = Acc()
        local.apply("+I", MAX)
        local.apply("+I", MAX)
        assert local.sum == -2
        state.merge(local)
    assert state.value() == (5, 0, 4, MAX)


def _run(config: dict[str, Any], steps: str) -> list[str]:
    s = MB.schedule(config, steps)
    return [MB.render(e) for e in expected_trace(s).events]


def test_the_issue_s_schedule_one_and_two_phase() -> None:
    """Issue 29: `+I k1 2^63 - 1` then `+I k1 1` give sum -2^63, with mini-batch off, on, and two-phase."""
    rows = "row k1 +I 9223372036854775807\nrow k1 +I 1\nend"
    off = _run({}, rows)
    assert off[1] == "@1 +U k1 count=2 sum=-9223372036854775808 min=1 max=9223372036854775807"
    on = {"enabled": True, "allow_latency": 100, "size": 100}
    want = "@2 +I k1 count=2 sum=-9223372036854775808 min=1 max=9223372036854775807"
    assert _run(on, rows)[0] == want
    assert _run({**on, "two_phase": True}, rows)[0] == want


def test_negative_and_extreme_keys_are_grouped() -> None:
    """Any long is a key (Flink groups any BIGINT): -1, Long.MIN_VALUE and Long.MAX_VALUE are three
    groups; the notation writes them k-1, k-9223372036854775808."""
    trace = _run({"update_before": True}, "row k-1 +I 5\nrow k-9223372036854775808 +I 6\n"
                                          "row k9223372036854775807 +I 7\nrow k-1 -U 5")
    assert trace == ["@0 +I k-1 count=1 sum=5 min=5 max=5",
                     "@1 +I k-9223372036854775808 count=1 sum=6 min=6 max=6",
                     "@2 +I k9223372036854775807 count=1 sum=7 min=7 max=7",
                     "@3 -D k-1 count=1 sum=5 min=5 max=5"]


def _row(key: Any, value: Any) -> dict[str, Any]:
    return {"op": "row", "key": key, "kind": "+I", "value": value}


@pytest.mark.parametrize("key, value", [(2**63, 1), (-(2**63) - 1, 1), (1, 2**63), (1, 2**70),
                                        (1, -(2**63) - 1), (1, True), (True, 1), (1, 1.5)])
def test_a_key_or_value_that_is_not_a_long_is_refused(key: Any, value: Any) -> None:
    """SCH-2: keys and values are BIGINT: beyond the long range, a boolean or a float is refused at
    its step."""
    d = {"area": "mini_batch", "config": {}, "steps": [_row(1, 1), _row(key, value)]}
    with pytest.raises(ScheduleError) as e:
        schedule_from_dict(d)
    assert (e.value.step, e.value.rule) == (1, "SCH-2"), e.value


def test_the_long_bounds_themselves_are_accepted() -> None:
    d = {"area": "mini_batch", "config": {}, "steps": [_row(-(2**63), 2**63 - 1), _row(2**63 - 1, -(2**63))]}
    assert len(expected_trace(schedule_from_dict(d)).events) == 2


def test_coverage_names_a_wrapped_sum_only_when_a_result_shows_it() -> None:
    """SUM_WRAPS: a result that wraps; not a sum that leaves the range and comes back inside one
    bundle (its result never shows it), nor one that stays in range."""
    wraps = MB.schedule({}, "row k1 +I 9223372036854775807\nrow k1 +I 1")
    inside = MB.schedule({"enabled": True, "allow_latency": 100, "size": 3},
                         "row k1 +I 9223372036854775807\nrow k1 +I 1\nrow k1 -U 1")
    near = MB.schedule({}, "row k1 +I 9223372036854775806\nrow k1 +I 1")
    assert SUM_WRAPS in coverage.reached(wraps)
    assert SUM_WRAPS not in coverage.reached(inside)
    assert SUM_WRAPS not in coverage.reached(near)
