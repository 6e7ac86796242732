"""The strategies of the async I/O area (the checker's hooks and the coverage states are in
conformance/areas/async_io.py).

Strategies draw valid schedules step by step while the reference model runs them, so every step
is valid by construction: only admitted records complete (SCH-4), restores name taken checkpoints
(SCH-5) and come only after a failure (SCH-7), nothing is input after end of input (SCH-6).
`Features` says which parts of the vocabulary a property exercises; `Features.restrict` drops what
an adapter cannot run.  A schedule is a configuration, drawn field by field, and a sequence of
intents (issue 32, item 4), drawn one at a time while the schedule has room: each a kind, then its
fields from small strategies of their own, made valid against the schedule so far by
`_Drawing.take`, so that shrinking removes any single step and simplifies any field towards the
plainest (a record of value 0, a completion of the latest record emitting one value 0, the least
capacity).  Where a state in which engines lose or repeat data is one step away, the intent that
brings it within reach takes that step too, as a field of its own (`Advance.then`, `Outcome.then`,
`Snapshot`); async_io's `COVERAGE` and `coverage` name those states and their floors
(conformance/coverage.py).
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
# Intents: a step as drawn, before the schedule so far makes it valid
# --------------------------------------------------------------------------

# A schedule is a sequence of intents drawn with hypothesis' own composition (issue 32, item 4): an
# intent's kind first (`sampled_from`, the plainest first: a record), then its fields, each from a
# small strategy of its own whose first value is the plainest (a few fields share one choice: see
# RECORDS and `_hows`).  `_Drawing` makes each intent valid against the schedule so far, or drops it
# when nothing can (a completion with nothing outstanding).  A field means the same whatever the
# state, so that shrinking it makes its step plainer and never changes what the step refers to or
# which kind of step it is: a record to complete is counted back from the latest outstanding one and
# clamped (beyond the oldest, the oldest), and no field of one step decides whether another kind of
# step is taken.  The steps that bring a rare state within reach take the next step towards it
# themselves, as a field of their own (`Advance.then`, `Outcome.then`, `Snapshot`): shrinking the
# field to its first value drops that step.  Every field is drawn whether or not the state uses it,
# so deleting an intent leaves the fields of the others where they were.


@dataclass(frozen=True)
class Record:
    """A record with this value and timestamp (None: none)."""

    value: int
    timestamp: int | None


@dataclass(frozen=True)
class Outcome:
    """A completion of an outstanding record (`which`: 0 the latest admitted, counting back, the oldest
    beyond) with `result`, null (AIO-20) or an `error`; `then`, when the retry strategy retries the
    outcome: the step taken while the record waits (`end`: AIO-39, `checkpoint`: AIO-41)."""

    which: int
    result: tuple[int, ...]
    null: bool
    error: bool
    then: str | None


@dataclass(frozen=True)
class Repeat:
    """A completion of a call that has already finished (AIO-21, AIO-38): the `which`-th finished
    record, the earliest first."""

    which: int
    result: tuple[int, ...]


@dataclass(frozen=True)
class Mark:
    """A watermark `rise` above the last one (0: the same again)."""

    rise: int


@dataclass(frozen=True)
class Status:
    """A status: idle or active."""

    idle: bool


@dataclass(frozen=True)
class End:
    """End of input."""


@dataclass(frozen=True)
class Advance:
    """Time advances `ms`, or to the next timer (`to_timer`, when one is pending: outcomes and inputs
    at a deadline, AIO-30, AIO-33, AIO-54); `then`, when a timeout the handler ignored fired: that
    record completes (`complete`, AIO-30) or fails (`error`, AIO-23) at once."""

    ms: int
    to_timer: bool
    then: str | None


@dataclass(frozen=True)
class Barrier:
    """A checkpoint (ids 1, 2, ... in order)."""


@dataclass(frozen=True)
class Restore:
    """A restore: from the `latest` checkpoint taken, an `older` one (the latest but one) or `none`; at
    the configuration's capacity (`capacity` 0) or at `capacity`; `below`: when the snapshot stores
    two elements or more, at a capacity below that (AIO-47, AIO-57)."""

    source: str
    capacity: int
    below: bool


@dataclass(frozen=True)
class Crash:
    """A crash and the restore after it."""

    restore: Restore


@dataclass(frozen=True)
class Snapshot:
    """Two records and `more` (in unordered mode a watermark after the first, when there is room); a
    completion of the latest outstanding record with `result` (or its `value`: never empty, no retry,
    AIO-33) and of the others before it that `others` names (never the oldest); a checkpoint; with
    `crash`, a crash and `restore`: a snapshot storing completed records behind an incomplete one
    (AIO-44, AIO-45, AIO-55), restored from (AIO-46, AIO-47, AIO-57)."""

    more: int
    value: int
    result: tuple[int, ...]
    others: tuple[bool, ...]
    crash: bool
    restore: Restore


SMALL = st.integers(0, 9)
WHICH = st.integers(0, 5)  # a record counted from the latest outstanding one (clamped)
# A result list, one choice: one value the plainest (a completion plainly emits its result), empty
# (AIO-19) half the time, up to three values.
RESULTS = ((0,), (), (1,), (), (0, 1), (), (2,), (), (1, 2, 3), (), (3, 0), (), (4,), (), (5, 6), (),
           (7, 8, 9), (), (9,), ())
RESULT = st.sampled_from(RESULTS)
TIMESTAMPS = (None, None, None, 0, 1, 2, 3, 5, 8, 13, 20)
# A record's value and timestamp, one choice (value first, then the timestamp, the plainest first).
RECORDS = st.sampled_from(tuple(Record(v, t) for v in range(10) for t in TIMESTAMPS))
RISES = st.integers(0, 5)
IDLE = st.booleans()
SOURCES = ("latest", "latest", "older", "none")
# A draw costs hypothesis a span and a choice whatever it draws, so an intent is one composite whose
# fields are as few choices as keep each simplifiable: one for a record (value, then timestamp), one
# for how an outcome ends (plain first) and one for a restore's source and `below` together.


@functools.cache
def _restores(f: Features) -> tuple[st.SearchStrategy[tuple[str, bool]], st.SearchStrategy[int]]:
    how = st.sampled_from(tuple((source, below) for below in (False, True) for source in SOURCES))
    return how, st.integers(0, f.max_capacity)


def _restore(draw: Any, f: Features) -> Restore:
    how, capacity = _restores(f)
    source, below = draw(how)
    return Restore(source, draw(capacity), below)


@functools.cache
def _hows(f: Features) -> st.SearchStrategy[tuple[bool, bool, str | None]]:
    """How an outcome ends, one choice: (null, error, then), the plain completion first and four times
    as often as a null result or an error (when the features have them); `then` only with retries."""
    ends = [(False, False)] * 4 + [(True, False)] * f.nulls + [(False, True)] * f.errors
    thens: tuple[str | None, ...] = (None, "end", "checkpoint") if f.retries and (f.end or f.checkpoints) \
        else (None,)
    return st.sampled_from(tuple((null, error, then) for then in thens for null, error in ends))


@functools.cache
def _lates(f: Features) -> st.SearchStrategy[str | None]:
    return st.sampled_from((None, "complete", "complete", "error") if f.errors else (None, "complete"))


def _outcome(draw: Any, f: Features) -> Outcome:
    which, result = draw(WHICH), draw(RESULT)
    null, error, then = draw(_hows(f))
    return Outcome(which, result, null, error, then)


def _snapshot(draw: Any, f: Features) -> Snapshot:
    more, value, result, others = draw(MORE), draw(SMALL), draw(RESULT), draw(OTHERS)
    return Snapshot(more, value, result, others, draw(CRASHES), _restore(draw, f))


MORE = st.integers(0, 2)
OTHERS = st.sampled_from(tuple(itertools.product((False, True), repeat=3)))
CRASHES = st.sampled_from((False, True, True))
MS = st.integers(0, 30)
KINDS: dict[str, Any] = {
    "record": lambda draw, f: draw(RECORDS),
    "outcome": _outcome,
    "mark": lambda draw, f: Mark(draw(RISES)),
    "status": lambda draw, f: Status(draw(IDLE)),
    "end": lambda draw, f: End(),
    "advance": lambda draw, f: Advance(draw(MS), draw(IDLE), draw(_lates(f))),
    "repeat": lambda draw, f: Repeat(draw(WHICH), draw(RESULT)),
    "barrier": lambda draw, f: Barrier(),
    "crash": lambda draw, f: Crash(_restore(draw, f)),
    "snapshot": _snapshot,
}


@functools.cache
def _kinds(f: Features) -> st.SearchStrategy[str]:
    """An intent's kind, weighted by repetition (records and completions make schedules interesting;
    checkpoints often enough that their snapshots hold completed records and restores follow them).
    Only the kinds the features allow are drawn, so the kinds do not depend on the configuration."""
    kinds = ["record"] * 10 + ["outcome"] * 12
    kinds += ["mark"] * 5 if f.watermarks else []
    kinds += ["status"] * 2 if f.statuses else []
    kinds += ["end"] if f.end and not f.drain else []
    kinds += ["advance"] * 6 if f.timeouts else []
    kinds += ["repeat"] * 2 if f.repeats else []
    kinds += ["barrier"] * 3 + ["crash"] * 2 + ["snapshot"] * 8 if f.checkpoints else []
    return st.sampled_from(tuple(kinds))


# The intents of a schedule are drawn one at a time while the schedule has room, each behind a
# choice to go on (stop the plainest: shrinking it ends the schedule there), so that no intent is
# drawn that no step would come of.  About twelve on average, when room is left.
GO_ON = st.sampled_from((False,) + (True,) * 11)
MAX_INTENTS = 40


@functools.cache
def next_intents(f: Features) -> st.SearchStrategy[Any]:
    """The next intent, or None (the schedule ends): its kind (`_kinds`), then its fields.  One span,
    so that shrinking deletes an intent with its choice to go on."""
    kinds = _kinds(f)

    @st.composite
    def next_intent(draw: Any) -> Any:
        return KINDS[draw(kinds)](draw, f) if draw(GO_ON) else None

    return next_intent()


# --------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------


MULTIPLIERS = (1.0, 1.5, 2.0, 3.0)
DELAYS = (3, 4, 5, 6, 7, 8, 0, 1, 2)
# A retry strategy, field by field: the predicates first (none: no retry, AIO-4); then one retry after
# a fixed delay of 3 ms (backoffs that last past a step).  Every field takes each of its values.
RETRIES = st.builds(
    RetryConfig, if_empty=st.booleans(), if_error=st.booleans(), strategy=st.sampled_from(RETRY_STRATEGIES),
    max_attempts=st.sampled_from((1, 2, 3, 0)), delay=st.sampled_from(DELAYS),
    initial_delay=st.sampled_from(DELAYS), max_delay=st.integers(0, 16),
    multiplier=st.sampled_from(MULTIPLIERS))


@functools.cache
def configs(f: Features) -> st.SearchStrategy[AsyncIoConfig]:
    """Valid configurations using the features, field by field: the mode, the capacity (1..max), a
    timeout of 1..32 ms, its handler (`ignore`, AIO-30, as often as the others together) and its
    result; with retries, a retry strategy three times in four."""
    handlers = (*f.on_timeout, f.on_timeout[-1])
    return st.builds(
        AsyncIoConfig, mode=st.sampled_from(f.modes), capacity=st.integers(1, f.max_capacity),
        timeout=st.integers(1, 32) if f.timeouts else st.just(0),
        on_timeout=st.sampled_from(handlers) if f.timeouts else st.just("fail"),
        timeout_result=st.lists(SMALL, max_size=3).map(tuple) if f.timeouts else st.just(()),
        retry=st.sampled_from((0, 1, 1, 1)).flatmap(lambda n: RETRIES if n else st.none()) if f.retries
        else st.none())


@functools.cache
def any_configs(f: Features) -> st.SearchStrategy[AsyncIoConfig]:
    """Configurations that may be invalid (AIO-1: capacity <= 0; AIO-3: a retry strategy without a
    timeout; both at once), field by field.  Valid ones use a timeout or a retry strategy only when the
    features allow."""

    def config(mode: str, capacity: int, timeout: int, retry: RetryConfig | None) -> AsyncIoConfig:
        if retry is not None and timeout > 0 and not f.retries:
            retry = None
        return AsyncIoConfig(mode=mode, capacity=capacity, timeout=timeout, retry=retry)

    return st.builds(config, st.sampled_from(f.modes), st.integers(-2, 3),
                     st.sampled_from((0, 10)) if f.timeouts else st.just(0),
                     st.sampled_from((0, 1)).flatmap(lambda n: RETRIES if n else st.none()))


# --------------------------------------------------------------------------
# Steps, made valid while the model runs
# --------------------------------------------------------------------------

PLAIN_RESTORE = Restore("latest", 0, False)


class _Drawing:
    """The state of one schedule being drawn: the model and what the steps so far used.  `take` makes
    an intent valid steps against it."""

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

    def room(self) -> int:
        """How many steps the schedule may still take."""
        return self.f.max_steps - len(self.steps)

    def late(self) -> list[int]:
        """The records whose timeout fired in the last step and that still wait for their call
        (the handler ignored it, AIO-30)."""
        outstanding = self.model.outstanding()
        return [r for r in self.timed_out if r in outstanding]

    def take(self, intent: Any) -> None:
        """The valid steps of one intent, none when the schedule so far makes it invalid.  After a
        failure, a restore first (a crash's own; else from the latest checkpoint), SCH-7."""
        if not self.model.alive:
            if not self.f.checkpoints:
                return
            self.apply(self.restore(intent.restore if isinstance(intent, Crash) else PLAIN_RESTORE))
            if isinstance(intent, Crash) or not self.room():
                return
        m = self.model
        if isinstance(intent, Record) and not self.ended:
            self.apply(RecordStep(intent.value, intent.timestamp))
        elif isinstance(intent, Outcome) and m.outstanding():
            self.outcome(intent)
        elif isinstance(intent, Repeat) and not m.finished and set(m.admitted()) - set(m.outstanding()):
            done = sorted(set(m.admitted()) - set(m.outstanding()))
            self.apply(CompleteStep(done[min(intent.which, len(done) - 1)], intent.result))
        elif isinstance(intent, Mark) and not self.ended:
            self.watermark += intent.rise
            self.apply(WatermarkStep(self.watermark))
        elif isinstance(intent, Status) and not self.ended:
            self.apply(StatusStep(intent.idle))
        elif isinstance(intent, End) and not self.ended:
            self.apply(EndStep())
        elif isinstance(intent, Advance) and self.timers:
            self.advance(intent)
        elif isinstance(intent, Barrier) and not self.ended:
            self.apply(CheckpointStep(next(self.ids)))
        elif isinstance(intent, Crash):
            self.apply(CrashStep())
            if self.room():
                self.apply(self.restore(intent.restore))
        elif isinstance(intent, Snapshot) and not self.ended and not m.waiting_inputs() \
                and self.capacity - m.queue_size() >= 2:
            self.snapshot(intent)

    def outcome(self, o: Outcome) -> None:
        """A completion, null result or error of an outstanding record; then, when the retry strategy
        retries it, the step `then` names (AIO-39, AIO-41)."""
        pool = self.model.outstanding()[::-1]
        record = pool[min(o.which, len(pool) - 1)]
        if o.error:
            self.apply(ErrorStep(record, "error"))
        else:
            self.apply(CompleteStep(record, None if o.null else o.result))
        if o.then is None or not self.room() or self.ended or not self.model.alive \
                or BACKOFF not in record_states(self.model).values():
            return
        if o.then == "end" and self.f.end and not self.f.drain:
            self.apply(EndStep())
        elif o.then == "checkpoint" and self.f.checkpoints:
            self.apply(CheckpointStep(next(self.ids)))

    def advance(self, a: Advance) -> None:
        """Time advances; then, when a timeout the handler ignored fired, that record's outcome at once
        (AIO-30: at its deadline; AIO-23)."""
        m = self.model
        due = [t - m.now for t in m.pending_timers() if t > m.now]
        self.apply(AdvanceStep(due[0] if due and a.to_timer else a.ms))
        late = self.late()
        if a.then is None or not late or not self.room():
            return
        self.apply(ErrorStep(late[0], "error") if a.then == "error" else CompleteStep(late[0], (0,)))

    def restore(self, r: Restore) -> RestoreStep:
        """A restore from a taken checkpoint, or none (SCH-5)."""
        taken = sorted(self.model.taken_checkpoints, reverse=True)
        checkpoint = None
        if taken and r.source != "none":
            checkpoint = taken[min(int(r.source == "older"), len(taken) - 1)]
        stored = self.stored.get(checkpoint, 0) if checkpoint is not None else 0
        capacity: int | None = r.capacity or None
        if stored >= 2 and r.below:
            capacity = max(1, min(r.capacity, stored - 1))
        return RestoreStep(checkpoint, capacity)

    def snapshot(self, s: Snapshot) -> None:
        """The steps of a `Snapshot` that fit in the room left."""
        last = self.f.max_steps - 1  # room for the checkpoint
        room = self.capacity - self.model.queue_size()
        mark = self.config.mode == "unordered" and self.f.watermarks and room >= 3
        for j in range(min(2 + s.more, room - mark)):
            if len(self.steps) < last - 1 - mark:
                self.apply(RecordStep((s.value + j) % 10, None))
            if j == 0 and mark:  # AIO-13: what completes behind it waits for the first record
                self.watermark += 1
                self.apply(WatermarkStep(self.watermark))
        for j, record in enumerate(self.model.outstanding()[:0:-1]):
            if len(self.steps) < last and (j == 0 or (j <= len(s.others) and s.others[j - 1])):
                self.apply(CompleteStep(record, s.result or (s.value,)))  # not empty: no retry (AIO-33)
        self.apply(CheckpointStep(next(self.ids)))
        if s.crash and self.room() >= 2:
            self.apply(CrashStep())
            self.apply(self.restore(s.restore))

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
            record = sorted(pending)[min(self.draw(WHICH), len(pending) - 1)]
            self.apply(CompleteStep(record, self.draw(RESULT)))


def _draw_steps(draw: Any, f: Features, config: AsyncIoConfig) -> _Drawing:
    """Draw intents one at a time and make each valid steps against the model (`_Drawing.take`), up
    to `f.max_steps` steps (and MAX_INTENTS intents); with `f.drain`, end of input and the outstanding
    calls completed."""
    d = _Drawing(draw, f, config)
    intent = next_intents(f)
    for _ in range(MAX_INTENTS):
        if len(d.steps) >= f.max_steps or (wanted := draw(intent)) is None:
            break
        d.take(wanted)
    if f.drain:
        d.drain()
    return d


@st.composite
def schedules(draw: Any, f: Features, config: AsyncIoConfig | None = None) -> Schedule:
    """A valid async I/O schedule using the features."""
    if config is None:
        config = draw(configs(f))
    return Schedule(AREA, config, tuple(_draw_steps(draw, f, config).steps))


COMPLETIONS = st.lists(st.builds(Outcome, WHICH, RESULT, st.just(False), st.just(False), st.just(None)),
                       max_size=3)


@st.composite
def default_capacity_schedules(draw: Any, modes: tuple[str, ...]) -> Schedule:
    """AIO-5: about DEFAULT_CAPACITY records with the default capacity, then some completions."""
    config = AsyncIoConfig(mode=draw(st.sampled_from(modes)))
    d = _Drawing(draw, Features(modes=modes, repeats=False), config)
    for _ in range(DEFAULT_CAPACITY - 2 + draw(st.integers(0, 4))):
        d.apply(RecordStep(draw(SMALL), None))
    for wanted in draw(COMPLETIONS):
        d.take(wanted)
    return Schedule(AREA, config, tuple(d.steps))


@st.composite
def config_schedules(draw: Any, f: Features) -> Schedule:
    """A schedule whose configuration may be invalid; valid ones get a few ordinary steps."""
    config = draw(any_configs(f))
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
