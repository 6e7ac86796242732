"""Flink's per-split watermarks, idleness and the downstream valve on your own Spark stream.

Three splits of click events (think: three Kafka partitions) read by two source readers; split 2
goes quiet.  Spark's own `withWatermark` is one watermark per query, the maximum event time seen
minus a delay, so a fast split makes a slow split's events late.  With `flink_watermarks` each
split has its own bounded-out-of-orderness generator, each reader takes the minimum over its
splits (WM-6), a split silent for more than 30 ms of processing time goes idle and stops holding
the others back (WM-13), and the downstream task's valve combines the readers (WM-18, WM-19).
Processing time is in the data:
a `tick` row says how much of it passed, so the result does not depend on when Spark runs.

    PYTHONPATH=. python examples/spark/watermarks.py

Runs in well under a minute on a laptop (local Spark), prints the valve's watermarks and checks
them.  Temporary directories are removed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from flink_semantics.adapters.pyspark.watermarks.api import ROCKSDB, WatermarkStrategy, flink_watermarks
from pyspark.sql import SparkSession

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


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this interpreter
    work = Path(tempfile.mkdtemp(prefix="flink-watermarks-example-"))
    spark = (SparkSession.builder.master("local[2]").appName("flink-watermarks-example")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB).getOrCreate())
    try:
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
        rows = spark.sql("select * from flink_watermarks order by idx").collect()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

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
    late = [r["value"] for r in rows if r["kind"] == "record" and r["ts"] <= r["current_watermark"]]
    assert late == [], late  # no record arrived behind the valve's watermark here


if __name__ == "__main__":
    main()
