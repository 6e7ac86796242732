"""The rules' examples of every area's rules file, run through the adapter under test.

All examples the adapter can run go to the adapter in ONE `run_batch` call (a module-scoped
fixture); each example is then one test case marked with its rule, compared with the trace written
in the spec (not with the reference) by the checker of conformance/checker.py.  An example of a
malformed schedule is checked without the adapter: the suite refuses it with its step and
rule.  An example that
needs a capability the adapter lacks is reported as UNSUPPORTED by the plugin (`needs` marker), with
the adapter's reason, and is left out of the batch.
"""

from __future__ import annotations

import pytest
from flink_semantics.conformance.checker import compare, format_report, free_checkable
from flink_semantics.conformance.examples import Example, load_examples
from flink_semantics.conformance.plugin import Conformance, ConformanceFailure, blame
from flink_semantics.reference import run as reference_run
from flink_semantics.spec.schedule import ScheduleError, Trace, required_capabilities

EXAMPLES = load_examples()


def needs(example: Example) -> list[str]:
    """The capabilities an example needs; "scripted" unless a FREE adapter can be checked on it.
    None for a malformed schedule's example: the adapter does not run it."""
    if example.refusal is not None:
        return []
    caps = set(required_capabilities(example.schedule))
    if not example.rejected and not free_checkable(example.schedule):
        caps.add("scripted")
    return sorted(caps)


def _param(example: Example) -> object:
    return pytest.param(example, id=example.id, marks=[
        pytest.mark.area(example.area), pytest.mark.rule(example.rule), pytest.mark.needs(*needs(example))])


@pytest.fixture(scope="module")
def observed(conformance: Conformance, request: pytest.FixtureRequest) -> dict[str, Trace]:
    """One run_batch of every selected example the adapter supports: example id -> observed trace
    (`--areas` and `-k` deselect examples, whose schedules then cost nothing)."""
    params = (getattr(getattr(item, "callspec", None), "params", {}) for item in request.session.items)
    selected = {p["example"].id for p in params if "example" in p}
    runnable = [ex for ex in EXAMPLES if ex.refusal is None and ex.id in selected
                and not conformance.missing(needs(ex), [ex.area])]
    item, conformance.item = conformance.item, None  # each case counts its own schedule below
    try:
        traces = conformance.run_batch([ex.schedule for ex in runnable])
    finally:
        conformance.item = item
    return {ex.id: trace for ex, trace in zip(runnable, traces)}


@pytest.mark.parametrize("example", [_param(ex) for ex in EXAMPLES])
def test_spec_example(conformance: Conformance, observed: dict[str, Trace], example: Example) -> None:
    """The adapter's trace of a rule's example is the trace the spec writes for it."""
    conformance.count(1, adapter=example.refusal is None)
    if example.refusal is not None:  # a malformed schedule: refused by the suite, never run
        with pytest.raises(ScheduleError) as info:
            reference_run(example.schedule)
        assert (info.value.step, info.value.rule) == example.refusal, str(info.value)
        return
    got = observed[example.id]
    mismatch = compare(example.schedule, example.trace, got, conformance.completion_order(example.area))
    if mismatch is not None:
        raise ConformanceFailure(
            f"spec example {example.id} ({example.file}:{example.line}):\n" + format_report(
                example.schedule, mismatch, adapter_name=conformance.name, adapter_spec=conformance.spec,
                expected=example.trace, observed=got, property_rules=[example.rule]),
            blame(mismatch.rules, [example.rule]))
