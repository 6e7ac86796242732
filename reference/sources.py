"""Reference model of the sources and failover area (spec/sources.md).

One coordinator (the split enumerator, the assignment tracker, the reader registry, the event valve),
one reader per source subtask with a sink chained to it that commits on checkpoint completion, and
the job graph's pipelined regions.  Single-threaded and deterministic: every step runs to the end
before the next (spec/schedules.md, item 4).  Rule IDs in comments name what each part implements.

Standard library and `spec` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    event,
    task_count,
)
from flink_semantics.spec.schedule import Event, ScheduleError, Step

Position = tuple[int, int]  # (split, position) in a reader's state; (split, offset) of a record

# --------------------------------------------------------------------------
# Pipelined regions (SRC-35, SRC-36)
# --------------------------------------------------------------------------


def pipelined_regions(n: int, pipelined: list[tuple[int, int]],
                      blocking: list[tuple[int, int]]) -> list[frozenset[int]]:
    """SRC-35: tasks joined by pipelined edges (in either direction) form a region; regions on a
    cycle of blocking edges between them are merged into one.  Sorted by their smallest task."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: int, b: int) -> None:
        parent[find(a)] = find(b)

    for u, v in pipelined:
        union(u, v)
    while True:  # merge the regions on a cycle until the graph of regions is acyclic
        cycle = _cycle({(find(u), find(v)) for u, v in blocking if find(u) != find(v)})
        if not cycle:
            break
        for r in cycle[1:]:
            union(cycle[0], r)
    groups: dict[int, set[int]] = {}
    for t in range(n):
        groups.setdefault(find(t), set()).add(t)
    return sorted((frozenset(g) for g in groups.values()), key=min)


def _cycle(edges: set[tuple[int, int]]) -> list[int]:
    """The nodes of some directed cycle of the graph, or [] (depth-first search)."""
    out: dict[int, list[int]] = {}
    for u, v in sorted(edges):
        out.setdefault(u, []).append(v)
    state: dict[int, int] = {}  # 1: on the path, 2: done
    path: list[int] = []

    def visit(u: int) -> list[int]:
        state[u] = 1
        path.append(u)
        for v in out.get(u, []):
            if state.get(v) == 1:
                return path[path.index(v):]
            if v not in state:
                found = visit(v)
                if found:
                    return found
        state[u] = 2
        path.pop()
        return []

    for u in sorted(out):
        if u not in state:
            found = visit(u)
            if found:
                return found
    return []


def tasks_to_restart(config: SourcesConfig, failed: int, lost: tuple[int, ...]) -> list[int]:
    """SRC-36: the failed task's region; every region consuming a result of a restarted region; the
    region producing a result that a restarted region consumes and that is lost."""
    pipelined = [(e[0], e[1]) for e in config.pipelined]
    blocking = [(e[0], e[1]) for e in config.blocking]
    regions = pipelined_regions(task_count(config), pipelined, blocking)
    region_of = {t: r for r in regions for t in r}
    restart: set[frozenset[int]] = set()
    visit = [region_of[failed]]
    while visit:
        region = visit.pop()
        if region in restart:
            continue
        restart.add(region)
        for u, v in blocking:
            if v in region and u not in region and u in lost:
                visit.append(region_of[u])  # a lost input is produced again
            if u in region and v not in region:
                visit.append(region_of[v])  # its consumers read the new result
    return sorted(t for r in restart for t in r)


# --------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------

TAKEN, BARRIER, COMPLETED, ABORTED = "taken", "barrier passed", "completed", "aborted"


@dataclass
class Checkpoint:
    id: int
    queue: list[int]  # the enumerator's state: unassigned splits in order (SRC-12)
    discovered: int  # how many splits the enumerator had discovered
    readers: dict[int, list[Position]] = field(default_factory=dict)  # each reader's state (SRC-15)
    parallelism: int = 0
    state: str = TAKEN


@dataclass
class Reader:
    """One reader subtask's current attempt, and the sink chained to it."""

    registered: bool = False
    restored: list[Position] = field(default_factory=list)  # handed to the reader when it opens
    splits: list[list[int]] = field(default_factory=list)  # owned, unfinished: [split, position]
    no_more: bool = False  # NoMoreSplits reached the reader
    ended: bool = False  # END_OF_INPUT reported
    held: list[tuple[str, int | None]] = field(default_factory=list)  # events behind the closed valve
    pending: list[Position] = field(default_factory=list)  # records since the last barrier
    staged: dict[int, list[Position]] = field(default_factory=dict)  # records before barrier N


