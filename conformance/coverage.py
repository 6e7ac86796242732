"""Generator coverage: how often the drawn schedules reach the rare states where engines lose data.

An area's conformance module (conformance/areas/<area>.py) may name such states:

* `COVERAGE: dict[str, float]`: state -> floor, the least share of the area's distinct schedules
  that must reach it in a full run of the area's properties (the default budget and up);
* `coverage(schedule) -> Iterable[str]`: the states one schedule reaches (it may run the reference
  model step by step to look inside it); a ScheduleError it raises (a malformed schedule, drawn for
  the refusal properties, or a refused configuration) means none.

While properties run, every distinct schedule of the property's own area that they check is
counted (`Tally.add`; a property of one area that also draws another's schedules, to chain the two,
does not count those), and each state
it reaches is also a hypothesis `event()`, so `--hypothesis-show-statistics` shows it per property.
The run prints the shares (`Tally.lines`), the JSON report holds them, and the coverage test of
each area (conformance/test_coverage.py) fails when a state falls below its floor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flink_semantics.conformance.areas import hooks
from flink_semantics.spec.schedule import Schedule, ScheduleError


def floors(area: str) -> dict[str, float]:
    """The area's states and their floors ({} when the area names none)."""
    return dict(getattr(hooks(area), "COVERAGE", {}))


def reached(schedule: Schedule) -> list[str]:
    """The named states a schedule reaches."""
    area = hooks(schedule.area)
    states = floors(schedule.area)
    if not states or not hasattr(area, "coverage"):
        return []
    try:
        found = list(dict.fromkeys(area.coverage(schedule)))
    except ScheduleError:  # malformed, or a configuration the operator refuses: no state reached
        return []
    unknown = [s for s in found if s not in states]
    if unknown:
        raise ValueError(f"conformance/areas/{schedule.area}.py: coverage() names states without a floor: "
                         f"{unknown}")
    return found


@dataclass
class Tally:
    """Distinct schedules checked per area, and of them those reaching each state."""

    drawn: Counter[str] = field(default_factory=Counter)
    states: dict[str, Counter[str]] = field(default_factory=dict)
    seen: dict[Schedule, list[str]] = field(default_factory=dict)  # each schedule's states

    def add(self, schedule: Schedule) -> list[str]:
        """Count a schedule once; the states it reaches (for hypothesis' events)."""
        if schedule in self.seen:
            return self.seen[schedule]
        found = self.seen[schedule] = reached(schedule)
        self.drawn[schedule.area] += 1
        self.states.setdefault(schedule.area, Counter()).update(found)
        return found

    def merge(self, data: Mapping[str, Any]) -> None:
        """Add a tally sent as JSON (`to_json`) by an xdist worker."""
        for area, n in data.get("drawn", {}).items():
            self.drawn[area] += int(n)
        for area, counts in data.get("states", {}).items():
            self.states.setdefault(area, Counter()).update({k: int(v) for k, v in counts.items()})

    def to_json(self) -> dict[str, Any]:
        return {"drawn": dict(self.drawn), "states": {a: dict(c) for a, c in self.states.items()}}

    def shortfalls(self, area: str) -> list[str]:
        """The states of an area below their floors, each with its share and floor."""
        n = self.drawn[area]
        counts = self.states.get(area, Counter())
        out = []
        for state, floor in floors(area).items():
            share = counts[state] / n if n else 0.0
            if share < floor:
                out.append(f"{state!r}: {counts[state]} of {n} schedules ({share:.2%}), floor {floor:.2%}")
        return out

    def lines(self, areas: Iterable[str], waived: Mapping[str, str] | None = None) -> list[str]:
        """One line per state of each area that drew schedules: how many of them reached it, and its
        floor.  In a `waived` area (area -> why: `-k`, a capability missing) the floors do not
        apply, and a share below one says so and why instead of BELOW FLOOR."""
        out, waived = [], waived or {}
        for area in areas:
            n = self.drawn[area]
            if not n:
                continue
            counts = self.states.get(area, Counter())
            for state, floor in floors(area).items():
                share = counts[state] / n
                mark = ("" if share >= floor else f"  below floor, not applied: {waived[area]}"
                        if area in waived else "  BELOW FLOOR")
                out.append(f"{area}: {state}: {counts[state]} of {n} ({share:.1%}; floor {floor:.1%}){mark}")
        return out
