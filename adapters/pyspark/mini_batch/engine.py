"""Mini-batch aggregation as the engine runs it (spec/mini-batch.md), standard library only.

One group aggregation, `SELECT k, COUNT(*), SUM(v), MIN(v), MAX(v) ... GROUP BY k`, over a changelog
of BIGINT keys and values (any long is a key), at parallelism 1:

    source -> mini-batch assigner -> [local aggregation] -> exchange (valve) -> aggregation -> sink

* the aggregate functions: `Acc` (COUNT(*), SUM, MIN and MAX with retraction, MB-30);
* what a bundle does to one key, the pieces a streaming face reuses: `finish_key` (one-phase,
  MB-17..MB-23), `local_acc` (the local aggregation, MB-25), `merge_key` (the global aggregation,
  MB-26), `changelog` (the rows a key emits, MB-19..MB-23);
* the operators: `ProcTimeAssigner` (MB-4, MB-5), `RowTimeAssigner` (MB-6, MB-7), `BundleOperator`
  with its `Bundle` (MB-9..MB-16), `Valve` (MB-8), each operator's `Output` (MB-15);
* `Pipeline`: one incarnation of the job, with its checkpoint (MB-13) and end of input (MB-7, MB-14).

Nothing but the aggregation's keyed state outlives an incarnation (MB-29): `Pipeline.snapshot`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

MAX_WATERMARK = 2**63 - 1  # Long.MAX_VALUE: end of input
MIN_WATERMARK = -(2**63)  # Long.MIN_VALUE: no watermark yet
RETRACTIONS = ("-U", "-D")  # -U and -D retract; +I and +U accumulate

Result = tuple[int, int, int | None, int | None]  # a key's (count, sum, min, max)
Change = tuple[str, Result]  # a changelog row of a key: its kind (+I, -U, +U, -D) and its result
Row = tuple[str, int]  # an input row of a key: its kind and its value


# --------------------------------------------------------------------------
# Java long arithmetic (the row-time assigner, MB-6; SUM, MB-30)
# --------------------------------------------------------------------------


def java_long(x: int) -> int:
    """`x` wrapped to a signed 64-bit long, as Java's long arithmetic overflows."""
    return (x + 2**63) % 2**64 - 2**63


def java_rem(a: int, b: int) -> int:
    """Java's `a % b`: the remainder has the sign of the dividend."""
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


# --------------------------------------------------------------------------
# Accumulators (MB-30)
# --------------------------------------------------------------------------


class Acc:
    """COUNT(*), SUM(v), MIN(v) and MAX(v) with retraction of one key (MB-30): the count, the sum and
    the multiset of values (value -> multiplicity).  A multiplicity may be negative in a local
    accumulator that retracts what the aggregation's state holds (MB-25)."""

    __slots__ = ("count", "sum", "values")

    def __init__(self, count: int = 0, sum: int = 0, values: dict[int, int] | None = None):
        self.count = count
        self.sum = sum
        self.values: dict[int, int] = dict(values or {})

    def apply(self, kind: str, value: int) -> None:
        """Accumulate (+I, +U) or retract (-U, -D) one row's value (glossary)."""
        n = -1 if kind in RETRACTIONS else 1
        self.count += n
        self.sum = java_long(self.sum + n * value)  # MB-30: SUM over BIGINT wraps around, as in Java
        self._add(value, n)

    def merge(self, other: Acc) -> None:
        """Add another accumulator's rows (MB-26); the sums wrap around (MB-30)."""
        self.count += other.count
        self.sum = java_long(self.sum + other.sum)
        for v, n in other.values.items():
            self._add(v, n)

    def _add(self, value: int, n: int) -> None:
        m = self.values.get(value, 0) + n
        if m:
            self.values[value] = m
        else:
            self.values.pop(value, None)

    def value(self) -> Result:
        """MB-30: the count, the sum, the least and the greatest value held."""
        held = [v for v, n in self.values.items() if n > 0]
        return self.count, self.sum, min(held, default=None), max(held, default=None)

    def copy(self) -> Acc:
        return Acc(self.count, self.sum, self.values)

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "sum": self.sum, "values": [[v, n] for v, n in self.values.items()]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Acc:
        return cls(d["count"], d["sum"], {v: n for v, n in d["values"]})


# --------------------------------------------------------------------------
# What finishing a bundle does to one key (MB-17..MB-26)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangelogMode:
    update_before: bool = False  # the sink asks for -U rows (MB-20)
    ttl: bool = False  # idle state retention is on (MB-22)


