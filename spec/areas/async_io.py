"""The async I/O area (spec/async-io.md): its configuration, steps, events, capabilities and notation.

Standard library and `spec` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flink_semantics.spec.area import (
    Area,
    Mark,
    Notation,
    Timeline,
    clock,
    int_list,
    numbered,
    template_renderer,
)
from flink_semantics.spec.schedule import (
    CHECKPOINT,
    CRASH,
    EFFECT,
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

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------

MODES = ("ordered", "unordered")
TIMEOUT_BEHAVIOURS = ("fail", "complete", "ignore")
RETRY_STRATEGIES = ("fixed_delay", "exponential_backoff")
DEFAULT_CAPACITY = 100  # AIO-5
NON_NEGATIVE = {"min": 0}


@dataclass(frozen=True)
class RetryConfig:
    """A retry strategy (FLIP-232).  `max_attempts` counts retries (AIO-34)."""

    strategy: str = field(default="fixed_delay", metadata={"choices": RETRY_STRATEGIES})
    max_attempts: int = field(default=1, metadata=NON_NEGATIVE)
    delay: int = field(default=0, metadata=NON_NEGATIVE)  # fixed_delay: backoff in ms
    initial_delay: int = field(default=0, metadata=NON_NEGATIVE)  # exponential_backoff
    max_delay: int = field(default=0, metadata=NON_NEGATIVE)  # exponential_backoff
    multiplier: float = field(default=2.0, metadata={"min": 1.0})  # exponential_backoff
    if_empty: bool = False  # result predicate: retry when the result is empty
    if_error: bool = False  # exception predicate: retry on any error


@dataclass(frozen=True)
class AsyncIoConfig:
    mode: str = field(default="ordered", metadata={"choices": MODES})
    capacity: int = DEFAULT_CAPACITY  # AIO-1: positive (the operator refuses others)
    timeout: int = field(default=0, metadata=NON_NEGATIVE)  # ms from admission; 0: no timeout (AIO-2)
    on_timeout: str = field(default="fail", metadata={"choices": TIMEOUT_BEHAVIOURS})  # AIO-27..30
    timeout_result: tuple[int, ...] = ()  # the result used by on_timeout == "complete"
    retry: RetryConfig | None = None


def validate_config(c: AsyncIoConfig) -> None:
    """The rules the operator enforces on a well-typed configuration (it refuses the schedule)."""
    if c.capacity <= 0:
        raise ScheduleError(None, "AIO-1", f"capacity must be positive, not {c.capacity}")
    if c.retry is not None and c.timeout <= 0:
        raise ScheduleError(None, "AIO-3", "a retry strategy needs a timeout > 0")


def retry_enabled(config: AsyncIoConfig) -> bool:
    """AIO-4: retry is on only with a strategy and at least one predicate."""
    r = config.retry
    return r is not None and (r.if_empty or r.if_error)


# --------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordStep(Step):
    """An input record arrives.  Records are numbered 0, 1, 2... in schedule order."""

    op: ClassVar[str] = "record"
    role: ClassVar[str | None] = INPUT
    value: int
    timestamp: int | None = None


@dataclass(frozen=True)
class WatermarkStep(Step):
    op: ClassVar[str] = "watermark"
    role: ClassVar[str | None] = INPUT
    timestamp: int


@dataclass(frozen=True)
class StatusStep(Step):
    """A watermark status (idle / active) arrives on the input."""

    op: ClassVar[str] = "status"
    role: ClassVar[str | None] = INPUT
    idle: bool


@dataclass(frozen=True)
class CompleteStep(Step):
    """The outstanding call of `record` completes with `result` (None: a null result, AIO-20)."""

    op: ClassVar[str] = "complete"
    record: int = field(metadata=NON_NEGATIVE)
    result: tuple[int, ...] | None = ()


@dataclass(frozen=True)
class ErrorStep(Step):
    """The outstanding call of `record` completes exceptionally."""

    op: ClassVar[str] = "error"
    record: int = field(metadata=NON_NEGATIVE)
    message: str = "error"


@dataclass(frozen=True)
class AdvanceStep(Step):
    """Processing time advances by `ms`; due timers fire in (deadline, registration) order."""

    op: ClassVar[str] = "advance"
    ms: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class CheckpointStep(Step):
    """A checkpoint barrier with a unique id arrives on the input."""

    op: ClassVar[str] = "checkpoint"
    role: ClassVar[str | None] = CHECKPOINT
    id: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class CrashStep(Step):
    """The task fails from outside (for example its machine is lost)."""

    op: ClassVar[str] = "crash"
    role: ClassVar[str | None] = CRASH


@dataclass(frozen=True)
class RestoreStep(Step):
    """A new task restores from checkpoint `checkpoint` (None: from no checkpoint)."""

    op: ClassVar[str] = "restore"
    role: ClassVar[str | None] = RESTORE
    checkpoint: int | None = field(metadata=NON_NEGATIVE)
    capacity: int | None = None  # a new capacity for the restored operator (AIO-57)


@dataclass(frozen=True)
class EndStep(Step):
    """End of input arrives."""

    op: ClassVar[str] = "end"
    role: ClassVar[str | None] = END


STEPS = (RecordStep, WatermarkStep, StatusStep, CompleteStep, ErrorStep, AdvanceStep, CheckpointStep,
         CrashStep, RestoreStep, EndStep)


def records(schedule: Schedule) -> list[RecordStep]:
    return [s for s in schedule.steps if isinstance(s, RecordStep)]


def validate_steps(schedule: Schedule) -> None:
    """SCH-3 (completions name records that arrived) and AIO-1 for a restore's capacity."""
    n_records = 0
    for i, s in enumerate(schedule.steps):
        if isinstance(s, RecordStep):
            n_records += 1
        elif isinstance(s, (CompleteStep, ErrorStep)) and s.record >= n_records:
            raise ScheduleError(i, "SCH-3", f"record {s.record} is unknown: only {n_records} record(s) "
                                "arrived so far", s.op)
        elif isinstance(s, RestoreStep) and s.capacity is not None and s.capacity <= 0:
            raise ScheduleError(i, "AIO-1", f"capacity must be positive, not {s.capacity}", s.op)


