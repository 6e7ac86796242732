"""The conformance part of the sources and failover area: strategies, invariants, and the checker's hooks.

Strategies (conformance/areas/sources_strategies.py; `Features`, `schedules`, `feature_batches` and
`malformed_schedules` re-exported here) draw valid schedules step by step while the reference model
runs them, so every step is valid by construction (SRC-41, SRC-46), and reach the states where
engines lose or repeat records: `COVERAGE` and `coverage` name them and their floors
(conformance/coverage.py).

The checker's hooks (conformance/areas/__init__.py): this area's traces are compared exactly
(SCRIPTED), up to the order of a rescaled reader's blocks (SRC-31's freedom, `legal_reference`); a
FREE adapter cannot be checked on them (`free_checkable` is False), so every property needs
"scripted".

`exactly_once_problems` and `one_place_problems` state SRC-38 and SRC-16 on a trace directly, from
the schedule alone; the properties hold the oracle's traces to them, so the oracle cannot drift from
the invariants (an adapter is held to the oracle's traces, and so to them too).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import networkx as nx
from flink_semantics.conformance.areas import (
    never_free,
    no_order_graph,
    no_output_keys,
    rules_from,
    sources_blame,
    sources_orders,
)
from flink_semantics.conformance.areas.sources_strategies import (  # noqa: F401 (re-exported)
    Features,
    feature_batches,
    malformed_schedules,
    schedules,
)
from flink_semantics.reference.sources import ABORTED, BARRIER, COMPLETED, TAKEN, Model, tasks_to_restart
from flink_semantics.spec.areas.sources import (
    AssignStep,
    CompleteStep,
    DiscoverStep,
    EndStep,
    FailEnumeratorStep,
    FailStep,
    RescaleStep,
    SourcesConfig,
    task_count,
)
from flink_semantics.spec.schedule import Schedule, Trace, validate_schedule

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
# SRC-31's freedom: the order of a restored reader's blocks (conformance/areas/sources_orders.py).
legal_reference = sources_orders.legal_reference
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
