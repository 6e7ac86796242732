"""The strategies of the sources and failover area: valid schedules drawn step by step while the
reference model runs them, so every step is valid by construction (SRC-41, SRC-46), and malformed
schedules broken in one way (or two, in the order the spec checks them) that name their rule.

`Features` says which parts of the vocabulary a property uses; `Features.restrict` drops what an
adapter cannot run.  Every step is one integer drawn by hypothesis: shrinking it towards 0 picks the
plainest valid step (register, request, poll), and shrinking the list removes steps.  Some integers
pick a compound option (`completed_checkpoint`), and failures weigh more while a checkpoint is
pending or unconfirmed, so that the states where engines lose or repeat records are reached
(conformance/areas/sources.py: `COVERAGE` and `coverage` name them and their floors).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from flink_semantics.conformance.strategies import Malformed, batches
from flink_semantics.reference.sources import BARRIER, COMPLETED, TAKEN, Model
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


CONFIG_BITS = st.integers(0, 2**17 - 1)
# The job graph is drawn on its own: hypothesis favours small integers, so graph bits packed above
# the splits' sizes were seldom set, and most graphs had no edge.
GRAPH_BITS = st.integers(0, 2**32 - 1)
# About fifteen steps on average (a flat list averages five), each one integer.
STEP_BITS = st.lists(st.lists(st.integers(0, 2**20 - 1), min_size=1, max_size=10), min_size=1, max_size=5)


def _bits(n: int, first: int, count: int) -> int:
    return (n >> first) & ((1 << count) - 1)


def config_of(n: int, f: Features, graph: int = 0) -> SourcesConfig:
    """A configuration from 17 bits: 0-1 readers, 2-4 how many splits, 5-16 their sizes; with a
    graph, from `graph` (GRAPH_BITS): 0-1 the tasks, then two bits per pair of tasks, the edge
    between them (1 pipelined, 2 blocking, else none)."""
    readers = 1 + _bits(n, 0, 2) % f.max_readers
    count = _bits(n, 2, 3) % (f.max_splits + 1)
    splits = tuple(_bits(n, 5 + 3 * i, 3) % (f.max_records + 1) for i in range(count))
    if not f.graph:
        return SourcesConfig(readers=readers, splits=splits, bounded=not f.unbounded)
    tasks = 1 + _bits(graph, 0, 2) % 3
    pipelined, blocking = [], []
    pairs = [(u, v) for v in range(readers + tasks) for u in range(v)]
    for i, (u, v) in enumerate(pairs):
        kind = _bits(graph, 2 + 2 * i, 2)
        if kind == 1:
            pipelined.append((u, v))
        elif kind == 2:
            blocking.append((u, v))
    return SourcesConfig(readers=readers, splits=splits, bounded=not f.unbounded, tasks=tasks,
                         pipelined=tuple(pipelined), blocking=tuple(blocking))


class _Drawing:
    """One schedule being drawn: the model, and the steps so far."""

    def __init__(self, f: Features, config: SourcesConfig):
        self.f, self.config = f, config
        self.model = Model(config)
        self.steps: list[Step] = []
        self.taken: dict[int, int] = {}  # checkpoint -> the step that took it
        self.notified: list[tuple[int, int]] = []  # (step, checkpoint) of each notification

    def apply(self, s: Step) -> None:
        if isinstance(s, CheckpointStep):
            self.taken[s.id] = len(self.steps)
        events = self.model.apply(len(self.steps), s)
        if isinstance(s, CompleteStep) and any(e.event == "committed" for e in events):
            self.notified.append((len(self.steps), s.id))
        self.steps.append(s)

    def exposed(self) -> bool:
        """Whether the tracker holds a bucket under a checkpoint after the restore point that was
        taken before the notification of an earlier one (SRC-17: it must stay, for a failure to give
        its splits back)."""
        last = self.model.last_completed if self.model.last_completed is not None else -1
        return any(k > last and any(n < k and at > self.taken[k] for at, n in self.notified)
                   for k in self.model.tracker)

    def options(self) -> list[tuple[int, Any]]:
        """(weight, step or step factory) of every valid next step; the plainest first."""
        m, f = self.model, self.f
        readers = range(m.parallelism)
        registered = [r for r in readers if m.readers[r].registered]
        unregistered = [r for r in readers if not m.readers[r].registered]
        out: list[tuple[int, Any]] = []
        out += [(8, RegisterStep(r)) for r in unregistered]
        out += [(4, RequestStep(r)) for r in registered]
        out += [(f.polls, lambda n, r=r: PollStep(r, 1 + n % 3)) for r in registered]
        out += [(1, AssignStep(r)) for r in (readers if f.global_failures else registered)]
        if not self.config.bounded:
            out.append((2, lambda n: DiscoverStep(n % (f.max_records + 1))))
        if f.checkpoints:
            if m.valve is not None:
                out.append((10, BarrierStep(m.valve)))
            elif not unregistered:
                next_id = len(m.checkpoints) + 1  # ids 1, 2, ... in the order they are taken
                out.append((6, lambda n: CheckpointStep(next_id, fails=n % 8 == 0)))
                if (f.silent or f.rescale) and any(m.readers[r].splits for r in registered):
                    out.append((4, lambda n: self.completed_checkpoint(next_id, n)))
            last = m.last_completed if m.last_completed is not None else -1
            notified = m.last_notified if m.last_notified is not None else -1
            for cid, cp in m.checkpoints.items():
                if cp.state == BARRIER and cid > last:
                    out.append((10, lambda n, c=cid: CompleteStep(c, notify=not (f.silent and n % 3 == 0))))
                if cp.state in (TAKEN, BARRIER):
                    out.append((3, AbortStep(cid)))
                if f.late and cp.state == COMPLETED and cid > notified:
                    # SRC-17: its notification, late; more often while a later checkpoint is pending
                    # (whose bucket must stay)
                    later = any(k > cid and c.state in (TAKEN, BARRIER) for k, c in m.checkpoints.items())
                    out.append((12 if later else 4, CompleteStep(cid)))
        # Failures three times as often while a checkpoint is pending (SRC-20: it is aborted) or
        # while the sinks hold records of a checkpoint completed without notification (SRC-29), and
        # eight times while a bucket is exposed to the notification of an earlier checkpoint (SRC-17
        # with SRC-21: about 0.1% of the area's schedules give such splits back, too few for a floor).
        pending = m.valve is not None or any(cp.state == BARRIER for cp in m.checkpoints.values())
        point = m.last_completed  # the restore point
        silent = point is not None and any(k <= point for reader in m.readers for k in reader.staged)
        fails = 8 if self.exposed() else 3 if pending or silent else 1
        if f.reader_failures or f.graph:
            tasks = registered + list(range(m.parallelism, m.parallelism + self.config.tasks))
            producers = sorted({e[0] for e in self.config.blocking})
            lost = lambda n: tuple(p for i, p in enumerate(producers) if n >> i & 1)  # noqa: E731
            out += [(fails, lambda n, t=t: FailStep(t, lost(n))) for t in tasks]
        if f.global_failures:
            out.append((fails, FailEnumeratorStep()))
        if f.rescale and not self.config.has_graph:
            out.append((3, lambda n: RescaleStep(self.parallelism_of(n))))
        return out

    def parallelism_of(self, n: int) -> int:
        """A parallelism to rescale to, the current one half as often as each other (SRC-31: the
        readers' states cut anew)."""
        p = 1 + n % self.f.max_readers
        return p % self.f.max_readers + 1 if p == self.model.parallelism and n >> 4 & 1 else p

    def completed_checkpoint(self, cid: int, n: int) -> list[Step]:
        """Checkpoint `cid` taken, its barrier passed, completed: a restore point holding the
        readers' unfinished splits (SRC-31).  With silent completions, every reader that owns a
        split reads first and the checkpoint completes without notification: its sinks hold
        staged records that only a restore commits (SRC-22, SRC-29)."""
        readers = [r for r in range(self.model.parallelism) if self.model.readers[r].splits]
        polls: list[Step] = [PollStep(r, 1 + n % 3) for r in readers] if self.f.silent else []
        return [*polls, CheckpointStep(cid), BarrierStep(cid), CompleteStep(cid, notify=not self.f.silent)]

    def step(self, n: int) -> Step | list[Step]:
        """The option `n` picks, weighted (a step, or the steps of a compound option)."""
        options = self.options()
        total = sum(w for w, _ in options)
        pick = n % total
        for weight, option in options:
            if pick < weight:
                return option(n >> 8) if callable(option) else option
            pick -= weight
        raise AssertionError("unreachable")

    def finish(self, end: bool) -> None:
        """Close the schedule with `end` (a pending barrier passes first)."""
        if not end:
            return
        if self.model.valve is not None:
            self.apply(BarrierStep(self.model.valve))
        self.apply(EndStep())


@st.composite
def schedules(draw: Any, f: Features, config: SourcesConfig | None = None) -> Schedule:
    """A valid sources schedule using the features."""
    if config is None:
        config = config_of(draw(CONFIG_BITS), f, draw(GRAPH_BITS) if f.graph else 0)
    d = _Drawing(f, config)
    for n in [n for chunk in draw(STEP_BITS) for n in chunk][: f.max_steps]:
        step = d.step(n)
        for s in step if isinstance(step, list) else [step]:
            d.apply(s)
    end = config.bounded and f.end and (f.always_end or draw(st.booleans()))
    d.finish(end)
    return Schedule(AREA, config, tuple(d.steps))


def feature_batches(f: Features, max_size: int = 12) -> st.SearchStrategy[list[Schedule]]:
    return batches(schedules(f), max_size)


# --------------------------------------------------------------------------
# Malformed schedules (SRC-40..SRC-46 and the shared SCH rules)
# --------------------------------------------------------------------------


def _with(base: Schedule, config: dict[str, Any] | None = None,
          steps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    d = base.to_dict()
    if config is not None:
        d["config"].update(config)
    if steps is not None:
        d["steps"] = steps
    return d


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
