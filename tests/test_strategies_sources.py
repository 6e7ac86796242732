"""The sources strategies shrink step by step (issue 32 item 4): a schedule is a list of drawn steps,
each a kind (weighed by the reference model's state) then its fields, valid against the steps before
it, so that hypothesis' shrinking removes single steps and simplifies each field; searched with
`hypothesis.find`, the least schedule reaching a state holds only the steps that state needs, each
at its plainest (reader 0, one record, the first checkpoint), with no burst of steps around them."""

from __future__ import annotations

from flink_semantics.conformance.areas.sources import SILENT_CONFIRMED, Features, coverage, schedules
from flink_semantics.reference import expected_trace
from flink_semantics.spec.areas.sources import (
    BarrierStep,
    CheckpointStep,
    CompleteStep,
    FailStep,
    PollStep,
    RegisterStep,
    RequestStep,
    SourcesConfig,
)
from flink_semantics.spec.schedule import validate_schedule
from hypothesis import HealthCheck, find, settings

SEARCH = settings(database=None, max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))


def test_a_returned_split_shrinks_to_three_steps() -> None:
    """The least schedule whose reader failure gives a split back (SRC-21: the splits assigned since
    the restore point return to the enumerator): one reader, one empty split, the reader registers,
    asks for the split, fails."""
    found = find(schedules(Features(reader_failures=True, end=False)),
                 lambda s: any(e.event == "splits_back" and e.splits for e in expected_trace(s).events),
                 settings=SEARCH)
    assert found.config == SourcesConfig(readers=1, splits=(0,))
    assert found.steps == (RegisterStep(0), RequestStep(0), FailStep(0))


def test_a_silent_completion_committed_by_a_failover_shrinks_to_its_seven_steps() -> None:
    """The least schedule reaching SILENT_CONFIRMED (SRC-29: restoring a checkpoint that completed
    without notification commits what its sinks staged): a record read, a checkpoint taken, its
    barrier passed, completed without notification, then the reader fails.  The poll before the
    checkpoint is a step of its own, not part of a burst."""
    f = Features(checkpoints=True, silent=True, reader_failures=True, end=False)
    found = find(schedules(f), lambda s: SILENT_CONFIRMED in coverage(s), settings=SEARCH)
    validate_schedule(found)
    assert found.config == SourcesConfig(readers=1, splits=(1,))
    assert found.steps == (RegisterStep(0), RequestStep(0), PollStep(0, 1), CheckpointStep(1), BarrierStep(1),
                           CompleteStep(1, notify=False), FailStep(0))
