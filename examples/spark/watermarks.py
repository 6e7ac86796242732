"""Flink's per-split watermarks, idleness and the downstream valve on your own Spark stream.

Three partitions of click events (think: a Kafka topic's `partition`, `offset`, `timestamp`),
arriving as JSON files; partition 1 lags ten seconds behind the others and
partition 2 goes quiet.  Spark's own `withWatermark` is one watermark per query, the maximum event
time seen minus a delay, so a fast partition makes a slow partition's events late.  With
`event_time_windows` each partition has its own bounded-out-of-orderness generator, each reader
takes the minimum over its partitions (WM-6), a partition silent for longer than `idleness` ms of
processing time goes idle and stops holding the others back (WM-13), the window operator's valve
combines the readers (WM-18, WM-19), and a ten-second window is emitted once, when that watermark
passes its end.  Processing time is Spark's own clock (a processing-time trigger).

The second part shows the watermark events themselves with `flink_watermarks`, on a source log
whose processing time is in the data (`tick` rows), so that its output does not depend on when
Spark runs.

    PYTHONPATH=. python examples/spark/watermarks.py

Runs in about a minute on a laptop (local Spark), prints the windows, the late row and the valve's
watermarks and checks them.  Temporary directories are removed.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark.watermarks.api import (
    ROCKSDB,
    WatermarkStrategy,
    event_time_windows,
    flink_watermarks,
)
from pyspark.sql import SparkSession

# ---- part 1: windows on a Kafka-like stream ------------------------------------------------

BASE = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
# The files, in the order they arrive: (partition, offset, event time in s after BASE, clicks).  The
# first three are there when the query starts (one file per micro-batch); LATE comes once the first
# two windows have closed.
CLICKS = [
    [(0, 0, 12.0, 1), (1, 0, 2.0, 1), (2, 0, 14.0, 1)],
    [(0, 1, 16.0, 2), (1, 1, 5.0, 3), (0, 2, 3.0, 4)],  # partition 1 lags; offset 2 of 0 is old
    [(0, 3, 31.0, 5), (1, 2, 24.0, 6)],  # partition 2 is quiet from here on
]
LATE = [(1, 3, 7.0, 7)]
WINDOWS = WatermarkStrategy(readers=2, bound=2000, interval=200, idleness=3000)
TRIGGER = "500 milliseconds"


def _write(inbox: Path, name: str, rows: list[tuple[int, int, float, int]], age: int = 0) -> None:
    """A JSON-lines file, complete when it appears, modified `age` seconds ago: Spark's file source
    reads files in the order of their modification times."""
    lines = [json.dumps({"partition": p, "offset": o, "clicks": c,
                         "timestamp": (BASE + datetime.timedelta(seconds=s)).isoformat()})
             for p, o, s, c in rows]
    tmp = inbox.parent / f".{name}"
    tmp.write_text("".join(line + "\n" for line in lines))
    stamp = time.time() - age
    os.utime(tmp, (stamp, stamp))
    tmp.replace(inbox / name)


def at(seconds: int) -> datetime.datetime:
    """BASE + seconds as Spark gives a timestamp to Python: naive, in the session's (local) time zone."""
    return (BASE + datetime.timedelta(seconds=seconds)).astimezone().replace(tzinfo=None)


def _wait_for(spark: Any, query: Any, done: Any) -> list[Any]:
    """The output so far once `done(rows)`, polled between micro-batches; the deadline is a hang
    guard only (the windows close after a number of micro-batches, however long they take)."""
    deadline = time.monotonic() + 900
    while True:
        rows = spark.sql("select * from clicks_windows").collect()
        if done(rows):
            return rows
        if query.exception() is not None:
            raise query.exception()
        assert time.monotonic() < deadline, "hang guard"
        time.sleep(0.5)


def windows_part(spark: Any, work: Path) -> list[Any]:
    """The clicks through `event_time_windows`: the windows and late rows it emitted."""
    inbox = work / "clicks"
    inbox.mkdir()
    for i, rows in enumerate(CLICKS):
        _write(inbox, f"{i}.json", rows, age=10 * (len(CLICKS) - i))  # in order, a second or more apart
    clicks = (spark.readStream.schema("partition int, offset long, timestamp timestamp, clicks long")
              .option("maxFilesPerTrigger", 1).json(str(inbox)))
    out = event_time_windows(clicks, split_col="partition", time_col="timestamp", order_col="offset",
                             value_col="clicks", window=datetime.timedelta(seconds=10), strategy=WINDOWS,
                             late="emit", watermark_rows=True)
    query = (out.writeStream.format("memory").queryName("clicks_windows").outputMode("append")
             .option("checkpointLocation", str(work / "checkpoint-windows"))
             .trigger(processingTime=TRIGGER).start())
    try:
        _wait_for(spark, query, lambda rows: any(r["kind"] == "window" and r["window_start"] == at(10)
                                                 for r in rows))
        _write(inbox, "3.json", LATE)
        _wait_for(spark, query, lambda rows: any(r["kind"] == "late" for r in rows))
    finally:
        query.stop()
    return spark.sql("select * from clicks_windows order by processing_time, kind, window_start").collect()


