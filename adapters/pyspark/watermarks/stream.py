"""Watermarks on Spark Structured Streaming: per-split generation in the source, the valve after a shuffle.

The mapping (spec/watermarks.md; pyspark-notes sections 1, 2, 3):

* **the readers** are the partitions of a Python streaming data source (`flink_watermarks`): partition
  r is reader r (`partitions()` returns one per reader, in order).  Each runs the engine's
  `SourceReader` (its splits' generators and partial watermarks, the multiplexer, the idleness
  manager, the `WatermarkToDataOutput`, its `ReaderAlignment`) over what the micro-batch gives it,
  and yields in-band rows in its own order: `R` (a record it read), `W` (a watermark it sent), `S`
  (a status it sent), and its alignment's events `blocked` / `unblocked` (this reader) and `paused`
  / `resumed` (a split, in `split`), each with `(reader, seq)`, `seq` increasing within the reader
  across batches, and `t`, the round of the schedule the reader acted in (below);
* **the planner** (driver side, `latestOffset`) cuts the schedule into micro-batches and turns the
  batch's steps into *actions*, each with its round and its virtual time: `add`, `record` and
  `finish` for one reader, `emit` (a periodic emission instant), `align` (every reader samples,
  checks, reports and reads what a release lets it read), `announce` (the coordinator's maximum to
  the readers that have reported: each checks again and reads), `restart` (WM-16), `end_read` and
  `end` for all;
* **the alignment coordinator** lives in the planner: the engine's `AlignmentCoordinator`, its
  reports (`{"<reader>": value}`) in the offset.  The planner runs the engine readers action by
  action as it plans (as `sources/stream.py` plans by running `SourceReader.poll`), so at an `align`
  step it has every reader's report (WM-22) after the round's sampling and checks, and computes the
  announcement (WM-23, WM-24) the batch's `announce` action carries; a reader that has never
  reported is not in its `receivers` (C4);
* **the job partition**, after the readers, only in a batch with an `announce` or a `restart`
  action: it yields the job's own rows, `max_allowed` (`value`) and `restarted`, with `reader` -1,
  so each comes first in its round (the announcement before the readers' checks, C4; the restart
  before the new attempt reads);
* **the channels**: what a reader sends is routed before the shuffle: every row but a record is
  broadcast to every downstream task (`explode` over the target ids), an `R` row goes to one task by
  its key, the split (`split mod downstream`, so a split's records stay in order in one task);
* **the downstream task** is one group of `groupBy("target").applyInPandasWithState`: a group per
  task, whatever physical partition Spark hashes it to (pitfall P6).  The function sorts the batch's
  rows by `(t, reader, seq)`, i.e. every channel in its own `seq` order, the channels merged in
  the order the spec fixes for what reaches the valve (C3: readers act in index order within a
  round, and what one sends reaches the valve before the next acts), and feeds the `W` and `S` rows
  to the engine's `StatusWatermarkValve`; it emits the records that pass, the valve's
  `output_watermark` / `output_status` and the events (`max_allowed`, `blocked`, `unblocked`,
  `paused`, `resumed`, `restarted`: the **events are rows of the output**, passed through where
  they come, so every task's output has them all, interleaved with its records and its valve's
  outputs as in the reference's trace), each with `idx`, the task's output position (increasing
  across batches).  Ordering by `(reader, seq)` alone would be a legal Flink interleaving too, but
  not the one of the reference's trace (r0 10, r1 20, r0 30, r1 40 gives 10, 20, 30 in round order;
  20, 30 reader-major);
* **processing time** is the schedule's virtual clock, never the wall clock: the offset carries
  `now` and the next periodic emission instant `next_emit`; a `tick` inside a batch becomes one
  `emit` action per instant on the way (WM-3), carrying its time, which the readers' clocks (and
  so their idleness timers, WM-13) read.

A micro-batch is the steps up to and including the next `tick` (`ticks_per_batch` ticks; the rest
of the schedule after the last one, ending with `end`): the records that became available and the
alignment rounds, then the time advance with its periodic emissions.  `ReadAllAvailable` (a
trigger without `SupportsTriggerAvailableNow`) gets the whole rest in one batch.  A round is one act
of the readers in the schedule's order: an `add`, `record` or `finish` step (one reader), a periodic
emission instant (every reader, in index order), an `align` step's two halves (C4: every reader
samples, checks and reports; then the announcement and every receiver's check), a failover's
restart, and the `end` step's two phases (every reader reads what it holds back; then every split
finishes and every reader sends MAX, D2).

**Where state lives between micro-batches.**  A micro-batch boundary is not a failover: in Flink the
reader task lives on and keeps its generators' maximum timestamps, idleness timers, partial
watermarks, the last watermark and status it sent and its alignment state (they are not
checkpointed, WM-16, which only matters at a failover).  In Spark every micro-batch reads in a new
task, so all of it has to be carried, or every batch boundary would act as a restart.

* The readers' state is in the **offset JSON** (Spark writes it to `<checkpoint>/offsets/<N>`
  before batch N runs): per reader, its splits in the order they were added (the split ownership
  is also kept as `reader_of`) with each split's generator, clock, partial watermark and alignment
  sampler, the main output's generator and clock, the combined watermark, the idleness flags, the
  output's last watermark and status, the records and split ends held back, `seq`, and its
  alignment: the announced maximum, its own sampler (the ring of `alignment_buffer` samples and the
  latest), the idle flags it keeps, the paused splits and whether it is blocked (`snapshot_reader`).
  So a split paused (or a reader blocked) in one batch stays so in the next, its records held in
  `available` until an announcement (or, at `end`, C5) lets it read them; and a paused split's or
  a blocked reader's clock is paused in the snapshot, so paused time is not idle time across
  batches either (WM-14).  A source task has no other way to see the previous batch: the offset is
  the only thing the planner hands it, and a stateful operator comes after the source.  The
  partition runs its reader again from the start offset for real and checks that it ends in the
  state the planner wrote.
* The valve's channel state is in the **state store** of `applyInPandasWithState`, one value per
  downstream task (`snapshot_valve`: every channel's watermark, idle and aligned flags, the last
  output and the valve's status, and the task's next output position).  The valve runs on what the
  readers sent in the batch, after the shuffle; the planner never sees it.  `applyInPandasWithState`
  rather than `transformWithStateInPandas`: one value per key is all it needs, with no timers
  (processing time travels in band), and it runs on the default state store, without the RocksDB
  provider and protobuf that `transformWithStateInPandas` needs (pitfall P4) on the shared session.

**Failover** (WM-16) is a query restart from the checkpoint.  `run_schedule` runs one query per
incarnation of the job, each with the option `attempt` (how many failovers it comes after); the
offset's `incarnation` counts the restarts planned.  A query's planner ends its last batch before a
failover it has not done (the job fails there: `latestOffset` has nothing more, and the
`AvailableNow` query ends); the next query, started on the same checkpoint directory, resumes from
the last committed offset and its first batch starts with the `restart` action.  Spark's checkpoint
keeps everything (the offset, the state store), and Flink's does not keep watermarks, so the restart
drops them deliberately: every reader starts anew (`ReaderTask.restart`: generators, partial and
combined watermarks, output, idleness timers, clocks, samplers, blocked and paused all fresh) with
the splits it had registered again at once in the same order (WM-4) and the records and split ends
it still had available read at once; the coordinator's reports are cleared; the periodic timer
counts from the restart (`next_emit = now + interval`); and the job partition's `restarted` row,
first in its round, makes every downstream task start its valve anew (every channel at MIN and
active) before anything of the new attempt reaches it.  What outlives the failover is the splits,
the records not read, the virtual clock and the rows' positions (`seq`, `idx`), which only order
the output.  The sink is a parquet directory, not the memory sink: Spark recovers a memory sink
from its checkpoint only in complete mode, and `applyInPandasWithState` runs in append mode.

Offset: `batch`, `step` (the first step not yet planned), `now`, `next_emit`, `round`,
`incarnation`, `reader_of` (`{"<split>": reader}`, string keys), `coordinator` (the reports),
`readers` (the snapshots after the batch) and `actions` (the batch's, so a replayed batch does the
same).

Supported: every step of the area (any number of readers and splits, bounded out-of-orderness
periodic or punctuated, idleness, `finish_split`, `align` with any `alignment_buffer`, `failover`,
`end`).

`run_schedule(spark, schedule)` runs a watermarks schedule through the pipeline to the end
(`Trigger.AvailableNow`, a parquet sink, one query per incarnation) and returns what each
downstream task emitted (`StreamResult`: `outputs()` the valve's, `events()` the alignment's and
the restarts).  No RDD API and no SparkContext: it runs under Spark Connect too.
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

from flink_semantics.adapters.pyspark.watermarks.engine import (
    AlignmentCoordinator,
    BoundedOutOfOrderness,
    Generator,
    PausableClock,
    SourceReader,
    StatusWatermarkValve,
    WatermarkSampler,
    WithIdleness,
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
)
from flink_semantics.spec.schedule import Schedule, Step, parse_schedule
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

FORMAT = "flink_watermarks"
# In-band rows of the readers.  No nulls: a long column with nulls reaches pandas as float64, which
# cannot hold MAX (2**63 - 1) exactly.
SOURCE_SCHEMA = "kind string, reader int, seq long, t long, split int, ts long, value long, idle boolean"
OUTPUT_SCHEMA = ("target int, idx long, kind string, split int, ts long, value long, idle boolean, "
                 "t long, reader int, seq long")
STATE_SCHEMA = "valve string, next long"
QUERY_TIMEOUT_S = 600
JOB = -1  # the `reader` of the job's own rows (`max_allowed`, `restarted`): first in their round
VALVE_OUTPUTS = ("output_watermark", "output_status")
EVENTS = ("max_allowed", "blocked", "unblocked", "paused", "resumed", "restarted")  # passed through
JOB_ACTIONS = ("announce", "restart")  # the actions the job partition has rows for


def check_supported(schedule: Schedule) -> None:
    """ValueError for a schedule of another area (every step of the watermarks area runs)."""
    if schedule.area != "watermarks":
        raise ValueError(f"not a watermarks schedule: area {schedule.area!r}")


def attempts(schedule: Schedule) -> int:
    """How many queries run the schedule: one, and one more after each failover (WM-16)."""
    return 1 + sum(isinstance(s, FailoverStep) for s in schedule.steps)


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


def _sampler(s: WatermarkSampler) -> list[Any]:
    return [list(s.ring), s.latest]


def _set_sampler(s: WatermarkSampler, d: list[Any]) -> None:
    s.ring, s.latest = list(d[0]), d[1]


def snapshot_reader(reader: SourceReader, seq: int) -> dict[str, Any]:
    """What reader `reader` carries to the next micro-batch, its alignment included: the announced
    maximum, the samplers (the reader's and each split's), the idle flags it keeps, the paused splits
    and whether it is blocked (the clocks they pause are in `clock`)."""
    partials, align = reader.mux.by_split, reader.align
    return {
        "seq": seq,
        "splits": [[split, {"clock": _clock(s.clock), "generator": _generator(s.generator),
                            "partial": [partials[split].watermark, partials[split].idle],
                            "sampler": _sampler(align.splits[split])}]
                   for split, s in reader.splits.items()],
        "main": {"clock": _clock(reader.main_clock), "generator": _generator(reader.main_generator)},
        "combined": [reader.mux.status.combined, reader.mux.status.idle],
        "idleness": [reader.idleness.main.idle, reader.idleness.split_local.idle],
        "output": [reader.out.max_so_far, reader.out.idle],
        "available": [[split, ts] for split, ts in reader.available],
        "ending": reader.ending,
        "alignment": {"max_allowed": align.max_allowed, "latest": _sampler(align.latest),
                      "idle": align.idle, "idle_splits": sorted(align.idle_splits),
                      "paused": sorted(align.paused), "blocked": align.blocked},
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
        _set_sampler(reader.align.splits[split], s["sampler"])
    _set_clock(reader.main_clock, d["main"]["clock"])
    _set_generator(reader.main_generator, d["main"]["generator"])
    reader.mux.status.combined, reader.mux.status.idle = d["combined"]
    reader.idleness.main.idle, reader.idleness.split_local.idle = d["idleness"]
    reader.out.max_so_far, reader.out.idle = d["output"]
    reader.available = [(split, ts) for split, ts in d["available"]]
    reader.ending = d["ending"]
    align, a = reader.align, d["alignment"]
    align.max_allowed = a["max_allowed"]
    _set_sampler(align.latest, a["latest"])
    align.idle, align.blocked = a["idle"], a["blocked"]
    align.idle_splits, align.paused = set(a["idle_splits"]), set(a["paused"])
    if reader.ending:
        align.enabled = False


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
        self.config = config
        self.now = 0
        self.round = 0
        self.seq = 0 if snapshot is None else int(snapshot["seq"])
        self.rows: list[Row] = []
        self.report: int | None = None  # what the last `align` action reported (WM-22)
        self.reader = self._fresh()
        if snapshot is not None:
            restore_reader(self.reader, snapshot)

    def _fresh(self) -> SourceReader:
        return SourceReader(self.index, self.config, lambda: self.now, self._emit, self._send,
                            self.config.max_drift is not None)

    def _row(self, kind: str, split: int = -1, ts: int = 0, value: int = 0, idle: bool = False) -> None:
        self.rows.append((kind, self.index, self.seq, self.round, split, ts, value, idle))
        self.seq += 1

    def _emit(self, kind: str, **fields: Any) -> None:
        if kind == "record":  # WM-1: the record goes out before its generator sees it
            self._row("R", split=fields["split"], ts=fields["ts"])
        elif kind in EVENTS:  # blocked/unblocked (this reader), paused/resumed (a split)
            self._row(kind, split=fields.get("split", -1))
        # split_finished stays in the reader

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
        elif op == "align":  # C4, first half: sample, check (WM-25, WM-26), report (WM-22), read
            r.align.sample()
            self.report = r.align.report()
            r.pump()
        elif op == "announce":  # C4, second half (a reader that has reported): check again, read
            r.align.announce(action["value"])
            r.pump()
        elif op == "restart":
            self.restart()
        elif op == "end_read":
            r.read_to_end()
        elif op == "end":
            r.finish_all()
            r.end(self._send)
        else:
            raise ValueError(f"unknown action {op!r}")

    def restart(self) -> None:
        """WM-16: a fresh reader (every watermark, generator, timer, output and sampler anew) with
        the splits it had registered again at once in the same order (WM-4), the records and split
        ends still available read as far as they can be.  `seq` goes on: it orders the rows."""
        splits, available = list(self.reader.splits), list(self.reader.available)
        self.reader = self._fresh()
        for split in splits:
            self.reader.add_split(split)
        self.reader.available = available
        self.reader.pump()

    def snapshot(self) -> dict[str, Any]:
        return snapshot_reader(self.reader, self.seq)


def concerns(action: Mapping[str, Any], reader: int) -> bool:
    """Whether reader `reader` acts on `action`: its own, every reader's, or an announcement to it."""
    if "receivers" in action:
        return reader in action["receivers"]
    return action.get("reader") in (None, reader)


