"""Watermarks on Spark Structured Streaming: per-split generation in the source, the valve after a shuffle.

The mapping (spec/watermarks.md; pyspark-notes sections 1, 2, 3):

* **the readers** are the partitions of a Python streaming data source (`flink_watermarks`): partition
  r is reader r (`partitions()` returns one per reader, in order).  Each runs the engine's
  `SourceReader` (its splits' generators and partial watermarks, the multiplexer, the idleness
  manager, the `WatermarkToDataOutput`) over what the micro-batch gives it, and yields in-band rows
  in its own order: `R` (a record it read), `W` (a watermark it sent) and `S` (a status it sent),
  each with `(reader, seq)`, `seq` increasing within the reader across batches, and `t`, the round
  of the schedule the reader acted in (below);
* **the planner** (driver side, `latestOffset`) cuts the schedule into micro-batches and turns the
  batch's steps into *actions*, each with its round and its virtual time: `add`, `record` and
  `finish` for one reader, `emit` (a periodic emission instant), `end_read` and `end` for all;
* **the channels**: what a reader sends is routed before the shuffle: `W`/`S` rows are broadcast to
  every downstream task (`explode` over the target ids), an `R` row goes to one task by its key, the
  split (`split mod downstream`, so a split's records stay in order in one task);
* **the downstream task** is one group of `groupBy("target").applyInPandasWithState`: a group per
  task, whatever physical partition Spark hashes it to (pitfall P6).  The function sorts the batch's
  rows by `(t, reader, seq)`, i.e. every channel in its own `seq` order, the channels merged in
  the order the spec fixes for what reaches the valve (C3: readers act in index order within a
  round, and what one sends reaches the valve before the next acts), and feeds them to the engine's
  `StatusWatermarkValve`; it emits the records that pass and the valve's `output_watermark` /
  `output_status`, each with `idx`, the task's output position (increasing across batches).
  Ordering by `(reader, seq)` alone would be a legal Flink interleaving too, but not the one of the
  reference's trace (r0 10, r1 20, r0 30, r1 40 gives 10, 20, 30 in round order; 20, 30 reader-major);
* **processing time** is the schedule's virtual clock, never the wall clock: the offset carries
  `now` and the next periodic emission instant `next_emit`; a `tick` inside a batch becomes one
  `emit` action per instant on the way (WM-3), carrying its time, which the readers' clocks (and
  so their idleness timers, WM-13) read.

A micro-batch is the steps up to and including the next `tick` (`ticks_per_batch` ticks; the rest
of the schedule after the last one, ending with `end`): the records that became available, then
the time advance with its periodic emissions.  `ReadAllAvailable` (a trigger without
`SupportsTriggerAvailableNow`) gets the whole rest in one batch.  A round is one act of the
readers in the schedule's order: an `add`, `record` or `finish` step (one reader), a periodic
emission instant (every reader, in index order), and the `end` step's two phases (every reader
reads what it holds back; then every split finishes and every reader sends MAX, D2).

**Where state lives between micro-batches.**  A micro-batch boundary is not a failover: in Flink the
reader task lives on and keeps its generators' maximum timestamps, idleness timers, partial
watermarks and the last watermark and status it sent (they are not checkpointed, WM-16, which only
matters at a failover).  In Spark every micro-batch reads in a new task, so all of it has to be
carried, or every batch boundary would act as a restart.

* The readers' state is in the **offset JSON** (Spark writes it to `<checkpoint>/offsets/<N>`
  before batch N runs): per reader, its splits in the order they were added (the split ownership
  is also kept as `reader_of`) with each split's generator, clock and partial watermark, the main
  output's generator and clock, the combined watermark, the idleness flags, the output's last
  watermark and status, the records held back and `seq` (`snapshot_reader`).  A source task has no
  other way to see the previous batch: the offset is the only thing the planner hands it, and a
  stateful operator comes after the source.  The planner computes the batch's end state by running
  the same engine readers over the batch's actions with their rows discarded (as
  `sources/stream.py` plans by running `SourceReader.poll`); the partition runs its reader again
  from the start offset for real and checks that it ends in the state the planner wrote.
* The valve's channel state is in the **state store** of `applyInPandasWithState`, one value per
  downstream task (`snapshot_valve`: every channel's watermark, idle and aligned flags, the last
  output and the valve's status, and the task's next output position).  The valve runs on what the
  readers sent in the batch, after the shuffle; the planner never sees it.  `applyInPandasWithState`
  rather than `transformWithStateInPandas`: one value per key is all it needs, with no timers
  (processing time travels in band), and it runs on the default state store, without the RocksDB
  provider and protobuf that `transformWithStateInPandas` needs (pitfall P4) on the shared session.

Offset: `batch`, `step` (the first step not yet planned), `now`, `next_emit`, `round`, `reader_of`
(`{"<split>": reader}`, string keys), `readers` (the snapshots after the batch) and `actions` (the
batch's, so a replayed batch does the same).

Supported: any number of readers and splits, bounded out-of-orderness periodic or punctuated,
idleness, `finish_split`, `end`.  Not supported: `align` and `failover` steps raise
`UnsupportedStep`, naming the step, before the query starts (a configuration with `max_drift` and
no `align` step runs: nothing is ever announced, so no reader waits and no split pauses).

`run_schedule(spark, schedule)` runs a watermarks schedule through the pipeline to the end
(`Trigger.AvailableNow`, a memory sink) and returns what each downstream task emitted.  No RDD API
and no SparkContext: it runs under Spark Connect too.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from adapters.pyspark.watermarks.engine import (
    BoundedOutOfOrderness,
    Generator,
    PausableClock,
    SourceReader,
    StatusWatermarkValve,
    WithIdleness,
)
from spec.areas.watermarks import (
    AddSplitStep,
    AlignStep,
    EndStep,
    FailoverStep,
    FinishSplitStep,
    RecordStep,
    TickStep,
    WatermarksConfig,
)
from spec.schedule import Schedule, Step, parse_schedule

FORMAT = "flink_watermarks"
# In-band rows of the readers.  No nulls: a long column with nulls reaches pandas as float64, which
# cannot hold MAX (2**63 - 1) exactly.
SOURCE_SCHEMA = "kind string, reader int, seq long, t long, split int, ts long, value long, idle boolean"
OUTPUT_SCHEMA = ("target int, idx long, kind string, split int, ts long, value long, idle boolean, "
                 "t long, reader int, seq long")
STATE_SCHEMA = "valve string, next long"
QUERY_TIMEOUT_S = 600


class UnsupportedStep(NotImplementedError):
    """A step the streaming pipeline does not run (alignment, failover)."""

    def __init__(self, index: int, op: str, why: str):
        super().__init__(f"step {index} ({op}): {why}")
        self.index = index
        self.op = op


def check_supported(schedule: Schedule) -> None:
    """UnsupportedStep for the first `align` or `failover` step."""
    if schedule.area != "watermarks":
        raise ValueError(f"not a watermarks schedule: area {schedule.area!r}")
    for i, s in enumerate(schedule.steps):
        if isinstance(s, AlignStep):
            raise UnsupportedStep(i, s.op, "watermark alignment is not supported by the streaming pipeline")
        if isinstance(s, FailoverStep):
            raise UnsupportedStep(i, s.op, "failover is not supported by the streaming pipeline")


# --------------------------------------------------------------------------
# Snapshots of the engine's live state (JSON)
# --------------------------------------------------------------------------


def _clock(c: PausableClock) -> list[int]:
    return [c.paused, c.blocked, c.blocked_since]


def _set_clock(c: PausableClock, d: list[int]) -> None:
    c.paused, c.blocked, c.blocked_since = d


def _generator(g: Generator) -> dict[str, Any]:
    if isinstance(g, BoundedOutOfOrderness):
        return {"max_ts": g.max_ts}
    if isinstance(g, WithIdleness):
        t = g.timer
        return {"inner": _generator(g.inner), "idle_now": g.idle_now,
                "timer": [t.counter, t.last_counter, t.start]}
    raise TypeError(f"no snapshot for generator {type(g).__name__}")


def _set_generator(g: Generator, d: dict[str, Any]) -> None:
    if isinstance(g, BoundedOutOfOrderness):
        g.max_ts = d["max_ts"]
    elif isinstance(g, WithIdleness):
        _set_generator(g.inner, d["inner"])
        g.idle_now = d["idle_now"]
        g.timer.counter, g.timer.last_counter, g.timer.start = d["timer"]
    else:
        raise TypeError(f"no snapshot for generator {type(g).__name__}")


def snapshot_reader(reader: SourceReader, seq: int) -> dict[str, Any]:
    """What reader `reader` carries to the next micro-batch (alignment off: its samplers are not kept)."""
    partials = reader.mux.by_split
    return {
        "seq": seq,
        "splits": [[split, {"clock": _clock(s.clock), "generator": _generator(s.generator),
                            "partial": [partials[split].watermark, partials[split].idle]}]
                   for split, s in reader.splits.items()],
        "main": {"clock": _clock(reader.main_clock), "generator": _generator(reader.main_generator)},
        "combined": [reader.mux.status.combined, reader.mux.status.idle],
        "idleness": [reader.idleness.main.idle, reader.idleness.split_local.idle],
        "output": [reader.out.max_so_far, reader.out.idle],
        "available": [[split, ts] for split, ts in reader.available],
        "ending": reader.ending,
    }


def restore_reader(reader: SourceReader, d: Mapping[str, Any]) -> None:
    """A fresh reader (no split yet) put in the state `d` of `snapshot_reader`."""
    for split, s in d["splits"]:
        reader.add_split(split)  # in the order they were added: the combination's order (WM-4)
        live = reader.splits[split]
        _set_clock(live.clock, s["clock"])
        _set_generator(live.generator, s["generator"])
        partial = reader.mux.by_split[split]
        partial.watermark, partial.idle = s["partial"]
    _set_clock(reader.main_clock, d["main"]["clock"])
    _set_generator(reader.main_generator, d["main"]["generator"])
    reader.mux.status.combined, reader.mux.status.idle = d["combined"]
    reader.idleness.main.idle, reader.idleness.split_local.idle = d["idleness"]
    reader.out.max_so_far, reader.out.idle = d["output"]
    reader.available = [(split, ts) for split, ts in d["available"]]
    reader.ending = d["ending"]
    if reader.ending:
        reader.align.enabled = False


def snapshot_valve(valve: StatusWatermarkValve) -> dict[str, Any]:
    return {"channels": [[c.watermark, c.idle, c.aligned] for c in valve.state],
            "last": valve.last_watermark, "idle": valve.idle}


def restore_valve(valve: StatusWatermarkValve, d: Mapping[str, Any]) -> None:
    """A fresh valve put in the state `d` of `snapshot_valve` (its heap rebuilt from the aligned)."""
    for c, (watermark, idle, aligned) in zip(valve.state, d["channels"]):
        c.watermark, c.idle, c.aligned = watermark, idle, aligned
    valve.last_watermark = d["last"]
    valve.idle = d["idle"]
    valve.active = sum(not c.idle for c in valve.state)
    valve.heap = sorted((c.watermark, ch) for ch, c in enumerate(valve.state) if c.aligned)


# --------------------------------------------------------------------------
# One reader over a micro-batch's actions
# --------------------------------------------------------------------------

Row = tuple[str, int, int, int, int, int, int, bool]  # SOURCE_SCHEMA


class ReaderTask:
    """Reader `index` restored from its snapshot, acting on the batch's actions on the virtual clock;
    `rows` collects what it emits and sends (SOURCE_SCHEMA)."""

    def __init__(self, index: int, config: WatermarksConfig, snapshot: Mapping[str, Any] | None):
        self.index = index
        self.now = 0
        self.round = 0
        self.seq = 0 if snapshot is None else int(snapshot["seq"])
        self.rows: list[Row] = []
        # Alignment off: without an `align` step nothing is announced, so nothing would wait anyway.
        self.reader = SourceReader(index, config, lambda: self.now, self._emit, self._send, False)
        if snapshot is not None:
            restore_reader(self.reader, snapshot)

    def _row(self, kind: str, split: int = -1, ts: int = 0, value: int = 0, idle: bool = False) -> None:
        self.rows.append((kind, self.index, self.seq, self.round, split, ts, value, idle))
        self.seq += 1

    def _emit(self, kind: str, **fields: Any) -> None:
        if kind == "record":  # WM-1: the record goes out before its generator sees it
            self._row("R", split=fields["split"], ts=fields["ts"])
        # split_finished and the alignment's events stay in the reader: nothing goes downstream

    def _send(self, kind: str, **fields: Any) -> None:
        if kind == "watermark":
            self._row("W", value=fields["value"])
        else:
            self._row("S", idle=fields["idle"])

    def apply(self, action: Mapping[str, Any]) -> None:
        self.now, self.round = action["at"], action["t"]
        op, r = action["op"], self.reader
        if op == "add":
            r.add_split(action["split"])
        elif op == "record":
            r.add_record(action["split"], action["ts"])
        elif op == "finish":
            r.finish_split(action["split"])
        elif op == "emit":
            r.periodic_emit()
        elif op == "end_read":
            r.read_to_end()
        elif op == "end":
            r.finish_all()
            r.end(self._send)
        else:
            raise ValueError(f"unknown action {op!r}")

    def snapshot(self) -> dict[str, Any]:
        return snapshot_reader(self.reader, self.seq)


def concerns(action: Mapping[str, Any], reader: int) -> bool:
    return action.get("reader") in (None, reader)


# --------------------------------------------------------------------------
# The planner: the schedule cut into micro-batches
# --------------------------------------------------------------------------


def initial_offset(config: WatermarksConfig) -> dict[str, Any]:
    fresh = [ReaderTask(r, config, None).snapshot() for r in range(config.readers)]
    return {"batch": -1, "step": 0, "now": 0, "next_emit": config.interval or None, "round": 0,
            "reader_of": {}, "readers": fresh, "actions": []}


def plan_batch(schedule: Schedule, start: Mapping[str, Any], ticks: int | None) -> dict[str, Any] | None:
    """The next micro-batch after `start`: the steps up to and including the `ticks`-th tick (all
    the rest with None), as actions, and the readers' state after them; None when no step is left."""
    config: WatermarksConfig = schedule.config
    k = start["step"]
    if k >= len(schedule.steps):
        return None
    now, next_emit, rnd = start["now"], start["next_emit"], start["round"]
    reader_of: dict[str, int] = dict(start["reader_of"])
    actions: list[dict[str, Any]] = []

    def act(op: str, reader: int | None = None, **fields: Any) -> None:
        nonlocal rnd
        actions.append({"t": rnd, "at": now, "op": op, "reader": reader, **fields})
        rnd += 1

    seen = 0
    while k < len(schedule.steps) and (ticks is None or seen < ticks):
        s: Step = schedule.steps[k]
        if isinstance(s, AddSplitStep):
            reader_of[str(s.split)] = s.reader
            act("add", s.reader, split=s.split)
        elif isinstance(s, RecordStep):
            act("record", reader_of[str(s.split)], split=s.split, ts=s.ts)
        elif isinstance(s, FinishSplitStep):
            act("finish", reader_of[str(s.split)], split=s.split)
        elif isinstance(s, TickStep):  # WM-3: every instant on the way, at its own time
            target = now + s.ms
            while next_emit is not None and next_emit <= target:
                now = next_emit
                act("emit")
                next_emit += config.interval
            now = target
            seen += 1
        elif isinstance(s, EndStep):  # C5, WM-15 (D2)
            act("end_read")
            act("end")
        else:  # align, failover: refused before the query starts (check_supported)
            raise UnsupportedStep(k, s.op, "not supported by the streaming pipeline")
        k += 1
    tasks = [ReaderTask(r, config, start["readers"][r]) for r in range(config.readers)]
    for a in actions:  # the readers' end state, their rows dropped: the partitions emit them
        for task in tasks:
            if concerns(a, task.index):
                task.apply(a)
    return {"batch": start["batch"] + 1, "step": k, "now": now, "next_emit": next_emit, "round": rnd,
            "reader_of": reader_of, "readers": [t.snapshot() for t in tasks], "actions": actions}


