"""Strategies shared by every area: a batch of schedules for one `run_batch` call.

An example of a property is a *batch*, a list of schedules, because adapters run batches;
hypothesis shrinks a failing batch down to the one schedule that fails.  Each area's own strategies
live in conformance/areas/<area>.py.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from hypothesis import strategies as st

T = TypeVar("T")


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
