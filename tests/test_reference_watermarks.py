"""The reference model of the watermarks area against traces worked out by hand from the rules, and
its valve against the event sequences of Flink's StatusWatermarkValveTest (the three cases that
FLINK-40475 added, deviation D1) and of D1's two halves as schedules show them (issue 29)."""

from __future__ import annotations

import pytest
from flink_semantics.reference import run
from flink_semantics.reference.watermarks import Valve
from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import Event, schedule_from_dict

AREA = get_area("watermarks")


def trace(config: str, steps: list[str]) -> list[str]:
    n = AREA.notation
    schedule = schedule_from_dict({"area": "watermarks", "config": n.parse_config(config),
                                   "steps": [n.parse_step(s) for s in steps]})
    return [n.render_event(e) for e in run(schedule).events]


def test_a_periodic_watermark_reaches_the_valve() -> None:
    """WM-2, WM-3, WM-11, WM-18: max ts 15, bound 0: watermark 14 at the first periodic emit."""
    assert trace("interval=10", ["add r0 s0", "record s0 15", "tick 10"]) == [
        "@1 record s0 15", "@2 watermark r0 14", "@2 output 14"]


def test_a_new_split_holds_the_combined_watermark() -> None:
    """WM-10: s1 has no record, so it stays at MIN and so does the combination."""
    assert trace("interval=10", ["add r0 s0", "add r0 s1", "record s0 20", "tick 10"]) == [
        "@2 record s0 20"]


def test_idleness_and_return() -> None:
    """WM-13: the timer starts at the first periodic emit without records (20) and fires at the
    first one more than 15 ms later (40); the main output timed out at 30.  A record and the next
    periodic emit bring the reader back: ACTIVE before the watermark (WM-11), the valve follows."""
    assert trace("interval=10 idleness=15", ["add r0 s0", "record s0 5", "tick 50", "record s0 30",
                                             "tick 10"]) == [
        "@1 record s0 5", "@2 watermark r0 4", "@2 output 4", "@2 idle r0", "@2 output idle",
        "@3 record s0 30", "@4 active r0", "@4 output active", "@4 watermark r0 29", "@4 output 29"]


def test_end_of_input_sends_max() -> None:
    """WM-15: every split finishes, then MAX from each reader."""
    assert trace("readers=2", ["add r0 s0", "end"]) == [
        "@1 split_finished s0", "@1 watermark r0 MAX", "@1 watermark r1 MAX", "@1 output MAX"]


def test_a_failover_starts_the_watermarks_again() -> None:
    """WM-16: after the restart the watermark 4 is sent again: monotonic only within an attempt."""
    assert trace("interval=10", ["add r0 s0", "record s0 5", "tick 10", "failover", "record s0 3",
                                 "tick 10"]) == [
        "@1 record s0 5", "@2 watermark r0 4", "@2 output 4", "@3 restarted", "@4 record s0 3",
        "@5 watermark r0 2", "@5 output 2"]


def test_alignment_blocks_readers_and_pauses_splits_and_lets_them_go() -> None:
    """WM-23..WM-26 with the latest watermark (alignment_buffer=0): the minimum report 9 plus the
    drift 5 allows 14: r0 at 29 blocks and its split pauses; r0's next record waits.  A split's
    rise above the allowed maximum pauses it at once, and the reader blocks as its watermark
    goes out.  The next round allows 34: both go on, and the waiting record is read."""
    assert trace("readers=2 interval=10 max_drift=5 alignment_buffer=0", [
        "add r0 s0", "add r1 s1", "record s0 30", "record s1 10", "tick 10", "align", "record s0 40",
        "record s1 30", "tick 10", "align"]) == [
        "@2 record s0 30", "@3 record s1 10", "@4 watermark r0 29", "@4 watermark r1 9", "@4 output 9",
        "@5 max_allowed 14", "@5 blocked r0", "@5 paused s0",
        "@7 record s1 30", "@8 paused s1", "@8 blocked r1", "@8 watermark r1 29", "@8 output 29",
        "@9 max_allowed 34", "@9 unblocked r0", "@9 resumed s0", "@9 record s0 40", "@9 unblocked r1",
        "@9 resumed s1"]


def test_alignment_looks_back_over_the_buffer() -> None:
    """WM-25 with the default buffer of 3: the check compares the sample of three rounds ago, MIN
    until three rounds have passed."""
    assert trace("readers=2 interval=10 max_drift=5", [
        "add r0 s0", "add r1 s1", "record s0 30", "record s1 10", "tick 10", "align", "align",
        "align"]) == [
        "@2 record s0 30", "@3 record s1 10", "@4 watermark r0 29", "@4 watermark r1 9", "@4 output 9",
        "@5 max_allowed 14", "@6 max_allowed 14", "@7 blocked r0", "@7 paused s0", "@7 max_allowed 14"]