# --------------------------------------------------------------------------
# The planner: the schedule cut into micro-batches
# --------------------------------------------------------------------------


def initial_offset(config: WatermarksConfig) -> dict[str, Any]:
    fresh = [ReaderTask(r, config, None).snapshot() for r in range(config.readers)]
    return {"batch": -1, "step": 0, "now": 0, "next_emit": config.interval or None, "round": 0,
            "incarnation": 0, "reader_of": {}, "coordinator": {}, "readers": fresh, "actions": []}


def plan_batch(schedule: Schedule, start: Mapping[str, Any], ticks: int | None,
               attempt: int = 0) -> dict[str, Any] | None:
    """The next micro-batch after `start` for the query `attempt` (how many failovers it comes
    after): the steps up to and including the `ticks`-th tick (all the rest with None) as actions,
    and the readers' and the coordinator's state after them; None when no step is left for this
    query.  A failover not yet done ends the query's last batch before it; the next query's first
    batch starts with it (the restart)."""
    config: WatermarksConfig = schedule.config
    k = start["step"]
    now, next_emit, rnd = start["now"], start["next_emit"], start["round"]
    incarnation = start["incarnation"]
    reader_of: dict[str, int] = dict(start["reader_of"])
    coordinator = AlignmentCoordinator(config.max_drift) if config.max_drift is not None else None
    reports = {int(r): v for r, v in start["coordinator"].items()}
    tasks = [ReaderTask(r, config, start["readers"][r]) for r in range(config.readers)]
    actions: list[dict[str, Any]] = []

    def act(op: str, reader: int | None = None, **fields: Any) -> None:
        """The action at the current round and time, run at once on the readers it concerns (their
        rows dropped: the partitions emit them), so that the next step sees their state."""
        nonlocal rnd
        action = {"t": rnd, "at": now, "op": op, "reader": reader, **fields}
        actions.append(action)
        rnd += 1
        for task in tasks:
            if concerns(action, task.index):
                task.apply(action)

    seen = 0
    while k < len(schedule.steps) and (ticks is None or seen < ticks):
        s: Step = schedule.steps[k]
        if isinstance(s, FailoverStep):
            if incarnation >= attempt:
                break  # the job fails here: this query ends; the next one restarts
            act("restart")  # WM-16: the readers, the valves (the job partition's row), the coordinator
            reports.clear()
            next_emit = now + config.interval if config.interval else None  # the timer starts anew
            incarnation += 1
        elif isinstance(s, AddSplitStep):
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
        elif isinstance(s, AlignStep):  # C4: sample, check, report; announce; check again
            assert coordinator is not None, "align needs max_drift (WM-29)"
            act("align")
            for task in tasks:
                if task.report is not None:
                    reports[task.index] = task.report
            coordinator.reports = reports
            announcement = coordinator.announcement()  # WM-23: none before any reader has reported
            if announcement is not None:
                max_allowed, receivers = announcement
                act("announce", value=max_allowed, receivers=receivers)
        elif isinstance(s, EndStep):  # C5, WM-15 (D2)
            act("end_read")
            act("end")
        else:
            raise ValueError(f"step {k}: unknown step {s.op!r}")
        k += 1
    if k == start["step"]:
        return None
    return {"batch": start["batch"] + 1, "step": k, "now": now, "next_emit": next_emit, "round": rnd,
            "incarnation": incarnation, "reader_of": reader_of,
            "coordinator": {str(r): v for r, v in sorted(reports.items())},
            "readers": [t.snapshot() for t in tasks], "actions": actions}


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