def changelog(before: Result | None, acc: Acc, mode: ChangelogMode) -> tuple[Acc | None, list[Change]]:
    """The key's new state (None: cleared) and its changelog rows, from its result before the bundle
    (None: the key had no state) and its accumulator after it."""
    if acc.count == 0:  # MB-23: the group is empty; -D only when it was there
        return None, [] if before is None else [("-D", before)]
    after = acc.value()
    if before is None:  # MB-19: a new key
        return acc, [("+I", after)]
    if after == before and not mode.ttl:  # MB-21; with retention, MB-22 updates it anyway
        return acc, []
    return acc, ([("-U", before)] if mode.update_before else []) + [("+U", after)]  # MB-20


def drop_leading_retractions(rows: list[Row]) -> list[Row]:
    """MB-18: the retractions at the head of the rows of a key without state."""
    i = 0
    while i < len(rows) and rows[i][0] in RETRACTIONS:
        i += 1
    return rows[i:]


def finish_key(state: Acc | None, rows: list[Row], mode: ChangelogMode) -> tuple[Acc | None, list[Change]]:
    """One-phase aggregation: a bundle's rows of one key (MB-24: a single row without mini-batch)
    applied in arrival order to the key's accumulator in state (MB-17), intermediate results unseen;
    returns the key's new state and its changelog rows."""
    if state is None:
        rows = drop_leading_retractions(rows)  # MB-18
        if not rows:
            return None, []  # MB-18: nothing remains, the key is skipped
    acc = Acc() if state is None else state.copy()
    for kind, value in rows:
        acc.apply(kind, value)
    return changelog(None if state is None else state.value(), acc, mode)


def local_acc(rows: list[Row]) -> Acc:
    """MB-25: the local aggregation reduces a key's rows of a bundle, none dropped, to a fresh accumulator."""
    acc = Acc()
    for kind, value in rows:
        acc.apply(kind, value)
    return acc


def merge_key(state: Acc | None, accs: list[Acc], mode: ChangelogMode) -> tuple[Acc | None, list[Change]]:
    """MB-26: the global aggregation merges a bundle's local accumulators of one key into its state's
    (a fresh one without state); returns the key's new state and its changelog rows (MB-19..MB-23)."""
    acc = Acc() if state is None else state.copy()
    for a in accs:
        acc.merge(a)
    return changelog(None if state is None else state.value(), acc, mode)


# --------------------------------------------------------------------------
# Operators and their outputs
# --------------------------------------------------------------------------


class Downstream(Protocol):
    """What an operator sends to the next one (or the aggregation to the sink)."""

    def element(self, key: int, item: Any) -> None: ...

    def watermark(self, timestamp: int) -> None: ...

    def status(self, idle: bool) -> None: ...


class Timers(Protocol):
    """Processing-time timers (the schedule's virtual ones in conformance mode)."""

    def now(self) -> float: ...

    def register(self, deadline: float, callback: Callable[[], None]) -> Any: ...


class Output:
    """An operator's output (MB-15): it repeats no status, and drops the watermarks it is given while
    the status it last forwarded is idle."""

    def __init__(self, downstream: Downstream):
        self.downstream = downstream
        self.idle = False

    def element(self, key: int, item: Any) -> None:
        self.downstream.element(key, item)

    def watermark(self, timestamp: int) -> None:
        if not self.idle:
            self.downstream.watermark(timestamp)

    def status(self, idle: bool) -> None:
        if idle != self.idle:
            self.idle = idle
            self.downstream.status(idle)


class Operator:
    """A pipeline operator: elements, watermarks and statuses pass through unless it says otherwise;
    `barrier` runs before a checkpoint barrier passes it, `finish` at end of input (after MAX)."""

    def __init__(self, out: Downstream):
        self.out = out

    def element(self, key: int, item: Any) -> None:
        self.out.element(key, item)

    def watermark(self, timestamp: int) -> None:
        self.out.watermark(timestamp)

    def status(self, idle: bool) -> None:
        self.out.status(idle)  # MB-15: statuses pass through, nothing finished, nothing emitted

    def barrier(self) -> None:
        pass

    def finish(self) -> None:
        pass