# --------------------------------------------------------------------------
# The Spark source
# --------------------------------------------------------------------------


@dataclass
class ReaderPartition(InputPartition):
    """Reader `reader` in batch `batch`: its state before, its actions, the state the planner expects
    after."""

    batch: int
    reader: int
    state: dict[str, Any]
    actions: list[dict[str, Any]]
    expected: dict[str, Any]


class WatermarkSource(DataSource):
    """`spark.readStream.format("flink_watermarks").option("schedule", schedule.to_json()).load()`.
    Options: `schedule` (a watermarks schedule's JSON), `ticks_per_batch` (default 1)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def streamReader(self, schema: Any) -> WatermarkStreamReader:
        return WatermarkStreamReader(self.options)


class WatermarkStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]):
        self.schedule = parse_schedule(options["schedule"])
        check_supported(self.schedule)
        self.config: WatermarksConfig = self.schedule.config
        self.ticks = int(options.get("ticks_per_batch", 1))

    def initialOffset(self) -> dict[str, Any]:
        return initial_offset(self.config)

    def getDefaultReadLimit(self) -> ReadLimit:
        """The limit counts ticks: a batch is `ticks_per_batch` time advances' worth of steps."""
        return ReadMaxRows(self.ticks)

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the schedule is fixed: all of it is available now

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        end = plan_batch(self.schedule, start, None if isinstance(limit, ReadAllAvailable) else self.ticks)
        return start if end is None else end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """Reader r is partition r: its state at `start`, its actions of the batch."""
        return [ReaderPartition(end["batch"], r, start["readers"][r],
                                [a for a in end["actions"] if concerns(a, r)], end["readers"][r])
                for r in range(self.config.readers)]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        assert isinstance(partition, ReaderPartition)
        task = ReaderTask(partition.reader, self.config, partition.state)
        for action in partition.actions:
            task.apply(action)
            yield from task.rows
            task.rows.clear()
        got = json.loads(json.dumps(task.snapshot()))
        if got != partition.expected:
            raise RuntimeError(f"reader {partition.reader} ended batch {partition.batch} in another state "
                               f"than planned: {got} != {partition.expected}")

    def commit(self, end: dict[str, Any]) -> None:
        pass


