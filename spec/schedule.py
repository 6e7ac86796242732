"""The schedule vocabulary: schedules and traces as data (see spec/schedules.md).

A *schedule* fixes everything an engine would otherwise decide by timing: the
inputs, the order in which async calls complete, processing-time advances,
checkpoints, crashes and restores, and end of input.  A *trace* records what an
implementation did when it ran a schedule: what it emitted and after which
step, plus its externally visible side effects (which inputs it invoked, with
which attempt number, when it called the timeout handler, what it stored in a
checkpoint, when the task failed).

Both have a JSON form that round-trips exactly.  `parse_schedule` validates
statically (shape, references, configuration) and raises `ScheduleError`
naming the step index and the rule.  Validity that depends on the semantics
(for example "this record has been admitted") is checked by the reference
model while it runs, which raises the same `ScheduleError`.

This module is standard library only: `reference/`, `adapters/` and
`conformance/` all import it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

AREAS = ("async_io",)


class ScheduleError(ValueError):
    """A malformed schedule. `step` is the step index (None for the configuration)."""

    def __init__(self, step: int | None, rule: str, message: str, op: str | None = None):
        self.step = step
        self.rule = rule
        self.op = op
        self.message = message
        where = "configuration" if step is None else f"step {step}" + (f" ({op})" if op else "")
        super().__init__(f"{where}: {rule}: {message}")


# --------------------------------------------------------------------------
# Configuration of the async I/O area
# --------------------------------------------------------------------------

MODES = ("ordered", "unordered")
TIMEOUT_BEHAVIOURS = ("fail", "complete", "ignore")
RETRY_STRATEGIES = ("fixed_delay", "exponential_backoff")
DEFAULT_CAPACITY = 100  # AIO-5


@dataclass(frozen=True)
class RetryConfig:
    """A retry strategy (FLIP-232).  `max_attempts` counts retries (AIO-34)."""

    strategy: str = "fixed_delay"
    max_attempts: int = 1
    delay: int = 0  # fixed_delay: backoff in ms
    initial_delay: int = 0  # exponential_backoff
    max_delay: int = 0  # exponential_backoff
    multiplier: float = 2.0  # exponential_backoff
    if_empty: bool = False  # result predicate: retry when the result is empty
    if_error: bool = False  # exception predicate: retry on any error

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class AsyncIoConfig:
    mode: str = "ordered"
    capacity: int = DEFAULT_CAPACITY
    timeout: int = 0  # ms of processing time from admission; 0 means no timeout (AIO-2)
    on_timeout: str = "fail"  # the timeout handler: fail | complete | ignore (AIO-27..30)
    timeout_result: tuple[int, ...] = ()  # the result used by on_timeout == "complete"
    retry: RetryConfig | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "capacity": self.capacity,
            "timeout": self.timeout,
            "on_timeout": self.on_timeout,
            "timeout_result": list(self.timeout_result),
            "retry": None if self.retry is None else self.retry.to_dict(),
        }


# --------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordStep:
    """An input record arrives.  Records are numbered 0, 1, 2... in schedule order."""

    op: ClassVar[str] = "record"
    value: int
    timestamp: int | None = None


@dataclass(frozen=True)
class WatermarkStep:
    op: ClassVar[str] = "watermark"
    timestamp: int


@dataclass(frozen=True)
class StatusStep:
    """A watermark status (idle / active) arrives on the input."""

    op: ClassVar[str] = "status"
    idle: bool


@dataclass(frozen=True)
class CompleteStep:
    """The outstanding call of `record` completes with `result` (None: a null result, AIO-20)."""

    op: ClassVar[str] = "complete"
    record: int
    result: tuple[int, ...] | None


@dataclass(frozen=True)
class ErrorStep:
    """The outstanding call of `record` completes exceptionally."""

    op: ClassVar[str] = "error"
    record: int
    message: str = "error"


@dataclass(frozen=True)
class AdvanceStep:
    """Processing time advances by `ms`; due timers fire in (deadline, registration) order."""

    op: ClassVar[str] = "advance"
    ms: int


@dataclass(frozen=True)
class CheckpointStep:
    """A checkpoint barrier with a unique id arrives on the input."""

    op: ClassVar[str] = "checkpoint"
    id: int


@dataclass(frozen=True)
class CrashStep:
    """The task fails from outside (for example its machine is lost)."""

    op: ClassVar[str] = "crash"


@dataclass(frozen=True)
class RestoreStep:
    """A new task restores from checkpoint `checkpoint` (None: from no checkpoint)."""

    op: ClassVar[str] = "restore"
    checkpoint: int | None
    capacity: int | None = None  # a new capacity for the restored operator


@dataclass(frozen=True)
class EndStep:
    """End of input arrives."""

    op: ClassVar[str] = "end"


Step = (
    RecordStep | WatermarkStep | StatusStep | CompleteStep | ErrorStep | AdvanceStep
    | CheckpointStep | CrashStep | RestoreStep | EndStep
)
STEP_TYPES: dict[str, type] = {
    t.op: t
    for t in (
        RecordStep, WatermarkStep, StatusStep, CompleteStep, ErrorStep, AdvanceStep,
        CheckpointStep, CrashStep, RestoreStep, EndStep,
    )
}
AREA_OPS: dict[str, frozenset[str]] = {"async_io": frozenset(STEP_TYPES)}
# Steps that travel on the input channel, in order, behind a blocked record (spec/schedules.md).
INPUT_OPS = frozenset({"record", "watermark", "status", "checkpoint", "end"})


def step_to_dict(step: Step) -> dict[str, Any]:
    d: dict[str, Any] = {"op": step.op}
    for f in fields(step):
        v = getattr(step, f.name)
        d[f.name] = list(v) if isinstance(v, tuple) else v
    return d


@dataclass(frozen=True)
class Schedule:
    area: str
    config: AsyncIoConfig
    steps: tuple[Step, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "area": self.area,
            "config": self.config.to_dict(),
            "steps": [step_to_dict(s) for s in self.steps],
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @property
    def records(self) -> list[RecordStep]:
        return [s for s in self.steps if isinstance(s, RecordStep)]


# --------------------------------------------------------------------------
# Parsing and static validation
# --------------------------------------------------------------------------

_INT = (int,)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _need(cond: bool, step: int | None, rule: str, msg: str, op: str | None = None) -> None:
    if not cond:
        raise ScheduleError(step, rule, msg, op)


def _config_from_dict(d: Any) -> AsyncIoConfig:
    _need(isinstance(d, Mapping), None, "SCH-2", "config must be an object")
    known = {"mode", "capacity", "timeout", "on_timeout", "timeout_result", "retry"}
    extra = set(d) - known
    _need(not extra, None, "SCH-2", f"unknown config field(s) {sorted(extra)}")
    retry = d.get("retry")
    retry_cfg = None
    if retry is not None:
        _need(isinstance(retry, Mapping), None, "SCH-2", "retry must be an object or null")
        rknown = {f.name for f in fields(RetryConfig)}
        rextra = set(retry) - rknown
        _need(not rextra, None, "SCH-2", f"unknown retry field(s) {sorted(rextra)}")
        retry_cfg = RetryConfig(**retry)
    tr = d.get("timeout_result", [])
    _need(isinstance(tr, list) and all(_is_int(v) for v in tr), None, "SCH-2",
          "timeout_result must be a list of integers")
    return AsyncIoConfig(
        mode=d.get("mode", "ordered"),
        capacity=d.get("capacity", DEFAULT_CAPACITY),
        timeout=d.get("timeout", 0),
        on_timeout=d.get("on_timeout", "fail"),
        timeout_result=tuple(tr),
        retry=retry_cfg,
    )


def validate_config(config: AsyncIoConfig) -> None:
    """Raise ScheduleError (step None) for a configuration the operator must refuse."""
    c = config
    _need(c.mode in MODES, None, "SCH-2", f"mode must be one of {MODES}, not {c.mode!r}")
    _need(_is_int(c.capacity), None, "SCH-2", "capacity must be an integer")
    _need(c.capacity > 0, None, "AIO-1", f"capacity must be positive, not {c.capacity}")
    _need(_is_int(c.timeout) and c.timeout >= 0, None, "SCH-2",
          f"timeout must be a non-negative integer (ms), not {c.timeout!r}")
    _need(c.on_timeout in TIMEOUT_BEHAVIOURS, None, "SCH-2",
          f"on_timeout must be one of {TIMEOUT_BEHAVIOURS}, not {c.on_timeout!r}")
    r = c.retry
    if r is not None:
        _need(r.strategy in RETRY_STRATEGIES, None, "SCH-2",
              f"retry strategy must be one of {RETRY_STRATEGIES}, not {r.strategy!r}")
        for name in ("max_attempts", "delay", "initial_delay", "max_delay"):
            v = getattr(r, name)
            _need(_is_int(v) and v >= 0, None, "SCH-2", f"retry {name} must be a non-negative integer")
        _need(isinstance(r.multiplier, (int, float)) and not isinstance(r.multiplier, bool)
              and r.multiplier >= 1.0, None, "SCH-2", "retry multiplier must be a number >= 1")
        _need(isinstance(r.if_empty, bool) and isinstance(r.if_error, bool), None, "SCH-2",
              "retry if_empty and if_error must be booleans")
        _need(c.timeout > 0, None, "AIO-3", "a retry strategy needs a timeout > 0")


# Configuration rules the operator enforces itself: a schedule breaking one is not malformed; the
# operator refuses it and the trace is a single `rejected` event (spec/schedules.md).
REJECTING_RULES = ("AIO-1", "AIO-3")


def retry_enabled(config: AsyncIoConfig) -> bool:
    """AIO-4: retry is on only with a strategy and at least one predicate."""
    r = config.retry
    return r is not None and (r.if_empty or r.if_error)


def _step_from_dict(i: int, d: Any, area: str) -> Step:
    _need(isinstance(d, Mapping), i, "SCH-2", "a step must be an object")
    op = d.get("op")
    _need(isinstance(op, str), i, "SCH-2", "a step needs an 'op' string")
    _need(op in STEP_TYPES, i, "SCH-1", f"unknown op {op!r}", op)
    _need(op in AREA_OPS[area], i, "SCH-1", f"op {op!r} does not belong to area {area!r}", op)
    cls = STEP_TYPES[op]
    names = {f.name for f in fields(cls)}
    args = {k: v for k, v in d.items() if k != "op"}
    extra = set(args) - names
    _need(not extra, i, "SCH-2", f"unknown field(s) {sorted(extra)}", op)
    try:
        if op == "complete":
            res = args.get("result", [])
            _need(res is None or (isinstance(res, list) and all(_is_int(v) for v in res)), i, "SCH-2",
                  "result must be a list of integers or null", op)
            args["result"] = None if res is None else tuple(res)
        step = cls(**args)
    except TypeError as e:
        raise ScheduleError(i, "SCH-2", f"bad fields: {e}", op) from None
    return step


def _check_step_types(i: int, s: Step) -> None:
    op = s.op
    def intf(name: str, optional: bool = False, minimum: int | None = None) -> None:
        v = getattr(s, name)
        if optional and v is None:
            return
        _need(_is_int(v), i, "SCH-2", f"{name} must be an integer", op)
        if minimum is not None:
            _need(v >= minimum, i, "SCH-2", f"{name} must be >= {minimum}", op)
    if isinstance(s, RecordStep):
        intf("value"); intf("timestamp", optional=True)
    elif isinstance(s, WatermarkStep):
        intf("timestamp")
    elif isinstance(s, StatusStep):
        _need(isinstance(s.idle, bool), i, "SCH-2", "idle must be a boolean", op)
    elif isinstance(s, (CompleteStep, ErrorStep)):
        intf("record", minimum=0)
        if isinstance(s, ErrorStep):
            _need(isinstance(s.message, str), i, "SCH-2", "message must be a string", op)
    elif isinstance(s, AdvanceStep):
        intf("ms", minimum=0)
    elif isinstance(s, CheckpointStep):
        intf("id", minimum=0)
    elif isinstance(s, RestoreStep):
        intf("checkpoint", optional=True, minimum=0)
        intf("capacity", optional=True)
        if s.capacity is not None:
            _need(s.capacity > 0, i, "AIO-1", f"capacity must be positive, not {s.capacity}", op)


def validate_schedule(schedule: Schedule) -> Schedule:
    """Static validation (spec/schedules.md, SCH rules).  Returns the schedule."""
    _need(schedule.area in AREAS, None, "SCH-1", f"unknown area {schedule.area!r}; known: {AREAS}")
    validate_config(schedule.config)
    n_records = 0
    checkpoints: set[int] = set()
    ended = False
    after_crash = False
    for i, s in enumerate(schedule.steps):
        _need(type(s) in STEP_TYPES.values(), i, "SCH-1", f"not a step: {s!r}")
        _need(s.op in AREA_OPS[schedule.area], i, "SCH-1",
              f"op {s.op!r} does not belong to area {schedule.area!r}", s.op)
        _check_step_types(i, s)
        if after_crash:
            _need(isinstance(s, RestoreStep), i, "SCH-7", "after a crash the next step must be restore", s.op)
        if isinstance(s, RecordStep):
            n_records += 1
        if isinstance(s, (CompleteStep, ErrorStep)):
            _need(s.record < n_records, i, "SCH-3",
                  f"record {s.record} is unknown: only {n_records} record(s) arrived so far", s.op)
        if isinstance(s, CheckpointStep):
            _need(s.id not in checkpoints, i, "SCH-5", f"checkpoint id {s.id} is used twice", s.op)
            checkpoints.add(s.id)
        if isinstance(s, RestoreStep) and s.checkpoint is not None:
            _need(s.checkpoint in checkpoints, i, "SCH-5",
                  f"checkpoint {s.checkpoint} was never taken before this restore", s.op)
        if s.op in INPUT_OPS:
            _need(not ended, i, "SCH-6", f"{s.op} after end of input (before a restore)", s.op)
        if isinstance(s, EndStep):
            ended = True
        after_crash = isinstance(s, CrashStep)
        if isinstance(s, RestoreStep):
            ended = False
    return schedule


def schedule_from_dict(d: Any, validate: bool = True) -> Schedule:
    _need(isinstance(d, Mapping), None, "SCH-2", "a schedule must be a JSON object")
    extra = set(d) - {"area", "config", "steps"}
    _need(not extra, None, "SCH-2", f"unknown schedule field(s) {sorted(extra)}")
    area = d.get("area")
    _need(area in AREAS, None, "SCH-1", f"unknown area {area!r}; known: {AREAS}")
    config = _config_from_dict(d.get("config", {}))
    steps_in = d.get("steps", [])
    _need(isinstance(steps_in, list), None, "SCH-2", "steps must be a list")
    steps = tuple(_step_from_dict(i, s, area) for i, s in enumerate(steps_in))
    sched = Schedule(area=area, config=config, steps=steps)
    return validate_schedule(sched) if validate else sched


def parse_schedule(text: str, validate: bool = True) -> Schedule:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScheduleError(None, "SCH-2", f"not JSON: {e}") from None
    return schedule_from_dict(d, validate=validate)


# --------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------

# Event kinds and their fields (besides "step" and "event"), in JSON order.
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "invoke": ("record", "attempt"),  # the async function was called (side effect)
    "timeout": ("record",),  # the timeout handler was called (side effect)
    "emit": ("record", "value", "timestamp"),  # an output record
    "watermark": ("timestamp",),  # an output watermark
    "status": ("idle",),  # an output watermark status
    "checkpoint": ("id", "snapshot"),  # a checkpoint was taken with this snapshot
    "fail": ("record", "reason"),  # the task failed (record may be None)
    "finished": (),  # end of input reached and the queue is empty
    "rejected": ("reason",),  # the configuration was refused (step -1)
}
OUTPUT_EVENTS = frozenset({"emit", "watermark", "status"})
FAIL_REASONS = ("error", "timeout", "null_result")


@dataclass(frozen=True)
class Event:
    """One trace event.  `data` holds the kind's fields (EVENT_FIELDS), in order.

    A snapshot is a tuple of ("record", id) and ("watermark", timestamp) pairs,
    in the order the checkpoint stores them.
    """

    step: int
    event: str
    data: tuple[Any, ...] = ()

    def __getattr__(self, name: str) -> Any:
        names = EVENT_FIELDS.get(object.__getattribute__(self, "event"), ())
        if name in names:
            return object.__getattribute__(self, "data")[names.index(name)]
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"step": self.step, "event": self.event}
        for name, v in zip(EVENT_FIELDS[self.event], self.data):
            if name == "snapshot":
                v = [{kind: x} for kind, x in v]
            d[name] = v
        return d

    def __str__(self) -> str:
        args = " ".join(f"{k}={v}" for k, v in list(self.to_dict().items())[2:])
        return f"@{self.step} {self.event} {args}".rstrip()


def event(step: int, kind: str, **kw: Any) -> Event:
    """Build an event: event(3, "emit", record=0, value=7, timestamp=None)."""
    names = EVENT_FIELDS[kind]
    missing = set(names) - set(kw)
    extra = set(kw) - set(names)
    if missing or extra:
        raise TypeError(f"event {kind!r} takes {names}; missing {sorted(missing)}, extra {sorted(extra)}")
    data = []
    for n in names:
        v = kw[n]
        if n == "snapshot":
            v = tuple((k, x) for k, x in v)
        data.append(v)
    return Event(step, kind, tuple(data))


def event_from_dict(d: Mapping[str, Any]) -> Event:
    kind = d.get("event")
    if kind not in EVENT_FIELDS:
        raise ValueError(f"unknown trace event {kind!r}")
    kw = {k: v for k, v in d.items() if k not in ("step", "event")}
    if "snapshot" in kw:
        kw["snapshot"] = [next(iter(e.items())) for e in kw["snapshot"]]
    return event(int(d["step"]), kind, **kw)


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


def trace_from_dict(d: Mapping[str, Any]) -> Trace:
    return Trace(tuple(event_from_dict(e) for e in d["events"]))


def parse_trace(text: str) -> Trace:
    return trace_from_dict(json.loads(text))


def make_trace(events: Iterable[Event]) -> Trace:
    return Trace(tuple(events))


def required_capabilities(schedule: Schedule) -> frozenset[str]:
    """The adapter capabilities (spec/adapter.py) a schedule exercises."""
    c = schedule.config
    caps = {f"async.{c.mode}"}
    if c.timeout > 0:
        caps.add("async.timeout")
    if c.retry is not None:
        caps.add("async.retry")
    ops = {s.op for s in schedule.steps}
    if ops & {"checkpoint", "crash", "restore"}:
        caps.add("async.checkpoint")
    if "status" in ops:
        caps.add("async.status")
    return frozenset(caps)


def steps_summary(steps: Sequence[Step]) -> str:
    return "; ".join(f"{i}:{s.op}" for i, s in enumerate(steps))
