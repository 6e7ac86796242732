"""The watermarks area through `flink_watermarks` (api.py) in streaming queries: `run_many`, the
`pyspark-stream` adapter's face of the area (adapters/pyspark/streaming.py).

Many schedules run in one query.  Schedule i is stream `"i"` of the API: its steps become rows of
the source log (`seq` the step index, `op` the step's op), its configuration that stream's
`WatermarkStrategy`, so its source (readers, coordinator) and its valve are the group `stream = "i"`
of the API's one stateful operator, with its own state in Spark's state store.  The rows come from
Spark's JSON file source (the stand-in for a user's Kafka topic): the driver writes one file per
micro-batch, every row tagged with its schedule's stream, and `maxFilesPerTrigger` 1 makes each
file one micro-batch.  One shuffle partition: every stream in one task per micro-batch.

* **Micro-batches.**  Every schedule's steps of the first query are cut into `BATCHES_PER_QUERY`
  runs of consecutive steps (by step count: ticks and all); run j of every schedule is micro-batch j
  of the query, so all schedules advance in the same micro-batches and every stream's state crosses
  batch boundaries; a query after a failover is one micro-batch (it is the restart that matters).
  A tick's periodic emissions happen in the batch of the tick: processing time travels in band,
  never the wall clock.
* **Failover** (WM-16) is a real query restart from Spark's checkpoint.  Query q runs, for each
  schedule, its steps after its q-th `failover` (the failover step first) and before its next one;
  a schedule with fewer failovers has nothing in that query and is unaffected.  The query ends
  (`Trigger.AvailableNow`, all of its batches committed); the next one starts on the same
  checkpoint, its first batch beginning with the failover rows of the schedules failing there, so
  their sources and valves restart as Flink's do (WM-16) from the state Spark kept.
* **The trace** is downstream task 0's output (the API with `downstream=1`), in its order `idx`:
  every row is one event of the reference's trace, at step `seq`.  The sink is a parquet
  directory (its commit log makes it exactly once across the restarts).
* **Faults** (chaos.py): in a fault run, the API's `on_state_update` hook is `chaos.task_point` on
  the call's `root`, so that each stateful task may fail right after its first state update (Spark
  runs it again from the last committed state); the queries then have FAULT_PARTITIONS shuffle
  partitions, for more tasks to fail.  Each failover round's query restart is counted
  (`chaos.query_restarted`).

Nothing here is a path around the API: the feed only serves rows, and every event comes out of
`flink_watermarks`.  A configuration the spec refuses gives its `rejected` trace without running.
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark import chaos
from flink_semantics.adapters.pyspark.session import query_conf
from flink_semantics.adapters.pyspark.watermarks.api import OUTPUT_SCHEMA, WatermarkStrategy, flink_watermarks
from flink_semantics.spec.area import get_area
from flink_semantics.spec.areas.watermarks import FailoverStep, event
from flink_semantics.spec.schedule import (
    Event,
    Schedule,
    ScheduleError,
    Step,
    Trace,
    rejected,
    validate_schedule,
)

# Capability -> reason this face cannot run it: none (every step of the area runs).
STREAM_UNSUPPORTED: dict[str, str] = {}

FEED_SCHEMA = "stream string, seq long, op string, split int, reader int, ts long, ms long, value string"
FEED_COLUMNS = [f.split()[0] for f in FEED_SCHEMA.split(", ")]
FEED_EPOCH = 1_700_000_000  # the feed files' modification times: their order
BATCHES_PER_QUERY = 2
QUERY_TIMEOUT_S = 1200
# One shuffle partition: every stream's group in one task per micro-batch (a task's fixed cost is
# most of a small batch's).  A fault run (chaos.py) uses FAULT_PARTITIONS, so that there are more
# tasks to fail: the semantics do not depend on how the streams are spread over tasks.
FAULT_PARTITIONS = 16
QUERY_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}


# --------------------------------------------------------------------------
# Schedules as source logs
# --------------------------------------------------------------------------


def log_row(stream: str, seq: int, s: Step) -> list[Any]:
    """A step as a row of FEED_SCHEMA (the API's source log)."""
    f = asdict(s)
    return [stream, seq, s.op, f.get("split", -1), f.get("reader", -1), f.get("ts", 0), f.get("ms", 0), None]


def segments(schedule: Schedule) -> list[list[int]]:
    """The step indices each query runs: the steps before the first failover, then from each
    failover to the next."""
    out: list[list[int]] = [[]]
    for i, s in enumerate(schedule.steps):
        if isinstance(s, FailoverStep):
            out.append([])
        out[-1].append(i)
    return out


def refusal(schedule: Schedule) -> Trace | None:
    """The `rejected` trace of a configuration the spec refuses (as the reference gives it)."""
    try:
        validate_schedule(schedule)
    except ScheduleError as e:
        if e.step is None and e.rule in get_area(schedule.area).rejecting_rules:
            return Trace((rejected(f"{e.rule}: {e.message}"),))
        raise
    return None


def strategy(schedule: Schedule) -> WatermarkStrategy:
    return WatermarkStrategy(**asdict(schedule.config))


def write_query_feed(feed: Path, first_batch: int, schedules: Mapping[str, Schedule], query: int) -> int:
    """Query `query`'s micro-batches as feed files `<batch>.json` (JSON lines of FEED_SCHEMA) from
    `first_batch` on, each file one micro-batch (`maxFilesPerTrigger` 1, in the order of their
    modification times, set one second apart); the number written.  The first query cuts every
    schedule's steps into BATCHES_PER_QUERY micro-batches; a query after a failover runs in one."""
    cuts = BATCHES_PER_QUERY if query == 0 else 1
    batches: list[list[list[Any]]] = [[] for _ in range(cuts)]
    for sid, s in schedules.items():
        segs = segments(s)
        if query >= len(segs):
            continue
        steps = segs[query]
        n = len(steps)
        for j in range(cuts):
            batches[j].extend(log_row(sid, i, s.steps[i]) for i in steps[j * n // cuts:(j + 1) * n // cuts])
    written = 0
    for rows in batches:
        if not rows:
            continue
        path = Path(feed, f"{first_batch + written:06d}.json")
        tmp = Path(feed.parent, path.name)
        tmp.write_text("".join(json.dumps(dict(zip(FEED_COLUMNS, r))) + "\n" for r in rows))
        stamp = FEED_EPOCH + first_batch + written
        os.utime(tmp, (stamp, stamp))
        tmp.replace(path)
        written += 1
    return written


def to_event(r: Mapping[str, Any]) -> Event:
    """A row of the API's output as the reference's trace event."""
    kind, step = r["kind"], r["seq"]
    if kind == "record":
        return event(step, kind, split=r["split"], ts=r["ts"])
    if kind == "watermark":
        return event(step, kind, reader=r["reader"], value=r["watermark"])
    if kind == "status":
        return event(step, kind, reader=r["reader"], idle=r["idle"])
    if kind in ("output_watermark", "max_allowed"):
        return event(step, kind, value=r["watermark"])
    if kind == "output_status":
        return event(step, kind, idle=r["idle"])
    if kind in ("split_finished", "paused", "resumed"):
        return event(step, kind, split=r["split"])
    if kind in ("blocked", "unblocked"):
        return event(step, kind, reader=r["reader"])
    if kind == "restarted":
        return event(step, kind)
    raise ValueError(f"unknown output row {kind!r}")


# --------------------------------------------------------------------------
# The batch
# --------------------------------------------------------------------------


def _query(spark: Any, feed: Path, strategies: Mapping[str, WatermarkStrategy], sink: Path,
           checkpoint: Path, faults: str | None) -> Any:
    src = spark.readStream.schema(FEED_SCHEMA).option("maxFilesPerTrigger", 1).json(str(feed))
    hook = None if faults is None else functools.partial(chaos.task_point, faults, "watermarks stream state")
    out = flink_watermarks(src, strategies, stream="stream", downstream=1, on_state_update=hook)
    return (out.writeStream.format("parquet").option("path", str(sink))
            .option("checkpointLocation", str(checkpoint)).queryName(f"wm_many_{uuid.uuid4().hex}")
            .outputMode("append").trigger(availableNow=True).start())


def run_queries(spark: Any, schedules: Mapping[str, Schedule], root: Path,
                stats: dict[str, float] | None = None) -> dict[str, list[Event]]:
    """All the schedules through the API: one query, and one more per round of failovers, on one
    checkpoint; the events of each stream in its valve's order.  `stats`, if given, gets where the
    time went (`measure`)."""
    stats = {} if stats is None else stats
    clock = time.monotonic()
    feed, sink, checkpoint = root / "feed", root / "output", root / "checkpoint"
    feed.mkdir()
    strategies = {sid: strategy(s) for sid, s in schedules.items()}
    queries = max((len(segments(s)) for s in schedules.values()), default=0)
    faults = chaos.armed(root)
    conf = dict(QUERY_CONF)
    if faults is not None:
        conf["spark.sql.shuffle.partitions"] = str(FAULT_PARTITIONS)
    batch = 0
    with query_conf(spark, conf):
        for q in range(queries):
            batch += write_query_feed(feed, batch, schedules, q)
            if q > 0:
                chaos.query_restarted(root, "failover")
            query = _query(spark, feed, strategies, sink, checkpoint, faults)
            if not query.awaitTermination(QUERY_TIMEOUT_S):
                query.stop()
                raise TimeoutError(f"the query did not finish within {QUERY_TIMEOUT_S} s")
            measure(stats, query.recentProgress)
    stats["queries"] = stats.get("queries", 0) + queries
    stats["run_s"] = stats.get("run_s", 0) + time.monotonic() - clock
    clock = time.monotonic()
    events: dict[str, list[Event]] = {sid: [] for sid in schedules}
    if not sink.exists():
        return events
    # The sink's files as its commit log lists them; one downstream task (target 0); sorted here
    # (a few thousand rows: a Spark sort would be one more stage).
    table = spark.read.schema(OUTPUT_SCHEMA).parquet(str(sink)).toArrow()
    for r in sorted(table.to_pylist(), key=lambda r: (r["stream"], r["idx"])):
        events[r["stream"]].append(to_event(r))
    stats["read_s"] = stats.get("read_s", 0) + time.monotonic() - clock
    return events


def measure(stats: dict[str, float], progress: Sequence[Any]) -> None:
    """Add a query's micro-batches and their phases (Spark's `durationMs`, in seconds) to `stats`."""
    for p in progress:
        if p["numInputRows"] == 0 and not p["stateOperators"]:
            continue
        stats["batches"] = stats.get("batches", 0) + 1
        if os.environ.get("WM_DEBUG"):
            print(p["batchId"], p["numInputRows"], p["durationMs"])
        for phase, ms in p["durationMs"].items():
            stats[f"{phase}_s"] = stats.get(f"{phase}_s", 0) + ms / 1000


def run_many(spark: Any, schedules: Sequence[Schedule], root: Path,
             stats: dict[str, float] | None = None) -> list[Trace]:
    """The traces of a batch of watermarks schedules, in order, through `flink_watermarks` in
    streaming queries (module docstring); `stats` as in `run_queries`."""
    traces: dict[int, Trace] = {}
    live: dict[str, Schedule] = {}
    for i, s in enumerate(schedules):
        if s.area != "watermarks":
            raise ValueError(f"not a watermarks schedule: area {s.area!r}")
        refused = refusal(s)
        if refused is not None:
            traces[i] = refused
        else:
            live[str(i)] = s
    if live:
        for sid, events in run_queries(spark, live, Path(root), stats).items():
            traces[int(sid)] = Trace(tuple(events))
    return [traces[i] for i in range(len(schedules))]