# --------------------------------------------------------------------------
# The downstream task: the valve
# --------------------------------------------------------------------------


def valve_task(channels: int, key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """One downstream task's batch (`applyInPandasWithState`): its rows in `(t, reader, seq)` order
    through the valve restored from its state; out go the records and the valve's outputs."""
    import pandas as pd

    target = int(key[0])
    out: list[tuple[Any, ...]] = []
    cause: list[int] = [0, 0, 0]  # (t, reader, seq) of the row being handled
    nxt = 0

    def emit(kind: str, **fields: Any) -> None:
        value = fields.get("value", 0)
        out.append((target, nxt + len(out), kind, -1, 0, value, fields.get("idle", False), *cause))

    valve = StatusWatermarkValve(channels, emit)
    if state.exists:
        saved, nxt = state.get
        restore_valve(valve, json.loads(saved))
    rows = pd.concat(list(frames), ignore_index=True).sort_values(["t", "reader", "seq"])
    columns = ["kind", "reader", "seq", "t", "split", "ts", "value", "idle"]
    for kind, reader, seq, t, split, ts, value, idle in rows[columns].itertuples(index=False, name=None):
        cause[:] = [int(t), int(reader), int(seq)]
        if kind == "R":
            out.append((target, nxt + len(out), "record", int(split), int(ts), 0, False, *cause))
        elif kind == "W":
            valve.input_watermark(int(value), int(reader))
        else:
            valve.input_status(bool(idle), int(reader))
    state.update((json.dumps(snapshot_valve(valve)), nxt + len(out)))
    if out:
        yield pd.DataFrame(out, columns=[f.split()[0] for f in OUTPUT_SCHEMA.split(", ")])


# --------------------------------------------------------------------------
# A schedule through the pipeline
# --------------------------------------------------------------------------

Output = tuple[Any, ...]  # ("record", split, ts) | ("output_watermark", value) | ("output_status", idle)


@dataclass
class StreamResult:
    """What the downstream tasks emitted, each in its order (`tasks[p]`), the records with their
    global position `(t, reader, seq)`, and how many micro-batches ran."""

    tasks: list[list[Output]]
    records: list[Output]
    batches: int

    def outputs(self) -> list[Output]:
        """The valve's outputs: every task's valve saw the same channels, so they agree."""
        views = [[o for o in task if o[0] != "record"] for task in self.tasks]
        if any(v != views[0] for v in views):
            raise AssertionError(f"the downstream tasks' valves disagree: {views}")
        return views[0]


def pipeline(spark: Any, schedule: Schedule, downstream: int, ticks_per_batch: int) -> Any:
    """The streaming DataFrame: source -> routing (W/S broadcast, R by split) -> valve per task."""
    from pyspark.sql import functions as F

    config: WatermarksConfig = schedule.config
    spark.dataSource.register(WatermarkSource)
    src = (spark.readStream.format(FORMAT).option("schedule", schedule.to_json())
           .option("ticks_per_batch", str(ticks_per_batch)).load())
    targets = F.when(F.col("kind") == "R", F.array(F.pmod(F.col("split"), F.lit(downstream)))) \
        .otherwise(F.sequence(F.lit(0), F.lit(downstream - 1)))
    routed = src.withColumn("target", F.explode(targets.cast("array<int>")))
    return routed.groupBy("target").applyInPandasWithState(
        functools.partial(valve_task, config.readers), OUTPUT_SCHEMA, STATE_SCHEMA, "append", "NoTimeout")


def run_schedule(spark: Any, schedule: Schedule, downstream: int = 2, ticks_per_batch: int = 1,
                 workdir: str | None = None) -> StreamResult:
    """Run a watermarks schedule through the pipeline to its end on `spark` and return what the
    downstream tasks emitted.  UnsupportedStep (before any query) for `align` and `failover`."""
    check_supported(schedule)
    if downstream < 1 or ticks_per_batch < 1:
        raise ValueError("downstream and ticks_per_batch must be positive")
    own = workdir is None
    directory = tempfile.mkdtemp(prefix="wm-stream-") if workdir is None else workdir
    name = f"wm_stream_{uuid.uuid4().hex}"
    try:
        query = (pipeline(spark, schedule, downstream, ticks_per_batch).writeStream.format("memory")
                 .queryName(name).outputMode("append").option("checkpointLocation", f"{directory}/checkpoint")
                 .trigger(availableNow=True).start())
        if not query.awaitTermination(QUERY_TIMEOUT_S):
            query.stop()
            raise TimeoutError(f"the query did not finish within {QUERY_TIMEOUT_S} s")
        offsets = Path(directory) / "checkpoint" / "offsets"
        batches = sum(p.name.isdigit() for p in offsets.iterdir()) if offsets.exists() else 0
        rows = spark.table(name).collect()
        spark.catalog.dropTempView(name)
    finally:
        if own:
            shutil.rmtree(directory, ignore_errors=True)
    tasks: list[list[Output]] = [[] for _ in range(downstream)]
    records: list[tuple[tuple[int, int, int], Output]] = []
    for r in sorted(rows, key=lambda r: (r["target"], r["idx"])):
        if r["kind"] == "record":
            item: Output = ("record", r["split"], r["ts"])
            records.append(((r["t"], r["reader"], r["seq"]), item))
        elif r["kind"] == "output_watermark":
            item = ("output_watermark", r["value"])
        else:
            item = ("output_status", r["idle"])
        tasks[r["target"]].append(item)
    return StreamResult(tasks, [item for _, item in sorted(records)], batches)
