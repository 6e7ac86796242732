"""Areas: the unit of the design.  Each area is found by discovery, never listed by hand.

An area has one module in each part, all named after the area (its `name`):

* `spec/<rules file>.md`        its rules;
* `spec/areas/<area>.py`         its descriptor `AREA` (this module's `Area`): configuration type,
                                  step types, event kinds, capabilities, static checks, notation,
                                  timeline (how its counterexamples are drawn);
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum, auto
from functools import cached_property
from typing import Any

from flink_semantics.spec.schedule import (
    CHECKPOINT,
    CRASH,
    EFFECT,
    INPUT,
    OUTPUT,
    REJECTED,
    RESTORE,
    Event,
    EventKind,
    Schedule,
    ScheduleError,
    Step,
)


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


class Mark(StrEnum):
    """What a step or an event is, as a counterexample timeline draws it (conformance/draw.py): the
    value is the mark's name (`Mark.CALL == "call"`), in the pictures' SVG ids."""

    RECORD = auto()  # an input element arrives (or is read)
    CALL = auto()  # outside work starts: a call, a request
    COMPLETION = auto()  # outside work ends: a result, an error, a timer
    WATERMARK = auto()  # event time moves: drawn as a vertical line across its lane
    CHECKPOINT = auto()  # a barrier, a snapshot, a commit point
    FAILURE = auto()  # a crash, a failover, a refusal
    RESTORE = auto()  # a restart, a restore, a rescale
    OUTPUT = auto()  # an output element
    OTHER = auto()  # anything else (a time advance, end of input, a status)


# The mark of a step without one of its own, by its role (spec/schedule.py), and of an event by its group.
ROLE_MARKS: Mapping[str | None, Mark] = {INPUT: Mark.RECORD, CHECKPOINT: Mark.CHECKPOINT,
                                          CRASH: Mark.FAILURE, RESTORE: Mark.RESTORE}
GROUP_MARKS: Mapping[str, Mark] = {OUTPUT: Mark.OUTPUT, EFFECT: Mark.CALL}


def _one_lane(name: str) -> Callable[[Schedule], list[str]]:
    return lambda schedule: [name] * len(schedule.steps)


@dataclass(frozen=True)
class Timeline:
    """How a counterexample timeline (conformance/draw.py) draws an area's schedules and traces.

    The picture has one horizontal *lane* per thing the area's runs happen on (a reader, a split, a
    key group, a record in flight, a shared lane such as "operator" or "output"), steps left to right.

    step_lanes:  the schedule -> the lane of each of its steps, one label per step ("reader 1");
    event_lane:  (the schedule, a trace event) -> the event's lane ("key group 7");
    step_marks:  step op -> its Mark; an op not named takes the mark of its role (ROLE_MARKS), else OTHER;
    event_marks: event kind -> its Mark; a kind not named takes the mark of its group (GROUP_MARKS),
                 else OTHER; the shared `rejected` event is a FAILURE;
    times:       the schedule -> the processing time (ms) after each of its steps, for the time axis's
                 labels (`clock` builds one); None when the area has no processing time.

    Lanes are labels: a word and a number ("split 3") are ordered by the number among the lanes of
    the same word; the words keep the order in which they first appear.
    """

    step_lanes: Callable[[Schedule], Sequence[str]] = _one_lane("steps")
    event_lane: Callable[[Schedule, Event], str] = lambda schedule, event: event.kind.group
    step_marks: Mapping[str, Mark] = field(default_factory=dict)
    event_marks: Mapping[str, Mark] = field(default_factory=dict)
    times: Callable[[Schedule], Sequence[int]] | None = None

    def step_mark(self, step: Step) -> Mark:
        return self.step_marks.get(step.op) or ROLE_MARKS.get(step.role, Mark.OTHER)

    def event_mark(self, event: Event) -> Mark:
        if event.kind is REJECTED:
            return Mark.FAILURE
        return self.event_marks.get(event.event) or GROUP_MARKS.get(event.kind.group, Mark.OTHER)


# The timeline of an area that declares none: its steps on one lane, its events on one lane per group.
DEFAULT_TIMELINE = Timeline()


def clock(advances: Mapping[str, str]) -> Callable[[Schedule], list[int]]:
    """A Timeline's `times` for an area whose steps move processing time forward: `advances` maps
    each such step op to its field holding the milliseconds it moves (time starts at 0)."""

    def times(schedule: Schedule) -> list[int]:
        now, out = 0, []
        for s in schedule.steps:
            if s.op in advances:
                now += int(getattr(s, advances[s.op]))
            out.append(now)
        return out

    return times


def numbered(word: str, value: Any) -> str:
    """A lane label: `numbered("reader", 2)` -> "reader 2" (None -> "reader null")."""
    return f"{word} {'null' if value is None else value}"


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
    # How counterexample timelines draw its schedules and traces (Timeline), or None: DEFAULT_TIMELINE.
    timeline: Timeline | None = None

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
    import flink_semantics.spec.areas as package

    found: dict[str, Area] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        area = getattr(importlib.import_module(f"flink_semantics.spec.areas.{info.name}"), "AREA", None)
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