@dataclass
class JobPartition(InputPartition):
    """The job's own rows in batch `batch`: the coordinator's announcements and the restarts."""

    batch: int
    actions: list[dict[str, Any]]


class WatermarkSource(DataSource):
    """`spark.readStream.format("flink_watermarks").option("schedule", schedule.to_json()).load()`.
    Options: `schedule` (a watermarks schedule's JSON), `ticks_per_batch` (default 1), `attempt`
    (default 0: how many of the schedule's failovers the query comes after)."""

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
        self.attempt = int(options.get("attempt", 0))

    def initialOffset(self) -> dict[str, Any]:
        return initial_offset(self.config)

    def getDefaultReadLimit(self) -> ReadLimit:
        """The limit counts ticks: a batch is `ticks_per_batch` time advances' worth of steps."""
        return ReadMaxRows(self.ticks)

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the schedule is fixed: all of it is available now

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        ticks = None if isinstance(limit, ReadAllAvailable) else self.ticks
        end = plan_batch(self.schedule, start, ticks, self.attempt)
        return start if end is None else end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """Reader r is partition r: its state at `start`, its actions of the batch; then, in a batch
        with an announcement or a restart, the job partition."""
        parts: list[InputPartition] = [
            ReaderPartition(end["batch"], r, start["readers"][r],
                            [a for a in end["actions"] if concerns(a, r)], end["readers"][r])
            for r in range(self.config.readers)]
        job = [a for a in end["actions"] if a["op"] in JOB_ACTIONS]
        if job:
            parts.append(JobPartition(end["batch"], job))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Row]:
        if isinstance(partition, JobPartition):  # seq: the round, unique and increasing
            for a in partition.actions:
                kind = "max_allowed" if a["op"] == "announce" else "restarted"
                yield (kind, JOB, a["t"], a["t"], -1, 0, a.get("value", 0), False)
            return
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
    through the valve restored from its state; out go the records, the valve's outputs and the
    events, passed through in place (`restarted` first starts the valve anew, WM-16)."""
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
        elif kind == "S":
            valve.input_status(bool(idle), int(reader))
        else:  # an event (EVENTS): not the valve's input, shown where it happened
            if kind == "restarted":
                valve = StatusWatermarkValve(channels, emit)
            out.append((target, nxt + len(out), kind, int(split), 0, int(value), False, *cause))
    state.update((json.dumps(snapshot_valve(valve)), nxt + len(out)))
    if out:
        yield pd.DataFrame(out, columns=[f.split()[0] for f in OUTPUT_SCHEMA.split(", ")])


# --------------------------------------------------------------------------
# A schedule through the pipeline
# --------------------------------------------------------------------------

# ("record", split, ts) | ("output_watermark", value) | ("output_status", idle) | ("max_allowed", value)
# | ("blocked" / "unblocked", reader) | ("paused" / "resumed", split) | ("restarted",): the reference's
# events as (event, *data)
Output = tuple[Any, ...]


def output_item(kind: str, split: int, ts: int, value: int, idle: bool, reader: int) -> Output:
    """A row of OUTPUT_SCHEMA as the trace event it stands for (`reader`: the row's cause's reader)."""
    if kind == "record":
        return (kind, int(split), int(ts))
    if kind in ("output_watermark", "max_allowed"):
        return (kind, int(value))
    if kind == "output_status":
        return (kind, bool(idle))
    if kind in ("blocked", "unblocked"):
        return (kind, int(reader))
    if kind in ("paused", "resumed"):
        return (kind, int(split))
    if kind == "restarted":
        return (kind,)
    raise ValueError(f"unknown output row {kind!r}")


@dataclass
class StreamResult:
    """What the downstream tasks emitted, each in its order (`tasks[p]`: its records, the valve's
    outputs and the events), the records with their global position `(t, reader, seq)`, and how
    many micro-batches ran (over all the queries)."""

    tasks: list[list[Output]]
    records: list[Output]
    batches: int

    def _same_everywhere(self, kinds: tuple[str, ...]) -> list[Output]:
        views = [[o for o in task if o[0] in kinds] for task in self.tasks]
        if any(v != views[0] for v in views):
            raise AssertionError(f"the downstream tasks disagree: {views}")
        return views[0]

    def outputs(self) -> list[Output]:
        """The valve's outputs: every task's valve saw the same channels, so they agree."""
        return self._same_everywhere(VALVE_OUTPUTS)

    def events(self) -> list[Output]:
        """The alignment's events and the restarts: every task got them all."""
        return self._same_everywhere(EVENTS)


