"""Deliberately wrong adapters, to show that the suite catches them (tests/test_suite_failures.py).

Each wraps the reference adapter and breaks one rule (the mutants, listed in MUTANTS) or tests the
plugin's machinery (the others); they are test doubles, so unlike real adapters they may import
`reference`.  The mutants run schedules of other areas on the reference unchanged.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from flink_semantics.adapters.reference import ReferenceAdapter
from flink_semantics.conformance.areas.async_io import record_states
from flink_semantics.conformance.strength import Mutant
from flink_semantics.reference.async_io import DONE, AsyncIoModel, Snapshot
from flink_semantics.spec.adapter import SCRIPTED, AdapterError
from flink_semantics.spec.area import all_capabilities
from flink_semantics.spec.areas.async_io import AsyncIoConfig, CompleteStep, RecordStep, RestoreStep
from flink_semantics.spec.schedule import Event, Schedule, ScheduleError, Step, Trace, validate_schedule


class ReferenceWrapper:
    """A test double around the reference adapter; subclasses change its traces or its declarations."""

    completion_order = SCRIPTED

    def __init__(self) -> None:
        self.inner = ReferenceAdapter()
        self.name = type(self).__name__

    def capabilities(self) -> Mapping[str, str | None]:
        return {c: None for c in all_capabilities()}

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        return [self.run(s) for s in schedules]

    def run(self, schedule: Schedule) -> Trace:
        (trace,) = self.inner.run_batch([schedule])
        return trace

    def close(self) -> None:
        self.inner.close()


class CapacityOffByOne(ReferenceWrapper):
    """Admits one element more than the capacity (breaks AIO-7: the head of a full queue is admitted)."""

    def run(self, schedule: Schedule) -> Trace:
        if schedule.area != "async_io" or schedule.config.capacity <= 0:
            return super().run(schedule)
        steps = tuple(replace(s, capacity=s.capacity + 1) if isinstance(s, RestoreStep) and s.capacity else s
                      for s in schedule.steps)
        config = replace(schedule.config, capacity=schedule.config.capacity + 1)
        return super().run(replace(schedule, config=config, steps=steps))


class DuplicatesItsLastEvent(ReferenceWrapper):
    """Emits a trace's last event twice, as a sink without idempotence would after a retry (tests
    the differences tally: a duplicated event, none lost)."""

    def run(self, schedule: Schedule) -> Trace:
        trace = super().run(schedule)
        return Trace(trace.events + trace.events[-1:])


class OrderedAsUnordered(ReferenceWrapper):
    """Runs ordered mode as unordered mode (breaks AIO-12).  A completion of a record it holds no call
    for (emitted before a checkpoint that ordered mode would have stored it in) is ignored, as an
    engine drops a result nobody waits for: the mutant gives a trace, it does not crash."""

    def run(self, schedule: Schedule) -> Trace:
        if schedule.area != "async_io":
            return super().run(schedule)
        unordered = replace(schedule, config=replace(schedule.config, mode="unordered"))
        try:
            return super().run(unordered)
        except ScheduleError:
            pass  # a completion it holds no call for: run again, step by step
        model = AsyncIoModel(unordered.config)
        events: list[Event] = []
        for index, step in enumerate(unordered.steps):
            try:
                events.extend(model.apply(index, step))
            except ScheduleError:
                if not isinstance(step, CompleteStep):
                    raise
        return Trace(tuple(events))


class RecordPassesWatermark(ReferenceWrapper):
    """Unordered mode emits a record's results at its completion, even behind a watermark (breaks AIO-13:
    the segments behind a watermark leave before it; AIO-15 is the same order seen from the watermark)."""

    def run(self, schedule: Schedule) -> Trace:
        trace = super().run(schedule)
        if schedule.area != "async_io" or schedule.config.mode != "unordered":
            return trace
        done = completions(schedule)
        events = [replace(e, step=max((i for i in done.get(e.record, ()) if i <= e.step), default=e.step))
                  if e.event == "emit" else e for e in trace.events]
        return Trace(tuple(sorted(events, key=lambda e: e.step)))


def completions(schedule: Schedule) -> dict[int, list[int]]:
    """record -> the steps at which it completes (its final result applied: a retried outcome is
    no completion), in the reference model, one for each incarnation it completes in."""
    model = AsyncIoModel(schedule.config)
    done: dict[int, list[int]] = {}
    before: set[int] = set()
    for i, s in enumerate(schedule.steps):
        model.apply(i, s)
        now = {r for r, state in record_states(model).items() if state == DONE}
        for r in sorted(now - before):
            done.setdefault(r, []).append(i)
        before = now
    return done


class _ArrivalTimeouts(AsyncIoModel):
    """The reference model with a record's timeout measured from its arrival in the input channel (its
    `record` step, or the restore that puts it back), not from its admission."""

    def __init__(self, config: AsyncIoConfig) -> None:
        self.arrived: dict[int, int] = {}
        super().__init__(config)

    def apply(self, index: int, step: Step) -> list[Event]:
        if isinstance(step, RecordStep):
            self.arrived[len(self._inputs)] = self.now
        return super().apply(index, step)

    def _start_incarnation(self, capacity: int, stored: Snapshot) -> None:
        super()._start_incarnation(capacity, stored)
        self.arrived.update({x: self.now for kind, x in stored if kind == "record"})

    def _admit(self, record_id: int) -> None:
        super()._admit(record_id)
        record = self._admitted[record_id]
        if self.config.timeout > 0:
            self._cancel(record.timeout_timer)
            record.admitted_at = self.arrived.get(record_id, record.admitted_at)
            deadline = record.admitted_at + self.config.timeout
            record.timeout_timer = self._add_timer(deadline, "timeout", record)


class TimeoutFromArrival(ReferenceWrapper):
    """Starts a record's timeout when it arrives, not when it is admitted (breaks AIO-59): seen only
    when a record waits at a full queue under a timeout, a combination the generators draw."""

    def run(self, schedule: Schedule) -> Trace:
        if schedule.area != "async_io" or schedule.config.timeout <= 0:
            return super().run(schedule)
        try:
            validate_schedule(schedule)
        except ScheduleError:
            return super().run(schedule)  # refused configurations: the reference's rejection
        model = _ArrivalTimeouts(schedule.config)
        return Trace(tuple(e for i, s in enumerate(schedule.steps) for e in model.apply(i, s)))


class NoTimeouts(ReferenceWrapper):
    """Declares that it has no timers: properties that need them are UNSUPPORTED."""

    def capabilities(self) -> Mapping[str, str | None]:
        caps = dict(super().capabilities())
        caps["async_io.timeout"] = "this engine has no processing-time timers"
        caps["async_io.retry"] = "no timers, so no retry backoff"
        return caps


class Hangs(ReferenceWrapper):
    """run_batch never returns."""

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        threading.Event().wait()
        raise AssertionError("unreachable")


class EngineDown(ReferenceWrapper):
    """Builds, but its engine cannot run a batch (AdapterError from run_batch)."""

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        raise AdapterError("could not start the engine: connection refused\nsecond line of detail")


class Crashes(ReferenceWrapper):
    """Its run_batch raises an ordinary exception (a bug in the adapter, not an engine that is down)."""

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        raise RuntimeError("operator bug: index out of range in the unordered queue")


class CountedCrashes(Crashes):
    """Crashes, counting its run_batch calls in the file $CRASHES_CALLS (one line a call)."""

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        with open(os.environ["CRASHES_CALLS"], "a") as f:
            f.write(f"{len(schedules)}\n")
        return super().run_batch(schedules)


class RaisesOnThirdCompletion(ReferenceWrapper):
    """Raises in a batch holding a schedule that completes record 2, whatever else it does (tests
    the isolation of the breaking schedule: conformance/isolate.py)."""

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        if any(isinstance(s, CompleteStep) and s.record == 2 for sch in schedules for s in sch.steps):
            raise RuntimeError("operator bug: the third completion overflows the queue")
        return super().run_batch(schedules)


class WrongCount(ReferenceWrapper):
    """Returns one trace fewer than it was given schedules."""

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        return super().run_batch(schedules)[1:]


class NotTraces(ReferenceWrapper):
    """Returns the events of each trace, not Trace objects."""

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        return [t.events for t in super().run_batch(schedules)]  # type: ignore[misc]


def broken() -> object:
    """A factory that cannot build its adapter."""
    raise AdapterError("Java not found (set JAVA_HOME)")


def not_an_adapter() -> object:
    return object()


class KnownCapacityBug(CapacityOffByOne):
    """CapacityOffByOne that ships its failures as expected (spec/adapter.py: expected_failures)."""

    expected_failures = {"AIO-6": "admits one element too many", "AIO-7": "admits one element too many",
                         "AIO-9": "admits one element too many"}


class StaleExpectedFailure(ReferenceWrapper):
    """Conforms, but lists AIO-12 as an expected failure: the listing is stale."""

    expected_failures = {"AIO-12": "ordered mode was broken once"}


class DeclaresLittle(ReferenceWrapper):
    """Declares the async I/O area, ordered mode and watermarks only; no other capability is declared."""

    def capabilities(self) -> Mapping[str, str | None]:
        return {"async_io": None, "async_io.ordered": None, "async_io.watermarks": None}


class LogsItsBatches(ReferenceWrapper):
    """Conforms; asks for jobs of 200 schedules and logs the size of every run_batch call to the file
    named by $BATCH_LOG (the suite must gather the examples' batches into such jobs)."""

    batch_size = 200

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        with open(os.environ["BATCH_LOG"], "a") as fh:
            fh.write(f"{len(schedules)}\n")
        return super().run_batch(schedules)


class RunsTwoJobsAtOnce(ReferenceWrapper):
    """Conforms; asks for jobs of 40 schedules, two at a time, takes 50 ms a job and logs when each
    run_batch started and ended to the file named by $BATCH_LOG."""

    batch_size = 40
    concurrent_jobs = 2

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        started = time.monotonic()
        time.sleep(0.05)
        traces = super().run_batch(schedules)
        with open(os.environ["BATCH_LOG"], "a") as fh:
            fh.write(f"{started} {time.monotonic()} {len(schedules)}\n")
        return traces


class OrderedAsUnorderedInJobs(OrderedAsUnordered):
    """OrderedAsUnordered that asks for large jobs, two at a time, so its failures are found in
    gathered batches while another job runs."""

    batch_size = 300
    concurrent_jobs = 2


# The registry of the async I/O mutants (`strength`, tests/test_suite_failures.py):
# the property that must catch each, and a rule its failure report must name.  NoTimeouts is no
# mutant: it breaks no rule, it declares capabilities it lacks (its properties are UNSUPPORTED); the
# others above test the plugin's machinery.  tests/wrong_key_groups.py has one more async I/O mutant
# (SplitOneByOne, AIO-49).
MUTANTS = [
    Mutant("CapacityOffByOne", "test_capacity_and_admission", "AIO-7", area="async_io"),
    Mutant("OrderedAsUnordered", "test_ordered_mode", "AIO-12", area="async_io"),
    Mutant("RecordPassesWatermark", "test_unordered_mode", "AIO-13", area="async_io"),
    Mutant("TimeoutFromArrival", "test_timeouts", "AIO-59", area="async_io"),
]