class ProcTimeAssigner(Operator):
    """MB-4, MB-5: a mini-batch watermark at each processing-time interval boundary."""

    def __init__(self, interval: int, timers: Timers, out: Downstream):
        super().__init__(out)
        self.interval = interval
        self.timers = timers
        self.current = 0  # MB-4: 0 at the start of an incarnation
        timers.register(timers.now() + interval, self._on_timer)  # MB-4: the start time + I

    def _advance(self) -> int:
        """MB-4: the current batch; emitted when it is past the current watermark."""
        now = int(self.timers.now())
        batch = now - now % self.interval
        if batch > self.current:
            self.current = batch
            self.out.watermark(batch)
        return batch

    def _on_timer(self) -> None:
        self.timers.register(self._advance() + self.interval, self._on_timer)  # MB-4: the next at batch + I

    def element(self, key: int, item: Any) -> None:
        self._advance()  # MB-4: before forwarding the row
        self.out.element(key, item)

    def watermark(self, timestamp: int) -> None:
        if timestamp == MAX_WATERMARK and self.current != MAX_WATERMARK:  # MB-5: only MAX, once
            self.current = MAX_WATERMARK
            self.out.watermark(timestamp)


class RowTimeAssigner(Operator):
    """MB-6, MB-7: upstream watermarks held back until an event-time interval's last millisecond."""

    def __init__(self, interval: int, out: Downstream):
        super().__init__(out)
        self.interval = interval
        self.current = 0  # MB-6: 0 at the start of an incarnation
        self.next = interval - 1  # MB-6: start(0) + I - 1

    def start(self, t: int) -> int:
        """MB-6: start(t) = t - ((t + I) mod I), in Java long arithmetic."""
        return java_long(t - java_rem(java_long(t + self.interval), self.interval))

    def _advance(self) -> None:
        """MB-6: emit the current watermark and set the next due one."""
        self.out.watermark(self.current)
        end = java_long(self.start(self.current) + self.interval - 1)
        self.next = end if end > self.current else java_long(end + self.interval)

    def watermark(self, timestamp: int) -> None:
        if timestamp == MAX_WATERMARK and self.current != MAX_WATERMARK:  # MB-7: MAX at once
            self.current = MAX_WATERMARK
            self.out.watermark(timestamp)
            return
        self.current = max(self.current, timestamp)  # MB-6
        if self.current >= self.next:
            self._advance()

    def finish(self) -> None:
        self._advance()  # MB-7: the current watermark again (the valve drops it if it passed it, MB-8)


class Bundle:
    """MB-9: key -> the key's inputs in arrival order (the keys in first-arrival order), with the
    count trigger (MB-10, MB-11)."""

    def __init__(self, size: int):
        self.size = size
        self.inputs: dict[int, list[Any]] = {}
        self.count = 0

    def add(self, key: int, item: Any) -> bool:
        """MB-10: counts inputs, not keys; True when the input reaching the size finishes the bundle."""
        self.inputs.setdefault(key, []).append(item)
        self.count += 1
        return self.count >= self.size

    def take(self) -> dict[int, list[Any]]:
        """The bundle's inputs; the bundle is empty again and its count 0 (MB-11)."""
        inputs, self.inputs, self.count = self.inputs, {}, 0
        return inputs


BundleFunction = Callable[[dict[int, list[Any]], Downstream], None]  # a finished bundle -> output


class BundleOperator(Operator):
    """An operator that buffers its input in a bundle and finishes it (MB-9..MB-16)."""

    def __init__(self, size: int, function: BundleFunction, out: Downstream):
        super().__init__(out)
        self.bundle = Bundle(size)
        self.function = function

    def finish_bundle(self) -> None:
        inputs = self.bundle.take()  # MB-11: every finish resets the count
        if inputs:  # MB-16: an empty bundle emits nothing
            self.function(inputs, self.out)

    def element(self, key: int, item: Any) -> None:
        if self.bundle.add(key, item):  # MB-10
            self.finish_bundle()

    def watermark(self, timestamp: int) -> None:
        self.finish_bundle()  # MB-12: before the watermark is forwarded
        self.out.watermark(timestamp)

    def barrier(self) -> None:
        self.finish_bundle()  # MB-13: before the checkpoint barrier passes

    def finish(self) -> None:
        self.finish_bundle()  # MB-14


def local_function(inputs: dict[int, list[Any]], out: Downstream) -> None:
    """MB-25: one accumulator per key of the bundle, the keys sent in first-arrival order (C1)."""
    for key, rows in inputs.items():
        out.element(key, local_acc(rows))


