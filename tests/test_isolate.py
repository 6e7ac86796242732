"""Finding the schedule that breaks run_batch (conformance/isolate.py), with probes written here."""

from __future__ import annotations

import json
from collections.abc import Sequence

from flink_semantics.conformance.isolate import isolate
from flink_semantics.spec.schedule import Schedule, parse_schedule


def schedule(capacity: int, *values: int) -> Schedule:
    steps = [{"op": "record", "value": v} for v in values] + [{"op": "end"}]
    return parse_schedule(json.dumps({"area": "async_io", "config": {"mode": "ordered", "capacity": capacity},
                                      "steps": steps}))


def test_one_breaking_schedule_among_many_is_found_and_its_other_steps_dropped() -> None:
    batch = [schedule(1, i + 10) for i in range(20)] + [schedule(1, 1, 7, 2, 3)] + [schedule(1, 5)]
    calls: list[int] = []

    def probe(schedules: Sequence[Schedule]) -> str | None:
        calls.append(len(schedules))
        hit = any(getattr(s, "value", None) == 7 for sch in schedules for s in sch.steps)
        return "raised ValueError: 7" if hit else None

    found = isolate(batch, "raised ValueError: 7", probe)
    assert found.single is not None
    assert [step.op for step in found.single.steps] == ["record"]  # the record of 7 alone
    assert found.single.steps[0].value == 7  # type: ignore[attr-defined]
    assert found.steps_before == 5 and found.probes == len(calls) <= 60
    assert "shrunk from 5 steps to 1" in found.describe()


def test_a_batch_breaking_only_as_a_whole_is_reported_as_such() -> None:
    batch = [schedule(1, i) for i in range(8)]

    def probe(schedules: Sequence[Schedule]) -> str | None:
        return "raised" if len(schedules) == 8 else None

    found = isolate(batch, "raised", probe)
    assert found.single is None and len(found.schedules) == 8 and found.probes == 2
    assert "no single schedule of the batch breaks it alone: a batch of 8" in found.describe()


def test_the_budget_bounds_the_probes() -> None:
    batch = [schedule(1, *range(30))]
    found = isolate(batch, "raised", lambda schedules: "raised", budget=5)
    assert found.probes == 5 and len(found.single.steps) == 26  # type: ignore[union-attr]
