"""A FLIP-27 source as the engine runs it: enumerator, tracker, coordinator, readers, sinks, regions.

Flink's parts, in the same shape, standard library and networkx only (no pyspark, no `reference`):

* `SplitEnumerator`: the unassigned splits, first in first out (spec C1), NoMoreSplits for a
  bounded source (SRC-9, SRC-10), waiting requests for an unbounded one (SRC-42);
* `AssignmentTracker`: Flink's `SplitAssignmentTracker` (SRC-7, SRC-11, SRC-17, SRC-18, SRC-21);
* `SourceCoordinator`: the registry of reader attempts, the context the enumerator assigns through
  (SRC-4: never to an unregistered reader), and the event valve (SRC-13);
* `SourceReader`: one attempt of a reader subtask, reading one split at a time (SRC-39, SRC-33);
* `CommittingSink`: a two-phase-commit sink chained to a reader (SRC-38);
* `restart_set`: the tasks a failure restarts, on the job graph in Spark's terms (SRC-35, SRC-36);
* `redistribute`: the readers' split states cut for a new parallelism (SRC-31).

Both the conformance run (conformance.py) and the Structured Streaming source (stream.py) use them.
Each part turns into JSON and back (`to_json` / `from_json`, string-free of int keys, so that a
state written to a Spark checkpoint reads back equal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Position = tuple[int, int]  # (split, position) in a reader's state; (split, offset) of a record
Emit = Callable[..., None]  # emit(kind, **fields): an event of the trace
Deliver = Callable[[int, str, "int | None"], None]  # deliver(reader, "split" | "no_more", split)


class GlobalFailure(Exception):
    """Something only a global failover recovers from (SRC-4, SRC-27, SRC-31); `cause` names it."""

    def __init__(self, cause: str):
        super().__init__(cause)
        self.cause = cause


def _pairs(d: dict[int, Any]) -> list[list[Any]]:
    """{int: v} -> [[k, v], ...]: JSON object keys are strings, pairs keep the ints."""
    return [[k, v] for k, v in d.items()]


# --------------------------------------------------------------------------
# The split enumerator and the assignment tracker
# --------------------------------------------------------------------------


@dataclass
class SplitEnumerator:
    """Hands out unassigned splits in the order it came to know them (spec C1)."""

    unassigned: list[int]
    discovered: int  # splits 0..discovered-1 are known to it (SRC-42)
    bounded: bool
    signalled: set[int] = field(default_factory=set)  # readers told NoMoreSplits (SRC-9)

    def handle_split_request(self, reader: int, ctx: SourceCoordinator) -> None:
        """SRC-6: a request after NoMoreSplits is dropped; SRC-10: a bounded source with nothing
        left answers NoMoreSplits; an unbounded one keeps the request unanswered (SRC-42)."""
        if reader in self.signalled:
            return
        if self.unassigned:
            ctx.assign_split(self.unassigned.pop(0), reader)
        elif self.bounded:
            self.signalled.add(reader)
            ctx.signal_no_more_splits(reader)

    def push(self, reader: int, ctx: SourceCoordinator) -> None:
        """An assignment the enumerator makes unasked (SRC-4): its next split, unless it told the
        reader there are no more."""
        if reader not in self.signalled and self.unassigned:
            ctx.assign_split(self.unassigned.pop(0), reader)

    def add_splits_back(self, splits: Sequence[int], reader: int) -> None:
        """SRC-21, SRC-24: returned splits are unassigned again, for any reader; the reader's
        NoMoreSplits is forgotten (its new attempt asks again)."""
        self.signalled.discard(reader)
        self.unassigned += splits

    def discover(self, known: int) -> None:
        """SRC-42: every split the external system has that the enumerator has not seen yet."""
        self.unassigned += range(self.discovered, known)
        self.discovered = max(self.discovered, known)

    def snapshot(self) -> dict[str, Any]:
        """SRC-12: the unassigned splits (and how many it knows); not whom it signalled."""
        return {"unassigned": list(self.unassigned), "discovered": self.discovered}

    @classmethod
    def restore(cls, snapshot: dict[str, Any], bounded: bool) -> SplitEnumerator:
        return cls(list(snapshot["unassigned"]), snapshot["discovered"], bounded)

    def to_json(self) -> dict[str, Any]:
        return {**self.snapshot(), "bounded": self.bounded, "signalled": sorted(self.signalled)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SplitEnumerator:
        return cls(list(d["unassigned"]), d["discovered"], d["bounded"], set(d["signalled"]))


@dataclass
class AssignmentTracker:
    """Assignments not yet covered by a completed checkpoint (Flink's SplitAssignmentTracker)."""

    uncheckpointed: dict[int, list[int]] = field(default_factory=dict)  # reader -> splits (SRC-7)
    by_checkpoint: dict[int, dict[int, list[int]]] = field(default_factory=dict)  # id -> reader -> splits

    def record_assignment(self, reader: int, split: int) -> None:
        bucket = self.uncheckpointed.setdefault(reader, [])
        if split not in bucket:
            bucket.append(split)

    def on_checkpoint(self, id: int) -> None:
        """SRC-11: the uncheckpointed buckets move under the checkpoint's id."""
        moved = {r: b for r, b in self.uncheckpointed.items() if b}
        if moved:
            self.by_checkpoint.setdefault(id, {}).update(moved)
        self.uncheckpointed = {}

    def on_checkpoint_complete(self, id: int) -> None:
        """SRC-17: entries under ids up to N are covered by the reader states of N; those under later
        ids are not, also when N's notification comes late, after later checkpoints were taken."""
        self.by_checkpoint = {k: v for k, v in self.by_checkpoint.items() if k > id}

    # SRC-18: an aborted checkpoint changes nothing here (no method).

    def splits_to_add_back(self, reader: int, restored: int | None) -> list[int]:
        """SRC-21, SRC-22: the reader's splits under ids after the restore point (every id when
        there is none), in id order, then its uncheckpointed bucket; removed from the tracker."""
        back = [s for k in sorted(self.by_checkpoint) if restored is None or k > restored
                for s in self.by_checkpoint[k].pop(reader, [])]
        back += self.uncheckpointed.pop(reader, [])
        self.by_checkpoint = {k: v for k, v in self.by_checkpoint.items() if v}
        return back

    def to_json(self) -> dict[str, Any]:
        return {"uncheckpointed": _pairs(self.uncheckpointed),
                "by_checkpoint": [[k, _pairs(v)] for k, v in self.by_checkpoint.items()]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AssignmentTracker:
        return cls({r: list(b) for r, b in d["uncheckpointed"]},
                   {k: {r: list(b) for r, b in v} for k, v in d["by_checkpoint"]})


# --------------------------------------------------------------------------
# Readers and sinks
# --------------------------------------------------------------------------


@dataclass
class CommittingSink:
    """Two-phase commit (SRC-38): records before barrier N are staged under N and committed when
    checkpoint N is confirmed; what a failed attempt had not staged is gone with it."""

    pending: list[Position] = field(default_factory=list)
    staged: dict[int, list[Position]] = field(default_factory=dict)

    def write(self, record: Position) -> None:
        self.pending.append(record)

    def prepare_commit(self, id: int) -> None:
        self.staged[id], self.pending = self.pending, []

    def commit(self, up_to: int | None) -> list[Position]:
        """The staged records of every checkpoint up to `up_to` (none when None), out of the sink."""
        out: list[Position] = []
        for k in sorted(self.staged):
            if up_to is not None and k <= up_to:
                out += self.staged.pop(k)
        return out

    def flush(self) -> list[Position]:
        """End of input: everything, staged or not."""
        out = [p for k in sorted(self.staged) for p in self.staged[k]] + self.pending
        self.staged, self.pending = {}, []
        return out

    def to_json(self) -> dict[str, Any]:
        return {"pending": self.pending, "staged": _pairs(self.staged)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CommittingSink:
        return cls([(s, o) for s, o in d["pending"]], {k: [(s, o) for s, o in v] for k, v in d["staged"]})


@dataclass
class SourceReader:
    """One attempt of a reader subtask, with the sink chained to it."""

    restored: list[Position] = field(default_factory=list)  # its share of the restored state
    registered: bool = False
    splits: list[list[int]] = field(default_factory=list)  # owned, unfinished: [split, position]
    no_more: bool = False  # NoMoreSplits arrived
    ended: bool = False  # END_OF_INPUT reported
    sink: CommittingSink = field(default_factory=CommittingSink)

    def open(self) -> list[Position]:
        """SRC-2: the restored splits are added to the reader before it registers."""
        self.splits = [[s, p] for s, p in self.restored]
        self.restored = []
        self.registered = True
        return [(s, p) for s, p in self.splits]

    def add_split(self, split: int) -> None:
        self.splits.append([split, 0])  # SRC-8: from its start

    def poll(self, budget: int, sizes: Sequence[int], reader: int, emit: Emit) -> None:
        """SRC-39: the splits in the order the reader got them, records in offset order; SRC-33: a
        split is finished, and leaves the state, as soon as its last record is read."""
        while self.splits:
            split, position = self.splits[0]
            if position >= sizes[split]:
                self.splits.pop(0)
                emit("split_finished", reader=reader, split=split)
                continue
            if budget == 0:
                break
            emit("record", reader=reader, split=split, offset=position)
            self.sink.write((split, position))
            self.splits[0][1] += 1
            budget -= 1
        self.check_end(reader, emit)

    def remaining(self, sizes: Sequence[int]) -> int:
        return sum(sizes[s] - p for s, p in self.splits)

    def check_end(self, reader: int, emit: Emit) -> None:
        """SRC-32: END_OF_INPUT once NoMoreSplits arrived and every owned split is finished."""
        if self.no_more and not self.splits and not self.ended:
            self.ended = True
            emit("end_of_input", reader=reader)

    def snapshot(self) -> list[Position]:
        """SRC-15: every owned, unfinished split with its position."""
        return [(s, p) for s, p in self.splits]

    def to_json(self) -> dict[str, Any]:
        return {"restored": self.restored, "registered": self.registered, "splits": self.splits,
                "no_more": self.no_more, "ended": self.ended, "sink": self.sink.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SourceReader:
        return cls([(s, p) for s, p in d["restored"]], d["registered"], [list(x) for x in d["splits"]],
                   d["no_more"], d["ended"], CommittingSink.from_json(d["sink"]))


# --------------------------------------------------------------------------
# The coordinator
# --------------------------------------------------------------------------


class SourceCoordinator:
    """The enumerator's context: the registry, the tracker and the valve (Flink's SourceCoordinator
    and SourceCoordinatorContext).  `deliver(reader, kind, split)` hands an event to the reader."""

    def __init__(self, enumerator: SplitEnumerator, deliver: Deliver,
                 tracker: AssignmentTracker | None = None, registered: set[int] | None = None,
                 valve: int | None = None, held: dict[int, list[list[Any]]] | None = None):
        self.enumerator = enumerator
        self.tracker = tracker or AssignmentTracker()
        self.registered = registered or set()
        self.valve = valve  # the checkpoint whose reader snapshots are awaited (SRC-13)
        self.held = held or {}  # reader -> events behind the valve, [kind, split]
        self.deliver = deliver

    # ---- the context the enumerator uses ---------------------------------------------

    def assign_split(self, split: int, reader: int) -> None:
        """SRC-4: an assignment to a reader that has not registered fails the job; SRC-7: tracked."""
        if reader not in self.registered:
            raise GlobalFailure("unregistered")
        self.tracker.record_assignment(reader, split)
        self.send(reader, "split", split)

    def signal_no_more_splits(self, reader: int) -> None:
        self.send(reader, "no_more", None)

    def send(self, reader: int, kind: str, split: int | None) -> None:
        """SRC-13: after checkpoint N, events wait until the reader has taken its snapshot for N."""
        if self.valve is not None:
            self.held.setdefault(reader, []).append([kind, split])
        else:
            self.deliver(reader, kind, split)

    # ---- the reader side ---------------------------------------------------------------

    def register(self, reader: int) -> None:
        self.registered.add(reader)

    def request(self, reader: int) -> None:
        self.enumerator.handle_split_request(reader, self)

    def subtask_reset(self, reader: int, restored: int | None) -> list[int]:
        """SRC-20..SRC-23: the attempt is gone (unregistered, its held events dropped); the splits
        assigned to it after the restore point go back to the enumerator."""
        self.registered.discard(reader)
        self.held.pop(reader, None)
        back = self.tracker.splits_to_add_back(reader, restored)
        self.enumerator.add_splits_back(back, reader)
        return back

    # ---- checkpoints -------------------------------------------------------------------

    def checkpoint(self, id: int) -> dict[str, Any]:
        """SRC-11, SRC-12: the tracker first, then the enumerator's snapshot; the valve closes."""
        self.tracker.on_checkpoint(id)
        return self.enumerator.snapshot()

    def close_valve(self, id: int) -> None:
        self.valve = id

    def open_valve(self) -> None:
        """The held events go out, reader by reader in index order (spec C3)."""
        self.valve = None
        held, self.held = self.held, {}
        for reader in sorted(held):
            for kind, split in held[reader]:
                self.deliver(reader, kind, split)

    def to_json(self) -> dict[str, Any]:
        return {"enumerator": self.enumerator.to_json(), "tracker": self.tracker.to_json(),
                "registered": sorted(self.registered), "valve": self.valve, "held": _pairs(self.held)}

    @classmethod
    def from_json(cls, d: dict[str, Any], deliver: Deliver) -> SourceCoordinator:
        return cls(SplitEnumerator.from_json(d["enumerator"]), deliver,
                   AssignmentTracker.from_json(d["tracker"]), set(d["registered"]), d["valve"],
                   {r: list(h) for r, h in d["held"]})


# --------------------------------------------------------------------------
# Rescaling and the job graph
# --------------------------------------------------------------------------


def redistribute(states: Sequence[Sequence[Position]], parallelism: int) -> list[list[Position]]:
    """SRC-31: the same parallelism gives each reader its own state back; another one cuts the
    states, concatenated in reader order, into contiguous parts whose sizes differ by at most one,
    the larger ones first (Flink's even split of union list state)."""
    if len(states) == parallelism:
        return [list(s) for s in states]
    union = [p for s in states for p in s]
    out = []
    for r in range(parallelism):  # part r: [r * n // p, (r + 1) * n // p) with the larger parts first
        size, extra = divmod(len(union), parallelism)
        start = r * size + min(r, extra)
        out.append(union[start:start + size + (1 if r < extra else 0)])
    return out


def restart_set(tasks: int, pipelined: Sequence[Sequence[int]], blocking: Sequence[Sequence[int]],
                failed: int, lost: Sequence[int]) -> list[int]:
    """SRC-35, SRC-36 in Spark's terms.  Tasks joined by pipelined (narrow) edges run in one
    stage; blocking edges are shuffles between stages; stages on a cycle of shuffles make one
    region.  A failure restarts its region, the regions downstream of a restarted one, and the
    region upstream whose shuffle output a restarted region reads and that is lost."""
    import networkx as nx  # here: the streaming source's planner and read tasks never need it

    narrow = nx.Graph()
    narrow.add_nodes_from(range(tasks))
    narrow.add_edges_from((u, v) for u, v in pipelined)
    stage_of = {t: i for i, stage in enumerate(nx.connected_components(narrow)) for t in stage}
    shuffles = nx.DiGraph()
    shuffles.add_nodes_from(set(stage_of.values()))
    shuffles.add_edges_from((stage_of[u], stage_of[v]) for u, v in blocking if stage_of[u] != stage_of[v])
    regions = nx.condensation(shuffles)  # the stages of a cycle merged into one region
    region_of = {t: regions.graph["mapping"][stage_of[t]] for t in range(tasks)}
    restart, todo = set(), [region_of[failed]]
    while todo:
        region = todo.pop()
        if region in restart:
            continue
        restart.add(region)
        todo += regions.successors(region)
        todo += [region_of[u] for u, v in blocking if region_of[v] == region and u in lost]
    return [t for t in range(tasks) if region_of[t] in restart]
