"""The mini-batch aggregation area (spec/mini-batch.md): configuration, steps, events, capabilities,
notation.

One Flink SQL group aggregation, `SELECT k, COUNT(*), SUM(v), MIN(v), MAX(v) ... GROUP BY k`, over
an input changelog of BIGINT keys and values (Java longs), at parallelism 1: a mini-batch assigner (processing
time or row time), optionally a local aggregation (two-phase), the exchange with its watermark
valve, and the aggregation, which buffers its input in bundles when mini-batch is on.  The trace
is the aggregation's output: its changelog rows, the watermarks and statuses it forwards.

Standard library and `spec` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flink_semantics.spec.area import (
    Area,
    KeyOrder,
    Mark,
    Notation,
    Timeline,
    clock,
    numbered,
    template_renderer,
)
from flink_semantics.spec.schedule import (
    CHECKPOINT,
    CRASH,
    END,
    INPUT,
    MARKER,
    OUTPUT,
    RESTORE,
    Event,
    EventKind,
    Schedule,
    ScheduleError,
    Step,
)

MAX_WATERMARK = 2**63 - 1  # Long.MAX_VALUE: end of event time
LONG_RANGE = (-(2**63), 2**63 - 1)
KINDS = ("+I", "-U", "+U", "-D")  # the changelog's row kinds
RETRACTIONS = ("-U", "-D")
ASSIGNERS = ("proctime", "rowtime")
NON_NEGATIVE = {"min": 0}

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class MiniBatchConfig:
    """`enabled`: table.exec.mini-batch.enabled (MB-1).
    `allow_latency`: table.exec.mini-batch.allow-latency in ms, the assigner's interval (MB-2).
    `size`: table.exec.mini-batch.size, records per bundle (MB-2, MB-10).
    `assigner`: the mini-batch assigner, `proctime` (MB-4) or `rowtime` (MB-6).
    `update_before`: the sink asks for UPDATE_BEFORE rows (-U) (MB-20).
    `ttl`: idle state retention is on (a retention longer than any schedule: no state expires) (MB-22).
    `two_phase`: table.optimizer.agg-phase-strategy TWO_PHASE: local-global aggregation (MB-3, MB-25)."""

    enabled: bool = False
    allow_latency: int = 0
    size: int = -1
    assigner: str = field(default="proctime", metadata={"choices": ASSIGNERS})
    update_before: bool = False
    ttl: bool = False
    two_phase: bool = False


def validate_config(c: MiniBatchConfig) -> None:
    """MB-2, a rejecting rule: mini-batch on needs a positive latency and a positive size."""
    if c.enabled and c.allow_latency <= 0:
        raise ScheduleError(None, "MB-2", f"mini-batch is enabled with allow_latency {c.allow_latency}: "
                            "MiniBatch Latency must be greater than 0 ms")
    if c.enabled and c.size <= 0:
        raise ScheduleError(None, "MB-2", f"mini-batch is enabled with size {c.size}: "
                            "table.exec.mini-batch.size must be > 0")


# --------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RowStep(Step):
    """A changelog row arrives: `kind` (+I, -U, +U, -D) for `key`, with the value `value`; the key
    and the value are BIGINT (longs, SCH-2: checked in `validate_steps`)."""

    op: ClassVar[str] = "row"
    role: ClassVar[str | None] = INPUT
    key: int
    kind: str = field(metadata={"choices": KINDS})
    value: int


@dataclass(frozen=True)
class WatermarkStep(Step):
    """A watermark arrives at the mini-batch assigner from upstream."""

    op: ClassVar[str] = "watermark"
    role: ClassVar[str | None] = INPUT
    timestamp: int


@dataclass(frozen=True)
class StatusStep(Step):
    """A watermark status (idle / active) arrives at the mini-batch assigner from upstream."""

    op: ClassVar[str] = "status"
    role: ClassVar[str | None] = INPUT
    idle: bool


@dataclass(frozen=True)
class AdvanceStep(Step):
    """Processing time advances by `ms`; due timers fire in (deadline, registration) order."""

    op: ClassVar[str] = "advance"
    ms: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class CheckpointStep(Step):
    """A checkpoint barrier with a unique id arrives; the checkpoint completes."""

    op: ClassVar[str] = "checkpoint"
    role: ClassVar[str | None] = CHECKPOINT
    id: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class CrashStep(Step):
    """The job fails (or is stopped) without end of input."""

    op: ClassVar[str] = "crash"
    role: ClassVar[str | None] = CRASH


@dataclass(frozen=True)
class RestoreStep(Step):
    """The job starts again from checkpoint `checkpoint` (None: from no checkpoint)."""

    op: ClassVar[str] = "restore"
    role: ClassVar[str | None] = RESTORE
    checkpoint: int | None = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class EndStep(Step):
    """End of input: the source emits the watermark Long.MAX_VALUE and the operators finish."""

    op: ClassVar[str] = "end"
    role: ClassVar[str | None] = END


STEPS = (RowStep, WatermarkStep, StatusStep, AdvanceStep, CheckpointStep, CrashStep, RestoreStep, EndStep)


class _Held:
    """MB-27: what each key holds in the state the job runs from: the multiset of its accumulated
    values not yet retracted, and whether it held any since that state began."""

    def __init__(self) -> None:
        self.values: dict[int, dict[int, int]] = {}
        self.ever: set[int] = set()

    def copy(self) -> _Held:
        c = _Held()
        c.values = {k: dict(v) for k, v in self.values.items()}
        c.ever = set(self.ever)
        return c


def validate_steps(schedule: Schedule) -> None:
    """MB-27: a well-formed changelog (every retraction retracts a value its key holds; a key that
    never held anything may start with retractions, except in two-phase aggregation); MB-28: no
    watermark and no end of input while the input is idle, and a restore follows a crash; SCH-2: a
    row's key and value and a watermark are longs."""
    c: MiniBatchConfig = schedule.config
    held = _Held()
    snapshots: dict[int, _Held] = {}
    crashed = idle = False
    for i, s in enumerate(schedule.steps):
        if idle and isinstance(s, (WatermarkStep, EndStep)):
            raise ScheduleError(i, "MB-28", f"{'a watermark' if s.op == 'watermark' else 'end of input'} "
                                "arrives while the input is idle", s.op)
        if isinstance(s, RowStep):
            _check_long(i, s.op, "key", s.key)  # SCH-2: BIGINT, as Flink's GROUP BY key
            _check_long(i, s.op, "value", s.value)  # SCH-2: BIGINT, as SUM's operand
            values = held.values.setdefault(s.key, {})
            if s.kind in RETRACTIONS:
                if values.get(s.value, 0) > 0:
                    values[s.value] -= 1
                elif s.key in held.ever:
                    raise ScheduleError(i, "MB-27", f"{s.kind} k{s.key} {s.value} retracts a value the key "
                                        f"does not hold (it holds {_multiset(values)})", s.op)
                elif c.two_phase and c.enabled:
                    raise ScheduleError(i, "MB-27", f"{s.kind} k{s.key} {s.value}: a retraction for a key "
                                        "without state in two-phase aggregation", s.op)
            else:
                values[s.value] = values.get(s.value, 0) + 1
                held.ever.add(s.key)
        elif isinstance(s, WatermarkStep):
            _check_long(i, s.op, "a watermark", s.timestamp)
        elif isinstance(s, StatusStep):
            idle = s.idle
        elif isinstance(s, CheckpointStep):
            snapshots[s.id] = held.copy()
        elif isinstance(s, RestoreStep):
            if not crashed:
                raise ScheduleError(i, "MB-28", "a restore must follow a crash", s.op)
            held = snapshots[s.checkpoint].copy() if s.checkpoint is not None else _Held()
            idle = False
        crashed = isinstance(s, CrashStep)


