"""The mini-batch area's blame hook (conformance/areas/mini_batch_blame.py, issue 32) on hand-made
differences: each schedule is one of spec/mini-batch.md's examples (or a small variation), the
expected events are the spec's trace of the step, and the observed ones break one rule.  The rule
each case must name is the one the spec's text states for that difference, worked out by hand."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from flink_semantics.conformance.areas import Blame, hooks
from flink_semantics.conformance.areas.mini_batch_blame import rules_for_events
from flink_semantics.spec.areas.mini_batch import (
    MAX_WATERMARK,
    AdvanceStep,
    CheckpointStep,
    CrashStep,
    EndStep,
    MiniBatchConfig,
    RestoreStep,
    RowStep,
    StatusStep,
    WatermarkStep,
    event,
)
from flink_semantics.spec.schedule import Event, Schedule

LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)


def on(**kw: Any) -> MiniBatchConfig:
    return MiniBatchConfig(enabled=True, **kw)


def out(step: int, key: int, change: str, count: int, sum_: int, lo: int, hi: int) -> Event:
    return event(step, "out", key=key, change=change, count=count, sum=sum_, min=lo, max=hi)


def wm(step: int, ts: int) -> Event:
    return event(step, "watermark", timestamp=ts)


def blame(config: MiniBatchConfig, steps: list[Any], step: int, expected: list[Event],
          observed: list[Event], later: list[Event] | None = None) -> Any:
    return rules_for_events(Schedule("mini_batch", config, tuple(steps)), step, expected, observed,
                            later=later or [])


def test_the_area_module_exposes_the_hook() -> None:
    assert hooks("mini_batch").rules_for_events is rules_for_events


def test_a_sum_that_does_not_wrap_breaks_mb30() -> None:
    # MB-30's example: MAX + 1 wraps to MIN; an adapter with unbounded sums shows 2^63.
    steps = [RowStep(1, "+I", LONG_MAX), RowStep(1, "+I", 1)]
    want = [out(1, 1, "+U", 2, LONG_MIN, 1, LONG_MAX)]
    got = [out(1, 1, "+U", 2, 2**63, 1, LONG_MAX)]
    assert blame(MiniBatchConfig(), steps, 1, want, got) == Blame(("MB-30",))


def test_a_minimum_not_taken_back_breaks_mb30() -> None:
    # MB-30's first example, step 3: retracting 2 makes 5 the minimum again.
    steps = [RowStep(1, "+I", 5), RowStep(1, "+I", 2), RowStep(1, "+I", 9), RowStep(1, "-U", 2)]
    want = [out(3, 1, "+U", 2, 14, 5, 9)]
    got = [out(3, 1, "+U", 2, 14, 2, 9)]
    assert blame(MiniBatchConfig(), steps, 3, want, got) == Blame(("MB-30",))


def test_update_before_without_the_sink_asking_breaks_mb20() -> None:
    # MB-20's second example: no -U without update_before.
    steps = [RowStep(1, "+I", 3), RowStep(1, "+I", 4)]
    want = [out(1, 1, "+U", 2, 7, 3, 4)]
    got = [out(1, 1, "-U", 1, 3, 3, 3), *want]
    assert blame(on(allow_latency=100, size=1), steps, 1, want, got) == Blame(("MB-20",))


def test_no_refresh_with_state_retention_breaks_mb22() -> None:
    # MB-22's example: k1's result is unchanged at step 3, and with ttl it is updated all the same.
    steps = [RowStep(1, "+I", 3), RowStep(2, "+I", 1), RowStep(1, "-U", 3), RowStep(1, "+U", 3)]
    config = on(allow_latency=100, size=2, ttl=True, update_before=True)
    want = [out(3, 1, "-U", 1, 3, 3, 3), out(3, 1, "+U", 1, 3, 3, 3)]
    assert blame(config, steps, 3, want, []) == Blame(("MB-22",))


def test_a_refresh_without_state_retention_breaks_mb21() -> None:
    # MB-21's example: the same steps without ttl emit nothing at step 3.
    steps = [RowStep(1, "+I", 3), RowStep(2, "+I", 1), RowStep(1, "-U", 3), RowStep(1, "+U", 3)]
    got = [out(3, 1, "+U", 1, 3, 3, 3)]
    assert blame(on(allow_latency=100, size=2), steps, 3, [], got) == Blame(("MB-21",))


def test_a_leading_retraction_applied_breaks_mb18() -> None:
    # MB-18's second example: k1's leading -U is dropped, so +U 6 inserts it; an adapter applying
    # the -U ends with count 0 and emits nothing before the watermark.
    steps = [RowStep(1, "-U", 5), RowStep(1, "+U", 6), EndStep()]
    want = [out(2, 1, "+I", 1, 6, 6, 6)]
    assert blame(on(allow_latency=100, size=100), steps, 2, want, [wm(2, MAX_WATERMARK)]) == Blame(("MB-18",))


def test_keys_lost_after_a_skipped_key_break_mb18() -> None:
    # MB-18's first example: k1 is skipped (nothing remains), and k2 and k3 must still be processed.
    steps = [RowStep(1, "-D", 5), RowStep(2, "+I", 1), RowStep(3, "+I", 2)]
    want = [out(2, 2, "+I", 1, 1, 1, 1), out(2, 3, "+I", 1, 2, 2, 2)]
    assert blame(on(allow_latency=100, size=3), steps, 2, want, []) == Blame(("MB-18",))
    # ... and only k3 lost: k2 came out, the keys after k1 but k3 are alike.
    assert blame(on(allow_latency=100, size=3), steps, 2, want, want[:1]) == Blame(("MB-18",))


def test_a_bundle_after_a_skipped_key_finished_late_at_a_watermark_breaks_mb12() -> None:
    # Row time, latency 10: k1's leading -U is skipped and k0's row waits in the bundle; watermark 27
    # must finish the bundle first (MB-12).  The adapter forwards the watermark alone and emits k0
    # at the end: its finish came late, the key after the skipped one was not lost (MB-18).
    steps = [WatermarkStep(10), WatermarkStep(17), RowStep(1, "-U", 9), AdvanceStep(10), RowStep(0, "+I", 9),
             WatermarkStep(27), EndStep()]
    want = [out(5, 0, "+I", 1, 9, 9, 9), wm(5, 27)]
    late = [wm(6, MAX_WATERMARK), out(6, 0, "+I", 1, 9, 9, 9)]
    config = on(allow_latency=10, size=8, assigner="rowtime")
    assert blame(config, steps, 5, want, [wm(5, 27)], later=late) == Blame(("MB-12",))
    # Never emitted: the key after the skipped one lost (MB-18's first example).
    assert blame(config, steps, 5, want, [wm(5, 27)], later=[wm(6, MAX_WATERMARK)]) == Blame(("MB-18",))


def test_a_bundle_not_finished_at_its_size_breaks_mb10() -> None:
    # MB-10's example: the second record reaches size 2 and is inside the bundle it finishes.
    steps = [RowStep(1, "+I", 1), RowStep(1, "+I", 2), RowStep(1, "+I", 3)]
    want = [out(1, 1, "+I", 2, 3, 1, 2)]
    assert blame(on(allow_latency=100, size=2), steps, 1, want, []) == Blame(("MB-10",))


def test_a_bundle_finished_before_its_size_breaks_mb10() -> None:
    # Size 3: nothing finishes at the second row; no earlier finish whose count could be left over.
    steps = [RowStep(1, "+I", 1), RowStep(1, "+I", 2)]
    got = [out(1, 1, "+I", 2, 3, 1, 2)]
    assert blame(on(allow_latency=100, size=3), steps, 1, [], got) == Blame(("MB-10",), ("MB-11",))


def test_a_count_not_reset_after_a_watermark_breaks_mb11() -> None:
    # MB-11's example: after the watermark's finish at step 2 the count starts at 0, so step 3 (one
    # record) finishes nothing; an adapter counting on from 2 finishes there.
    steps = [RowStep(1, "+I", 1), RowStep(1, "+I", 2), AdvanceStep(10), RowStep(1, "+I", 3),
             RowStep(1, "+I", 4), RowStep(1, "+I", 5)]
    got = [out(3, 1, "+U", 3, 6, 1, 3)]
    assert blame(on(allow_latency=10, size=3), steps, 3, [], got) == Blame(("MB-11",), ("MB-10",))


def test_a_watermark_before_the_bundle_breaks_mb12() -> None:
    # MB-12's example: the bundle's +I before the watermark 10.
    steps = [RowStep(1, "+I", 4), AdvanceStep(10)]
    want = [out(1, 1, "+I", 1, 4, 4, 4)]
    assert blame(on(allow_latency=10, size=100), steps, 1, want, [wm(1, 10)]) == Blame(("MB-12",))


def test_a_bundle_kept_past_a_barrier_breaks_mb13() -> None:
    # MB-13's example, step 1: the barrier finishes the bundle.
    steps = [RowStep(1, "+I", 4), CheckpointStep(1)]
    want = [out(1, 1, "+I", 1, 4, 4, 4)]
    assert blame(on(allow_latency=100, size=100), steps, 1, want, []) == Blame(("MB-13",))


def test_a_bundle_kept_at_end_of_input_breaks_mb14() -> None:
    # After MAX from upstream the end's MAX is not emitted again (MB-5), so only the operators'
    # finish at end of input (MB-14) finishes the bundle of step 1.
    steps = [WatermarkStep(MAX_WATERMARK), RowStep(1, "+I", 4), EndStep()]
    want = [out(2, 1, "+I", 1, 4, 4, 4)]
    assert blame(on(allow_latency=100, size=100), steps, 2, want, []) == Blame(("MB-14",))


def test_a_watermark_finish_while_idle_breaks_mb15() -> None:
    # MB-15's first example: at step 2 the assigner's watermark 10 is dropped at its idle output, so
    # the bundle is not finished; an adapter passing it emits k1's +I there.
    steps = [RowStep(1, "+I", 4), StatusStep(True), AdvanceStep(10), StatusStep(False), AdvanceStep(10)]
    got = [out(2, 1, "+I", 1, 4, 4, 4)]
    assert blame(on(allow_latency=10, size=100), steps, 2, [], got) == Blame(("MB-15",))
    assert blame(on(allow_latency=10, size=100), steps, 2, [], [wm(2, 10)]) == Blame(("MB-15",))


def test_a_valve_remembering_the_crashed_incarnation_breaks_mb29() -> None:
    # MB-29's example: after the restore the valve is new and passes the watermark 5.
    steps = [WatermarkStep(10), CheckpointStep(1), RowStep(1, "+I", 1), CrashStep(), RestoreStep(1),
             WatermarkStep(5), RowStep(1, "+I", 2)]
    assert blame(MiniBatchConfig(), steps, 5, [wm(5, 5)], []) == Blame(("MB-29",), ("MB-8",))


def test_one_global_finish_where_the_reference_has_two_breaks_mb10() -> None:
    # Two-phase, size 3: the local bundle of steps 0..2 sends k2's and k0's accumulators (global count
    # 2); at end of input the local bundle sends k2 (count 3: a size finish, k0 +I with count 2),
    # then k0 (a new global bundle, finished by MAX: +U with count 3).  One change with count 3
    # means the global bundle did not finish at its size.
    steps = [RowStep(2, "+I", 7), RowStep(0, "+I", 0), RowStep(0, "+I", 7), RowStep(2, "-D", 7),
             RowStep(0, "+I", 0), EndStep()]
    want = [out(5, 0, "+I", 2, 7, 0, 7), out(5, 0, "+U", 3, 7, 0, 7)]
    got = [out(5, 0, "+I", 3, 7, 0, 7)]
    config = on(allow_latency=10, size=3, two_phase=True, ttl=True)
    assert blame(config, steps, 5, want, got) == Blame(("MB-10",))
    # With update_before the reference's second change is -U then +U, both of the watermark's finish.
    before = [want[0], out(5, 0, "-U", 2, 7, 0, 7), want[1]]
    assert blame(replace(config, update_before=True), steps, 5, before, got) == Blame(("MB-10",))


@pytest.mark.parametrize("observed", [[wm(2, 8)], []])
def test_a_differing_assigner_watermark_singles_out_nothing(observed: list[Event]) -> None:
    # MB-6's example, step 2: the row-time assigner emits 9; a watermark of another value, or none,
    # is left to the event kinds' rules.
    steps = [RowStep(1, "+I", 1), WatermarkStep(5), WatermarkStep(9)]
    want = [out(2, 1, "+I", 1, 1, 1, 1)]
    config = on(allow_latency=10, size=100, assigner="rowtime")
    assert blame(config, steps, 2, [wm(2, 9)], observed) == ()
    assert blame(config, steps, 2, want, [out(2, 1, "+I", 2, 2, 1, 1)]) == ()
