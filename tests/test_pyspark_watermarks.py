"""Tests of the PySpark watermarks engine (adapters/pyspark/watermarks).

Every expected value here is worked out by hand from spec/watermarks.md (its choices D1, D2,
C1..C5) and Flink 2.3.0's code as the research notes quote it; the derivations are in the
comments.  Three parts:

1. the engine's parts on their own: the valve (FLINK-40475's three test sequences, D1), the
   multiplexer, the reader output, the idleness timer on a pausable clock;
2. whole schedules run in-process (`run_with_retries`: a failover ends the incarnation and the run
   resumes from the store, as Spark's retry would): idleness, alignment, end of input, failovers;
3. (`spark`) the failover schedules through `PySparkAdapter`: their traces come from a retried
   Spark task attempt.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from flink_semantics.adapters.pyspark.runtime import run_with_retries
from flink_semantics.adapters.pyspark.watermarks import CAPABILITIES
from flink_semantics.adapters.pyspark.watermarks.engine import (
    MIN,
    IdlenessTimer,
    OutputListener,
    PausableClock,
    SplitListener,
    StatusWatermarkValve,
    WatermarkOutput,
    WatermarkOutputMultiplexer,
    WatermarkToDataOutput,
)
from flink_semantics.conformance.examples import notation
from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import Schedule, Trace
from hypothesis import given, settings
from hypothesis import strategies as st

WM = notation("watermarks")

# --------------------------------------------------------------------------
# 1. The parts
# --------------------------------------------------------------------------


def valve_run(channels: int, inputs: list[tuple[str, Any, int]]) -> list[str]:
    """Feed ("wm", value, ch) / ("idle" | "active", None, ch) and collect the valve's outputs."""
    out: list[str] = []

    def emit(kind: str, **f: Any) -> None:
        if kind == "output_watermark":
            out.append(f"WM{f['value']}")
        else:
            out.append("IDLE" if f["idle"] else "ACTIVE")

    valve = StatusWatermarkValve(channels, emit)
    for kind, value, ch in inputs:
        if kind == "wm":
            valve.input_watermark(value, ch)
        else:
            valve.input_status(kind == "idle", ch)
    return out


def test_valve_flushes_max_when_the_last_channel_to_go_idle_is_unaligned() -> None:
    """FLINK-40475 `testMultipleInputFlushMaxWatermarkOnceAllInputsBecomeIdleWithUnalignedLastChannel`:
    100@0, 50@1, 70@2 give 50; IDLE@1 leaves the min (its 50 was the output): 70; ACTIVE@1 (50 < 70:
    unaligned) and 60@1 (still < 70) give nothing; IDLE@0 (100 != 70) nothing; IDLE@2 (70 == 70, but no
    aligned channel is left) nothing; IDLE@1, the last active: the max 100, then IDLE (2.3.0: IDLE only)."""
    assert valve_run(3, [("wm", 100, 0), ("wm", 50, 1), ("wm", 70, 2), ("idle", None, 1),
                         ("active", None, 1), ("wm", 60, 1), ("idle", None, 0), ("idle", None, 2),
                         ("idle", None, 1)]) == ["WM50", "WM70", "WM100", "IDLE"]


def test_valve_advances_when_a_reactivated_channel_is_the_only_aligned_one() -> None:
    """FLINK-40475 `testWatermarkAdvancesWhenReactivatedChannelBecomesOnlyAlignedChannel`: 10@0, 7@1;
    IDLE@2 (MIN == last MIN) gives min(10, 7) = 7; ACTIVE@2 (MIN < 7: unaligned) nothing; IDLE@0,
    IDLE@1 nothing (no aligned channel left); ACTIVE@0 (10 >= 7: aligned) gives 10 after it comes back
    (2.3.0: stalled at 7); IDLE@2 nothing."""
    assert valve_run(3, [("wm", 10, 0), ("wm", 7, 1), ("idle", None, 2), ("active", None, 2),
                         ("idle", None, 0), ("idle", None, 1), ("active", None, 0),
                         ("idle", None, 2)]) == ["WM7", "WM10"]


