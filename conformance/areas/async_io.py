"""The conformance part of the async I/O area: the checker's hooks and the generators' coverage states;
the strategies are in conformance/areas/async_io_strategies.py (re-exported here).

The checker's hooks (conformance/areas/__init__.py): `rules_for`, `rules_for_events` (the rule a
difference shows broken: conformance/areas/async_io_blame.py), and for FREE adapters
`free_checkable`, `order_graph`, `output_keys` and `FREE_MULTISETS`.  FREE checking is defined
only for schedules without timers and without checkpoints, crashes or restores (no timeout, no
retry, no checkpoint/crash/restore step), without errors or null results, and in which every
record completes once and input ends: there the outputs do not depend on when calls complete,
only on the order in which they do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import networkx as nx
from flink_semantics.conformance.areas.async_io_blame import rules_for_events
from flink_semantics.conformance.areas.async_io_strategies import (
    Features,
    config_schedules,
    default_capacity_schedules,
    feature_batches,
    malformed_schedules,
    record_states,
    schedules,
)
from flink_semantics.reference.async_io import BACKOFF, DONE, IN_FLIGHT, STALLED, AsyncIoModel
from flink_semantics.spec.areas.async_io import (
    CheckpointStep,
    CompleteStep,
    ErrorStep,
    RecordStep,
    RestoreStep,
    StatusStep,
    WatermarkStep,
    records,
)
from flink_semantics.spec.schedule import Event, Schedule, Step, validate_schedule

AREA = "async_io"
# The checker's hook (from async_io_blame) and the strategies (from async_io_strategies).
__all__ = ["Features", "config_schedules", "default_capacity_schedules", "feature_batches",
           "malformed_schedules", "record_states", "rules_for_events", "schedules"]

# --------------------------------------------------------------------------
# The checker's hooks
# --------------------------------------------------------------------------


def rules_for(schedule: Schedule, kinds: Sequence[str]) -> tuple[str, ...]:
    """The rules a divergence in these event kinds concerns (a hint for the report)."""
    mode = schedule.config.mode
    out: list[str] = []
    table = {
        "emit": ("AIO-12",) if mode == "ordered" else ("AIO-13", "AIO-14", "AIO-15"),
        "watermark": ("AIO-12", "AIO-15", "AIO-16", "AIO-17") if mode == "ordered"
        else ("AIO-13", "AIO-15", "AIO-16", "AIO-17"),
        "status": ("AIO-51",),
        # In ordered mode a slot is freed only when its element goes out in order (AIO-12).
        "invoke": ("AIO-6", "AIO-7", "AIO-9", "AIO-12") if mode == "ordered" else ("AIO-6", "AIO-7", "AIO-9"),
        "timeout": ("AIO-26", "AIO-27", "AIO-31"),
        "checkpoint": ("AIO-44", "AIO-45"),
        "fail": ("AIO-20", "AIO-23", "AIO-28"),
        "finished": ("AIO-42",),
        "rejected": ("AIO-1", "AIO-3"),
    }
    for k in kinds:
        for r in table.get(k, ()):
            if r not in out:
                out.append(r)
    return tuple(out)


def free_checkable(schedule: Schedule) -> bool:
    """Whether FREE checking is defined for this schedule (see the module docstring)."""
    c = schedule.config
    if c.timeout > 0 or c.retry is not None:
        return False
    if any(s.op in ("checkpoint", "crash", "restore") for s in schedule.steps):
        return False
    if any(isinstance(s, ErrorStep) or (isinstance(s, CompleteStep) and s.result is None)
           for s in schedule.steps):
        return False
    completed = Counter(s.record for s in schedule.steps if isinstance(s, CompleteStep))
    n_records = len(records(schedule))
    if any(completed[r] != 1 for r in range(n_records)):
        return False
    return any(s.op == "end" for s in schedule.steps)


Node = tuple  # ("emit", record, k) | ("watermark", i) | ("status", i)

# Compared as multisets against a FREE adapter (a checkpoint's snapshot depends on completion order).
FREE_MULTISETS = {"invoke": ("record", "attempt"), "fail": ("record", "reason"), "timeout": ("record",),
                  "checkpoint": ("id",), "finished": ()}


def output_keys(events: Sequence[Event]) -> list[Node]:
    """The node of each output: the k-th result of a record, the i-th watermark or status."""
    counts: Counter = Counter()
    out: list[Node] = []
    for e in events:
        key: tuple = ("emit", e.record) if e.event == "emit" else (e.event,)
        out.append((*key, counts[key]))
        counts[key] += 1
    return out


def _input_positions(steps: Sequence[Step]) -> dict[tuple, int]:
    """Position in the input of ("record", r), ("watermark", i) and ("status", i)."""
    pos: dict[tuple, int] = {}
    counts: Counter = Counter()
    for p, s in enumerate(steps):
        kind = {RecordStep: "record", WatermarkStep: "watermark", StatusStep: "status"}.get(type(s))
        if kind:
            pos[(kind, counts[kind])] = p
            counts[kind] += 1
    return pos


def _input_of(node: Node) -> tuple:
    return ("record", node[1]) if node[0] == "emit" else node


def order_graph(schedule: Schedule, outputs: Sequence[Event]) -> nx.DiGraph:
    """The partial order the rules allow on `outputs` (the reference's output events).

    Nodes are ("emit", record, k) for the k-th result of a record, ("watermark", i) and
    ("status", i) for the i-th output watermark or status; each node's `event` attribute is the
    expected event.  An edge u -> v with attribute `rule` means u must come before v.
    """
    g = nx.DiGraph()
    for key, e in zip(output_keys(outputs), outputs):
        if e.event == "emit":  # AIO-18: a record's results in one run, each with its value
            g.add_node(key, event=e, rules=("AIO-18",), run=(e.record, "AIO-18"))
        else:
            g.add_node(key, event=e)
    pos = _input_positions(schedule.steps)
    missing = [n for n in g if _input_of(n) not in pos]
    if missing:
        raise ValueError(f"outputs {missing} have no input element in the schedule")
    by_input = sorted(g.nodes, key=lambda n: (pos[_input_of(n)], n))

    def edge(u: Node, v: Node, rule: str) -> None:
        if not g.has_edge(u, v):
            g.add_edge(u, v, rule=rule)

    # AIO-18: a record's results in result order.
    for n in by_input:
        if n[0] == "emit" and n[2] > 0:
            edge(("emit", n[1], n[2] - 1), n, "AIO-18")
    queued = [n for n in by_input if n[0] != "status"]
    if schedule.config.mode == "ordered":
        # AIO-12: records and watermarks leave in input order.
        for u, v in zip(queued, queued[1:]):
            edge(u, v, "AIO-12")
    else:
        # AIO-13, AIO-15, AIO-17: watermarks in input order; a record neither overtakes a watermark
        # nor is overtaken by one; inside a segment any order (AIO-14: completion order, which a
        # FREE adapter does not control).
        marks = [n for n in queued if n[0] == "watermark"]
        for u, v in zip(marks, marks[1:]):
            edge(u, v, "AIO-17")
        for n in queued:
            if n[0] != "emit":
                continue
            before = [m for m in marks if pos[m] < pos[_input_of(n)]]
            after = [m for m in marks if pos[m] > pos[_input_of(n)]]
            if before:
                edge(before[-1], n, "AIO-15")
            if after:
                edge(n, after[0], "AIO-15")
    # AIO-51: a status bypasses the queue: it is emitted when it is taken from the input, so after
    # the statuses before it and before any output of a later input element.
    statuses = [n for n in by_input if n[0] == "status"]
    for u, v in zip(statuses, statuses[1:]):
        edge(u, v, "AIO-51")
    for s in statuses:
        for n in queued:
            if pos[_input_of(n)] > pos[s]:
                edge(s, n, "AIO-51")
    return g


# --------------------------------------------------------------------------
# Generator coverage (conformance/coverage.py)
# --------------------------------------------------------------------------

COMPLETED_BEHIND_HEAD = "ordered checkpoint with completed records behind an incomplete head"
SMALLER_RESTORE = "restore to a capacity below the snapshot's stored count"
AT_DEADLINE = "an outcome exactly at the record's timeout deadline"
END_DURING_BACKOFF = "end of input taken while a record waits for a retry"
RESTORED_COMPLETED = "restore of a snapshot holding records completed before it"
# Combinations (issue 32, item 6): two parts of the vocabulary at once, where their rules meet.
WAITED_TIMEOUT = "a timeout fires for a record admitted after it waited at a full queue"
STORED_IN_BACKOFF = "a checkpoint stores a record waiting for a retry"
ERROR_AFTER_TIMEOUT = "an error completes a record whose timeout the handler ignored"

# State -> floor: the least share of the area's distinct schedules that must reach it.  Measured
# with `pytest conformance/test_async_io.py conformance/test_coverage.py --adapter reference
# --areas async_io` (7172 schedules; the share in parentheses), each floor about half of it.  The
# shares move by a tenth or two when unrelated code changes: hypothesis draws literals of the
# project's modules too.
COVERAGE = {
    COMPLETED_BEHIND_HEAD: 0.007,  # (1.5%) test_checkpoint_and_restore, through `snapshot` intents
    SMALLER_RESTORE: 0.005,  # (1.0%) the same
    AT_DEADLINE: 0.006,  # (1.4%) test_timeouts, test_retries: `ignore`, advances to the next timer
    END_DURING_BACKOFF: 0.004,  # (0.8%) test_retries, test_checkpoint_and_restore
    RESTORED_COMPLETED: 0.007,  # (1.4%) test_checkpoint_and_restore
    # Combinations, measured the same way (7417 schedules):
    WAITED_TIMEOUT: 0.0025,  # (0.5%) AIO-59 with AIO-7: test_timeouts, test_retries (`advance`, input waits)
    STORED_IN_BACKOFF: 0.0013,  # (0.27%) AIO-41 with AIO-44: test_checkpoint_and_restore
    ERROR_AFTER_TIMEOUT: 0.004,  # (0.85%) AIO-30 with AIO-23: test_timeouts, test_checkpoint_and_restore
}


def coverage(schedule: Schedule) -> list[str]:
    """The rare states of async I/O a schedule reaches, from one run of the reference model (its
    state read between steps); none for a schedule the operator refuses or that is malformed.  A
    schedule without checkpoints, and without timeouts or retries, reaches none and is not run."""
    c = schedule.config
    if not (c.timeout > 0 or any(isinstance(s, CheckpointStep) for s in schedule.steps)):
        return []
    validate_schedule(schedule)  # ScheduleError: none (conformance/coverage.py)
    return _states(schedule)


def _states(schedule: Schedule) -> list[str]:
    c = schedule.config
    model = AsyncIoModel(c)
    found: set[str] = set()
    snapshots: dict[int, tuple[tuple[str, int], ...]] = {}
    completed: dict[int, bool] = {}  # checkpoint id -> its snapshot holds records complete when taken
    arrived: dict[int, int] = {}  # record -> the time it entered the input channel
    ignored: set[int] = set()  # records whose timeout the handler ignored, in this incarnation
    for i, s in enumerate(schedule.steps):
        states = record_states(model)
        if isinstance(s, RecordStep):
            arrived[len(arrived)] = model.now
        if isinstance(s, ErrorStep) and s.record in ignored and states.get(s.record) == IN_FLIGHT:
            found.add(ERROR_AFTER_TIMEOUT)  # AIO-30, then AIO-23
        if isinstance(s, RestoreStep):  # AIO-46: restored records enter the channel again
            ignored, arrived = set(), {r: model.now for r in arrived}
        done = {r for r, state in states.items() if state == DONE}
        waiting = BACKOFF in states.values() or STALLED in states.values()
        if isinstance(s, (CompleteStep, ErrorStep)) and c.timeout > 0 and states.get(s.record) == IN_FLIGHT:
            if model.now == model._admitted[s.record].admitted_at + c.timeout:  # AIO-30, AIO-33 (D5)
                found.add(AT_DEADLINE)
        if isinstance(s, RestoreStep) and s.checkpoint in snapshots:
            capacity = c.capacity if s.capacity is None else s.capacity
            if capacity < len(snapshots[s.checkpoint]):  # AIO-57
                found.add(SMALLER_RESTORE)
            if completed[s.checkpoint]:  # AIO-46
                found.add(RESTORED_COMPLETED)
        ended = model.ended
        for e in model.apply(i, s):
            if e.event == "timeout" and e.record in model._admitted:
                if model._admitted[e.record].admitted_at > arrived[e.record]:  # AIO-59, AIO-7
                    found.add(WAITED_TIMEOUT)
                if c.on_timeout == "ignore":
                    ignored.add(e.record)
            if e.event == "checkpoint" and any(states.get(x) in (BACKOFF, STALLED) for kind, x in e.snapshot
                                               if kind == "record"):
                found.add(STORED_IN_BACKOFF)  # AIO-41, AIO-44
            if e.event == "checkpoint":
                snapshots[e.id] = e.snapshot
                # AIO-44, AIO-45: records done before this step are complete when the barrier is
                # taken; in ordered mode the head is then incomplete (complete heads leave first).
                completed[e.id] = any(kind == "record" and x in done for kind, x in e.snapshot)
                if completed[e.id] and c.mode == "ordered":
                    found.add(COMPLETED_BEHIND_HEAD)
        if waiting and model.ended and not ended:  # AIO-39 (D2), AIO-60 (D3)
            found.add(END_DURING_BACKOFF)
    return sorted(found)
