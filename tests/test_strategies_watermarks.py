"""The watermarks strategies shrink step by step (issue 32 item 4): a schedule is a list of moves,
each drawn whole whatever the schedule so far and standing for one step, so that hypothesis'
shrinking removes single steps, also of the sequences that hold a reader (no drawn value is a burst
of steps), and simplifies each field."""

from __future__ import annotations

from flink_semantics.conformance.areas.watermarks_strategies import (
    Features,
    Move,
    _Drawing,
    moves,
    schedules,
)
from flink_semantics.reference import expected_trace
from flink_semantics.spec.areas.watermarks import (
    AddSplitStep,
    AlignStep,
    RecordStep,
    TickStep,
    WatermarksConfig,
)
from flink_semantics.spec.schedule import Schedule, validate_schedule
from hypothesis import HealthCheck, given, settings

FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))

ALIGNED = Features(max_readers=2, alignment=True, max_steps=20)
# WM-26's example configuration: two readers, drift 5, the latest watermark checked (buffer 0).
CONFIG = WatermarksConfig(readers=2, bound=0, interval=10, max_drift=5, alignment_buffer=0)

# Two splits, a level record on s1 at the highest timestamp (0), then moves whose `carry` carries a
# lead: s0 21 above it (`ahead`: top + 21 + value % 8, on the split away from the last record's
# reader), its periodic interval, one announcement (buffer 0); then the lead is carried no further,
# so the last move is its own kind: a record on the first split at its value.
HOLD = [Move(0, "add_split", 0), Move(0, "add_split", 1), Move(0, "level", 1), Move(1, "record"),
        Move(1, "record"), Move(1, "record"), Move(1, "record")]


# Their steps up to the lead's interval.
LEAD = (AddSplitStep(0, 0), AddSplitStep(1, 1), RecordStep(1, 0), RecordStep(0, 21), TickStep(10))


def steps_of(moves: list[Move], f: Features = ALIGNED) -> tuple:
    d = _Drawing(f, CONFIG)
    d.take(moves)
    return tuple(d.steps)


def test_carried_moves_are_one_step_each() -> None:
    """The moves that carry a lead are single steps; the reader ahead is blocked at the announcement,
    as in WM-25's and WM-26's examples (r0's watermark 20 above r1's -1 plus the drift 5)."""
    steps = steps_of(HOLD)
    assert steps == (*LEAD, AlignStep(), RecordStep(0, 0))
    trace = expected_trace(Schedule("watermarks", CONFIG, steps))
    assert [(e.step, e.event) for e in trace.events if e.event in ("blocked", "paused")] == [
        (5, "blocked"), (5, "paused")]


def test_deleting_a_carried_move_deletes_one_step() -> None:
    """Without the announcement's move the next carried move is the announcement: one step fewer
    (what shrinking does to a sequence a burst used to stand for), and the reader is still held."""
    steps = steps_of(HOLD[:5] + HOLD[6:])
    assert steps == (*LEAD, AlignStep())
    assert any(e.event == "blocked" for e in expected_trace(Schedule("watermarks", CONFIG, steps)).events)


@FAST
@given(moves(Features(max_readers=2, idleness=True, alignment=True, failover=True)))
def test_a_move_is_one_step(drawn: list[Move]) -> None:
    """Every move stands for exactly one step (with no cap on their number), carried or not."""
    config = WatermarksConfig(readers=2, bound=0, interval=10, idleness=15, max_drift=5, alignment_buffer=2)
    f = Features(max_readers=2, idleness=True, alignment=True, failover=True, max_steps=len(drawn))
    d = _Drawing(f, config)
    d.take(drawn)
    assert len(d.steps) == len(drawn)


@FAST
@given(schedules(Features(max_readers=3, idleness=True, punctuated=True, failover=True, alignment=True,
                          max_steps=30)))
def test_drawn_schedules_are_valid(schedule: Schedule) -> None:
    """Every step drawn against the schedule so far is valid there (WM-29): records and finishes on
    live splits, new split ids, readers of the configuration, `end` last."""
    validate_schedule(schedule)
