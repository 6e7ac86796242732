"""Mini-batch schedules through the public API (`api.changelog_aggregate`) on Structured Streaming,
many schedules in one query: `run_many`, the `pyspark-stream` adapter's entry point.

The mapping:

* **The source** is a Python streaming data source (`flink_mini_batch_script`) reading a script the
  driver writes: a list of micro-batches of in-band rows `(sid, seq, time, op, key, value)`, `sid`
  the schedule's place in the batch of schedules, `seq` the step, `time` the processing time at the
  step, `op` a change (`+I` ...) or one of the API's control ops (`watermark`, `idle`/`active`,
  `tick` for an `advance`, `barrier` for a `checkpoint`, `end`).  The read limit is one script batch
  per micro-batch: every micro-batch is exactly one script batch, for all schedules at once.
* **The query** is `changelog_aggregate(src, partition_by="sid", configs={sid: ...}, order="seq",
  time="time", markers=True, commit_finishes_bundles=False)` (a committed micro-batch is a
  checkpoint only where the schedule has one, its `barrier` row; the rows' clock, so no Spark
  timer): the job's non-keyed part keyed by `sid` (every operator of one
  incarnation of the schedule's job, MB-4..MB-16, MB-25), the aggregation keyed by `(sid, key)`
  (MB-17..MB-26, MB-30), each schedule with its own configuration.  Processing time is the
  schedule's, in band: it runs on across crashes and restores, and an incarnation's clock starts at
  its restore (a `tick` row first).
* **Rounds.** A schedule's incarnations (the start, then each `restore` after a `crash`) are its
  rounds: round r runs every schedule's r-th incarnation in one query, on a fresh checkpoint
  location (`trigger(availableNow=True)`: the query stops when the script is consumed).  A
  **crash** ends the schedule's part of its round (what its stage 1 buffered is lost with the
  query: MB-29).  A **checkpoint** is a committed micro-batch: the `barrier` row finishes the
  bundles (MB-13) and the micro-batch that carries it commits the state.  The micro-batches of a
  round are aligned on checkpoints: a schedule's steps up to its j-th checkpoint fill the slots of
  segment j, right-aligned, so that every schedule's j-th checkpoint commits in the same micro-batch
  (segments are cut further into micro-batches of `steps_per_batch` steps, so bundles also span
  micro-batches, in the state store).  A **restore** is the next round: each schedule's
  accumulators are read with Spark's state data source (`api.aggregation_state`: `format("statestore")`
  at the batch id of *its* checkpoint, in the location of the round that took it) and given to the
  new query as `initialState`; `restore none` starts without state.  The assigner, bundles and valve
  start afresh in the new query (MB-29).
* **The output**: `foreachBatch` writes each micro-batch's rows to a file named by round and batch
  id (a replayed batch overwrites its own); the driver orders each schedule's rows by `(seq, n, kpos,
  sub)` into its trace's events.
* **MB-2** refusals give the single `rejected` event; those schedules run no query.

`run_in_process` runs the same rounds, micro-batches and stages without Spark, for fast tests of the
planning on many schedules.  No RDD API and no SparkContext: it runs under Spark Connect too.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark import chaos
from flink_semantics.adapters.pyspark.mini_batch.api import (
    MARKERS,
    AggregationConfig,
    aggregation_state,
    changelog_aggregate,
    stage_one,
    stage_two,
)
from flink_semantics.adapters.pyspark.mini_batch.engine import Acc, Settings, refusal
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
from flink_semantics.spec.schedule import Event, Schedule, Trace, rejected

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pyspark missing: the module still imports (the adapter reports it)
    DataSource = DataSourceStreamReader = InputPartition = object  # type: ignore
    SupportsTriggerAvailableNow = ReadMaxRows = object  # type: ignore

FORMAT = "flink_mini_batch_script"
PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
RETENTION_MS = 24 * 3600 * 1000  # `ttl`: Spark's state TTL, longer than any schedule (C5)
STEPS_PER_BATCH = 16  # the default cut of a segment into micro-batches (a micro-batch costs ~1 s)
# A fault run's calls (streaming.py): sized for >= 1,000 task failures at 36 examples (issue 31).
# A call's tasks grow with its rounds and micro-batches, hardly with its schedules: one call a property
# (12 schedules) met 192 failures at depth 1 over a whole run, so 36 schedules cut in calls of 12.
FAULT_CALL_SIZE = 12
SOURCE_SCHEMA = "sid long, seq long, time long, op string, key long, value long"

# Capability -> why this face cannot run it: none (spec/adapter.py).
STREAM_UNSUPPORTED: dict[str, str] = {}

SourceRow = tuple[int, int, int, str, int, int]  # (sid, seq, time, op, key, value)


# --------------------------------------------------------------------------
# A schedule cut into incarnations (rounds) and segments (up to a checkpoint)
# --------------------------------------------------------------------------


@dataclass
class Incarnation:
    """One round of a schedule: the checkpoint it restores (None: no state), its segments of in-band
    rows (segment j ends with the j-th checkpoint's barrier, the last one maybe with none), and the
    checkpoint ids that end them."""

    sid: int
    restore: int | None
    segments: list[list[SourceRow]] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing but its start: it can emit nothing and take no checkpoint."""
        return sum(len(s) for s in self.segments) <= 1


def _row(sid: int, i: int, now: int, s: Any) -> SourceRow:
    if isinstance(s, RowStep):
        return (sid, i, now, s.kind, s.key, s.value)
    if isinstance(s, WatermarkStep):
        return (sid, i, now, "watermark", 0, s.timestamp)
    if isinstance(s, StatusStep):
        return (sid, i, now, "idle" if s.idle else "active", 0, 0)
    if isinstance(s, AdvanceStep):
        return (sid, i, now, "tick", 0, 0)  # MB-4: the assigner's timers fire up to `now`
    if isinstance(s, CheckpointStep):
        return (sid, i, now, "barrier", 0, s.id)  # MB-13
    if isinstance(s, EndStep):
        return (sid, i, now, "end", 0, 0)
    raise ValueError(f"step {i}: not a mini-batch step: {s!r}")


def incarnations(sid: int, schedule: Schedule) -> list[Incarnation]:
    """The schedule's incarnations, each cut into segments at its checkpoints; the first row of each
    a `tick` at the time it starts (its clock starts there, MB-4, MB-29)."""
    now = 0
    out: list[Incarnation] = []
    current: Incarnation | None = Incarnation(sid, None, [[(sid, -1, 0, "tick", 0, 0)]])
    for i, s in enumerate(schedule.steps):
        if isinstance(s, AdvanceStep):
            now += s.ms  # processing time runs on, across crashes too
        if isinstance(s, RestoreStep):
            current = Incarnation(sid, s.checkpoint, [[(sid, i, now, "tick", 0, 0)]])
        elif isinstance(s, CrashStep):
            if current is not None:
                out.append(current)
            current = None
        elif current is not None:  # input while the job is down is lost (SCH-7: only a restore follows)
            current.segments[-1].append(_row(sid, i, now, s))
            if isinstance(s, CheckpointStep):
                current.checkpoints.append(s.id)
                current.segments.append([])
    if current is not None:
        out.append(current)
    return out


def _pieces(rows: list[SourceRow], steps_per_batch: int | None) -> list[list[SourceRow]]:
    if not rows:
        return []
    n = steps_per_batch or len(rows)
    return [rows[i:i + n] for i in range(0, len(rows), n)]


@dataclass
class Layout:
    """A round's micro-batches (rows of every schedule) and, per (sid, checkpoint id), the batch id
    whose commit is that checkpoint."""

    batches: list[list[SourceRow]]
    checkpoints: dict[tuple[int, int], int]


def layout(round_: Sequence[Incarnation], steps_per_batch: int | None) -> Layout:
    """Segment j of every schedule in the same slots, right-aligned, so that all j-th checkpoints
    commit in one micro-batch; slots empty for every schedule are left out."""
    slots: list[list[SourceRow]] = []
    ends: dict[tuple[int, int], int] = {}  # (sid, checkpoint) -> slot
    for j in range(max(len(inc.segments) for inc in round_)):
        pieces = {inc.sid: _pieces(inc.segments[j], steps_per_batch)
                  for inc in round_ if j < len(inc.segments)}
        width = max((len(p) for p in pieces.values()), default=0)
        base = len(slots)
        slots += [[] for _ in range(width)]
        for inc in round_:
            ps = pieces.get(inc.sid, [])
            for p, rows in enumerate(ps):
                slots[base + width - len(ps) + p] += rows
            if j < len(inc.checkpoints):
                ends[(inc.sid, inc.checkpoints[j])] = base + width - 1
    ids, batches = {}, []
    for slot, rows in enumerate(slots):
        if rows:
            ids[slot] = len(batches)
            batches.append(rows)
    return Layout(batches, {k: ids[slot] for k, slot in ends.items()})


def rounds(schedules: Sequence[tuple[int, Schedule]]) -> list[list[Incarnation]]:
    """Round r: every schedule's r-th incarnation that has anything to run."""
    per = [incarnations(sid, s) for sid, s in schedules]
    width = max((len(p) for p in per), default=0)
    return [[p[r] for p in per if r < len(p) and not p[r].empty] for r in range(width)]


def config_of(schedule: Schedule) -> AggregationConfig:
    """The API's configuration of a schedule's (spec/mini-batch.md, "Configuration fields")."""
    c = schedule.config
    return AggregationConfig(mini_batch=c.enabled, allow_latency_ms=c.allow_latency if c.enabled else None,
                             bundle_size=c.size if c.enabled else None, assigner=c.assigner,
                             two_phase=c.two_phase, update_before=c.update_before,
                             state_ttl_ms=RETENTION_MS if c.ttl else None)


# --------------------------------------------------------------------------
# The source
# --------------------------------------------------------------------------


@dataclass
class ScriptPartition(InputPartition):  # type: ignore[misc,valid-type]
    path: str
    first: int
    last: int
    chaos_root: str | None = None


def read_script(path: str) -> list[list[list[Any]]]:
    with open(path, encoding="utf-8") as fh:
        return list(json.load(fh))


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


class ScriptSource(DataSource):  # type: ignore[misc,valid-type]
    """`spark.readStream.format("flink_mini_batch_script").option("script", path).load()`: the
    script's batches, one a micro-batch."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> Any:
        return struct(SOURCE_SCHEMA)

    def streamReader(self, schema: Any) -> ScriptReader:
        return ScriptReader(self.options)


class ScriptReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,valid-type]
    """Offsets `{"batch": i}`: the script batches up to i delivered."""

    def __init__(self, options: Mapping[str, str]):
        self.path = options["script"]
        self.chaos_root = options.get("chaos_root")  # the fault runs (chaos.py)
        self.available = len(read_script(self.path))

    def initialOffset(self) -> dict[str, int]:
        return {"batch": -1}

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(1)  # the limit counts script batches: one a micro-batch

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # what the script holds is available now

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        if start["batch"] + 1 >= self.available:
            return start
        n = limit.max_rows if isinstance(limit, ReadMaxRows) else self.available
        return {"batch": min(self.available, start["batch"] + 1 + max(n, 1)) - 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
        # parallelism 1
        return [ScriptPartition(self.path, start["batch"] + 1, end["batch"], self.chaos_root)]

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        rows = [r for batch in read_script(partition.path)[partition.first:partition.last + 1] for r in batch]
        for r in chaos.partly_read(rows, partition.chaos_root, "mini_batch source reader"):
            yield tuple(r)

    def commit(self, end: dict[str, int]) -> None:
        pass


# --------------------------------------------------------------------------
# The output
# --------------------------------------------------------------------------


def write_batch(directory: str, round_: int, df: Any, batch_id: int) -> None:
    """foreachBatch: the micro-batch's rows to `<round>-<batch>.json` (a replay overwrites)."""
    write_json(Path(directory) / f"{round_:04d}-{batch_id:06d}.json", [r.asDict() for r in df.collect()])


def events_of(rows: Iterable[Mapping[str, Any]]) -> list[Event]:
    """One schedule's output rows as its trace's events, in (seq, n, key's place, row's place) order."""
    out = []
    for r in sorted(rows, key=lambda r: (r["seq"], r["n"], r["kpos"], r["sub"])):
        if r["type"] == "out":
            out.append(event(r["seq"], "out", key=r["key"], change=r["op"], count=r["count"],
                             sum=r["sum"], min=r["min"], max=r["max"]))
        elif r["type"] == "watermark":
            out.append(event(r["seq"], "watermark", timestamp=r["ts"]))
        else:
            out.append(event(r["seq"], "status", idle=r["idle"]))
    return out


# --------------------------------------------------------------------------
# Many schedules through Structured Streaming
# --------------------------------------------------------------------------


@dataclass
class Taken:
    """Where a schedule's checkpoint is: the round's checkpoint location and the committed batch."""

    location: str
    batch: int
    ttls: tuple[int, ...]


class StreamRun:
    """A batch of mini-batch schedules as one streaming query per round; `run()` gives the traces."""

    def __init__(self, spark: Any, schedules: Sequence[Schedule], root: Path,
                 steps_per_batch: int | None = STEPS_PER_BATCH, partitions: int = 2):
        self.spark, self.schedules, self.root = spark, list(schedules), root
        self.steps_per_batch = steps_per_batch
        # Shuffle partitions of both stages: 2 (one a core).  1 was no faster within the noise of a
        # loaded machine (bench/mini_batch.py --stream --stream-partitions), and gives the fault runs
        # fewer tasks to fail
        self.partitions = partitions
        self.output = root / "output"
        self.taken: dict[tuple[int, int], Taken] = {}
        self.planned = 0  # micro-batches planned, over all rounds
        self.micro_batches = 0  # micro-batches Spark ran (foreachBatch calls), over all rounds
        self.queries = 0
        # Where the time goes (seconds): each query from start to stop ("query"), and Spark's
        # durations of its micro-batches (queryPlanning, addBatch, walCommit, commitOffsets, ...)
        self.timing: dict[str, float] = {}

    def run(self) -> list[Trace]:
        refused = {sid: refusal(Settings(**asdict(s.config))) for sid, s in enumerate(self.schedules)}
        runnable = [(sid, s) for sid, s in enumerate(self.schedules) if refused[sid] is None]
        self.output.mkdir(parents=True, exist_ok=True)
        if runnable:
            self.spark.dataSource.register(ScriptSource)
            for r, round_ in enumerate(rounds(runnable)):
                if round_:
                    self._round(r, round_)
        rows: dict[int, list[dict[str, Any]]] = {sid: [] for sid in range(len(self.schedules))}
        files = sorted(self.output.glob("*.json"))
        self.micro_batches = len(files)
        for p in files:
            for row in json.loads(p.read_text(encoding="utf-8")):
                rows[row["sid"]].append(row)
        return [Trace((rejected(refused[sid]),)) if refused[sid] is not None  # MB-2: no query runs
                else Trace(tuple(events_of(rows[sid]))) for sid in range(len(self.schedules))]

    def _initial(self, round_: Sequence[Incarnation]) -> Any:
        """MB-29: each restoring schedule's accumulators as of its own checkpoint's batch."""
        from flink_semantics.adapters.pyspark.mini_batch.api import _functions

        F = _functions(self.spark)
        by_read: dict[tuple[str, int, tuple[int, ...]], list[int]] = {}
        for inc in round_:
            if inc.restore is not None:
                t = self.taken[(inc.sid, inc.restore)]
                by_read.setdefault((t.location, t.batch, t.ttls), []).append(inc.sid)
        state = None
        for (location, batch, ttls), sids in by_read.items():
            part = aggregation_state(self.spark, location, batch, partition_by="sid", state_ttl_ms=ttls)
            part = part.where(F.col("sid").isin(sids))
            state = part if state is None else state.unionByName(part)
        return state

    def _round(self, r: int, round_: Sequence[Incarnation]) -> None:
        """One round: a query over every schedule's incarnation, from their checkpoints' state."""
        plan = layout(round_, self.steps_per_batch)
        directory = self.root / f"round-{r:04d}"
        directory.mkdir()
        script, checkpoint = directory / "script.json", directory / "checkpoint"
        write_json(script, plan.batches)
        configs = {inc.sid: config_of(self.schedules[inc.sid]) for inc in round_}
        ttls = tuple(sorted({c.state_ttl_ms for c in configs.values() if c.state_ttl_ms is not None}))
        t0 = time.perf_counter()
        if r > 0:  # every schedule of this round restarts from its checkpoint (or from none)
            chaos.query_restarted(self.root, "mini_batch restore")
        # Armed (the fault runs, chaos.py): the reader and both stages fail tasks now and then
        armed = chaos.armed(self.root)
        reader = self.spark.readStream.format(FORMAT).option("script", str(script))
        if armed is not None:
            reader = reader.option("chaos_root", armed)
        # Bundles span micro-batches (a checkpoint is a `barrier` row, not every commit); the
        # armed stages fail tasks after a state update
        hook = None if armed is None else functools.partial(chaos.task_point, armed)
        out = changelog_aggregate(reader.load(), key="key", op="op", value="value", partition_by="sid",
                                  configs=configs, order="seq", time="time", markers=True,
                                  initial_state=self._initial(round_), commit_finishes_bundles=False,
                                  on_state_update=hook)
        sink = functools.partial(write_batch, str(self.output), r)
        with query_conf(self.spark, {"spark.sql.shuffle.partitions": str(self.partitions),
                                     "spark.sql.streaming.stateStore.providerClass": PROVIDER,
                                     # a commit writes the batch's changes, not a snapshot of the store
                                     "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled":
                                         "true",
                                     "spark.sql.streaming.minBatchesToRetain": str(len(plan.batches) + 10),
                                     "spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
            query = (out.writeStream.foreachBatch(sink).trigger(availableNow=True)
                     .option("checkpointLocation", str(checkpoint)).start())
        try:
            query.awaitTermination()
        finally:
            query.stop()
        self._time("query", time.perf_counter() - t0)
        for progress in query.recentProgress:
            for phase, ms in progress.durationMs.items():
                self._time(phase, ms / 1000)
        self.queries += 1
        self.planned += len(plan.batches)
        for (sid, cid), batch in plan.checkpoints.items():
            self.taken[(sid, cid)] = Taken(str(checkpoint), batch, ttls)


    def _time(self, what: str, seconds: float) -> None:
        self.timing[what] = self.timing.get(what, 0.0) + seconds


def run_many(spark: Any, schedules: Sequence[Schedule], root: Path,
             steps_per_batch: int | None = STEPS_PER_BATCH) -> list[Trace]:
    """The traces of a batch of mini-batch schedules, in order: all of them in one streaming query
    per round of incarnations, through `changelog_aggregate` (a refused configuration: `rejected`,
    MB-2)."""
    return StreamRun(spark, schedules, Path(root), steps_per_batch).run()


def run_schedule(spark: Any, schedule: Schedule, root: Path | None = None,
                 steps_per_batch: int | None = STEPS_PER_BATCH, partitions: int = 1) -> list[Event]:
    """One schedule's events through Structured Streaming; its directories removed afterwards."""
    from flink_semantics.adapters.pyspark.runtime import scratch_dir

    base = Path(root) if root is not None else scratch_dir("mb-stream-")
    try:
        return list(StreamRun(spark, [schedule], base, steps_per_batch, partitions).run()[0].events)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------
# The same without Spark
# --------------------------------------------------------------------------


def run_in_process(schedules: Sequence[Schedule],
                   steps_per_batch: int | None = STEPS_PER_BATCH) -> list[Trace]:
    """The same rounds, micro-batches and stages without Spark: stage 1's state per schedule and
    round, stage 2's per (schedule, key) carried across micro-batches, taken at each checkpoint's
    batch and given to the round that restores it."""
    refused = {sid: refusal(Settings(**asdict(s.config))) for sid, s in enumerate(schedules)}
    runnable = [(sid, s) for sid, s in enumerate(schedules) if refused[sid] is None]
    settings = {sid: config_of(s).settings() for sid, s in runnable}
    taken: dict[tuple[int, int], dict[int, Acc]] = {}
    rows: dict[int, list[dict[str, Any]]] = {sid: [] for sid in range(len(schedules))}
    names = ["seq", "n", "kpos", "sub", "type", "key", "op", "count", "sum", "min", "max", "ts", "idle"]
    for round_ in rounds(runnable):
        if not round_:
            continue
        plan = layout(round_, steps_per_batch)
        accs: dict[tuple[int, int], Acc] = {}
        for inc in round_:
            if inc.restore is not None:
                accs.update({(inc.sid, k): a.copy() for k, a in taken[(inc.sid, inc.restore)].items()})
        jobs: dict[int, str] = {}
        for b, batch in enumerate(plan.batches):
            lanes: dict[tuple[int, int | None], list[tuple[Any, ...]]] = {}
            for sid in sorted({r[0] for r in batch}):
                mine = [r[1:] for r in batch if r[0] == sid]
                jobs[sid], mid = stage_one(settings[sid], jobs.get(sid), mine)
                for m in mid:
                    lanes.setdefault((sid, MARKERS if m[11] else m[5]), []).append(m)
            for (sid, key), lane in lanes.items():
                before = accs.get((sid, key)) if key is not MARKERS else None
                after, out = stage_two(settings[sid], key, before, lane)
                if key is not MARKERS:
                    if after is None:
                        accs.pop((sid, key), None)
                    else:
                        accs[(sid, key)] = after
                rows[sid] += [dict(zip(names, o)) for o in out]
            for (sid, cid), at in plan.checkpoints.items():
                if at == b:
                    taken[(sid, cid)] = {k: a.copy() for (s, k), a in accs.items() if s == sid}
    return [Trace((rejected(refused[sid]),)) if refused[sid] is not None
            else Trace(tuple(events_of(rows[sid]))) for sid in range(len(schedules))]
