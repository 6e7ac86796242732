"""The conformance part of each area: one module per area (`conformance/areas/<area>.py`).

Besides its strategies (used by its properties in `conformance/test_<area>.py`), an area's module
gives the shared checker (conformance/checker.py) these hooks:

* `rules_for(schedule, kinds) -> tuple[str, ...]`: the rules a divergence in those event kinds
  concerns (a hint for the report);
* `free_checkable(schedule) -> bool`: whether the schedule can be checked against a FREE adapter;
* `order_graph(schedule, outputs) -> networkx.DiGraph`: the partial order the rules allow on the
  reference's output events (nodes carry `event`, optionally `rules` for a wrong value and
  `run=(key, rule)` for nodes that must be contiguous; edges carry `rule`);
* `output_keys(events) -> list`: the graph node of each output event, in order;
* `FREE_MULTISETS: dict[str, tuple[str, ...]]`: event kinds compared as multisets of those fields
  against a FREE adapter.

and optionally

* `rules_for_events(schedule, step, expected, observed, later=()) -> tuple[str, ...] | Blame`: the
  rules a difference between these events of one step concerns, narrower than `rules_for` since it
  sees which field differs (`later`: the adapter's events after them, to tell an output that came
  late from one lost); an empty tuple falls back to `rules_for`.  Where the difference shows which
  rule broke, a `Blame(broken, possible)`: the verdict table fails `broken` only, and gives the
  `possible` rules (those it may concern, but does not single out) `inconclusive`; a plain tuple
  blames every rule it names;
* `legal_reference(schedule, expected, observed) -> Trace | None`: for an area whose rules leave a
  choice open that the reference model makes one way (a MAY), the reference trace under the choice
  the observed trace shows (or, where none gives it, the one that agrees with it longest); None
  when it is `expected`.  The SCRIPTED comparison asks for it only when the observed trace differs
  from `expected`, and compares with it instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import Event, Schedule


class CheckerHooks(Protocol):
    FREE_MULTISETS: dict[str, tuple[str, ...]]

    def rules_for(self, schedule: Schedule, kinds: Sequence[str]) -> tuple[str, ...]: ...

    def free_checkable(self, schedule: Schedule) -> bool: ...

    def order_graph(self, schedule: Schedule, outputs: Sequence[Event]) -> Any: ...

    def output_keys(self, events: Sequence[Event]) -> list[Any]: ...


@dataclass(frozen=True)
class Blame:
    """What a `rules_for_events` hook may return when the evidence tells: the rules the difference
    shows broken (`broken`), and those it may concern too but cannot single out (`possible`: their
    verdict is `inconclusive`, never `failed`).  A plain tuple of rules means: all of them possible
    and none singled out, so all are blamed."""

    broken: tuple[str, ...]
    possible: tuple[str, ...] = ()


@cache
def hooks(area: str) -> CheckerHooks:
    """The conformance module of an area (`conformance/areas/<area>.py`)."""
    get_area(area)
    return importlib.import_module(f"flink_semantics.conformance.areas.{area}")  # type: ignore[return-value]


# --------------------------------------------------------------------------
# Hooks that areas share
# --------------------------------------------------------------------------


def rules_from(table: Mapping[str, Sequence[str]]) -> Callable[[Schedule, Sequence[str]], tuple[str, ...]]:
    """A `rules_for` hook from a table event kind -> rules that does not depend on the schedule."""

    def rules_for(schedule: Schedule, kinds: Sequence[str]) -> tuple[str, ...]:
        out: list[str] = []
        for k in kinds:
            out += [r for r in table.get(k, ()) if r not in out]
        return tuple(out)

    return rules_for


# The FREE hooks of an area whose every event is placed by the schedule's steps: its traces are
# compared exactly (SCRIPTED), and a FREE adapter cannot be checked on them.


def never_free(schedule: Schedule) -> bool:
    return False


def no_order_graph(schedule: Schedule, outputs: Sequence[Event]) -> Any:
    raise NotImplementedError("this area's traces are compared exactly (free_checkable is False)")


def no_output_keys(events: Sequence[Event]) -> list[Any]:
    raise NotImplementedError("this area's traces are compared exactly (free_checkable is False)")
