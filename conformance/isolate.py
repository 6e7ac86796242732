"""The schedule that breaks an adapter's run_batch, found before the run stops.

When `run_batch` raises (or returns something that is not one trace per schedule), the batch may
hold hundreds of schedules, most of which the adapter runs well.  `isolate` finds one that breaks
it alone, and makes it small, so that the one-line reproducer names it:

1. halve the batch while one of its halves still breaks alone (the first such half);
2. then drop the schedule's steps one at a time, from its last, keeping a drop when the shorter
   schedule is still well-formed (the reference accepts it) and still breaks the adapter, pass
   after pass until no single step can go.

Each try is one `probe` (a run_batch of the candidates): at most `budget` of them, so that a slow
adapter does not hold the stopped run for long; what was found by then is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from flink_semantics.reference import expected_trace
from flink_semantics.spec.schedule import Schedule, ScheduleError

# A probe runs the schedules through the adapter: the error, one line, or None when it ran them.
Probe = Callable[[Sequence[Schedule]], "str | None"]


@dataclass(frozen=True)
class Isolated:
    """What `isolate` found: the smallest breaking batch (one schedule when it got there)."""

    schedules: tuple[Schedule, ...]
    error: str  # the probe's error for it
    steps_before: int  # of the single schedule, before dropping steps (0 for a batch)
    probes: int

    @property
    def single(self) -> Schedule | None:
        return self.schedules[0] if len(self.schedules) == 1 else None

    def describe(self) -> str:
        if self.single is None:
            return (f"no single schedule of the batch breaks it alone: a batch of {len(self.schedules)} "
                    "does (the adapter fails on their combination)")
        kept = len(self.single.steps)
        steps = "step" if self.steps_before == 1 else "steps"
        shrunk = f", shrunk from {self.steps_before} {steps} to {kept}" if kept < self.steps_before else ""
        return f"the schedule that breaks it alone{shrunk}"


def well_formed(schedule: Schedule) -> bool:
    """A schedule the reference runs (a refused configuration is well-formed: it is `rejected`)."""
    try:
        expected_trace(schedule)
    except ScheduleError:
        return False
    return True


def isolate(batch: Sequence[Schedule], error: str, probe: Probe, budget: int = 60) -> Isolated:
    """The smallest part of `batch` (which broke with `error`) that still breaks alone."""
    current, probes = tuple(batch), 0
    while len(current) > 1 and probes < budget:
        half = len(current) // 2
        for part in (current[:half], current[half:]):
            probes += 1
            got = probe(part)
            if got is not None:
                current, error = part, got
                break
        else:
            break  # neither half breaks alone
    if len(current) != 1:
        return Isolated(current, error, 0, probes)
    schedule, before = current[0], len(current[0].steps)
    changed = True
    while changed and probes < budget:  # passes from the last step to the first, until none goes
        changed = False
        for i in reversed(range(len(schedule.steps))):
            if probes >= budget or i >= len(schedule.steps):
                break
            shorter = replace(schedule, steps=schedule.steps[:i] + schedule.steps[i + 1:])
            if well_formed(shorter):
                probes += 1
                got = probe([shorter])
                if got is not None:
                    schedule, error, changed = shorter, got, True
    return Isolated((schedule,), error, before, probes)
