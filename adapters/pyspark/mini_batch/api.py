"""Retract-aware group aggregation over a change-data-capture stream, with Flink's mini-batch
(spec/mini-batch.md): the public API a Spark user calls on a streaming DataFrame.

    from flink_semantics.adapters.pyspark.mini_batch.api import changelog_aggregate

    changes = changelog_aggregate(cdc, key="k", op="op", value="v", order="lsn",
                                  aggregates=["count", "sum", "min", "max"],
                                  mini_batch=True, allow_latency_ms=1000, bundle_size=100)

`cdc` carries a changelog: rows whose `op` is `+I`, `-U`, `+U` or `-D` (insert, update before,
update after, delete) of a BIGINT key and value.  Spark's own `groupBy().agg()` over a stream
accumulates every row (there is no retraction: a `-D` cannot take a row back, MIN and MAX cannot
give the next value when the least one leaves); this one keeps per key COUNT(*), SUM (BIGINT,
wrapping around as a Java long), MIN and MAX with retraction (MB-30), and emits the aggregation's own
changelog: `+I` for a new key, `-U`/`+U` for a changed one, `-D` when its count drops to zero
(MB-17..MB-24), in bundles with mini-batch on (MB-4..MB-16), optionally local-global (MB-25, MB-26).

The query it builds (two chained `transformWithState`, state on the state store):

    input -> stage 1: groupBy(partition).transformWithState   (assigner, bundles, valve)
          -> shuffle by (partition, key)
          -> stage 2: groupBy(partition, marker, key).transformWithState   (accumulators)

* **Stage 1**, the job's non-keyed part at parallelism 1 per `partition_by` value, runs the engine's
  `Pipeline` (the mini-batch assigner with its timers, MB-4..MB-7; in two-phase the local aggregation
  and its bundle, MB-25; the valve, MB-8; the aggregation's bundle and its count trigger,
  MB-9..MB-16; every operator's idle-aware output, MB-15) in ValueState `job`: a finished bundle is
  emitted key by key (one-phase: the rows; two-phase: the local accumulators), and applied after
  the shuffle.  Bundles live in the state store across micro-batches (a committed micro-batch holds
  them, as a Flink checkpoint would not: see `CONTROL_OPS`' `barrier`).
* **Stage 2**, the aggregation, holds each key's accumulator (count, sum, the multiset of values)
  in ValueState `acc` (`acc_ttl_<ms>` with a state TTL) and applies each finished bundle in order:
  `finish_key` (one-phase, MB-17..MB-24) or `merge_key` (two-phase, MB-26).  No Spark SQL `sum` is
  involved (with ANSI mode it raises on overflow; Flink's BIGINT SUM wraps, MB-30).

Rows are applied in `order` within a micro-batch (arrival order, MB-9, MB-24): a CDC stream's log
sequence number (required: Spark keeps no order of a stream's rows through a shuffle).
Processing time (the processing-time assigner's clock, MB-4) is the `time` column's, when given
(each row advances the clock to its time first, firing the assigner's timers at their deadlines), else
the micro-batch's processing time; either way the assigner's timers fire when a partition's rows
arrive, not on their own (a bundle waiting for its interval's end finishes with the next row after
it, or by size, a watermark, a barrier or end of input).  Besides changelog rows the input may
carry control rows (`CONTROL_OPS`): an upstream watermark, an idle or active status, a clock tick,
a checkpoint barrier, end of input: a source that knows them (the conformance adapter's does)
drives the rules about watermarks (MB-5..MB-8, MB-12, MB-15), checkpoints (MB-13) and end of input
(MB-7, MB-14).

Many independent aggregations can share one query (`partition_by`, e.g. a tenant): each partition
value has its own assigner, bundles and keys, and may have its own configuration (`configs`).
`initial_state` starts the aggregation from saved accumulators, e.g. those of another query's
checkpoint at a chosen batch (`aggregation_state`, Spark's state data source): MB-29's restore.

Bad input raises ValueError naming the parameter and the rule before any job runs.  No RDD API and
no SparkContext: it runs under Spark Connect (the server must import this module).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flink_semantics.adapters.pyspark import chaos
from flink_semantics.adapters.pyspark.mini_batch.engine import (
    Acc,
    BundleOperator,
    ChangelogMode,
    Output,
    Pipeline,
    ProcTimeAssigner,
    RowTimeAssigner,
    Settings,
    Valve,
    finish_key,
    merge_key,
)
from flink_semantics.adapters.pyspark.session import is_connect, struct
from flink_semantics.adapters.pyspark.timers import VirtualClock, VirtualTimers

try:
    from pyspark.sql.streaming import StatefulProcessor
except ImportError:  # pyspark missing: the module still imports (the adapter reports it)
    StatefulProcessor = object  # type: ignore

CHANGES = ("+I", "-U", "+U", "-D")
# Control rows: `watermark` (an upstream watermark, its timestamp in the value column), `idle` and
# `active` (a watermark status), `tick` (processing time advances to the row's time; the assigner's
# timers fire), `barrier` (a checkpoint barrier: every bundle finishes, MB-13), `end` (end of input:
# the watermark MAX, then every operator finishes, MB-7, MB-14).
CONTROL_OPS = ("watermark", "idle", "active", "tick", "barrier", "end")
AGGREGATES = ("count", "sum", "min", "max")
ASSIGNERS = ("proctime", "rowtime")
INTEGRAL = ("bigint", "int", "smallint", "tinyint")
MARKERS = None  # stage 2's lane of the forwarded watermarks and statuses, apart from every key

_STAGE_ONE = ("seq long, n long, kpos long, pos long, type string, key long, change string, "
              "value long, acc string, ts long, idle boolean, marker boolean")
_STAGE_TWO = ("seq long, n long, kpos long, sub long, type string, key long, change string, "
              "count long, sum long, min long, max long, ts long, idle boolean")
ACC_STATE = "count long, sum long, values string"
# Spark runs `transformWithState` on the RocksDB state store only: the session conf a query of
# `changelog_aggregate` needs when it starts (STORE_BACKEND_NOT_SUPPORTED_FOR_TWS otherwise).
STATE_STORE_CONF = {"spark.sql.streaming.stateStore.providerClass":
                    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}
# The columns of `initial_state` and of `aggregation_state`'s result (after the partition column).
STATE_COLUMNS = ("key", "count", "sum", "values")


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class AggregationConfig:
    """One aggregation's configuration (spec/mini-batch.md, "Configuration fields").

    * `mini_batch`: `table.exec.mini-batch.enabled` (MB-1);
    * `allow_latency_ms`: the assigner's interval (MB-4, MB-6), > 0 with mini-batch (MB-2);
    * `bundle_size`: inputs per bundle (MB-10), > 0 with mini-batch (MB-2);
    * `assigner`: `proctime` (MB-4) or `rowtime` (MB-6);
    * `two_phase`: local-global aggregation (MB-25, MB-26), only with mini-batch (MB-3);
    * `update_before`: emit `-U` rows (MB-20);
    * `state_ttl_ms`: idle state retention (Spark's state TTL on the accumulators); with it an
      unchanged key is updated too (MB-22)."""

    mini_batch: bool = False
    allow_latency_ms: int | None = None
    bundle_size: int | None = None
    assigner: str = "proctime"
    two_phase: bool = False
    update_before: bool = False
    state_ttl_ms: int | None = None

    def validate(self, where: str = "") -> None:
        """ValueError naming the parameter and the rule for a configuration the job refuses."""
        def bad(param: str, why: str) -> ValueError:
            return ValueError(f"changelog_aggregate: {where}{param} {why}")

        if self.mini_batch and (not _is_int(self.allow_latency_ms) or self.allow_latency_ms <= 0):
            raise bad("allow_latency_ms", f"must be an integer > 0 with mini_batch=True (MB-2: MiniBatch "
                      f"Latency must be greater than 0 ms), got {self.allow_latency_ms!r}")
        if self.mini_batch and (not _is_int(self.bundle_size) or self.bundle_size <= 0):
            raise bad("bundle_size", "must be an integer > 0 with mini_batch=True (MB-2: "
                      f"table.exec.mini-batch.size must be > 0), got {self.bundle_size!r}")
        if self.assigner not in ASSIGNERS:
            raise bad("assigner", f"must be one of {ASSIGNERS} (MB-4, MB-6), got {self.assigner!r}")
        if self.state_ttl_ms is not None and (not _is_int(self.state_ttl_ms) or self.state_ttl_ms <= 0):
            raise bad("state_ttl_ms", f"must be None or an integer > 0 (MB-22), got {self.state_ttl_ms!r}")
        for name in ("mini_batch", "two_phase", "update_before"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, f"must be a bool (MB-1, MB-3, MB-20), got {getattr(self, name)!r}")

    def settings(self) -> Settings:
        """The engine's settings (MB-1: latency and size ignored without mini-batch)."""
        on = self.mini_batch
        return Settings(enabled=on, allow_latency=(self.allow_latency_ms or 0) if on else 0,
                        size=(self.bundle_size or -1) if on else -1, assigner=self.assigner,
                        update_before=self.update_before, ttl=self.state_ttl_ms is not None,
                        two_phase=self.two_phase)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# --------------------------------------------------------------------------
# Stage 1: the job's non-keyed part (assigner, local aggregation, valve, bundles)
# --------------------------------------------------------------------------

InRow = tuple[int, int, str, int, int]  # (seq, time, op, key, value)


def _bundle_row(seq: int, n: int, type_: str, kpos: int = 0, pos: int = 0, key: int = 0,
                change: str = "", value: int = 0, acc: str = "", ts: int = 0,
                idle: bool = False) -> tuple[Any, ...]:
    marker = type_ in ("watermark", "status")
    return (seq, n, kpos, pos, type_, key, change, value, acc, ts, idle, marker)


def _encode(item: Any) -> list[Any]:
    return ["acc", item.to_json()] if isinstance(item, Acc) else ["row", item[0], item[1]]


def _decode(d: list[Any]) -> Any:
    return Acc.from_json(d[1]) if d[0] == "acc" else (d[1], d[2])


class StageOne:
    """The job's non-keyed part: the engine's `Pipeline` whose aggregation's bundle function emits a
    finished bundle's inputs (stage 2 applies them) instead of applying them; it is also the sink
    after the aggregation's output (the markers, MB-8, MB-15)."""

    def __init__(self, settings: Settings, now: int, snapshot: Mapping[str, Any] | None = None):
        self.timers = VirtualTimers(VirtualClock(now))
        self.pipeline = Pipeline(settings, {}, self.timers, self)  # MB-29: every operator afresh
        aggregation = self.pipeline.operators[-1]
        assert isinstance(aggregation, BundleOperator)
        aggregation.function = self._finished
        self.rows: list[tuple[Any, ...]] = []
        self.seq, self.n = -1, 0
        if snapshot is not None:
            self._restore(snapshot)

    # The sink: what the aggregation's output lets through
    def element(self, key: int, item: Any) -> None:
        raise AssertionError("stage 1 applies no bundle")

    def watermark(self, timestamp: int) -> None:
        self.rows.append(_bundle_row(self.seq, self._next(), "watermark", ts=timestamp))

    def status(self, idle: bool) -> None:
        self.rows.append(_bundle_row(self.seq, self._next(), "status", idle=idle))

    def _next(self) -> int:
        self.n += 1
        return self.n - 1

    def _finished(self, inputs: dict[int, list[Any]], out: Any) -> None:
        """A finished bundle of the aggregation (MB-10, MB-12..MB-14): each key's inputs (MB-9, in
        first-arrival order), rows in one-phase, local accumulators in two-phase (MB-25)."""
        n = self._next()
        for kpos, (key, items) in enumerate(inputs.items()):
            for pos, item in enumerate(items):
                if isinstance(item, Acc):
                    self.rows.append(_bundle_row(self.seq, n, "acc", kpos, pos, key,
                                                 acc=json.dumps(item.to_json())))
                else:
                    kind, value = item
                    self.rows.append(_bundle_row(self.seq, n, "row", kpos, pos, key, kind, value))

    def apply(self, r: InRow) -> None:
        seq, time, op, key, value = r
        if seq != self.seq:
            self.seq, self.n = seq, 0
        if time > self.timers.clock.now:  # MB-4: the assigner's timers fire at their deadlines
            self.timers.advance(time - self.timers.clock.now, lambda: True)
        if op in CHANGES:
            self.pipeline.row(key, op, value)
        elif op == "watermark":
            self.pipeline.watermark(value)
        elif op in ("idle", "active"):
            self.pipeline.status(op == "idle")
        elif op == "barrier":  # MB-13: the bundles finish before the barrier passes
            self.pipeline.checkpoint()
        elif op == "end":  # MB-7, MB-14
            self.pipeline.end()
        elif op != "tick":
            raise ValueError(f"changelog_aggregate: op {op!r} is neither a change {CHANGES} nor a "
                             f"control op {CONTROL_OPS} (MB-9)")

    def snapshot(self) -> dict[str, Any]:
        """What crosses micro-batches: the clock, the pending timer, and every operator's state."""
        operators = []
        for op in self.pipeline.operators:
            d: dict[str, Any] = {"op": type(op).__name__}
            if isinstance(op.out, Output):
                d["output_idle"] = op.out.idle  # MB-15
            if isinstance(op, ProcTimeAssigner):
                d["current"] = op.current
            elif isinstance(op, RowTimeAssigner):
                d["current"], d["next"] = op.current, op.next
            elif isinstance(op, Valve):
                d["last"], d["idle"] = op.last, op.idle
            elif isinstance(op, BundleOperator):
                d["count"] = op.bundle.count
                d["inputs"] = [[k, [_encode(i) for i in items]] for k, items in op.bundle.inputs.items()]
            operators.append(d)
        return {"now": self.timers.clock.now, "timers": self.timers.deadlines(), "operators": operators}

    def _restore(self, s: Mapping[str, Any]) -> None:
        self.timers.retime(s["timers"])
        for op, d in zip(self.pipeline.operators, s["operators"], strict=True):
            if type(op).__name__ != d["op"]:
                raise RuntimeError(f"stage 1 restored {d['op']} into {type(op).__name__}")
            if isinstance(op.out, Output):
                op.out.idle = d["output_idle"]
            if isinstance(op, ProcTimeAssigner):
                op.current = d["current"]
            elif isinstance(op, RowTimeAssigner):
                op.current, op.next = d["current"], d["next"]
            elif isinstance(op, Valve):
                op.last, op.idle = d["last"], d["idle"]
            elif isinstance(op, BundleOperator):
                op.bundle.count = d["count"]
                op.bundle.inputs = {k: [_decode(i) for i in items] for k, items in d["inputs"]}


def stage_one(settings: Settings, saved: str | None,
              rows: Iterable[InRow]) -> tuple[str, list[tuple[Any, ...]]]:
    """Stage 1 on one micro-batch of a partition's rows: the saved state (None: a fresh job, whose
    clock starts at its first row's time) -> the state to save and the rows for stage 2."""
    ordered = sorted(rows, key=lambda r: r[0])
    if saved is None:
        stage = StageOne(settings, ordered[0][1])  # MB-29: a fresh job, every operator afresh
    else:
        snapshot = json.loads(saved)
        stage = StageOne(settings, snapshot["now"], snapshot)
    for r in ordered:
        stage.apply(r)
    return json.dumps(stage.snapshot()), stage.rows


# --------------------------------------------------------------------------
# Stage 2: the aggregation, keyed
# --------------------------------------------------------------------------


def _projection(aggregates: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
    index = [AGGREGATES.index(a) for a in aggregates]
    return lambda result: tuple(result[i] for i in index)


def stage_two(settings: Settings, key: int | None, state: Acc | None, rows: Iterable[tuple[Any, ...]],
              aggregates: Sequence[str] = AGGREGATES) -> tuple[Acc | None, list[tuple[Any, ...]]]:
    """Stage 2 on one micro-batch of one key's rows: the key's accumulator before (None: no state)
    -> after, and its changelog rows, bundle by bundle in `(seq, n)` order.  The lane MARKERS passes
    the forwarded watermarks and statuses through.  With fewer `aggregates` than all four, a key
    whose selected aggregates did not change emits nothing (MB-21), as Flink's query of those."""
    ordered = sorted(rows, key=lambda r: (r[0], r[1], r[3]))
    out: list[tuple[Any, ...]] = []
    if key is MARKERS:
        for seq, n, _, _, type_, _, _, _, _, ts, idle, _ in ordered:
            out.append((seq, n, 0, 0, type_, 0, "", 0, 0, 0, 0, ts, idle))
        return state, out
    mode = ChangelogMode(settings.update_before, settings.ttl)
    per_key = merge_key if settings.enabled and settings.two_phase else finish_key  # MB-26 / MB-17, MB-24
    project = _projection(aggregates)
    bundles: dict[tuple[int, int], tuple[int, list[Any]]] = {}
    for seq, n, kpos, _, type_, _, change, value, acc, _, _, _ in ordered:
        item = Acc.from_json(json.loads(acc)) if type_ == "acc" else (change, value)
        bundles.setdefault((seq, n), (kpos, []))[1].append(item)
    for (seq, n), (kpos, items) in bundles.items():
        before = None if state is None else state.value()
        state, changes = per_key(state, items, mode)  # MB-17..MB-23 (state None: cleared, MB-23)
        if (changes and changes[-1][0] == "+U" and not mode.ttl and before is not None
                and project(before) == project(changes[-1][1])):
            changes = []  # MB-21 over the selected aggregates
        for sub, (change, (count, sum_, min_, max_)) in enumerate(changes):
            out.append((seq, n, kpos, sub, "out", key, change, count, sum_, min_, max_, 0, False))
    return state, out


def acc_row(acc: Acc) -> tuple[int, int, str]:
    """An accumulator as its state row (ACC_STATE): count, sum, the multiset of values as JSON."""
    return acc.count, acc.sum, json.dumps([[v, n] for v, n in acc.values.items()])


def row_acc(row: Sequence[Any]) -> Acc:
    count, sum_, values = row
    return Acc(int(count), int(sum_), {int(v): int(n) for v, n in json.loads(values)})


# --------------------------------------------------------------------------
# The stateful processors
# --------------------------------------------------------------------------



def _fields(ddl: str) -> list[tuple[str, str]]:
    return [(name, type_) for name, type_ in (f.split() for f in ddl.split(", "))]


def _tuples(rows: Iterable[Any], ddl: str) -> list[tuple[Any, ...]]:
    """Rows (pyspark Rows) as tuples of the fields of `ddl`, in its order."""
    names = [n for n, _ in _fields(ddl)]
    return [tuple(r[n] for n in names) for r in rows]


def _out(job: Any, rows: list[tuple[Any, ...]], ddl: str) -> Iterator[Any]:
    from pyspark.sql import Row

    OutRow = Row("job", *(n for n, _ in _fields(ddl)))
    for r in rows:
        yield OutRow(job, *r)


def _job(value: Any, job_type: str) -> Any:
    return int(value) if job_type == "long" else str(value)


@dataclass(frozen=True)
class _Plan:
    """What the processors need: each partition's settings, the default, the selected aggregates."""

    default: Settings
    configs: Mapping[Any, Settings]
    ttls: Mapping[Any, int]  # partition -> state TTL in ms (absent: none)
    default_ttl: int | None
    aggregates: tuple[str, ...]
    job_type: str
    chaos_root: str | None = None  # a directory armed by chaos.arm: the fault runs' task failures

    def settings(self, job: Any) -> Settings:
        return self.configs.get(job, self.default)

    def ttl(self, job: Any) -> int | None:
        return self.ttls.get(job) if job in self.configs else self.default_ttl

    def ttl_values(self) -> set[int]:
        return {t for t in [self.default_ttl, *self.ttls.values()] if t is not None}


class BundleProcessor(StatefulProcessor):  # type: ignore[misc,valid-type]
    """Stage 1: one partition's non-keyed part of the job; ValueState `job` holds it between
    micro-batches (MB-4..MB-16, MB-25)."""

    def __init__(self, plan: _Plan):
        self.plan = plan

    def init(self, handle: Any) -> None:
        self.job = handle.getValueState("job", struct("job string"))

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        job = _job(key[0], self.plan.job_type)
        saved = self.job.get()
        inputs = _tuples(rows, "seq long, time long, op string, key long, value long")
        snapshot, out = stage_one(self.plan.settings(job), None if saved is None else saved[0],
                                  inputs)  # type: ignore[arg-type]
        self.job.update((snapshot,))
        if self.plan.chaos_root is not None:  # a task failure after a state update, before the commit
            chaos.task_point(self.plan.chaos_root, "mini_batch stage 1 after a state update")
        yield from _out(job, out, _STAGE_ONE)

    def close(self) -> None:
        pass


class AggregationProcessor(StatefulProcessor):  # type: ignore[misc,valid-type]
    """Stage 2: one key of the aggregation; ValueState `acc` (`acc_ttl_<ms>` with a state TTL)
    holds its accumulator (MB-17..MB-26, MB-30)."""

    def __init__(self, plan: _Plan):
        self.plan = plan

    def init(self, handle: Any) -> None:
        self.states = {None: handle.getValueState("acc", struct(ACC_STATE))}
        for ttl in sorted(self.plan.ttl_values()):
            self.states[ttl] = handle.getValueState(f"acc_ttl_{ttl}", struct(ACC_STATE), ttl)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        job = _job(key[0], self.plan.job_type)
        k = MARKERS if bool(key[1]) else int(key[2])
        state = self.states[self.plan.ttl(job)]
        saved = None if k is MARKERS else state.get()
        before = None if saved is None else row_acc(saved)
        after, out = stage_two(self.plan.settings(job), k, before, _tuples(rows, _STAGE_ONE),
                               self.plan.aggregates)
        if k is not MARKERS:
            if after is None:
                if before is not None:
                    state.clear()  # MB-23
            else:
                state.update(acc_row(after))
        if self.plan.chaos_root is not None:  # a task failure after a state update, before the commit
            chaos.task_point(self.plan.chaos_root, "mini_batch stage 2 after a state update")
        yield from _out(job, out, _STAGE_TWO)

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        """MB-29: the key's accumulator from the initial state (a checkpoint's)."""
        job = _job(key[0], self.plan.job_type)
        count, sum_, values = _tuples([initialState], ACC_STATE)[0]
        self.states[self.plan.ttl(job)].update((count, sum_, values))

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------
# The public functions
# --------------------------------------------------------------------------


def _functions(spark: Any) -> Any:
    if is_connect(spark):  # a Connect client next to a classic session needs its own functions
        from pyspark.sql.connect import functions as F
    else:
        from pyspark.sql import functions as F  # type: ignore[no-redef]
    return F


def _column_type(df: Any, param: str, name: Any, allowed: Sequence[str], rule: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"changelog_aggregate: {param} must be a column name, got {name!r} ({rule})")
    types = dict(df.dtypes)
    if name not in types:
        raise ValueError(f"changelog_aggregate: {param}={name!r} is not a column of the input "
                         f"(columns: {sorted(types)}) ({rule})")
    if types[name] not in allowed:
        raise ValueError(f"changelog_aggregate: {param}={name!r} has type {types[name]}, "
                         f"not one of {tuple(allowed)} ({rule})")
    return types[name]


def _validate_aggregates(aggregates: Any) -> tuple[str, ...]:
    if isinstance(aggregates, str) or not isinstance(aggregates, Sequence) or not aggregates:
        raise ValueError(f"changelog_aggregate: aggregates must be a non-empty list of {AGGREGATES} "
                         f"(MB-30), got {aggregates!r}")
    bad = [a for a in aggregates if a not in AGGREGATES]
    if bad or len(set(aggregates)) != len(aggregates):
        raise ValueError(f"changelog_aggregate: aggregates must name each of {AGGREGATES} at most "
                         f"once (MB-30), got {list(aggregates)!r}")
    return tuple(aggregates)


def changelog_aggregate(df: Any, key: str, op: str, value: str,
                        aggregates: Sequence[str] = AGGREGATES, *, mini_batch: bool = False,
                        allow_latency_ms: int | None = None, bundle_size: int | None = None,
                        assigner: str = "proctime", two_phase: bool = False, update_before: bool = False,
                        state_ttl_ms: int | None = None, order: str | None = None, time: str | None = None,
                        partition_by: str | None = None,
                        configs: Mapping[Any, AggregationConfig] | None = None, initial_state: Any = None,
                        markers: bool = False, chaos_root: str | None = None) -> Any:
    """`SELECT key, COUNT(*), SUM(value), MIN(value), MAX(value) ... GROUP BY key` over a changelog
    stream, as Flink runs it with mini-batch on or off (spec/mini-batch.md), returning the
    aggregation's changelog as a streaming DataFrame (append mode).

    Input: `df`, a streaming DataFrame with BIGINT-compatible `key` and `value` columns and a string
    `op` column: `+I`, `-U`, `+U`, `-D`, or a control op (`CONTROL_OPS`); `order` (required, a long):
    arrival order within a micro-batch (MB-9, MB-24); `time` (optional, a long, ms): the row's
    processing time (MB-4), else the micro-batch's; `partition_by` (optional, a long or string
    column): independent aggregations in one query.

    Output columns: `partition_by` (if given), `key`, `op` (the change: `+I`, `-U`, `+U`, `-D`), the
    `aggregates` in their order (COUNT(*), SUM as a wrapping BIGINT, MIN, MAX with retraction: MB-30;
    for `-U` and `-D` the result before), and `seq`, `n`, `kpos`, `sub`: ordering them by those gives
    the changelog in emission order (`seq` is the `order` of the input that finished the bundle).
    With `markers=True` also `type` (`out`, `watermark`, `status`), `ts` and `idle`: the watermarks
    and statuses the aggregation forwards (MB-8, MB-15).

    Rules: MB-1 (mini-batch off: each row on its own, MB-24), MB-2 (ValueError for a latency or
    size <= 0 with mini-batch), MB-3 (`two_phase` only with mini-batch), MB-4..MB-7 (the assigners),
    MB-8 (the valve), MB-9..MB-16 (bundles: size, watermarks, barriers, end of input, statuses),
    MB-17..MB-23 (+I, -U/+U, nothing for an unchanged key, -D; leading retractions of a key without
    state dropped), MB-22 (`state_ttl_ms`), MB-25, MB-26 (local-global), MB-29 (`initial_state`, the
    columns `STATE_COLUMNS` after `partition_by`: a restore), MB-30 (the aggregates).

    The query needs the RocksDB state store (`STATE_STORE_CONF`, set on the session before
    `start()`), as every `transformWithState` does.  With `state_ttl_ms` the aggregation runs in
    Spark's `ProcessingTime` time mode (Spark's state TTL needs it), where a query runs no-data
    micro-batches: set `spark.sql.streaming.noDataMicroBatches.enabled=false` for
    `trigger(availableNow=True)` to end.

    `configs` maps a `partition_by` value to its own `AggregationConfig` (the keyword arguments are
    the configuration of the others).  `chaos_root` (testing only): a directory armed by
    `chaos.arm`, where both stages' tasks fail now and then after a state update, before their
    micro-batch commits (the conformance adapter's fault runs; Spark runs the task again from the
    last committed state).  Bad arguments raise ValueError naming the parameter and the rule; no job
    runs until the caller starts the stream."""
    default = AggregationConfig(mini_batch, allow_latency_ms, bundle_size, assigner, two_phase,
                                update_before, state_ttl_ms)
    default.validate()
    for job, config in (configs or {}).items():
        if not isinstance(config, AggregationConfig):
            raise ValueError(f"changelog_aggregate: configs[{job!r}] must be an AggregationConfig (MB-2)")
        config.validate(f"configs[{job!r}].")
    if not isinstance(markers, bool):
        raise ValueError(f"changelog_aggregate: markers must be a bool (MB-8), got {markers!r}")
    if chaos_root is not None and not isinstance(chaos_root, str):
        raise ValueError(f"changelog_aggregate: chaos_root must be None or a directory's path as a str "
                         f"(chaos.arm), got {chaos_root!r}")
    selected = _validate_aggregates(aggregates)
    _column_type(df, "key", key, INTEGRAL, "the query's BIGINT key, MB-30")
    _column_type(df, "value", value, INTEGRAL, "MB-30: SUM, MIN and MAX over BIGINT")
    _column_type(df, "op", op, ("string",), "MB-17: a changelog's row kinds")
    if order is None:  # Spark has no order of a stream's rows through a shuffle, nor a streaming row id
        raise ValueError("changelog_aggregate: order must name a column of arrival order, e.g. a CDC log "
                         "sequence number (MB-9, MB-24: each key's rows apply in arrival order)")
    _column_type(df, "order", order, INTEGRAL, "MB-9: arrival order")
    if time is not None:
        _column_type(df, "time", time, INTEGRAL, "MB-4: processing time in ms")
    job_type = "long"
    if partition_by is not None:
        t = _column_type(df, "partition_by", partition_by, (*INTEGRAL, "string"), "MB-9: one job each")
        job_type = "string" if t == "string" else "long"
    elif configs:
        raise ValueError("changelog_aggregate: configs needs partition_by (MB-2)")
    plan = _Plan(default.settings(), {j: c.settings() for j, c in (configs or {}).items()},
                 {j: c.state_ttl_ms for j, c in (configs or {}).items() if c.state_ttl_ms is not None},
                 state_ttl_ms, selected, job_type, chaos_root)
    F = _functions(df.sparkSession)
    order_col = F.col(order)
    # Without a time column: the micro-batch's timestamp (current_timestamp is the batch's in a stream)
    time_col = F.col(time) if time is not None else F.unix_millis(F.current_timestamp())
    job_col = F.col(partition_by) if partition_by is not None else F.lit(0)
    src = df.select(job_col.cast(job_type).alias("job"), order_col.cast("long").alias("seq"),
                    time_col.cast("long").alias("time"), F.col(op).alias("op"),
                    F.col(key).cast("long").alias("key"), F.col(value).cast("long").alias("value"))
    bundles = src.groupBy("job").transformWithState(
        BundleProcessor(plan), struct(f"job {job_type}, {_STAGE_ONE}"), "Append", "None")
    initial = None
    if initial_state is not None:
        initial = _initial(initial_state, partition_by, job_type, F).groupBy("job", "marker", "key")
    out = bundles.groupBy("job", "marker", "key").transformWithState(
        AggregationProcessor(plan), struct(f"job {job_type}, {_STAGE_TWO}"), "Append",
        "ProcessingTime" if plan.ttl_values() else "None", initialState=initial)
    if not markers:
        out = out.where(F.col("type") == "out")
    columns = [F.col("key").alias(key), F.col("change").alias("op"), *selected, "seq", "n", "kpos", "sub"]
    if markers:
        columns += ["type", "ts", "idle"]
    if partition_by is not None:
        columns.insert(0, F.col("job").alias(partition_by))
    return out.select(*columns)


def _initial(state: Any, partition_by: str | None, job_type: str, F: Any) -> Any:
    """`initial_state` (partition_by, key, count, sum, values) as stage 2's grouping and state."""
    names = ([partition_by] if partition_by is not None else []) + list(STATE_COLUMNS)
    missing = [n for n in names if n not in state.columns]
    if missing:
        raise ValueError(f"changelog_aggregate: initial_state lacks the columns {missing} "
                         f"(MB-29: {names})")
    job = F.col(partition_by) if partition_by is not None else F.lit(0)
    longs = [F.col(c).cast("long").alias(c) for c in ("key", "count", "sum")]
    return state.select(job.cast(job_type).alias("job"), F.lit(False).alias("marker"), *longs,
                        F.col("values").cast("string").alias("values"))


def aggregation_state(spark: Any, checkpoint: str, batch_id: int, *, partition_by: str | None = None,
                      state_ttl_ms: Iterable[int] = (), operator_id: int = 0) -> Any:
    """The accumulators of a `changelog_aggregate` query as of a committed micro-batch, read with
    Spark's state data source (`format("statestore")`): a DataFrame of `partition_by` (if given)
    and `STATE_COLUMNS`, fit for another query's `initial_state` (MB-29: a restore from that
    checkpoint; what came after it is not in it).  `state_ttl_ms`: the TTLs the query's
    configurations had (each a state variable of its own); `operator_id`: stage 2's (0: Spark numbers
    stateful operators from the sink up)."""
    if not _is_int(batch_id) or batch_id < 0:
        raise ValueError(f"aggregation_state: batch_id must be a committed batch id >= 0 (MB-29), "
                         f"got {batch_id!r}")
    F = _functions(spark)
    # A TTL'd value reads as (value, ttlExpirationMs)
    variables = [("acc", "value"), *((f"acc_ttl_{t}", "value.value") for t in sorted(set(state_ttl_ms)))]
    frames = []
    for variable, v in variables:
        read = (spark.read.format("statestore").option("operatorId", operator_id)
                .option("stateVarName", variable).option("batchId", batch_id).load(checkpoint))
        frames.append(read.select(F.col("key.job").alias(partition_by or "job"), "key.key", f"{v}.count",
                                  f"{v}.sum", f"{v}.values"))
    state = frames[0]
    for f in frames[1:]:
        state = state.unionByName(f)
    return state if partition_by is not None else state.drop("job")
