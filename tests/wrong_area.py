"""The base of the deliberately wrong adapters of every area (tests/wrong_<area>.py).

A wrong adapter runs its area's schedules on `model`, a subclass of the area's reference Model with
one rule broken, and every other schedule on the reference; a test double, so unlike a real adapter
it may import `reference`.  A configuration the area refuses is refused as the reference does; a
broken model that raises ends its trace there.  Failing batches are not shrunk (`shrink`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.area import all_capabilities
from flink_semantics.spec.schedule import Event, Schedule, ScheduleError, Trace, validate_schedule

from flink_semantics import reference


class WrongArea:
    completion_order = SCRIPTED
    area: ClassVar[str]
    model: ClassVar[type[Any]]
    # A failing batch is reported as drawn (spec/adapter.py): these tests check that the right
    # property fails with the right rule named, and shrinking the large schedules of the sources and
    # watermarks areas took up to three minutes per adapter (test_suite_failures.py checks shrinking).
    shrink = False

    def __init__(self) -> None:
        self.name = type(self).__name__

    def capabilities(self) -> Mapping[str, str | None]:
        return {c: None for c in all_capabilities()}

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        return [self.run(s) for s in schedules]

    def run(self, schedule: Schedule) -> Trace:
        if schedule.area != self.area:
            return reference.expected_trace(schedule)
        try:
            validate_schedule(schedule)
        except ScheduleError:  # a refused configuration: as the reference refuses it
            return reference.expected_trace(schedule)
        model = self.model(schedule.config)
        events: list[Event] = []
        try:
            for i, s in enumerate(schedule.steps):
                events += model.apply(i, s)
        except ScheduleError:  # the broken model is lost: the trace stops there
            pass
        return Trace(tuple(events))

    def close(self) -> None:
        pass
