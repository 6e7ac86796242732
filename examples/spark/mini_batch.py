"""changelog_aggregate on a streaming DataFrame: a group aggregation over change-data-capture rows.

A CDC feed of an `orders` table (JSON files landing in a directory while the query runs, as a
connector might write them) carries inserts, updates (`-U` the old row, `+U` the new one) and
deletes of orders, each with its customer, amount, log sequence number `lsn` and commit time
`ts_ms`. The query keeps, per customer, COUNT(*), SUM, MIN and MAX of the amounts of their current
orders, with mini-batch bundles of 3 rows (Flink's `table.exec.mini-batch.*`), and emits the
aggregation's own changelog: `+I` for a new customer, `-U`/`+U` for a change, `-D` when a customer's
last order is gone. Spark's streaming `groupBy().agg()` cannot do this: it has no retraction (a
deleted order would still count, and MAX cannot fall back to the next amount).

The query runs with a processing-time trigger into a memory sink while the example writes the
files one by one, waiting for each (`processAllAvailable()`); after the last one the stream goes
quiet.  Each committed micro-batch is a checkpoint for the aggregation (every bundle finishes before
it commits, Flink's MB-13), so the last file's changes are in the sink with no further input.  The
example checks the changelog and the final aggregates (the changelog applied as upserts and
deletes), prints them and removes its temporary directory.

    python examples/spark/mini_batch.py
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from flink_semantics.adapters.pyspark.mini_batch.api import STATE_STORE_CONF, changelog_aggregate
from flink_semantics.adapters.pyspark.session import get_spark

# (lsn, ts_ms, op, customer, amount), one list per file
FILES = [
    [(1, 1000, "+I", 7, 120), (2, 1005, "+I", 7, 80), (3, 1010, "+I", 9, 45)],   # a bundle of 3
    [(4, 1020, "-U", 7, 120), (5, 1020, "+U", 7, 150), (6, 1030, "+I", 9, 30)],  # order 1 amended
    [(7, 1040, "-D", 9, 45), (8, 1050, "-D", 9, 30), (9, 1060, "+I", 4, 10)],    # customer 9 leaves
]
SCHEMA = "lsn long, ts_ms long, op string, customer long, amount long"

# The changelog: a key's change per bundle (for -U and -D, the result before), in emission order.
EXPECTED_CHANGELOG = [
    (7, "+I", 2, 200, 80, 120), (9, "+I", 1, 45, 45, 45),
    (7, "-U", 2, 200, 80, 120), (7, "+U", 2, 230, 80, 150),
    (9, "-U", 1, 45, 45, 45), (9, "+U", 2, 75, 30, 45),
    (9, "-D", 2, 75, 30, 45), (4, "+I", 1, 10, 10, 10),
]
# Per customer, from the orders they hold at the end: 7 has 80 and 150, 4 has 10, 9 none.
EXPECTED_FINAL = {7: (2, 230, 80, 150), 4: (1, 10, 10, 10)}


def main() -> None:
    spark = get_spark()
    for key, value in STATE_STORE_CONF.items():  # transformWithState runs on RocksDB state only
        spark.conf.set(key, value)
    work = Path(tempfile.mkdtemp(prefix="example-mini-batch-"))
    try:
        feed, staging = work / "cdc", work / "staging"
        feed.mkdir()
        staging.mkdir()
        cdc = spark.readStream.schema(SCHEMA).json(str(feed))
        changes = changelog_aggregate(cdc, key="customer", op="op", value="amount", order="lsn", time="ts_ms",
                                      aggregates=["count", "sum", "min", "max"], mini_batch=True,
                                      allow_latency_ms=60_000, bundle_size=3, update_before=True)
        query = (changes.writeStream.format("memory").queryName("customer_totals").outputMode("append")
                 .trigger(processingTime="1 second").option("checkpointLocation", str(work / "checkpoint"))
                 .start())
        try:
            for i, rows in enumerate(FILES):  # each file lands whole: written aside, then moved in
                lines = [json.dumps(dict(zip(("lsn", "ts_ms", "op", "customer", "amount"), r))) for r in rows]
                (staging / f"{i:03d}.json").write_text("\n".join(lines) + "\n")
                os.replace(staging / f"{i:03d}.json", feed / f"{i:03d}.json")
                query.processAllAvailable()  # the file's micro-batch has committed
            rows = spark.table("customer_totals").orderBy("seq", "n", "kpos", "sub").collect()
        finally:
            query.stop()
            spark.catalog.dropTempView("customer_totals")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    changelog = [(r.customer, r.op, r["count"], r["sum"], r["min"], r["max"]) for r in rows]
    print("changelog (customer, op, count, sum, min, max):")
    for c in changelog:
        print("  ", c)
    final: dict[int, tuple[int, int, int, int]] = {}
    for customer, op, *result in changelog:  # the changelog applied as upserts and deletes
        if op in ("+I", "+U"):
            final[customer] = tuple(result)  # type: ignore[assignment]
        elif op == "-D":
            del final[customer]
    print("final aggregates per customer:", final)
    assert changelog == EXPECTED_CHANGELOG, changelog
    assert final == EXPECTED_FINAL, final


if __name__ == "__main__":
    main()
