"""Spark's own watermark on the schedules of the watermarks area (spec/watermarks.md).

Not an implementation of the spec: a measurement of Spark.  Each schedule runs as one Structured
Streaming query with nothing of Flink's in it, and what Spark does is written in the area's trace
vocabulary, so that the suite can say rule by rule where Spark's one global watermark per
micro-batch keeps Flink's rules and where it does not (expected-failures.json says why).

The query (pyspark-notes section 3):

* **reader r** is an input stream of its own: a file source on `<dir>/in/r<r>/`, one JSON file per
  record, with `withWatermark("event_time", "<bound + 1> milliseconds")`, so that Spark's
  `max(event_time) - delay` is Flink's `max ts - D - 1` (WM-2).  A reader's splits are rows of its
  stream with a `split` column: Spark has one watermark per stream, not per split;
* **the valve** is Spark's global watermark: the streams are unioned and
  `spark.sql.streaming.multipleWatermarkPolicy=min` combines their watermarks;
* **the event-time aggregation** after the union, `groupBy(window(event_time, 1 ms), reader, split,
  seq).count()` in update mode into Spark's `noop` sink, is the stateful operator that makes Spark apply
  the watermark (it drops rows behind it and evicts state) and run a no-data batch as soon as the
  watermark moves;
* **time**: a micro-batch runs when input arrives (Spark's default trigger, input slower than
  batches): after each `record` step the adapter waits for Spark to process everything available
  (`processAllAvailable`).  `tick` steps move no Spark clock: Spark has no periodic watermark, no
  idleness, and processing-time triggers only decide when a batch runs;
* **failover** stops the query and starts it again from its checkpoint directory;
* **end** stops the query: a stream that has ended changes nothing in Spark's watermark.

What the trace shows, read from the query's progress after each batch:

* `record`: the rows each stream read in the batch, observed before the watermark operator with
  `DataFrame.observe` (in the order of the steps that made them available);
* `watermark r v`: stream r's own watermark, as Spark's WatermarkTracker keeps it per
  `withWatermark` operator: `max(event_time) - delay` over the batches of this query run, kept
  only when higher.  Spark does not publish it; the adapter computes it from the maximum event
  time of stream r that Spark reports for each batch (observed metrics), by Spark's formula;
* `output_watermark v`: the global watermark in the progress of the batch that uses it, when it
  rose;
* `split_finished s`: the source's own record of a split's end (Spark's watermark ignores it);
* `restarted` at a failover.  No `status`, `output_status`, `max_allowed`, `blocked` or `paused`:
  Spark has no watermark status and no alignment.

Event times are shifted by OFFSET milliseconds inside Spark and back in the trace: Spark's global
watermark starts at 0 (the epoch) and takes an operator without data as 0, so timestamps near 0
would hide behind it; shifted, Spark's 0 means what Flink's MIN means, no watermark yet.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from flink_semantics.spec.area import get_area
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
from flink_semantics.spec.schedule import Event, Schedule, Step

AREA = "watermarks"
OFFSET = 10**9  # ms: about eleven days after the epoch
INPUT_SCHEMA = "seq long, split long, ts long"

CAPABILITIES: dict[str, str | None] = {
    "watermarks.channels": None,  # several input streams under the min policy
    "watermarks.punctuated": None,  # run as they are: Spark's watermark has one form
    "watermarks.idleness": None,  # run as they are: Spark has no idleness
    "watermarks.failover": None,  # a query restart from its checkpoint
    "watermarks.alignment": "Spark Structured Streaming has no watermark alignment: no source or split is "
                            "paused by event time (FLIP-182 and FLIP-217 have no counterpart)",
}

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _millis(iso: str) -> int:
    """Spark's progress writes the watermark as an ISO-8601 UTC instant."""
    t = datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (t - _EPOCH) // datetime.timedelta(milliseconds=1)


def _plain(x: Any) -> Any:
    """An observed metric as plain dicts and lists.  Classic PySpark gives Rows (their structs as
    dicts); a Connect client gives each row as Spark's JSON form {"values": [...], "schema": {...}}."""
    if hasattr(x, "asDict"):
        x = x.asDict()
    if isinstance(x, dict) and set(x) == {"values", "schema"}:
        names = [f["name"] for f in x["schema"]["fields"]]
        return {n: _plain(v) for n, v in zip(names, x["values"])}
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