class Aggregation:
    """The aggregation's bundle function over its keyed state: one-phase (`finish_key`) or global
    (`merge_key`).  It emits each key's changelog rows as `(kind, result)` elements."""

    def __init__(self, state: dict[int, Acc], mode: ChangelogMode, two_phase: bool):
        self.state = state
        self.mode = mode
        self.per_key = merge_key if two_phase else finish_key  # MB-26 or MB-17

    def __call__(self, inputs: dict[int, list[Any]], out: Downstream) -> None:
        for key, items in inputs.items():  # MB-9: each key's inputs together
            acc, changes = self.per_key(self.state.get(key), items, self.mode)
            if acc is None:
                self.state.pop(key, None)  # MB-23: the key's state is cleared
            else:
                self.state[key] = acc
            for change in changes:
                out.element(key, change)


class Valve(Operator):
    """MB-8: the input of the aggregation's task: a watermark greater than the last one passed, a
    status different from the last one."""

    def __init__(self, out: Downstream):
        super().__init__(out)
        self.last = MIN_WATERMARK
        self.idle = False

    def watermark(self, timestamp: int) -> None:
        if timestamp > self.last:
            self.last = timestamp
            self.out.watermark(timestamp)

    def status(self, idle: bool) -> None:
        if idle != self.idle:
            self.idle = idle
            self.out.status(idle)


# --------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The job's configuration (spec/mini-batch.md, "Configuration fields")."""

    enabled: bool = False
    allow_latency: int = 0
    size: int = -1
    assigner: str = "proctime"
    update_before: bool = False
    ttl: bool = False
    two_phase: bool = False


def refusal(s: Settings) -> str | None:
    """MB-2: why the job refuses the configuration (None: it runs)."""
    if s.enabled and s.allow_latency <= 0:
        return f"MB-2: MiniBatch Latency must be greater than 0 ms (allow_latency {s.allow_latency})"
    if s.enabled and s.size <= 0:
        return f"MB-2: table.exec.mini-batch.size must be > 0 (size {s.size})"
    return None


def snapshot(state: dict[int, Acc]) -> list[list[Any]]:
    """The aggregation's keyed state as JSON: [[key, accumulator], ...]."""
    return [[key, acc.to_json()] for key, acc in state.items()]


def restore(snap: list[list[Any]] | None) -> dict[int, Acc]:
    """MB-29: the state of a checkpoint (None: no checkpoint, no state)."""
    return {key: Acc.from_json(d) for key, d in snap or []}


class Pipeline:
    """One incarnation of the job (MB-29: assigner, bundles and valve fresh; the state given)."""

    def __init__(self, s: Settings, state: dict[int, Acc], timers: Timers, sink: Downstream):
        self.state = state
        two_phase = s.enabled and s.two_phase  # MB-3
        size = s.size if s.enabled else 1  # MB-1, MB-24: without mini-batch each row is a bundle of its own
        aggregate = Aggregation(state, ChangelogMode(s.update_before, s.ttl), two_phase)
        aggregation = BundleOperator(size, aggregate, Output(sink))
        self.operators: list[Operator] = [Valve(aggregation), aggregation]
        if two_phase:  # MB-25
            self.operators.insert(0, BundleOperator(s.size, local_function, Output(self.operators[0])))
        if s.enabled:  # MB-1: no assigner without mini-batch
            self.operators.insert(0, self._assigner(s, timers, Output(self.operators[0])))

    @staticmethod
    def _assigner(s: Settings, timers: Timers, out: Downstream) -> Operator:
        if s.assigner == "rowtime":
            return RowTimeAssigner(s.allow_latency, out)
        return ProcTimeAssigner(s.allow_latency, timers, out)

    def row(self, key: int, kind: str, value: int) -> None:
        self.operators[0].element(key, (kind, value))

    def watermark(self, timestamp: int) -> None:
        self.operators[0].watermark(timestamp)

    def status(self, idle: bool) -> None:
        self.operators[0].status(idle)

    def checkpoint(self) -> list[list[Any]]:
        """MB-13: the barrier passes every operator in order (the local bundle finishes first, then
        the aggregation's); the snapshot is the aggregation's state after every row before it."""
        for op in self.operators:
            op.barrier()
        return snapshot(self.state)

    def end(self) -> None:
        """End of input: the source emits MAX, then every operator finishes, in pipeline order (MB-7,
        MB-14)."""
        self.operators[0].watermark(MAX_WATERMARK)
        for op in self.operators:
            op.finish()
