"""The strategies of the sources and failover area: valid schedules drawn step by step while the
reference model runs them, so every step is valid by construction (SRC-41, SRC-46), and malformed
schedules broken in one way (or two, in the order the spec checks them) that name their rule.

`Features` says which parts of the vocabulary a property uses; `Features.restrict` drops what an
adapter cannot run.  A schedule is a list of drawn steps (issue 32 item 4): each step's kind is drawn
among the kinds valid after the steps before it, weighed by the model's state, then its fields, each
with a strategy of its own; so shrinking can delete any one step and simplify any field towards the
plainest (register, request, poll; reader 0, one record), and no integer stands for a burst of
steps.  The weights follow the state (`_Drawing.kinds`): a poll before a checkpoint when a reader
read nothing since the last barrier, a completion soon after a barrier that staged records, often
without notification, failures of a reader whose sink holds records of such a checkpoint, late
notifications while a later checkpoint is pending; so the states where engines lose or repeat
records are reached (conformance/areas/sources.py: `COVERAGE` and `coverage` name them and their
floors).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from flink_semantics.conformance.strategies import Malformed, batches
from flink_semantics.conformance.strategies import with_changes as _with
from flink_semantics.reference.sources import ABORTED, BARRIER, COMPLETED, TAKEN, Model
from flink_semantics.spec.adapter import unsupported
from flink_semantics.spec.areas.sources import (
    AbortStep,
    AssignStep,
    BarrierStep,
    CheckpointStep,
    CompleteStep,
    DiscoverStep,
    EndStep,
    FailEnumeratorStep,
    FailStep,
    PollStep,
    RegisterStep,
    RequestStep,
    RescaleStep,
    SourcesConfig,
)
from flink_semantics.spec.schedule import Schedule, Step
from hypothesis import strategies as st

AREA = "sources"

# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Features:
    """Which parts of the vocabulary a strategy uses."""

    max_readers: int = 3
    max_splits: int = 4
    max_records: int = 3
    checkpoints: bool = False
    silent: bool = False  # completions without notification (SRC-22, SRC-29)
    late: bool = False  # their notifications, late (SRC-17): with `silent`
    reader_failures: bool = False
    global_failures: bool = False  # fail_enumerator, and pushes to unregistered readers (SRC-4)
    rescale: bool = False
    unbounded: bool = False  # unbounded sources only
    graph: bool = False  # a job graph around the readers
    end: bool = True  # bounded schedules may end with `end`
    always_end: bool = False  # bounded schedules always end with `end`
    polls: int = 4  # the weight of `poll` steps (lower: readers own more unfinished splits)
    max_steps: int = 16

    def restrict(self, capabilities: Mapping[str, str | None], completion_order: str) -> Features:
        """These features without the ones the adapter does not support."""
        ok = lambda cap: unsupported(capabilities, f"sources.{cap}") is None  # noqa: E731
        return replace(self, checkpoints=self.checkpoints and ok("checkpoint"),
                       silent=self.silent and ok("checkpoint"),
                       late=self.late and ok("checkpoint"),
                       reader_failures=self.reader_failures and ok("reader_failover"),
                       global_failures=self.global_failures and ok("global_failover"),
                       rescale=self.rescale and ok("rescale") and ok("global_failover"),
                       unbounded=self.unbounded and ok("unbounded"),
                       graph=self.graph and ok("region_failover"))


# Between two tasks of a job graph: no edge half the time; shrinks to none.
EDGES = ("none", "none", "pipelined", "blocking")

# Strategies built once and drawn many times: building one per draw (`st.sampled_from(xs)`,
# `st.integers(a, b)`) costs a cache look-up and a validation each time, more than the draw.
_INDEXES: dict[int, st.SearchStrategy[int]] = {}
_BOOLEANS = st.booleans()
_POLL_RECORDS = st.integers(1, 3)
_EIGHTHS = st.integers(0, 7)  # a checkpoint fails at 7 (SRC-19)
_QUARTERS = st.integers(0, 3)  # a completion's notification


def _index(n: int) -> st.SearchStrategy[int]:
    """0 to n - 1, shrinking towards 0: one strategy per n."""
    s = _INDEXES.get(n)
    if s is None:
        s = _INDEXES[n] = st.integers(0, n - 1)
    return s


def pick(draw: Any, xs: list[Any] | tuple[Any, ...]) -> Any:
    """One of xs, shrinking towards the first; as `st.sampled_from(xs)`, but with a strategy built once
    per length (no choice drawn when there is one)."""
    return xs[0] if len(xs) == 1 else xs[draw(_index(len(xs)))]


def weighted(draw: Any, choices: list[tuple[int, Any]]) -> Any:
    """One of the choices, each as often as its weight; shrinks towards the first."""
    i = draw(_index(sum(w for w, _ in choices)))
    for weight, choice in choices:
        if i < weight:
            return choice
        i -= weight
    raise AssertionError("unreachable")


@functools.cache
def _config_fields(f: Features) -> tuple[st.SearchStrategy[int], st.SearchStrategy[list[int]]]:
    return st.integers(1, f.max_readers), st.lists(st.integers(0, f.max_records), max_size=f.max_splits)


@functools.cache
def _edge_kinds(pairs: int) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(EDGES), min_size=pairs, max_size=pairs)


_GRAPH_TASKS = st.integers(1, 3)


def draw_config(draw: Any, f: Features) -> SourcesConfig:
    """A configuration, field by field: the readers, the splits' sizes; with a graph, 1-3 other tasks
    and an edge kind for every pair of tasks, producer before consumer (so the graph is acyclic,
    SRC-43)."""
    readers_st, splits_st = _config_fields(f)
    readers = draw(readers_st)
    splits = tuple(draw(splits_st))
    if not f.graph:
        return SourcesConfig(readers=readers, splits=splits, bounded=not f.unbounded)
    tasks = draw(_GRAPH_TASKS)
    pairs = [(u, v) for v in range(readers + tasks) for u in range(v)]
    kinds = draw(_edge_kinds(len(pairs)))
    return SourcesConfig(readers=readers, splits=splits, bounded=not f.unbounded, tasks=tasks,
                         pipelined=tuple(p for p, k in zip(pairs, kinds) if k == "pipelined"),
                         blocking=tuple(p for p, k in zip(pairs, kinds) if k == "blocking"))


@st.composite
def configs(draw: Any, f: Features) -> SourcesConfig:
    """A configuration drawn as `draw_config` does."""
    return draw_config(draw, f)


class _Drawing:
    """One schedule being drawn: the model, and the steps so far.  `choices` weighs the steps valid
    next (a kind with the reader, task or checkpoint it names) by the model's state; `draw_step`
    draws the rest of one."""

    def __init__(self, f: Features, config: SourcesConfig):
        self.f, self.config = f, config
        self.model = Model(config)
        self.steps: list[Step] = []
        self.taken: dict[int, int] = {}  # checkpoint -> the step that took it
        self.notified: list[tuple[int, int]] = []  # (step, checkpoint) of each notification
        self.producers = sorted({e[0] for e in config.blocking})  # a failure may lose their outputs
        # What `choices` found in the model's state, for `draw_step` (the model changes only in `apply`).
        self.completable: list[int] = []
        self.late: list[int] = []

    def apply(self, s: Step) -> None:
        if isinstance(s, CheckpointStep):
            self.taken[s.id] = len(self.steps)
        events = self.model.apply(len(self.steps), s)
        if isinstance(s, CompleteStep) and any(e.event == "committed" for e in events):
            self.notified.append((len(self.steps), s.id))
        self.steps.append(s)

    def finish(self, end: bool) -> None:
        """Close the schedule with `end` (a pending barrier passes first)."""
        if not end:
            return
        if self.model.valve is not None:
            self.apply(BarrierStep(self.model.valve))
        self.apply(EndStep())

    # ---- what the model's state allows ---------------------------------------------

    def exposed(self, r: int, last: int) -> bool:
        """Whether the tracker holds a bucket of reader `r` under a checkpoint after the restore
        point `last` that was taken before the notification of an earlier one (SRC-17: it must stay,
        for a failure to give its splits back, SRC-21)."""
        return any(k > last and bucket.get(r) and any(n < k and at > self.taken[k] for at, n in self.notified)
                   for k, bucket in self.model.tracker.items())

    def aborted(self, r: int, last: int) -> bool:
        """Whether reader `r` has a bucket under an aborted checkpoint after the restore point `last`
        (SRC-18: a failure gives its splits back)."""
        checkpoints = self.model.checkpoints
        return any(k > last and bucket.get(r) and checkpoints[k].state == ABORTED
                   for k, bucket in self.model.tracker.items())

    def unconfirmed(self) -> list[bool]:
        """For each reader, whether its sink holds records staged before the restore point's barrier
        and not committed: its checkpoint completed without notification (SRC-29: a restore commits
        them)."""
        point = self.model.last_completed
        if point is None:
            return [False] * self.model.parallelism
        return [any(k <= point and records for k, records in reader.staged.items())
                for reader in self.model.readers[:self.model.parallelism]]

    # ---- the steps, weighed by the state --------------------------------------------

    def choices(self) -> list[tuple[int, tuple[str, int | None]]]:
        """(weight, (kind, what it names)) of every step valid next, the plainest first (hypothesis
        shrinks towards it): a kind that names a reader, a task or a checkpoint is a choice for each
        it may name (`None`: drawn with the step's other fields).  The weights follow the model's
        state, so that the rare states where engines lose or repeat records are reached without
        bursts of steps:
        - a barrier or a completion weighs much while a checkpoint awaits it (a restore point soon);
        - with silent completions, a reader owning a split that read nothing since the last barrier
          polls more often, and checkpoints are taken more often (SRC-22, SRC-29: a silent
          completion then leaves staged records for a failover to commit);
        - late notifications weigh more while a later checkpoint is pending (SRC-17: its bucket
          must stay);
        - failures weigh three times as much while a checkpoint is pending (SRC-20: it is aborted),
          and more while the sinks hold records of a checkpoint completed without notification
          (SRC-29) or a bucket is exposed to the notification of an earlier checkpoint (SRC-17
          with SRC-21) or under an aborted one (SRC-18);
        - a rescale weighs more while the restore point holds the readers' unfinished splits
          (SRC-31)."""
        m, f = self.model, self.f
        readers = m.readers
        registered = [r for r in range(m.parallelism) if readers[r].registered]
        unregistered = [r for r in range(m.parallelism) if not readers[r].registered]
        out: list[tuple[int, tuple[str, int | None]]] = [(8, ("register", r)) for r in unregistered]
        out += [(4, ("request", r)) for r in registered]
        # With silent completions, the readers owning a split that read nothing since the last
        # barrier share 12 more (a checkpoint now would stage nothing of them: SRC-22, SRC-29).
        unread = [r for r in registered if readers[r].splits and not readers[r].pending]
        bonus = 12 // len(unread) if unread and f.silent and f.checkpoints else 0
        out += [(f.polls + (bonus if r in unread else 0), ("poll", r)) for r in registered]
        out += [(1, ("assign", r)) for r in registered]
        if f.global_failures:  # SRC-4: a push to a reader not running restores the last checkpoint
            out += [(3, ("push", r)) for r in unregistered]
        if not self.config.bounded:
            out.append((2, ("discover", None)))
        last = m.last_completed if m.last_completed is not None else -1
        unconfirmed = self.unconfirmed()
        self.completable = []
        if f.checkpoints:
            self.completable = [cid for cid, cp in m.checkpoints.items()
                                if cp.state == BARRIER and cid > last]
            owned = any(readers[r].splits for r in registered)
            read = any(readers[r].pending for r in registered)  # a barrier now stages records
            if m.valve is not None:
                out.append((40 if read else 10, ("barrier", None)))
            elif not unregistered:
                weight = self.checkpoint_weight(read, owned, unread, any(unconfirmed))
                out.append((weight, ("checkpoint", None)))
            staged = [cid for cid in self.completable if any(r.staged.get(cid) for r in readers)]
            out.append((60 * len(self.completable) + 60 * len(staged), ("complete", None)))
            out += [(3, ("abort", cid)) for cid, cp in m.checkpoints.items() if cp.state in (TAKEN, BARRIER)]
            if f.late:
                notified = m.last_notified if m.last_notified is not None else -1
                self.late = [cid for cid, cp in m.checkpoints.items()
                             if cp.state == COMPLETED and cid > notified]
                out.append((sum(self.late_weight(cid) for cid in self.late), ("notify", None)))
        if f.reader_failures or f.graph or f.global_failures:
            weights = self.fail_weights(last, unconfirmed)
            if f.reader_failures or f.graph:
                tasks = registered + list(range(m.parallelism, m.parallelism + self.config.tasks))
                out += [(weights[t], ("fail", t)) for t in tasks]
            if f.global_failures:
                out.append((max(weights[:m.parallelism]), ("fail_enumerator", None)))
        if f.rescale and not self.config.has_graph:
            point = m.last_completed
            restorable = point is not None and any(m.checkpoints[point].readers.values())
            out.append((10 if any(unconfirmed) else 6 if restorable else 3, ("rescale", None)))
        return [(w, c) for w, c in out if w]

    def fail_weights(self, last: int, unconfirmed: list[bool]) -> list[int]:
        """How much a failure of each task weighs: 8 when it gives back a bucket exposed to an earlier
        checkpoint's notification (SRC-17 with SRC-21), 20 when its sink holds records of a
        checkpoint completed without notification (SRC-29), 6 when it gives back a bucket of an
        aborted checkpoint (SRC-18), 3 while a checkpoint is pending (SRC-20: it is aborted) or the
        reader was told NoMoreSplits (SRC-21, SRC-25: the flag is cleared), else 1."""
        m = self.model
        pending = m.valve is not None or any(cp.state == BARRIER for cp in m.checkpoints.values())
        out = []
        for task in range(m.parallelism + self.config.tasks):
            reader = task < m.parallelism
            if reader and self.exposed(task, last):
                out.append(8)
            elif reader and unconfirmed[task]:
                out.append(20)
            elif reader and self.aborted(task, last):
                out.append(6)
            else:
                out.append(3 if pending or (reader and m.readers[task].no_more) else 1)
        return out

    def checkpoint_weight(self, read: bool, owned: bool, unread: list[int], unconfirmed: bool) -> int:
        """A checkpoint weighs little while another awaits its completion or the sinks hold records a
        failover would commit (SRC-29; less little with late notifications, SRC-17: a later
        checkpoint taken before one commits them), or, with silent completions, while a reader that
        owns a split has read nothing since the last barrier (a poll first: SRC-22); much when the
        readers read records a barrier would stage, more when they own splits (SRC-31)."""
        if self.completable:
            return 2
        if unconfirmed:  # a late notification needs one
            return 6 if self.f.late else 2
        if self.f.silent and not read and unread:
            return 2
        return 16 if read else 10 if owned else 6

    def late_weight(self, cid: int) -> int:
        """A late notification weighs more while a later checkpoint is pending (SRC-17: its bucket must
        stay), and while the sinks hold records it commits after a later checkpoint was taken."""
        m = self.model
        later = any(k > cid and cp.state in (TAKEN, BARRIER) for k, cp in m.checkpoints.items())
        commits = any(k > cid for k in m.checkpoints) and any(
            k <= cid and records for reader in m.readers for k, records in reader.staged.items())
        return 16 if commits else 12 if later else 4

    # ---- the fields of one step -----------------------------------------------------

    def draw_step(self, draw: Any, kind: str, x: int | None) -> Step:
        """A step of `kind` naming `x`, its other fields drawn each with a strategy of its own, valid
        now."""
        m, f = self.model, self.f

        def named() -> int:  # the reader, task or checkpoint drawn with the kind
            assert x is not None, f"a {kind} step names a reader, task or checkpoint"
            return x

        if kind == "register":
            return RegisterStep(named())
        if kind == "request":
            return RequestStep(named())
        if kind == "poll":
            return PollStep(named(), draw(_POLL_RECORDS))
        if kind in ("assign", "push"):
            return AssignStep(named())
        if kind == "discover":
            return DiscoverStep(draw(_index(f.max_records + 1)))
        if kind == "barrier":
            assert m.valve is not None
            return BarrierStep(m.valve)
        if kind == "checkpoint":  # ids 1, 2, ... in the order they are taken; one in eight fails (SRC-19)
            return CheckpointStep(len(m.checkpoints) + 1, fails=draw(_EIGHTHS) == 7)
        if kind == "complete":
            return self.draw_completion(draw)
        if kind == "abort":
            return AbortStep(named())
        if kind == "notify":
            return CompleteStep(pick(draw, self.late))
        if kind == "fail":
            lost = draw(_index(2 ** len(self.producers))) if self.producers else 0
            return FailStep(named(), tuple(p for i, p in enumerate(self.producers) if lost >> i & 1))
        if kind == "fail_enumerator":
            return FailEnumeratorStep()
        current = m.parallelism  # rescale: another parallelism first (SRC-31: the states cut anew)
        return RescaleStep(pick(draw, [p for p in range(1, f.max_readers + 1) if p != current] + [current]))

    def draw_completion(self, draw: Any) -> CompleteStep:
        """A completion, with notification (the plainest) or, with `silent`, without: one time in four,
        three in four when the readers staged records before its barrier (SRC-22, SRC-29)."""
        cid = pick(draw, self.completable)
        if not self.f.silent:
            return CompleteStep(cid)
        staged = any(reader.staged.get(cid) for reader in self.model.readers)
        return CompleteStep(cid, notify=draw(_QUARTERS) < (1 if staged else 3))


# The schedule being drawn (a stack, though hypothesis draws one at a time): the step strategies
# below are built once, not once a schedule, and find their drawing here.
_DRAWINGS: list[_Drawing] = []


@st.composite
def _next_step(draw: Any) -> Step | None:
    """The next step, applied to the drawing: its kind with what it names (weighed by the state),
    then its other fields; none once the schedule has its most steps."""
    d = _DRAWINGS[-1]
    if len(d.steps) >= d.f.max_steps:
        return None
    s = d.draw_step(draw, *weighted(draw, d.choices()))
    d.apply(s)
    return s


# About twenty steps on average (a flat list averages five): lists of lists of steps, each element
# drawn against the state the ones before left, so shrinking can delete any one.
_STEPS = st.lists(st.lists(st.lists(_next_step(), min_size=1, max_size=10), min_size=1, max_size=5),
                  min_size=1, max_size=2)


@st.composite
def schedules(draw: Any, f: Features, config: SourcesConfig | None = None) -> Schedule:
    """A valid sources schedule using the features: steps drawn one at a time, each valid against the
    model's state so far (SRC-41, SRC-46), so that shrinking can delete any one step and simplify
    any field; bounded schedules may end with `end` (always with `always_end`)."""
    if config is None:
        config = draw_config(draw, f)
    d = _Drawing(f, config)
    _DRAWINGS.append(d)
    try:
        draw(_STEPS)
    finally:
        _DRAWINGS.pop()
    end = config.bounded and f.end and (f.always_end or draw(_BOOLEANS))
    d.finish(end)
    return Schedule(AREA, config, tuple(d.steps))


def feature_batches(f: Features, max_size: int = 12) -> st.SearchStrategy[list[Schedule]]:
    return batches(schedules(f), max_size)


# --------------------------------------------------------------------------
# Malformed schedules (SRC-40..SRC-46 and the shared SCH rules)
# --------------------------------------------------------------------------


@st.composite
def malformed_schedules(draw: Any) -> Malformed:
    """A valid schedule broken in one way that names its rule and its step."""
    f = Features(checkpoints=True, reader_failures=True, max_steps=8, end=False)
    base: Schedule = draw(schedules(f))
    steps = base.to_dict()["steps"]
    n = len(steps)
    readers = base.config.readers
    kind = draw(st.sampled_from(("negative split", "unknown reader", "unregistered request",
                                 "bounded discovery", "cycle", "end in the middle", "rescaled graph",
                                 "complete never taken", "repeated notification", "notification out of order",
                                 "duplicate checkpoint", "unknown op", *COMBINED)))
    if kind in COMBINED:
        return _combined(base, kind)
    if kind == "negative split":
        return Malformed(_with(base, {"splits": [*base.config.splits, -1]}), None, "SRC-40", kind)
    if kind == "unknown reader":
        bad = {"op": "poll", "reader": readers, "records": 1}
        return Malformed(_with(base, steps=[*steps, bad]), n, "SRC-41", kind)
    if kind == "unregistered request":
        return Malformed(_with(base, steps=[{"op": "request", "reader": 0}, *steps]), 0, "SRC-41", kind)
    if kind == "bounded discovery":
        return Malformed(_with(base, steps=[*steps, {"op": "discover", "records": 1}]), n, "SRC-42", kind)
    if kind == "cycle":
        t = readers
        return Malformed(_with(base, {"tasks": 2, "pipelined": [[t, t + 1]], "blocking": [[t + 1, t]]}),
                         None, "SRC-43", kind)
    if kind == "end in the middle":
        return Malformed(_with(base, steps=[{"op": "end"}, {"op": "register", "reader": 0}]), 0, "SRC-44",
                         kind)
    if kind == "rescaled graph":
        return Malformed(_with(base, {"tasks": 1}, steps=[{"op": "rescale", "readers": 2}]), 0, "SRC-45",
                         kind)
    if kind == "complete never taken":
        return Malformed(_with(base, steps=[*steps, {"op": "complete", "id": 1000, "notify": True}]), n,
                         "SRC-46", kind)
    if kind in ("repeated notification", "notification out of order"):
        twice = _notified_twice(readers, kind == "repeated notification")
        return Malformed(_with(base, steps=twice), len(twice) - 1, "SRC-46", kind)
    if kind == "duplicate checkpoint":
        ids = [s["id"] for s in steps if s["op"] == "checkpoint"]
        if ids:
            again = {"op": "checkpoint", "id": ids[0], "fails": False}
            return Malformed(_with(base, steps=[*steps, again]), n, "SCH-5", kind)
    return Malformed(_with(base, steps=[*steps, {"op": "record", "value": 1}]), n, "SCH-1", "unknown op")


# Two faults at once, where the spec orders the checks (issue 32, item 6): the configuration is
# checked before the steps (SRC-40 before a step's SRC-41), and the static rules before the model
# runs the schedule (spec/schedules.md: dynamic rules are checked while the reference model runs
# it), so a later static fault (SRC-42, SRC-44) is refused before an earlier dynamic one (SRC-41:
# a request of a reader that has not registered).
COMBINED = ("negative split and unknown reader", "unregistered request and bounded discovery",
            "unregistered request and end in the middle")


def _combined(base: Schedule, kind: str) -> Malformed:
    steps = base.to_dict()["steps"]
    readers = base.config.readers
    if kind == "negative split and unknown reader":
        bad = {"op": "poll", "reader": readers, "records": 1}
        data = _with(base, {"splits": [*base.config.splits, -1]}, [*steps, bad])
        return Malformed(data, None, "SRC-40", kind)
    early = [{"op": "request", "reader": 0}, *steps]  # refused by the model at step 0 (SRC-41) ...
    if kind == "unregistered request and bounded discovery":
        data = _with(base, steps=[*early, {"op": "discover", "records": 1}])
        return Malformed(data, len(early), "SRC-42", kind)  # ... but the static check comes first
    data = _with(base, steps=[*early, {"op": "end"}, {"op": "register", "reader": 0}])
    return Malformed(data, len(early), "SRC-44", kind)


def _notified_twice(readers: int, same: bool) -> list[dict[str, Any]]:
    """Every reader registers, checkpoints 1 and 2 complete, 1 without notification, 2 notified; then
    2's completion is notified again (`same`), or 1's after 2's (SRC-46: once each, in id order)."""
    steps: list[dict[str, Any]] = [{"op": "register", "reader": r} for r in range(readers)]
    for cid in (1, 2):
        steps += [{"op": "checkpoint", "id": cid, "fails": False}, {"op": "barrier", "id": cid},
                  {"op": "complete", "id": cid, "notify": cid == 2}]
    return [*steps, {"op": "complete", "id": 2 if same else 1, "notify": True}]
