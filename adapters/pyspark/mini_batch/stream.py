"""Mini-batch aggregation on Structured Streaming: a schedule of spec/mini-batch.md run as real
streaming queries, the aggregation's accumulators in `transformWithStateInPandas` state on RocksDB,
checkpoints as committed micro-batches, crash and restore as stopping a query and starting one from
a copy of a checkpoint's directory.

The mapping (one query per incarnation of the job, MB-29):

    source -> stage 1: groupBy(incarnation).transformWithStateInPandas -> shuffle by key
           -> stage 2: groupBy(marker, key).transformWithStateInPandas -> foreachBatch

* **The source** is a Python streaming data source (`flink_mini_batch_script`) reading a script
  file the driver writes: a list of micro-batches of in-band rows `(incarnation, seq, step, type,
  key, change, value, ts, idle, ms)`, one a step (`row`, `watermark`, `status`, `advance`,
  `checkpoint`, `end`), after a `start` row that opens the incarnation.  The offset is
  `{"incarnation", "batch"}`: the last script batch delivered; the read limit is one script batch
  per micro-batch, so every micro-batch is exactly one script batch.  A micro-batch ends after a
  `checkpoint` step, after `end`, before a `crash`, and (optionally) every `steps_per_batch` steps,
  so that bundles also span micro-batches.  Processing time is the schedule's, never the wall
  clock: an `advance` row carries the time it advances to and the `start` row the time the
  incarnation starts at (processing time runs on across crashes and restores).
* **Stage 1, the job's non-keyed part at parallelism 1**, is one grouping key of
  `transformWithStateInPandas`: the incarnation (its first step).  It runs the engine's `Pipeline`
  (the mini-batch assigner with its timers on the in-band clock, MB-4..MB-7; in two-phase the local
  aggregation and its bundle, MB-25; the valve, MB-8; the aggregation's bundle and its count
  trigger, MB-9..MB-16; every operator's idle-aware output, MB-15) with the aggregation's bundle
  function replaced: a finished bundle is not applied here but emitted, key by key in first-arrival
  order, each key's inputs in arrival order (one-phase: the rows; two-phase: the local
  accumulators, i.e. the partial aggregation before the shuffle, MB-25), tagged with the step that
  finished it and its place `n` among that step's emissions.  Forwarded watermarks and statuses are
  emitted the same way, flagged `marker` (a lane of their own: any long is a key).  Its state
  (ValueState `job`, JSON: the clock and the pending timer, the assigner's watermarks, both bundles
  with their counts, the valve, the outputs' idle flags) persists across micro-batches in RocksDB;
  a new incarnation is a new grouping key with no state, so the assigner, the bundles and the valve
  start afresh after a restore (MB-29) while Spark restores the old key's state with the rest of the
  checkpoint (never read again).
* **Stage 2, the aggregation**, is `groupBy("marker", "key").transformWithStateInPandas` after the
  shuffle: ValueState `acc` (count, sum, the multiset of values as JSON: MB-30) per key.  The sums
  are the engine's `Acc`'s, Java longs that wrap around as Flink's SUM over BIGINT does (MB-30), so
  they fit the `long` state and output columns; no Spark SQL `sum` is involved (with ANSI mode, on
  by default in Spark 4, it raises on overflow instead).  For each finished
  bundle, in `(step, n)` order, it applies `finish_key` (one-phase, MB-17..MB-24; mini-batch off is
  a bundle of one row, MB-1, MB-24) or `merge_key` (the global aggregation's final merge after the
  shuffle, MB-26) and emits the key's changelog rows tagged `(step, n)`.  The marker lane passes
  the markers through.  Both stages have `partitions` state partitions (`spark.sql.shuffle.partitions`
  for the query; 1 by default, the spec's parallelism): the keys' accumulators are independent, so
  any number gives the same trace.  With `ttl` (idle state retention) the accumulator state has
  Spark's state TTL (one day: no state expires during a schedule, C5), which needs the
  `ProcessingTime` time mode; what retention changes in the changelog (MB-22) is the engine's
  `ChangelogMode`.
* **The output**: `foreachBatch` writes each micro-batch's rows to a file named by incarnation and
  batch id (a replayed batch overwrites its own); the driver orders all rows by `(step, n, key's
  place in the bundle, row's place)` into the trace's events.  The keys of one bundle may come in
  any order (MB-9); this order is the reference's.
* **A checkpoint** is a committed micro-batch: the batch ends with the `checkpoint` row, which
  finishes the local bundle and then the aggregation's (MB-13), so stage 2's state in that batch's
  version is the aggregation's state at the barrier; after `processAllAvailable` the driver copies
  the query's checkpoint directory to a retained copy for that checkpoint id.
* **A crash** stops the query after the micro-batch before it: its output stays, the rows buffered
  in stage 1's bundles are lost with the incarnation.  **A restore** starts a new query from a fresh
  copy of the checkpoint's retained directory (`restore none`: an empty directory): Spark restores
  stage 2's accumulators as of that batch, so nothing after the checkpoint is kept and nothing
  before it is lost; the new query's source sees an offset of another incarnation and starts with
  its own script, the steps after the restore.
* **MB-2** refusals give the single `rejected` event without running a query.

Where this departs from the pipeline's shape, and what Spark required:

* The global bundle is in stage 1, before the shuffle: its count trigger (MB-10) counts the inputs
  of every key of the task, which no keyed operator sees; so stage 1 decides when a global bundle
  finishes and which local accumulators it holds (buffering them until then), and stage 2, after
  the shuffle, merges them per key.
* Two `transformWithStateInPandas` chained in one query work as they are (Append mode, no
  watermark); nothing had to be split into two queries.  Stage 1's time mode is `None`: its timers
  are the schedule's, carried in band.
* Spark refuses a state TTL in the `None` time mode (`STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_
  ASSIGN_TTL`), hence `ProcessingTime` for stage 2 with `ttl`; in that mode a query runs no-data
  batches without end (batch ids climb with no input and `processAllAvailable` never returns), so
  every query starts with `spark.sql.streaming.noDataMicroBatches.enabled=false`.
* The output goes to files, not to a list on the driver: under Spark Connect the `foreachBatch`
  function runs in a Python process of the server.

No RDD API and no SparkContext, and schemas are StructTypes: it runs under Spark Connect too (the
server must import this module).  `run_in_process` runs the same stages and micro-batches without
Spark, for tests of the staging on many schedules.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
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
    refusal,
)
from flink_semantics.adapters.pyspark.runtime import VirtualClock, VirtualTimers
from flink_semantics.adapters.pyspark.session import query_conf, struct
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
from flink_semantics.spec.schedule import Event, Schedule, rejected

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pyspark missing: the module still imports (the adapter reports it)
    DataSource = DataSourceStreamReader = InputPartition = StatefulProcessor = object  # type: ignore
    SupportsTriggerAvailableNow = ReadMaxRows = object  # type: ignore

FORMAT = "flink_mini_batch_script"
PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
MARKERS = None  # stage 2's lane of the forwarded watermarks and statuses (`marker`), apart from every key
RETENTION_MS = 24 * 3600 * 1000  # `ttl`: Spark's state TTL, longer than any schedule (C5)

# No nulls in the in-band columns: a long column with nulls reaches pandas as float64, which cannot
# hold MAX (2**63 - 1) exactly.
SOURCE_SCHEMA = ("incarnation long, seq long, step long, type string, key long, change string, "
                 "value long, ts long, idle boolean, ms long")
BUNDLE_SCHEMA = ("step long, n long, kpos long, pos long, type string, key long, change string, "
                 "value long, acc string, ts long, idle boolean, marker boolean")
OUTPUT_SCHEMA = ("step long, n long, kpos long, sub long, type string, key long, change string, "
                 "count long, sum long, min long, max long, ts long, idle boolean")
JOB_STATE = "job string"
ACC_STATE = "count long, sum long, values string"


def _fields(ddl: str) -> list[tuple[str, str]]:
    return [(name, type_) for name, type_ in (f.split() for f in ddl.split(", "))]


def _names(ddl: str) -> list[str]:
    return [name for name, _ in _fields(ddl)]


_CAST: dict[str, Callable[[Any], Any]] = {"long": int, "string": str, "boolean": bool}


def _tuples(frames: Iterable[Any], ddl: str) -> list[tuple[Any, ...]]:
    """The rows of pandas frames as tuples of Python values (int, str, bool) in `ddl`'s order."""
    fields = _fields(ddl)
    names = [n for n, _ in fields]
    casts = [_CAST[t] for _, t in fields]
    return [tuple(c(v) for c, v in zip(casts, t))
            for pdf in frames for t in pdf[names].itertuples(index=False, name=None)]


