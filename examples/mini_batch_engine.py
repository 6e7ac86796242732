"""A small engine of its own for the mini-batch area, written from spec/mini-batch.md, and its adapter.

It runs `SELECT k, COUNT(*), SUM(v), MIN(v), MAX(v) FROM input GROUP BY k` over a changelog, with
mini-batch off (every row on its own) and on (the processing-time assigner and bundles finished by
size, by its watermarks and at end of input), with or without `update_before` and `ttl`.  It does
not import the reference model: the suite compares its traces with the reference's.

Run the suite against it from the repository root (docs/writing-an-adapter.md walks through it):

    pytest conformance --adapter examples.mini_batch_engine:make_adapter --areas mini_batch
    python -m pytest --pyargs flink_semantics.conformance --adapter examples.mini_batch_engine:make_adapter \\
        --areas mini_batch

examples/mini_batch_engine_broken.py is the same engine with one bug, which the suite catches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from flink_semantics.spec.adapter import SCRIPTED, AdapterError
from flink_semantics.spec.areas.mini_batch import (
    MAX_WATERMARK,
    RETRACTIONS,
    AdvanceStep,
    EndStep,
    MiniBatchConfig,
    RowStep,
    WatermarkStep,
    event,
)
from flink_semantics.spec.schedule import Schedule, Trace, rejected, required_capabilities

# What this engine supports (None) and what it does not (the reason); spec/areas/mini_batch.py lists them.
CAPABILITIES: dict[str, str | None] = {
    "mini_batch": None,
    "mini_batch.config_validation": None,
    "mini_batch.watermarks": None,
    "mini_batch.processing_time": None,
    "mini_batch.rowtime": "this example has no row-time assigner",
    "mini_batch.two_phase": "this example has no local aggregation",
    "mini_batch.checkpoint": "this example keeps no checkpoints",
    "mini_batch.status": "this example has no watermark statuses",
}


def long(n: int) -> int:
    """MB-30: Java long arithmetic: wrap around into [-2^63, 2^63 - 1]."""
    return (n + 2**63) % 2**64 - 2**63


class Acc:
    """A key's accumulator: COUNT, SUM, and MIN and MAX with retraction, which keep every value held
    with its multiplicity, so that retracting the minimum gives the next one (MB-30)."""

    def __init__(self) -> None:
        self.values: Counter[int] = Counter()
        self.sum = 0

    def add(self, v: int) -> None:
        self.values[v] += 1
        self.sum = long(self.sum + v)

    def retract(self, v: int) -> None:
        self.values[v] -= 1
        self.sum = long(self.sum - v)

    def count(self) -> int:
        return self.values.total()

    def result(self) -> tuple[int, int, int, int]:
        held = +self.values  # the values with a positive multiplicity
        return self.count(), self.sum, min(held), max(held)


class Job:
    """One schedule's run: the processing-time assigner, the bundle, the valve, the aggregation."""

    def __init__(self, config: MiniBatchConfig, new_acc: type[Acc]):
        self.c, self.new_acc = config, new_acc
        self.state: dict[int, Acc] = {}  # the aggregation's state: key -> accumulator
        self.bundle: dict[int, list[RowStep]] = {}  # MB-9: key -> its rows in arrival order
        self.inputs = 0  # MB-10: rows in the bundle
        self.now = 0  # processing time
        self.timer = config.allow_latency  # MB-4: the first timer at start + interval
        self.current = 0  # MB-4: the assigner's current watermark
        self.passed = -(2**63)  # MB-8: the last watermark the valve passed (Long.MIN_VALUE)
        self.events: list = []
        self.i = 0  # the step being run

    def run(self, steps: Sequence) -> list:
        for i, step in enumerate(steps):
            self.i = i  # the events below are this step's
            if isinstance(step, RowStep) and not self.c.enabled:
                self.apply(step.key, [step])  # MB-1, MB-24: each row on its own
            elif isinstance(step, RowStep):
                self.assign(self.now)  # MB-4: before the row is forwarded
                self.bundle.setdefault(step.key, []).append(step)
                self.inputs += 1
                if self.inputs >= self.c.size:  # MB-10: the row that reaches the size is inside
                    self.finish()
            elif isinstance(step, AdvanceStep):
                self.now += step.ms
                while self.c.enabled and self.timer <= self.now:  # MB-4: each due timer, at its deadline
                    self.timer = self.assign(self.timer) + self.c.allow_latency  # the next one at batch + I
            elif isinstance(step, (WatermarkStep, EndStep)):
                # MB-5: the assigner drops upstream watermarks but MAX, which end of input emits (MB-14)
                w = MAX_WATERMARK if isinstance(step, EndStep) else step.timestamp
                if not self.c.enabled:
                    self.valve(w)
                elif w == MAX_WATERMARK and self.current != MAX_WATERMARK:
                    self.current = w
                    self.emit(w)
                if isinstance(step, EndStep):
                    self.finish()  # MB-14: the bundle operator finishes too
            else:
                raise AdapterError(f"step {self.i}: this example cannot run {step.op!r} steps")
        return self.events

    def assign(self, now: int) -> int:
        """MB-4: emit the batch `now - now mod I` (I: the interval) when it is past the current
        watermark; return the batch."""
        batch = now - now % self.c.allow_latency
        if batch > self.current:
            self.current = batch
            self.emit(batch)
        return batch

    def emit(self, w: int) -> None:
        self.finish()  # MB-12: the bundle is finished before the watermark is forwarded
        self.valve(w)

    def valve(self, w: int) -> None:
        if w > self.passed:  # MB-8: only increasing watermarks pass
            self.passed = w
            self.events.append(event(self.i, "watermark", timestamp=w))

    def finish(self) -> None:
        """MB-9, MB-17: apply each key's rows together; MB-11: reset the count; MB-16: empty, nothing."""
        for key, rows in self.bundle.items():
            self.apply(key, rows)
        self.bundle, self.inputs = {}, 0

    def apply(self, key: int, rows: list[RowStep]) -> None:
        """MB-17..MB-23: apply a key's rows in arrival order, then emit its change, if any."""
        acc = self.state.get(key)
        before = acc.result() if acc else None
        if acc is None:
            while rows and rows[0].kind in RETRACTIONS:  # MB-18: leading retractions are dropped
                rows = rows[1:]
            acc = self.new_acc()
        for row in rows:
            acc.retract(row.value) if row.kind in RETRACTIONS else acc.add(row.value)
        if acc.count() == 0:  # MB-23: deleted (nothing to say when it had no state)
            self.state.pop(key, None)
            if before is not None:
                self.out(key, "-D", before)
            return
        self.state[key] = acc
        after = acc.result()
        if before is None:
            self.out(key, "+I", after)  # MB-19
        elif after != before or self.c.ttl:  # MB-20; MB-21 without ttl; MB-22 with it
            if self.c.update_before:
                self.out(key, "-U", before)
            self.out(key, "+U", after)

    def out(self, key: int, change: str, result: tuple[int, int, int, int]) -> None:
        count, sum_, min_, max_ = result
        self.events.append(event(self.i, "out", key=key, change=change, count=count, sum=sum_,
                                 min=min_, max=max_))


class MiniBatchEngine:
    """The adapter (flink_semantics.spec.adapter.Adapter): runs each schedule as a Job."""

    name = "mini-batch-example"
    completion_order = SCRIPTED  # the engine follows the schedule step by step

    def __init__(self, new_acc: type[Acc] = Acc):
        self.new_acc = new_acc

    def capabilities(self) -> dict[str, str | None]:
        return dict(CAPABILITIES)

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        return [self.run(s) for s in schedules]

    def run(self, schedule: Schedule) -> Trace:
        c: MiniBatchConfig = schedule.config
        if c.enabled and (c.allow_latency <= 0 or c.size <= 0):  # MB-2: the job refuses it
            return Trace((rejected(f"allow_latency {c.allow_latency} and size {c.size} must be > 0"),))
        lacking = sorted(n for n in required_capabilities(schedule) if CAPABILITIES.get(n, "?") is not None)
        if lacking:  # the suite sends none of these; a schedule given by hand may
            raise AdapterError(f"this example does not support {', '.join(lacking)}")
        return Trace(tuple(Job(c, self.new_acc).run(schedule.steps)))

    def close(self) -> None:
        pass


def make_adapter() -> MiniBatchEngine:
    return MiniBatchEngine()