def _check_long(index: int, op: str, what: str, value: int) -> None:
    """SCH-2: a field that is a long (BIGINT) lies in [-2^63, 2^63 - 1]."""
    if not LONG_RANGE[0] <= value <= LONG_RANGE[1]:
        raise ScheduleError(index, "SCH-2", f"{what} must be a long (BIGINT), not {value}", op)


def _multiset(values: dict[int, int]) -> str:
    return "[" + ", ".join(str(v) for v, n in sorted(values.items()) for _ in range(n)) + "]"


# --------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------

EVENTS = (
    # A changelog row of the aggregation: COUNT(*), SUM(v), MIN(v), MAX(v) of `key`.
    EventKind("out", ("key", "change", "count", "sum", "min", "max"), OUTPUT),
    EventKind("watermark", ("timestamp",), MARKER),  # a watermark the aggregation forwards
    EventKind("status", ("idle",), MARKER),  # a watermark status the aggregation forwards
)

# --------------------------------------------------------------------------
# Capabilities
# --------------------------------------------------------------------------

CAPABILITIES = {
    "mini_batch.rowtime": "the row-time mini-batch assigner (MB-6, MB-7)",
    "mini_batch.two_phase": "local-global aggregation (MB-25, MB-26)",
    "mini_batch.checkpoint": "checkpoint, crash and restore steps (MB-13, MB-29)",
    "mini_batch.status": "watermark status steps (MB-8, MB-15)",
    "mini_batch.config_validation": "refusing invalid configurations (MB-2)",
    "mini_batch.processing_time": "`advance` steps: the processing-time assigner's timers on the schedule's "
                                  "clock (MB-4)",
    "mini_batch.watermarks": "upstream watermark steps and end of input, and the watermarks the aggregation "
                             "forwards at them (MB-5, MB-8, MB-12, MB-14)",
}


