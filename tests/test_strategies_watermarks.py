"""The watermarks strategies shrink move by move (issue 32 item 4): a schedule is a list of moves, each
drawn as its kind and then only the fields that kind uses, each field with its own strategy, so that
shrinking can drop any move and simplify any field on its own (no drawn integer is decoded into
several fields)."""

from __future__ import annotations

from flink_semantics.conformance.areas.watermarks_strategies import (
    Features,
    Move,
    _Drawing,
    moves,
    schedules,
)
from flink_semantics.spec.areas.watermarks import (
    AddSplitStep,
    AlignStep,
    FailoverStep,
    FinishSplitStep,
    RecordStep,
    TickStep,
    WatermarksConfig,
)
from flink_semantics.spec.schedule import Schedule, Step, validate_schedule
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

FAST = settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))

EVERYTHING = Features(max_readers=3, idleness=True, punctuated=True, failover=True, alignment=True,
                      max_steps=30)
CONFIG = WatermarksConfig(readers=2, bound=0, interval=10, idleness=15, max_drift=5, alignment_buffer=2)


def steps_of(drawn: list[Move]) -> tuple[Step, ...]:
    d = _Drawing(EVERYTHING, CONFIG)
    for m in drawn:
        for s in d.steps_of(m):
            d.apply(s)
    return tuple(d.steps)


# Two splits of reader 0, one of reader 1, and a record at 30 on split 2: the highest timestamp is 30.
START = [Move("add_split", 0), Move("add_split", 0), Move("add_split", 1), Move("record", 2, 30)]
STARTED = (AddSplitStep(0, 0), AddSplitStep(0, 1), AddSplitStep(1, 2), RecordStep(2, 30))


def test_plain_moves_use_their_own_fields() -> None:
    """A record is its split (modulo the live ones) and timestamp, a tick its duration (1 + value
    modulo twice the interval + 3), a finish its split, align and failover nothing."""
    drawn = [*START, Move("tick", value=30), Move("finish_split", 4), Move("align"), Move("failover"),
             Move("record", 1, 7)]
    assert steps_of(drawn) == (*STARTED, TickStep(8), FinishSplitStep(1), AlignStep(), FailoverStep(),
                               RecordStep(2, 7))


def test_a_burst_is_its_fields() -> None:
    """A leap: a record on the other split (`other`) at the highest timestamp, one on its split
    (`which`) 21 + `value` above it, a periodic interval, an announcement per buffered one, and (with
    failovers) a failover.  An edge: the other split on another reader at the highest timestamp, its
    split the drift (5) above it, one more with `value` 1."""
    leap = steps_of([*START, Move("leap", which=1, other=1, value=3)])
    assert leap == (*STARTED, RecordStep(2, 30), RecordStep(1, 54), TickStep(10), AlignStep(), AlignStep(),
                    FailoverStep())
    edge = steps_of([*START, Move("edge", which=0, other=0, value=1)])
    assert edge == (*STARTED, RecordStep(2, 30), RecordStep(0, 36), TickStep(10), AlignStep(), AlignStep())


@FAST
@given(moves(EVERYTHING), st.data())
def test_a_drawn_list_without_any_one_of_its_moves_is_still_a_valid_schedule(drawn: list[Move],
                                                                             data: st.DataObject) -> None:
    """Shrinking tries the drawn moves with one of them removed: each move acts on what the moves
    before it left (a record on a finished split becomes another step), so every such list is a
    valid schedule (WM-29); validate_schedule raises otherwise."""
    i = data.draw(st.integers(0, len(drawn) - 1), label="removed move")
    validate_schedule(Schedule("watermarks", CONFIG, steps_of(drawn[:i] + drawn[i + 1:])))


@FAST
@given(schedules(EVERYTHING))
def test_drawn_schedules_are_valid(schedule: Schedule) -> None:
    """Every drawn schedule passes the validation (WM-29 by construction): it raises otherwise."""
    validate_schedule(schedule)


def test_shrinking_drops_other_moves_and_simplifies_each_field() -> None:
    """The least schedule with a record at 40 or later on a second split is its two splits added and
    that one record at exactly 40: every other move dropped, each field at its plainest."""
    def second_split_late(s: Schedule) -> bool:
        return any(isinstance(x, RecordStep) and x.split == 1 and x.ts >= 40 for x in s.steps)

    least = find(schedules(Features(max_splits=3, max_steps=24)), second_split_late,
                 settings=settings(database=None, max_examples=2000, deadline=None,
                                   suppress_health_check=list(HealthCheck)))
    assert least.steps == (AddSplitStep(0, 0), AddSplitStep(0, 1), RecordStep(1, 40))
