"""The watermarks area's blame hook (conformance/areas/watermarks_blame.py, issue 32): hand-made
schedules, the reference's events of the first differing group and an adapter's, and the rule the
spec says the difference shows broken.  The schedules are the spec's examples or small variants of
them; the expected traces are the spec's (spec/watermarks.md), written out here."""

from __future__ import annotations

from typing import Any

from flink_semantics.conformance.areas import Blame
from flink_semantics.conformance.areas.watermarks import rules_for_events
from flink_semantics.spec.areas.watermarks import (
    MAX_WATERMARK,
    AddSplitStep,
    AlignStep,
    EndStep,
    FailoverStep,
    RecordStep,
    TickStep,
    WatermarksConfig,
    event,
)
from flink_semantics.spec.schedule import Event, Schedule, Step


def schedule(steps: list[Step], **config: Any) -> Schedule:
    return Schedule("watermarks", WatermarksConfig(**config), tuple(steps))


def wm(step: int, reader: int, value: int) -> Event:
    return event(step, "watermark", reader=reader, value=value)


def status(step: int, reader: int, idle: bool) -> Event:
    return event(step, "status", reader=reader, idle=idle)


def out(step: int, value: int) -> Event:
    return event(step, "output_watermark", value=value)


def out_status(step: int, idle: bool) -> Event:
    return event(step, "output_status", idle=idle)


def test_a_reader_that_sends_its_watermark_again_breaks_wm_11() -> None:
    # WM-3's example, one more interval: 19 went out at step 2; nothing new at step 3.  A reader
    # that sends 19 again sends a watermark not above every one it has sent (WM-11); its
    # combination passed on again (WM-7) may be why, inside the reader.
    s = schedule([AddSplitStep(0, 0), RecordStep(0, 20), TickStep(10), TickStep(10)], interval=10)
    assert rules_for_events(s, 3, [], [wm(3, 0, 19)]) == Blame(("WM-11",), ("WM-7",))


def test_an_idle_split_that_holds_the_minimum_breaks_wm_6() -> None:
    # WM-6's example: at 40 both splits are idle (29 and 9): the maximum, 29, goes out.  A reader
    # that keeps the idle split at 9 in its minimum sends nothing, then IDLE.
    s = schedule([AddSplitStep(0, 0), AddSplitStep(0, 1), RecordStep(0, 10), RecordStep(1, 30), TickStep(40)],
                 interval=10, idleness=15)
    told = rules_for_events(s, 4, [wm(4, 0, 29)], [status(4, 0, True)])
    assert isinstance(told, Blame) and told.broken == ("WM-6",)
    assert "WM-7" not in told.possible and "WM-6" not in told.possible


def test_a_new_split_left_out_of_the_minimum_breaks_wm_4() -> None:
    # WM-10's example: s1, added and not read, holds r0 at MIN: no watermark at step 3.  An
    # adapter that sends 19, the minimum without s1, has no output for s1 (WM-4: registered when
    # added); a partial started elsewhere than MIN (WM-10) may be why too.
    s = schedule([AddSplitStep(0, 0), AddSplitStep(0, 1), RecordStep(0, 20), TickStep(10)], interval=10)
    assert rules_for_events(s, 3, [], [wm(3, 0, 19)]) == Blame(("WM-4",), ("WM-10",))


def test_a_split_never_read_and_not_finished_at_the_end_breaks_wm_4() -> None:
    # WM-15's example: s0, added and never read, finishes at the end.  Without it the reader had no
    # output for it.
    s = schedule([AddSplitStep(0, 0), EndStep()], readers=2)
    told = rules_for_events(s, 1, [event(1, "split_finished", split=0)], [wm(1, 0, MAX_WATERMARK)])
    assert isinstance(told, Blame) and told.broken == ("WM-4",) and "WM-15" in told.possible


def test_a_split_read_and_not_finished_at_the_end_breaks_wm_15() -> None:
    s = schedule([AddSplitStep(0, 0), RecordStep(0, 5), EndStep()])
    told = rules_for_events(s, 2, [event(2, "split_finished", split=0)], [wm(2, 0, MAX_WATERMARK)])
    assert isinstance(told, Blame) and told.broken == ("WM-15",)


def test_an_end_without_active_before_max_breaks_wm_15() -> None:
    # WM-15's second example (D2): the reader is idle at the end: ACTIVE, then MAX.
    s = schedule([TickStep(40), EndStep()], interval=10, idleness=15)
    told = rules_for_events(s, 1, [status(1, 0, False)], [wm(1, 0, MAX_WATERMARK)])
    assert isinstance(told, Blame) and told.broken == ("WM-15",)