def test_valve_realigns_after_resume_and_emits_the_new_min() -> None:
    """FLINK-40475 `testRealignmentAfterResumeActiveEmitsNewMinWatermark`: 10@0, 20@1, 30@2 give 10;
    IDLE@2 nothing; IDLE@0 (held the output) gives 20; ACTIVE@0 (10 < 20) and IDLE@1 nothing; ACTIVE@2
    (30 >= 20: aligned) gives 30; IDLE@0, IDLE@2: the max 30 is not above 30, so IDLE only."""
    assert valve_run(3, [("wm", 10, 0), ("wm", 20, 1), ("wm", 30, 2), ("idle", None, 2),
                         ("idle", None, 0), ("active", None, 0), ("idle", None, 1),
                         ("active", None, 2), ("idle", None, 0), ("idle", None, 2)]) \
        == ["WM10", "WM20", "WM30", "IDLE"]


def test_valve_emits_a_returning_channel_s_watermark_when_it_comes_back() -> None:
    """Issue 29's sequence (D1, the stall, as a schedule shows it: ACTIVE just before a higher
    watermark): 9@1, 15@0; IDLE@2 (MIN == last MIN) gives min(15, 9) = 9; IDLE@0 (15 != 9) nothing;
    ACTIVE@2 (MIN < 9: unaligned) and -3@2 (still < 9) nothing; IDLE@1 (9 == 9, but no aligned channel
    is left) nothing; ACTIVE@0 (15 >= 9: aligned) gives 15 at once, then 25@0 gives 25 (Flink 2.3.0:
    nothing on ACTIVE, then 25)."""
    assert valve_run(3, [("wm", 9, 1), ("wm", 15, 0), ("idle", None, 2), ("idle", None, 0),
                         ("active", None, 2), ("wm", -3, 2), ("idle", None, 1), ("active", None, 0),
                         ("wm", 25, 0)]) == ["WM9", "WM15", "WM25"]


def test_valve_ignores_watermarks_while_idle_and_toggles_status_once() -> None:
    """WM-17, WM-21: two channels; 5@0 and 8@1 give 5; IDLE@0 gives 8 (ch0 held the output); 50@0 on
    the idle channel is ignored (not recorded); IDLE@1, the last: max(5, 8) = 8 is not above 8, so
    IDLE; 60@1 while the valve is idle is ignored; ACTIVE@1: ACTIVE, and 8 >= 8 realigns it but 8 is
    not above 8; ACTIVE@0 (5 < 8) nothing; 9@0 (9 >= 8: aligned again): min(9, 8) = 8, nothing; 12@1
    gives min(9, 12) = 9."""
    assert valve_run(2, [("wm", 5, 0), ("wm", 8, 1), ("idle", None, 0), ("wm", 50, 0),
                         ("idle", None, 1), ("wm", 60, 1), ("active", None, 1), ("active", None, 0),
                         ("wm", 9, 0), ("wm", 12, 1)]) == ["WM5", "WM8", "IDLE", "ACTIVE", "WM9"]


class Recorder(WatermarkOutput):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def emit_watermark(self, value: int) -> None:
        self.seen.append(f"WM{value}")

    def mark_idle(self) -> None:
        self.seen.append("IDLE")

    def mark_active(self) -> None:
        self.seen.append("ACTIVE")


class NoListener(SplitListener):
    def on_watermark_update(self, split: int, value: int) -> None:
        pass

    def on_idle_update(self, split: int, idle: bool) -> None:
        pass


def test_multiplexer_deferred_waits_for_the_periodic_emit() -> None:
    """WM-8: deferred updates are state only (5 and 3 emit nothing); the periodic emit combines min = 3."""
    out = Recorder()
    mux = WatermarkOutputMultiplexer(out)
    mux.register(0, NoListener())
    mux.register(1, NoListener())
    mux.deferred(0).emit_watermark(5)
    mux.deferred(1).emit_watermark(3)
    assert out.seen == []
    mux.on_periodic_emit()
    assert out.seen == ["WM3"]


