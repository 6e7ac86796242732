"""A mini-batch schedule run on the engine in conformance mode (`Run`), and the capabilities the
`pyspark` runner declares for the area (`CAPABILITIES`).

A `checkpoint` step writes the aggregation's state to the schedule's store; a `crash` step ends the
incarnation as a real task failure (adapters/pyspark/runtime.py raises, Spark runs the task again)
and the next attempt resumes at the `restore`, which reads the state back from the store.  The
processing-time assigner's timers run on the schedule's virtual clock, which the runtime keeps
across failures.  pyspark is not imported here.
"""

from __future__ import annotations

import dataclasses

from flink_semantics.adapters.pyspark.mini_batch.engine import (
    Acc,
    Change,
    Pipeline,
    Settings,
    refusal,
    restore,
)
from flink_semantics.adapters.pyspark.runtime import ScheduleRun, ScheduleStore
from flink_semantics.adapters.pyspark.timers import VirtualTimers
from flink_semantics.spec.areas.mini_batch import (
    AdvanceStep,
    CheckpointStep,
    CrashStep,
    EndStep,
    RestoreStep,
    RowStep,
    StatusStep,
    WatermarkStep,
    event,
)
from flink_semantics.spec.schedule import Schedule, Step

# Opt-in (spec/adapter.py): every mini-batch capability this implementation supports.
CAPABILITIES: dict[str, str | None] = {
    "mini_batch.rowtime": None,
    "mini_batch.two_phase": None,
    "mini_batch.checkpoint": None,
    "mini_batch.status": None,
    "mini_batch.config_validation": None,
    "mini_batch.processing_time": None,
    "mini_batch.watermarks": None,
}


class _Trace:
    """The sink after the aggregation: what it receives becomes trace events of the current step."""

    def __init__(self, run: Run):
        self.run = run

    def element(self, key: int, item: Change) -> None:
        change, (count, sum_, min_, max_) = item
        self.run.record_event(event(self.run.step, "out", key=key, change=change, count=count, sum=sum_,
                                    min=min_, max=max_))

    def watermark(self, timestamp: int) -> None:
        self.run.record_event(event(self.run.step, "watermark", timestamp=timestamp))

    def status(self, idle: bool) -> None:
        self.run.record_event(event(self.run.step, "status", idle=idle))


class Run(ScheduleRun):
    """A mini-batch schedule on the engine's Pipeline, across the Spark task's attempts."""

    def __init__(self, schedule: Schedule, store: ScheduleStore):
        super().__init__(schedule, store)
        self.settings = Settings(**dataclasses.asdict(schedule.config))
        self.job: Pipeline | None = None  # None: the job is down (after a crash, before its restore)
        self.timers: VirtualTimers | None = None

    @property
    def alive(self) -> bool:
        return self.job is not None

    def cause(self, index: int) -> str:
        return "crash step"

    def start(self, resume_step: int) -> bool:
        reason = refusal(self.settings)  # MB-2: the rejecting rule
        if reason is not None:
            self.reject(reason)
            return False
        if resume_step == 0:  # a resumed attempt starts at the step after a crash: the restore (MB-28)
            self._incarnation(restore(None))
        return True

    def _incarnation(self, state: dict[int, Acc]) -> None:
        """MB-29: the state given; assigner, bundles and valve afresh, timers from the current time."""
        self.timers = VirtualTimers(self.clock)
        self.job = Pipeline(self.settings, state, self.timers, _Trace(self))

    def apply(self, index: int, s: Step) -> None:
        if isinstance(s, RestoreStep):
            snap = None if s.checkpoint is None else self.store.read_checkpoint(s.checkpoint)
            self._incarnation(restore(snap))  # MB-29
        elif isinstance(s, AdvanceStep):
            self._advance(s.ms)
        elif isinstance(s, CrashStep):
            self.job = self.timers = None  # the incarnation ends: state, bundles and timers are gone
        elif self.job is not None:  # input while the job is down is lost
            self._input(self.job, s)

    def _advance(self, ms: int) -> None:
        """Processing time runs on, across crashes too; the assigner's timers fire at their deadlines."""
        if self.timers is None:
            self.clock.now += ms
        else:
            self.timers.advance(ms, lambda: True)

    def _input(self, job: Pipeline, s: Step) -> None:
        if isinstance(s, RowStep):
            job.row(s.key, s.kind, s.value)
        elif isinstance(s, WatermarkStep):
            job.watermark(s.timestamp)
        elif isinstance(s, StatusStep):
            job.status(s.idle)
        elif isinstance(s, CheckpointStep):
            self.store.write_checkpoint(s.id, job.checkpoint())  # MB-13
        elif isinstance(s, EndStep):
            job.end()