def valve_run(channels: int, inputs: list[tuple[str, int, int | bool]]) -> list[list[str]]:
    """Feed ("wm", channel, value) / ("status", channel, idle) inputs; the outputs of each."""
    out: list[Event] = []
    valve = Valve(channels, out.append, lambda: 0)
    seen = []
    for kind, channel, value in inputs:
        before = len(out)
        if kind == "wm":
            valve.watermark(channel, int(value))
        else:
            valve.status(channel, bool(value))
        seen.append([AREA.notation.render_event(e)[3:] for e in out[before:]])
    return seen


IDLE, ACTIVE = True, False


@pytest.mark.parametrize("inputs, want", [
    # testMultipleInputFlushMaxWatermarkOnceAllInputsBecomeIdleWithUnalignedLastChannel
    ([("wm", 0, 100), ("wm", 1, 50), ("wm", 2, 70), ("status", 1, IDLE), ("status", 1, ACTIVE),
      ("wm", 1, 60), ("status", 0, IDLE), ("status", 2, IDLE), ("status", 1, IDLE)],
     [[], [], ["output 50"], ["output 70"], [], [], [], [], ["output 100", "output idle"]]),
    # testWatermarkAdvancesWhenReactivatedChannelBecomesOnlyAlignedChannel
    ([("wm", 0, 10), ("wm", 1, 7), ("status", 2, IDLE), ("status", 2, ACTIVE), ("status", 0, IDLE),
      ("status", 1, IDLE), ("status", 0, ACTIVE), ("status", 2, IDLE)],
     [[], [], ["output 7"], [], [], [], ["output 10"], []]),
    # testRealignmentAfterResumeActiveEmitsNewMinWatermark
    ([("wm", 0, 10), ("wm", 1, 20), ("wm", 2, 30), ("status", 2, IDLE), ("status", 0, IDLE),
      ("status", 0, ACTIVE), ("status", 1, IDLE), ("status", 2, ACTIVE), ("status", 0, IDLE),
      ("status", 2, IDLE)],
     [[], [], ["output 10"], [], ["output 20"], [], [], ["output 30"], [], ["output idle"]]),
    # issue 29 (D1 in schedules, the stall): a reader sends ACTIVE just before its next watermark, and
    # the fixed valve emits the returning channel's 15 before 25 (Flink 2.3.0: nothing, then 25)
    ([("wm", 1, 9), ("wm", 0, 15), ("status", 2, IDLE), ("status", 0, IDLE), ("status", 2, ACTIVE),
      ("wm", 2, -3), ("status", 1, IDLE), ("status", 0, ACTIVE), ("wm", 0, 25)],
     [[], [], ["output 9"], [], [], [], [], ["output 15"], ["output 25"]]),
    # D1 in schedules, the flush (WM-19's second example): the last active channel, back below the
    # output at 7, goes idle; the idle channel 2 holds 30 (Flink 2.3.0: IDLE alone)
    ([("wm", 0, 10), ("wm", 1, 5), ("wm", 2, 30), ("status", 1, IDLE), ("status", 2, IDLE),
      ("status", 1, ACTIVE), ("wm", 1, 7), ("status", 0, IDLE), ("status", 1, IDLE)],
     [[], [], ["output 5"], ["output 10"], [], [], [], [], ["output 30", "output idle"]]),
])
def test_the_valve_follows_flinks_fixed_valve_tests(inputs, want) -> None:  # type: ignore[no-untyped-def]
    assert valve_run(3, inputs) == want


def test_overtaking_is_found_on_an_async_trace() -> None:
    """The interplay property's check (AIO-15 on an async I/O trace) finds a record that came out
    after a watermark admitted after it, and passes the oracle's trace of the same schedule."""
    from flink_semantics.conformance.areas.watermarks import overtaking_problems
    from flink_semantics.reference import expected_trace
    from flink_semantics.spec.areas.async_io import event as aio
    from flink_semantics.spec.schedule import Trace

    schedule = schedule_from_dict({"area": "async_io", "config": {"mode": "unordered"}, "steps": [
        {"op": "record", "value": 0, "timestamp": 5}, {"op": "watermark", "timestamp": 10},
        {"op": "complete", "record": 0, "result": [0]}]})
    assert overtaking_problems(schedule, expected_trace(schedule)) == []
    wrong = Trace((aio(0, "invoke", record=0, attempt=1), aio(1, "watermark", timestamp=10),
                   aio(2, "emit", record=0, value=0, timestamp=5)))
    assert overtaking_problems(schedule, wrong) == [
        "watermark 0 came out before record 0, which was admitted before it"]