def test_multiplexer_immediate_takes_deferred_into_account() -> None:
    """WM-8: split 0's deferred 5 is stored; split 1's immediate 7 raises it above the combined MIN, so
    the combination runs at once: min(5, 7) = 5.  An immediate 4 on split 0 is not a raise: nothing."""
    out = Recorder()
    mux = WatermarkOutputMultiplexer(out)
    mux.register(0, NoListener())
    mux.register(1, NoListener())
    mux.deferred(0).emit_watermark(5)
    mux.immediate(1).emit_watermark(7)
    mux.immediate(0).emit_watermark(4)
    assert out.seen == ["WM5"]


def test_multiplexer_all_idle_flushes_the_max_and_stays_idle_with_no_outputs() -> None:
    """WM-6 (FLINK-38454): 10 and 20 immediate give 10; split 0 idle: min over active = 20, not idle;
    split 1 idle: all idle, max 20 is not above 20, IDLE.  WM-9: unregistering emits nothing; with no
    outputs the combination keeps its idle flag, so each periodic emit says IDLE again."""
    out = Recorder()
    mux = WatermarkOutputMultiplexer(out)
    mux.register(0, NoListener())
    mux.register(1, NoListener())
    mux.immediate(0).emit_watermark(10)
    mux.immediate(1).emit_watermark(20)
    mux.immediate(0).mark_idle()
    mux.immediate(1).mark_idle()
    assert out.seen == ["WM10", "WM20", "IDLE"]
    mux.unregister(0)
    mux.unregister(1)
    assert out.seen == ["WM10", "WM20", "IDLE"]
    mux.on_periodic_emit()
    assert out.seen == ["WM10", "WM20", "IDLE", "IDLE"]


def test_multiplexer_all_idle_flush_takes_the_max_of_idle_outputs() -> None:
    """WM-6: deferred 30 on split 0, 10 on split 1, both then idle (deferred): the periodic emit sees all
    idle and emits the max 30 first, then IDLE."""
    out = Recorder()
    mux = WatermarkOutputMultiplexer(out)
    mux.register(0, NoListener())
    mux.register(1, NoListener())
    mux.deferred(0).emit_watermark(30)
    mux.deferred(1).emit_watermark(10)
    mux.deferred(0).mark_idle()
    mux.deferred(1).mark_idle()
    mux.on_periodic_emit()
    assert out.seen == ["WM30", "IDLE"]


class Quiet(OutputListener):
    def on_effective_watermark(self, value: int) -> None:
        pass

    def on_idle(self, idle: bool) -> None:
        pass


def test_reader_output_drops_a_non_advancing_watermark_after_idle() -> None:
    """WM-11 (`WatermarkToDataOutputIdleReactivationTest`, 2.3.0): emit 100, markIdle, emit 80 ->
    [100, IDLE]; IDLE again is deduplicated; emit 120 -> ACTIVE then 120."""
    sent: list[str] = []
    out = WatermarkToDataOutput(lambda v: sent.append(f"WM{v}"),
                                lambda idle: sent.append("IDLE" if idle else "ACTIVE"), Quiet())
    out.emit_watermark(100)
    out.mark_idle()
    out.emit_watermark(80)
    out.mark_idle()
    assert sent == ["WM100", "IDLE"]
    out.emit_watermark(120)
    assert sent == ["WM100", "IDLE", "ACTIVE", "WM120"]
    out.emit_watermark(MIN)
    assert sent[-1] == "WM120"


