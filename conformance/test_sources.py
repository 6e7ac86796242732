"""The conformance suite for sources and failover (spec/sources.md).

Each property names the rules it checks.  It draws a batch of schedules, runs the whole batch
through the adapter once (`conformance.check`), and compares every trace with the reference trace
exactly (conformance/checker.py).  Features the adapter does not support are left out of the drawn
schedules; a property whose core the adapter does not support is reported as UNSUPPORTED.
"""

from __future__ import annotations

import pytest
from flink_semantics.conformance.areas.sources import (
    Features,
    exactly_once_problems,
    feature_batches,
    malformed_schedules,
    networkx_restart_set,
    one_place_problems,
)
from flink_semantics.conformance.plugin import Conformance
from flink_semantics.conformance.strategies import malformed_batches, refusal_problems
from flink_semantics.reference import expected_trace
from flink_semantics.spec.areas.sources import FailStep
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.area("sources")


# The features each property draws with (tests/make_sources_corpus.py draws its corpus with them too).
FEATURES = {
    "test_assignment_and_reading": Features(max_steps=20),
    "test_checkpoints": Features(checkpoints=True, silent=True, late=True, max_steps=24),
    "test_reader_failover": Features(checkpoints=True, silent=True, late=True, reader_failures=True,
                                     max_steps=24),
    "test_global_failover": Features(checkpoints=True, silent=True, late=True, global_failures=True,
                                     max_steps=24),
    "test_rescale": Features(checkpoints=True, rescale=True, max_splits=6, max_records=5, polls=1,
                             max_steps=30),
    "test_unbounded_sources": Features(unbounded=True, checkpoints=True, reader_failures=True,
                                       global_failures=True, max_steps=24),
    "test_region_failover": Features(graph=True, checkpoints=True, max_steps=20),
    "test_exactly_once": Features(checkpoints=True, silent=True, late=True, reader_failures=True,
                                  global_failures=True, rescale=True, always_end=True, max_steps=30),
}


def check(conformance: Conformance, data: st.DataObject, f: Features, max_size: int = 12) -> None:
    batch = data.draw(feature_batches(conformance.restrict(f), max_size), label="batch")
    conformance.check(batch)


@pytest.mark.rule("SRC-6", "SRC-8", "SRC-9", "SRC-10", "SRC-32", "SRC-33", "SRC-39", "SRC-44")
@pytest.mark.needs("scripted")
@given(data=st.data())
def test_assignment_and_reading(conformance: Conformance, data: st.DataObject) -> None:
    """Pull-based assignment in queue order, NoMoreSplits, reading one split at a time, end of input."""
    check(conformance, data, FEATURES["test_assignment_and_reading"])


@pytest.mark.rule("SRC-11", "SRC-12", "SRC-13", "SRC-15", "SRC-17", "SRC-18", "SRC-19")
@pytest.mark.needs("sources.checkpoint", "scripted")
@given(data=st.data())
def test_checkpoints(conformance: Conformance, data: st.DataObject) -> None:
    """The tracker's buckets, the enumerator's and readers' snapshots, the valve, completion (with and
    without notification, and notifications arriving late: after later checkpoints were taken or
    completed, SRC-17) and abort."""
    check(conformance, data, FEATURES["test_checkpoints"])


@pytest.mark.rule("SRC-2", "SRC-7", "SRC-11", "SRC-17", "SRC-18", "SRC-20", "SRC-21", "SRC-22", "SRC-23",
                  "SRC-24", "SRC-25", "SRC-38")
@pytest.mark.needs("sources.checkpoint", "sources.reader_failover", "scripted")
@given(data=st.data())
def test_reader_failover(conformance: Conformance, data: st.DataObject) -> None:
    """A failed reader is reset to the restore point: the splits assigned after it go back, in order,
    and its sink drops what it had not committed; the tracker's buckets show in what comes back,
    also after a late notification (SRC-17: the buckets of later checkpoints stay)."""
    check(conformance, data, FEATURES["test_reader_failover"])


@pytest.mark.rule("SRC-4", "SRC-5", "SRC-27", "SRC-28", "SRC-29")
@pytest.mark.needs("sources.checkpoint", "sources.global_failover", "scripted")
@given(data=st.data())
def test_global_failover(conformance: Conformance, data: st.DataObject) -> None:
    """Enumerator failures and assignments to unregistered readers restart everything from the
    restore point."""
    check(conformance, data, FEATURES["test_global_failover"])


@pytest.mark.rule("SRC-31")
@pytest.mark.needs("sources.checkpoint", "sources.rescale", "scripted")
@given(data=st.data())
def test_rescale(conformance: Conformance, data: st.DataObject) -> None:
    """A restart with another parallelism redistributes the readers' splits evenly."""
    check(conformance, data, FEATURES["test_rescale"])


@pytest.mark.rule("SRC-42")
@pytest.mark.needs("sources.unbounded", "scripted")
@given(data=st.data())
def test_unbounded_sources(conformance: Conformance, data: st.DataObject) -> None:
    """Splits discovered over time; requests with nothing to assign stay unanswered."""
    check(conformance, data, FEATURES["test_unbounded_sources"])


@pytest.mark.rule("SRC-35", "SRC-36", "SRC-37")
@pytest.mark.needs("sources.region_failover", "scripted")
@given(data=st.data())
def test_region_failover(conformance: Conformance, data: st.DataObject) -> None:
    """The tasks a failure restarts (checked against a networkx computation of the regions), and the
    regional reset of the readers among them."""
    f = FEATURES["test_region_failover"]
    batch = data.draw(feature_batches(conformance.restrict(f)), label="batch")
    for schedule in batch:
        resets = iter(e.tasks for e in expected_trace(schedule).events if e.event == "reset")
        for s in schedule.steps:
            if isinstance(s, FailStep):
                want = networkx_restart_set(schedule.config, s.task, s.lost)
                assert list(next(resets)) == want, (
                    f"{s}: the oracle disagrees with networkx\n{schedule.to_json()}")
    conformance.check(batch)


@pytest.mark.rule("SRC-16", "SRC-38")
@pytest.mark.needs("sources.checkpoint", "sources.reader_failover", "sources.global_failover", "scripted")
@given(data=st.data())
def test_exactly_once(conformance: Conformance, data: st.DataObject) -> None:
    """Under reader and enumerator failures, aborts and rescales, no split is in two places of a
    checkpoint, and the sinks commit every record exactly once by the end (both stated on the
    oracle's traces from the schedule alone, then the adapter's traces compared with the oracle's)."""
    f = FEATURES["test_exactly_once"]
    batch = data.draw(feature_batches(conformance.restrict(f)), label="batch")
    for schedule in batch:
        trace = expected_trace(schedule)
        problems = exactly_once_problems(schedule, trace) + one_place_problems(schedule, trace)
        assert not problems, f"the oracle breaks SRC-16/SRC-38: {problems}\n{schedule.to_json()}"
    conformance.check(batch)


# --------------------------------------------------------------------------
# The area's schedule rules (reference level: the adapter is not involved)
# --------------------------------------------------------------------------


@pytest.mark.rule("SRC-40", "SRC-41", "SRC-42", "SRC-43", "SRC-44", "SRC-45", "SRC-46")
@given(data=st.data())
def test_malformed_schedules_are_refused(conformance: Conformance, data: st.DataObject) -> None:
    """A malformed sources schedule raises ScheduleError naming the step (or the configuration) and
    the rule."""
    cases = data.draw(malformed_batches(malformed_schedules()), label="cases")
    conformance.count(len(cases))
    problems = refusal_problems(cases)
    assert not problems, "\n".join(problems)
