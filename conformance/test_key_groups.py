"""The conformance suite for key groups and rescaling (spec/key-groups.md).

Each property names the rules it checks.  It draws a batch of schedules, runs the whole batch
through the adapter once (`conformance.check`), and compares every trace with the reference trace
exactly (conformance/checker.py).  Features the adapter does not support are left out of the drawn
schedules; a property whose core the adapter does not support is reported as UNSUPPORTED.
"""

from __future__ import annotations

import pytest
from flink_semantics.conformance.areas.key_groups import (
    Features,
    balance_problems,
    feature_batches,
    malformed_schedules,
    rejected_configs,
    split_load_problems,
)
from flink_semantics.conformance.plugin import Conformance
from flink_semantics.conformance.strategies import batches, malformed_batches, refusal_problems
from flink_semantics.reference import expected_trace
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.area("key_groups")

FEATURES = {
    "test_flink_key_groups": Features(max_steps=16),
    "test_restore_keeps_keyed_state": Features(max_steps=16),
    "test_spark_hash": Features(spark_hash=True, max_steps=16),
    "test_pyflink_key_by": Features(pyflink_hash=True, max_steps=16),
    "test_pyflink_rescale": Features(pyflink_hash=True, rescale=True, refusals=True, max_steps=20),
    "test_keyed_state_on_rescale": Features(rescale=True, max_steps=20),
    "test_operator_state_on_rescale": Features(operator_state=True, rescale=True, max_steps=24),
    "test_restore_refusals": Features(rescale=True, refusals=True, operator_state=True, max_steps=16),
}


def check(conformance: Conformance, data: st.DataObject, f: Features) -> None:
    conformance.check(data.draw(feature_batches(conformance.restrict(f)), label="batch"))


@pytest.mark.rule("KG-1", "KG-2", "KG-3", "KG-6", "KG-7", "KG-9", "KG-10", "KG-11")
@pytest.mark.rule("KG-34", needs=["key_groups.lone_surrogates"])
@pytest.mark.needs("scripted")
@given(data=st.data())
def test_flink_key_groups(conformance: Conformance, data: st.DataObject) -> None:
    """The flink profile: each key's JDK hash code (a string's over its UTF-16 code units, unpaired
    surrogates among them where the adapter supports them), Flink's murmur finalizer, its key group
    and the subtask that owns it, the key's sum kept per sequence of code units; null keys refused
    (with checkpoints and restores at the same parallelism where the adapter supports them)."""
    check(conformance, data, FEATURES["test_flink_key_groups"])


@pytest.mark.rule("KG-14")
@pytest.mark.needs("key_groups.restore", "scripted")
@given(data=st.data())
def test_restore_keeps_keyed_state(conformance: Conformance, data: st.DataObject) -> None:
    """Checkpoints and restores at the same parallelism: each subtask gets its own keyed state back,
    and the updates after the checkpoint are lost."""
    check(conformance, data, FEATURES["test_restore_keeps_keyed_state"])


@pytest.mark.rule("KG-22", "KG-23", "KG-24", "KG-25", "KG-26", "KG-27", "KG-30")
@pytest.mark.rule("KG-34", needs=["key_groups.lone_surrogates"])
@pytest.mark.needs("key_groups.spark_hash", "scripted")
@given(data=st.data())
def test_spark_hash(conformance: Conformance, data: st.DataObject) -> None:
    """The spark profile: Spark's hash() of int, long and string keys (seed 42, the legacy string
    tail, a string's bytes those of Java's getBytes(UTF_8): an unpaired surrogate as '?', while the
    key stays apart from "?"), a null key hashing to the seed, the key group by pmod."""
    check(conformance, data, FEATURES["test_spark_hash"])


@pytest.mark.rule("KG-33", "KG-2", "KG-3", "KG-9", "KG-10", "KG-11")
@pytest.mark.rule("KG-14", needs=["key_groups.restore"])  # PyFlink's own routing, restored in place
@pytest.mark.rule("KG-34", needs=["key_groups.lone_surrogates"])
@pytest.mark.needs("key_groups.pyflink_hash", "scripted")
@given(data=st.data())
def test_pyflink_key_by(conformance: Conformance, data: st.DataObject) -> None:
    """The pyflink profile: PyFlink's key_by keys by a one-field Row, whose hash code is 62 plus the
    key's JDK hash code (31 for null); Flink's murmur finalizer, key group and subtask from it; with
    checkpoints and restores at the same parallelism where the adapter supports them, each subtask's
    keyed state back (KG-14)."""
    check(conformance, data, FEATURES["test_pyflink_key_by"])