class NativeRun:
    """One schedule as one streaming query; `run()` gives the trace's events."""

    def __init__(self, spark: Any, schedule: Schedule, root: Path):
        self.spark = spark
        self.config: WatermarksConfig = schedule.config
        self.steps = schedule.steps
        self.kinds = get_area(AREA).event_kinds
        self.name = "wm_" + uuid.uuid4().hex[:12]
        self.root = root / self.name
        self.query: Any = None
        self.events: list[Event] = []
        self.step = 0
        self.seq = 0
        self.reader_of: dict[int, int] = {}
        self.finished: set[int] = set()
        self.last_batch = -1
        self.stream_watermark: dict[int, int] = {}  # WatermarkTracker's per-operator map, this run
        self.global_watermark = 0  # Spark's (shifted), restored from the checkpoint on restart

    def emit(self, kind: str, *data: Any) -> None:
        self.events.append(Event(self.step, kind, tuple(data), self.kinds[kind]))

    # ---- the query -------------------------------------------------------------------

    def _start(self) -> None:
        from flink_semantics.adapters.pyspark.session import is_connect

        if is_connect(self.spark):  # a Connect client next to a classic session needs its own functions
            from pyspark.sql.connect import functions as F
        else:
            from pyspark.sql import functions as F  # type: ignore[no-redef]

        delay = f"{self.config.bound + 1} milliseconds"
        streams = []
        for r in range(self.config.readers):
            path = self.root / "in" / f"r{r}"
            path.mkdir(parents=True, exist_ok=True)
            df = (self.spark.readStream.schema(INPUT_SCHEMA).json(str(path))
                  .withColumn("reader", F.lit(r))
                  .withColumn("event_time", F.timestamp_millis(F.col("ts") + OFFSET))
                  .observe(f"{self.name}_r{r}", F.max("ts").alias("max_ts"),
                           F.collect_list(F.struct("seq", "split", "ts")).alias("rows"))
                  .withWatermark("event_time", delay))
            streams.append(df)
        union = streams[0]
        for df in streams[1:]:
            union = union.unionByName(df)
        counts = union.groupBy(F.window("event_time", "1 millisecond"), "reader", "split", "seq").count()
        self.query = (counts.writeStream.outputMode("update").format("noop").queryName(self.name)
                      .option("checkpointLocation", str(self.root / "checkpoint")).start())

    def _stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None

    def _feed(self, reader: int, split: int, ts: int) -> None:
        """One record for stream `reader`: a file of its own, moved in whole."""
        folder = self.root / "in" / f"r{reader}"
        tmp = self.root / f"{self.seq}.tmp"
        tmp.write_text(json.dumps({"seq": self.seq, "split": split, "ts": ts}) + "\n")
        os.replace(tmp, folder / f"{self.seq:06d}.json")
        self.seq += 1

    def _drain(self) -> None:
        """Let Spark run every batch the input calls for, then read what each batch did."""
        self.query.processAllAvailable()
        for p in self.query.recentProgress:
            used_iso = (p.eventTime or {}).get("watermark")
            if p.batchId <= self.last_batch or used_iso is None:  # seen, or a progress of no batch run
                continue
            self.last_batch = p.batchId
            used = _millis(used_iso)  # the global watermark this batch used
            if used > self.global_watermark:
                self.global_watermark = used
                self.emit("output_watermark", used - OFFSET)
            metrics = {k: _plain(v) for k, v in (p.observedMetrics or {}).items()}
            stream = [metrics.get(f"{self.name}_r{r}") or {} for r in range(self.config.readers)]
            rows = sorted((x["seq"], x["split"], x["ts"]) for m in stream for x in m.get("rows", []))
            for _, split, ts in rows:
                self.emit("record", split, ts)
            for r, m in enumerate(stream):
                top = m.get("max_ts")
                if top is None:  # no rows in this batch: the operator keeps its watermark
                    continue
                candidate = top - self.config.bound - 1
                if r not in self.stream_watermark or candidate > self.stream_watermark[r]:
                    self.stream_watermark[r] = candidate
                    self.emit("watermark", r, candidate)

    # ---- the steps -------------------------------------------------------------------

    def apply(self, s: Step) -> None:
        if isinstance(s, AddSplitStep):
            self.reader_of[s.split] = s.reader
        elif isinstance(s, RecordStep):
            self._feed(self.reader_of[s.split], s.split, s.ts)
            self._drain()
        elif isinstance(s, FinishSplitStep):
            self.finished.add(s.split)
            self.emit("split_finished", s.split)
        elif isinstance(s, TickStep):
            pass  # no Spark clock to move: batches run when input arrives
        elif isinstance(s, FailoverStep):
            self._stop()
            self.emit("restarted")
            self.stream_watermark = {}  # a new run builds a new WatermarkTracker
            self._start()
            self._drain()
        elif isinstance(s, EndStep):
            for split in sorted(self.reader_of):
                if split not in self.finished:
                    self.finished.add(split)
                    self.emit("split_finished", split)
            self._stop()
        elif isinstance(s, AlignStep):
            raise ValueError("spark-native: align steps need watermarks.alignment, which Spark lacks")
        else:
            raise ValueError(f"spark-native: unknown step {s.op!r}")

    def run(self) -> list[Event]:
        self._start()
        try:
            for i, s in enumerate(self.steps):
                self.step = i
                self.apply(s)
        finally:
            self._stop()
            shutil.rmtree(self.root, ignore_errors=True)
        return self.events
