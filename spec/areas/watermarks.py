"""The watermarks area (spec/watermarks.md): configuration, steps, events, capabilities, notation.

A job of `readers` source subtasks (readers r0, r1, ...), each owning the splits added to it; per
split a watermark generator (bounded out-of-orderness, periodic or punctuated, optionally with
idleness); per reader the combined watermark of its splits and the watermark and status it sends
downstream; downstream one task whose input channels are the readers, in reader order, combined by
the valve; optionally watermark alignment of the readers (FLIP-182) and of their splits (FLIP-217).

Standard library and `spec` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flink_semantics.spec.area import Area, Mark, Notation, Timeline, clock, numbered, template_renderer
from flink_semantics.spec.schedule import END, MARKER, OUTPUT, Event, EventKind, Schedule, ScheduleError, Step

NON_NEGATIVE = {"min": 0}
POSITIVE = {"min": 1}
MIN_WATERMARK = -(2**63)  # Long.MIN_VALUE: the watermark before any
MAX_WATERMARK = 2**63 - 1  # Long.MAX_VALUE: end of input

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class WatermarksConfig:
    """`readers`: source subtasks, each an input channel of the downstream task.
    `bound`: the out-of-orderness bound D of every split's generator (WM-2).
    `interval`: the periodic emission interval in ms, 0 for none (`pipeline.auto-watermark-interval`).
    `punctuated`: the generators emit on every record instead of periodically (WM-8).
    `idleness`: `withIdleness(T)` on every split's generator, or null (WM-13).
    `max_drift`: watermark alignment with this maximum drift, or null (WM-22).
    `alignment_buffer`: the samples an alignment check looks back over
    (`pipeline.watermark-alignment.buffer-size`, FLINK-37399); 0: the latest watermark (WM-25)."""

    readers: int = field(default=1, metadata=POSITIVE)
    bound: int = field(default=0, metadata=NON_NEGATIVE)
    interval: int = field(default=200, metadata=NON_NEGATIVE)
    punctuated: bool = False
    idleness: int | None = None
    max_drift: int | None = None
    alignment_buffer: int = field(default=3, metadata=NON_NEGATIVE)


def validate_config(c: WatermarksConfig) -> None:
    """WM-28: idleness and drift are positive durations."""
    if c.idleness is not None and c.idleness <= 0:
        raise ScheduleError(None, "WM-28", f"idleness must be a positive duration, not {c.idleness}")
    if c.max_drift is not None and c.max_drift <= 0:
        raise ScheduleError(None, "WM-28", f"max_drift must be a positive duration, not {c.max_drift}")


# --------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class AddSplitStep(Step):
    """Split `split` is added to reader `reader`: its output is registered at once (WM-4)."""

    op: ClassVar[str] = "add_split"
    reader: int = field(metadata=NON_NEGATIVE)
    split: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class RecordStep(Step):
    """The split's next record, with event time `ts`, becomes available; its reader reads it unless
    the split or the reader is paused by alignment (WM-25, WM-26)."""

    op: ClassVar[str] = "record"
    split: int = field(metadata=NON_NEGATIVE)
    ts: int


@dataclass(frozen=True)
class TickStep(Step):
    """Processing time advances by `ms`: every periodic emission instant on the way fires (WM-3)."""

    op: ClassVar[str] = "tick"
    ms: int = field(metadata=POSITIVE)


@dataclass(frozen=True)
class FinishSplitStep(Step):
    """The split has no more records: once its available records are read, it finishes (WM-9)."""

    op: ClassVar[str] = "finish_split"
    split: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class AlignStep(Step):
    """An alignment round: the readers report, the coordinator announces (WM-22, WM-23)."""

    op: ClassVar[str] = "align"


@dataclass(frozen=True)
class FailoverStep(Step):
    """The job fails and restarts from its last checkpoint with the splits it had (WM-16)."""

    op: ClassVar[str] = "failover"


@dataclass(frozen=True)
class EndStep(Step):
    """The input ends: every split is read to its end and finishes, every reader ends (WM-15)."""

    op: ClassVar[str] = "end"
    role: ClassVar[str | None] = END


STEPS = (AddSplitStep, RecordStep, TickStep, FinishSplitStep, AlignStep, FailoverStep, EndStep)


def validate_steps(schedule: Schedule) -> None:
    """WM-29: readers exist; a split is added once, before its records, and finishes once; align
    only with alignment on; end is the last step."""
    c: WatermarksConfig = schedule.config
    added: set[int] = set()
    finished: set[int] = set()
    last = len(schedule.steps) - 1
    for i, s in enumerate(schedule.steps):
        if isinstance(s, AddSplitStep):
            if s.reader >= c.readers:
                raise ScheduleError(i, "WM-29", f"reader {s.reader} is unknown: the job has {c.readers} "
                                    "reader(s)", s.op)
            if s.split in added:
                raise ScheduleError(i, "WM-29", f"split {s.split} is added twice", s.op)
            added.add(s.split)
        elif isinstance(s, (RecordStep, FinishSplitStep)):
            if s.split not in added:
                raise ScheduleError(i, "WM-29", f"split {s.split} has not been added", s.op)
            if s.split in finished:
                raise ScheduleError(i, "WM-29", f"split {s.split} has finished", s.op)
            if isinstance(s, FinishSplitStep):
                finished.add(s.split)
        elif isinstance(s, AlignStep) and c.max_drift is None:
            raise ScheduleError(i, "WM-29", "align needs alignment (max_drift)", s.op)
        elif isinstance(s, EndStep) and i != last:
            raise ScheduleError(i, "WM-29", "end is the last step", s.op)


# --------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------

EVENTS = (
    EventKind("record", ("split", "ts"), OUTPUT),  # the split's reader emitted a record
    EventKind("watermark", ("reader", "value"), MARKER),  # a reader sent a watermark downstream
    EventKind("status", ("reader", "idle"), MARKER),  # a reader sent IDLE (true) or ACTIVE (false)
    EventKind("output_watermark", ("value",), MARKER),  # the downstream valve's output
    EventKind("output_status", ("idle",), MARKER),
    EventKind("split_finished", ("split",), MARKER),
    EventKind("max_allowed", ("value",), MARKER),  # the coordinator's announcement
    EventKind("blocked", ("reader",), MARKER),  # the reader stops reading (alignment)
    EventKind("unblocked", ("reader",), MARKER),
    EventKind("paused", ("split",), MARKER),  # the split stops being read (split alignment)
    EventKind("resumed", ("split",), MARKER),
    EventKind("restarted", (), MARKER),  # a failover restarted the job
)

# --------------------------------------------------------------------------
# Capabilities
# --------------------------------------------------------------------------

CAPABILITIES = {
    "watermarks.channels": "more than one reader, combined downstream by the valve (WM-17..WM-21)",
    "watermarks.punctuated": "generators that emit on every record (WM-8)",
    "watermarks.idleness": "withIdleness on the splits' generators (WM-13, WM-14)",
    "watermarks.alignment": "watermark alignment of readers and splits (WM-22..WM-26)",
    "watermarks.failover": "failover steps: watermarks start again (WM-16)",
}


def required_capabilities(schedule: Schedule) -> frozenset[str]:
    c: WatermarksConfig = schedule.config
    caps = set()
    if c.readers > 1:
        caps.add("watermarks.channels")
    if c.punctuated:
        caps.add("watermarks.punctuated")
    if c.idleness is not None:
        caps.add("watermarks.idleness")
    if c.max_drift is not None:
        caps.add("watermarks.alignment")
    if any(isinstance(s, FailoverStep) for s in schedule.steps):
        caps.add("watermarks.failover")
    return frozenset(caps)


# --------------------------------------------------------------------------
# Notation of the examples (spec/watermarks.md, "Notation used in the examples")
# --------------------------------------------------------------------------

_CONFIG_ITEM = re.compile(r"(\w+)=([^\s=]+)")


def _value(text: str) -> int:
    """A watermark or timestamp: an integer, `MIN` or `MAX`."""
    return {"MIN": MIN_WATERMARK, "MAX": MAX_WATERMARK}.get(text) or int(text)


def parse_config(text: str) -> dict[str, Any]:
    """`readers=2 bound=5 interval=10 punctuated=yes idleness=30 max_drift=20 alignment_buffer=0`."""
    out: dict[str, Any] = {}
    for key, value in _CONFIG_ITEM.findall(text):
        if key in out:
            raise ValueError(f"{key} is given twice")
        if key in ("readers", "bound", "interval", "idleness", "max_drift", "alignment_buffer"):
            out[key] = int(value)
        elif key == "punctuated" and value in ("yes", "no"):
            out[key] = value == "yes"
        else:
            raise ValueError(f"unknown configuration item {key}={value}")
    return out


def _word(prefix: str, word: str) -> int:
    if not re.fullmatch(rf"{prefix}\d+", word):
        raise ValueError(f"expected {prefix}0, {prefix}1, ..., not {word!r}")
    return int(word[len(prefix):])


def parse_step(text: str) -> dict[str, Any]:
    """One step: `add r0 s1`, `record s1 15`, `tick 200`, `finish s1`, `align`, `failover`, `end`."""
    words = text.split()
    op, args = words[0], words[1:]
    n = len(args)
    if op == "add" and n == 2:
        return {"op": "add_split", "reader": _word("r", args[0]), "split": _word("s", args[1])}
    if op == "record" and n == 2:
        return {"op": op, "split": _word("s", args[0]), "ts": int(args[1])}
    if op == "tick" and n == 1:
        return {"op": op, "ms": int(args[0])}
    if op == "finish" and n == 1:
        return {"op": "finish_split", "split": _word("s", args[0])}
    if op in ("align", "failover", "end") and n == 0:
        return {"op": op}
    raise ValueError(f"not a step of the notation: {text!r}")


def parse_event(step: int, text: str) -> Event:
    """One event without its `@step`: `record s1 15`, `watermark r0 14`, `idle r0`, `output 14`…"""
    words = text.split()
    kind, args = words[0], words[1:]
    n = len(args)
    if kind == "record" and n == 2:
        return event(step, kind, split=_word("s", args[0]), ts=int(args[1]))
    if kind == "watermark" and n == 2:
        return event(step, kind, reader=_word("r", args[0]), value=_value(args[1]))
    if kind in ("idle", "active") and n == 1:
        return event(step, "status", reader=_word("r", args[0]), idle=kind == "idle")
    if kind == "output" and n == 1 and args[0] in ("idle", "active"):
        return event(step, "output_status", idle=args[0] == "idle")
    if kind == "output" and n == 1:
        return event(step, "output_watermark", value=_value(args[0]))
    if kind == "max_allowed" and n == 1:
        return event(step, kind, value=_value(args[0]))
    if kind in ("split_finished", "paused", "resumed") and n == 1:
        return event(step, kind, split=_word("s", args[0]))
    if kind in ("blocked", "unblocked") and n == 1:
        return event(step, kind, reader=_word("r", args[0]))
    if kind in ("restarted", "rejected") and n == 0:
        return event(step, kind) if kind == "restarted" else event(step, kind, reason="")
    raise ValueError(f"not a trace event of the notation: {text!r}")


def _text(name: str, value: Any) -> str:
    if name == "reader":
        return f"r{value}"
    if name == "split":
        return f"s{value}"
    if name == "value":
        return {MIN_WATERMARK: "MIN", MAX_WATERMARK: "MAX"}.get(value, str(value))
    if name == "idle":
        return "idle" if value else "active"
    return str(value)


_EVENT_FORMATS = {
    "record": "record {split} {ts}",
    "watermark": "watermark {reader} {value}",
    "status": "{idle} {reader}",
    "output_watermark": "output {value}",
    "output_status": "output {idle}",
    "split_finished": "split_finished {split}",
    "max_allowed": "max_allowed {value}",
    "blocked": "blocked {reader}",
    "unblocked": "unblocked {reader}",
    "paused": "paused {split}",
    "resumed": "resumed {split}",
    "restarted": "restarted",
    "rejected": "rejected",
}

# An event in the notation, with its step: the inverse of parse_event.
render_event = template_renderer(_EVENT_FORMATS, _text)

# --------------------------------------------------------------------------
# The counterexample timeline (conformance/draw.py): each split, each reader (the valve's input
# channel), the valve's output
# --------------------------------------------------------------------------


def _step_lanes(schedule: Schedule) -> list[str]:
    """A split's steps on its lane, ticks on the clock's, alignment rounds on the coordinator's,
    failover and end on the job's."""
    out = []
    for s in schedule.steps:
        if isinstance(s, (AddSplitStep, RecordStep, FinishSplitStep)):
            out.append(numbered("split", s.split))
        else:
            out.append({TickStep: "clock", AlignStep: "coordinator"}.get(type(s), "job"))
    return out