def required_capabilities(schedule: Schedule) -> frozenset[str]:
    c: MiniBatchConfig = schedule.config
    caps = set()
    try:
        validate_config(c)
    except ScheduleError:
        caps.add("mini_batch.config_validation")
    if c.enabled and c.assigner == "rowtime":
        caps.add("mini_batch.rowtime")
    if c.enabled and c.two_phase:
        caps.add("mini_batch.two_phase")
    ops = {s.op for s in schedule.steps}
    if ops & {"checkpoint", "crash", "restore"}:
        caps.add("mini_batch.checkpoint")
    if "status" in ops:
        caps.add("mini_batch.status")
    if "advance" in ops and c.enabled and c.assigner == "proctime":
        caps.add("mini_batch.processing_time")
    if ops & {"watermark", "end"}:  # end of input forwards the watermark MAX
        caps.add("mini_batch.watermarks")
    return frozenset(caps)


# --------------------------------------------------------------------------
# Notation of the examples (spec/mini-batch.md, "Notation used in the examples")
# --------------------------------------------------------------------------

_CONFIG_ITEM = re.compile(r"(\w+)=([^\s=]+)")
_BOOLS = {"true": True, "false": False}


def _timestamp(word: str) -> int:
    return MAX_WATERMARK if word == "MAX" else int(word)


def _key(word: str) -> int:
    if not re.fullmatch(r"k-?\d+", word):
        raise ValueError(f"expected a key like k1 or k-3, not {word!r}")
    return int(word[1:])


def parse_config(text: str) -> dict[str, Any]:
    """`enabled=true allow_latency=10 size=3 assigner=rowtime update_before=true two_phase=true`."""
    out: dict[str, Any] = {}
    for key, value in _CONFIG_ITEM.findall(text):
        if key in out:
            raise ValueError(f"{key} is given twice")
        if key in ("allow_latency", "size"):
            out[key] = int(value)
        elif key in ("enabled", "update_before", "ttl", "two_phase") and value in _BOOLS:
            out[key] = _BOOLS[value]
        elif key == "assigner":
            out[key] = value
        else:
            raise ValueError(f"unknown configuration item {key}={value}")
    return out


