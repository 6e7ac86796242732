"""The rules' examples of spec/async-io.md, run on the reference model.

The expected traces are written by hand in the spec (conformance/examples.py parses them), so this
is a check of the model against the spec author's reading of each rule.  Traces are compared per
step with the one freedom of spec/schedules.md item 7: outputs and side effects are two sequences
whose interleaving is free; every other event keeps its place.
"""

from __future__ import annotations

from collections import Counter

import pytest
from flink_semantics.conformance.checker import compare_scripted
from flink_semantics.conformance.examples import (
    Example,
    ExampleError,
    expand,
    load_spec_examples,
    parse_examples,
)
from flink_semantics.spec.area import area_of_rule, get_area
from flink_semantics.spec.areas.async_io import event, records
from flink_semantics.spec.rules import load_rules
from flink_semantics.spec.schedule import ScheduleError, Trace

from flink_semantics import reference

SPEC = load_spec_examples()


@pytest.mark.parametrize("example", SPEC.examples, ids=lambda ex: ex.id)
def test_reference_gives_the_example_trace(example: Example) -> None:
    where = f"{example.id} ({example.file}:{example.line})"
    if example.refusal is not None:
        with pytest.raises(ScheduleError) as info:
            reference.run(example.schedule)
        assert (info.value.step, info.value.rule) == example.refusal, f"{where}: {info.value}"
        return
    if example.rejected:
        with pytest.raises(ScheduleError) as info:
            reference.run(example.schedule)
        rules = get_area(example.area).rejecting_rules
        assert info.value.step is None and info.value.rule in rules, f"{where}: {info.value}"
        return
    got = reference.run(example.schedule)
    problem = compare_scripted(example.schedule, example.trace, got)
    assert problem is None, f"{where}: the reference differs from the spec example: {problem.what}\n" + \
        "\n".join(map(str, got.events))


def test_every_rule_with_an_example_is_executed_or_untested() -> None:
    rules = load_rules()
    area_rules = {r.id for r in rules.values() if area_of_rule(r.id) is not None}
    executed = {ex.rule for ex in SPEC.examples}
    assert set(SPEC.with_example) == area_rules, "every rule of an area file has an Example"
    assert executed | set(SPEC.skipped) == area_rules
    assert not executed & set(SPEC.skipped)
    # Only Untested rules may have a prose example; the skip list stays short.
    assert {r for r in SPEC.skipped if not rules[r].untested} == set()
    per_area = Counter(area_of_rule(r) for r in SPEC.skipped)
    assert max(per_area.values()) <= 10, sorted(SPEC.skipped)
    assert len(SPEC.examples) >= len(executed) >= 50


def test_example_ids_are_unique() -> None:
    ids = [ex.id for ex in SPEC.examples]
    assert len(ids) == len(set(ids))


def test_dropping_any_expected_event_is_detected() -> None:
    for ex in SPEC.examples:
        if ex.rejected or ex.refusal is not None:
            continue
        for i in range(len(ex.trace.events)):
            shorter = Trace(ex.trace.events[:i] + ex.trace.events[i + 1:])
            assert compare_scripted(ex.schedule, ex.trace, shorter) is not None, (ex.id, i)


# --------------------------------------------------------------------------
# The notation parser and the comparison
# --------------------------------------------------------------------------


def _md(example: str, untested: str = "") -> str:
    lines = ["### X-1 A rule", "- **Level:** MUST", "- **Rule:** It MUST.", "- **Example:** " + example]
    if untested:
        lines.append("- **Untested:** " + untested)
    return "\n".join(lines) + "\n"