# --------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------

FAIL_REASONS = ("error", "timeout", "null_result")
# A snapshot: ("record", id) and ("watermark", timestamp) pairs in stored order; JSON [{"record": 0}, …].
_SNAPSHOT_JSON = (lambda v: [{k: x} for k, x in v],
                  lambda v: [next(iter(e.items())) for e in v])

EVENTS = (
    EventKind("invoke", ("record", "attempt"), EFFECT),  # the async function was called
    EventKind("timeout", ("record",), EFFECT),  # the timeout handler was called
    EventKind("emit", ("record", "value", "timestamp"), OUTPUT),  # an output record
    EventKind("watermark", ("timestamp",), OUTPUT),  # an output watermark
    EventKind("status", ("idle",), OUTPUT),  # an output watermark status
    EventKind("checkpoint", ("id", "snapshot"), MARKER, codecs={"snapshot": _SNAPSHOT_JSON}),
    EventKind("fail", ("record", "reason"), MARKER),  # the task failed (record may be None)
    EventKind("finished", (), MARKER, final=True),  # end of input reached and the queue is empty
)

# --------------------------------------------------------------------------
# Capabilities (spec/adapter.py): the optional features a schedule may exercise
# --------------------------------------------------------------------------

CAPABILITIES = {
    "async_io.ordered": "ordered output mode (AIO-12)",
    "async_io.unordered": "unordered output mode (AIO-13, AIO-14)",
    "async_io.watermarks": "watermark steps and the watermarks in the output (AIO-12, AIO-15..AIO-17)",
    "async_io.timeout": "timeouts and the timeout handler (AIO-26..AIO-32)",
    "async_io.retry": "retry strategies (AIO-33..AIO-41)",
    "async_io.checkpoint": "checkpoint, crash and restore steps (AIO-44..AIO-48)",
    "async_io.status": "watermark status steps (AIO-51)",
    "async_io.config_validation": "refusing invalid configurations (AIO-1, AIO-3)",
}


def required_capabilities(schedule: Schedule) -> frozenset[str]:
    c = schedule.config
    caps = {f"async_io.{c.mode}"}
    try:
        validate_config(c)
    except ScheduleError:
        caps.add("async_io.config_validation")
    if c.timeout > 0:
        caps.add("async_io.timeout")
    if c.retry is not None:
        caps.add("async_io.retry")
    ops = {s.op for s in schedule.steps}
    if ops & {"checkpoint", "crash", "restore"}:
        caps.add("async_io.checkpoint")
    if "watermark" in ops:
        caps.add("async_io.watermarks")
    if "status" in ops:
        caps.add("async_io.status")
    return frozenset(caps)