def pipeline(spark: Any, schedule: Schedule, downstream: int, ticks_per_batch: int, attempt: int = 0) -> Any:
    """The streaming DataFrame: source -> routing (records by split, every other row broadcast) ->
    valve per task."""
    from pyspark.sql import functions as F

    config: WatermarksConfig = schedule.config
    spark.dataSource.register(WatermarkSource)
    src = (spark.readStream.format(FORMAT).option("schedule", schedule.to_json())
           .option("ticks_per_batch", str(ticks_per_batch)).option("attempt", str(attempt)).load())
    targets = F.when(F.col("kind") == "R", F.array(F.pmod(F.col("split"), F.lit(downstream)))) \
        .otherwise(F.sequence(F.lit(0), F.lit(downstream - 1)))
    routed = src.withColumn("target", F.explode(targets.cast("array<int>")))
    return routed.groupBy("target").applyInPandasWithState(
        functools.partial(valve_task, config.readers), OUTPUT_SCHEMA, STATE_SCHEMA, "append", "NoTimeout")


def run_schedule(spark: Any, schedule: Schedule, downstream: int = 2, ticks_per_batch: int = 1,
                 workdir: str | None = None) -> StreamResult:
    """Run a watermarks schedule through the pipeline to its end on `spark` and return what the
    downstream tasks emitted: one query (`Trigger.AvailableNow`, a parquet sink), and after each
    failover one more from the same checkpoint."""
    check_supported(schedule)
    if downstream < 1 or ticks_per_batch < 1:
        raise ValueError("downstream and ticks_per_batch must be positive")
    own = workdir is None
    directory = tempfile.mkdtemp(prefix="wm-stream-") if workdir is None else workdir
    checkpoint, sink = f"{directory}/checkpoint", f"{directory}/output"
    try:
        for attempt in range(attempts(schedule)):
            query = (pipeline(spark, schedule, downstream, ticks_per_batch, attempt).writeStream
                     .format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
                     .queryName(f"wm_stream_{uuid.uuid4().hex}").outputMode("append")
                     .trigger(availableNow=True).start())
            if not query.awaitTermination(QUERY_TIMEOUT_S):
                query.stop()
                raise TimeoutError(f"the query did not finish within {QUERY_TIMEOUT_S} s")
        offsets = Path(checkpoint) / "offsets"
        batches = sum(p.name.isdigit() for p in offsets.iterdir()) if offsets.exists() else 0
        rows = spark.read.schema(OUTPUT_SCHEMA).parquet(sink).collect() if Path(sink).exists() else []
    finally:
        if own:
            shutil.rmtree(directory, ignore_errors=True)
    tasks: list[list[Output]] = [[] for _ in range(downstream)]
    records: list[tuple[tuple[int, int, int], Output]] = []
    for r in sorted(rows, key=lambda r: (r["target"], r["idx"])):
        item = output_item(r["kind"], r["split"], r["ts"], r["value"], r["idle"], r["reader"])
        if item[0] == "record":
            records.append(((r["t"], r["reader"], r["seq"]), item))
        tasks[r["target"]].append(item)
    return StreamResult(tasks, [item for _, item in sorted(records)], batches)