def test_parse_config_steps_and_trace() -> None:
    text = _md("`mode=unordered capacity=2 timeout=50 on_timeout=complete timeout_result=[0, 1] "
               "retry={exponential_backoff, max_attempts 2, initial_delay 5, multiplier 1.5, if_empty}`: "
               "`0 record 7 @100`, `1 watermark 5`, `2 complete r0 [1, 2]`. Trace:\n\n"
               "      @0 invoke r0 #1\n      @2 emit r0 1 ts=100\n      @2 emit r0 2 ts=100\n"
               "      @2 watermark 5\n")
    [ex] = parse_examples(text, "x.md", "async_io").examples
    c = ex.schedule.config
    assert (c.mode, c.capacity, c.timeout, c.on_timeout, c.timeout_result) == \
        ("unordered", 2, 50, "complete", (0, 1))
    assert c.retry is not None and (c.retry.strategy, c.retry.max_attempts, c.retry.initial_delay,
                                    c.retry.multiplier, c.retry.if_empty, c.retry.if_error) == \
        ("exponential_backoff", 2, 5, 1.5, True, False)
    assert [s.op for s in ex.schedule.steps] == ["record", "watermark", "complete"]
    assert ex.schedule.steps[0].timestamp == 100
    assert ex.trace.events[1] == event(2, "emit", record=0, value=1, timestamp=100)


def test_second_paragraph_and_inline_trace() -> None:
    text = _md("`0 record 1`, `1 end`, `2 complete r0 [3]`. Trace:\n\n      @0 invoke r0 #1\n"
               "      @2 emit r0 3 ts=-\n      @2 finished\n\n  A schedule `0 end` gives `@0 finished`.")
    a, b = parse_examples(text, "x.md", "async_io").examples
    assert (a.id, b.id) == ("X-1.1", "X-1.2")
    assert b.trace.events == (event(0, "finished"),)


def test_repeat_notation() -> None:
    assert expand("2..4 record {i}") == [(2, "record 2"), (3, "record 3"), (4, "record 4")]
    text = _md("`0..2 record {i}`, `3 checkpoint 1`. Trace:\n\n      @0..2 invoke r{i} #1\n"
               "      @3 checkpoint 1 [r0, r1, r2]\n")
    [ex] = parse_examples(text, "x.md", "async_io").examples
    assert [s.value for s in records(ex.schedule)] == [0, 1, 2]
    assert [e.record for e in ex.trace.events[:3]] == [0, 1, 2]
    assert ex.trace.events[3].snapshot == (("record", 0), ("record", 1), ("record", 2))


@pytest.mark.parametrize("example, message", [
    ("`0 record 1`, `2 end`. Trace:\n\n      @0 invoke r0 #1\n", "without gaps"),
    ("`0 record 1`. Trace:\n\n      0 invoke r0 #1\n", "must start with @"),
    ("`0 record 1`, `1 jump 3`. Trace:\n\n      @0 invoke r0 #1\n", "not a step"),
    ("`0 record 1`. Trace:\n\n      @0 invoke r0\n", "not a trace event"),
    ("`capacity=1` `timeout=5`: `0 record 1`. Trace: `@0 invoke r0 #1`", "more than one configuration"),
    ("`0 record 1`.", "exactly one trace"),
    ("`capacity=0`: `0 record 1`. Trace: `@0 invoke r0 #1`", "malformed schedule"),
    ("`0 record 1`. Trace: `@-1 rejected`", "configuration is valid"),
    ("`0 complete r0 []`. Trace: `@0 finished`", "SCH-3"),
    ("`color=red`: `0 end`. Trace: `@0 finished`", "unknown configuration key"),
    ("a prose example about r0.", "not marked Untested"),
])
def test_bad_examples_are_errors(example: str, message: str) -> None:
    with pytest.raises(ExampleError, match=message):
        parse_examples(_md(example), "x.md", "async_io")


def test_prose_example_of_an_untested_rule_is_skipped_with_its_reason() -> None:
    out = parse_examples(_md("a prose example about r0.", untested="no step for it"), "x.md",
                         "async_io")
    assert out.examples == [] and out.skipped == {"X-1": "Untested: no step for it"}