# ---- part 2: the watermark events of a source log -----------------------------------------

# Your events, in the order they arrived: (split, event time in ms, payload); `tick` rows: processing
# time passing.  Splits 0 and 2 go to reader 0, split 1 to reader 1 (split mod readers).
EVENTS = [
    {"split": 0, "ts": 100, "value": "click a"},
    {"split": 1, "ts": 120, "value": "click b"},
    {"split": 2, "ts": 90, "value": "click c"},
    {"op": "tick", "ms": 10},  # t=10: every split has a watermark: reader 0 min(94, 84), reader 1 114
    {"split": 0, "ts": 150, "value": "click d"},
    {"split": 1, "ts": 160, "value": "click e"},
    {"op": "tick", "ms": 10},  # t=20: split 2 still holds reader 0 back at 84
    {"split": 0, "ts": 170, "value": "click f"},
    {"split": 1, "ts": 175, "value": "click g"},
    {"op": "tick", "ms": 40},  # t=30..60: split 2 idle (no record since t=10), reader 0 moves on
    {"op": "end"},  # the input ends: MAX
]
STRATEGY = WatermarkStrategy(readers=2, bound=5, interval=10, idleness=30)


def log_part(spark: Any, work: Path) -> list[Any]:
    (work / "events").mkdir()
    rows = [{"seq": i, **e} for i, e in enumerate(EVENTS)]
    (work / "events" / "part-0.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    events = (spark.readStream.schema("seq long, op string, split int, ts long, ms long, value string")
              .json(str(work / "events")))
    out = flink_watermarks(events, STRATEGY)
    query = (out.writeStream.format("memory").queryName("flink_watermarks").outputMode("append")
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return spark.sql("select * from flink_watermarks order by idx").collect()


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this interpreter
    work = Path(tempfile.mkdtemp(prefix="flink-watermarks-example-"))
    spark = (SparkSession.builder.master("local[2]").appName("flink-watermarks-example")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB).getOrCreate())
    try:
        windows = windows_part(spark, work)
        rows = log_part(spark, work)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    epoch = int(BASE.timestamp() * 1000)
    for r in windows:
        if r["kind"] == "window":
            print(f"window {r['window_start']:%H:%M:%S}-{r['window_end']:%H:%M:%S}: {r['count']} rows, "
                  f"{r['sum']:.0f} clicks (watermark {(r['watermark'] - epoch) / 1000} s)")
        elif r["kind"] == "late":
            print(f"late: partition {r['split']} offset {r['position']} at {r['event_time']:%H:%M:%S}, "
                  f"watermark {(r['watermark'] - epoch) / 1000} s")
        elif r["watermark"] > epoch:
            print(f"the valve's watermark: {(r['watermark'] - epoch) / 1000} s")
    got = {(r["window_start"], r["count"], r["sum"]) for r in windows if r["kind"] == "window"}
    late = {(r["split"], r["position"]) for r in windows if r["kind"] == "late"}
    # The three files are three micro-batches in a row: no partition can go idle between them (a
    # periodic check that saw a record starts its timer over).  After the first, every partition's
    # generator has a watermark, and partition 1's (2 s - 2 s - 1 ms) holds the valve below 10 s, so
    # the second file's rows of [0 s, 10 s) are on time; Spark's withWatermark (14 s - 2 s: one
    # watermark over all partitions) would drop them.  Partition 2 is quiet after the first file and
    # goes idle (WM-13): the valve moves to partition 1's 24 s - 2 s - 1 ms, and [0 s, 10 s) and
    # [10 s, 20 s) close; when the stream is quiet every partition idles and the valve emits the
    # maximum (31 s - 2 s - 1 ms, WM-19): [20 s, 30 s) stays open.  The last file's row of
    # [0 s, 10 s) comes after that window fired: late.
    assert got == {(at(0), 3, 8.0), (at(10), 3, 4.0)}, got
    assert late == {(1, 3)}, late

    valve = [r["watermark"] for r in rows if r["kind"] == "output_watermark"]
    for r in rows:
        if r["kind"] in ("watermark", "output_watermark"):
            who = f"reader {r['reader']}" if r["kind"] == "watermark" else "the valve"
            print(f"after event row {r['seq']:>2}: {who} -> {r['watermark']}")
    print("the valve's watermarks:", valve)
    # t=10: reader 0 min(100-6, 90-6) = 84, reader 1 114: the valve 84.  t=20..50: split 2 holds
    # reader 0 at 84 (its idleness timer starts at the first check without a record, t=20).  t=60:
    # 40 ms > 30, split 2 is idle: reader 0 = split 0's 170-6 = 164, the valve min(164, 175-6) = 164.
    # End: reader 0 MAX (the valve 169), reader 1 MAX (the valve MAX).
    assert valve == [84, 164, 169, 2**63 - 1], valve
    late_log = [r["value"] for r in rows if r["kind"] == "record" and r["ts"] <= r["current_watermark"]]
    assert late_log == [], late_log  # no record arrived behind the valve's watermark here


if __name__ == "__main__":
    main()