# --------------------------------------------------------------------------
# Notation of the examples (spec/async-io.md, "Notation used in the examples")
# --------------------------------------------------------------------------

_VALUE = r"(?:\{[^}]*\}|\[[^\]]*\]|[^\s=]+)"
_CONFIG_ITEM = re.compile(rf"(\w+)=({_VALUE})")


def _retry(text: str) -> dict[str, Any]:
    """`{fixed_delay, max_attempts 1, delay 10, if_error}` -> the JSON retry object."""
    items = [i.strip() for i in text.strip("{}").split(",") if i.strip()]
    if not items:
        raise ValueError("an empty retry strategy")
    out: dict[str, Any] = {"strategy": items[0]}
    for item in items[1:]:
        words = item.split()
        if len(words) == 1 and words[0] in ("if_empty", "if_error"):
            out[words[0]] = True
        elif len(words) == 2:
            out[words[0]] = float(words[1]) if "." in words[1] else int(words[1])
        else:
            raise ValueError(f"bad retry item {item!r}")
    return out


def parse_config(text: str) -> dict[str, Any]:
    """`mode=unordered capacity=2 retry={…}` -> the JSON configuration object."""
    out: dict[str, Any] = {}
    for key, value in _CONFIG_ITEM.findall(text):
        if key in out:
            raise ValueError(f"{key} is given twice")
        if key in ("capacity", "timeout"):
            out[key] = int(value)
        elif key == "timeout_result":
            out[key] = int_list(value)
        elif key == "retry":
            out[key] = _retry(value)
        elif key in ("mode", "on_timeout"):
            out[key] = value
        else:
            raise ValueError(f"unknown configuration key {key!r}")
    return out


def _record_ref(word: str) -> int:
    if not re.fullmatch(r"r\d+", word):
        raise ValueError(f"expected a record name like r0, not {word!r}")
    return int(word[1:])


def parse_step(text: str) -> dict[str, Any]:
    """One step without its number: `record 7 @100`, `complete r1 [20, 21]`, `restore 1 capacity=2`…"""
    words = text.split()
    op, args = words[0], words[1:]
    n = len(args)
    if op == "record" and n in (1, 2):
        if n == 2 and not args[1].startswith("@"):
            raise ValueError(f"a record's timestamp is written @T, not {args[1]!r}")
        return {"op": op, "value": int(args[0]), "timestamp": int(args[1][1:]) if n == 2 else None}
    if op == "watermark" and n == 1:
        return {"op": op, "timestamp": int(args[0])}
    if op == "status" and n == 1 and args[0] in ("idle", "active"):
        return {"op": op, "idle": args[0] == "idle"}
    if op == "complete" and n >= 2:
        result = text.split(None, 2)[2].strip()
        return {"op": op, "record": _record_ref(args[0]),
                "result": None if result == "null" else int_list(result)}
    if op == "error" and n == 1:
        return {"op": op, "record": _record_ref(args[0])}
    if op == "advance" and n == 1:
        return {"op": op, "ms": int(args[0])}
    if op == "checkpoint" and n == 1:
        return {"op": op, "id": int(args[0])}
    if op in ("crash", "end") and n == 0:
        return {"op": op}
    if op == "restore" and n in (1, 2):
        step: dict[str, Any] = {"op": op, "checkpoint": None if args[0] == "none" else int(args[0])}
        if n == 2:
            key, _, value = args[1].partition("=")
            if key != "capacity":
                raise ValueError(f"restore takes capacity=N, not {args[1]!r}")
            step["capacity"] = int(value)
        return step
    raise ValueError(f"not a step of the notation: {text!r}")


def _snapshot(text: str) -> list[tuple[str, int]]:
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"a snapshot is written [r0, w5], not {text!r}")
    out = []
    for item in (i.strip() for i in text[1:-1].split(",") if i.strip()):
        if re.fullmatch(r"r\d+", item):
            out.append(("record", int(item[1:])))
        elif re.fullmatch(r"w-?\d+", item):
            out.append(("watermark", int(item[1:])))
        else:
            raise ValueError(f"bad snapshot element {item!r}")
    return out


