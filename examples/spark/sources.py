"""Flink's FLIP-27 source on Spark Structured Streaming: a directory of JSON-lines files, read exactly once
across a crash.

    python examples/spark/sources.py

Registers the `flip27` Python data source (flink_semantics.adapters.pyspark.sources.api), the
built-in file source: every file of a directory is a split, new files are discovered as new splits
while the query runs, and two readers read them as JSON lines on the executors.  The query writes
into `IdempotentSink` (parquet per micro-batch); the example's own `after_write` hook crashes the
query once after the sink wrote a micro-batch and before Spark committed it; the query restarted
from its checkpoint runs that micro-batch again and reads on.  The committed output equals a batch
`spark.read.json` of the same files, every row exactly once.  Spark's offset log holds the
enumerator's state and the readers' split positions (the FLIP-27 checkpoint).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from flink_semantics.adapters.pyspark.sources.api import Flip27Source, IdempotentSink, flip27_options
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

SCHEMA = "id long, fruit string, weight double"
FRUIT = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "kiwi"]


def write_file(directory: Path, n: int) -> None:
    """File n: ten orders, written under a hidden name, then renamed (a file appears complete)."""
    lines = [json.dumps({"id": n * 10 + k, "fruit": FRUIT[(n + k) % len(FRUIT)], "weight": k * 0.5})
             for k in range(10)]
    tmp = directory / f".orders-{n}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, directory / f"orders-{n}.json")


class CrashOnce:
    """`after_write` hook: the first time batch 1 is written, the query fails before Spark commits it."""

    def __init__(self) -> None:
        self.crashed = False

    def __call__(self, batch_id: int) -> None:
        if batch_id == 1 and not self.crashed:
            self.crashed = True
            raise RuntimeError("crash with micro-batch 1 written, not committed")


def start(spark: SparkSession, source: Path, out: str, checkpoint: str, hook: CrashOnce):
    df = (spark.readStream.format("flip27").options(**flip27_options(source, readers=2))
          .schema(SCHEMA).load())
    return (df.writeStream.foreachBatch(IdempotentSink(out, after_write=hook))
            .option("checkpointLocation", checkpoint).start())


def main() -> None:
    spark = (SparkSession.builder.master("local[2]").appName("flip27-example")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.dataSource.register(Flip27Source)
    work = Path(tempfile.mkdtemp(prefix="flip27-example-"))
    source, out, checkpoint = work / "in", str(work / "out"), str(work / "checkpoint")
    source.mkdir()
    hook = CrashOnce()
    try:
        for n in range(3):
            write_file(source, n)
        query = start(spark, source, out, checkpoint, hook)
        query.processAllAvailable()  # micro-batch 0: the three files
        for n in range(3, 5):
            write_file(source, n)  # discovered as new splits: micro-batch 1, which crashes
        try:
            query.processAllAvailable()
            raise AssertionError("the query should have crashed")
        except StreamingQueryException:
            print("the query crashed with micro-batch 1 written but not committed; restarting it")
        write_file(source, 5)  # written while no query runs
        query = start(spark, source, out, checkpoint, hook)
        query.processAllAvailable()
        query.stop()
        got = IdempotentSink.read(spark, out, checkpoint)
        want = spark.read.schema(SCHEMA).json(str(source))
        assert sorted(got.drop("batch").collect()) == sorted(want.collect()), "not exactly once"
        for r in got.groupBy("batch").count().orderBy("batch").collect():
            print(f"micro-batch {r['batch']}: {r['count']} rows")
        print(f"{got.count()} rows from {len(list(source.glob('*.json')))} files, each exactly once "
              "across the crash")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
