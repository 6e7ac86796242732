"""Flink's FLIP-27 source on Spark Structured Streaming: your splits, read exactly once across a crash.

    python examples/spark/sources.py

Registers the `flip27` Python data source (flink_semantics.adapters.pyspark.sources.api), reads
three splits of your own records with two readers in a streaming query (`trigger(availableNow=True)`,
two records per reader and micro-batch) into `IdempotentSink`, crashes the query once after the
sink wrote micro-batch 1 and before Spark committed it, restarts the query from its checkpoint,
and checks that every record was committed exactly once, each split in offset order.  Spark's
offset log holds the enumerator's and the readers' split positions (the FLIP-27 checkpoint); the
sink replaces a replayed micro-batch's output instead of appending it (SRC-38).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from flink_semantics.adapters.pyspark.sources.api import Flip27Source, IdempotentSink, flip27_options
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

SPLITS = [["apple", "banana", "cherry"], ["date"], ["elder", "fig", "grape", "kiwi"]]


def run_query(spark: SparkSession, out: str, checkpoint: str, crash_after: list[int]) -> None:
    """One run of the streaming query, from the checkpoint's last committed micro-batch on."""
    df = spark.readStream.format("flip27").options(**flip27_options(SPLITS, readers=2)).load()
    query = (df.writeStream.foreachBatch(IdempotentSink(out, fail_batches=crash_after))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()


def main() -> None:
    spark = (SparkSession.builder.master("local[2]").appName("flip27-example")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.dataSource.register(Flip27Source)
    work = Path(tempfile.mkdtemp(prefix="flip27-example-"))
    out, checkpoint = str(work / "out"), str(work / "checkpoint")
    try:
        try:
            run_query(spark, out, checkpoint, crash_after=[1])  # the sink crashes once, batch 1 in flight
            raise AssertionError("the query should have crashed")
        except StreamingQueryException:
            print("the query crashed with micro-batch 1 written but not committed; restarting it")
        run_query(spark, out, checkpoint, crash_after=[1])  # the crash is injected once only
        records = [r for r in IdempotentSink.read(out, checkpoint) if r["kind"] == "record"]
        got = sorted((r["split"], r["offset"], r["value"]) for r in records)
        want = sorted((s, o, v) for s, split in enumerate(SPLITS) for o, v in enumerate(split))
        assert got == want, f"not exactly once: {got}"  # none lost, none twice
        for s in range(len(SPLITS)):  # each split read in offset order, by one reader (SRC-39)
            mine = [(r["step"], r["offset"]) for r in records if r["split"] == s]
            assert [o for _, o in sorted(mine)] == list(range(len(SPLITS[s])))
        for r in sorted(records, key=lambda r: (r["step"], r["reader"], r["split"], r["offset"])):
            print(f"batch {r['step']}  reader {r['reader']}  split {r['split']}  offset {r['offset']}  "
                  f"{r['value']}")
        print(f"{len(records)} records, each exactly once across the restart")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
