"""Conformance mode of the sources area: a schedule run on the engine's parts (engine.py).

`SourceJob` is the job around them: the checkpoint coordinator, the reader tasks, failover.  One
schedule runs in one Spark task (adapters/pyspark/adapter.py).  A failure is a real task failure:

* a reader or task failure (`fail`): the coordinator reacts (the reset, the aborted checkpoints,
  the splits back), then what the tasks that did not fail hold (coordinator, other readers, their
  sinks) is written to the store, as their processes would keep it, and the Spark task raises.
  Spark runs it again; the new attempt reads that state back, and each restarted reader takes its
  share of the last completed checkpoint, read from the store (SRC-20..SRC-25, SRC-36, SRC-37);
* a global failover (`fail_enumerator`, an assignment to an unregistered reader, `rescale`): the
  task raises with nothing kept but the checkpoints; the new attempt restores everything from the
  last completed one (SRC-27..SRC-29, SRC-31).
"""

from __future__ import annotations

from typing import Any

from flink_semantics.adapters.pyspark.runtime import ScheduleRun, ScheduleStore
from flink_semantics.adapters.pyspark.sources.engine import (
    GlobalFailure,
    Position,
    SourceCoordinator,
    SourceReader,
    SplitEnumerator,
    redistribute,
    restart_set,
)
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
)
from flink_semantics.spec.schedule import Event, Schedule, Step

# Opt-in (spec/adapter.py): every sources capability this implementation supports.
CAPABILITIES: dict[str, str | None] = {
    "sources.checkpoint": None,
    "sources.reader_failover": None,
    "sources.global_failover": None,
    "sources.rescale": None,
    "sources.unbounded": None,
    "sources.region_failover": None,
}

TAKEN, BARRIER, COMPLETED, ABORTED = "taken", "barrier", "completed", "aborted"
LIVE = "live"  # the store's name for what outlives a task failure


