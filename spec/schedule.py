"""The schedule vocabulary, area-neutral: schedules and traces as data (see spec/schedules.md).

A *schedule* fixes everything an engine would otherwise decide by timing: the inputs, the order in
which outside work completes, processing-time advances, checkpoints, crashes and restores, end of
input.  A *trace* records what an implementation did with it: what it emitted after which step,
and its externally visible side effects.  Both have a JSON form that round-trips exactly.

This module knows no area.  An area (spec/area.py, one module per area in spec/areas/) declares
its configuration type, its step types and its event kinds; this module gives them their common
machinery:

* steps are frozen dataclasses deriving from `Step`, with a class attribute `op` (the JSON name)
  and a `role` saying what the step means to the execution model (an input element, a checkpoint
  barrier, end of input, a crash, a restore); field types come from the annotations, field bounds
  from `field(metadata={"min": ..., "choices": ...})`;
* configurations are frozen dataclasses with the same annotations and metadata;
* events are `Event`s of an area's `EventKind`s.

`parse_schedule` validates statically (shape, types, references) and raises `ScheduleError`
naming the step index and the rule.  Validity that depends on the semantics is checked by the
reference model while it runs, which raises the same `ScheduleError`.

Standard library only: `reference/`, `adapters/` and `conformance/` all import it.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from flink_semantics.spec.area import Area


class ScheduleError(ValueError):
    """A malformed schedule. `step` is the step index (None for the configuration)."""

    def __init__(self, step: int | None, rule: str, message: str, op: str | None = None):
        self.step = step
        self.rule = rule
        self.op = op
        self.message = message
        where = "configuration" if step is None else f"step {step}" + (f" ({op})" if op else "")
        super().__init__(f"{where}: {rule}: {message}")


def need(cond: bool, step: int | None, rule: str, msg: str, op: str | None = None) -> None:
    """Raise ScheduleError(step, rule, msg) unless `cond`."""
    if not cond:
        raise ScheduleError(step, rule, msg, op)


# --------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------

# What a step means to the execution model (spec/schedules.md).  Input steps travel on the input
# channel in order; a checkpoint barrier and end of input do too.
INPUT, CHECKPOINT, END, CRASH, RESTORE = "input", "checkpoint", "end", "crash", "restore"
INPUT_ROLES = frozenset({INPUT, CHECKPOINT, END})


class Step:
    """Base of every area's step dataclasses.

    `op` is the JSON name; `role` one of INPUT, CHECKPOINT (a field `id`), END, CRASH, RESTORE (a
    field `checkpoint`, an id or None), or None for a step outside the input channel (a completion,
    a time advance).
    """

    op: ClassVar[str]
    role: ClassVar[str | None] = None


def step_to_dict(step: Step) -> dict[str, Any]:
    return {"op": step.op, **_to_json(step)}


# --------------------------------------------------------------------------
# Dataclasses from JSON, and their types (SCH-2)
# --------------------------------------------------------------------------


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _predicate(tp: Any) -> Callable[[Any], bool]:
    """A test of whether a value has the annotated type (ints are not bools; a tuple[T, ...] holds
    Ts); built once per type, since validation runs on every schedule."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [_predicate(a) for a in typing.get_args(tp)]
        return lambda v: any(p(v) for p in options)
    if tp is type(None):
        return lambda v: v is None
    if tp is bool:
        return lambda v: isinstance(v, bool)
    if tp is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if tp is float:
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if origin is tuple:
        element = _predicate(typing.get_args(tp)[0])
        return lambda v: isinstance(v, tuple) and all(element(x) for x in v)
    return lambda v: isinstance(v, tp)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    return {int: "an integer", bool: "a boolean", str: "a string", float: "a number"}.get(tp, tp.__name__)


def _dataclass_type(tp: Any) -> type | None:
    """The dataclass in an annotation such as `RetryConfig | None`, if any."""
    for a in typing.get_args(tp) or (tp,):
        if isinstance(a, type) and is_dataclass(a):
            return a
    return None


@cache
def _fields_of(cls: Any) -> tuple[frozenset[str], tuple[tuple[str, bool, type | None], ...]]:
    """A dataclass's field names, and per field: (name, has a default, nested dataclass or None)."""
    hints = _hints(cls)
    info = tuple((f.name, f.default is not MISSING or f.default_factory is not MISSING,
                  _dataclass_type(hints[f.name])) for f in fields(cls))
    return frozenset(f.name for f in fields(cls)), info


def prepare_types(cls: type) -> None:
    """Compute the cached type information of a dataclass and of the dataclasses in its fields now
    (a process forked afterwards starts with it, instead of evaluating the annotations again)."""
    _, info = _fields_of(cls)
    _field_checks(cls)
    for _, _, nested in info:
        if nested is not None:
            prepare_types(nested)