def test_a_watermark_kept_across_a_failover_breaks_wm_16() -> None:
    # WM-16's example: after the failover r0 sends 2, below the 4 it sent before.  A reader that
    # kept its 4 drops the 2.
    s = schedule([AddSplitStep(0, 0), RecordStep(0, 5), TickStep(10), FailoverStep(), RecordStep(0, 3),
                  TickStep(10)], interval=10)
    assert rules_for_events(s, 5, [wm(5, 0, 2)], []) == Blame(("WM-16",), ("WM-11", "WM-17"))


def test_idle_kept_across_a_failover_breaks_wm_16() -> None:
    # r0 is idle when the job fails (WM-13's example); the new attempt starts active, so at the end
    # it sends MAX with no ACTIVE before it.  A reader that kept its IDLE sends ACTIVE first.
    s = schedule([AddSplitStep(0, 0), RecordStep(0, 5), TickStep(50), FailoverStep(), EndStep()],
                 interval=10, idleness=15)
    told = rules_for_events(s, 4, [wm(4, 0, MAX_WATERMARK)], [status(4, 0, False)])
    assert isinstance(told, Blame) and told.broken == ("WM-16",)


def test_a_reader_blocked_at_the_allowed_maximum_breaks_wm_25() -> None:
    # r0's watermark 14 equals the allowed maximum min(14, 9) + 5: it goes on reading (WM-25:
    # strictly above).  An adapter that blocks it breaks WM-25.
    s = schedule([AddSplitStep(0, 0), AddSplitStep(1, 1), RecordStep(0, 15), RecordStep(1, 10), TickStep(10),
                  AlignStep()], readers=2, interval=10, max_drift=5, alignment_buffer=0)
    told = rules_for_events(s, 5, [], [event(5, "blocked", reader=0)])
    assert isinstance(told, Blame) and told.broken == ("WM-25",)


def test_a_split_not_paused_breaks_wm_26() -> None:
    # WM-14's example: at the round s0 (29) is above the allowed 14: r0 blocks, then s0 pauses.
    s = schedule([AddSplitStep(0, 0), AddSplitStep(1, 1), RecordStep(0, 30), RecordStep(1, 10), TickStep(10),
                  AlignStep()], readers=2, interval=10, idleness=15, max_drift=5, alignment_buffer=0)
    told = rules_for_events(s, 5, [event(5, "paused", split=0)], [])
    assert isinstance(told, Blame) and told.broken == ("WM-26",)


def test_the_flush_of_flink_230_breaks_wm_19() -> None:
    # WM-19's second example (D1): at step 15 r1, the last active channel, goes idle below the
    # output 10 while r2 holds 30: 30 goes out, then IDLE.  Flink 2.3.0 emits IDLE alone.
    s = schedule([AddSplitStep(0, 0), AddSplitStep(1, 1), AddSplitStep(2, 2),
                  RecordStep(0, 11), RecordStep(1, 6), RecordStep(2, 31), TickStep(10),
                  RecordStep(0, 11), TickStep(10), RecordStep(0, 11), TickStep(10),
                  RecordStep(1, 8), TickStep(10), RecordStep(1, 8), TickStep(10), TickStep(20)],
                 readers=3, interval=10, idleness=5)
    assert rules_for_events(s, 15, [out(15, 30)], [out_status(15, True)]) == Blame(("WM-19",), ())


def test_the_stall_of_flink_230_breaks_wm_20() -> None:
    # WM-20's second example (D1): at step 18 r0 comes back aligned: 15 goes out at once.
    s = schedule([AddSplitStep(0, 0), AddSplitStep(1, 1), AddSplitStep(2, 2),
                  RecordStep(1, 10), RecordStep(0, 16), TickStep(10),
                  RecordStep(0, 16), RecordStep(1, 10), TickStep(10), RecordStep(1, 10), TickStep(10),
                  RecordStep(1, 10), TickStep(10), RecordStep(2, 5), TickStep(10),
                  RecordStep(2, 5), TickStep(10), RecordStep(0, 26), TickStep(10)],
                 readers=3, interval=10, idleness=5)
    assert rules_for_events(s, 18, [out(18, 15)], [wm(18, 0, 25)]) == Blame(("WM-20",), ())


def test_a_difference_no_diagnosis_explains_names_the_kinds_rules() -> None:
    # A record's timestamp changed: nothing here tells which rule; the checker falls back to the
    # rules of the event kinds (an empty answer).
    s = schedule([AddSplitStep(0, 0), RecordStep(0, 5)])
    record = lambda ts: event(1, "record", split=0, ts=ts)  # noqa: E731
    assert rules_for_events(s, 1, [record(5)], [record(6)]) == ()