def _event_lane(schedule: Schedule, e: Event) -> str:
    if e.event in ("record", "split_finished", "paused", "resumed"):
        return numbered("split", e.split)
    if e.event in ("watermark", "status", "blocked", "unblocked"):
        return numbered("reader", e.reader)
    return {"output_watermark": "valve", "output_status": "valve", "max_allowed": "coordinator"}.get(
        e.event, "job")


TIMELINE = Timeline(
    step_lanes=_step_lanes,
    event_lane=_event_lane,
    step_marks={"record": Mark.RECORD, "failover": Mark.FAILURE},
    event_marks={"record": Mark.OUTPUT, "watermark": Mark.WATERMARK, "output_watermark": Mark.WATERMARK,
                 "restarted": Mark.RESTORE},
    times=clock({"tick": "ms"}),
)


# --------------------------------------------------------------------------
# The descriptor
# --------------------------------------------------------------------------

AREA = Area(
    name="watermarks",
    title="watermarks",
    rules_file="watermarks.md",
    rule_prefix="WM",
    config_type=WatermarksConfig,
    steps=STEPS,
    events=EVENTS,
    capabilities=CAPABILITIES,
    notation=Notation(parse_config, parse_step, parse_event, render_event),
    validate_config=validate_config,
    validate_steps=validate_steps,
    required_capabilities=required_capabilities,
    timeline=TIMELINE,
)
event = AREA.event
