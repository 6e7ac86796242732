"""Reference model of the mini-batch aggregation area (spec/mini-batch.md).

The job at parallelism 1, as Flink SQL 2.3.0 plans `SELECT k, COUNT(*), SUM(v), MIN(v), MAX(v)
GROUP BY k` over a changelog source:

    source -> mini-batch assigner -> [local aggregation] -> exchange (valve) -> aggregation -> trace

* mini-batch off (MB-1): no assigner; the aggregation applies each row on its own (MB-24);
* the assigner (MB-4, MB-5 processing time; MB-6, MB-7 row time) turns time into watermarks;
* the local aggregation (two-phase only, MB-3, MB-25) buffers rows in a bundle and sends one
  accumulator per key when the bundle finishes;
* the exchange's valve (MB-8) passes strictly increasing watermarks and status changes;
* the aggregation buffers its input in a bundle (MB-9..MB-16) and applies it per key (MB-17..MB-23,
  or MB-26 for the global phase).

A bundle's keys are kept in first-arrival order: the trace compares the keys of one bundle in any
order (MB-9), and the local phase sends its keys in first-arrival order (MB-25).

Standard library and `spec` only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from flink_semantics.spec.areas.mini_batch import (
    MAX_WATERMARK,
    RETRACTIONS,
    AdvanceStep,
    CheckpointStep,
    CrashStep,
    EndStep,
    MiniBatchConfig,
    RestoreStep,
    RowStep,
    StatusStep,
    WatermarkStep,
    event,
)
from flink_semantics.spec.schedule import Event, Step

LONG_MIN = -(2**63)  # Long.MIN_VALUE

# --------------------------------------------------------------------------
# Java long arithmetic (the row-time assigner's interval arithmetic and SUM wrap around, MB-6, MB-30)
# --------------------------------------------------------------------------


def jlong(x: int) -> int:
    """The signed 64-bit value of the low 64 bits of x (Java's long overflow)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >> 63 else x


def jrem(a: int, b: int) -> int:
    """Java's `a % b`: the sign of the dividend."""
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def batch_start(w: int, interval: int) -> int:
    """MB-6: `w - ((w + I) % I)` in Java longs."""
    return jlong(w - jrem(jlong(w + interval), interval))


# --------------------------------------------------------------------------
# Accumulators: COUNT(*), SUM(v), MIN(v) and MAX(v) with retraction (MB-30)
# --------------------------------------------------------------------------

Value = tuple[int, int, int, int]  # (count, sum, min, max)


@dataclass
class Acc:
    count: int = 0
    sum: int = 0
    values: Counter[int] = field(default_factory=Counter)  # MIN/MAX with retraction: value -> count

    def apply(self, kind: str, v: int) -> None:
        """Accumulate +I/+U, retract -U/-D (MB-17); SUM wraps around as a Java long (MB-30)."""
        n = -1 if kind in RETRACTIONS else 1
        self.count += n
        self.sum = jlong(self.sum + n * v)  # MB-30: `(long) (sum + v)`, `(long) (sum - v)`
        self.values[v] += n
        if self.values[v] == 0:
            del self.values[v]

    def merge(self, other: Acc) -> None:
        """MB-26: merge another accumulator (a local phase's) into this one; its sum wrapped too, the
        merged one is the same modulo 2^64 (MB-30)."""
        self.count += other.count
        self.sum = jlong(self.sum + other.sum)  # MB-30
        self.values.update(other.values)
        for v in [v for v, n in self.values.items() if n == 0]:
            del self.values[v]

    def value(self) -> Value:
        held = [v for v, n in self.values.items() if n > 0]
        return self.count, self.sum, min(held, default=0), max(held, default=0)

    def copy(self) -> Acc:
        return type(self)(self.count, self.sum, Counter(self.values))


# --------------------------------------------------------------------------
# Bundles (MB-9..MB-11, MB-16)
# --------------------------------------------------------------------------


class Bundle:
    """A bundle: key -> buffered input in arrival order, keys in first-arrival order; the count
    trigger counts inputs (MB-10) and finishes the bundle when the count reaches `size`."""

    def __init__(self, size: int, finish: Callable[[dict[int, list], int], None]):
        self.size = size
        self.items: dict[int, list] = {}
        self.count = 0
        self._finish = finish

    def add(self, index: int, key: int, item: object) -> None:
        self.items.setdefault(key, []).append(item)
        self.count += 1
        if self.count >= self.size:  # MB-10: the record that reaches the size is inside the bundle
            self.finish(index)

    def finish(self, index: int) -> None:
        items, self.items = self.items, {}
        self.count = 0  # MB-11
        if items:  # MB-16: an empty bundle emits nothing
            self._finish(items, index)


# --------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------


class Model:
    accumulator: type[Acc] = Acc  # the accumulators of the aggregation and of the local phase (MB-30)

    def __init__(self, config: MiniBatchConfig):
        self.c = config
        self.two_phase = config.enabled and config.two_phase  # MB-3
        self.now = 0  # processing time, ms
        self.state: dict[int, Acc] = {}  # the aggregation's state: key -> accumulator
        self.snapshots: dict[int, dict[int, Acc]] = {}
        self.out: list[Event] = []
        self._open()

    # ---- an incarnation --------------------------------------------------

    def _open(self) -> None:
        """A new incarnation: the assigner, the bundles and the valve start afresh (MB-29)."""
        c = self.c
        self.alive = True
        self.idle = False  # the status every operator last forwarded (MB-8, MB-15)
        self.valve_last = LONG_MIN  # the last watermark the valve passed (MB-8)
        self.current = 0  # the assigner's current watermark (MB-4, MB-6)
        self.next = jlong(batch_start(0, c.allow_latency) + c.allow_latency - 1) if c.enabled else 0
        self.timers: list[int] = []  # the processing-time assigner's timers (MB-4)
        if c.enabled and c.assigner == "proctime":
            self.timers.append(self.now + c.allow_latency)
        self.bundle = Bundle(c.size, self._finish_global if self.two_phase else self._finish_one_phase)
        self.local = Bundle(c.size, self._finish_local)

    def apply(self, index: int, step: Step) -> list[Event]:
        self.out = []
        if isinstance(step, RowStep):
            self._row(index, step)
        elif isinstance(step, WatermarkStep):
            self._upstream_watermark(index, step.timestamp)
        elif isinstance(step, StatusStep):
            if step.idle != self.idle:  # MB-15: statuses pass every operator; outputs repeat none
                self.idle = step.idle
                self.out.append(event(index, "status", idle=step.idle))
        elif isinstance(step, AdvanceStep):
            self._advance(index, step.ms)
        elif isinstance(step, CheckpointStep):
            self._checkpoint(index, step.id)
        elif isinstance(step, CrashStep):
            self.alive = False  # buffered bundles are lost; the state goes back to a checkpoint
        elif isinstance(step, RestoreStep):
            self.state = {k: a.copy() for k, a in self.snapshots.get(step.checkpoint, {}).items()} \
                if step.checkpoint is not None else {}
            self._open()
        elif isinstance(step, EndStep):
            self._end(index)
        return self.out

    # ---- the assigner (MB-4..MB-7) ---------------------------------------

    def _row(self, index: int, s: RowStep) -> None:
        c = self.c
        if not c.enabled:
            self._apply_rows(index, s.key, [(s.kind, s.value)])  # MB-24: one row at a time
            return
        if c.assigner == "proctime":
            self._proctime_batch(index)  # MB-4: before the element
        if self.two_phase:
            self.local.add(index, s.key, (s.kind, s.value))
        else:
            self.bundle.add(index, s.key, (s.kind, s.value))

    def _proctime_batch(self, index: int) -> None:
        """MB-4: the batch of the current processing time, emitted when it is new."""
        batch = self.now - self.now % self.c.allow_latency
        if batch > self.current:
            self.current = batch
            self._assigner_emits(index, batch)

    def _upstream_watermark(self, index: int, ts: int) -> None:
        c = self.c
        if not c.enabled:
            self._to_exchange(index, ts)
        elif c.assigner == "proctime":
            if ts == MAX_WATERMARK and self.current != MAX_WATERMARK:  # MB-5: only the end, once
                self.current = MAX_WATERMARK
                self._assigner_emits(index, MAX_WATERMARK)
        elif ts == MAX_WATERMARK and self.current != MAX_WATERMARK:  # MB-7: at once
            self.current = MAX_WATERMARK
            self._assigner_emits(index, MAX_WATERMARK)
        else:  # MB-6
            self.current = max(self.current, ts)
            if self.current >= self.next:
                self._advance_rowtime(index)

    def _advance_rowtime(self, index: int) -> None:
        """MB-6: emit the current watermark; the next one is due at the end of its batch, or of the
        batch after when the current one is that end."""
        interval = self.c.allow_latency
        self._assigner_emits(index, self.current)
        end = jlong(batch_start(self.current, interval) + interval - 1)
        self.next = end if end > self.current else jlong(end + interval)

    def _advance(self, index: int, ms: int) -> None:
        """Processing time advances; the assigner's timers fire at their deadlines (MB-4)."""
        target = self.now + ms
        while self.alive and self.timers and min(self.timers) <= target:
            deadline = min(self.timers)
            self.timers.remove(deadline)
            self.now = deadline
            self._proctime_batch(index)
            self.timers.append(self.now - self.now % self.c.allow_latency + self.c.allow_latency)
        self.now = target

    def _assigner_emits(self, index: int, ts: int) -> None:
        if self.idle:  # MB-15: an operator's output drops watermarks while it announces idle
            return
        if self.two_phase:
            self.local.finish(index)  # MB-12 in the local aggregation
        self._to_exchange(index, ts)

    # ---- the exchange's valve and the aggregation (MB-8, MB-12) -----------

    def _to_exchange(self, index: int, ts: int) -> None:
        if ts <= self.valve_last:  # MB-8
            return
        self.valve_last = ts
        self.bundle.finish(index)  # MB-12: the bundle before the watermark
        self.out.append(event(index, "watermark", timestamp=ts))

    def _checkpoint(self, index: int, cid: int) -> None:
        if self.c.enabled:  # MB-13: local bundle, then the aggregation's, before the barrier
            if self.two_phase:
                self.local.finish(index)
            self.bundle.finish(index)
        self.snapshots[cid] = {k: a.copy() for k, a in self.state.items()}

    def _end(self, index: int) -> None:
        """MB-14: the source's last watermark, then every operator finishes in order."""
        self._upstream_watermark(index, MAX_WATERMARK)
        if self.c.enabled and self.c.assigner == "rowtime":
            self._advance_rowtime(index)  # MB-7: finish() emits the current watermark again
        if self.two_phase:
            self.local.finish(index)
        self.bundle.finish(index)

    # ---- the bundles' functions (MB-17..MB-26) ----------------------------

    def _finish_local(self, items: dict[int, list], index: int) -> None:
        """MB-25: one fresh accumulator per key, no row dropped, sent in first-arrival order."""
        for key, rows in items.items():
            acc = self.accumulator()
            for kind, v in rows:
                acc.apply(kind, v)
            self.bundle.add(index, key, acc)

    def _finish_one_phase(self, items: dict[int, list], index: int) -> None:
        for key, rows in items.items():
            self._apply_rows(index, key, rows)

    def _apply_rows(self, index: int, key: int, rows: list[tuple[str, int]]) -> None:
        """MB-17..MB-23 for one key's rows of a bundle (or one row, MB-24)."""
        acc = self.state.get(key)
        prev = acc.value() if acc is not None else None
        if acc is None:
            while rows and rows[0][0] in RETRACTIONS:  # MB-18: leading retractions dropped
                rows = rows[1:]
            if not rows:
                return  # ... and the next key goes on
            acc = self.accumulator()
        else:
            acc = acc.copy()
        for kind, v in rows:
            acc.apply(kind, v)
        self._result(index, key, prev, acc)

    def _finish_global(self, items: dict[int, list], index: int) -> None:
        """MB-26: the local accumulators merged into the state's (a fresh one when there is none)."""
        for key, accs in items.items():
            acc = self.state.get(key)
            prev = acc.value() if acc is not None else None
            acc = acc.copy() if acc is not None else self.accumulator()
            for local in accs:
                acc.merge(local)
            self._result(index, key, prev, acc)

    def _result(self, index: int, key: int, prev: tuple[int, int, int, int] | None, acc: Acc) -> None:
        if acc.count == 0:  # MB-23
            if prev is not None:
                self._emit(index, key, "-D", prev)
            self.state.pop(key, None)
            return
        self.state[key] = acc
        new = acc.value()
        if prev is None:
            self._emit(index, key, "+I", new)  # MB-19
        elif prev != new or self.c.ttl:  # MB-21, MB-22
            if self.c.update_before:
                self._emit(index, key, "-U", prev)  # MB-20
            self._emit(index, key, "+U", new)

    def _emit(self, index: int, key: int, kind: str, v: tuple[int, int, int, int]) -> None:
        self.out.append(event(index, "out", key=key, change=kind, count=v[0], sum=v[1], min=v[2], max=v[3]))