@pytest.mark.rule("KG-4", "KG-5", "KG-8", "KG-12", "KG-13", "KG-15", "KG-16")
@pytest.mark.needs("key_groups.pyflink_hash", "key_groups.rescale", "scripted")
@given(data=st.data())
def test_pyflink_rescale(conformance: Conformance, data: st.DataObject) -> None:
    """Rescaling in the pyflink profile, so that an engine that keys like PyFlink (KG-33) is held to
    the redistribution of keyed state too: each new subtask's range and exactly its key groups'
    state, restores out of bounds, above the checkpoint's maximum or with another maximum refused
    and the running job going on (the ranges' balance stated on the oracle's traces first)."""
    batch = data.draw(feature_batches(conformance.restrict(FEATURES["test_pyflink_rescale"])), label="batch")
    for schedule in batch:
        problems = balance_problems(expected_trace(schedule))
        assert not problems, f"the oracle breaks KG-5/KG-12: {problems}\n{schedule.to_json()}"
    conformance.check(batch)


@pytest.mark.rule("KG-4", "KG-5", "KG-12", "KG-13", "KG-16")
@pytest.mark.needs("key_groups.rescale", "scripted")
@given(data=st.data())
def test_keyed_state_on_rescale(conformance: Conformance, data: st.DataObject) -> None:
    """Restores at other parallelisms (up, down, to 1 and to the maximum): each new subtask's range,
    and exactly the key groups of that range moved to it, whole, from the old subtasks (stated on
    the oracle's traces from the trace alone, then the adapter's traces compared with them)."""
    batch = data.draw(feature_batches(conformance.restrict(FEATURES["test_keyed_state_on_rescale"])),
                      label="batch")
    for schedule in batch:
        problems = balance_problems(expected_trace(schedule))
        assert not problems, f"the oracle breaks KG-5/KG-12: {problems}\n{schedule.to_json()}"
    conformance.check(batch)


@pytest.mark.rule("KG-17", "KG-18", "KG-19", "KG-20", "KG-21")
@pytest.mark.needs("key_groups.operator_state", "key_groups.rescale", "scripted")
@given(data=st.data())
def test_operator_state_on_rescale(conformance: Conformance, data: st.DataObject) -> None:
    """Operator list state on restore: split state cut into even chunks in old subtask order, with
    the rotation across names; union state everywhere; broadcast copy i mod p; unchanged at the same
    parallelism without union state.  The split loads differ by at most one (stated on the oracle's
    traces from the trace alone)."""
    batch = data.draw(feature_batches(conformance.restrict(FEATURES["test_operator_state_on_rescale"])),
                      label="batch")
    for schedule in batch:
        problems = split_load_problems(schedule, expected_trace(schedule))
        assert not problems, f"the oracle breaks KG-21: {problems}\n{schedule.to_json()}"
    conformance.check(batch)


@pytest.mark.rule("KG-8", "KG-15", "KG-16")
@pytest.mark.needs("key_groups.rescale", "scripted")
@given(data=st.data())
def test_restore_refusals(conformance: Conformance, data: st.DataObject) -> None:
    """Restores out of bounds, above the checkpoint's maximum parallelism, or with a changed explicit
    maximum are refused, and the running job goes on unchanged."""
    check(conformance, data, FEATURES["test_restore_refusals"])


@pytest.mark.rule("KG-8")
@given(data=st.data())
def test_configuration_bounds(conformance: Conformance, data: st.DataObject) -> None:
    """Configurations outside the bounds are refused with the single `rejected` event."""
    batch = data.draw(batches(rejected_configs(), 6), label="batch")
    assert all(expected_trace(s).rejected for s in batch)
    conformance.check(batch)


# --------------------------------------------------------------------------
# The area's schedule rules (reference level: the adapter is not involved)
# --------------------------------------------------------------------------


@pytest.mark.rule("KG-32")
@given(data=st.data())
def test_malformed_schedules_are_refused(conformance: Conformance, data: st.DataObject) -> None:
    """A malformed key groups schedule raises ScheduleError naming the step and the rule."""
    cases = data.draw(malformed_batches(malformed_schedules()), label="cases")
    conformance.count(len(cases))
    problems = refusal_problems(cases)
    assert not problems, "\n".join(problems)