def test_idleness_timer_started_at_zero_and_paused_time() -> None:
    """C2: a timer started when the clock reads 0 is started (Flink's 0 sentinel would start it again
    at 10).  Timeout 30, strict: at 30 not idle (30 > 30 is false), at 31 idle.  WM-14: a timer started
    at 0 on a clock paused from 10 to 50 reads 51 - 40 = 11 at 51 (not idle) and 31 at 71 (idle)."""
    now = [0]
    clock = PausableClock(lambda: now[0])
    timer = IdlenessTimer(clock, 30)
    seen = []
    for t in (0, 10, 30, 31):
        now[0] = t
        seen.append(timer.check_if_idle())
    assert seen == [False, False, False, True]

    now[0] = 0
    clock = PausableClock(lambda: now[0])
    timer = IdlenessTimer(clock, 30)
    assert timer.check_if_idle() is False  # started at 0
    now[0] = 10
    clock.pause()
    clock.pause()  # pauses nest
    now[0] = 40
    clock.unpause()
    now[0] = 50
    clock.unpause()
    now[0] = 51
    assert clock.now() == 11 and timer.check_if_idle() is False
    now[0] = 71
    assert timer.check_if_idle() is True
    timer.activity()
    assert timer.check_if_idle() is False  # activity resets: not started again


# --------------------------------------------------------------------------
# 2. Schedules, in the notation of spec/watermarks.md
# --------------------------------------------------------------------------

