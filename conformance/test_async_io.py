"""The conformance suite for async I/O (spec/async-io.md) and the schedule vocabulary (spec/schedules.md).

Each property names the rules it checks.  It draws a batch of schedules, runs the whole batch
through the adapter once (`conformance.check`), and compares every trace with the reference trace
(conformance/checker.py).  Features the adapter does not support are left out of the drawn
schedules; a property whose core the adapter does not support is reported as UNSUPPORTED.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from flink_semantics.conformance.areas.async_io import (
    Features,
    config_schedules,
    default_capacity_schedules,
    feature_batches,
    malformed_schedules,
    schedules,
)
from flink_semantics.conformance.areas.key_groups import in_flight_problems, in_flight_schedule
from flink_semantics.conformance.plugin import Conformance
from flink_semantics.conformance.strategies import batches, malformed_batches, refusal_problems
from flink_semantics.reference import expected_trace
from flink_semantics.spec.areas.async_io import validate_config
from flink_semantics.spec.schedule import ScheduleError
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.area("async_io")


def check(conformance: Conformance, data: st.DataObject, f: Features, max_size: int = 12) -> None:
    batch = data.draw(feature_batches(conformance.restrict(f), max_size), label="batch")
    conformance.check(batch)


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@pytest.mark.rule("AIO-1", "AIO-3")
@pytest.mark.needs("async_io.config_validation")
@given(data=st.data())
def test_configuration_validation(conformance: Conformance, data: st.DataObject) -> None:
    """Invalid configurations are refused with a `rejected` trace; valid ones run."""
    f = conformance.restrict(Features(timeouts=True, retries=True))
    batch = data.draw(batches(config_schedules(f), 12), label="batch")
    for s in batch:  # the oracle agrees with the static validation of spec/schedule.py
        try:
            validate_config(s.config)
            refused = False
        except ScheduleError:
            refused = True
        assert refused == expected_trace(s).rejected, s.to_json()
    conformance.check(batch)


@pytest.mark.rule("AIO-5")
@pytest.mark.needs("scripted")  # the 101st record waiting shows only in the steps of its invoke
@given(data=st.data())
def test_default_capacity(conformance: Conformance, data: st.DataObject) -> None:
    """Without a capacity the queue holds 100 elements: the 101st record waits."""
    modes = conformance.restrict(Features()).modes
    conformance.check(data.draw(batches(default_capacity_schedules(modes), 6), label="batch"))


# --------------------------------------------------------------------------
# Ordering
# --------------------------------------------------------------------------


# Without watermark steps the order of records alone is checked: AIO-12 is about watermarks too.
@pytest.mark.rule("AIO-12", needs=["async_io.watermarks"])
@pytest.mark.needs("async_io.ordered")
@given(data=st.data())
def test_ordered_mode(conformance: Conformance, data: st.DataObject) -> None:
    check(conformance, data, Features(modes=("ordered",)))


# A FREE adapter completes calls in its own order, so any order inside a segment is a completion order.
@pytest.mark.rule("AIO-13", "AIO-15", needs=["async_io.watermarks"])
@pytest.mark.rule("AIO-14", needs=["scripted"])
@pytest.mark.needs("async_io.unordered")
@given(data=st.data())
def test_unordered_mode(conformance: Conformance, data: st.DataObject) -> None:
    """Unordered mode: segments between watermarks in order, a segment in completion order, records and
    watermarks never overtaking each other."""
    check(conformance, data, Features(modes=("unordered",), end=False, max_steps=20))


@pytest.mark.rule("AIO-15", "AIO-17")
@pytest.mark.rule("AIO-16", needs=["scripted"])  # "in the same step": FREE traces have no steps
@pytest.mark.rule("AIO-53", needs=["async_io.timeout", "scripted"])  # a FREE adapter is drawn no timers
@pytest.mark.needs("async_io.watermarks")
@given(data=st.data())
def test_watermarks(conformance: Conformance, data: st.DataObject) -> None:
    """Watermarks: never overtaken, emitted at once when nothing is before them, all of them."""
    check(conformance, data, Features(max_steps=16))


@pytest.mark.rule("AIO-51")
@pytest.mark.needs("async_io.status")
@given(data=st.data())
def test_watermark_statuses(conformance: Conformance, data: st.DataObject) -> None:
    check(conformance, data, Features(statuses=True))


# --------------------------------------------------------------------------
# Capacity and admission
# --------------------------------------------------------------------------


@pytest.mark.rule("AIO-6", "AIO-7", "AIO-8", "AIO-9")
@pytest.mark.needs("scripted")
@given(data=st.data())
def test_capacity_and_admission(conformance: Conformance, data: st.DataObject) -> None:
    """Records and watermarks take slots until emitted; a full queue blocks the input in order."""
    check(conformance, data, Features(max_capacity=3, max_steps=18))


# --------------------------------------------------------------------------
# Results and failures
# --------------------------------------------------------------------------


@pytest.mark.rule("AIO-18", "AIO-19")
@pytest.mark.rule("AIO-21", needs=["scripted"])  # a FREE adapter is drawn no repeated completions
@given(data=st.data())
def test_results(conformance: Conformance, data: st.DataObject) -> None:
    """Each result list is one run in order with the input's timestamp; repeated completions are ignored."""
    check(conformance, data, Features(repeats=True))


