"""Async I/O on Structured Streaming: schedules of spec/async-io.md through `async_map` in a
streaming query, many schedules per query.

The mapping:

* **The input** is a streaming DataFrame from a Python data source (`flink_async_io_script`, the
  `ScriptSource` below) reading a script file the driver writes: for every schedule (its id `sid`)
  its input steps as rows `(group, kind, ts, value, at)`: a `record` step a row of kind "R" (value
  "sid:record"), a `watermark` step a row of kind "W", a `status` step a row of kind "S" (async_map's
  in-band statuses, `ts` 1 idle), an `end` step a row of kind "E", a `crash` step a row of kind "X"
  (async_map's stop: the operator stops at once, AIO-58); `at` is the step's instant (below).  Each
  micro-batch (offset `{"batch": i}`) is spread over `PARTITIONS` input partitions
  (`FAULT_PARTITIONS` in a fault run); `mapInArrow` is narrow, so each partition is one task, and
  `async_map(group_col=...)` gives every schedule an operator of its own in that task, with its own
  configuration (`group_config`).
* **Checkpoints** (AIO-44): a schedule's `checkpoint` step ends its segment: the segment is one
  micro-batch, and the checkpoint is that micro-batch's commit in Spark's commit log (the trace's
  `checkpoint` event is reported only for a micro-batch the commit log holds).  In a streaming query
  async_map's task ends only when its queue is empty, so the micro-batch commits with nothing in
  flight: the snapshot is always empty, and the commit comes after the calls that were in flight
  completed (their events come before the `checkpoint` event).  Micro-batch j of a query carries
  segment j of every schedule; each segment is an operator (group `sid * SEGMENTS + segment`) whose
  records are numbered from the segment's first record.
* **Crash and restore**: a `crash` step (or a failure) ends the schedule's incarnation; a query runs
  one incarnation of every schedule (a round), and is really stopped at its end.  The next round's
  query (the incarnations from a `restore` step on) is started from a copy of the previous round's
  checkpoint location as it was when the round's last micro-batch carrying a checkpoint step
  committed (Spark's offset and commit logs cut after it: a restore of that checkpoint), or as the
  round started if it had none.  Nothing else is kept: the query holds no state, so a restore of
  any checkpoint (or of none) restores an empty queue, with the `restore` step's capacity (AIO-57).
* **Virtual time**: every task runs on `virtual_time_loop` (async_map's `loop_factory`): an asyncio
  loop whose clock jumps to the next timer when idle.  Step i of a schedule happens at the instant
  `ms_i + (i + 1) * delta` milliseconds, where `ms_i` is the schedule's processing time after step i
  (the sum of its `advance` steps) and `delta` is small enough that all steps of a schedule fit in
  half a millisecond: instants increase step by step, and a timer (timeout, retry) that the
  schedule's clock reaches at an `advance` step falls between that step's and the previous step's
  instant.  An input row enters its operator at its step's instant (`arrival_col="at"`).
* **The function** is the scripted service of spec/schedules.md (execution model 6): a call of
  record r made at time t completes at the first `complete` / `error` step of r whose instant is
  after t, with that step's result (a `null` result returns None; an `error` raises).  So every call
  completes exactly when the schedule says.  A call the schedule never completes returns [] after
  the schedule's last step, and the input of a schedule's last incarnation without an `end` step
  ends there too (an "E" row): what happens after the last step is not part of the trace and is
  dropped.
* **The trace** comes from the query's output with `audit=True` (async_map's rows of results,
  watermarks, calls, timeouts, failures and end of input, each with its loop time `at`): an event
  at time t belongs to the first step whose instant is not before t.
* **A failure** (AIO-23) is `on_failure="report"`: the schedule's operator stops at once (AIO-58)
  and reports it, while the other schedules of the task go on.
* **Refused configurations** (AIO-1, AIO-3): async_map's `operator_config` raises ValueError
  before any query runs; the trace is `rejected`.

Rules Spark's model cannot follow are listed in stream-expected-failures.json with Spark's reason.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark import chaos
from flink_semantics.adapters.pyspark.async_io.api import (
    async_map,
    operator_config,
    retry_strategy,
    virtual_time_loop,
)
from flink_semantics.adapters.pyspark.async_io.operator import OperatorConfig
from flink_semantics.adapters.pyspark.session import query_conf
from flink_semantics.spec.areas.async_io import (
    AdvanceStep,
    AsyncIoConfig,
    CheckpointStep,
    CompleteStep,
    CrashStep,
    EndStep,
    ErrorStep,
    RecordStep,
    RestoreStep,
    StatusStep,
    WatermarkStep,
    event,
    retry_enabled,
)
from flink_semantics.spec.schedule import Event, Schedule, Trace, rejected

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pyspark missing: the module still imports (the adapter reports it)
    DataSource = DataSourceStreamReader = InputPartition = SupportsTriggerAvailableNow = object  # type: ignore

FORMAT = "flink_async_io_script"
PARTITIONS = 2  # one task per core of the 2-core machine: more tasks cost more than they overlap
# A fault run (chaos.py armed) spreads each micro-batch over more partitions: more source tasks to
# fail, each a new operator per schedule in it (no schedule's trace depends on its partition).
FAULT_PARTITIONS = 4
SPAN_MS = 0.5  # all step instants of a schedule lie within this many ms of their processing time
SEGMENTS = 1024  # an operator's group id: sid * SEGMENTS + the schedule's segment number

# A fault run's calls (streaming.py): sized for >= 1,000 task failures at 36 examples (issue 31):
# calls of 60 schedules met 972 failures and 12 restarts in the whole run (2026-11-27), so 30.
FAULT_CALL_SIZE = 30

STREAM_UNSUPPORTED: dict[str, str] = {}

Row = tuple[str, int | None, str, float]  # (kind, ts, value, at seconds)


# --------------------------------------------------------------------------
# A schedule's instants, segments and script
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """The input of one micro-batch for one schedule: its rows, the records before them (the
    operator of a micro-batch numbers its records from 0), the capacity of the incarnation (a
    restore step's, AIO-57; None: the configured one) and the checkpoint step that ends it
    (step index, checkpoint id), if any."""

    rows: tuple[Row, ...]
    records_before: int
    capacity: int | None
    checkpoint: tuple[int, int] | None


@dataclass(frozen=True)
class Plan:
    """A schedule's step instants (ms), incarnations (each a list of segments, one per micro-batch of
    its round's query) and its function's script."""

    instants: tuple[float, ...]
    incarnations: tuple[tuple[Segment, ...], ...]
    # record -> ((at seconds, result or None, error message or None), ...) in step order
    script: Mapping[int, tuple[tuple[float, tuple[int, ...] | None, str | None], ...]]
    horizon: float  # seconds: after the last step

    @property
    def delta(self) -> float:
        return SPAN_MS / (len(self.instants) + 2)


class _Splitter:
    """Cuts a schedule's input rows into segments (at `checkpoint` steps: a committed micro-batch)
    and incarnations (at `crash` and `restore` steps: a query stopped and started again)."""

    def __init__(self) -> None:
        self.incarnations: list[list[Segment]] = []
        self.segments: list[Segment] = []
        self.rows: list[Row] = []
        self.capacity: int | None = None
        self.records_before = 0
        self.records = 0

    def segment(self, checkpoint: tuple[int, int] | None) -> None:
        if self.rows or checkpoint is not None:
            self.segments.append(Segment(tuple(self.rows), self.records_before, self.capacity, checkpoint))
        self.rows, self.records_before = [], self.records

    def incarnation(self) -> None:
        self.segment(None)
        if self.segments:
            self.incarnations.append(self.segments)
        self.segments = []


def plan(sid: int, schedule: Schedule) -> Plan:
    """The schedule's instants, segments and script.  With retry on, a `null` completion is no
    completion: the retrying future refuses null at the call and the call stays outstanding (AIO-20),
    which a coroutine can only show by not returning then."""
    steps = schedule.steps
    refuses_null = retry_enabled(schedule.config)
    delta = SPAN_MS / (len(steps) + 2)
    ms = 0
    instants: list[float] = []
    cut = _Splitter()
    script: dict[int, list[tuple[float, tuple[int, ...] | None, str | None]]] = {}
    ended = False  # an `end` step in the current incarnation
    for i, s in enumerate(steps):
        if isinstance(s, AdvanceStep):
            ms += s.ms
        at_ms = ms + (i + 1) * delta
        instants.append(at_ms)
        at = at_ms / 1000.0
        if isinstance(s, RecordStep):
            cut.rows.append(("R", s.timestamp, f"{sid}:{cut.records}", at))
            cut.records += 1
        elif isinstance(s, WatermarkStep):
            cut.rows.append(("W", s.timestamp, "", at))
        elif isinstance(s, StatusStep):
            cut.rows.append(("S", 1 if s.idle else 0, "", at))
        elif isinstance(s, EndStep):
            cut.rows.append(("E", None, "", at))
            ended = True
        elif isinstance(s, CheckpointStep):
            cut.segment((i, s.id))  # AIO-44: a checkpoint is the commit of the micro-batch up to here
        elif isinstance(s, CrashStep):
            cut.rows.append(("X", None, "", at))  # AIO-58: the operator stops at once
            cut.incarnation()  # then the query stops
        elif isinstance(s, RestoreStep):
            cut.incarnation()  # (after a failure: the failed operator is stopped already)
            cut.capacity, ended = s.capacity, False  # AIO-57
        elif isinstance(s, CompleteStep) and not (s.result is None and refuses_null):
            script.setdefault(s.record, []).append((at, None if s.result is None else tuple(s.result), None))
        elif isinstance(s, ErrorStep):
            script.setdefault(s.record, []).append((at, None, s.message))
    last = instants[-1] if instants else 0.0
    horizon = (last + delta / 2) / 1000.0
    if not ended and (cut.rows or cut.segments):
        cut.rows.append(("E", None, "", horizon))  # the input ends after the schedule's last step
    cut.incarnation()
    return Plan(tuple(instants), tuple(tuple(x) for x in cut.incarnations),
                {r: tuple(v) for r, v in script.items()}, horizon)


async def scripted_service(value: str, *, scripts: Mapping[int, Mapping[int, Any]],
                           horizons: Mapping[int, float], tolerance: float = 1e-9) -> list[int] | None:
    """The scripted service (execution model 6): the call completes at the first completion step of
    its record after the call, as that step says; a call never completed returns [] at the horizon."""
    sid, record = (int(x) for x in value.split(":"))  # (the group is sid * SEGMENTS + segment)
    loop = asyncio.get_running_loop()
    now = loop.time()
    later = [c for c in scripts[sid].get(record, ()) if c[0] > now + tolerance]
    at, result, message = later[0] if later else (max(now, horizons[sid]), (), None)
    if at > now:
        fut = loop.create_future()
        loop.call_at(at, _resolve, fut)
        await fut
    if message is not None:
        raise RuntimeError(message)
    return None if result is None else list(result)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def config_of(c: AsyncIoConfig) -> OperatorConfig:
    """The schedule's configuration through async_map's own builders (ValueError: AIO-1, AIO-3)."""
    retry = None
    if c.retry is not None:
        r = c.retry
        if r.strategy == "fixed_delay":
            retry = retry_strategy(r.max_attempts, delay=r.delay / 1000, on_empty=r.if_empty,
                                   on_error=r.if_error)
        else:
            retry = retry_strategy(r.max_attempts, initial_delay=r.initial_delay / 1000,
                                   max_delay=r.max_delay / 1000, multiplier=r.multiplier,
                                   on_empty=r.if_empty, on_error=r.if_error)
    on_timeout: Any = list(c.timeout_result) if c.on_timeout == "complete" else c.on_timeout
    return operator_config(capacity=c.capacity, ordered=c.mode == "ordered",
                           timeout=c.timeout / 1000 if c.timeout > 0 else None,
                           on_timeout=on_timeout, retry=retry)


def _config_for(gid: int, *, configs: Mapping[int, OperatorConfig]) -> OperatorConfig:
    return configs[gid]


# --------------------------------------------------------------------------
# The source
# --------------------------------------------------------------------------


def source_schema() -> Any:
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    return StructType([StructField("sid", LongType()), StructField("kind", StringType()),
                       StructField("ts", LongType()), StructField("value", StringType()),
                       StructField("at", DoubleType())])


@dataclass
class ScriptPartition(InputPartition):  # type: ignore[misc,valid-type]
    rows: list[list[Any]]


def read_script(path: str) -> tuple[int, list[list[list[list[Any]]]]]:
    """The script: the offset of its first micro-batch, and its micro-batches, each a list of
    partitions, each a list of rows."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return int(data["first"]), list(data["batches"])


class ScriptSource(DataSource):  # type: ignore[misc,valid-type]
    """`spark.readStream.format("flink_async_io_script").option("script", path).load()`: the
    script's micro-batches, each with its partitions (option `root`: the run's directory, for
    chaos.py's task failures)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> Any:
        return source_schema()

    def streamReader(self, schema: Any) -> ScriptReader:
        return ScriptReader(self.options)


class ScriptReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,valid-type]
    """Offsets `{"batch": i}`: the micro-batches up to i delivered; one per micro-batch.  A query
    restarted from a checkpoint resumes after the offset committed there: the script of the new
    query starts at the next offset (`first`)."""

    def __init__(self, options: Mapping[str, str]):
        self.path = options["script"]
        self.root = options.get("root", "")

    def initialOffset(self) -> dict[str, int]:
        return {"batch": -1}

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # what the script holds is available now

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        first, batches = read_script(self.path)
        current = (start or self.initialOffset())["batch"]
        return {"batch": current + 1} if first <= current + 1 < first + len(batches) else {"batch": current}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
        first, batches = read_script(self.path)
        chosen = batches[start["batch"] + 1 - first:end["batch"] + 1 - first]
        return [ScriptPartition(part) for b in chosen for part in b]

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        for r in chaos.partly_read(partition.rows, self.root, "async_io/source"):
            yield tuple(r)

    def commit(self, end: dict[str, int]) -> None:
        pass


# --------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------


def events_of(p: Plan, rows: Sequence[Mapping[str, Any]], records_before: int = 0) -> list[Event]:
    """async_map's audit rows of one operator (in output order) as trace events."""
    tolerance = p.delta / 10
    out: list[Event] = []
    for r in rows:
        ms = r["at"] * 1000.0
        step = bisect.bisect_left(p.instants, ms - tolerance)
        if step >= len(p.instants):
            continue  # after the schedule's last step
        kind = r["kind"]
        seq = None if r["seq"] is None else r["seq"] + records_before
        if kind == "R":
            out.append(event(step, "emit", record=seq, value=r["value"], timestamp=r["ts"]))
        elif kind == "W":
            out.append(event(step, "watermark", timestamp=r["ts"]))
        elif kind == "S":
            out.append(event(step, "status", idle=bool(r["ts"])))
        elif kind == "I":
            out.append(event(step, "invoke", record=seq, attempt=r["attempt"]))
        elif kind == "T":
            out.append(event(step, "timeout", record=seq))
        elif kind == "F":
            out.append(event(step, "fail", record=seq, reason=r["reason"]))
        elif kind == "E":
            out.append(event(step, "finished"))
    return out


# --------------------------------------------------------------------------
# run_many
# --------------------------------------------------------------------------


def _write(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def run_many(spark: Any, schedules: Sequence[Schedule], root: Path, partitions: int | None = None
             ) -> list[Trace]:
    """The traces of a batch of async I/O schedules, all of them through `async_map` in streaming
    queries: one query per round of incarnations (every schedule's first incarnation in the first
    query; after its `crash` or failure, its incarnation from the `restore` on in the next query,
    started from a copy of the previous query's checkpoint location); each query one micro-batch per
    segment (a schedule's `checkpoint` is the commit of the micro-batch its segment ends in, AIO-44),
    each schedule's segment an operator of its own (`group_col`); each micro-batch over `partitions`
    input partitions (default PARTITIONS, FAULT_PARTITIONS in an armed fault run)."""
    if partitions is None:
        partitions = FAULT_PARTITIONS if chaos.armed(root) else PARTITIONS
    traces: dict[int, Trace] = {}
    configs: dict[int, OperatorConfig] = {}
    plans: dict[int, Plan] = {}
    for sid, s in enumerate(schedules):
        try:
            base = config_of(s.config)  # AIO-1, AIO-3: refused before any query
            p = plan(sid, s)
            for gid, seg in _groups(sid, p):
                configs[gid] = base if seg.capacity is None else replace(base, capacity=seg.capacity)
                configs[gid].validate()  # AIO-1: a restore's capacity
        except ValueError as e:
            traces[sid] = Trace((rejected(str(e)),))
            continue
        plans[sid] = p
    events: dict[int, list[Event]] = {sid: [] for sid in plans}
    location: Path | None = None
    first = 0
    rounds = max((len(p.incarnations) for p in plans.values()), default=0)
    for k in range(rounds):
        chosen = {sid: p for sid, p in plans.items() if k < len(p.incarnations)}
        if k > 0:
            chaos.query_restarted(root, "async_io/restore")
        location, first = _restore_copy(root, k, location, first, chosen)
        rows, committed = _run_round(spark, k, first, chosen, configs, location, root, partitions)
        for sid, p in chosen.items():
            for j, seg in enumerate(p.incarnations[k]):
                gid = _gid(sid, p, k, j)
                events[sid] += events_of(p, rows.get(gid, []), seg.records_before)
                if seg.checkpoint is not None and first + j in committed:
                    step, cid = seg.checkpoint
                    # AIO-44: Spark's checkpoint holds no element of the queue (nothing in flight)
                    events[sid].append(event(step, "checkpoint", id=cid, snapshot=[]))
        first = _last_checkpoint_batch(first, chosen, k, committed)
    for sid, evs in events.items():
        traces[sid] = Trace(tuple(evs))
    return [traces[i] for i in range(len(schedules))]


def _gid(sid: int, p: Plan, k: int, j: int) -> int:
    return sid * SEGMENTS + sum(len(x) for x in p.incarnations[:k]) + j


def _groups(sid: int, p: Plan) -> Iterator[tuple[int, Segment]]:
    for k, inc in enumerate(p.incarnations):
        for j, seg in enumerate(inc):
            yield _gid(sid, p, k, j), seg


def _last_checkpoint_batch(first: int, chosen: Mapping[int, Plan], k: int, committed: set[int]) -> int:
    """The offset after which the next round resumes: the last committed micro-batch of this round
    that carries a checkpoint step (none: where this round started)."""
    ends = [first + j for p in chosen.values() for j, seg in enumerate(p.incarnations[k])
            if seg.checkpoint is not None and first + j in committed]
    return max(ends) + 1 if ends else first


def _restore_copy(root: Path, k: int, previous: Path | None, first: int, chosen: Mapping[int, Plan]
                  ) -> tuple[Path, int]:
    """The checkpoint location of round k: a fresh one for the first round; then a copy of the
    previous round's location as it was when the micro-batch before `first` committed (Spark's
    offset and commit logs cut after it: a restore of that checkpoint)."""
    location = root / f"checkpoint-{k}"
    if previous is None:
        return location, 0
    shutil.copytree(previous, location)
    for log in ("offsets", "commits"):
        for f in (location / log).iterdir():
            name = f.name.lstrip(".").removesuffix(".crc")
            if name.isdigit() and int(name) >= first:
                f.unlink()
    return location, first


def _write_batch(df: Any, batch_id: int, *, sink: str) -> None:
    """foreachBatch: the micro-batch's rows to `<sink>/<batch>.json` (a batch run again overwrites)."""
    path = Path(sink)
    path.mkdir(parents=True, exist_ok=True)
    _write(path / f"{batch_id:06d}.json", [r.asDict() for r in df.collect()])


def _run_round(spark: Any, k: int, first: int, plans: Mapping[int, Plan],
               configs: Mapping[int, OperatorConfig], location: Path, root: Path, partitions: int
               ) -> tuple[dict[int, list[dict[str, Any]]], set[int]]:
    """One query: micro-batch j holds segment j of every schedule's incarnation k.  The output rows
    by operator group, and the micro-batches (offsets) in the commit log."""
    width = max(len(p.incarnations[k]) for p in plans.values())
    n = min(partitions, len(plans))
    batches: list[list[list[list[Any]]]] = [[[] for _ in range(n)] for _ in range(width)]
    for i, (sid, p) in enumerate(plans.items()):
        for j, seg in enumerate(p.incarnations[k]):
            gid = _gid(sid, p, k, j)
            batches[j][i % n] += [[gid, kind, ts, value, at] for kind, ts, value, at in seg.rows]
    script = root / f"script-{k}.json"
    _write(script, {"first": first, "batches": batches})
    spark.dataSource.register(ScriptSource)
    src = spark.readStream.format(FORMAT).option("script", str(script)).option("root", str(root)).load()
    fn = functools.partial(scripted_service, scripts={sid: p.script for sid, p in plans.items()},
                           horizons={sid: p.horizon for sid, p in plans.items()})
    out = async_map(src, fn, value_col="value", kind_col="kind", ts_col="ts", group_col="sid",
                    group_config=functools.partial(_config_for, configs=dict(configs)),
                    arrival_col="at", loop_factory=virtual_time_loop, audit=True, on_failure="report")
    # Each micro-batch's output is written to a file of its own (overwritten if the batch runs again:
    # idempotent), a directory per query: a restored query runs batch ids again.
    sink = root / f"output-{k}"
    with query_conf(spark, {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        query = (out.writeStream.foreachBatch(functools.partial(_write_batch, sink=str(sink)))
                 .option("checkpointLocation", str(location)).trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    finally:
        query.stop()
    got = [r for f in sorted(sink.glob("*.json")) for r in json.loads(f.read_text(encoding="utf-8"))] \
        if sink.exists() else []
    by_gid: dict[int, list[dict[str, Any]]] = {}
    for r in got:
        by_gid.setdefault(r["sid"], []).append(r)
    commits = location / "commits"
    committed = {int(f.name) for f in commits.iterdir() if f.name.isdigit()} if commits.exists() else set()
    return by_gid, committed
