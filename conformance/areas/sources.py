"""The conformance part of the sources and failover area: strategies, invariants, and the checker's hooks.

Strategies draw valid schedules step by step while the reference model runs them, so every step is
valid by construction (SRC-41, SRC-46).  `Features` says which parts of the vocabulary a property
uses; `Features.restrict` drops what an adapter cannot run.  Every step is one integer drawn by
hypothesis: shrinking it towards 0 picks the plainest valid step (register, request, poll), and
shrinking the list removes steps.  Some integers pick a compound option (`completed_checkpoint`),
and failures weigh more while a checkpoint is pending or unconfirmed, so that the states where
engines lose or repeat records are reached: `COVERAGE` and `coverage` name them and their floors
(conformance/coverage.py).

The checker's hooks (conformance/areas/__init__.py): this area's traces are compared exactly
(SCRIPTED); a FREE adapter cannot be checked on them (`free_checkable` is False), so every property
needs "scripted".

`exactly_once_problems` and `one_place_problems` state SRC-38 and SRC-16 on a trace directly, from
the schedule alone; the properties hold the oracle's traces to them, so the oracle cannot drift from
the invariants (an adapter is held to the oracle's traces, and so to them too).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
from flink_semantics.conformance.areas import (
    never_free,
    no_order_graph,
    no_output_keys,
    rules_from,
    sources_blame,
)
from flink_semantics.conformance.strategies import Malformed, batches
from flink_semantics.reference.sources import ABORTED, BARRIER, COMPLETED, TAKEN, Model, tasks_to_restart
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
    task_count,
)
from flink_semantics.spec.schedule import Schedule, Step, Trace, validate_schedule
from hypothesis import strategies as st

AREA = "sources"

# --------------------------------------------------------------------------
# The checker's hooks
# --------------------------------------------------------------------------

_RULES = {
    "registered": ("SRC-2", "SRC-5", "SRC-24", "SRC-25", "SRC-28", "SRC-31"),
    "assigned": ("SRC-8", "SRC-10", "SRC-13", "SRC-24"),
    "no_more_splits": ("SRC-6", "SRC-9", "SRC-10", "SRC-13", "SRC-32"),
    "record": ("SRC-39", "SRC-8"),
    "split_finished": ("SRC-33", "SRC-39"),
    "end_of_input": ("SRC-32",),
    "enumerator_checkpoint": ("SRC-11", "SRC-12"),
    "checkpoint_failed": ("SRC-19",),
    "reader_checkpoint": ("SRC-15", "SRC-13", "SRC-16"),
    "committed": ("SRC-17", "SRC-20", "SRC-29", "SRC-38"),
    "aborted": ("SRC-18", "SRC-20"),
    "splits_back": ("SRC-21", "SRC-22", "SRC-7", "SRC-11", "SRC-17", "SRC-18"),
    "reset": ("SRC-35", "SRC-36", "SRC-37"),
    "global_failover": ("SRC-4", "SRC-27", "SRC-28"),
    "finished": ("SRC-44",),
}


rules_for = rules_from(_RULES)  # the rules a divergence in these event kinds concerns
# Narrower: the rule the differing events show broken (conformance/areas/sources_blame.py).
rules_for_events = sources_blame.rules_for_events
# Every event of this area is placed by the schedule's steps: compared exactly, never FREE.
free_checkable, order_graph, output_keys = never_free, no_order_graph, no_output_keys
FREE_MULTISETS: dict[str, tuple[str, ...]] = {}


# --------------------------------------------------------------------------
# Invariants stated on a trace (SRC-16, SRC-38), and regions by networkx (SRC-35, SRC-36)
# --------------------------------------------------------------------------


def all_records(schedule: Schedule) -> Counter:
    """Every record of every split the schedule knows: its configuration's and its discoveries."""
    sizes = list(schedule.config.splits) + [s.records for s in schedule.steps if isinstance(s, DiscoverStep)]
    return Counter((split, offset) for split, n in enumerate(sizes) for offset in range(n))


def exactly_once_problems(schedule: Schedule, trace: Trace) -> list[str]:
    """SRC-38: no record committed twice, none that does not exist; after a `finished`, all of them."""
    committed = Counter(tuple(r) for e in trace.events if e.event == "committed" for r in e.records)
    known = all_records(schedule)
    problems = [f"record s{s}:{o} committed {n} times" for (s, o), n in sorted(committed.items()) if n > 1]
    problems += [f"record s{s}:{o} does not exist" for (s, o) in sorted(committed) if (s, o) not in known]
    if any(e.event == "finished" for e in trace.events):
        problems += [f"record s{s}:{o} never committed" for (s, o) in sorted(known)
                     if (s, o) not in committed]
    return problems


