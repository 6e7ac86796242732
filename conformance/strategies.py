"""Strategies shared by every area: a batch of schedules for one `run_batch` call, and malformed
schedules with the refusal they must meet.

An example of a property is a *batch*, a list of schedules, because adapters run batches;
hypothesis shrinks a failing batch down to the one schedule that fails.  Each area's own strategies
live in conformance/areas/<area>.py.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from flink_semantics.reference import run as reference_run
from flink_semantics.spec.schedule import Schedule, ScheduleError, schedule_from_dict
from hypothesis import strategies as st

T = TypeVar("T")


def with_changes(base: Schedule, config: dict[str, Any] | None = None,
                 steps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A valid schedule's JSON with some configuration fields replaced and/or other steps (the
    malformed schedules' starting point)."""
    d = base.to_dict()
    if config is not None:
        d["config"].update(config)
    if steps is not None:
        d["steps"] = steps
    return d


def batches(schedule_strategy: st.SearchStrategy[T], max_size: int = 12,
            key: Callable[[T], Hashable] = lambda x: x) -> st.SearchStrategy[list[T]]:
    """A batch of distinct schedules; shrinks to a single schedule.

    The size is drawn first (uniformly enough that a large limit gives large batches, unlike
    `st.lists`, whose average stays small) and shrinks towards 1.  The schedules are distinct:
    hypothesis otherwise often repeats one within a batch (three in four were repeats).  `key`
    tells them apart (the schedule itself, by default).
    """
    return st.integers(1, max(1, max_size)).flatmap(
        lambda n: st.lists(schedule_strategy, min_size=n, max_size=n, unique_by=key))


@dataclass(frozen=True)
class Malformed:
    """A malformed schedule as JSON data, and where and why it must be refused."""

    data: dict[str, Any]
    step: int | None  # None: the configuration or the schedule as a whole
    rule: str
    how: str  # what was done to a valid schedule


def malformed_batches(strategy: st.SearchStrategy[Malformed],
                      max_size: int = 8) -> st.SearchStrategy[list[Malformed]]:
    """A batch of distinct malformed schedules."""
    return batches(strategy, max_size, key=lambda m: repr(m.data))


def refusal_problems(cases: Sequence[Malformed]) -> list[str]:
    """How the oracle's validation misses each case: not refused, or refused at another step or by
    another rule, or with a message that does not name them."""
    problems = []
    for case in cases:
        where = "the configuration" if case.step is None else f"step {case.step}"
        try:
            reference_run(schedule_from_dict(case.data))
        except ScheduleError as e:
            if (e.rule, e.step) != (case.rule, case.step):
                problems.append(f"{case.how}: expected {case.rule} at {where}, got: {e}")
            elif case.rule not in str(e) or (case.step is not None and f"step {case.step}" not in str(e)):
                problems.append(f"{case.how}: the message does not name {case.rule} and {where}: {e}")
        else:
            problems.append(f"{case.how}: not refused; expected ScheduleError {case.rule} at {where}")
    return problems
