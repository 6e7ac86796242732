"""The conformance suite for mini-batch aggregation (spec/mini-batch.md).

Each property names the rules it checks.  It draws a batch of schedules, runs the whole batch
through the adapter once (`conformance.check`), and compares every trace with the reference trace
exactly (conformance/checker.py), the keys of one bundle in any order (MB-9).  Features the adapter
does not support are left out of the drawn schedules; a property whose core the adapter does not
support is reported as UNSUPPORTED.
"""

from __future__ import annotations

import pytest
from flink_semantics.conformance.areas.mini_batch import (
    Features,
    compaction_problems,
    equivalent_schedules,
    feature_batches,
    final_results,
    malformed_schedules,
    rejected_configs,
)
from flink_semantics.conformance.plugin import Conformance
from flink_semantics.conformance.strategies import batches, malformed_batches, refusal_problems
from flink_semantics.reference import expected_trace
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.area("mini_batch")

# Without time: rows only, no `advance`, upstream watermark or end of input (whose watermarks an
# engine may not show, mini_batch.watermarks), so that bundles end by size alone.
UNTIMED = {"advance": False, "upstream_watermarks": False, "end": False}

FEATURES = {
    "test_per_row_changelog": Features(enabled=False, max_steps=24, **UNTIMED),
    "test_size_bundles": Features(max_steps=30, **UNTIMED),
    "test_per_row_aggregation": Features(enabled=False, status=True, max_steps=24),
    "test_processing_time_bundles": Features(max_steps=30),
    "test_row_time_bundles": Features(rowtime=True, max_steps=30),
    "test_local_global": Features(two_phase=True, max_steps=30),
    "test_checkpoints_and_restores": Features(checkpoints=True, max_steps=30),
    "test_idle_statuses": Features(status=True, max_steps=30),
    "test_everything_together": Features(rowtime=True, two_phase=True, checkpoints=True, status=True,
                                         max_steps=40),
}


def check(conformance: Conformance, data: st.DataObject, name: str) -> None:
    conformance.check(data.draw(feature_batches(conformance.restrict(FEATURES[name])), label="batch"))


@pytest.mark.rule("MB-1", "MB-3", "MB-18", "MB-19", "MB-20", "MB-23", "MB-24", "MB-30")
@pytest.mark.needs("scripted")
@given(data=st.data())
def test_per_row_changelog(conformance: Conformance, data: st.DataObject) -> None:
    """Mini-batch off (two-phase asked for or not), rows only: every row applied on its own; +I for a
    new key, -U/+U for a change, -D when the count drops to zero, leading retractions dropped;
    COUNT, SUM, MIN and MAX with retraction."""
    check(conformance, data, "test_per_row_changelog")


@pytest.mark.rule("MB-9", "MB-10", "MB-11", "MB-17", "MB-18", "MB-19", "MB-20", "MB-21", "MB-22", "MB-23",
                  "MB-30")
@pytest.mark.needs("scripted")
@given(data=st.data())
def test_size_bundles(conformance: Conformance, data: st.DataObject) -> None:
    """Mini-batch on, rows only: bundles finished by size alone (records, the last one inside), the
    count reset each time; one change per key and bundle, in any key order, its inputs applied in
    arrival order; an unchanged key emits nothing, or +U again with state retention."""
    check(conformance, data, "test_size_bundles")


@pytest.mark.rule("MB-1", "MB-3", "MB-8", "MB-18", "MB-19", "MB-20", "MB-23", "MB-24", "MB-30")
@pytest.mark.needs("mini_batch.watermarks", "scripted")
@given(data=st.data())
def test_per_row_aggregation(conformance: Conformance, data: st.DataObject) -> None:
    """Mini-batch off (two-phase asked for or not): every row applied on its own; +I for a new key,
    -U/+U for a change, -D when the count drops to zero, leading retractions dropped; COUNT, SUM,
    MIN and MAX with retraction; watermarks and statuses through the valve."""
    check(conformance, data, "test_per_row_aggregation")


@pytest.mark.rule("MB-4", "MB-5", "MB-9", "MB-10", "MB-11", "MB-12", "MB-14", "MB-16", "MB-17", "MB-18",
                  "MB-19", "MB-20", "MB-21", "MB-22", "MB-23", "MB-30")
@pytest.mark.needs("mini_batch.processing_time", "mini_batch.watermarks", "scripted")
@given(data=st.data())
def test_processing_time_bundles(conformance: Conformance, data: st.DataObject) -> None:
    """The processing-time assigner's batches (timers, and before a row); upstream watermarks
    dropped but MAX; bundles finished by size (records, the last one inside), before a watermark and
    at end of input, the count reset each time; one change per key and bundle, in any key order."""
    check(conformance, data, "test_processing_time_bundles")