def _frame(rows: list[tuple[Any, ...]], ddl: str) -> Any:
    import pandas as pd

    names = _names(ddl)
    frame = pd.DataFrame(rows, columns=names)
    for name in ("min", "max"):  # MIN and MAX of a result may be null: pandas' nullable Int64
        if name in names:
            i = names.index(name)
            frame[name] = pd.array([r[i] for r in rows], dtype="Int64")
    return frame


# --------------------------------------------------------------------------
# In-band rows (SOURCE_SCHEMA), stage 1's rows (BUNDLE_SCHEMA), stage 2's rows (OUTPUT_SCHEMA)
# --------------------------------------------------------------------------

InBand = tuple[int, int, int, str, int, str, int, int, bool, int]


def in_band(incarnation: int, seq: int, step: int, type_: str, key: int = 0, change: str = "",
            value: int = 0, ts: int = 0, idle: bool = False, ms: int = 0) -> InBand:
    return (incarnation, seq, step, type_, key, change, value, ts, idle, ms)


def _bundle_row(step: int, n: int, type_: str, kpos: int = 0, pos: int = 0, key: int = 0,
                change: str = "", value: int = 0, acc: str = "", ts: int = 0,
                idle: bool = False) -> tuple[Any, ...]:
    marker = type_ in ("watermark", "status")
    return (step, n, kpos, pos, type_, key, change, value, acc, ts, idle, marker)