def parse_step(text: str) -> dict[str, Any]:
    """`row k1 +I 5`, `row k-3 -D -7`, `watermark 10`, `watermark MAX`, `status idle`, `advance 10`,
    `checkpoint 1`, `crash`, `restore 1`, `restore none`, `end`."""
    words = text.split()
    op, args = words[0], words[1:]
    n = len(args)
    if op == "row" and n == 3:
        return {"op": op, "key": _key(args[0]), "kind": args[1], "value": int(args[2])}
    if op == "watermark" and n == 1:
        return {"op": op, "timestamp": _timestamp(args[0])}
    if op == "status" and n == 1 and args[0] in ("idle", "active"):
        return {"op": op, "idle": args[0] == "idle"}
    if op == "advance" and n == 1:
        return {"op": op, "ms": int(args[0])}
    if op == "checkpoint" and n == 1:
        return {"op": op, "id": int(args[0])}
    if op in ("crash", "end") and n == 0:
        return {"op": op}
    if op == "restore" and n == 1:
        return {"op": op, "checkpoint": None if args[0] == "none" else int(args[0])}
    raise ValueError(f"not a step of the notation: {text!r}")


_OUT = re.compile(r"([+-][IUD]) (k-?\d+) count=(-?\d+) sum=(-?\d+) min=(-?\d+) max=(-?\d+)")


def parse_event(step: int, text: str) -> Any:
    """`+I k1 count=1 sum=5 min=5 max=5`, `watermark 10`, `watermark MAX`, `status idle`, `rejected`."""
    text = text.strip()
    m = _OUT.fullmatch(text)
    if m:
        return event(step, "out", key=_key(m.group(2)), change=m.group(1), count=int(m.group(3)),
                     sum=int(m.group(4)), min=int(m.group(5)), max=int(m.group(6)))
    words = text.split()
    if words[0] == "watermark" and len(words) == 2:
        return event(step, "watermark", timestamp=_timestamp(words[1]))
    if words[0] == "status" and len(words) == 2 and words[1] in ("idle", "active"):
        return event(step, "status", idle=words[1] == "idle")
    if words == ["rejected"]:
        return event(step, "rejected", reason="")
    raise ValueError(f"not a trace event of the notation: {text!r}")


def _text(name: str, value: Any) -> str:
    if name == "timestamp":
        return "MAX" if value == MAX_WATERMARK else str(value)
    if name == "idle":
        return "idle" if value else "active"
    if name == "key":
        return f"k{value}"
    return str(value)


_render = template_renderer({
    "out": "{change} {key} count={count} sum={sum} min={min} max={max}",
    "watermark": "watermark {timestamp}",
    "status": "status {idle}",
    "rejected": "rejected",
}, _text)


# --------------------------------------------------------------------------
# The counterexample timeline (conformance/draw.py): one lane per key, in and out
# --------------------------------------------------------------------------


def _step_lanes(schedule: Schedule) -> list[str]:
    """A row on its key's lane, watermarks and statuses on the input's, time advances on the
    clock's, the rest on the job's."""
    out = []
    for s in schedule.steps:
        if isinstance(s, RowStep):
            out.append(numbered("key", s.key))
        elif isinstance(s, (WatermarkStep, StatusStep)):
            out.append("input")
        else:
            out.append("clock" if isinstance(s, AdvanceStep) else "job")
    return out


def _event_lane(schedule: Schedule, e: Event) -> str:
    return numbered("key", e.key) if e.event == "out" else "output"


TIMELINE = Timeline(
    step_lanes=_step_lanes,
    event_lane=_event_lane,
    step_marks={"watermark": Mark.WATERMARK, "status": Mark.OTHER},
    event_marks={"out": Mark.OUTPUT, "watermark": Mark.WATERMARK},
    times=clock({"advance": "ms"}),
)


# --------------------------------------------------------------------------
# The descriptor
# --------------------------------------------------------------------------

AREA = Area(
    name="mini_batch",
    title="mini-batch aggregation",
    rules_file="mini-batch.md",
    rule_prefix="MB",
    config_type=MiniBatchConfig,
    steps=STEPS,
    events=EVENTS,
    capabilities=CAPABILITIES,
    notation=Notation(parse_config, parse_step, parse_event, _render),
    validate_config=validate_config,
    validate_steps=validate_steps,
    required_capabilities=required_capabilities,
    rejecting_rules=("MB-2",),
    free_key_order=KeyOrder("MB-9", ("out",), "key"),
    timeline=TIMELINE,
)
event = AREA.event
