"""Areas: the unit of the design.  Each area is found by discovery, never listed by hand.

An area has one module in each part, all named after the area (its `name`):

* `spec/<rules file>.md`        its rules;
* `spec/areas/<area>.py`         its descriptor `AREA` (this module's `Area`): configuration type,
                                  step types, event kinds, capabilities, static checks, notation;
* `reference/<area>.py`          its reference model;
* `conformance/areas/<area>.py`  its strategies and the checker's hooks;
* `conformance/test_<area>.py`   its properties;
* `adapters/pyspark/<area>...`   its implementation on Spark.

This module and the shared modules that use it name no area.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from spec.schedule import REJECTED, Event, EventKind, Schedule, ScheduleError, Step


@dataclass(frozen=True)
class Notation:
    """How an area's examples are written in its rules file (conformance/examples.py reads them).

    parse_config: `mode=unordered capacity=2` -> the JSON configuration object;
    parse_step:   one step without its number -> the JSON step object;
    parse_event:  one event without its `@step` -> the Event;
    render_event: an Event -> its text with its step (`@2 emit r0 10 ts=-`), the way back.
    """

    parse_config: Callable[[str], dict[str, Any]]
    parse_step: Callable[[str], dict[str, Any]]
    parse_event: Callable[[int, str], Event]
    render_event: Callable[[Event], str]


_INT_LIST = re.compile(r"\[\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\]")


def int_list(text: str) -> list[int]:
    """`[1, -2]` -> [1, -2]: a list of integers in an example's notation."""
    if not _INT_LIST.fullmatch(text):
        raise ValueError(f"not a list of integers: {text!r}")
    return [int(v) for v in re.findall(r"-?\d+", text)]


def template_renderer(formats: Mapping[str, str],
                      field_text: Callable[[str, Any], str]) -> Callable[[Event], str]:
    """A `render_event` from one template per event kind (`"emit {record} {value}"`) and the text of
    each field (`field_text(name, value)`): the event with its step, `@2 emit r0 10`."""

    def render_event(e: Event) -> str:
        texts = {name: field_text(name, v) for name, v in zip(e.kind.fields, e.data)}
        return f"@{e.step} " + formats[e.event].format(**texts)

    return render_event


@dataclass(frozen=True)
class KeyOrder:
    """A freedom a rule of the area grants (spec/schedules.md, item 7): inside one step, between two
    markers, a run of output events of `kinds` may come in any order of their `field` values, the
    events of one value keeping their own order (for example, the keys of one bundle)."""

    rule: str
    kinds: tuple[str, ...]
    field: str


@dataclass(frozen=True)
class Area:
    name: str  # the schedule's "area", and the name of the area's module in every part
    title: str
    rules_file: str  # its rules, a file of spec/
    rule_prefix: str  # its rule IDs: f"{rule_prefix}-{n}"
    config_type: type  # a frozen dataclass (spec/schedule.py: types from annotations)
    steps: tuple[type[Step], ...]
    events: tuple[EventKind, ...]  # besides the shared `rejected`
    capabilities: Mapping[str, str]  # name -> what it covers; every name starts with f"{name}."
    notation: Notation
    validate_config: Callable[[Any], None]  # raises ScheduleError (step None)
    validate_steps: Callable[[Schedule], None] = lambda schedule: None  # the area's static step rules
    required_capabilities: Callable[[Schedule], frozenset[str]] = lambda schedule: frozenset()
    # Rules of a configuration the operator enforces itself: a schedule breaking one is not
    # malformed; its trace is the single `rejected` event (spec/schedules.md).
    rejecting_rules: tuple[str, ...] = ()
    # Outputs of one step whose order across keys a rule leaves free (KeyOrder), or None.
    free_key_order: KeyOrder | None = None

    def __post_init__(self) -> None:
        bad = [c for c in self.capabilities if not c.startswith(f"{self.name}.")]
        if bad:
            raise ValueError(f"area {self.name!r}: capabilities must start with '{self.name}.': {bad}")

    @cached_property
    def step_types(self) -> dict[str, type[Step]]:
        return {t.op: t for t in self.steps}

    @cached_property
    def event_kinds(self) -> dict[str, EventKind]:
        return {k.name: k for k in (*self.events, REJECTED)}

    def event(self, step: int, kind: str, **kw: Any) -> Event:
        """Build one of the area's events: AREA.event(3, "kind", field=value, ...)."""
        return self.event_kinds[kind](step, **kw)

    def all_capabilities(self) -> dict[str, str]:
        """The area itself and its optional features, as an adapter declares them."""
        return {self.name: f"the {self.title} area ({self.rules_file})", **self.capabilities}


_registered: dict[str, Area] = {}


def discover() -> dict[str, Area]:
    """Every area: the `AREA` of each module of spec/areas/, and any registered by hand (tests)."""
    import spec.areas as package

    found: dict[str, Area] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        area = getattr(importlib.import_module(f"spec.areas.{info.name}"), "AREA", None)
        if not isinstance(area, Area) or area.name != info.name:
            raise TypeError(f"spec/areas/{info.name}.py must define AREA = Area(name={info.name!r}, ...)")
        found[area.name] = area
    return {**found, **_registered}


_cache: dict[str, Area] = {}


def areas() -> dict[str, Area]:
    if not _cache:
        _cache.update(discover())
    return dict(_cache)


def get_area(name: Any) -> Area:
    """The area of that name; SCH-1 names the known ones otherwise."""
    known = areas()
    if name not in known:
        raise ScheduleError(None, "SCH-1", f"unknown area {name!r}; known: {', '.join(known)}")
    return known[name]


def register(area: Area) -> None:
    """Add an area that is not a module of spec/areas/ (a test's toy area)."""
    _registered[area.name] = area
    _cache.clear()


def unregister(name: str) -> None:
    _registered.pop(name, None)
    _cache.clear()


def all_capabilities() -> dict[str, str]:
    """Every capability of every area, name -> what it covers."""
    return {c: d for a in areas().values() for c, d in a.all_capabilities().items()}


def area_of_rule(rule_id: str) -> str | None:
    """The area whose rules file defines a rule ID (by its prefix), or None for the vocabulary's."""
    prefix = rule_id.rsplit("-", 1)[0]
    return next((a.name for a in areas().values() if a.rule_prefix == prefix), None)