@pytest.mark.rule("MB-6", "MB-7", "MB-8", "MB-12")
@pytest.mark.needs("mini_batch.rowtime", "mini_batch.watermarks", "scripted")
@given(data=st.data())
def test_row_time_bundles(conformance: Conformance, data: st.DataObject) -> None:
    """The row-time assigner: watermarks held to interval ends (Java long arithmetic), MAX at once,
    the current watermark again at finish, repeats dropped by the valve."""
    check(conformance, data, "test_row_time_bundles")


@pytest.mark.rule("MB-10", "MB-25", "MB-26")
@pytest.mark.needs("mini_batch.two_phase", "scripted")
@given(data=st.data())
def test_local_global(conformance: Conformance, data: st.DataObject) -> None:
    """Two-phase aggregation: local bundles of rows reduced to one accumulator per key, sent in
    first-arrival order into the global aggregation's bundles (counted in accumulators, finished as
    soon as they reach the size, in the middle of a local flush at a watermark too), merged into
    the state's accumulators."""
    check(conformance, data, "test_local_global")


@pytest.mark.rule("MB-13", "MB-29")
@pytest.mark.needs("mini_batch.checkpoint", "scripted")
@given(data=st.data())
def test_checkpoints_and_restores(conformance: Conformance, data: st.DataObject) -> None:
    """Bundles finished before a checkpoint barrier; a restore from the checkpoint's state with the
    assigner, bundles and valve afresh: rows buffered at a crash lost, output after the checkpoint
    kept."""
    check(conformance, data, "test_checkpoints_and_restores")


@pytest.mark.rule("MB-8", "MB-15", "MB-22")  # MB-22: it draws state retention too, and checks every update
@pytest.mark.needs("mini_batch.status", "mini_batch.watermarks", "scripted")
@given(data=st.data())
def test_idle_statuses(conformance: Conformance, data: st.DataObject) -> None:
    """Statuses pass every operator without finishing a bundle, repeats dropped; while idle, the
    assigner's watermarks are dropped at its output (its current watermark still advances)."""
    check(conformance, data, "test_idle_statuses")


@pytest.mark.rule("MB-13", "MB-15", "MB-25", "MB-26", "MB-29")
@pytest.mark.needs("mini_batch.rowtime", "mini_batch.two_phase", "mini_batch.checkpoint",
                   "mini_batch.status", "mini_batch.processing_time", "mini_batch.watermarks", "scripted")
@given(data=st.data())
def test_everything_together(conformance: Conformance, data: st.DataObject) -> None:
    """Row time, two phases, checkpoints, crashes, restores and statuses in one schedule."""
    check(conformance, data, "test_everything_together")


@pytest.mark.rule("MB-2")
@pytest.mark.needs("mini_batch.config_validation")
@given(data=st.data())
def test_configuration_validation(conformance: Conformance, data: st.DataObject) -> None:
    """Mini-batch on with a latency or size that is not positive: the single `rejected` event."""
    batch = data.draw(batches(rejected_configs(), 6), label="batch")
    assert all(expected_trace(s).rejected for s in batch)
    conformance.check(batch)


@pytest.mark.rule("MB-31", "MB-32")
@pytest.mark.needs("mini_batch.rowtime", "mini_batch.two_phase", "mini_batch.processing_time",
                   "mini_batch.watermarks", "scripted")
@given(data=st.data())
def test_equivalences(conformance: Conformance, data: st.DataObject) -> None:
    """One well-formed changelog under mini-batch off, on (both assigners) and two-phase: the same
    final result per key (MB-31); each key's mini-batch results are per-row results in order, at most
    one change per key and bundle (MB-32).  Stated on the oracle's traces from the traces alone,
    then the adapter's traces compared with them."""
    groups = data.draw(st.lists(equivalent_schedules(), min_size=1, max_size=3), label="groups")
    for group in groups:
        per_row, *others = [expected_trace(s) for s in group]
        want = final_results(per_row)
        for schedule, trace in zip(group[1:], others):
            got = final_results(trace)
            assert got == want, (f"the oracle breaks MB-31: final {got} != per-row final {want}\n"
                                 f"{schedule.to_json()}")
            problems = compaction_problems(per_row, trace, one_phase=not schedule.config.two_phase)
            assert not problems, f"the oracle breaks MB-32: {problems}\n{schedule.to_json()}"
    conformance.check([s for group in groups for s in group])


# --------------------------------------------------------------------------
# The area's schedule rules (reference level: the adapter is not involved)
# --------------------------------------------------------------------------


@pytest.mark.rule("MB-27", "MB-28")
@given(data=st.data())
def test_malformed_schedules_are_refused(conformance: Conformance, data: st.DataObject) -> None:
    """A malformed mini-batch schedule raises ScheduleError naming the step and the rule."""
    cases = data.draw(malformed_batches(malformed_schedules()), label="cases")
    conformance.count(len(cases))
    problems = refusal_problems(cases)
    assert not problems, "\n".join(problems)
