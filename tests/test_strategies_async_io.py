"""The async I/O strategies shrink intent by intent (issue 32 item 4): a schedule is a configuration
drawn field by field and a list of intents, each drawn as its kind and then only the fields that
kind uses, each field with its own strategy, so that shrinking can drop any intent and simplify any
field on its own (no drawn integer is decoded into several fields)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flink_semantics.conformance.areas.async_io_strategies import (
    Features,
    Intent,
    _draw_steps,
    _Drawing,
    configs,
    schedules,
)
from flink_semantics.spec.areas.async_io import (
    AdvanceStep,
    AsyncIoConfig,
    CheckpointStep,
    CompleteStep,
    CrashStep,
    EndStep,
    ErrorStep,
    RecordStep,
    RestoreStep,
    RetryConfig,
    WatermarkStep,
)
from flink_semantics.spec.schedule import Schedule, Step, validate_schedule
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

FAST = settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))

EVERYTHING = Features(statuses=True, timeouts=True, retries=True, checkpoints=True, errors=True, nulls=True,
                      max_steps=30)
# A timeout the handler ignores, and a retry when a result is empty.
CONFIG = AsyncIoConfig(mode="ordered", capacity=3, timeout=10, on_timeout="ignore",
                       retry=RetryConfig("fixed_delay", 1, delay=3, if_empty=True))


def steps_of(drawn: list[Intent], config: AsyncIoConfig = CONFIG) -> tuple[Step, ...]:
    """The steps the intents stand for, one after another, under EVERYTHING and the configuration."""
    d = _Drawing(None, EVERYTHING, config)
    for i in drawn:
        if d.room():
            d.take(i)
    return tuple(d.steps)


def test_intents_use_their_own_fields() -> None:
    """A record is its value and timestamp; a completion counts back from the latest outstanding
    record (`which`, modulo their number) with its result; a watermark rises by `rise`; an advance
    moves the clock by `ms`; an error names its record like a completion."""
    drawn = [Intent("record", value=4, timestamp=7), Intent("record", value=5), Intent("record", value=6),
             Intent("complete", which=0, result=(1, 2)), Intent("complete", which=5, result=(3,)),
             Intent("watermark", rise=2), Intent("watermark", rise=0), Intent("advance", ms=3),
             Intent("error", which=0)]
    assert steps_of(drawn) == (RecordStep(4, 7), RecordStep(5, None), RecordStep(6, None),
                               CompleteStep(2, (1, 2)), CompleteStep(0, (3,)),  # 5 modulo 2: the oldest
                               WatermarkStep(2), WatermarkStep(2), AdvanceStep(3), ErrorStep(1, "error"))


def test_an_intent_the_schedule_does_not_allow_makes_no_step() -> None:
    """A completion with nothing outstanding, a repeat with nothing finished and a record after end
    of input make no step; the intents after them mean what they meant."""
    drawn = [Intent("complete", which=1), Intent("repeat"), Intent("record", value=1), Intent("end"),
             Intent("record", value=2), Intent("complete", result=(9,))]
    assert steps_of(drawn) == (RecordStep(1, None), EndStep(), CompleteStep(0, (9,)))


def test_rare_states_are_one_intent_away() -> None:
    """An advance exactly to the timer that fires an ignored timeout completes that record at once
    (`then`, AIO-30 at its deadline); an empty result that is retried (the record waits for its
    retry) is followed at once by the step `then` names (AIO-39, AIO-41); a crash restores from the
    checkpoint `source` names, at a capacity below what it stores with `below` (AIO-57); a record
    that waits at a full queue is followed by an advance to the next timer (`then`, AIO-59)."""
    late = steps_of([Intent("record"), Intent("advance", ms=1, to_timer=True, then="complete")])
    assert late == (RecordStep(0, None), AdvanceStep(10), CompleteStep(0, ()))
    waiting = steps_of([Intent("record"), Intent("complete", then="end")])
    assert waiting == (RecordStep(0, None), CompleteStep(0, ()), EndStep())
    stored = steps_of([Intent("record"), Intent("record"), Intent("checkpoint"),
                       Intent("crash", source=0, capacity=3, below=True)])
    assert stored == (RecordStep(0, None), RecordStep(0, None), CheckpointStep(1), CrashStep(),
                      RestoreStep(1, 1))
    waited = steps_of([Intent("record")] * 3 + [Intent("record", then="advance")])
    assert waited == (*[RecordStep(0, None)] * 4, AdvanceStep(10))  # capacity 3: the fourth waits


@st.composite
def drawn_intents(draw: Any, f: Features) -> tuple[AsyncIoConfig, list[Intent]]:
    """A configuration and the intents a schedule was drawn from."""
    config = draw(configs(f))
    return config, _draw_steps(draw, f, config).taken


@FAST
@given(drawn_intents(EVERYTHING), st.data())
def test_drawn_intents_without_any_one_of_them_are_still_a_valid_schedule(
        drawn: tuple[AsyncIoConfig, list[Intent]], data: st.DataObject) -> None:
    """Shrinking tries the drawn intents with one of them removed: each intent acts on what the
    intents before it left (a completion of a record that never came makes no step), so every such
    list is a valid schedule (SCH-3..SCH-7); validate_schedule raises otherwise."""
    config, taken = drawn
    i = data.draw(st.integers(0, max(0, len(taken) - 1)), label="removed intent")
    validate_schedule(Schedule("async_io", config, steps_of(taken[:i] + taken[i + 1:], config)))


@FAST
@given(schedules(EVERYTHING))
def test_drawn_schedules_are_valid(schedule: Schedule) -> None:
    """Every drawn schedule passes the validation (SCH-1..SCH-7 by construction): it raises otherwise."""
    validate_schedule(schedule)


@FAST
@given(schedules(replace(EVERYTHING, max_steps=8)))
def test_no_schedule_is_longer_than_max_steps(schedule: Schedule) -> None:
    """A schedule stops at `max_steps`, however many intents were drawn."""
    assert len(schedule.steps) <= 8


def test_shrinking_drops_other_intents_and_simplifies_each_field() -> None:
    """The least schedule in which a record completes while an earlier one is still outstanding is
    two records of value 0 without timestamps and an empty result for the second, at capacity 2
    (the least that admits both), without timeout: every other intent dropped, each field at its
    plainest."""
    def out_of_order(s: Schedule) -> bool:
        done: set[int] = set()
        for x in s.steps:
            if isinstance(x, CompleteStep):
                if any(r < x.record and r not in done for r in range(x.record)):
                    return True
                done.add(x.record)
        return False

    least = find(schedules(Features(timeouts=True, errors=True, max_steps=20)), out_of_order,
                 settings=settings(database=None, max_examples=2000, deadline=None,
                                   suppress_health_check=list(HealthCheck)))
    assert least.config == AsyncIoConfig(mode="ordered", capacity=2, timeout=1, on_timeout="fail")
    assert least.steps == (RecordStep(0, None), RecordStep(0, None), CompleteStep(1, ()))
