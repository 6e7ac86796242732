"""Hypothesis strategies that draw valid schedules.

A schedule is drawn step by step while the reference model runs it, so every step is valid by
construction: only admitted records complete (SCH-4), restores name taken checkpoints (SCH-5) and
come only after a failure (SCH-7), nothing is input after end of input (SCH-6).  `Features` says
which parts of the vocabulary a property exercises; `Features.restrict` drops what an adapter
cannot run.  Values are small, and every choice shrinks towards a short, plain schedule (fewer
steps, records first, empty results, small numbers).

An example of a property is a *batch*, a list of schedules (`batches`), because adapters run
batches; hypothesis shrinks a failing batch down to the one schedule that fails.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from hypothesis import strategies as st

from reference.async_io import AsyncIoModel
from spec.adapter import FREE
from spec.schedule import (
    DEFAULT_CAPACITY,
    AdvanceStep,
    AsyncIoConfig,
    CheckpointStep,
    CompleteStep,
    CrashStep,
    EndStep,
    ErrorStep,
    RecordStep,
    RestoreStep,
    RetryConfig,
    Schedule,
    ScheduleError,
    StatusStep,
    Step,
    WatermarkStep,
    retry_enabled,
    validate_config,
)

SMALL = st.integers(0, 9)
# Empty results (AIO-19) are simplest, so shrinking prefers them; half of the drawn results have values.
RESULT = st.just(()) | st.lists(SMALL, min_size=1, max_size=3).map(tuple)
# An intent for one step: (which valid op, which record / how much, a value, a result or null).
Intent = tuple[int, int, int, "tuple[int, ...]"]
INTENT = st.tuples(st.integers(0, 63), st.integers(0, 63), SMALL, RESULT)


@dataclass(frozen=True)
class Features:
    """Which parts of the schedule vocabulary a strategy uses."""

    modes: tuple[str, ...] = ("ordered", "unordered")
    max_capacity: int = 5
    watermarks: bool = True
    statuses: bool = False
    timeouts: bool = False  # a timeout, the timeout handler and `advance` steps
    on_timeout: tuple[str, ...] = ("fail", "complete", "ignore")
    retries: bool = False  # a retry strategy (needs timeouts, AIO-3)
    checkpoints: bool = False  # checkpoint, crash and restore steps
    errors: bool = False  # `error` steps
    nulls: bool = False  # null results (AIO-20)
    repeats: bool = True  # completions of calls that have already finished (AIO-21)
    end: bool = True  # an `end` step may come
    drain: bool = False  # close the schedule: end of input, then complete everything outstanding
    max_steps: int = 14

    def restrict(self, capabilities: Mapping[str, str | None], completion_order: str) -> Features:
        """These features, without the ones the adapter does not support.

        FREE adapters get only schedules that `checker.free_checkable` accepts.
        """
        ok = lambda cap: cap in capabilities and capabilities[cap] is None  # noqa: E731
        f = replace(self, modes=tuple(m for m in self.modes if ok(f"async.{m}")))
        f = replace(f, statuses=f.statuses and ok("async.status"),
                    timeouts=f.timeouts and ok("async.timeout"),
                    checkpoints=f.checkpoints and ok("async.checkpoint"))
        f = replace(f, retries=f.retries and f.timeouts and ok("async.retry"))
        if completion_order == FREE:
            f = replace(f, timeouts=False, retries=False, checkpoints=False, errors=False, nulls=False,
                        repeats=False, drain=True)
        return f


# --------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------


@st.composite
def retry_configs(draw: Any) -> RetryConfig:
    return RetryConfig(
        strategy=draw(st.sampled_from(("fixed_delay", "exponential_backoff"))),
        max_attempts=draw(st.integers(0, 3)),
        delay=draw(st.integers(0, 8)),
        initial_delay=draw(st.integers(0, 8)),
        max_delay=draw(st.integers(0, 16)),
        multiplier=draw(st.sampled_from((1.0, 1.5, 2.0, 3.0))),
        if_empty=draw(st.booleans()),
        if_error=draw(st.booleans()),
    )


@st.composite
def configs(draw: Any, f: Features) -> AsyncIoConfig:
    """A valid configuration using the features."""
    timeout = draw(st.integers(1, 30)) if f.timeouts else 0
    return AsyncIoConfig(
        mode=draw(st.sampled_from(f.modes)),
        capacity=draw(st.sampled_from(range(1, f.max_capacity + 1))),
        timeout=timeout,
        on_timeout=draw(st.sampled_from(f.on_timeout)) if f.timeouts else "fail",
        timeout_result=tuple(draw(RESULT)) if f.timeouts else (),
        retry=draw(st.none() | retry_configs()) if f.retries else None,
    )


@st.composite
def any_configs(draw: Any, f: Features) -> AsyncIoConfig:
    """A configuration that may be invalid (AIO-1: capacity <= 0; AIO-3: a retry strategy without a
    timeout).  Valid ones use a timeout or a retry strategy only when the features allow."""
    timeout = draw(st.sampled_from((0, 10))) if f.timeouts else 0
    retry = draw(st.none() | retry_configs())
    if retry is not None and timeout > 0 and not f.retries:
        retry = None
    return AsyncIoConfig(mode=draw(st.sampled_from(f.modes)), capacity=draw(st.integers(-2, 3)),
                         timeout=timeout, retry=retry)


# --------------------------------------------------------------------------
# Steps, drawn while the model runs
# --------------------------------------------------------------------------


class _Drawing:
    """The state of one schedule being drawn: the model and what the steps so far used."""

    def __init__(self, draw: Any, f: Features, config: AsyncIoConfig):
        self.draw, self.f, self.config = draw, f, config
        self.model = AsyncIoModel(config)
        self.steps: list[Step] = []
        self.records = 0
        self.watermark = 0
        self.ids = itertools.count(1)
        self.timers = f.timeouts or retry_enabled(config)
        self.ended = False  # an `end` step came in this incarnation (taken or still in the channel)

    def apply(self, step: Step) -> None:
        self.model.apply(len(self.steps), step)
        self.steps.append(step)
        if isinstance(step, RecordStep):
            self.records += 1
        self.ended = isinstance(step, EndStep) or (self.ended and not isinstance(step, RestoreStep))

    # The ops that are valid now, simplest first (hypothesis shrinks towards the first).
    def options(self) -> list[str]:
        m, f = self.model, self.f
        if not m.alive:
            return ["restore"] if f.checkpoints else []
        ops: list[str] = []
        if not self.ended:
            ops.append("record")
        if m.outstanding():
            ops += ["complete"] + (["error"] if f.errors else [])
        if f.repeats and not m.finished and set(m.admitted()) - set(m.outstanding()):
            ops.append("repeat")  # a completion of a call that has finished (AIO-21, AIO-38)
        if not self.ended:
            ops += (["watermark"] if f.watermarks else []) + (["status"] if f.statuses else [])
            ops += ["end"] if f.end and not f.drain else []
        if self.timers:
            ops.append("advance")
        if f.checkpoints:
            ops += (["checkpoint"] if not self.ended else []) + ["crash"]
        return ops

    def step(self, op: str, intent: Intent) -> Step:
        """The step for `op`, its fields taken from the intent (all zeros: the plainest step)."""
        pick, value, result = intent[1:]
        m = self.model
        if op == "record":
            return RecordStep(value, None if pick % 3 == 0 else pick % 21)
        if op in ("complete", "repeat"):
            # Latest admitted first: out-of-order completions are the interesting ones.
            done = sorted(set(m.admitted()) - set(m.outstanding()))
            pool = m.outstanding()[::-1] if op == "complete" else done
            null = self.f.nulls and value >= 8  # AIO-20, one completion in five
            return CompleteStep(pool[pick % len(pool)], None if null else result)
        if op == "error":
            pool = m.outstanding()[::-1]
            return ErrorStep(pool[pick % len(pool)], "error")
        if op == "watermark":
            self.watermark += pick % 6
            return WatermarkStep(self.watermark)
        if op == "status":
            return StatusStep(pick % 2 == 0)
        if op == "advance":
            return AdvanceStep(pick % 31)
        if op == "checkpoint":
            return CheckpointStep(next(self.ids))
        if op == "restore":
            choices = [None, *sorted(m.taken_checkpoints)]
            capacity = None if value == 0 else 1 + value % self.f.max_capacity
            return RestoreStep(choices[pick % len(choices)], capacity)
        if op == "end":
            return EndStep()
        if op == "crash":
            return CrashStep()
        raise ValueError(f"unknown op {op!r}")

    def drain(self) -> None:
        """End of input, then complete the outstanding calls (in a drawn order) until finished."""
        if not self.model.alive:
            return
        if not self.ended:
            self.apply(EndStep())
        for _ in range(10 * (self.records + 1)):
            pending = self.model.outstanding()
            if not pending:
                return
            record = self.draw(st.sampled_from(sorted(pending)))
            self.apply(CompleteStep(record, tuple(self.draw(RESULT))))


# How often each op is offered when it is valid (records and completions make schedules interesting).
WEIGHTS = {"record": 10, "complete": 10, "advance": 6, "watermark": 5, "error": 2, "status": 2, "repeat": 2}


def _op_table(f: Features, timers: bool) -> list[str]:
    """Every op the features allow, each repeated by its weight; `record` first (the plainest)."""
    ops = ["record", "complete", "watermark", "status", "end", "advance", "error", "repeat", "checkpoint",
           "crash", "restore"]
    allowed = {"watermark": f.watermarks, "status": f.statuses, "end": f.end and not f.drain,
               "advance": timers, "error": f.errors, "repeat": f.repeats, "checkpoint": f.checkpoints,
               "crash": f.checkpoints, "restore": f.checkpoints}
    return [op for op in ops if allowed.get(op, True) for _ in range(WEIGHTS.get(op, 1))]


def _draw_steps(draw: Any, f: Features, config: AsyncIoConfig) -> _Drawing:
    """Interpret a list of intents, one step each, against the model.

    An intent names an op from a fixed table (an op that is not valid now makes no step) and the
    step's fields; so deleting an intent deletes a step without changing what the others mean,
    and shrinking an intent towards zeros makes its step plainer.  Lists of lists give about ten
    intents on average (a flat list averages five).
    """
    d = _Drawing(draw, f, config)
    table = _op_table(f, d.timers)
    intents = [i for chunk in draw(st.lists(st.lists(INTENT, max_size=10), max_size=4)) for i in chunk]
    for intent in intents:
        if len(d.steps) >= f.max_steps:
            break
        op = table[intent[0] % len(table)]
        if op in d.options():
            d.apply(d.step(op, intent))
    if f.drain:
        d.drain()
    return d


@st.composite
def schedules(draw: Any, f: Features, config: AsyncIoConfig | None = None) -> Schedule:
    """A valid async I/O schedule using the features."""
    if config is None:
        config = draw(configs(f))
    return Schedule("async_io", config, tuple(_draw_steps(draw, f, config).steps))


@st.composite
def default_capacity_schedules(draw: Any, modes: tuple[str, ...]) -> Schedule:
    """AIO-5: about DEFAULT_CAPACITY records with the default capacity, then some completions."""
    config = AsyncIoConfig(mode=draw(st.sampled_from(modes)))
    d = _Drawing(draw, Features(modes=modes, repeats=False), config)
    for _ in range(DEFAULT_CAPACITY - 2 + draw(st.integers(0, 4))):
        d.apply(RecordStep(draw(SMALL), None))
    for intent in draw(st.lists(INTENT, max_size=3)):
        d.apply(d.step("complete", intent))
    return Schedule("async_io", config, tuple(d.steps))


@st.composite
def config_schedules(draw: Any, f: Features) -> Schedule:
    """A schedule whose configuration may be invalid; valid ones get a few ordinary steps."""
    config = draw(any_configs(f))
    try:
        validate_config(config)
    except ScheduleError:  # AIO-1, AIO-3: the operator must refuse it
        steps = tuple(RecordStep(v, None) for v in draw(st.lists(SMALL, max_size=3)))
        return Schedule("async_io", config, steps)
    return draw(schedules(replace(f, max_steps=4), config))


T = TypeVar("T")


def batches(schedule_strategy: st.SearchStrategy[T], max_size: int = 12) -> st.SearchStrategy[list[T]]:
    """A batch of schedules for one `run_batch` call; shrinks to a single schedule.

    The size is drawn first (uniformly enough that a large limit gives large batches, unlike
    `st.lists`, whose average stays small) and shrinks towards 1.
    """
    return st.integers(1, max(1, max_size)).flatmap(
        lambda n: st.lists(schedule_strategy, min_size=n, max_size=n))


def feature_batches(f: Features, max_size: int = 12) -> st.SearchStrategy[list[Schedule]]:
    return batches(schedules(f), max_size)



# --------------------------------------------------------------------------
# Malformed schedules (SCH-1..SCH-7)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Malformed:
    """A malformed schedule as JSON data, and where and why it must be refused."""

    data: dict[str, Any]
    step: int | None  # None: the configuration or the schedule as a whole
    rule: str
    how: str  # what was done to a valid schedule


MALFORMED_FEATURES = Features(max_capacity=2, statuses=True, timeouts=True, on_timeout=("fail", "ignore"),
                              checkpoints=True, errors=True, nulls=True, max_steps=12)
_RECORD: dict[str, Any] = {"op": "record", "value": 1, "timestamp": None}


def _fresh_incarnation(d: _Drawing, capacity: int | None = None) -> None:
    """Valid steps that end the current incarnation and start an empty one (restore from nothing)."""
    if d.model.alive:
        d.apply(CrashStep())
    d.apply(RestoreStep(None, capacity))


def _blocked_record(d: _Drawing) -> int:
    """Valid steps leaving a record waiting in the input channel of a fresh capacity-1 incarnation."""
    _fresh_incarnation(d, capacity=1)
    d.apply(RecordStep(1, None))
    d.apply(RecordStep(2, None))
    return d.records - 1


# Each defect: valid steps appended to the drawn schedule (through the model), then one bad step.
# Returns (bad step, rule, description); the bad step's index is len(d.steps).
def _not_admitted(d: _Drawing, draw: Any) -> tuple[dict[str, Any], str, str]:
    if d.records and draw(st.booleans()):
        _fresh_incarnation(d)  # no record of an earlier incarnation is admitted in this one
        r = draw(st.integers(0, d.records - 1))
        return {"op": "complete", "record": r, "result": []}, "SCH-4", "a completion of a record not restored"
    return ({"op": "complete", "record": _blocked_record(d), "result": []}, "SCH-4",
            "a completion of a record still waiting in the input channel")


def _untaken_restore(d: _Drawing, draw: Any) -> tuple[dict[str, Any], str, str]:
    _blocked_record(d)
    checkpoint = next(d.ids)
    d.apply(CheckpointStep(checkpoint))  # behind the blocked record: never taken
    d.apply(CrashStep())
    return ({"op": "restore", "checkpoint": checkpoint}, "SCH-5",
            "a restore of a checkpoint whose barrier was never taken")


def _duplicate_checkpoint(d: _Drawing, draw: Any) -> tuple[dict[str, Any], str, str]:
    _fresh_incarnation(d)
    checkpoint = next(d.ids)
    d.apply(CheckpointStep(checkpoint))
    return {"op": "checkpoint", "id": checkpoint}, "SCH-5", "a checkpoint id used twice"


def _never_taken(d: _Drawing, draw: Any) -> tuple[dict[str, Any], str, str]:
    if d.model.alive:
        d.apply(CrashStep())
    return {"op": "restore", "checkpoint": 999}, "SCH-5", "a restore of a checkpoint id never used"


def _after_end(d: _Drawing, draw: Any) -> tuple[dict[str, Any], str, str]:
    if not d.ended:
        if not d.model.alive:
            d.apply(RestoreStep(None, None))
        d.apply(EndStep())
    return dict(_RECORD), "SCH-6", "a record after end of input"


def _after_crash(d: _Drawing, draw: Any) -> tuple[dict[str, Any], str, str]:
    _fresh_incarnation(d)
    d.apply(CrashStep())
    return {"op": "advance", "ms": 1}, "SCH-7", "a step other than restore after a crash"


def _after_failure(d: _Drawing, draw: Any) -> tuple[dict[str, Any], str, str]:
    _fresh_incarnation(d)
    d.apply(RecordStep(1, None))
    d.apply(CompleteStep(d.records - 1, None))  # AIO-20: a null result fails the task (no retry here)
    assert not d.model.alive, "a null result without retry must fail the task"
    return dict(_RECORD), "SCH-7", "a record after a task failure"


def _restore_alive(d: _Drawing, draw: Any) -> tuple[dict[str, Any], str, str]:
    if not d.model.alive:
        d.apply(RestoreStep(None, None))
    return {"op": "restore", "checkpoint": None}, "SCH-7", "a restore while the task is alive"


APPENDED = (_not_admitted, _untaken_restore, _duplicate_checkpoint, _never_taken, _after_end, _after_crash,
            _after_failure, _restore_alive)


def _inserted(steps: list[dict[str, Any]], draw: Any) -> Malformed | None:
    """A step that no model state makes valid (SCH-1, SCH-2, SCH-3), inserted at a drawn position."""
    p = draw(st.integers(0, len(steps)))
    if p and steps[p - 1]["op"] == "crash":
        return None  # SCH-7 would be checked first
    records = sum(s["op"] == "record" for s in steps[:p])
    step, rule, how = draw(st.sampled_from([
        ({"op": "assign_split", "split": 1}, "SCH-1", "a step of another area"),
        ({"op": "advance", "ms": -5}, "SCH-2", "a negative advance"),
        ({"op": "record", "value": "seven", "timestamp": None}, "SCH-2", "a string value"),
        ({"op": "watermark", "timestamp": 1, "colour": "red"}, "SCH-2", "an unknown field"),
        ({"op": "complete", "record": records + draw(st.integers(0, 2)), "result": []}, "SCH-3",
         "a completion of a record that has not arrived"),
    ]))
    return Malformed({"steps": steps[:p] + [step] + steps[p:]}, p, rule, f"{how}, inserted at step {p}")


@st.composite
def malformed_schedules(draw: Any) -> Malformed:
    """A valid schedule with one defect that a named SCH rule refuses at a known step."""
    f = MALFORMED_FEATURES
    config = draw(configs(f))
    d = _draw_steps(draw, f, config)
    base = Schedule("async_io", config, tuple(d.steps)).to_dict()
    kind = draw(st.sampled_from(("inserted", "appended", "area", "config")))
    if kind == "area":
        return Malformed({**base, "area": "sources"}, None, "SCH-1", "an unknown area")
    if kind == "config":
        return Malformed({**base, "config": {**base["config"], "colour": 1}}, None, "SCH-2",
                         "an unknown config field")
    if kind == "inserted":
        case = _inserted(base["steps"], draw)
        if case is not None:
            return replace(case, data={**base, **case.data})
    step, rule, how = draw(st.sampled_from(APPENDED))(d, draw)
    n = len(d.steps)
    steps = Schedule("async_io", config, tuple(d.steps)).to_dict()["steps"] + [step]
    return Malformed({**base, "steps": steps}, n, rule, f"{how}, at step {n}")
