"""Conformance mode of the watermarks area: a schedule run on the engine's parts (engine.py).

`WatermarkJob` is the job around them: the readers (one per partition of the source stage), the
valve of the downstream task, the alignment coordinator, and the periodic emission timer on the
schedule's virtual clock.  One schedule runs in one Spark task (adapters/pyspark/adapter.py).

A `failover` is a real task failure: the incarnation records `restarted`, writes to the store what
outlives it (the splits each reader had, the records available and not read, the clock) and ends;
the Spark task raises, Spark runs it again, and the new attempt starts a fresh job from the store:
every watermark, generator, idleness timer, output, valve channel, sampler and report starts again
(WM-16), the splits are registered again at once (WM-4) and the records still available are read.
What the new job does at once belongs to the failover step.

The order inside a step follows spec/watermarks.md (C3, C4, C5): readers act in index order, and
what one sends reaches the valve before the next acts.
"""

from __future__ import annotations

from typing import Any

from flink_semantics.adapters.pyspark.runtime import ScheduleRun, ScheduleStore
from flink_semantics.adapters.pyspark.timers import VirtualClock, VirtualTimers
from flink_semantics.adapters.pyspark.watermarks.engine import (
    AlignmentCoordinator,
    SourceReader,
    StatusWatermarkValve,
)
from flink_semantics.spec.areas.watermarks import (
    AddSplitStep,
    AlignStep,
    EndStep,
    FailoverStep,
    FinishSplitStep,
    RecordStep,
    TickStep,
    WatermarksConfig,
    event,
)
from flink_semantics.spec.schedule import Event, Schedule, Step

# Opt-in (spec/adapter.py): every watermarks capability this implementation supports.
CAPABILITIES: dict[str, str | None] = {
    "watermarks.channels": None,
    "watermarks.punctuated": None,
    "watermarks.idleness": None,
    "watermarks.alignment": None,
    "watermarks.failover": None,
}

LIVE = "live"  # the store's name for what outlives a task failure


class WatermarkJob:
    """One incarnation of the job: `readers` source partitions, the downstream valve, the coordinator."""

    def __init__(self, config: WatermarksConfig, clock: VirtualClock, record: Any):
        self.config = config
        self.clock = clock
        self.record = record  # Event -> None
        self.step = 0
        self.timers = VirtualTimers(clock)
        alignment = config.max_drift is not None
        self.readers = [SourceReader(r, config, self.now, self.emit, self.send, alignment)
                        for r in range(config.readers)]
        self.valve = StatusWatermarkValve(config.readers, self.emit)
        self.coordinator = AlignmentCoordinator(config.max_drift) if config.max_drift is not None else None
        self.reader_of: dict[int, int] = {}
        self.failure: str | None = None
        if config.interval > 0:  # WM-3: every interval from the (re)start; none with 0
            self.timers.register(self.now() + config.interval, self.periodic_emit)

    def now(self) -> int:
        return self.clock.now

    def emit(self, kind: str, **fields: Any) -> None:
        self.record(event(self.step, kind, **fields))

    def send(self, kind: str, **fields: Any) -> None:
        """A reader's watermark or status: the event, then at once the valve's input on channel
        `reader` (its outputs right after)."""
        self.emit(kind, **fields)
        if kind == "watermark":
            self.valve.input_watermark(fields["value"], fields["reader"])
        else:
            self.valve.input_status(fields["idle"], fields["reader"])

    def periodic_emit(self) -> None:
        """One periodic emission instant (C3): the readers in index order; the next at +interval."""
        for reader in self.readers:
            reader.periodic_emit()
        self.timers.register(self.now() + self.config.interval, self.periodic_emit)

    # ---- steps ---------------------------------------------------------------------

    def apply(self, index: int, s: Step) -> None:
        self.step = index
        if isinstance(s, AddSplitStep):
            self.reader_of[s.split] = s.reader
            self.readers[s.reader].add_split(s.split)
        elif isinstance(s, RecordStep):
            self.readers[self.reader_of[s.split]].add_record(s.split, s.ts)
        elif isinstance(s, TickStep):
            self.timers.advance(s.ms, lambda: True)
        elif isinstance(s, FinishSplitStep):
            self.readers[self.reader_of[s.split]].finish_split(s.split)
        elif isinstance(s, AlignStep):
            self.align()
        elif isinstance(s, FailoverStep):
            self.failover()
        elif isinstance(s, EndStep):
            self.end()

    def align(self) -> None:
        """C4: every reader samples, checks and reports (WM-22, WM-25, WM-26); then the coordinator
        announces (WM-23) and each reader that has reported checks again.  A reader released by a
        check reads what it held back once its action is over, before the next reader acts."""
        assert self.coordinator is not None
        for r, reader in enumerate(self.readers):
            reader.align.sample()
            report = reader.align.report()
            if report is not None:
                self.coordinator.report(r, report)
            reader.pump()
        announcement = self.coordinator.announcement()
        if announcement is None:
            return
        max_allowed, receivers = announcement
        self.emit("max_allowed", value=max_allowed)
        for r in receivers:
            self.readers[r].align.announce(max_allowed)
            self.readers[r].pump()

    def end(self) -> None:
        """C5 and WM-15 (D2): every reader reads what it holds back, without pausing; every split
        finishes; every reader sends MAX (after ACTIVE if it is idle)."""
        for reader in self.readers:
            reader.read_to_end()
        for reader in self.readers:
            reader.finish_all()
        for reader in self.readers:
            reader.end(self.send)

    # ---- failover ------------------------------------------------------------------

    def failover(self) -> None:
        """WM-16: the job fails; what outlives it goes to the store, then the Spark task fails."""
        self.emit("restarted")
        self.failure = "failover: the job restarts"

    def live_state(self) -> dict[str, Any]:
        return {"readers": [reader.to_json() for reader in self.readers],
                "reader_of": [[s, r] for s, r in self.reader_of.items()]}

    def restart(self, live: dict[str, Any], step: int) -> None:
        """The new attempt: a fresh job with the splits each reader had, registered again at once in
        the same order (WM-4), then the records still available read (in the failover step)."""
        self.step = step
        self.reader_of = {s: r for s, r in live["reader_of"]}
        for reader, state in zip(self.readers, live["readers"]):
            for split in state["splits"]:
                reader.add_split(split)
            reader.available = [(s, ts) for s, ts in state["available"]]
        for reader in self.readers:
            reader.pump()


class Run(ScheduleRun):
    """A watermarks schedule on WatermarkJob, across the Spark task's attempts."""

    def __init__(self, schedule: Schedule, store: ScheduleStore):
        super().__init__(schedule, store)
        self.job: WatermarkJob | None = None

    def _record(self, e: Event) -> None:
        self.record_event(e)

    def start(self, resume_step: int) -> bool:
        # The clock is back from the store here: the periodic timer counts from it.
        self.job = WatermarkJob(self.schedule.config, self.clock, self._record)
        if resume_step:
            self.job.restart(self.store.read_json(LIVE), resume_step - 1)
        return True

    def apply(self, index: int, step: Step) -> None:
        assert self.job is not None
        self.job.apply(index, step)
        if self.job.failure is not None:
            self.store.write_json(LIVE, self.job.live_state())

    @property
    def alive(self) -> bool:
        return self.job is not None and self.job.failure is None

    def cause(self, index: int) -> str:
        return (self.job.failure if self.job else None) or "the task failed"