# name -> (config, steps, expected trace, task failures)
CASES: dict[str, tuple[dict[str, Any], str, str, int]] = {
    # WM-13, WM-12, WM-11.  s0's timer: t=10 no record since the start, started (C2: at 10, not a
    # sentinel), MIN; t=20, 30: 10, 20 <= 25; t=40: 30 > 25, idle: all idle, max MIN is not above the
    # combined MIN, the split-local output (never sent a watermark) is idle; the main output sent MIN
    # at 30, so not yet; then the main generator (started at 10) goes idle too: IDLE.  t=50: s0 saw
    # a record: 49 -> ACTIVE first, then 49 (the main output stays idle: started at 10, 40 > 25).  t=60:
    # s0's timer starts at 60; t=90: 30 > 25, idle: the max 49 is not above 49, IDLE again.
    "idleness-timeline": ({"interval": 10, "idleness": 25}, """
        add r0 s0
        tick 10
        tick 30
        record s0 50
        tick 10
        tick 10
        tick 30
    """, """
        @2 idle r0
        @2 output idle
        @3 record s0 50
        @4 active r0
        @4 output active
        @4 watermark r0 49
        @4 output 49
        @6 idle r0
        @6 output idle
    """, 0),
    # WM-25, WM-26 with the default buffer of 3 samples.  t=10: 29 and 9, output 9.  Round 5: the rings
    # hold [MIN, MIN, 29] and [MIN, MIN, 9]; reports 29 and 9, max_allowed 9 + 5 = 14; oldest MIN.
    # Round 6: [MIN, 29, 29].  Round 7: r0's oldest 29 > 14: blocked, s0's oldest 29 > 14: paused,
    # then the announcement 14.  s0's 35 is held; s1's 40 is read.  t=20: r1 sends 39 (its oldest sample
    # 9 <= 14), output min(29, 39) = 29.  Round 11: reports 29 and 39, max_allowed 34: r0 unblocked
    # (29 <= 34), s0 resumed, and r0 reads the held 35 (periodic: no watermark).  End: both split
    # finish, MAX from r0 (output min(MAX, 39) = 39), then from r1 (output MAX).
    "alignment-buffer-3": ({"readers": 2, "interval": 10, "max_drift": 5}, """
        add r0 s0
        add r1 s1
        record s0 30
        record s1 10
        tick 10
        align
        align
        align
        record s0 35
        record s1 40
        tick 10
        align
        end
    """, """
        @2 record s0 30
        @3 record s1 10
        @4 watermark r0 29
        @4 watermark r1 9
        @4 output 9
        @5 max_allowed 14
        @6 max_allowed 14
        @7 blocked r0
        @7 paused s0
        @7 max_allowed 14
        @9 record s1 40
        @10 watermark r1 39
        @10 output 29
        @11 max_allowed 34
        @11 unblocked r0
        @11 resumed s0
        @11 record s0 35
        @12 split_finished s0
        @12 split_finished s1
        @12 watermark r0 MAX
        @12 output 39
        @12 watermark r1 MAX
        @12 output MAX
    """, 0),
    # C5: a paused split's record is read at end, before the splits finish.  t=10: min(29, 9) = 9.
    # Round 5 (buffer 0: the latest): report 9, max_allowed 14; r0 9 <= 14 not blocked; s0's 29 > 14:
    # paused.  s0's 40 is held, s1's 11 is read; end reads 40, then s0 and s1 finish, then MAX.
    "end-reads-held-records": ({"interval": 10, "max_drift": 5, "alignment_buffer": 0}, """
        add r0 s0
        add r0 s1
        record s0 30
        record s1 10
        tick 10
        align
        record s0 40
        record s1 11
        end
    """, """
        @2 record s0 30
        @3 record s1 10
        @4 watermark r0 9
        @4 output 9
        @5 max_allowed 14
        @5 paused s0
        @7 record s1 11
        @8 record s0 40
        @8 split_finished s0
        @8 split_finished s1
        @8 watermark r0 MAX
        @8 output MAX
    """, 0),
    # Punctuated (C1, D = 0: ts - 1 on every record), buffer 0, drift 10.  Round 4: reports 4 and 2,
    # max_allowed 12.  s0's 20 gives 19: the split's raise pauses it at once (19 > 12), then the reader
    # output forwards 19: the reader blocks first (12 < 19), then sends 19; the valve waits for r1 (2).
    # s0's 21 is held.  r1's 8 -> 7, output 7.  Round 8: still blocked; max_allowed 7 + 10 = 17 < 19.
    # Failover 9: everything fresh (max_allowed MAX); the held 21 is read at once, in the failover
    # step: 20 on a fresh valve channel (r1's channel is at MIN again).  r1's 30 -> 29: output 20.
    # End: MAX from r0 (output 29), from r1 (output MAX).
    "punctuated-blocked-then-failover": ({"readers": 2, "punctuated": True, "interval": 0,
                                          "max_drift": 10, "alignment_buffer": 0}, """
        add r0 s0
        add r1 s1
        record s0 5
        record s1 3
        align
        record s0 20
        record s0 21
        record s1 8
        align
        failover
        record s1 30
        end
    """, """
        @2 record s0 5
        @2 watermark r0 4
        @3 record s1 3
        @3 watermark r1 2
        @3 output 2
        @4 max_allowed 12
        @5 record s0 20
        @5 paused s0
        @5 blocked r0
        @5 watermark r0 19
        @7 record s1 8
        @7 watermark r1 7
        @7 output 7
        @8 max_allowed 17
        @9 restarted
        @9 record s0 21
        @9 watermark r0 20
        @10 record s1 30
        @10 watermark r1 29
        @10 output 20
        @11 split_finished s0
        @11 split_finished s1
        @11 watermark r0 MAX
        @11 output 29
        @11 watermark r1 MAX
        @11 output MAX
    """, 1),
    # WM-16, WM-3: the periodic timer restarts with the job.  t=10: 4.  Failover at 15: the next
    # emission is at 25, not 20; the fresh generator has seen only 3 -> 2 (lower than before).
    "failover-restarts-the-timer": ({"interval": 10}, """
        add r0 s0
        record s0 5
        tick 15
        failover
        record s0 3
        tick 9
        tick 1
    """, """
        @1 record s0 5
        @2 watermark r0 4
        @2 output 4
        @3 restarted
        @4 record s0 3
        @6 watermark r0 2
        @6 output 2
    """, 1),
    # Two failovers; a paused split waiting to finish.  t=10: min(29, 9) = 9.  Round 5: max_allowed 14,
    # s0 paused (29 > 14).  s0's 40 is held, so finish s0 waits.  Failover 8: s0 and s1 registered
    # again, the held 40 is read and s0 finishes, in the failover step.  t=20 (10 + 10): s1's fresh
    # generator has seen nothing: MIN, nothing sent.  s1's 12 is read.  Failover 11: s1 fresh again;
    # t=30: MIN.  End: s1 finishes, MAX.
    "two-failovers-pending-finish": ({"interval": 10, "max_drift": 5, "alignment_buffer": 0}, """
        add r0 s0
        add r0 s1
        record s0 30
        record s1 10
        tick 10
        align
        record s0 40
        finish s0
        failover
        tick 10
        record s1 12
        failover
        tick 10
        end
    """, """
        @2 record s0 30
        @3 record s1 10
        @4 watermark r0 9
        @4 output 9
        @5 max_allowed 14
        @5 paused s0
        @8 restarted
        @8 record s0 40
        @8 split_finished s0
        @10 record s1 12
        @11 restarted
        @13 split_finished s1
        @13 watermark r0 MAX
        @13 output MAX
    """, 2),
    # D1, the flush (WM-19's second example).  bound 0, idleness 5: a split silent at an emission
    # starts its timer there and is idle at the next (10 > 5).  t=10: 10, 5, 30, output 5.  t=30: s1
    # (silent since t=10) idle: r1 IDLE, it held the output: min(10, 30) = 10; s2 too: r2 IDLE.  t=40:
    # r1 ACTIVE and 7 (below 10: unaligned).  t=50: r0 IDLE (10 was the output: no aligned channel is
    # left).  t=70: r1 IDLE, the last active channel, 7 below the output: the maximum 30, then IDLE
    # (Flink 2.3.0: IDLE alone).
    "d1-flush": ({"readers": 3, "interval": 10, "idleness": 5}, """
        add r0 s0
        add r1 s1
        add r2 s2
        record s0 11
        record s1 6
        record s2 31
        tick 10
        record s0 11
        tick 10
        record s0 11
        tick 10
        record s1 8
        tick 10
        record s1 8
        tick 10
        tick 20
    """, """
        @3 record s0 11
        @4 record s1 6
        @5 record s2 31
        @6 watermark r0 10
        @6 watermark r1 5
        @6 watermark r2 30
        @6 output 5
        @7 record s0 11
        @9 record s0 11
        @10 idle r1
        @10 output 10
        @10 idle r2
        @11 record s1 8
        @12 active r1
        @12 watermark r1 7
        @13 record s1 8
        @14 idle r0
        @15 idle r1
        @15 output 30
        @15 output idle
    """, 0),
    # D1, the stall (WM-20's second example).  t=10: 15, 9 (r2 at MIN holds the valve).  t=20: r2 (no
    # record: its timer started at 10) IDLE, its MIN was the output: min(15, 9) = 9.  t=40: r0 (silent
    # since t=20) IDLE.  t=50: r2 ACTIVE and 4 (below 9: unaligned).  t=60: r1 IDLE, it held the output,
    # no aligned channel is left.  t=70: r0 ACTIVE: its 15 is not below 9, aligned, and the minimum
    # over the aligned channels, 15, goes out at once; then its 25 (Flink 2.3.0: 25 alone).
    "d1-stall": ({"readers": 3, "interval": 10, "idleness": 5}, """
        add r0 s0
        add r1 s1
        add r2 s2
        record s1 10
        record s0 16
        tick 10
        record s0 16
        record s1 10
        tick 10
        record s1 10
        tick 10
        record s1 10
        tick 10
        record s2 5
        tick 10
        record s2 5
        tick 10
        record s0 26
        tick 10
    """, """
        @3 record s1 10
        @4 record s0 16
        @5 watermark r0 15
        @5 watermark r1 9
        @6 record s0 16
        @7 record s1 10
        @8 idle r2
        @8 output 9
        @9 record s1 10
        @11 record s1 10
        @12 idle r0
        @13 record s2 5
        @14 active r2
        @14 watermark r2 4
        @15 record s2 5
        @16 idle r1
        @17 record s0 26
        @18 active r0
        @18 output 15
        @18 watermark r0 25
        @18 output 25
    """, 0),
}

