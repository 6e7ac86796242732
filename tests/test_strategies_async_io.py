"""The async I/O strategies shrink step by step (issue 32 item 4): a schedule is a list of drawn
intents, each a kind then its fields, made valid against the schedule so far, so that hypothesis'
shrinking removes single steps and simplifies each field; searched with `hypothesis.find`, the
least schedule reaching a state holds only the steps that state needs, each at its plainest (value
0, no timestamp, the least capacity, a result of one value 0)."""

from __future__ import annotations

from flink_semantics.conformance.areas.async_io import AT_DEADLINE, coverage
from flink_semantics.conformance.areas.async_io_strategies import (
    Features,
    Outcome,
    Record,
    _Drawing,
    schedules,
)
from flink_semantics.reference import expected_trace
from flink_semantics.spec.areas.async_io import (
    AdvanceStep,
    AsyncIoConfig,
    CompleteStep,
    RecordStep,
    RestoreStep,
    WatermarkStep,
)
from flink_semantics.spec.schedule import Schedule
from hypothesis import HealthCheck, find, settings

SEARCH = settings(database=None, max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))


def _record_steps(s: Schedule) -> list[int]:
    """The step index of each record, in record order."""
    return [i for i, x in enumerate(s.steps) if isinstance(x, RecordStep)]


def _held_back(s: Schedule) -> bool:
    """A record's result is emitted at a later step than the completion that gave it."""
    completed = {x.record: i for i, x in enumerate(s.steps) if isinstance(x, CompleteStep) and x.result}
    return any(e.event == "emit" and e.record in completed and e.step > completed[e.record]
               for e in expected_trace(s).events)


def test_a_full_queue_shrinks_to_two_records() -> None:
    """The least schedule in which a record waits at a full queue (AIO-7: no call starts at the step
    it arrives): capacity 1, two records."""

    def waits(s: Schedule) -> bool:
        invoked = {(e.record, e.step) for e in expected_trace(s).events if e.event == "invoke"}
        return any((r, i) not in invoked for r, i in enumerate(_record_steps(s)))

    found = find(schedules(Features()), waits, settings=SEARCH)
    assert found.config == AsyncIoConfig(mode="ordered", capacity=1)
    assert found.steps == (RecordStep(0, None), RecordStep(0, None))


def test_an_ordered_result_held_back_shrinks_to_one_completion() -> None:
    """The least ordered schedule holding a result back (AIO-12): two records, the later completed
    first (`which` 0: the latest) with the plainest result that emits (one value, 0), then the head."""
    found = find(schedules(Features(modes=("ordered",))), _held_back, settings=SEARCH)
    assert found.config == AsyncIoConfig(mode="ordered", capacity=2)
    assert found.steps == (RecordStep(0, None), RecordStep(0, None), CompleteStep(1, (0,)),
                           CompleteStep(0, (0,)))


def test_an_unordered_result_behind_a_watermark_shrinks_to_its_segments() -> None:
    """The least unordered schedule holding a result behind a watermark (AIO-13): a record, the
    watermark (the same as the last: 0), a record behind it completed first, then the first."""
    found = find(schedules(Features(modes=("unordered",), end=False)), _held_back, settings=SEARCH)
    assert found.config == AsyncIoConfig(mode="unordered", capacity=3)
    assert found.steps == (RecordStep(0, None), WatermarkStep(0), RecordStep(0, None), CompleteStep(1, (0,)),
                           CompleteStep(0, (0,)))


def test_an_outcome_at_its_deadline_shrinks_to_three_steps() -> None:
    """The least schedule with an outcome exactly at a record's deadline (AT_DEADLINE: AIO-30): the
    least timeout, whose handler ignores it, a record, time to the deadline, the plainest result."""
    found = find(schedules(Features(timeouts=True)), lambda s: AT_DEADLINE in coverage(s), settings=SEARCH)
    assert found.config == AsyncIoConfig(mode="ordered", capacity=1, timeout=1, on_timeout="ignore")
    assert found.steps == (RecordStep(0, None), AdvanceStep(1), CompleteStep(0, (0,)))


def test_a_completion_counts_back_from_the_latest_and_stops_at_the_oldest() -> None:
    """`Outcome.which` is clamped, not wrapped: past the oldest outstanding record it stays the oldest,
    so a step deleted before it leaves the record it names alone."""
    d = _Drawing(None, Features(), AsyncIoConfig(capacity=3))
    for _ in range(3):
        d.take(Record(0, None))
    d.take(Outcome(0, (), False, False, None))
    d.take(Outcome(9, (), False, False, None))
    assert d.steps[3:] == [CompleteStep(2, ()), CompleteStep(0, ())]


def test_a_failure_is_restored_before_the_next_intent() -> None:
    """After a failure (AIO-20: a null result without retry), the next intent is taken after a plain
    restore (SCH-7), not turned into one: deleting the failing step leaves the intents after it alone."""
    d = _Drawing(None, Features(checkpoints=True, nulls=True), AsyncIoConfig(capacity=1))
    d.take(Record(0, None))
    d.take(Outcome(0, (), True, False, None))
    assert not d.model.alive
    d.take(Record(1, None))
    assert d.steps[1:] == [CompleteStep(0, None), RestoreStep(None, None), RecordStep(1, None)]