def from_json(cls: type, d: Any, step: int | None, what: str, op: str | None = None) -> Any:
    """A dataclass from its JSON object: unknown fields refused, lists made tuples, nested dataclasses
    built, then every field checked (check_fields).  Missing fields take their defaults."""
    if not isinstance(d, Mapping):
        raise ScheduleError(step, "SCH-2", f"{what} must be an object", op)
    names, info = _fields_of(cls)
    if not names.issuperset(d):
        raise ScheduleError(step, "SCH-2", f"unknown {what} field(s) {sorted(set(d) - names)}", op)
    args: dict[str, Any] = {}
    for name, has_default, nested in info:
        if name not in d:
            if not has_default:
                raise ScheduleError(step, "SCH-2", f"{what} needs the field {name!r}", op)
            continue
        v = d[name]
        if nested is not None and isinstance(v, Mapping):
            v = from_json(nested, v, step, f"{what} {name}", op)
        elif isinstance(v, list):
            v = _freeze(v)
        args[name] = v
    obj = cls(**args)
    check_fields(obj, step, op)
    return obj


@cache
def _field_checks(cls: Any) -> tuple[tuple[str, Any, Callable[[Any], bool], Mapping[str, Any]], ...]:
    """(name, annotation, type test, metadata) of each field of a dataclass."""
    hints = _hints(cls)
    return tuple((f.name, hints[f.name], _predicate(hints[f.name]), f.metadata) for f in fields(cls))


def check_fields(obj: Any, step: int | None, op: str | None = None) -> None:
    """SCH-2: every field has its annotated type, and its metadata bounds (`min`, `choices`).

    Runs on every step of every schedule: messages are built only on an error."""
    for name, tp, conforms, meta in _field_checks(typing.cast(Any, type(obj))):
        v = getattr(obj, name)
        if not conforms(v):
            raise ScheduleError(step, "SCH-2", f"{name} must be {_type_name(tp)}, not {v!r}", op)
        if is_dataclass(v):
            check_fields(v, step, op)
        elif v is not None and meta:
            if "choices" in meta and v not in meta["choices"]:
                raise ScheduleError(step, "SCH-2", f"{name} must be one of {tuple(meta['choices'])}, "
                                    f"not {v!r}", op)
            if "min" in meta and v < meta["min"]:
                raise ScheduleError(step, "SCH-2", f"{name} must be >= {meta['min']}", op)


def _freeze(v: Any) -> Any:
    """JSON lists become tuples (dataclasses of this vocabulary are frozen and hashable)."""
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


def _to_json(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        out[f.name] = _to_json(v) if is_dataclass(v) else _thaw(v)
    return out


def _thaw(v: Any) -> Any:
    return [_thaw(x) for x in v] if isinstance(v, tuple) else v


def config_to_dict(config: Any) -> dict[str, Any]:
    return _to_json(config)


# --------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    area: str
    config: Any  # the area's configuration dataclass
    steps: tuple[Step, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"area": self.area, "config": config_to_dict(self.config),
                "steps": [step_to_dict(s) for s in self.steps]}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)


def _area(name: Any) -> Area:
    from flink_semantics.spec.area import get_area  # spec.area imports this module

    return get_area(name)


def _step_from_dict(i: int, d: Any, area: Area) -> Step:
    need(isinstance(d, Mapping), i, "SCH-2", "a step must be an object")
    op = d.get("op")
    need(isinstance(op, str), i, "SCH-2", "a step needs an 'op' string")
    cls = area.step_types.get(op)
    if cls is None:
        raise ScheduleError(i, "SCH-1", f"op {op!r} is not a step of area {area.name!r} "
                            f"(its steps: {', '.join(area.step_types)})", op)
    return from_json(cls, {k: v for k, v in d.items() if k != "op"}, i, "step", op)  # type: ignore[no-any-return]


def validate_schedule(schedule: Schedule) -> Schedule:
    """Static validation (spec/schedules.md, SCH rules, and the area's own).  Returns the schedule.

    Runs on every schedule a property draws: messages are built only on an error."""
    area = _area(schedule.area)
    if not isinstance(schedule.config, area.config_type):
        raise ScheduleError(None, "SCH-2", f"the configuration must be a {area.config_type.__name__}")
    check_fields(schedule.config, None)
    area.validate_config(schedule.config)
    own = set(area.step_types.values())
    checkpoints: set[int] = set()
    ended = after_crash = False
    for i, s in enumerate(schedule.steps):
        if type(s) not in own:
            raise ScheduleError(i, "SCH-1", f"{s!r} is not a step of area {area.name!r}",
                                getattr(s, "op", None))
        check_fields(s, i, s.op)
        role = s.role
        if after_crash and role != RESTORE:
            raise ScheduleError(i, "SCH-7", "after a crash the next step must be restore", s.op)
        if role == CHECKPOINT:
            cid = s.id  # type: ignore[attr-defined]
            if cid in checkpoints:
                raise ScheduleError(i, "SCH-5", f"checkpoint id {cid} is used twice", s.op)
            checkpoints.add(cid)
        elif role == RESTORE:
            taken = s.checkpoint  # type: ignore[attr-defined]
            if taken is not None and taken not in checkpoints:
                raise ScheduleError(i, "SCH-5", f"checkpoint {taken} was never taken before this restore",
                                    s.op)
        if ended and role in INPUT_ROLES:
            raise ScheduleError(i, "SCH-6", f"{s.op} after end of input (before a restore)", s.op)
        ended = role == END or (ended and role != RESTORE)
        after_crash = role == CRASH
    area.validate_steps(schedule)
    return schedule