def _lane(row: tuple[Any, ...]) -> int | None:
    """Stage 2's grouping of a stage 1 row: its key, or MARKERS for a watermark or a status."""
    return MARKERS if row[11] else row[5]


# --------------------------------------------------------------------------
# Stage 1: the non-keyed part of the job (assigner, local aggregation, valve, bundles)
# --------------------------------------------------------------------------


def _encode(item: Any) -> list[Any]:
    return ["acc", item.to_json()] if isinstance(item, Acc) else ["row", item[0], item[1]]


def _decode(d: list[Any]) -> Any:
    return Acc.from_json(d[1]) if d[0] == "acc" else (d[1], d[2])


class StageOne:
    """One incarnation of the job's non-keyed part: the engine's `Pipeline` whose aggregation's
    bundle function emits a finished bundle's inputs (stage 2 applies them) instead of applying
    them; it is also the sink after the aggregation's output (the markers, MB-8, MB-15)."""

    def __init__(self, settings: Settings, now: int, snapshot: Mapping[str, Any] | None = None):
        self.timers = VirtualTimers(VirtualClock(now))
        self.pipeline = Pipeline(settings, {}, self.timers, self)  # MB-29: every operator afresh
        aggregation = self.pipeline.operators[-1]
        assert isinstance(aggregation, BundleOperator)
        aggregation.function = self._finished
        self.rows: list[tuple[Any, ...]] = []
        self.step, self.n = -1, 0
        if snapshot is not None:
            self._restore(snapshot)

    # The sink: what the aggregation's output lets through
    def element(self, key: int, item: Any) -> None:
        raise AssertionError("stage 1 applies no bundle")

    def watermark(self, timestamp: int) -> None:
        self.rows.append(_bundle_row(self.step, self._next(), "watermark", ts=timestamp))

    def status(self, idle: bool) -> None:
        self.rows.append(_bundle_row(self.step, self._next(), "status", idle=idle))

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
                    self.rows.append(_bundle_row(self.step, n, "acc", kpos, pos, key,
                                                 acc=json.dumps(item.to_json())))
                else:
                    kind, value = item
                    self.rows.append(_bundle_row(self.step, n, "row", kpos, pos, key, kind, value))

    def apply(self, r: InBand) -> None:
        _, _, step, type_, key, change, value, ts, idle, ms = r
        if step != self.step:
            self.step, self.n = step, 0
        if type_ == "row":
            self.pipeline.row(key, change, value)
        elif type_ == "watermark":
            self.pipeline.watermark(ts)
        elif type_ == "status":
            self.pipeline.status(idle)
        elif type_ == "advance":  # MB-4: the assigner's timers fire at their deadlines
            self.timers.advance(ms - self.timers.clock.now, lambda: True)
        elif type_ == "checkpoint":  # MB-13: the bundles finish before the barrier passes
            self.pipeline.checkpoint()
        elif type_ == "end":  # MB-7, MB-14
            self.pipeline.end()
        else:
            raise ValueError(f"stage 1: unknown in-band row {type_!r}")

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
              rows: Iterable[InBand]) -> tuple[str, list[tuple[Any, ...]]]:
    """Stage 1 on one micro-batch of an incarnation's rows (in `seq` order): the saved state (None:
    none yet) -> the state to save and the rows for stage 2 (BUNDLE_SCHEMA)."""
    stage = None
    out: list[tuple[Any, ...]] = []
    for r in sorted(rows, key=lambda r: r[1]):
        if r[3] == "start":  # the incarnation begins at this time (MB-29: a fresh job)
            stage = StageOne(settings, r[9])
            continue
        if stage is None:
            if saved is None:
                raise RuntimeError(f"stage 1: incarnation {r[0]} has no state and no start row")
            snapshot = json.loads(saved)
            stage = StageOne(settings, snapshot["now"], snapshot)
        stage.apply(r)
        out += stage.rows
        stage.rows = []
    if stage is None:
        raise RuntimeError("stage 1: a micro-batch without rows")
    return json.dumps(stage.snapshot()), out


