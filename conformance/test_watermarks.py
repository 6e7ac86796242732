"""The conformance suite for watermarks (spec/watermarks.md).

Each property names the rules it checks.  It draws a batch of schedules, runs the whole batch
through the adapter once (`conformance.check`), and compares every trace with the reference trace
exactly (conformance/checker.py).  Features the adapter does not support are left out of the drawn
schedules; a property whose core the adapter does not support is reported as UNSUPPORTED.
"""

from __future__ import annotations

import pytest
from flink_semantics.conformance.areas.watermarks import (
    Features,
    feature_batches,
    into_async_io,
    malformed_schedules,
    monotonic_problems,
    overtaking_problems,
)
from flink_semantics.conformance.plugin import Conformance
from flink_semantics.conformance.strategies import batches, malformed_batches, refusal_problems
from flink_semantics.reference import expected_trace
from flink_semantics.spec.adapter import unsupported
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.area("watermarks")

# The features each property draws with.
FEATURES = {
    "test_generation_and_combination": Features(max_splits=3, max_steps=24),
    "test_punctuated_generators": Features(punctuated=True, max_splits=3, max_steps=24),
    "test_idleness": Features(idleness=True, max_splits=2, max_steps=24),
    "test_valve": Features(min_readers=3, max_readers=3, idleness=True, rounds=True, max_steps=60),
    "test_end_of_input": Features(max_readers=3, idleness=True, punctuated=True, max_steps=20),
    "test_failover": Features(max_readers=2, idleness=True, failover=True, max_steps=24),
    "test_alignment": Features(max_readers=3, alignment=True, idleness=True, punctuated=True, max_steps=30),
    "test_watermarks_into_async_io": Features(max_readers=3, idleness=True, punctuated=True, max_steps=24),
    "test_monotonic_within_an_attempt": Features(max_readers=3, idleness=True, punctuated=True,
                                                 failover=True, alignment=True, max_steps=30),
}


def check(conformance: Conformance, data: st.DataObject, f: Features) -> None:
    batch = data.draw(feature_batches(conformance.restrict(f)), label="batch")
    conformance.check(batch)


@pytest.mark.rule("WM-1", "WM-2", "WM-3", "WM-4", "WM-5", "WM-6", "WM-7", "WM-9", "WM-10")
@pytest.mark.needs("scripted")
@given(data=st.data())
def test_generation_and_combination(conformance: Conformance, data: st.DataObject) -> None:
    """Per-split generators emit periodically; a reader combines its splits' watermarks (minimum,
    only upwards), a new split holds the combination at MIN, a finished one leaves it silently."""
    check(conformance, data, FEATURES["test_generation_and_combination"])


@pytest.mark.rule("WM-8")
@pytest.mark.needs("watermarks.punctuated", "scripted")
@given(data=st.data())
def test_punctuated_generators(conformance: Conformance, data: st.DataObject) -> None:
    """Watermarks emitted on records combine at once when above the combination; periodic ones wait
    for the next periodic emission."""
    check(conformance, data, FEATURES["test_punctuated_generators"])


@pytest.mark.rule("WM-6", "WM-11", "WM-12", "WM-13")
@pytest.mark.needs("watermarks.idleness", "scripted")
@given(data=st.data())
def test_idleness(conformance: Conformance, data: st.DataObject) -> None:
    """withIdleness: checked at periodic emissions only; an idle split leaves its reader's minimum; a
    reader is IDLE when its main output and every split are, sends IDLE once, and ACTIVE just before
    its next higher watermark."""
    check(conformance, data, FEATURES["test_idleness"])


@pytest.mark.rule("WM-17", "WM-18", "WM-19", "WM-20", "WM-21")
@pytest.mark.needs("watermarks.channels", "watermarks.idleness", "scripted")
@given(data=st.data())
def test_valve(conformance: Conformance, data: st.DataObject) -> None:
    """The downstream valve: the minimum over active, aligned channels; idle channels leave it, a
    returning channel counts again once caught up; the maximum flushed when all are idle (D1)."""
    check(conformance, data, FEATURES["test_valve"])