def one_place_problems(schedule: Schedule, trace: Trace) -> list[str]:
    """SRC-16, its duplication half: no split is in two snapshots of one checkpoint (the enumerator's
    and the readers'), and every split in one exists.  Its loss half shows at the end of a bounded
    job: a split in no snapshot is lost by a restore, and `exactly_once_problems` finds its records
    never committed."""
    discovered = sum(isinstance(s, DiscoverStep) for s in schedule.steps)
    known = set(range(len(schedule.config.splits) + discovered))
    places: dict[int, Counter] = {}
    for e in trace.events:
        if e.event == "enumerator_checkpoint":
            places[e.id] = Counter(e.splits)
        elif e.event == "reader_checkpoint":
            places.setdefault(e.id, Counter()).update(split for split, _ in e.splits)
    problems = []
    for cid, counts in sorted(places.items()):
        problems += [f"checkpoint {cid}: split s{s} is in {n} snapshots"
                     for s, n in sorted(counts.items()) if n > 1]
        problems += [f"checkpoint {cid}: split s{s} does not exist" for s in sorted(counts) if s not in known]
    return problems


def networkx_restart_set(config: SourcesConfig, failed: int, lost: Sequence[int]) -> list[int]:
    """SRC-35, SRC-36 computed with networkx, independently of the reference model: regions are the
    connected components of the pipelined edges, merged along the strongly connected components of
    the graph of regions; the restart set is closed under 'consumer of a restarted region' and
    'producer of a lost input of a restarted region'."""
    n = task_count(config)
    pipelined = nx.Graph()
    pipelined.add_nodes_from(range(n))
    pipelined.add_edges_from(tuple(e) for e in config.pipelined)
    components = list(nx.connected_components(pipelined))
    comp_of = {t: i for i, c in enumerate(components) for t in c}
    between = nx.DiGraph()
    between.add_nodes_from(range(len(components)))
    between.add_edges_from((comp_of[u], comp_of[v]) for u, v in config.blocking if comp_of[u] != comp_of[v])
    region_of = {}
    for scc in nx.strongly_connected_components(between):
        region = frozenset(t for c in scc for t in components[c])
        region_of.update({t: region for t in region})
    deps = nx.DiGraph()  # region -> region that must restart with it
    deps.add_nodes_from(set(region_of.values()))
    for u, v in config.blocking:
        ru, rv = region_of[u], region_of[v]
        if ru != rv:
            deps.add_edge(ru, rv)  # a consumer restarts with its producer
            if u in lost:
                deps.add_edge(rv, ru)  # a lost input's producer restarts with its consumer
    start = region_of[failed]
    return sorted(t for r in {start} | nx.descendants(deps, start) for t in r)


# --------------------------------------------------------------------------
# Generator coverage (conformance/coverage.py)
# --------------------------------------------------------------------------

FAIL_AFTER_ABORT = "reader failure returning splits tracked under an aborted checkpoint"
REASSIGNED = "a split returned by a failover assigned again before end"
REGION_PENDING = "region failover of several tasks while a checkpoint is pending"
SILENT_CONFIRMED = "a failover committing a checkpoint completed without notification"
RESCALED_STATE = "a rescale redistributing the readers' unfinished splits"
LATE_NOTIFIED = "a late notification committing records after a later checkpoint was taken"
# Combinations (issue 32, item 6): two rare states met in one schedule, where one rule's mistake
# shows only through the other's.
PUSH_BEFORE_REGISTER = ("a push to a reader that was registered before a global failover and has not "
                        "registered since")  # SRC-5 with SRC-4
NO_MORE_AGAIN = "NoMoreSplits reaching a new attempt of a reader whose failed attempt had it"  # SRC-25, SRC-9