# --------------------------------------------------------------------------
# Stage 2: the aggregation, keyed
# --------------------------------------------------------------------------


def stage_two(settings: Settings, key: int | None, state: Acc | None,
              rows: Iterable[tuple[Any, ...]]) -> tuple[Acc | None, list[tuple[Any, ...]]]:
    """Stage 2 on one micro-batch of one key's rows (BUNDLE_SCHEMA): the key's accumulator before
    (None: no state) -> after, and its changelog rows (OUTPUT_SCHEMA), bundle by bundle in
    `(step, n)` order.  The lane MARKERS passes the forwarded watermarks and statuses through."""
    ordered = sorted(rows, key=lambda r: (r[0], r[1], r[3]))
    out: list[tuple[Any, ...]] = []
    if key is MARKERS:
        for step, n, _, _, type_, _, _, _, _, ts, idle, _ in ordered:
            out.append((step, n, 0, 0, type_, 0, "", 0, 0, 0, 0, ts, idle))
        return state, out
    mode = ChangelogMode(settings.update_before, settings.ttl)
    per_key = merge_key if settings.enabled and settings.two_phase else finish_key  # MB-26 / MB-17, MB-24
    bundles: dict[tuple[int, int], tuple[int, list[Any]]] = {}
    for step, n, kpos, _, type_, _, change, value, acc, _, _, _ in ordered:
        item = Acc.from_json(json.loads(acc)) if type_ == "acc" else (change, value)
        bundles.setdefault((step, n), (kpos, []))[1].append(item)
    for (step, n), (kpos, items) in bundles.items():
        state, changes = per_key(state, items, mode)  # MB-17..MB-23 (state None: cleared, MB-23)
        for sub, (change, (count, sum_, min_, max_)) in enumerate(changes):
            out.append((step, n, kpos, sub, "out", key, change, count, sum_, min_, max_, 0, False))
    return state, out


def _acc_row(acc: Acc) -> tuple[int, int, str]:
    return acc.count, acc.sum, json.dumps([[v, n] for v, n in acc.values.items()])


def _acc(row: tuple[Any, ...]) -> Acc:
    count, sum_, values = row
    return Acc(int(count), int(sum_), {int(v): int(n) for v, n in json.loads(values)})


class BundleProcessor(StatefulProcessor):  # type: ignore[misc,valid-type]
    """Stage 1: one incarnation of the job's non-keyed part; ValueState `job` holds it between
    micro-batches."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def init(self, handle: Any) -> None:
        self.job = handle.getValueState("job", struct(JOB_STATE))

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        saved = self.job.get()[0] if self.job.exists() else None
        snapshot, out = stage_one(self.settings, saved, _tuples(rows, SOURCE_SCHEMA))  # type: ignore[arg-type]
        self.job.update((snapshot,))
        if out:
            yield _frame(out, BUNDLE_SCHEMA)

    def close(self) -> None:
        pass


class AggregationProcessor(StatefulProcessor):  # type: ignore[misc,valid-type]
    """Stage 2: one key of the aggregation; ValueState `acc` holds its accumulator (MB-30)."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def init(self, handle: Any) -> None:
        ttl = RETENTION_MS if self.settings.ttl else None
        self.acc = handle.getValueState("acc", struct(ACC_STATE), ttl)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        k = MARKERS if bool(key[0]) else int(key[1])  # the grouping key (marker, key)
        before = _acc(self.acc.get()) if self.acc.exists() else None
        after, out = stage_two(self.settings, k, before, _tuples(rows, BUNDLE_SCHEMA))
        if k is not MARKERS:
            if after is None:
                if before is not None:
                    self.acc.clear()  # MB-23
            else:
                self.acc.update(_acc_row(after))
        if out:
            yield _frame(out, OUTPUT_SCHEMA)

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------
# The schedule cut into incarnations and micro-batches
# --------------------------------------------------------------------------