def dealt_readers(cp: Checkpoint, parallelism: int) -> list[list[tuple[int, Position]]]:
    """SRC-31 at another parallelism: the readers' states concatenated in reader order and cut into
    contiguous parts, one per new reader, the larger ones first; each position with its old reader."""
    union = [(r, p) for r in range(cp.parallelism) for p in cp.readers.get(r, [])]
    base, extra = divmod(len(union), parallelism)
    out, start = [], 0
    for r in range(parallelism):
        size = base + (1 if r < extra else 0)
        out.append(union[start:start + size])
        start += size
    return out


class Model:
    def __init__(self, config: SourcesConfig):
        self.config = config
        self.sizes = list(config.splits)  # the external system: every split's record count
        self.parallelism = config.readers
        self.readers = [Reader() for _ in range(config.readers)]
        # The coordinator.
        self.queue = list(range(len(self.sizes)))  # the enumerator's unassigned splits
        self.discovered = len(self.sizes)
        self.no_more: set[int] = set()  # NoMoreSplits signalled (SRC-9)
        self.uncheckpointed: dict[int, list[int]] = {}  # the tracker (SRC-7, SRC-11)
        self.tracker: dict[int, dict[int, list[int]]] = {}
        self.valve: int | None = None  # the checkpoint whose barrier is awaited (SRC-13)
        self.checkpoints: dict[int, Checkpoint] = {}
        self.last_completed: int | None = None
        self.last_notified: int | None = None  # the last checkpoint whose completion was notified
        self.out: list[Event] = []
        self.step = 0
        # SRC-31's freedom: (checkpoint, new parallelism, new reader) -> the order of the old readers
        # whose states it holds; where not given, old reader order (the reference's choice).
        self.block_orders: dict[tuple[int, int, int], tuple[int, ...]] = {}

    # ---- the schedule --------------------------------------------------------------

    def apply(self, index: int, s: Step) -> list[Event]:
        self.step, self.out = index, []
        if isinstance(s, RegisterStep):
            self.register(s.reader)
        elif isinstance(s, RequestStep):
            self.running(s.reader, s)
            self.handle_request(s.reader)
        elif isinstance(s, AssignStep):
            self.push(s.reader)
        elif isinstance(s, DiscoverStep):
            self.discover(s.records)
        elif isinstance(s, PollStep):
            self.running(s.reader, s)
            self.poll(s.reader, s.records)
        elif isinstance(s, CheckpointStep):
            self.checkpoint(s)
        elif isinstance(s, BarrierStep):
            self.barrier(s)
        elif isinstance(s, CompleteStep):
            self.complete(s)
        elif isinstance(s, AbortStep):
            self.abort(s)
        elif isinstance(s, FailStep):
            self.fail(s)
        elif isinstance(s, FailEnumeratorStep):
            self.global_failover("enumerator")  # SRC-27
        elif isinstance(s, RescaleStep):
            self.global_failover("rescale", s.readers)  # SRC-31
        elif isinstance(s, EndStep):
            self.end(s)
        return self.out

    def emit(self, kind: str, **kw: object) -> None:
        self.out.append(event(self.step, kind, **kw))

    def refuse(self, rule: str, message: str, s: Step) -> None:
        raise ScheduleError(self.step, rule, message, s.op)

    def running(self, r: int, s: Step) -> None:
        if not self.readers[r].registered:
            self.refuse("SRC-41", f"reader {r} is not running: it has not registered since it started", s)

    # ---- readers ---------------------------------------------------------------------

    def register(self, r: int) -> None:
        """SRC-2: the restored splits go to the reader first, then it registers (SRC-25)."""
        reader = self.readers[r]
        if reader.registered:
            self.refuse("SRC-41", f"reader {r} is already registered", RegisterStep(r))
        reader.registered = True
        reader.splits = [[s, p] for s, p in reader.restored]
        reader.restored = []
        self.emit("registered", reader=r, splits=[tuple(x) for x in reader.splits])

    def poll(self, r: int, budget: int) -> None:
        """SRC-39: one split at a time, in the order the reader got them, records in offset order;
        SRC-33: a split ends as soon as its last record is read and leaves the reader's state."""
        reader = self.readers[r]
        while reader.splits:
            split, position = reader.splits[0]
            if position >= self.sizes[split]:
                reader.splits.pop(0)
                self.emit("split_finished", reader=r, split=split)
                continue
            if budget == 0:
                break
            self.emit("record", reader=r, split=split, offset=position)
            reader.pending.append((split, position))
            reader.splits[0][1] += 1
            budget -= 1
        self.maybe_end(r)

    def maybe_end(self, r: int) -> None:
        """SRC-32: END_OF_INPUT once NoMoreSplits arrived and every owned split is finished."""
        reader = self.readers[r]
        if reader.no_more and not reader.splits and not reader.ended:
            reader.ended = True
            self.emit("end_of_input", reader=r)

    def deliver(self, r: int, kind: str, split: int | None) -> None:
        """An event reaches reader r (SRC-8, SRC-9)."""
        reader = self.readers[r]
        if kind == "split":
            assert split is not None
            reader.splits.append([split, 0])
            self.emit("assigned", reader=r, split=split)
        else:
            reader.no_more = True
            self.emit("no_more_splits", reader=r)
            self.maybe_end(r)

    def send(self, r: int, kind: str, split: int | None = None) -> None:
        """SRC-13: events sent after coordinator checkpoint N wait until the reader has taken its
        snapshot for N."""
        if self.valve is not None:
            self.readers[r].held.append((kind, split))
        else:
            self.deliver(r, kind, split)

    def open_valve(self) -> None:
        self.valve = None
        for r, reader in enumerate(self.readers):
            held, reader.held = reader.held, []
            for kind, split in held:
                self.deliver(r, kind, split)

    # ---- the coordinator and the enumerator ------------------------------------------

    def assign(self, r: int) -> None:
        """Assign the enumerator's next split to reader r (SRC-4, SRC-7)."""
        if not self.readers[r].registered:
            self.global_failover("unregistered")  # SRC-4: the job fails
            return
        split = self.queue.pop(0)
        bucket = self.uncheckpointed.setdefault(r, [])
        if split not in bucket:
            bucket.append(split)
        self.send(r, "split", split)

    def handle_request(self, r: int) -> None:
        """SRC-6, SRC-10: a request is dropped after NoMoreSplits; otherwise the next split, or
        NoMoreSplits when a bounded source has none left, or nothing (an unbounded source)."""
        if r in self.no_more:
            return
        if self.queue:
            self.assign(r)
        elif self.config.bounded:
            self.no_more.add(r)  # SRC-9
            self.send(r, "no_more")

    def push(self, r: int) -> None:
        """The enumerator assigns its next split to r unasked, unless it signalled NoMoreSplits to r."""
        if r not in self.no_more and self.queue:
            self.assign(r)

    def discover(self, records: int) -> None:
        """SRC-42: a new split appears; the enumerator takes every split it has not discovered yet."""
        self.sizes.append(records)
        self.queue += range(self.discovered, len(self.sizes))
        self.discovered = len(self.sizes)

    # ---- checkpoints -----------------------------------------------------------------

    def checkpoint(self, s: CheckpointStep) -> None:
        """SRC-11: the tracker's bucket moves under N, then the enumerator is snapshotted; SRC-19."""
        if not all(reader.registered for reader in self.readers):
            self.refuse("SRC-46", "a checkpoint needs every reader running (registered)", s)
        if self.valve is not None:
            self.refuse("SRC-46", f"checkpoint {self.valve} still awaits its barrier", s)
        for r, bucket in self.uncheckpointed.items():
            if bucket:
                self.tracker.setdefault(s.id, {})[r] = bucket
        self.uncheckpointed = {}
        cp = Checkpoint(s.id, list(self.queue), self.discovered, parallelism=self.parallelism)
        self.checkpoints[s.id] = cp
        if s.fails:  # SRC-19: the checkpoint fails, the job goes on
            cp.state = ABORTED
            self.emit("checkpoint_failed", id=s.id)
            return
        self.emit("enumerator_checkpoint", id=s.id, splits=list(cp.queue))
        self.valve = s.id

    def pending(self, id_: int, states: tuple[str, ...], s: Step, what: str) -> Checkpoint:
        cp = self.checkpoints.get(id_)
        if cp is None or cp.state not in states:
            self.refuse("SRC-46", f"checkpoint {id_} is not {what}", s)
        assert cp is not None
        return cp

    def barrier(self, s: BarrierStep) -> None:
        """SRC-15: each reader stores its unfinished splits with their positions; the sink stages
        the records before the barrier; then the valve opens (SRC-13)."""
        if self.valve != s.id:
            self.refuse("SRC-46", f"checkpoint {s.id} does not await its barrier", s)
        cp = self.checkpoints[s.id]
        for r, reader in enumerate(self.readers):
            cp.readers[r] = [(split, pos) for split, pos in reader.splits]
            self.emit("reader_checkpoint", id=s.id, reader=r, splits=list(cp.readers[r]))
            reader.staged[s.id] = reader.pending
            reader.pending = []
        cp.state = BARRIER
        self.open_valve()

    def complete(self, s: CompleteStep) -> None:
        """SRC-46: a checkpoint whose barrier passed completes (not one older than the last completed:
        completing N subsumes every earlier one); one that completed without notification gets its
        notification late, at most once and in id order (SRC-17)."""
        cp = self.pending(s.id, (BARRIER, COMPLETED), s,
                          "awaiting completion (taken, barrier passed, not aborted) nor completed")
        if cp.state == COMPLETED:
            self.late_notification(s)
            return
        if self.last_completed is not None and s.id < self.last_completed:
            self.refuse("SRC-46", f"checkpoint {self.last_completed} completed after it", s)
        cp.state = COMPLETED
        self.last_completed = s.id
        if s.notify:
            self.notify_complete(s.id)

    def late_notification(self, s: CompleteStep) -> None:
        """SRC-17, SRC-46: checkpoint N completed earlier without notification; its notification
        arrives now, whatever happened since (later checkpoints taken, completed or aborted,
        failovers), unless a notification of N or of a later checkpoint came first: Flink notifies
        each completed checkpoint once, in completion order."""
        if not s.notify:
            self.refuse("SRC-46", f"checkpoint {s.id} has completed: a completion without notification "
                        "says nothing more", s)
        if self.last_notified is not None and s.id <= self.last_notified:
            what = "again" if s.id == self.last_notified else f"after that of checkpoint {self.last_notified}"
            self.refuse("SRC-46", f"the completion of checkpoint {s.id} cannot be notified {what}: "
                        "checkpoints are notified once each, in id order", s)
        self.notify_complete(s.id)

    def notify_complete(self, n: int) -> None:
        """SRC-17: tracker entries up to N dropped, those of later checkpoints kept; the sinks commit
        what they staged before a barrier up to N and have not committed yet."""
        self.last_notified = n
        self.tracker = {k: v for k, v in self.tracker.items() if k > n}
        records: list[Position] = []
        for reader in self.readers:
            records += self.take_staged(reader, n)
        self.emit("committed", checkpoint=n, records=sorted(records))

    @staticmethod
    def take_staged(reader: Reader, n: int | None) -> list[Position]:
        out: list[Position] = []
        for k in sorted(reader.staged):
            if n is not None and k <= n:
                out += reader.staged.pop(k)
        return out

    def abort(self, s: AbortStep) -> None:
        """SRC-18: nothing changes in the tracker."""
        cp = self.pending(s.id, (TAKEN, BARRIER), s, "pending")
        cp.state = ABORTED
        self.emit("aborted", id=s.id)
        if self.valve == s.id:
            self.open_valve()

    def abort_pending(self) -> None:
        """A failure aborts every pending checkpoint."""
        for n in sorted(self.checkpoints):
            if self.checkpoints[n].state in (TAKEN, BARRIER):
                self.checkpoints[n].state = ABORTED
                self.emit("aborted", id=n)

    def restored_state(self, r: int) -> list[Position]:
        cp = self.checkpoints.get(self.last_completed) if self.last_completed is not None else None
        return self.redistribute(cp)[r] if cp is not None else []

    # ---- failover --------------------------------------------------------------------

    def fail(self, s: FailStep) -> None:
        """SRC-20..SRC-23, SRC-36, SRC-37: the failed task's region and the regions it drags along
        restart; each reader among them is reset to the last completed checkpoint."""
        if s.task < self.parallelism:
            self.running(s.task, s)
        restart = tasks_to_restart(self.config, s.task, s.lost) if self.config.has_graph else [s.task]
        readers = [t for t in restart if t < self.parallelism]
        self.emit("reset", tasks=restart)
        self.abort_pending()
        for r in readers:  # SRC-20: the attempt is gone, with its held events and uncommitted output
            reader = self.readers[r]
            reader.registered, reader.held, reader.splits = False, [], []
        if self.valve is not None:
            self.open_valve()
        restored = self.last_completed
        for r in readers:
            reader = self.readers[r]
            records = self.take_staged(reader, restored)  # SRC-29: its restored state is committed
            if records:
                self.emit("committed", checkpoint=restored, records=sorted(records))
            self.readers[r] = Reader(restored=self.restored_state(r))
            self.no_more.discard(r)  # SRC-21, in this order
            back = self.take_back(r, restored)
            self.emit("splits_back", reader=r, splits=back)
            self.queue += back  # SRC-24: available again, to any reader

    def take_back(self, r: int, restored: int | None) -> list[int]:
        """SRC-21, SRC-22: the reader's splits tracked under ids > R (all without R), in id order,
        then its uncheckpointed bucket, each in assignment order; out of the tracker."""
        back = [split for k in sorted(self.tracker) if restored is None or k > restored
                for split in self.tracker[k].pop(r, [])]
        back += self.uncheckpointed.pop(r, [])
        self.tracker = {k: v for k, v in self.tracker.items() if v}
        return back

    def global_failover(self, cause: str, parallelism: int | None = None) -> None:
        """SRC-27, SRC-28: everything restarts from the last completed checkpoint; the registry and
        the tracker start empty; SRC-29: restoring to N confirms N; SRC-31: a new parallelism
        redistributes the readers' splits."""
        n = self.last_completed
        self.emit("global_failover", checkpoint=n, cause=cause)
        self.abort_pending()
        records = [p for reader in self.readers for p in self.take_staged(reader, n)]
        if records:
            self.emit("committed", checkpoint=n, records=sorted(records))
        cp = self.checkpoints[n] if n is not None else None
        self.parallelism = parallelism or self.parallelism
        states = self.redistribute(cp) if cp is not None else [[] for _ in range(self.parallelism)]
        self.readers = [Reader(restored=state) for state in states]
        if cp is not None:
            self.queue, self.discovered = list(cp.queue), cp.discovered
        else:
            self.queue, self.discovered = list(range(len(self.config.splits))), len(self.config.splits)
        self.no_more, self.uncheckpointed, self.tracker, self.valve = set(), {}, {}, None

    def redistribute(self, cp: Checkpoint) -> list[list[Position]]:
        """SRC-31: with the same parallelism each reader gets its own state back; otherwise the
        readers' states are concatenated in reader order and cut into contiguous parts whose sizes
        differ by at most one, the larger ones first; a new reader holds the blocks of its part (one
        per old reader) in old reader order, or in the order `block_orders` gives (SRC-31: MAY)."""
        if cp.parallelism == self.parallelism:
            return [list(cp.readers.get(r, [])) for r in range(self.parallelism)]
        out = []
        for r, part in enumerate(dealt_readers(cp, self.parallelism)):
            order = self.block_orders.get((cp.id, self.parallelism, r))  # SRC-31: MAY, another block order
            if order is not None:
                part = sorted(part, key=lambda tagged: order.index(tagged[0]))  # stable: blocks stay whole
            out.append([p for _, p in part])
        return out

    # ---- end of input ----------------------------------------------------------------

    def end(self, s: EndStep) -> None:
        """SRC-44: the job runs to completion: every reader registers, then in rounds each reader in
        turn reads all of its splits or, having none, requests one, until every reader reported
        END_OF_INPUT; the final checkpoint commits everything (SRC-38)."""
        if self.valve is not None:
            self.refuse("SRC-46", f"checkpoint {self.valve} still awaits its barrier", s)
        for r, reader in enumerate(self.readers):
            if not reader.registered:
                self.register(r)
        while not all(reader.ended for reader in self.readers):
            for r, reader in enumerate(self.readers):
                if reader.ended:
                    continue
                if reader.splits:
                    self.poll(r, sum(self.sizes[split] - pos for split, pos in reader.splits))
                else:
                    self.handle_request(r)
        records = [p for reader in self.readers for k in sorted(reader.staged) for p in reader.staged[k]]
        records += [p for reader in self.readers for p in reader.pending]
        self.emit("committed", checkpoint=None, records=sorted(records))
        self.emit("finished")