class SourceJob:
    """The job: one coordinator, `parallelism` reader tasks, the checkpoint coordinator."""

    def __init__(self, config: SourcesConfig, store: ScheduleStore, record: Any):
        self.config = config
        self.store = store
        self.record = record  # Event -> None
        self.step = 0
        self.sizes = list(config.splits)  # the external system: each split's record count
        self.parallelism = config.readers
        self.readers = [SourceReader() for _ in range(config.readers)]
        n = len(config.splits)
        self.coordinator = SourceCoordinator(SplitEnumerator(list(range(n)), n, config.bounded), self.deliver)
        self.checkpoints: dict[int, str] = {}  # id -> state
        self.snapshots: dict[int, dict[str, Any]] = {}  # pending checkpoints' snapshots
        self.last_completed: int | None = None
        self.failure: str | None = None  # why this incarnation ended

    def emit(self, kind: str, **fields: Any) -> None:
        self.record(event(self.step, kind, **fields))

    # ---- steps ---------------------------------------------------------------------

    def apply(self, index: int, s: Step) -> None:
        self.step = index
        try:
            if isinstance(s, RegisterStep):
                self.register(s.reader)
            elif isinstance(s, RequestStep):
                self.coordinator.request(s.reader)
            elif isinstance(s, AssignStep):
                self.coordinator.enumerator.push(s.reader, self.coordinator)
            elif isinstance(s, DiscoverStep):
                self.sizes.append(s.records)
                self.coordinator.enumerator.discover(len(self.sizes))
            elif isinstance(s, PollStep):
                self.readers[s.reader].poll(s.records, self.sizes, s.reader, self.emit)
            elif isinstance(s, CheckpointStep):
                self.trigger_checkpoint(s.id, s.fails)
            elif isinstance(s, BarrierStep):
                self.barrier(s.id)
            elif isinstance(s, CompleteStep):
                self.complete(s.id, s.notify)
            elif isinstance(s, AbortStep):
                self.abort(s.id)
            elif isinstance(s, FailStep):
                self.fail_task(s.task, s.lost)
            elif isinstance(s, FailEnumeratorStep):
                raise GlobalFailure("enumerator")  # SRC-27
            elif isinstance(s, RescaleStep):
                self.global_failover("rescale", s.readers)  # SRC-31
            elif isinstance(s, EndStep):
                self.run_to_end()
        except GlobalFailure as e:
            self.global_failover(e.cause)

    def register(self, r: int) -> None:
        """SRC-2, SRC-25: a new attempt opens with its restored splits, then registers."""
        splits = self.readers[r].open()
        self.coordinator.register(r)
        self.emit("registered", reader=r, splits=splits)

    def deliver(self, r: int, kind: str, split: int | None) -> None:
        """An AddSplitEvent or NoMoreSplits reaches reader r (SRC-8, SRC-9)."""
        reader = self.readers[r]
        if kind == "split":
            assert split is not None
            reader.add_split(split)
            self.emit("assigned", reader=r, split=split)
        else:
            reader.no_more = True
            self.emit("no_more_splits", reader=r)
            reader.check_end(r, self.emit)

    # ---- checkpoints ---------------------------------------------------------------

    def trigger_checkpoint(self, id: int, fails: bool) -> None:
        """SRC-11, SRC-12; SRC-19: a failing enumerator snapshot fails the checkpoint, not the job."""
        snapshot = self.coordinator.checkpoint(id)
        if fails:
            self.checkpoints[id] = ABORTED
            self.emit("checkpoint_failed", id=id)
            return
        self.checkpoints[id] = TAKEN
        self.snapshots[id] = {"enumerator": snapshot, "readers": []}
        self.emit("enumerator_checkpoint", id=id, splits=snapshot["unassigned"])
        self.coordinator.close_valve(id)

    def barrier(self, id: int) -> None:
        """SRC-15: each reader's snapshot, its sink's records staged; then the valve opens (SRC-13)."""
        for r, reader in enumerate(self.readers):
            state = reader.snapshot()
            self.snapshots[id]["readers"].append(state)
            self.emit("reader_checkpoint", id=id, reader=r, splits=state)
            reader.sink.prepare_commit(id)
        self.checkpoints[id] = BARRIER
        self.coordinator.open_valve()

    def complete(self, id: int, notify: bool) -> None:
        """The checkpoint is stored, then (when notified) SRC-17 and the sinks' commit (SRC-38).  A
        checkpoint stored earlier without notification gets its notification now, late: nothing is
        stored again and the restore point stays where it is; the tracker and the sinks act on it
        as on one that arrives at once (SRC-17)."""
        if self.checkpoints.get(id) != COMPLETED:
            self.store.write_checkpoint(id, self.snapshots.pop(id))
            self.checkpoints[id] = COMPLETED
            self.last_completed = id
        if notify:
            self.coordinator.tracker.on_checkpoint_complete(id)
            self.emit("committed", checkpoint=id, records=self.commit(id))

    def commit(self, up_to: int | None, readers: list[SourceReader] | None = None) -> list[Position]:
        return sorted(p for reader in (self.readers if readers is None else readers)
                      for p in reader.sink.commit(up_to))

    def abort(self, id: int) -> None:
        """SRC-18: the tracker is left as it is."""
        self.checkpoints[id] = ABORTED
        self.snapshots.pop(id, None)
        self.emit("aborted", id=id)
        if self.coordinator.valve == id:
            self.coordinator.open_valve()

    def abort_pending(self) -> None:
        for id in sorted(self.checkpoints):
            if self.checkpoints[id] in (TAKEN, BARRIER):
                self.checkpoints[id] = ABORTED
                self.snapshots.pop(id, None)
                self.emit("aborted", id=id)

    # ---- failover ------------------------------------------------------------------

    def fail_task(self, task: int, lost: tuple[int, ...]) -> None:
        """SRC-20..SRC-23, SRC-36, SRC-37: the failed task's region and those it drags along restart;
        the coordinator stays; each restarted reader goes back to the restore point."""
        c = self.config
        restart = restart_set(self.parallelism + c.tasks, c.pipelined, c.blocking, task, lost) \
            if c.has_graph else [task]
        self.emit("reset", tasks=restart)
        self.abort_pending()
        failed = [r for r in restart if r < self.parallelism]
        for r in failed:  # the attempt is gone: unregistered, its held events dropped
            self.coordinator.registered.discard(r)
            self.coordinator.held.pop(r, None)
        if self.coordinator.valve is not None:
            self.coordinator.open_valve()
        for r in failed:
            records = self.commit(self.last_completed, [self.readers[r]])  # SRC-29
            if records:
                self.emit("committed", checkpoint=self.last_completed, records=records)
            back = self.coordinator.subtask_reset(r, self.last_completed)
            self.emit("splits_back", reader=r, splits=back)
        self.failure = f"task {task} failed (restarting {restart})"
        self.store.write_json(LIVE, self.live_state(failed))

    def global_failover(self, cause: str, parallelism: int | None = None) -> None:
        """SRC-27..SRC-29: everything restarts from the restore point, which is confirmed; SRC-31."""
        n = self.last_completed
        self.emit("global_failover", checkpoint=n, cause=cause)
        self.abort_pending()
        records = self.commit(n)
        if records:
            self.emit("committed", checkpoint=n, records=records)
        self.parallelism = parallelism or self.parallelism
        self.failure = f"global failover ({cause})"
        self.store.write_json(LIVE, {"global": True, **self.job_state()})

    def job_state(self) -> dict[str, Any]:
        return {"sizes": self.sizes, "parallelism": self.parallelism,
                "checkpoints": list(self.checkpoints.items()), "last_completed": self.last_completed}

    def live_state(self, failed: list[int]) -> dict[str, Any]:
        """What survives a task failure: all but the failed readers."""
        return {"global": False, **self.job_state(), "coordinator": self.coordinator.to_json(),
                "readers": [None if r in failed else reader.to_json()
                            for r, reader in enumerate(self.readers)]}

    def resume(self, live: dict[str, Any]) -> None:
        """The next attempt of the Spark task: the survivors' state back, the rest from the checkpoint."""
        self.sizes, self.parallelism = live["sizes"], live["parallelism"]
        self.checkpoints = {id: state for id, state in live["checkpoints"]}
        self.last_completed = n = live["last_completed"]
        cp = self.store.read_checkpoint(n) if n is not None else None
        states = cp["readers"] if cp else [[] for _ in range(self.parallelism)]
        restored = [[(s, p) for s, p in state] for state in redistribute(states, self.parallelism)]
        if live["global"]:  # SRC-28: a new coordinator, registry and tracker empty
            self.readers = [SourceReader(restored=state) for state in restored]
            if cp:
                enumerator = SplitEnumerator.restore(cp["enumerator"], self.config.bounded)
            else:
                k = len(self.config.splits)
                enumerator = SplitEnumerator(list(range(k)), k, self.config.bounded)
            self.coordinator = SourceCoordinator(enumerator, self.deliver)
        else:
            self.coordinator = SourceCoordinator.from_json(live["coordinator"], self.deliver)
            self.readers = [SourceReader(restored=restored[r]) if d is None else SourceReader.from_json(d)
                            for r, d in enumerate(live["readers"])]

    # ---- end of input --------------------------------------------------------------

    def run_to_end(self) -> None:
        """SRC-44: every reader registers; in rounds each reader reads all its splits or, having
        none, asks for one, until all reported END_OF_INPUT; the final commit takes everything."""
        for r, reader in enumerate(self.readers):
            if not reader.registered:
                self.register(r)
        while not all(reader.ended for reader in self.readers):
            for r, reader in enumerate(self.readers):
                if reader.ended:
                    continue
                if reader.splits:
                    reader.poll(reader.remaining(self.sizes), self.sizes, r, self.emit)
                else:
                    self.coordinator.request(r)
        self.emit("committed", checkpoint=None, records=sorted(p for reader in self.readers
                                                                  for p in reader.sink.flush()))
        self.emit("finished")


class Run(ScheduleRun):
    """A sources schedule on SourceJob, across the Spark task's attempts."""

    def __init__(self, schedule: Schedule, store: ScheduleStore):
        super().__init__(schedule, store)
        self.job = SourceJob(schedule.config, store, self._record)

    def _record(self, e: Event) -> None:
        self.record_event(e)

    def start(self, resume_step: int) -> bool:
        if resume_step:
            self.job.resume(self.store.read_json(LIVE))
        return True

    def apply(self, index: int, step: Step) -> None:
        self.job.apply(index, step)

    @property
    def alive(self) -> bool:
        return self.job.failure is None

    def cause(self, index: int) -> str:
        return self.job.failure or "the task failed"