@pytest.mark.rule("AIO-20", "AIO-23", "AIO-58")
@pytest.mark.needs("scripted")
@given(data=st.data())
def test_failures(conformance: Conformance, data: st.DataObject) -> None:
    """An error or a null result fails the task; nothing more is emitted in that incarnation."""
    check(conformance, data, Features(errors=True, nulls=True))


# --------------------------------------------------------------------------
# Timeouts and retries
# --------------------------------------------------------------------------


@pytest.mark.rule("AIO-2", "AIO-26", "AIO-27", "AIO-28", "AIO-29", "AIO-30", "AIO-31", "AIO-32", "AIO-54",
                  "AIO-59")
@pytest.mark.needs("async_io.timeout", "scripted")
@given(data=st.data())
def test_timeouts(conformance: Conformance, data: st.DataObject) -> None:
    check(conformance, data, Features(timeouts=True, errors=True, max_steps=16))


@pytest.mark.rule("AIO-4", "AIO-33", "AIO-34", "AIO-35", "AIO-36", "AIO-37", "AIO-38", "AIO-39", "AIO-40",
                  "AIO-54", "AIO-60")
@pytest.mark.needs("async_io.timeout", "async_io.retry", "scripted")
@given(data=st.data())
def test_retries(conformance: Conformance, data: st.DataObject) -> None:
    check(conformance, data, Features(timeouts=True, retries=True, errors=True, max_steps=18))


# --------------------------------------------------------------------------
# End of input, checkpoints and restore
# --------------------------------------------------------------------------


@pytest.mark.rule("AIO-42", "AIO-56")
@given(data=st.data())
def test_end_of_input(conformance: Conformance, data: st.DataObject) -> None:
    """End of input waits for every queued element; then the operator finishes."""
    check(conformance, data, Features(drain=True, repeats=False))


@pytest.mark.rule("AIO-25", "AIO-41", "AIO-44", "AIO-45", "AIO-46", "AIO-47", "AIO-48", "AIO-55", "AIO-57")
@pytest.mark.needs("async_io.checkpoint", "scripted")
@given(data=st.data())
def test_checkpoint_and_restore(conformance: Conformance, data: st.DataObject) -> None:
    f = Features(checkpoints=True, errors=True, timeouts=True, retries=True, max_steps=20)
    check(conformance, data, replace(f, on_timeout=("fail", "complete")))


@pytest.mark.rule("AIO-49")
@pytest.mark.needs("key_groups", "key_groups.operator_state", "key_groups.rescale", "scripted")
@given(data=st.data())
def test_in_flight_elements_on_rescale(conformance: Conformance, data: st.DataObject) -> None:
    """The stored elements of async checkpoints, rescaled as split operator list state
    (spec/key-groups.md, "Async I/O in-flight elements on rescale"): the last checkpoint of each of
    k async schedules (the oracle's snapshots) is old subtask i's list state in a key groups
    schedule that checkpoints and restores at another parallelism than k.  Every stored element lands on
    exactly one new subtask, in contiguous runs of the old order, the loads within one (stated on
    the oracle's trace from the trace alone); the adapter's key groups traces are the oracle's."""
    f = Features(checkpoints=True, watermarks=True, max_steps=16)
    groups = data.draw(st.lists(st.tuples(st.lists(schedules(f), min_size=1, max_size=4),
                                          st.integers(1, 9)), min_size=1, max_size=8), label="groups")
    batch = []
    for async_schedules, parallelism in groups:
        stored = []
        for s in async_schedules:
            snapshots = [e.snapshot for e in expected_trace(s).events if e.event == "checkpoint"]
            stored.append(snapshots[-1] if snapshots else ())
        if parallelism == len(stored):  # at the same parallelism split state stays put (KG-20)
            parallelism += 1
        schedule = in_flight_schedule(stored, parallelism)
        problems = in_flight_problems(expected_trace(schedule), sum(map(len, stored)))
        assert not problems, f"the oracle breaks AIO-49: {problems}\n{schedule.to_json()}"
        batch.append(schedule)
    conformance.check(batch)


# --------------------------------------------------------------------------
# The schedule vocabulary (reference level: the adapter is not involved)
# --------------------------------------------------------------------------


@pytest.mark.rule("SCH-1", "SCH-2", "SCH-3", "SCH-4", "SCH-5", "SCH-6", "SCH-7")
@given(data=st.data())
def test_malformed_schedules_are_refused(conformance: Conformance, data: st.DataObject) -> None:
    """A malformed schedule raises ScheduleError naming the step (or the configuration) and the rule."""
    cases = data.draw(malformed_batches(malformed_schedules()), label="cases")
    conformance.count(len(cases))
    problems = refusal_problems(cases)
    assert not problems, "\n".join(problems)