# State -> floor: the least share of the area's distinct schedules that must reach it.  Measured
# with `pytest conformance --adapter reference --areas sources` (4770 schedules; the share in
# parentheses), each floor about half of it (the first six were set at 4817 schedules, before the
# combinations: their shares then were 2.7%, 6.8%, 3.1%, 4.4%, 2.3%, 2.1%).
COVERAGE = {
    FAIL_AFTER_ABORT: 0.012,  # (3.0%) test_reader_failover, test_region_failover, ...
    REASSIGNED: 0.03,  # (6.3%)
    REGION_PENDING: 0.015,  # (3.1%) test_region_failover: failures weigh more while one is pending
    SILENT_CONFIRMED: 0.02,  # (3.0%) test_*_failover, test_exactly_once: `completed_checkpoint`
    RESCALED_STATE: 0.011,  # (2.5%) test_rescale, test_exactly_once
    LATE_NOTIFIED: 0.01,  # (3.3%) test_checkpoints, test_*_failover, test_exactly_once: `late`
    PUSH_BEFORE_REGISTER: 0.02,  # (4.2%) test_global_failover, test_unbounded_sources, test_exactly_once
    NO_MORE_AGAIN: 0.07,  # (14.4%) test_*_failover, test_rescale, test_exactly_once
}

_FAILOVERS = (FailStep, FailEnumeratorStep, RescaleStep, AssignStep)


def coverage(schedule: Schedule) -> list[str]:
    """The rare states of sources and failover a schedule reaches, from one run of the reference
    model (its coordinator's state read between steps); none for a malformed schedule.  Without a
    failure or a rescale, only a failover after a completion without notification, or that
    completion's late notification, can reach one; other schedules are not run."""
    steps = schedule.steps
    silent = {s.id for s in steps if isinstance(s, CompleteStep) and not s.notify}
    late = any(isinstance(s, CompleteStep) and s.notify and s.id in silent for s in steps)
    if not late and not any(isinstance(s, (FailStep, RescaleStep, FailEnumeratorStep))
                            or silent and isinstance(s, _FAILOVERS) for s in steps):
        return []
    validate_schedule(schedule)  # ScheduleError: none (conformance/coverage.py)
    return _states(schedule)


def _states(schedule: Schedule) -> list[str]:
    config = schedule.config
    model = Model(config)
    found: set[str] = set()
    returned: set[int] = set()  # splits a failover gave back to the enumerator
    told: set[int] = set()  # readers whose failed attempt had NoMoreSplits
    dropped: set[int] = set()  # readers registered before a global failover, not since
    for i, s in enumerate(schedule.steps):
        if isinstance(s, FailStep):
            restart = tasks_to_restart(config, s.task, s.lost) if config.has_graph else [s.task]
            readers = [t for t in restart if t < model.parallelism]
            last = model.last_completed
            after = {cid: bucket for cid, bucket in model.tracker.items() if last is None or cid > last}
            if any(model.checkpoints[cid].state == ABORTED and any(bucket.get(r) for r in readers)
                   for cid, bucket in after.items()):
                found.add(FAIL_AFTER_ABORT)  # SRC-18, SRC-21
            pending = any(cp.state in (TAKEN, BARRIER) for cp in model.checkpoints.values())
            if config.has_graph and len(restart) > 1 and pending:
                found.add(REGION_PENDING)  # SRC-20, SRC-36, SRC-37
        late = False
        if isinstance(s, CompleteStep):
            done = model.checkpoints.get(s.id)
            later = any(cid > s.id for cid in model.checkpoints)
            late = done is not None and done.state == COMPLETED and later
        if isinstance(s, RescaleStep) and model.last_completed is not None:
            cp = model.checkpoints[model.last_completed]
            if cp.parallelism != s.readers and any(cp.readers.values()):
                found.add(RESCALED_STATE)  # SRC-31
        if isinstance(s, AssignStep) and s.reader in dropped:
            found.add(PUSH_BEFORE_REGISTER)  # SRC-5, SRC-4
        had = {r for r, reader in enumerate(model.readers) if reader.no_more}
        running = {r for r, reader in enumerate(model.readers) if reader.registered}
        for e in model.apply(i, s):
            if e.event == "reset":
                told |= had & set(e.tasks)
            elif e.event == "global_failover":
                told |= had
                dropped = running | dropped
            elif e.event == "registered":
                dropped.discard(e.reader)
            elif e.event == "no_more_splits" and e.reader in told:
                found.add(NO_MORE_AGAIN)  # SRC-25, SRC-9
            elif e.event == "splits_back":
                returned.update(e.splits)
            elif e.event == "assigned" and e.split in returned and not isinstance(s, EndStep):
                found.add(REASSIGNED)  # SRC-24
            elif e.event == "committed" and isinstance(s, _FAILOVERS) and e.records:
                found.add(SILENT_CONFIRMED)  # SRC-29
            elif e.event == "committed" and late and e.records:
                found.add(LATE_NOTIFIED)  # SRC-17
    return sorted(found)


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
