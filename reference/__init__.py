"""The reference model: a deterministic, single-threaded executable reading of spec/*.md.

One module per area, named after it (`reference/<area>.py`), defining `Model`: built from a valid
configuration, it runs a schedule one step at a time (`apply(index, step) -> events`) and raises
ScheduleError for a step that the semantics make malformed.  This package finds the model of a
schedule's area by that name and is the oracle: `expected_trace(schedule)` is the trace the rules
require.

Standard library only; imports `spec` and nothing else of this project.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import (
    Event,
    Schedule,
    ScheduleError,
    Step,
    Trace,
    rejected,
    validate_schedule,
)

__all__ = ["Model", "expected_trace", "model_for", "run"]


class Model(Protocol):
    def apply(self, index: int, step: Step) -> list[Event]: ...


def model_class(area: str) -> Any:
    """The `Model` of `reference/<area>.py` (SCH-1 for an unknown area)."""
    get_area(area)
    try:
        module = importlib.import_module(f"flink_semantics.reference.{area}")
    except ModuleNotFoundError:
        raise ScheduleError(None, "SCH-1", f"no reference model for area {area!r}") from None
    return module.Model


def model_for(schedule: Schedule) -> Model:
    """A fresh model for the schedule's area and configuration (the configuration must be valid)."""
    return model_class(schedule.area)(schedule.config)  # type: ignore[no-any-return]


def run(schedule: Schedule) -> Trace:
    """Validate the schedule, then run every step on the model of its area (ScheduleError if malformed)."""
    validate_schedule(schedule)
    model = model_for(schedule)
    events: list[Event] = []
    for index, step in enumerate(schedule.steps):
        events.extend(model.apply(index, step))
    return Trace(tuple(events))


def expected_trace(schedule: Schedule) -> Trace:
    """The oracle: the trace the rules require of a schedule.

    A configuration that breaks one of the area's rejecting rules gives the single `rejected` event;
    any other malformed schedule raises ScheduleError.
    """
    try:
        return run(schedule)
    except ScheduleError as e:
        if e.step is None and e.rule in get_area(schedule.area).rejecting_rules:
            return Trace((rejected(f"{e.rule}: {e.message}"),))
        raise
