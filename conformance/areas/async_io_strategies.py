"""The strategies of the async I/O area (the checker's hooks and the coverage states are in
conformance/areas/async_io.py).

Strategies draw valid schedules step by step while the reference model runs them, so every step
is valid by construction: only admitted records complete (SCH-4), restores name taken checkpoints
(SCH-5) and come only after a failure (SCH-7), nothing is input after end of input (SCH-6).
`Features` says which parts of the vocabulary a property exercises; `Features.restrict` drops what
an adapter cannot run.

A configuration is drawn field by field, only the fields it uses (`configs`: a timeout result only
for the `complete` handler, a retry strategy's delays only for its kind), then intents one at a time
(`_draw_steps`, issue 32 item 4): each its kind (`kinds`; STOP, the plainest, ends the schedule),
then only the fields that kind uses (`_fields`: a record its value and timestamp, a completion which
record and its result, a watermark its rise, an advance its duration...), each field one choice
from a strategy of its own whose first value is the plainest.  `_Drawing.take` makes an intent the
valid steps it stands for in the schedule so far, or none (a completion with nothing outstanding).
So shrinking can drop any intent (its kind and its few fields) without moving the choices of the
others, and simplify any field on its own; no drawn integer is decoded into several fields, and no
intent is drawn once the schedule is full.  After a failure the next intent is a restore (SCH-7),
its fields drawn like a crash's.

Where a state in which engines lose or repeat data is one step away, the intent that brings it
within reach takes that step too, as a field of its own (`then`): a record that waits at a full queue
is followed by time passing to the next timer (AIO-59), an advance that fires a timeout the handler
ignores by that record's outcome (AIO-30 at its deadline, AIO-23), an outcome the retry strategy
retries by end of input or a checkpoint while the record waits (AIO-39, AIO-41); a `snapshot`
intent stores completed records behind an incomplete one and restores from it (AIO-44..AIO-47,
AIO-55, AIO-57).  async_io's `COVERAGE` and `coverage` name those states and their floors
(conformance/coverage.py).

The strategies are built once and drawn many times (module constants, `functools.cache` on the
factories): hypothesis validates each new strategy object it draws from.
"""

from __future__ import annotations

import functools
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
# Fields: one strategy each, built once, the plainest value first
# --------------------------------------------------------------------------

SMALL = st.integers(0, 9)  # a value
WHICH = st.integers(0, 5)  # a record, counted back from the latest outstanding one (modulo their number)
# A result list, one choice of a few: empty (AIO-19) the plainest and half the time, else one to three
# values (a list of values drawn one by one costs a choice per value and per element).
RESULT = st.sampled_from(((), (0,), (), (1,), (), (0, 1), (), (2,), (), (3, 4), (), (5, 6, 7), (), (8,), (),
                          (9, 0, 1)))
# A record's timestamp: none a third of the time (the plainest), else 0..20.
TIMESTAMP = st.sampled_from((None,) * 10 + tuple(range(21)))
RISE = st.integers(0, 5)  # how far a watermark rises above the last (0: the same again)
BOOLEAN = st.booleans()
MS = st.integers(0, 30)  # how far an advance moves the clock
MORE = st.integers(0, 2)  # a snapshot's records beyond two
OTHERS = st.integers(0, 3)  # a snapshot's completions beyond the latest record's
# A restore's checkpoint: the latest taken (the plainest), the one before it, or none (an empty start).
SOURCE = st.sampled_from((0, 0, 1, None))
NULL = st.sampled_from((False,) * 4 + (True,))  # a null result (AIO-20), one completion in five


@dataclass(frozen=True)
class Intent:
    """One drawn intent: its kind, then only the fields that kind uses (`_fields`); the others keep
    their defaults.  `_Drawing.take` makes it the valid steps it stands for, or none."""

    kind: str
    value: int = 0  # a record's value; a snapshot's first record's
    timestamp: int | None = None  # a record's
    which: int = 0  # the record an outcome or a repeat names (counted back from the latest)
    result: tuple[int, ...] = ()  # a completion's, a repeat's
    null: bool = False  # a completion with a null result (AIO-20)
    then: str | None = None  # the step that follows at once where a rare state is in reach (`_fields`)
    rise: int = 0  # a watermark's rise
    idle: bool = False  # a status
    ms: int = 0  # an advance's duration
    to_timer: bool = False  # an advance exactly to the next timer, when one is pending
    more: int = 0  # a snapshot's records beyond two
    others: int = 0  # a snapshot's completions beyond the latest record's
    crash: bool = False  # a snapshot followed by a crash and a restore
    source: int | None = 0  # a restore's checkpoint (see SOURCE)
    capacity: int = 0  # a restore's capacity (0: the configuration's)
    below: bool = False  # a restore at a capacity below what its snapshot stores (AIO-47, AIO-57)


