"""The strategies of the async I/O area (the checker's hooks and the coverage states are in
conformance/areas/async_io.py).

Strategies draw valid schedules step by step while the reference model runs them, so every step
is valid by construction: only admitted records complete (SCH-4), restores name taken checkpoints
(SCH-5) and come only after a failure (SCH-7), nothing is input after end of input (SCH-6).
`Features` says which parts of the vocabulary a property exercises; `Features.restrict` drops what
an adapter cannot run.  Values are small, and every choice shrinks towards a short, plain schedule
(fewer steps, records first, empty results, small numbers).  Where a state in which engines lose
or repeat data is one step away, intents are redirected to reach it (`_Drawing.redirect`, the
`snapshot` intent); async_io's `COVERAGE` and `coverage` name those states and their floors
(conformance/coverage.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from flink_semantics.conformance.strategies import Malformed, batches
from flink_semantics.reference.async_io import BACKOFF, AsyncIoModel
from flink_semantics.spec.adapter import FREE, unsupported
from flink_semantics.spec.area import areas
from flink_semantics.spec.areas.async_io import (
    DEFAULT_CAPACITY,
    RETRY_STRATEGIES,
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
    StatusStep,
    WatermarkStep,
    retry_enabled,
    validate_config,
)
from flink_semantics.spec.schedule import Schedule, ScheduleError, Step
from hypothesis import strategies as st

AREA = "async_io"


def record_states(model: AsyncIoModel) -> dict[int, str]:
    """The state of each record admitted in the model's current incarnation (IN_FLIGHT, BACKOFF,
    STALLED, DONE): read from the model, which has no public view of it."""
    return {r: record.state for r, record in model._admitted.items()} if model.alive else {}


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------

# Drawing costs hypothesis a fixed price per choice and per strategy object it has to validate, and a
# property draws thousands of schedules: so every strategy below is built once, at import, and the
# parts of a step or of a configuration are packed into one integer, drawn as one choice.  Decoding
# maps 0 to the plainest value of every part, so shrinking the integer makes the schedule plainer.

SMALL = st.integers(0, 9)
PICK = st.integers(0, 63)


def _bits(n: int, first: int, count: int) -> int:
    return (n >> first) & ((1 << count) - 1)


def result(n: int) -> tuple[int, ...]:
    """A result list from 15 bits: bit 0 whether it has values (half of them do; empty results,
    AIO-19, are the simplest), bits 1-2 its length - 1 (1..3), bits 3-14 its values (0..9)."""
    if not n & 1:
        return ()
    return tuple(_bits(n, 3 + 4 * i, 4) % 10 for i in range(_bits(n, 1, 2) % 3 + 1))


RESULT_BITS = st.integers(0, 2**15 - 1)
# An intent for one step: (which valid op, which record / how much, a value, a result).
Intent = tuple[int, int, int, "tuple[int, ...]"]


def intent(n: int) -> Intent:
    """An intent from 31 bits: bits 0-5 the op, 6-11 the pick, 12-15 the value, 16-30 a result."""
    return _bits(n, 0, 6), _bits(n, 6, 6), _bits(n, 12, 4) % 10, result(n >> 16)


# About ten intents on average (a flat list averages five); decoded by `intent` (a `.map` would add
# a level of hypothesis' bookkeeping to every one of them).
INTENTS = st.lists(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=10), min_size=1, max_size=4)


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
        ok = lambda cap: unsupported(capabilities, f"async_io.{cap}") is None  # noqa: E731
        f = replace(self, modes=tuple(m for m in self.modes if ok(m)))
        f = replace(f, watermarks=f.watermarks and ok("watermarks"), statuses=f.statuses and ok("status"),
                    timeouts=f.timeouts and ok("timeout"),
                    checkpoints=f.checkpoints and ok("checkpoint"))
        f = replace(f, retries=f.retries and f.timeouts and ok("retry"))
        if completion_order == FREE:
            f = replace(f, timeouts=False, retries=False, checkpoints=False, errors=False, nulls=False,
                        repeats=False, drain=True)
        return f


# --------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------


CONFIG_BITS = st.integers(0, 2**50 - 1)
# A retry strategy is drawn on its own: hypothesis favours small integers, so the high bits of
# CONFIG_BITS are seldom set, and a strategy packed there was almost never enabled.
RETRY_BITS = st.integers(0, 2**22 - 1)
MULTIPLIERS = (1.0, 1.5, 2.0, 3.0)


def retry_config(n: int) -> RetryConfig:
    """A retry strategy from 20 bits, the predicates first (0: no predicate, so no retry, AIO-4;
    then one retry after a fixed delay of 3 ms: small numbers, which hypothesis favours, give
    backoffs that last past a step).  Every field takes each of its values."""
    return RetryConfig(
        if_empty=bool(_bits(n, 0, 1)), if_error=bool(_bits(n, 1, 1)),
        strategy=RETRY_STRATEGIES[_bits(n, 2, 1)], max_attempts=(1 + _bits(n, 3, 2)) % 4,
        delay=(3 + _bits(n, 5, 4)) % 9, initial_delay=(3 + _bits(n, 9, 4)) % 9,
        max_delay=_bits(n, 13, 5) % 17, multiplier=MULTIPLIERS[_bits(n, 18, 2)])


def config_of(n: int, f: Features, retry: int = 0) -> AsyncIoConfig:
    """A valid configuration using the features, from 50 bits: 0-1 the mode, 2-5 the capacity,
    6-10 the timeout (1..31 ms), 11-12 the handler, 13-27 its result; with retries, from `retry`
    (RETRY_BITS): bits 0-1 a retry strategy (unless both are 0) or none, 2-21 the strategy."""
    timeout = 1 + _bits(n, 6, 5) if f.timeouts else 0
    handlers = (*f.on_timeout, f.on_timeout[-1])  # the last (`ignore`: AIO-30) as often as the others
    return AsyncIoConfig(
        mode=f.modes[_bits(n, 0, 2) % len(f.modes)],
        capacity=1 + _bits(n, 2, 4) % f.max_capacity,
        timeout=timeout,
        on_timeout=handlers[_bits(n, 11, 2) % len(handlers)] if f.timeouts else "fail",
        timeout_result=result(_bits(n, 13, 15)) if f.timeouts else (),
        retry=retry_config(retry >> 2) if f.retries and retry & 3 else None,
    )


def any_config(n: int, f: Features) -> AsyncIoConfig:
    """A configuration that may be invalid (AIO-1: capacity <= 0; AIO-3: a retry strategy without a
    timeout), from 50 bits.  Valid ones use a timeout or a retry strategy only when the features allow."""
    timeout = 10 * _bits(n, 6, 1) if f.timeouts else 0
    retry = retry_config(n >> 29) if _bits(n, 28, 1) else None
    if retry is not None and timeout > 0 and not f.retries:
        retry = None
    return AsyncIoConfig(mode=f.modes[_bits(n, 0, 2) % len(f.modes)], capacity=_bits(n, 2, 3) % 6 - 2,
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
        self.stored: dict[int, int] = {}  # checkpoint id -> how many elements its snapshot stores
        self.timed_out: list[int] = []  # the records whose timeout fired in the last step
        self.capacity = config.capacity  # the current incarnation's

    def apply(self, step: Step) -> None:
        events = self.model.apply(len(self.steps), step)
        self.stored.update((e.id, len(e.snapshot)) for e in events if e.event == "checkpoint")
        self.timed_out = [e.record for e in events if e.event == "timeout"]
        self.steps.append(step)
        if isinstance(step, RestoreStep):
            self.capacity = self.config.capacity if step.capacity is None else step.capacity
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
            if not self.ended and not m.waiting_inputs() and self.capacity - m.queue_size() >= 2:
                ops.append("snapshot")
        return ops

    def late(self) -> list[int]:
        """The records whose timeout fired in the last step and that still wait for their call
        (the handler ignored it, AIO-30)."""
        outstanding = self.model.outstanding()
        return [r for r in self.timed_out if r in outstanding]

    def redirect(self, op: str, intent: Intent) -> str:
        """The op an intent makes: its own, except where a rare state is one step away and the
        intent would most likely pass it by (conformance/coverage.py): after a failure every intent
        restores; after a timeout the handler ignored, half the intents complete that record (at
        or after its deadline, AIO-30), a quarter of them with an error (AIO-23) when errors are
        drawn; while a record waits for a retry, a third end the input (AIO-39) and a fifth take a
        checkpoint (AIO-41); with timeouts, while input waits at a full queue, a quarter of the intents for
        more input advance the clock instead (AIO-59: a timeout runs from admission)."""
        m, f = self.model, self.f
        if f.checkpoints and not m.alive:
            return "restore"
        if intent[1] % 2 and self.late():
            return "error" if f.errors and intent[1] % 4 == 3 else "complete"
        if intent[1] % 5 == 2 and f.checkpoints and not self.ended and BACKOFF in record_states(m).values():
            return "checkpoint"  # a snapshot storing a record that waits for a retry (AIO-41, AIO-44)
        if intent[1] % 3 == 1 and f.retries and f.end and not f.drain and not self.ended \
                and BACKOFF in record_states(m).values():
            return "end"
        if intent[1] % 4 == 3 and f.timeouts and m.waiting_inputs() and op in ("record", "watermark"):
            return "advance"  # time passes while input waits at a full queue (AIO-59)
        return op

    def snapshot(self, intent: Intent) -> None:
        """Two to four records (in unordered mode a watermark after the first, when there is room);
        a completion of the latest outstanding record, and of some others but the oldest; a
        checkpoint; and unless bit 5 of the pick is set, a crash and a restore: a snapshot storing
        completed records behind an incomplete one (AIO-44, AIO-45, AIO-55), restored from (AIO-46,
        AIO-47, AIO-57)."""
        pick, value, result = intent[1:]
        last = self.f.max_steps - 1  # room for the checkpoint
        room = self.capacity - self.model.queue_size()
        mark = self.config.mode == "unordered" and self.f.watermarks and room >= 3
        for j in range(min(2 + pick % 3, room - mark)):
            if len(self.steps) < last - 1 - mark:
                self.apply(RecordStep((value + j) % 10, None))
            if j == 0 and mark:  # AIO-13: what completes behind it waits for the first record
                self.watermark += 1
                self.apply(WatermarkStep(self.watermark))
        for j, record in enumerate(self.model.outstanding()[:0:-1]):
            if len(self.steps) < last and not (j and (pick >> (1 + j)) & 1):
                self.apply(CompleteStep(record, result or (value,)))  # not empty: no retry (AIO-33)
        self.apply(CheckpointStep(next(self.ids)))
        if not (pick >> 5) & 1 and len(self.steps) < self.f.max_steps - 1:
            self.apply(CrashStep())
            self.apply(self.step("restore", intent))

    def step(self, op: str, intent: Intent) -> Step:
        """The step for `op`, its fields taken from the intent (all zeros: the plainest step)."""
        pick, value, result = intent[1:]
        m = self.model
        if op == "record":
            return RecordStep(value, None if pick % 3 == 0 else pick % 21)
        if op in ("complete", "repeat"):
            # Latest admitted first: out-of-order completions are the interesting ones; half the time
            # one whose timeout the handler has just ignored (AIO-30: at or after its deadline).
            done = sorted(set(m.admitted()) - set(m.outstanding()))
            pool = m.outstanding()[::-1] if op == "complete" else done
            late = self.late() if op == "complete" and pick % 2 else []
            record = late[0] if late else pool[pick % len(pool)]
            null = self.f.nulls and value >= 8  # AIO-20, one completion in five
            return CompleteStep(record, None if null else result)
        if op == "error":
            pool = m.outstanding()[::-1]
            return ErrorStep(self.late()[0] if pick % 2 and self.late() else pool[pick % len(pool)], "error")
        if op == "watermark":
            self.watermark += pick % 6
            return WatermarkStep(self.watermark)
        if op == "status":
            return StatusStep(pick % 2 == 0)
        if op == "advance":
            # Now and then exactly to the next timer (a deadline or a retry): outcomes and inputs
            # at a deadline (AIO-30, AIO-33, AIO-54) are where engines differ.
            due = [t - m.now for t in m.pending_timers() if t > m.now]
            return AdvanceStep(due[0] if due and pick % 4 >= 2 else pick % 31)
        if op == "checkpoint":
            return CheckpointStep(next(self.ids))
        if op == "restore":
            # From a checkpoint three times in four, the latest first; when its snapshot stores
            # two elements or more, half the time with a capacity below that (AIO-47, AIO-57).
            taken = sorted(m.taken_checkpoints, reverse=True)
            checkpoint = taken[(pick // 4) % len(taken)] if taken and pick % 4 else None
            stored = self.stored.get(checkpoint, 0) if checkpoint is not None else 0
            if stored >= 2 and pick % 8 >= 4:
                capacity: int | None = 1 + value % (stored - 1)
            elif value == 0:
                capacity = None
            else:
                capacity = 1 + value % self.f.max_capacity
            return RestoreStep(checkpoint, capacity)
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
            record = sorted(pending)[self.draw(PICK) % len(pending)]
            self.apply(CompleteStep(record, result(self.draw(RESULT_BITS))))


# How often each op is offered when it is valid (records and completions make schedules interesting;
# checkpoints often enough that their snapshots hold completed records and restores follow them).
WEIGHTS = {"record": 10, "complete": 10, "advance": 6, "watermark": 5, "error": 2, "status": 2, "repeat": 2,
           "checkpoint": 3, "snapshot": 8, "crash": 2}


def _op_table(f: Features, timers: bool) -> list[str]:
    """Every op the features allow, each repeated by its weight; `record` first (the plainest)."""
    ops = ["record", "complete", "watermark", "status", "end", "advance", "error", "repeat", "checkpoint",
           "snapshot", "crash", "restore"]
    allowed = {"watermark": f.watermarks, "status": f.statuses, "end": f.end and not f.drain,
               "advance": timers, "error": f.errors, "repeat": f.repeats, "checkpoint": f.checkpoints,
               "snapshot": f.checkpoints, "crash": f.checkpoints, "restore": f.checkpoints}
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
    for n in (n for chunk in draw(INTENTS) for n in chunk):
        if len(d.steps) >= f.max_steps:
            break
        wanted = intent(n)
        op = d.redirect(table[wanted[0] % len(table)], wanted)
        if op == "snapshot" and op in d.options():
            d.snapshot(wanted)
        elif op in d.options():
            d.apply(d.step(op, wanted))
    if f.drain:
        d.drain()
    return d


@st.composite
def schedules(draw: Any, f: Features, config: AsyncIoConfig | None = None) -> Schedule:
    """A valid async I/O schedule using the features."""
    if config is None:
        config = config_of(draw(CONFIG_BITS), f, draw(RETRY_BITS) if f.retries else 0)
    return Schedule(AREA, config, tuple(_draw_steps(draw, f, config).steps))


@st.composite
def default_capacity_schedules(draw: Any, modes: tuple[str, ...]) -> Schedule:
    """AIO-5: about DEFAULT_CAPACITY records with the default capacity, then some completions."""
    config = AsyncIoConfig(mode=modes[draw(PICK) % len(modes)])
    d = _Drawing(draw, Features(modes=modes, repeats=False), config)
    for _ in range(DEFAULT_CAPACITY - 2 + draw(st.integers(0, 4))):
        d.apply(RecordStep(draw(SMALL), None))
    for n in draw(st.lists(st.integers(0, 2**31 - 1), max_size=3)):
        d.apply(d.step("complete", intent(n)))
    return Schedule(AREA, config, tuple(d.steps))


@st.composite
def config_schedules(draw: Any, f: Features) -> Schedule:
    """A schedule whose configuration may be invalid; valid ones get a few ordinary steps."""
    config = any_config(draw(CONFIG_BITS), f)
    try:
        validate_config(config)
    except ScheduleError:  # AIO-1, AIO-3: the operator must refuse it
        steps = tuple(RecordStep(v, None) for v in draw(st.lists(SMALL, max_size=3)))
        return Schedule(AREA, config, steps)
    return draw(schedules(replace(f, max_steps=4), config))


def feature_batches(f: Features, max_size: int = 12) -> st.SearchStrategy[list[Schedule]]:
    return batches(schedules(f), max_size)



# --------------------------------------------------------------------------
# Malformed schedules (SCH-1..SCH-7)
# --------------------------------------------------------------------------


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
    if not d.model.alive:  # after a crash the next step must be a restore (SCH-7), even after end
        d.apply(RestoreStep(None, None))
    if not d.ended:
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


def _foreign_step() -> dict[str, Any]:
    """A step of another area if there is one (its first step type with its JSON fields), else an
    op that no area has."""
    for name, area in sorted(areas().items()):
        for cls in area.steps:
            if name != AREA and cls.op not in areas()[AREA].step_types:
                return {"op": cls.op}
    return {"op": "no_such_op"}


def _inserted(steps: list[dict[str, Any]], draw: Any) -> Malformed | None:
    """A step that no model state makes valid (SCH-1, SCH-2, SCH-3), inserted at a drawn position."""
    p = draw(st.integers(0, len(steps)))
    if p and steps[p - 1]["op"] == "crash":
        return None  # SCH-7 would be checked first
    records = sum(s["op"] == "record" for s in steps[:p])
    step, rule, how = draw(st.sampled_from([
        (_foreign_step(), "SCH-1", "a step of no kind of this area"),
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
    config = config_of(draw(CONFIG_BITS), f)
    d = _draw_steps(draw, f, config)
    base = Schedule(AREA, config, tuple(d.steps)).to_dict()
    kind = draw(st.sampled_from(("inserted", "appended", "area", "config")))
    if kind == "area":
        return Malformed({**base, "area": "no_such_area"}, None, "SCH-1", "an unknown area")
    if kind == "config":
        return Malformed({**base, "config": {**base["config"], "colour": 1}}, None, "SCH-2",
                         "an unknown config field")
    if kind == "inserted":
        case = _inserted(base["steps"], draw)
        if case is not None:
            return replace(case, data={**base, **case.data})
    step, rule, how = draw(st.sampled_from(APPENDED))(d, draw)
    n = len(d.steps)
    steps = Schedule(AREA, config, tuple(d.steps)).to_dict()["steps"] + [step]
    return Malformed({**base, "steps": steps}, n, rule, f"{how}, at step {n}")
