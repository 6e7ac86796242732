"""The mini-batch strategies shrink step by step (issue 32 item 4): a schedule is a list of drawn
steps, each a kind then its fields, so that hypothesis' shrinking removes single steps and
simplifies each field; searched with `hypothesis.find`, the least schedule reaching a state holds
only the steps that state needs, each at its plainest (key 0, value 0, `+I`)."""

from __future__ import annotations

from flink_semantics.conformance.areas.mini_batch import Features, schedules
from flink_semantics.reference import expected_trace
from flink_semantics.spec.areas.mini_batch import (
    CheckpointStep,
    CrashStep,
    MiniBatchConfig,
    RestoreStep,
    RowStep,
)
from flink_semantics.spec.schedule import Schedule, validate_schedule
from hypothesis import HealthCheck, find, settings

SEARCH = settings(database=None, max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))


def test_a_delete_shrinks_to_two_rows() -> None:
    """The least schedule whose trace deletes a key: one key accumulated, then retracted (MB-23: a
    count of zero deletes it, whether the retraction is -U or -D; -U comes first among the kinds)."""
    found = find(schedules(Features(enabled=False, advance=False, upstream_watermarks=False, end=False)),
                 lambda s: any(e.event == "out" and e.change == "-D" for e in expected_trace(s).events),
                 settings=SEARCH)
    assert found.steps == (RowStep(0, "+I", 0), RowStep(0, "-U", 0))
    assert found.config == MiniBatchConfig(update_before=False, ttl=False, two_phase=False)


def test_an_older_restore_shrinks_to_its_checkpoints() -> None:
    """The least schedule restoring an older checkpoint (MB-29): two checkpoints, the plainest row
    between them, the crash and the restore of the first."""

    def older(s: Schedule) -> bool:
        taken = [x.id for x in s.steps if isinstance(x, CheckpointStep)]
        return any(isinstance(x, RestoreStep) and x.checkpoint is not None and x.checkpoint < max(taken)
                   for x in s.steps)

    found = find(schedules(Features(checkpoints=True)), older, settings=SEARCH)
    validate_schedule(found)
    assert found.steps == (CheckpointStep(1), RowStep(0, "+I", 0), CheckpointStep(2), CrashStep(),
                           RestoreStep(1))