@pytest.mark.rule("WM-15")
@pytest.mark.needs("scripted")
@given(data=st.data())
def test_end_of_input(conformance: Conformance, data: st.DataObject) -> None:
    """At end of input every split finishes and every reader sends MAX once (ACTIVE first if idle)."""
    check(conformance, data, FEATURES["test_end_of_input"])


@pytest.mark.rule("WM-16", "WM-4")
@pytest.mark.needs("watermarks.failover", "scripted")
@given(data=st.data())
def test_failover(conformance: Conformance, data: st.DataObject) -> None:
    """Watermarks are not checkpointed: after a failover every watermark starts again from MIN, the
    restored splits registered at once."""
    check(conformance, data, FEATURES["test_failover"])


@pytest.mark.rule("WM-14", "WM-22", "WM-23", "WM-24", "WM-25", "WM-26")
@pytest.mark.needs("watermarks.alignment", "scripted")
@given(data=st.data())
def test_alignment(conformance: Conformance, data: st.DataObject) -> None:
    """Readers report, the coordinator announces the minimum plus the drift (not monotonic), readers
    and splits ahead of it stop reading and go on when it catches up; paused time is not idle time."""
    check(conformance, data, FEATURES["test_alignment"])


@pytest.mark.rule("WM-7", "WM-11", "WM-18")
@pytest.mark.needs("scripted")
@given(data=st.data())
def test_monotonic_within_an_attempt(conformance: Conformance, data: st.DataObject) -> None:
    """Within one attempt what every reader sends and what the valve emits strictly increase (stated
    on the oracle's traces from the trace alone, then the adapter's traces compared with them)."""
    batch = data.draw(feature_batches(conformance.restrict(FEATURES["test_monotonic_within_an_attempt"])),
                      label="batch")
    for schedule in batch:
        problems = monotonic_problems(expected_trace(schedule))
        assert not problems, f"the oracle breaks WM-7/WM-11/WM-18: {problems}\n{schedule.to_json()}"
    conformance.check(batch)


@pytest.mark.rule("AIO-15", "WM-1", "WM-18")
@pytest.mark.needs("async_io.ordered", "scripted")
@given(data=st.data())
def test_watermarks_into_async_io(conformance: Conformance, data: st.DataObject) -> None:
    """The two areas in sequence: what a valve's task receives from the readers (their records, the
    valve's watermarks and statuses) goes into an async I/O operator, whose output keeps every
    record on its side of every watermark (AIO-15, stated on the oracle's async traces from the
    schedule alone; then the adapter's async I/O traces compared with the oracle's)."""
    caps = conformance.capabilities()
    modes = [m for m in ("ordered", "unordered") if unsupported(caps, f"async_io.{m}") is None]
    f = conformance.restrict(FEATURES["test_watermarks_into_async_io"])
    batch = data.draw(batches(into_async_io(f, modes), 12), label="batch")
    for schedule in batch:
        problems = overtaking_problems(schedule, expected_trace(schedule))
        assert not problems, f"the oracle breaks AIO-15: {problems}\n{schedule.to_json()}"
    conformance.check(batch)


# --------------------------------------------------------------------------
# The area's schedule rules (reference level: the adapter is not involved)
# --------------------------------------------------------------------------


@pytest.mark.rule("WM-28", "WM-29")
@given(data=st.data())
def test_malformed_schedules_are_refused(conformance: Conformance, data: st.DataObject) -> None:
    """A malformed watermarks schedule raises ScheduleError naming the step (or the configuration)
    and the rule."""
    cases = data.draw(malformed_batches(malformed_schedules()), label="cases")
    conformance.count(len(cases))
    problems = refusal_problems(cases)
    assert not problems, "\n".join(problems)