def schedule(name: str) -> Schedule:
    config, steps, _, _ = CASES[name]
    return WM.schedule(config, steps)


def rendered(trace: Trace | list[Any]) -> list[str]:
    return [WM.render(e) for e in trace]


def expected(name: str) -> list[str]:
    return rendered(WM.trace(CASES[name][2]))


@pytest.fixture
def workdir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="wm-test-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("name", list(CASES))
def test_schedule_in_process(name: str, workdir: str) -> None:
    assert rendered(run_with_retries(schedule(name), workdir)) == expected(name)


def test_capabilities_are_the_area_s() -> None:
    assert set(CAPABILITIES) == set(get_area("watermarks").capabilities)
    assert all(v is None for v in CAPABILITIES.values())


def test_end_with_idle_reader_sends_active_then_max(workdir: str) -> None:
    """D2 with two readers that are both idle at the end: r0 goes idle at t=40 (no split, the main
    output started at 10, 30 > 25), the valve's other channel is still active; r1 at t=40 too: the
    valve goes idle (max MIN is not above MIN).  End: r0 ACTIVE (valve ACTIVE), r0 MAX (ch1 is idle:
    the min over the aligned is MAX), r1 ACTIVE (the valve is active: nothing), r1 MAX (MAX is not
    above MAX)."""
    s = WM.schedule({"readers": 2, "interval": 10, "idleness": 25}, "tick 40\nend")
    assert rendered(run_with_retries(s, workdir)) == rendered(WM.trace("""
        @0 idle r0
        @0 idle r1
        @0 output idle
        @1 active r0
        @1 output active
        @1 watermark r0 MAX
        @1 output MAX
        @1 active r1
        @1 watermark r1 MAX
    """))


