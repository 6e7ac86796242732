"""Unit tests of the schedule vocabulary (spec/schedule.py) and the rule registry (spec/rules.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flink_semantics.spec.areas.async_io import (
    AsyncIoConfig,
    CompleteStep,
    RecordStep,
    RetryConfig,
    event,
    records,
)
from flink_semantics.spec.rules import RuleFileError, load_rules, parse_rules
from flink_semantics.spec.schedule import (
    ScheduleError,
    make_trace,
    parse_schedule,
    parse_trace,
    required_capabilities,
    schedule_from_dict,
)

FULL = {
    "area": "async_io",
    "config": {
        "mode": "unordered", "capacity": 2, "timeout": 50, "on_timeout": "fail", "timeout_result": [],
        "retry": {"strategy": "fixed_delay", "max_attempts": 2, "delay": 10, "initial_delay": 0,
                  "max_delay": 0, "multiplier": 2.0, "if_empty": True, "if_error": True},
    },
    "steps": [
        {"op": "record", "value": 7, "timestamp": 100},
        {"op": "record", "value": 8, "timestamp": None},
        {"op": "watermark", "timestamp": 100},
        {"op": "status", "idle": True},
        {"op": "complete", "record": 1, "result": [80, 81]},
        {"op": "complete", "record": 0, "result": None},
        {"op": "advance", "ms": 10},
        {"op": "checkpoint", "id": 1},
        {"op": "error", "record": 0, "message": "service unavailable"},
        {"op": "crash"},
        {"op": "restore", "checkpoint": 1, "capacity": 1},
        {"op": "end"},
    ],
}


def test_schedule_json_round_trip() -> None:
    s = parse_schedule(json.dumps(FULL))
    assert json.loads(s.to_json()) == FULL
    assert parse_schedule(s.to_json(indent=2)) == s
    assert s.config.retry == RetryConfig("fixed_delay", 2, 10, 0, 0, 2.0, True, True)
    assert s.steps[0] == RecordStep(7, 100)
    assert s.steps[5] == CompleteStep(0, None)
    assert [r.value for r in records(s)] == [7, 8]


def test_defaults_fill_missing_fields() -> None:
    s = schedule_from_dict({"area": "async_io", "steps": [{"op": "record", "value": 1},
                                                          {"op": "restore", "checkpoint": None}]},
                           validate=False)
    assert s.config == AsyncIoConfig("ordered", 100, 0, "fail", (), None)
    assert s.steps[0] == RecordStep(1, None)
    assert s.to_dict()["steps"][1] == {"op": "restore", "checkpoint": None, "capacity": None}


def test_trace_json_round_trip() -> None:
    t = make_trace([
        event(0, "invoke", record=0, attempt=1),
        event(3, "emit", record=1, value=80, timestamp=None),
        event(5, "checkpoint", id=1, snapshot=[("record", 0), ("watermark", 100)]),
        event(6, "fail", record=0, reason="error"),
        event(7, "status", idle=False),
        event(8, "finished"),
    ])
    d = json.loads(t.to_json())
    assert d["events"][2] == {"step": 5, "event": "checkpoint", "id": 1,
                              "snapshot": [{"record": 0}, {"watermark": 100}]}
    assert parse_trace(t.to_json(), "async_io") == t
    assert t.events[1].value == 80 and t.events[2].snapshot == (("record", 0), ("watermark", 100))
    with pytest.raises(TypeError):
        event(0, "invoke", record=0)  # missing attempt


def _steps(*steps: dict[str, Any], config: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"area": "async_io", "config": config or {}, "steps": list(steps)}


REC = {"op": "record", "value": 1}


@pytest.mark.parametrize("doc, step, rule", [
    ({"area": "no_such_area", "steps": []}, None, "SCH-1"),
    (_steps(REC, {"op": "no_such_op"}), 1, "SCH-1"),
    (_steps({"op": "advance", "ms": -5}), 0, "SCH-2"),
    (_steps({"op": "record", "value": 1, "ts": 3}), 0, "SCH-2"),
    (_steps({"op": "record", "value": True}), 0, "SCH-2"),
    (_steps({"op": "complete", "record": 0, "result": ["a"]}), 0, "SCH-2"),
    (_steps(config={"mode": "sorted"}), None, "SCH-2"),
    (_steps(config={"capacity": 5, "timeut": 1}), None, "SCH-2"),
    (_steps(config={"timeout": 10, "retry": {"strategy": "fixed_delay", "multiplier": 0.5}}), None, "SCH-2"),
    (_steps({"op": "complete", "record": 0, "result": []}), 0, "SCH-3"),
    (_steps(REC, {"op": "error", "record": 1}), 1, "SCH-3"),
    (_steps({"op": "checkpoint", "id": 1}, {"op": "checkpoint", "id": 1}), 1, "SCH-5"),
    (_steps({"op": "crash"}, {"op": "restore", "checkpoint": 4}), 1, "SCH-5"),
    (_steps({"op": "end"}, REC), 1, "SCH-6"),
    (_steps({"op": "end"}, {"op": "checkpoint", "id": 2}), 1, "SCH-6"),
    (_steps({"op": "crash"}, REC), 1, "SCH-7"),
    (_steps(config={"capacity": 0}), None, "AIO-1"),
    (_steps({"op": "crash"}, {"op": "restore", "checkpoint": None, "capacity": 0}), 1, "AIO-1"),
    (_steps(config={"retry": {"strategy": "fixed_delay", "if_error": True}}), None, "AIO-3"),
])
def test_static_validation_names_step_and_rule(doc: dict[str, Any], step: int | None, rule: str) -> None:
    with pytest.raises(ScheduleError) as err:
        schedule_from_dict(doc)
    assert (err.value.step, err.value.rule) == (step, rule)
    where = "configuration" if step is None else f"step {step}"
    assert str(err.value).startswith(where) and rule in str(err.value)


def test_well_formed_schedules_pass() -> None:
    crash, end = {"op": "crash"}, {"op": "end"}
    schedule_from_dict(_steps(REC, end, crash, {"op": "restore", "checkpoint": None}, REC))
    schedule_from_dict(_steps({"op": "checkpoint", "id": 3}, crash, {"op": "restore", "checkpoint": 3}))


def test_not_json_is_sch_2() -> None:
    with pytest.raises(ScheduleError) as err:
        parse_schedule("{not json")
    assert (err.value.step, err.value.rule) == (None, "SCH-2")


def test_required_capabilities() -> None:
    s = parse_schedule(json.dumps(FULL))
    assert required_capabilities(s) == {"async_io", "async_io.unordered", "async_io.timeout",
                                        "async_io.retry", "async_io.checkpoint", "async_io.status",
                                        "async_io.watermarks"}
    assert required_capabilities(schedule_from_dict(_steps(REC))) == {"async_io", "async_io.ordered"}
    refused = schedule_from_dict(_steps(config={"capacity": 0}), validate=False)
    assert required_capabilities(refused) == {"async_io", "async_io.ordered", "async_io.config_validation"}


SAMPLE = """# Title