def parse_event(step: int, text: str) -> Event:
    """One trace event without its `@step`: `invoke r0 #1`, `emit r0 70 ts=100`, `fail r0 error`…"""
    words = text.split()
    kind, args = words[0], words[1:]
    n = len(args)
    if kind == "invoke" and n == 2 and args[1].startswith("#"):
        return event(step, kind, record=_record_ref(args[0]), attempt=int(args[1][1:]))
    if kind == "timeout" and n == 1:
        return event(step, kind, record=_record_ref(args[0]))
    if kind == "emit" and n == 3 and args[2].startswith("ts="):
        ts = args[2][3:]
        return event(step, kind, record=_record_ref(args[0]), value=int(args[1]),
                     timestamp=None if ts == "-" else int(ts))
    if kind == "watermark" and n == 1:
        return event(step, kind, timestamp=int(args[0]))
    if kind == "status" and n == 1 and args[0] in ("idle", "active"):
        return event(step, kind, idle=args[0] == "idle")
    if kind == "checkpoint" and n >= 2:
        return event(step, kind, id=int(args[0]), snapshot=_snapshot(text.split(None, 2)[2].strip()))
    if kind == "fail" and n == 2:
        return event(step, kind, record=None if args[0] == "-" else _record_ref(args[0]), reason=args[1])
    if kind == "finished" and n == 0:
        return event(step, kind)
    if kind == "rejected" and n == 0:
        return event(step, kind, reason="")  # the reason is free text; only the event kind is compared
    raise ValueError(f"not a trace event of the notation: {text!r}")


# The notation of each event kind; the fields are written by _field_text.  A rejection's reason is
# free text and is left out.
_EVENT_FORMATS = {
    "invoke": "invoke {record} #{attempt}",
    "timeout": "timeout {record}",
    "emit": "emit {record} {value} ts={timestamp}",
    "watermark": "watermark {timestamp}",
    "status": "status {idle}",
    "checkpoint": "checkpoint {id} {snapshot}",
    "fail": "fail {record} {reason}",
    "finished": "finished",
    "rejected": "rejected",
}


def _field_text(name: str, value: Any) -> str:
    if name == "record":
        return "-" if value is None else f"r{value}"
    if name == "idle":
        return "idle" if value else "active"
    if name == "snapshot":
        return "[" + ", ".join(("r" if kind == "record" else "w") + str(x) for kind, x in value) + "]"
    return "-" if value is None else str(value)  # a timestamp may be absent


# An event in the notation, with its step: the inverse of parse_event.
render_event = template_renderer(_EVENT_FORMATS, _field_text)


# --------------------------------------------------------------------------
# The counterexample timeline (conformance/draw.py): one lane per record in flight
# --------------------------------------------------------------------------


def _step_lanes(schedule: Schedule) -> list[str]:
    """A record, and the completion or error of its call, on the record's lane; watermarks and
    statuses on the input's; time advances on the clock's; the rest on the operator's."""
    out, n = [], 0
    for s in schedule.steps:
        if isinstance(s, RecordStep):
            out.append(numbered("record", n))
            n += 1
        elif isinstance(s, (CompleteStep, ErrorStep)):
            out.append(numbered("record", s.record))
        elif isinstance(s, (WatermarkStep, StatusStep)):
            out.append("input")
        else:
            out.append("clock" if isinstance(s, AdvanceStep) else "operator")
    return out


def _event_lane(schedule: Schedule, e: Event) -> str:
    if e.event in ("invoke", "timeout", "emit"):
        return numbered("record", e.record)
    return "output" if e.event in ("watermark", "status") else "operator"


TIMELINE = Timeline(
    step_lanes=_step_lanes,
    event_lane=_event_lane,
    step_marks={"watermark": Mark.WATERMARK, "complete": Mark.COMPLETION, "error": Mark.COMPLETION,
                "status": Mark.OTHER},
    event_marks={"invoke": Mark.CALL, "timeout": Mark.COMPLETION, "emit": Mark.OUTPUT,
                 "watermark": Mark.WATERMARK, "status": Mark.OTHER, "checkpoint": Mark.CHECKPOINT,
                 "fail": Mark.FAILURE},
    times=clock({"advance": "ms"}),
)


# --------------------------------------------------------------------------
# The descriptor
# --------------------------------------------------------------------------

AREA = Area(
    name="async_io",
    title="async I/O",
    rules_file="async-io.md",
    rule_prefix="AIO",
    config_type=AsyncIoConfig,
    steps=STEPS,
    events=EVENTS,
    capabilities=CAPABILITIES,
    notation=Notation(parse_config, parse_step, parse_event, render_event),
    validate_config=validate_config,
    validate_steps=validate_steps,
    required_capabilities=required_capabilities,
    rejecting_rules=("AIO-1", "AIO-3"),
    timeline=TIMELINE,
)
event = AREA.event
