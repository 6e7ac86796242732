"""The reference adapter: runs schedules on the reference model (the only adapter that imports it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import reference
from spec.adapter import CAPABILITIES, SCRIPTED
from spec.schedule import REJECTING_RULES, Schedule, ScheduleError, Trace, event


class ReferenceAdapter:
    name = "reference"
    completion_order = SCRIPTED

    def capabilities(self) -> Mapping[str, str | None]:
        return {name: None for name in CAPABILITIES}

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        return [self.run_one(s) for s in schedules]

    def run_one(self, schedule: Schedule) -> Trace:
        try:
            return reference.run(schedule)
        except ScheduleError as e:
            if e.step is None and e.rule in REJECTING_RULES:
                return Trace((event(-1, "rejected", reason=f"{e.rule}: {e.message}"),))
            raise

    def close(self) -> None:
        pass
