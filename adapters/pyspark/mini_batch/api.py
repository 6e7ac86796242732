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
(MB-17 to MB-24), in bundles with mini-batch on (MB-4 to MB-16), optionally local-global (MB-25,
MB-26).

The query it builds (two chained `transformWithState`, state on the state store):

    input -> stage 1: groupBy(partition[, task]).transformWithState   (assigner, bundles, valve)
          -> shuffle by (partition, key)
          -> stage 2: groupBy(partition, marker, key).transformWithState   (accumulators)

* **Stage 1**, the job's non-keyed part (per `partition_by` value: one task, or `local_parallelism`
  tasks each with its keys' rows), runs the engine's `Pipeline` (the mini-batch assigner with its
  timers, MB-4, MB-6; in two-phase the local aggregation and its bundle, MB-25; the valve, MB-8; the
  aggregation's bundle and its count trigger, MB-10; every operator's idle-aware output, MB-15) in
  ValueState `job`: a finished bundle is emitted key by key (one-phase: the rows; two-phase: the
  local accumulators), and applied after the shuffle. By default each committed micro-batch is a
  checkpoint: every bundle finishes before it commits (MB-13), so nothing waits in the state store
  for rows that may never come.
* **Stage 2**, the aggregation, holds each key's accumulator (count, sum, the multiset of values)
  in ValueState `acc` (`acc_ttl_<ms>` with a state TTL) and applies each finished bundle in order:
  `finish_key` (one-phase, MB-17 to MB-24) or `merge_key` (two-phase, MB-26).  No Spark SQL `sum`
  is involved (with ANSI mode it raises on overflow; Flink's BIGINT SUM wraps, MB-30).

Rows are applied in `order` within a micro-batch (arrival order, MB-9, MB-24): a CDC stream's log
sequence number (required: Spark keeps no order of a stream's rows through a shuffle).
Processing time (the processing-time assigner's clock, MB-4) is the `time` column's, when given
(each row advances the clock to its time first, firing the assigner's timers at their deadlines),
else the micro-batch's processing time.  `changelog_aggregate`'s docstring says when bundles finish
on a real query (`commit_finishes_bundles`) and what Spark cannot do there.  Besides changelog rows
the input may carry control rows (`CONTROL_OPS`): an upstream watermark, an idle or active status,
a clock tick, a checkpoint barrier, end of input: a source that knows them (the conformance
runner's does) drives the rules about watermarks (MB-5, MB-7, MB-8, MB-12, MB-15), checkpoints
(MB-13) and end of input (MB-7, MB-14).

Many independent aggregations can share one query (`partition_by`, e.g. a tenant): each partition
value has its own assigner, bundles and keys, and may have its own configuration (`configs`).
`initial_state` starts the aggregation from saved accumulators, e.g. those of another query's
checkpoint at a chosen batch (`aggregation_state`, Spark's state data source): MB-29's restore.

Bad arguments raise ValueError naming the parameter and the rule before any job runs; a bad row
fails the running query with a ValueError naming the row's `order` value, the column and the rule.
No RDD API and no SparkContext: it runs under Spark Connect (the server must import this module).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
        self.advance_to(time)  # MB-4: the assigner's timers fire at their deadlines
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
        return {"now": self.timers.clock.now, "timers": self.timers.deadlines(), "seq": self.seq,
                "n": self.n, "operators": operators}

    def advance_to(self, now: int) -> None:
        """MB-4: processing time moves on to `now`; the assigner's timers fire at their deadlines."""
        if now > self.timers.clock.now:
            self.timers.advance(now - self.timers.clock.now, lambda: True)

    def _restore(self, s: Mapping[str, Any]) -> None:
        self.timers.retime(s["timers"])
        self.seq, self.n = s.get("seq", -1), s.get("n", 0)
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


def stage_one(settings: Settings, saved: str | None, rows: Iterable[InRow], *, finish: bool = False,
              now: int | None = None) -> tuple[str, list[tuple[Any, ...]]]:
    """Stage 1 on one micro-batch of a partition's rows: the saved state (None: a fresh job, whose
    clock starts at its first row's time, or at `now` without rows) -> the state to save and the
    rows for stage 2.  `now`: processing time moves on to it after the rows (a Spark timer fired);
    `finish`: every bundle finishes after the rows, as before a checkpoint barrier (MB-13)."""
    ordered = sorted(rows, key=lambda r: r[0])
    if saved is None:
        start = ordered[0][1] if ordered else now
        stage = StageOne(settings, 0 if start is None else start)  # MB-29: every operator afresh
    else:
        snapshot = json.loads(saved)
        stage = StageOne(settings, snapshot["now"], snapshot)
    for r in ordered:
        stage.apply(r)
    if now is not None:
        stage.advance_to(now)
    if finish:
        stage.pipeline.checkpoint()  # MB-13: the micro-batch's commit is a checkpoint
    return json.dumps(stage.snapshot()), stage.rows


def wake_up(saved: str) -> int | None:
    """When stage 1 must run again without rows: the assigner's next timer while a bundle holds
    input (MB-4), else None (nothing is waiting, or the row-time assigner waits for a watermark)."""
    snapshot = json.loads(saved)
    waiting = any(d.get("inputs") for d in snapshot["operators"])
    return min(snapshot["timers"]) if waiting and snapshot["timers"] else None


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


IN_DDL = "seq long, time long, op string, key long, value long"
STAGE_ONE_UPDATED = "mini_batch stage 1 after a state update"
STAGE_TWO_UPDATED = "mini_batch stage 2 after a state update"


def check_row(r: InRow, columns: Mapping[str, str]) -> None:
    """ValueError for an input row stage 1 cannot apply, naming the row (its `order` value), the
    user's column and the rule; `columns` maps `order`, `op`, `key`, `value`, `time` to the user's
    column names (`time` absent: the micro-batch's time, never null)."""
    seq, time, op, key, value = r
    order = columns["order"]
    if seq is None:  # MB-9
        raise ValueError(f"changelog_aggregate: a row has a null order column {order!r} (MB-9: each "
                         f"row's arrival order); its op={op!r}, key={key!r}, value={value!r}")
    row = f"changelog_aggregate: the row with {order}={seq}"
    if op is None:  # MB-17
        raise ValueError(f"{row} has a null op column {columns['op']!r} (MB-17: a change {CHANGES} "
                         f"or a control op {CONTROL_OPS})")
    if op not in CHANGES and op not in CONTROL_OPS:  # MB-17
        raise ValueError(f"{row} has op {op!r} in column {columns['op']!r}: neither a change {CHANGES} "
                         f"nor a control op {CONTROL_OPS} (MB-17)")
    if time is None:  # MB-4
        raise ValueError(f"{row} has a null time column {columns.get('time')!r} (MB-4: the row's "
                         "processing time in ms)")
    if op in CHANGES and key is None:  # MB-30
        raise ValueError(f"{row} ({op}) has a null key column {columns['key']!r} (MB-30: the "
                         "aggregation's GROUP BY key is a BIGINT; filter or fill null keys first)")
    if op in (*CHANGES, "watermark") and value is None:  # MB-30
        raise ValueError(f"{row} ({op}) has a null value column {columns['value']!r} (MB-30: COUNT(*), "
                         "SUM, MIN and MAX over a BIGINT value; filter or fill null values first)")


@dataclass(frozen=True)
class _Plan:
    """What the processors need: each partition's settings, the default, the selected aggregates,
    how bundles meet micro-batches, the user's column names and the caller's hook."""

    default: Settings
    configs: Mapping[Any, Settings]
    ttls: Mapping[Any, int]  # partition -> state TTL in ms (absent: none)
    default_ttl: int | None
    aggregates: tuple[str, ...]
    job_type: str
    columns: Mapping[str, str]  # order, op, key, value (and time) -> the user's column names
    finish: bool = True  # MB-13: every bundle finishes before its micro-batch commits
    timers: bool = False  # stage 1 registers a Spark processing-time timer for a waiting bundle
    on_state_update: Callable[[str], None] | None = None

    def settings(self, job: Any) -> Settings:
        return self.configs.get(job, self.default)

    def ttl(self, job: Any) -> int | None:
        return self.ttls.get(job) if job in self.configs else self.default_ttl

    def ttl_values(self) -> set[int]:
        return {t for t in [self.default_ttl, *self.ttls.values()] if t is not None}

    def updated(self, where: str) -> None:
        if self.on_state_update is not None:
            self.on_state_update(where)


class BundleProcessor(StatefulProcessor):  # type: ignore[misc,valid-type]
    """Stage 1: one partition's non-keyed part of the job; ValueState `job` holds it between
    micro-batches (MB-4..MB-16, MB-25)."""

    def __init__(self, plan: _Plan):
        self.plan = plan

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.job = handle.getValueState("job", struct("job string"))

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        inputs = _tuples(rows, IN_DDL)
        for r in inputs:
            check_row(r, self.plan.columns)  # type: ignore[arg-type]
        yield from self._run(key, inputs, None, None)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        """MB-4: the assigner's timer on Spark's clock, with no row arriving (a quiet stream)."""
        yield from self._run(key, [], timerValues.getCurrentProcessingTimeInMs(),
                             expiredTimerInfo.getExpiryTimeInMs())

    def _run(self, key: Any, inputs: list[InRow], now: int | None, fired: int | None) -> Iterator[Any]:
        job = _job(key[0], self.plan.job_type)
        saved = self.job.get()
        if saved is None and not inputs:
            return
        snapshot, out = stage_one(self.plan.settings(job), None if saved is None else saved[0], inputs,
                                  finish=self.plan.finish, now=now)
        self.job.update((snapshot,))
        if self.plan.timers:
            self._wake_up(wake_up(snapshot), fired)
        self.plan.updated(STAGE_ONE_UPDATED)  # e.g. a task failure before the commit
        yield from _out(job, out, _STAGE_ONE)

    def _wake_up(self, deadline: int | None, fired: int | None) -> None:
        """One Spark timer at the waiting bundle's deadline (Spark deletes the one that `fired`)."""
        registered = {int(t) for t in self.handle.listTimers()} - {fired}
        for t in registered - {deadline}:
            self.handle.deleteTimer(t)
        if deadline is not None and deadline not in registered:
            self.handle.registerTimer(deadline)

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
        self.plan.updated(STAGE_TWO_UPDATED)  # e.g. a task failure before the commit
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
        hint = (" (cast it to bigint first if its values are whole numbers)"
                if set(allowed) >= set(INTEGRAL) and types[name] != "string" else "")
        raise ValueError(f"changelog_aggregate: {param}={name!r} has type {types[name]}, "
                         f"not one of {tuple(allowed)} ({rule}){hint}")
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


def _uses_proctime(configs: Iterable[AggregationConfig]) -> bool:
    return any(c.mini_batch and c.assigner == "proctime" for c in configs)


def changelog_aggregate(df: Any, key: str, op: str, value: str,
                        aggregates: Sequence[str] = AGGREGATES, *, mini_batch: bool = False,
                        allow_latency_ms: int | None = None, bundle_size: int | None = None,
                        assigner: str = "proctime", two_phase: bool = False, update_before: bool = False,
                        state_ttl_ms: int | None = None, order: str | None = None, time: str | None = None,
                        partition_by: str | None = None,
                        configs: Mapping[Any, AggregationConfig] | None = None, initial_state: Any = None,
                        markers: bool = False, commit_finishes_bundles: bool = True,
                        local_parallelism: int = 1,
                        on_state_update: Callable[[str], None] | None = None) -> Any:
    """`SELECT key, COUNT(*), SUM(value), MIN(value), MAX(value) ... GROUP BY key` over a changelog
    stream, as Flink runs it with mini-batch on or off (spec/mini-batch.md), returning the
    aggregation's changelog as a streaming DataFrame (append mode).

    Input: `df`, a streaming DataFrame with BIGINT-compatible `key` and `value` columns (bigint,
    int, smallint, tinyint: MB-30; a double, decimal or string column is refused, cast it first) and
    a string `op` column: `+I`, `-U`, `+U`, `-D`, or a control op (`CONTROL_OPS`); `order`
    (required, a long, e.g. a CDC log sequence number): arrival order within a micro-batch (MB-9,
    MB-24); `time` (optional, a long, ms): the row's processing time (MB-4), else the micro-batch's;
    `partition_by` (optional, a long or string column): independent aggregations in one query.

    Output columns: `partition_by` (if given), `key`, `op` (the change: `+I`, `-U`, `+U`, `-D`), the
    `aggregates` in their order (COUNT(*), SUM as a wrapping BIGINT, MIN, MAX with retraction: MB-30;
    for `-U` and `-D` the result before), and `seq`, `n`, `kpos`, `sub`: ordering them by those gives
    the changelog in emission order (`seq` is the `order` of the input that finished the bundle).
    With `markers=True` also `type` (`out`, `watermark`, `status`), `ts` and `idle`: the watermarks
    and statuses the aggregation forwards (MB-8, MB-15).

    Rules: MB-1 (mini-batch off: each row on its own, MB-24), MB-2 (ValueError for a latency or
    size <= 0 with mini-batch), MB-3 (`two_phase` only with mini-batch), MB-4, MB-6 (the assigners),
    MB-8 (the valve), MB-9 to MB-16 (bundles: size, watermarks, barriers, end of input, statuses),
    MB-17 to MB-23 (+I, -U/+U, nothing for an unchanged key, -D; leading retractions of a key
    without state dropped), MB-22 (`state_ttl_ms`), MB-25, MB-26 (local-global), MB-29
    (`initial_state`, the columns `STATE_COLUMNS` after `partition_by`: a restore), MB-30 (the
    aggregates).

    When bundles finish on a real query.  By default (`commit_finishes_bundles=True`) every
    committed micro-batch is a Flink checkpoint: stage 1 finishes every bundle after the
    micro-batch's rows, as before a checkpoint barrier (MB-13), so no bundle spans micro-batches
    and every change of a micro-batch is in that micro-batch's output.  A stream that goes quiet
    has all its changes emitted with its last micro-batch, under a `processingTime` trigger and
    under `trigger(availableNow=True)` alike, and availableNow ends on its own.  Within a
    micro-batch, bundles finish by size (MB-10) and, with a `time` column, at the assigner's
    interval boundaries (MB-4) or the row-time assigner's watermarks (MB-6, MB-12).  Unlike
    Flink, whose checkpoint interval is apart from its bundles, a trigger interval shorter than
    `allow_latency_ms` cuts bundles more often than Flink would: more state accesses, the same
    final result (the changelog has more, smaller steps).

    `commit_finishes_bundles=False` keeps bundles in the state store across micro-batches (a
    committed micro-batch is then not a checkpoint; only the input's `barrier` rows are).  Without
    a `time` column, stage 1 then runs in Spark's `ProcessingTime` time mode and registers a Spark
    processing-time timer at the deadline of the assigner's interval while a bundle waits (MB-4),
    so a quiet stream's last bundle is emitted within `allow_latency_ms` plus one trigger interval
    under a `processingTime` trigger.  Spark cannot end `trigger(availableNow=True)` in that mode:
    `TransformWithStateExec.shouldRunAnotherBatch` is always true in `ProcessingTime` time mode
    (Spark's TODO SPARK-50180), so the query runs no-data micro-batches forever (nor does
    `processAllAvailable()` return: a micro-batch is constructed every trigger, never "no new
    data"); with `spark.sql.streaming.noDataMicroBatches.enabled=false` it ends, but no-data
    micro-batches, and so the timers, never run, and the last bundle waits for the next run.  With
    a `time` column the clock is the rows' (Spark's timers run on another clock): a waiting bundle
    finishes with the next row past its interval, a `tick` or `barrier` row, end of input or size.
    The row-time assigner's bundles wait for the next watermark in both modes, as in Flink.

    The query needs the RocksDB state store (`STATE_STORE_CONF`, set on the session before
    `start()`), as every `transformWithState` does.  With `state_ttl_ms` the aggregation runs in
    Spark's `ProcessingTime` time mode (Spark's state TTL needs it), where a query runs no-data
    micro-batches (the same SPARK-50180): set `spark.sql.streaming.noDataMicroBatches.enabled=false`
    for `trigger(availableNow=True)` to end (with the default, no bundle waits for them).

    Bad rows in a running query fail it (never a silent drop): a null `order`, `op`, `time`, or a
    change's null `key` or `value`, and an `op` that is neither a change nor a control op raise a
    ValueError naming the row's `order` value, the column and the rule (MB-9, MB-17, MB-4, MB-30);
    Spark reports it as the query's exception.

    `local_parallelism` (default 1): stage 1 runs in that many tasks per `partition_by` value,
    each key's rows in task `pmod(xxhash64(key), local_parallelism)`, as Flink runs the bundles per
    subtask (one-phase: the aggregation's, per key hash; two-phase: the local aggregation's, here
    per key hash too, so that a key's rows keep their order).  Each task has its own assigner,
    bundles and count (MB-10 counts a subtask's inputs); control rows reach every task.  It
    cannot go with `markers=True`: each task would forward its own watermarks and statuses, and
    stage 2 has no valve over several input channels to combine them (MB-8).

    `configs` maps a `partition_by` value to its own `AggregationConfig` (the keyword arguments are
    the configuration of the others).  `on_state_update` (optional): a picklable callable that
    both stages' tasks call with a short description after each state update, before their
    micro-batch commits (the conformance runner fails tasks there; Spark runs them again from the
    last committed state).  Bad arguments raise ValueError naming the parameter and the rule; no job
    runs until the caller starts the stream."""
    default = AggregationConfig(mini_batch, allow_latency_ms, bundle_size, assigner, two_phase,
                                update_before, state_ttl_ms)
    default.validate()
    for job, config in (configs or {}).items():
        if not isinstance(config, AggregationConfig):
            raise ValueError(f"changelog_aggregate: configs[{job!r}] must be an AggregationConfig (MB-2)")
        config.validate(f"configs[{job!r}].")
    for name, flag, rule in (("markers", markers, "MB-8"), ("commit_finishes_bundles",
                                                          commit_finishes_bundles, "MB-13")):
        if not isinstance(flag, bool):
            raise ValueError(f"changelog_aggregate: {name} must be a bool ({rule}), got {flag!r}")
    if not _is_int(local_parallelism) or local_parallelism < 1:
        raise ValueError(f"changelog_aggregate: local_parallelism must be an integer >= 1 (MB-10: "
                         f"bundles per subtask), got {local_parallelism!r}")
    if markers and local_parallelism > 1:
        raise ValueError("changelog_aggregate: markers=True needs local_parallelism=1 (MB-8: stage 2 "
                         "has no valve to combine the watermarks of several stage-1 tasks)")
    if on_state_update is not None and not callable(on_state_update):
        raise ValueError(f"changelog_aggregate: on_state_update must be None or a callable taking a "
                         f"str (a hook after each state update), got {on_state_update!r}")
    selected = _validate_aggregates(aggregates)
    _column_type(df, "key", key, INTEGRAL, "MB-30: the aggregation's GROUP BY key is a BIGINT")
    _column_type(df, "value", value, INTEGRAL, "MB-30: COUNT(*), SUM, MIN and MAX over a BIGINT value")
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
    columns = {"order": order, "op": op, "key": key, "value": value, **({"time": time} if time else {})}
    # MB-4: Spark's timers for a waiting bundle, only where Spark's clock is the assigner's
    timers = (not commit_finishes_bundles and time is None
              and _uses_proctime([default, *(configs or {}).values()]))
    plan = _Plan(default.settings(), {j: c.settings() for j, c in (configs or {}).items()},
                 {j: c.state_ttl_ms for j, c in (configs or {}).items() if c.state_ttl_ms is not None},
                 state_ttl_ms, selected, job_type, columns, commit_finishes_bundles, timers,
                 on_state_update)
    F = _functions(df.sparkSession)
    order_col = F.col(order)
    # Without a time column: the micro-batch's timestamp (current_timestamp is the batch's in a stream,
    # as is the processing time of transformWithState's timers)
    time_col = F.col(time) if time is not None else F.unix_millis(F.current_timestamp())
    job_col = F.col(partition_by) if partition_by is not None else F.lit(0)
    src = df.select(job_col.cast(job_type).alias("job"), order_col.cast("long").alias("seq"),
                    time_col.cast("long").alias("time"), F.col(op).alias("op"),
                    F.col(key).cast("long").alias("key"), F.col(value).cast("long").alias("value"))
    grouping = ["job"]
    if local_parallelism > 1:  # a change to its key's task, a control row to every task
        task = F.pmod(F.xxhash64(F.col("key")), F.lit(local_parallelism))
        every = F.sequence(F.lit(0).cast("long"), F.lit(local_parallelism - 1).cast("long"))
        src = src.withColumn("task", F.explode(F.when(F.col("op").isin(*CHANGES), F.array(task))
                                               .otherwise(every)))
        grouping.append("task")
    bundles = src.groupBy(*grouping).transformWithState(
        BundleProcessor(plan), struct(f"job {job_type}, {_STAGE_ONE}"), "Append",
        "ProcessingTime" if timers else "None")
    initial = None
    if initial_state is not None:
        initial = _initial(initial_state, partition_by, job_type, F).groupBy("job", "marker", "key")
    out = bundles.groupBy("job", "marker", "key").transformWithState(
        AggregationProcessor(plan), struct(f"job {job_type}, {_STAGE_TWO}"), "Append",
        "ProcessingTime" if plan.ttl_values() else "None", initialState=initial)
    if not markers:
        out = out.where(F.col("type") == "out")
    columns_out = [F.col("key").alias(key), F.col("change").alias("op"), *selected, "seq", "n", "kpos",
                   "sub"]
    if markers:
        columns_out += ["type", "ts", "idle"]
    if partition_by is not None:
        columns_out.insert(0, F.col("job").alias(partition_by))
    return out.select(*columns_out)


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