# --------------------------------------------------------------------------
# 3. Through Spark: failovers are real task failures
# --------------------------------------------------------------------------


@pytest.mark.spark
def test_failovers_through_spark_are_task_retries(spark: Any) -> None:
    from flink_semantics.adapters.pyspark import PySparkAdapter

    names = list(CASES)
    adapter = PySparkAdapter()
    try:
        traces = adapter.run_batch([schedule(n) for n in names])
        for i, name in enumerate(names):
            assert rendered(traces[i]) == expected(name), name
            failures = CASES[name][3]
            assert adapter.task_attempts[i] >= failures, (name, adapter.task_attempts[i])
        assert max(adapter.task_attempts.values()) >= 2
    finally:
        adapter.close()


# --------------------------------------------------------------------------
# 4. The valve with many channels, against the reference's (the suite's schedules have at most 3)
# --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(channels=st.integers(1, 40),
       inputs=st.lists(st.tuples(st.integers(0, 39), st.integers(-1, 60)), max_size=200))
def test_the_valve_agrees_with_the_reference_on_many_channels(channels: int,
                                                             inputs: list[tuple[int, int]]) -> None:
    """Random inputs (a value of -1 is IDLE, 0 ACTIVE, above 0 a watermark) on up to 40 channels:
    the heap-based valve emits what the reference's list-based valve does."""
    from flink_semantics.reference.watermarks import Valve

    got: list[tuple[str, Any]] = []
    want: list[Any] = []
    valve = StatusWatermarkValve(channels, lambda kind, **fields: got.append((kind, *fields.values())))
    oracle = Valve(channels, want.append, lambda: 0)
    for ch, value in inputs:
        ch %= channels
        if value <= 0:
            valve.input_status(value < 0, ch)
            oracle.status(ch, value < 0)
        else:
            valve.input_watermark(value, ch)
            oracle.watermark(ch, value)
    assert got == [(e.event, *e.data) for e in want]