PLAIN_RESTORE = Intent("restore")


@functools.cache
def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@functools.cache
def _choice(options: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """One of the options, the first the plainest."""
    return st.sampled_from(options)


@functools.cache
def _fields(f: Features) -> dict[str, tuple[tuple[str, st.SearchStrategy[Any]], ...]]:
    """The fields each kind of intent draws, with their strategies, under these features."""
    restore = (("source", SOURCE), ("capacity", _ints(0, f.max_capacity)), ("below", BOOLEAN))
    # While a retried record waits: end of input (AIO-39) or a checkpoint storing it (AIO-41, AIO-44).
    waits = (None,) + ("end", "end") * (f.end and not f.drain) + ("checkpoint", "checkpoint") * f.checkpoints
    then = (("then", _choice(waits)),) if f.retries and len(waits) > 1 else ()
    # After a timeout the handler ignored, that record's outcome at once (AIO-30: at its deadline).
    lates = (None, "complete", "complete") + ("error",) * f.errors
    late = (("then", _choice(lates)),) if f.timeouts and "ignore" in f.on_timeout else ()
    # A record that waits at a full queue, then time passing to the next timer (AIO-59: a timeout runs
    # from admission).
    wait = (("then", _choice((None, "advance"))),) if f.timeouts else ()
    return {
        "record": (("value", SMALL), ("timestamp", TIMESTAMP), *wait),
        "complete": (("which", WHICH), ("result", RESULT), *((("null", NULL),) if f.nulls else ()), *then),
        "error": (("which", WHICH), *then),
        "repeat": (("which", WHICH), ("result", RESULT)),
        "watermark": (("rise", RISE),),
        "status": (("idle", BOOLEAN),),
        "end": (),
        "advance": (("ms", MS), ("to_timer", BOOLEAN), *late),
        "checkpoint": (),
        "crash": restore,
        "restore": restore,
        "snapshot": (("more", MORE), ("value", SMALL), ("others", OTHERS), ("crash", BOOLEAN), *restore),
    }


STOP = "stop"
STOP_ODDS = 20  # about the odds against STOP at each intent (about nine steps a schedule, as before)


@functools.cache
def kinds(f: Features, timers: bool) -> st.SearchStrategy[str]:
    """The kind of the next intent under these features (`timers`: the configuration has a timeout
    or a retry strategy, so `advance` is drawn), weighted by repetition: records and completions make
    schedules interesting; checkpoints come often enough that their snapshots hold completed records
    and restores follow them.  The first, the plainest, is STOP, the end of the schedule, at odds of
    about STOP_ODDS to one (schedules about as long as the lists of intents drawn before, issue 32
    item 4); shrinking an intent's kind to STOP drops it and all after it.  The weights stay small:
    hypothesis shrinks a kind by trying lower indexes one after another, and each index inside a run
    of the same kind costs a test run that changes nothing."""
    kinds = ["record"] * 10 + ["complete"] * 10
    kinds += ["watermark"] * 5 if f.watermarks else []
    kinds += ["status"] * 2 if f.statuses else []
    kinds += ["end"] if f.end and not f.drain else []
    kinds += ["advance"] * 6 if timers else []
    kinds += ["error"] * 2 if f.errors else []
    kinds += ["repeat"] * 2 if f.repeats else []
    kinds += ["checkpoint"] * 3 + ["snapshot"] * 12 + ["crash"] * 2 if f.checkpoints else []
    doubled = tuple(k for k in kinds for _ in range(2))  # each weight doubled: STOP's share set finer
    return st.sampled_from((STOP,) * round(len(doubled) / STOP_ODDS) + doubled)


# --------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------

MULTIPLIERS = (1.0, 1.5, 2.0, 3.0)
# Small delays give backoffs that last past a step: 3 ms the plainest.
DELAYS = st.sampled_from((3, 4, 5, 6, 7, 8, 0, 1, 2))
ATTEMPTS = st.sampled_from((1, 2, 3, 0))  # retries after the first attempt (AIO-34): one the plainest
MAX_DELAY = st.integers(0, 16)
TIMEOUTS = st.integers(1, 32)
SOME = st.sampled_from((False, True, True, True))  # a retry strategy three times in four


@st.composite
def _retry(draw: Any) -> RetryConfig:
    """A retry strategy, field by field, only the fields its kind uses: the predicates first (none: no
    retry, AIO-4), then one retry after a fixed delay of 3 ms the plainest."""
    if_empty, if_error = draw(BOOLEAN), draw(BOOLEAN)
    strategy, attempts = draw(_choice(RETRY_STRATEGIES)), draw(ATTEMPTS)
    if strategy == "fixed_delay":
        return RetryConfig(strategy, attempts, delay=draw(DELAYS), if_empty=if_empty, if_error=if_error)
    return RetryConfig(strategy, attempts, initial_delay=draw(DELAYS), max_delay=draw(MAX_DELAY),
                       multiplier=draw(_choice(MULTIPLIERS)), if_empty=if_empty, if_error=if_error)


RETRIES = _retry()


@st.composite
def _config(draw: Any, f: Features) -> AsyncIoConfig:
    """A valid configuration using the features (`configs`)."""
    mode, capacity = draw(_choice(f.modes)), draw(_ints(1, f.max_capacity))
    if not f.timeouts:
        return AsyncIoConfig(mode=mode, capacity=capacity, timeout=0)
    handlers = (*f.on_timeout, f.on_timeout[-1])  # the last (`ignore`: AIO-30) as often as the others
    timeout, handler = draw(TIMEOUTS), draw(_choice(handlers))
    return AsyncIoConfig(mode=mode, capacity=capacity, timeout=timeout, on_timeout=handler,
                         timeout_result=draw(RESULT) if handler == "complete" else (),  # AIO-29
                         retry=draw(RETRIES) if f.retries and draw(SOME) else None)


@functools.cache
def configs(f: Features) -> st.SearchStrategy[AsyncIoConfig]:
    """Valid configurations using the features, field by field: the mode, the capacity (1..max), a
    timeout of 1..32 ms, its handler and its result; with retries, a retry strategy three times in
    four."""
    return _config(f)


@st.composite
def _any_config(draw: Any, f: Features) -> AsyncIoConfig:
    """A configuration that may be invalid (`any_configs`)."""
    mode, capacity = draw(_choice(f.modes)), draw(_ints(-2, 3))
    timeout = draw(_choice((0, 10))) if f.timeouts else 0
    retry = draw(RETRIES) if draw(BOOLEAN) else None
    if retry is not None and timeout > 0 and not f.retries:
        retry = None
    return AsyncIoConfig(mode=mode, capacity=capacity, timeout=timeout, retry=retry)


@functools.cache
def any_configs(f: Features) -> st.SearchStrategy[AsyncIoConfig]:
    """Configurations that may be invalid (AIO-1: capacity <= 0; AIO-3: a retry strategy without a
    timeout), field by field.  Valid ones use a timeout or a retry strategy only when the features
    allow."""
    return _any_config(f)


# --------------------------------------------------------------------------
# Steps, made valid while the model runs
# --------------------------------------------------------------------------


class _Drawing:
    """The state of one schedule being drawn: the model and what the steps so far used.  `take` makes
    an intent the valid steps it stands for."""

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
        self.taken: list[Intent] = []  # the intents taken so far

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

    def room(self) -> int:
        """How many steps the schedule may still take."""
        return self.f.max_steps - len(self.steps)

    def late(self) -> list[int]:
        """The records whose timeout fired in the last step and that still wait for their call
        (the handler ignored it, AIO-30)."""
        outstanding = self.model.outstanding()
        return [r for r in self.timed_out if r in outstanding]

    def backoff(self) -> bool:
        """Whether a record waits for a retry."""
        return BACKOFF in record_states(self.model).values()

    def can(self, kind: str) -> bool:
        """Whether an intent of this kind makes a step now (after a failure, every intent restores
        first, SCH-7, when the features have restores)."""
        m = self.model
        if not m.alive:
            return self.f.checkpoints
        if kind in ("record", "watermark", "status", "end", "checkpoint"):
            return not self.ended
        if kind in ("complete", "error"):
            return bool(m.outstanding())
        if kind == "repeat":  # a completion of a call that has finished (AIO-21, AIO-38)
            return not m.finished and len(m.admitted()) > len(m.outstanding())
        if kind == "advance":
            return self.timers
        if kind == "snapshot":
            return not self.ended and not m.waiting_inputs() and self.capacity - m.queue_size() >= 2
        return kind == "crash"

    def take(self, i: Intent) -> None:
        """The valid steps of one intent in the schedule so far, none when nothing makes it valid.
        After a failure, a restore first (SCH-7: a crash's own, else from the latest checkpoint)."""
        self.taken.append(i)
        if not self.model.alive:
            if not self.f.checkpoints:
                return
            self.apply(self.restore(i if i.kind in ("restore", "crash", "snapshot") else PLAIN_RESTORE))
            if i.kind in ("restore", "crash") or not self.room():
                return
        if not self.can(i.kind):
            return
        kind = i.kind
        if kind == "record":
            self.apply(RecordStep(i.value, i.timestamp))
            if i.then == "advance" and self.model.waiting_inputs() and self.room():
                self.advance(Intent("advance", to_timer=True))
        elif kind in ("complete", "error"):
            self.outcome(i)
        elif kind == "repeat":
            done = sorted(set(self.model.admitted()) - set(self.model.outstanding()))
            self.apply(CompleteStep(done[i.which % len(done)], i.result))
        elif kind == "watermark":
            self.watermark += i.rise
            self.apply(WatermarkStep(self.watermark))
        elif kind == "status":
            self.apply(StatusStep(i.idle))
        elif kind == "end":
            self.apply(EndStep())
        elif kind == "advance":
            self.advance(i)
        elif kind == "checkpoint":
            self.apply(CheckpointStep(next(self.ids)))
        elif kind == "crash":
            self.apply(CrashStep())
            if self.room():
                self.apply(self.restore(i))
        elif kind == "snapshot":
            self.snapshot(i)

    def outcome(self, i: Intent) -> None:
        """A completion (latest admitted first: out-of-order completions are the interesting ones), a
        null result or an error of an outstanding record; then, when the retry strategy retries it and
        `then` says so, end of input (AIO-39) or a checkpoint storing the waiting record (AIO-41)."""
        pool = self.model.outstanding()[::-1]
        record = pool[i.which % len(pool)]
        if i.kind == "error":
            self.apply(ErrorStep(record, "error"))
        else:
            self.apply(CompleteStep(record, None if i.null else i.result))
        if i.then is None or not self.room() or self.ended or not self.model.alive or not self.backoff():
            return
        self.apply(EndStep() if i.then == "end" else CheckpointStep(next(self.ids)))

    def advance(self, i: Intent) -> None:
        """Time passes, now and then exactly to the next timer (a deadline or a retry: outcomes and
        inputs at a deadline, AIO-30, AIO-33, AIO-54, are where engines differ); then, when a timeout
        the handler ignored fired and `then` says so, that record completes (AIO-30: at its deadline)
        or fails (AIO-23) at once."""
        m = self.model
        due = [t - m.now for t in m.pending_timers() if t > m.now]
        self.apply(AdvanceStep(due[0] if due and i.to_timer else i.ms))
        late = self.late()
        if i.then is None or not late or not self.room():
            return
        self.apply(ErrorStep(late[0], "error") if i.then == "error" else CompleteStep(late[0], i.result))

    def restore(self, i: Intent) -> RestoreStep:
        """A restore from a taken checkpoint (the latest, the one before, SCH-5) or none; at the
        configuration's capacity or another; with `below`, when its snapshot stores two elements or
        more, at a capacity below that (AIO-47, AIO-57)."""
        taken = sorted(self.model.taken_checkpoints, reverse=True)
        checkpoint = taken[min(i.source, len(taken) - 1)] if taken and i.source is not None else None
        stored = self.stored.get(checkpoint, 0) if checkpoint is not None else 0
        if stored >= 2 and i.below:
            return RestoreStep(checkpoint, 1 + i.capacity % (stored - 1))
        return RestoreStep(checkpoint, i.capacity or None)

    def snapshot(self, i: Intent) -> None:
        """Two records and `more` (in unordered mode a watermark after the first, when there is room),
        of values from `value` on; a completion of the latest outstanding record, and of `others`
        before it but never the oldest, each emitting its record's value (not empty: no retry,
        AIO-33); a checkpoint; and with `crash`, a crash and a restore: a snapshot storing completed
        records behind an incomplete one (AIO-44, AIO-45, AIO-55), restored from (AIO-46, AIO-47,
        AIO-57)."""
        last = self.f.max_steps - 1  # room for the checkpoint
        room = self.capacity - self.model.queue_size()
        mark = self.config.mode == "unordered" and self.f.watermarks and room >= 3
        for j in range(min(2 + i.more, room - mark)):
            if len(self.steps) >= last - 1 - mark:  # room for the rest (a watermark only after a record)
                break
            self.apply(RecordStep((i.value + j) % 10, None))
            if j == 0 and mark:  # AIO-13: what completes behind it waits for the first record
                self.watermark += 1
                self.apply(WatermarkStep(self.watermark))
        for record in self.model.outstanding()[:0:-1][: 1 + i.others]:
            if len(self.steps) < last:
                self.apply(CompleteStep(record, (i.value,)))
        self.apply(CheckpointStep(next(self.ids)))
        if i.crash and self.room() >= 2:
            self.apply(CrashStep())
            self.apply(self.restore(i))

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
            record = sorted(pending)[self.draw(WHICH) % len(pending)]
            self.apply(CompleteStep(record, self.draw(RESULT)))


# Drawn where a schedule ends without STOP (full, or failed for good): the choice STOP is drawn as (0),
# so that when shrinking removes an intent before it, the schedule ends there all the same instead of
# asking for choices that were never drawn (hypothesis would drop that attempt).
ENDED = st.integers(0, 0)


def _draw_steps(draw: Any, f: Features, config: AsyncIoConfig) -> _Drawing:
    """Intents drawn one at a time and taken against the model, until STOP, a full schedule, or a
    failure that nothing can follow (no restores).  An intent draws its kind's fields even when it
    makes no step, so that removing an intent leaves the others' choices where they were: drawn only
    for intents that make a step, a removal shifted them, and RecordPassesWatermark's counterexample
    shrank to 14 steps instead of 5."""
    d = _Drawing(draw, f, config)
    next_kind, fields = kinds(f, d.timers), _fields(f)
    while True:
        if not d.room() or not (d.model.alive or f.checkpoints):
            draw(ENDED)
            break
        if not d.model.alive:  # after a failure, a restore (SCH-7), its own fields drawn
            d.take(Intent("restore", **{name: draw(field) for name, field in fields["restore"]}))
            continue
        kind = draw(next_kind)
        if kind == STOP:
            break
        d.take(Intent(kind, **{name: draw(field) for name, field in fields[kind]}))
    if f.drain:
        d.drain()
    return d


@st.composite
def schedules(draw: Any, f: Features, config: AsyncIoConfig | None = None) -> Schedule:
    """A valid async I/O schedule using the features: a configuration drawn field by field (unless
    given), then intents (`intents`)."""
    if config is None:
        config = draw(configs(f))
    return Schedule(AREA, config, tuple(_draw_steps(draw, f, config).steps))


@functools.cache
def _schedules_of(f: Features) -> st.SearchStrategy[Schedule]:
    """`schedules(f)`, one strategy per feature set."""
    return schedules(f)


FEW_WHICH = st.lists(WHICH, max_size=3)
FEW_VALUES = st.lists(SMALL, max_size=3)


@st.composite
def default_capacity_schedules(draw: Any, modes: tuple[str, ...]) -> Schedule:
    """AIO-5: about DEFAULT_CAPACITY records with the default capacity, then some completions."""
    config = AsyncIoConfig(mode=draw(_choice(modes)))
    d = _Drawing(draw, Features(modes=modes, repeats=False), config)
    for _ in range(DEFAULT_CAPACITY - 2 + draw(_ints(0, 4))):
        d.apply(RecordStep(draw(SMALL), None))
    for which in draw(FEW_WHICH):
        d.outcome(Intent("complete", which=which, result=draw(RESULT)))
    return Schedule(AREA, config, tuple(d.steps))


@st.composite
def config_schedules(draw: Any, f: Features) -> Schedule:
    """A schedule whose configuration may be invalid; valid ones get a few ordinary steps."""
    config = draw(any_configs(f))
    try:
        validate_config(config)
    except ScheduleError:  # AIO-1, AIO-3: the operator must refuse it
        steps = tuple(RecordStep(v, None) for v in draw(FEW_VALUES))
        return Schedule(AREA, config, steps)
    return draw(schedules(replace(f, max_steps=4), config))


@functools.cache
def feature_batches(f: Features, max_size: int = 12) -> st.SearchStrategy[list[Schedule]]:
    """Batches of schedules using the features: one strategy per feature set and size."""
    return batches(_schedules_of(f), max_size)


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
    if d.records and draw(BOOLEAN):
        _fresh_incarnation(d)  # no record of an earlier incarnation is admitted in this one
        r = draw(_ints(0, d.records - 1))
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
    config = draw(configs(f))
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