@dataclass
class Incarnation:
    """One query: its first step (stage 1's grouping key), the checkpoint it restores (None: no
    state), its micro-batches of in-band rows, and per batch the checkpoint it completes."""

    start: int
    checkpoint: int | None
    batches: list[list[InBand]] = field(default_factory=list)
    completes: list[int | None] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing but its start: it cannot emit anything (a restore followed by a crash)."""
        return sum(len(b) for b in self.batches) <= 1


def plan(schedule: Schedule, steps_per_batch: int | None = None) -> list[Incarnation]:
    """The schedule's incarnations, each cut into micro-batches: after a checkpoint, after end, at a
    crash, and every `steps_per_batch` steps (None: never)."""
    now = 0
    incarnations: list[Incarnation] = []
    current: Incarnation | None = Incarnation(0, None)
    batch: list[InBand] = [in_band(0, 0, 0, "start", ms=0)]
    seq, steps = 1, 0

    def cut(completes: int | None = None) -> None:
        nonlocal batch, steps
        assert current is not None
        if batch:
            current.batches.append(batch)
            current.completes.append(completes)
        batch, steps = [], 0

    for i, s in enumerate(schedule.steps):
        if isinstance(s, RestoreStep):
            current = Incarnation(i, s.checkpoint)
            batch, seq, steps = [in_band(i, 0, i, "start", ms=now)], 1, 0
            continue
        if isinstance(s, AdvanceStep):
            now += s.ms  # processing time runs on, across crashes too
        if current is None:
            continue  # the job is down (SCH-7: only a restore may follow a crash)
        if isinstance(s, CrashStep):
            cut()
            incarnations.append(current)
            current = None
            continue
        inc = current.start
        if isinstance(s, RowStep):
            row = in_band(inc, seq, i, "row", key=s.key, change=s.kind, value=s.value)
        elif isinstance(s, WatermarkStep):
            row = in_band(inc, seq, i, "watermark", ts=s.timestamp)
        elif isinstance(s, StatusStep):
            row = in_band(inc, seq, i, "status", idle=s.idle)
        elif isinstance(s, AdvanceStep):
            row = in_band(inc, seq, i, "advance", ms=now)
        elif isinstance(s, CheckpointStep):
            row = in_band(inc, seq, i, "checkpoint", value=s.id)
        elif isinstance(s, EndStep):
            row = in_band(inc, seq, i, "end")
        else:
            raise ValueError(f"step {i}: not a mini-batch step: {s!r}")
        batch.append(row)
        seq, steps = seq + 1, steps + 1
        if isinstance(s, CheckpointStep):
            cut(s.id)  # the checkpoint is this micro-batch, committed
        elif isinstance(s, EndStep) or (steps_per_batch is not None and steps >= steps_per_batch):
            cut()
    if current is not None:
        cut()
        incarnations.append(current)
    return incarnations


# --------------------------------------------------------------------------
# The source
# --------------------------------------------------------------------------


@dataclass
class ScriptPartition(InputPartition):  # type: ignore[misc,valid-type]
    rows: list[list[Any]]


def read_script(path: str) -> list[list[list[Any]]]:
    with open(path, encoding="utf-8") as fh:
        return list(json.load(fh))


def write_script(path: Path, batches: list[list[InBand]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(batches), encoding="utf-8")
    os.replace(tmp, path)


class ScriptSource(DataSource):  # type: ignore[misc,valid-type]
    """`spark.readStream.format("flink_mini_batch_script").option("script", path)
    .option("incarnation", n).load()`: the script's batches, one a micro-batch."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> Any:
        return struct(SOURCE_SCHEMA)

    def streamReader(self, schema: Any) -> ScriptReader:
        return ScriptReader(self.options)


class ScriptReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,valid-type]
    """Offsets `{"incarnation": n, "batch": i}`: the script batches up to i delivered.  An offset of
    another incarnation (the checkpoint a restore starts from) means none of this one's yet."""

    def __init__(self, options: Mapping[str, str]):
        self.path = options["script"]
        self.incarnation = int(options["incarnation"])

    def initialOffset(self) -> dict[str, int]:
        return {"incarnation": self.incarnation, "batch": -1}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(1)  # the limit counts script batches: one a micro-batch

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # what the script holds is available now

    def _first(self, start: Mapping[str, int]) -> int:
        return start["batch"] + 1 if start["incarnation"] == self.incarnation else 0

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        available = len(read_script(self.path))
        first = self._first(start)
        if first >= available:
            return start
        n = limit.max_rows if isinstance(limit, ReadMaxRows) else available
        return {"incarnation": self.incarnation, "batch": min(available, first + max(n, 1)) - 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
        batches = read_script(self.path)[self._first(start):end["batch"] + 1]
        return [ScriptPartition([r for b in batches for r in b])]  # parallelism 1

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        for r in partition.rows:
            yield tuple(r)

    def commit(self, end: dict[str, int]) -> None:
        pass


# --------------------------------------------------------------------------
# The output
# --------------------------------------------------------------------------


def write_batch(directory: str, incarnation: int, df: Any, batch_id: int) -> None:
    """foreachBatch: the micro-batch's rows to `<incarnation>-<batch>.json` (a replay overwrites)."""
    rows = [r.asDict() for r in df.collect()]
    path = Path(directory) / f"{incarnation:06d}-{batch_id:06d}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows), encoding="utf-8")
    os.replace(tmp, path)


def events_of(rows: Iterable[Mapping[str, Any]]) -> list[Event]:
    """Stage 2's rows as the trace's events, in (step, n, key's place, row's place) order."""
    out = []
    for r in sorted(rows, key=lambda r: (r["step"], r["n"], r["kpos"], r["sub"])):
        if r["type"] == "out":
            out.append(event(r["step"], "out", key=r["key"], change=r["change"], count=r["count"],
                             sum=r["sum"], min=r["min"], max=r["max"]))
        elif r["type"] == "watermark":
            out.append(event(r["step"], "watermark", timestamp=r["ts"]))
        else:
            out.append(event(r["step"], "status", idle=r["idle"]))
    return out


# --------------------------------------------------------------------------
# A schedule through Structured Streaming
# --------------------------------------------------------------------------


def _copy(source: Path, target: Path) -> None:
    """A checkpoint directory copied (state store maintenance may rename a file under it: retry)."""
    for attempt in range(5):
        try:
            shutil.copytree(source, target)
            return
        except (shutil.Error, FileNotFoundError):
            shutil.rmtree(target, ignore_errors=True)
            if attempt == 4:
                raise
            time.sleep(0.2)


class StreamRun:
    """A mini-batch schedule as streaming queries, one per incarnation; `run()` gives the events."""

    def __init__(self, spark: Any, schedule: Schedule, root: Path, steps_per_batch: int | None = None,
                 partitions: int = 1):
        self.spark, self.schedule, self.root = spark, schedule, root
        self.settings = Settings(**asdict(schedule.config))
        self.steps_per_batch = steps_per_batch
        self.partitions = partitions
        self.output = root / "output"
        self.retained = root / "checkpoints"
        self.planned = 0  # micro-batches planned, over all queries
        self.micro_batches = 0  # micro-batches Spark ran (foreachBatch calls), over all queries
        self.queries: list[int] = []  # the incarnations run (their first steps)
        self.events: list[Event] = []

    def run(self) -> list[Event]:
        reason = refusal(self.settings)  # MB-2, a rejecting rule: no query runs
        if reason is not None:
            self.events = [rejected(reason)]
            return self.events
        self.output.mkdir(parents=True, exist_ok=True)
        self.retained.mkdir(parents=True, exist_ok=True)
        self.spark.dataSource.register(ScriptSource)
        for incarnation in plan(self.schedule, self.steps_per_batch):
            if not incarnation.empty:
                self._run(incarnation)
        files = sorted(self.output.glob("*.json"))
        self.micro_batches = len(files)
        self.events = events_of(r for p in files for r in json.loads(p.read_text(encoding="utf-8")))
        return self.events

    def _query(self, inc: Incarnation, script: Path, checkpoint: Path) -> Any:
        src = (self.spark.readStream.format(FORMAT).option("script", str(script))
               .option("incarnation", str(inc.start)).load())
        bundles = src.groupBy("incarnation").transformWithStateInPandas(
            BundleProcessor(self.settings), struct(BUNDLE_SCHEMA), "Append", "None")
        time_mode = "ProcessingTime" if self.settings.ttl else "None"  # Spark's TTL needs it
        out = bundles.groupBy("marker", "key").transformWithStateInPandas(
            AggregationProcessor(self.settings), struct(OUTPUT_SCHEMA), "Append", time_mode)
        sink = functools.partial(write_batch, str(self.output), inc.start)
        with query_conf(self.spark, {"spark.sql.shuffle.partitions": str(self.partitions),
                                "spark.sql.streaming.stateStore.providerClass": PROVIDER,
                                "spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
            return (out.writeStream.foreachBatch(sink).queryName(f"mb_stream_{uuid.uuid4().hex[:12]}")
                    .option("checkpointLocation", str(checkpoint)).start())

    def _run(self, inc: Incarnation) -> None:
        """One incarnation: a query from a copy of its checkpoint (or from nothing), its batches
        appended to its script, each checkpoint's directory retained once its batch committed; the
        query stops at its end (a crash, or the end of the schedule)."""
        directory = self.root / f"query-{inc.start:06d}"
        directory.mkdir()
        checkpoint, script = directory / "checkpoint", directory / "script.json"
        if inc.checkpoint is not None:
            _copy(self.retained / str(inc.checkpoint), checkpoint)  # MB-29: the checkpoint's state
        write_script(script, [])
        query = self._query(inc, script, checkpoint)
        self.queries.append(inc.start)
        try:
            for i, completes in enumerate(inc.completes):
                write_script(script, inc.batches[:i + 1])
                if completes is not None or i == len(inc.batches) - 1:
                    query.processAllAvailable()
                if completes is not None:  # MB-13: the batch with the barrier committed
                    _copy(checkpoint, self.retained / str(completes))
            self.planned += len(inc.batches)
        finally:
            query.stop()


def run_schedule(spark: Any, schedule: Schedule, root: Path | None = None,
                 steps_per_batch: int | None = None, partitions: int = 1) -> list[Event]:
    """The schedule's events through Structured Streaming (a micro-batch every `steps_per_batch`
    steps at most; `partitions` state partitions per stage); its directories removed afterwards."""
    from flink_semantics.adapters.pyspark.runtime import scratch_dir

    base = Path(root) if root is not None else scratch_dir("mb-stream-")
    try:
        return StreamRun(spark, schedule, base, steps_per_batch, partitions).run()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_in_process(schedule: Schedule, steps_per_batch: int | None = None) -> list[Event]:
    """The same incarnations, micro-batches and stages without Spark: stage 1's state per
    incarnation and stage 2's per key carried across batches, copied at a checkpoint's batch and
    restored from the copy, the rows grouped and shuffled as the query does."""
    settings = Settings(**asdict(schedule.config))
    reason = refusal(settings)
    if reason is not None:
        return [rejected(reason)]
    retained: dict[int, tuple[dict[int, str], dict[int, Acc]]] = {}
    rows: list[dict[str, Any]] = []
    names = _names(OUTPUT_SCHEMA)
    for inc in plan(schedule, steps_per_batch):
        jobs, accs = ({}, {}) if inc.checkpoint is None else _copied(*retained[inc.checkpoint])
        for batch, completes in zip(inc.batches, inc.completes):
            by_key: dict[int | None, list[tuple[Any, ...]]] = {}
            for incarnation in sorted({r[0] for r in batch}):
                jobs[incarnation], mid = stage_one(settings, jobs.get(incarnation),
                                                   [r for r in batch if r[0] == incarnation])
                for m in mid:
                    by_key.setdefault(_lane(m), []).append(m)
            for key, key_rows in by_key.items():
                after, out = stage_two(settings, key, accs.get(key), key_rows)
                if key is not MARKERS:
                    if after is None:
                        accs.pop(key, None)
                    else:
                        accs[key] = after
                rows += [dict(zip(names, o)) for o in out]
            if completes is not None:
                retained[completes] = _copied(jobs, accs)
    return events_of(rows)


def _copied(jobs: dict[int, str], accs: dict[int, Acc]) -> tuple[dict[int, str], dict[int, Acc]]:
    return dict(jobs), {k: a.copy() for k, a in accs.items()}