Intro text.

### XY-1 First rule
- **Level:** MUST
- **Rule:** The thing MUST happen.
- **Rationale:** Because.
- **Example:** `0 record 1`. Trace:

      @0 invoke r0 #1

### XY-2 Second rule
- **Level:** MAY
- **Rule:** The other thing MAY happen.
- **Untested:** not expressible.

## A section closes the rule

Text that is not a rule.
"""


def test_parse_rules_on_a_sample() -> None:
    rules = parse_rules(SAMPLE, "sample.md")
    assert [(r.id, r.title, r.level, r.untested) for r in rules] == [
        ("XY-1", "First rule", "MUST", None),
        ("XY-2", "Second rule", "MAY", "not expressible."),
    ]
    assert rules[0].text == "The thing MUST happen." and rules[0].file == "sample.md"


def test_parse_rules_keeps_a_multi_line_example_with_line_numbers() -> None:
    text = ("### XY-1 A rule\n- **Level:** MUST\n- **Rule:** It MUST.\n- **Example:** `0 record 1`. Trace:\n"
            "\n      @0 invoke r0 #1\n- **Source:** here.\n## Next section\ntext\n")
    (rule,) = parse_rules(text, "x.md")
    assert rule.example == ((4, "`0 record 1`. Trace:"), (5, ""), (6, "      @0 invoke r0 #1"))


@pytest.mark.parametrize("text", [
    "### XY-1 No level\n- **Rule:** It MUST.\n",
    "### XY-1 Bad level\n- **Level:** SHALL\n- **Rule:** It SHALL.\n",
    "### XY-1 No rule\n- **Level:** MUST\n",
])
def test_parse_rules_refuses_incomplete_rules(text: str) -> None:
    with pytest.raises(RuleFileError):
        parse_rules(text, "bad.md")


def test_spec_files_define_the_async_io_and_vocabulary_rules() -> None:
    rules = load_rules()
    assert {f"AIO-{i}" for i in range(1, 61)} <= set(rules)
    assert {f"SCH-{i}" for i in range(1, 8)} <= set(rules)
    for i in range(1, 61):
        r = rules[f"AIO-{i}"]
        assert r.file == "async-io.md" and r.level in r.text, r.id