def schedule_from_dict(d: Any, validate: bool = True) -> Schedule:
    need(isinstance(d, Mapping), None, "SCH-2", "a schedule must be a JSON object")
    extra = set(d) - {"area", "config", "steps"}
    need(not extra, None, "SCH-2", f"unknown schedule field(s) {sorted(extra)}")
    area = _area(d.get("area"))
    config = from_json(area.config_type, d.get("config", {}), None, "config")
    steps_in = d.get("steps", [])
    need(isinstance(steps_in, list), None, "SCH-2", "steps must be a list")
    steps = tuple(_step_from_dict(i, s, area) for i, s in enumerate(steps_in))
    schedule = Schedule(area=area.name, config=config, steps=steps)
    return validate_schedule(schedule) if validate else schedule


def parse_schedule(text: str, validate: bool = True) -> Schedule:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScheduleError(None, "SCH-2", f"not JSON: {e}") from None
    return schedule_from_dict(d, validate=validate)


# --------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------

# How an event kind takes part in the comparison of traces (spec/schedules.md, item 7): outputs and
# side effects are two sequences per step whose interleaving is free; a marker keeps its place.
OUTPUT, EFFECT, MARKER = "output", "side effect", "marker"


@dataclass(frozen=True)
class EventKind:
    """One kind of trace event of an area: its fields, in JSON order, and how it is compared.

    `final`: no event may follow it in its incarnation.  `codecs`: field -> (to JSON, from JSON)
    for a field whose JSON form is not its Python form.
    """

    name: str
    fields: tuple[str, ...]
    group: str  # OUTPUT, EFFECT or MARKER
    final: bool = False
    codecs: Mapping[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = field(default_factory=dict)

    def __call__(self, step: int, **kw: Any) -> Event:
        missing, extra = set(self.fields) - set(kw), set(kw) - set(self.fields)
        if missing or extra:
            raise TypeError(f"event {self.name!r} takes {self.fields}; missing {sorted(missing)}, "
                            f"extra {sorted(extra)}")
        return Event(step, self.name, tuple(_freeze(kw[n]) for n in self.fields), self)

    def from_dict(self, d: Mapping[str, Any]) -> Event:
        kw = {k: v for k, v in d.items() if k not in ("step", "event")}
        for name, (_, decode) in self.codecs.items():
            if name in kw:
                kw[name] = decode(kw[name])
        return self(int(d["step"]), **kw)


# The one event every area shares: a refused configuration (the trace's only event, at step -1).
REJECTED = EventKind("rejected", ("reason",), MARKER)


@dataclass(frozen=True)
class Event:
    """One trace event.  `data` holds the kind's fields, in order; they read as attributes."""

    step: int
    event: str
    data: tuple[Any, ...] = ()
    kind: EventKind = field(default=REJECTED, compare=False, repr=False, hash=False)

    def __getattr__(self, name: str) -> Any:
        kind = object.__getattribute__(self, "kind")
        if name in kind.fields:
            return object.__getattribute__(self, "data")[kind.fields.index(name)]
        raise AttributeError(name)

    @property
    def group(self) -> str:
        return self.kind.group

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"step": self.step, "event": self.event}
        for name, v in zip(self.kind.fields, self.data):
            d[name] = self.kind.codecs[name][0](v) if name in self.kind.codecs else _thaw(v)
        return d

    def __str__(self) -> str:
        args = " ".join(f"{k}={printable(v)}" for k, v in list(self.to_dict().items())[2:])
        return f"@{self.step} {self.event} {args}".rstrip()


def printable(v: Any) -> Any:
    """A str as text that can be printed and written as UTF-8: an unpaired surrogate (an event's
    string field may hold one) as its escape `\\udXXX`; anything else unchanged."""
    return v.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(v, str) else v


def rejected(reason: str) -> Event:
    """The trace of a refused configuration has this one event."""
    return REJECTED(-1, reason=reason)


@dataclass(frozen=True)
class Trace:
    events: tuple[Event, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"events": [e.to_dict() for e in self.events]}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    @property
    def rejected(self) -> bool:
        return [e.event for e in self.events] == ["rejected"]


def trace_from_dict(d: Mapping[str, Any], area: str) -> Trace:
    kinds = _area(area).event_kinds
    out = []
    for e in d["events"]:
        kind = kinds.get(e.get("event"))
        if kind is None:
            raise ValueError(f"unknown trace event {e.get('event')!r} for area {area!r}")
        out.append(kind.from_dict(e))
    return Trace(tuple(out))


def parse_trace(text: str, area: str) -> Trace:
    return trace_from_dict(json.loads(text), area)


def make_trace(events: Iterable[Event]) -> Trace:
    return Trace(tuple(events))


def required_capabilities(schedule: Schedule) -> frozenset[str]:
    """The adapter capabilities (spec/adapter.py) a schedule exercises: its area and the area's own."""
    area = _area(schedule.area)
    return frozenset({area.name, *area.required_capabilities(schedule)})
