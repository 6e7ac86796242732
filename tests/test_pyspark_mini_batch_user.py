"""`changelog_aggregate` the way a Spark engineer runs it: a CDC feed of an `orders` table landing as
JSONL files in a watched directory while the query runs, Spark's own clock (no `time` column, or the
feed's commit times), a parquet sink, a stop and a restart from the checkpoint in the middle, and a
stream that goes quiet after its last file.  The truth is a batch Spark SQL computation over the
same files: the orders alive at the end (each order's last change by log sequence number is an
insert or an update's after image) grouped by customer.  The changelog in the sink, applied as
upserts and deletes per customer (also in SQL), must equal it.

The feed's very last change is an update's `-U`/`+U` pair, placed so that the `-U` completes a
bundle by size and the `+U` starts the next one: the bundle that waited forever before every commit
finished its bundles (MB-13), so the sink kept the `-U`'s change without the `+U`'s.
"""

from __future__ import annotations

import functools
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

SCHEMA = "lsn long, ts_ms long, op string, id long, customer long, amount long"
COLUMNS = ("lsn", "ts_ms", "op", "id", "customer", "amount")
BUNDLE = 40  # rows per bundle (MB-10)
ROWS_PER_FILE = 4 * BUNDLE + 1  # the last file's -U completes its 4th bundle, its +U is a bundle alone
CUSTOMERS = 25
HANG_GUARD_S = 900  # a hang guard only: the work takes seconds


def cdc_files(seed: int, files: int) -> list[list[dict[str, Any]]]:
    """A valid CDC feed: inserts of new orders, updates of live ones (`-U` the old image, `+U` the
    new, which may move the order to another customer), deletes of live ones; `files` files of
    ROWS_PER_FILE rows, the last change an update."""
    rng = random.Random(seed)
    live: dict[int, tuple[int, int]] = {}  # order id -> (customer, amount)
    rows: list[tuple[str, int, int, int]] = []  # (op, id, customer, amount)
    total = files * ROWS_PER_FILE
    next_id = 0
    while len(rows) < total:
        room = total - len(rows)
        r = rng.random()
        if room == 2 or (room > 3 and live and r < 0.45):  # an update: two rows, never split at the end
            if not live:
                live[next_id] = (rng.randrange(CUSTOMERS), rng.randrange(1, 1000))
                rows.append(("+I", next_id, *live[next_id]))
                next_id += 1
                continue
            oid = rng.choice(sorted(live))
            rows.append(("-U", oid, *live[oid]))
            live[oid] = (rng.randrange(CUSTOMERS) if rng.random() < 0.2 else live[oid][0],
                         rng.randrange(1, 1000))
            rows.append(("+U", oid, *live[oid]))
        elif live and r < 0.6 and room > 2:
            oid = rng.choice(sorted(live))
            rows.append(("-D", oid, *live.pop(oid)))
        else:
            live[next_id] = (rng.randrange(CUSTOMERS), rng.randrange(1, 1000))
            rows.append(("+I", next_id, *live[next_id]))
            next_id += 1
    assert [op for op, *_ in rows[-2:]] == ["-U", "+U"]
    records = [dict(zip(COLUMNS, (lsn, 1_700_000_000_000 + 7 * lsn, *r))) for lsn, r in enumerate(rows, 1)]
    return [records[i:i + ROWS_PER_FILE] for i in range(0, total, ROWS_PER_FILE)]


class Feed:
    """The watched directory: each file lands whole (written aside, then renamed in), with a later
    modification time than the one before (the file source takes files in that order)."""

    def __init__(self, root: Path):
        self.dir, self.staging = root / "cdc", root / "staging"
        self.dir.mkdir()
        self.staging.mkdir()
        self.count = 0

    def write(self, records: list[dict[str, Any]]) -> None:
        name = f"{self.count:04d}.json"
        tmp = self.staging / name
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        os.utime(tmp, (1_000_000 + self.count, 1_000_000 + self.count))
        os.replace(tmp, self.dir / name)
        self.count += 1


def changes_of(spark: Any, feed: Feed, **options: Any) -> Any:
    from flink_semantics.adapters.pyspark.mini_batch.api import changelog_aggregate

    cdc = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(feed.dir))
    return changelog_aggregate(cdc, key="customer", op="op", value="amount", order="lsn",
                               mini_batch=True, bundle_size=BUNDLE, update_before=True, **options)


def start(changes: Any, root: Path, trigger: dict[str, Any]) -> Any:
    from flink_semantics.adapters.pyspark.mini_batch.api import STATE_STORE_CONF
    from flink_semantics.adapters.pyspark.session import query_conf

    with query_conf(changes.sparkSession, STATE_STORE_CONF):
        return (changes.writeStream.format("parquet").option("path", str(root / "sink"))
                .option("checkpointLocation", str(root / "checkpoint")).trigger(**trigger).start())


def committed(root: Path) -> int:
    """The micro-batches the query's checkpoint has committed, over all its runs."""
    return len([p for p in (root / "checkpoint" / "commits").iterdir() if p.name.isdigit()])


TRUTH = """
    WITH last AS (SELECT *, row_number() OVER (PARTITION BY id ORDER BY lsn DESC) AS r FROM cdc)
    SELECT customer, count(*) AS count, sum(amount) AS sum, min(amount) AS min, max(amount) AS max
    FROM last WHERE r = 1 AND op IN ('+I', '+U') GROUP BY customer
"""
APPLIED = """
    WITH last AS (SELECT *, row_number() OVER (PARTITION BY customer
                                               ORDER BY seq DESC, n DESC, kpos DESC, sub DESC) AS r
                  FROM sink)
    SELECT customer, count, sum, min, max FROM last WHERE r = 1 AND op IN ('+I', '+U')
"""


def final_states(spark: Any, root: Path, feed: Feed) -> tuple[Any, Any]:
    """(the changelog in the sink applied per customer, the truth over the feed's files), sorted."""
    spark.read.schema(SCHEMA).json(str(feed.dir)).createOrReplaceTempView("cdc")
    spark.read.parquet(str(root / "sink")).createOrReplaceTempView("sink")
    try:
        return (spark.sql(APPLIED).orderBy("customer").toPandas(),
                spark.sql(TRUTH).orderBy("customer").toPandas())
    finally:
        spark.catalog.dropTempView("cdc")
        spark.catalog.dropTempView("sink")


def assert_final_state(spark: Any, root: Path, feed: Feed) -> None:
    got, want = final_states(spark, root, feed)
    assert len(want) > CUSTOMERS // 2  # the feed leaves most customers with orders
    assert got.to_dict("records") == want.to_dict("records")


def test_processing_time_trigger_quiet_stream(spark: Any, tmp_path: Path) -> None:
    """A processingTime trigger, files landing one at a time between `processAllAvailable()` calls,
    the query stopped and restarted from its checkpoint after the third: once the last file's
    micro-batch commits, with no further input and no further micro-batch, the sink holds every
    change (the last `-U`/`+U` pair included) and its final state is the SQL truth (MB-13: the
    commit finishes every bundle; MB-10: bundles of BUNDLE rows within a micro-batch)."""
    files = cdc_files(7, 6)
    feed = Feed(tmp_path)
    trigger = {"processingTime": "200 milliseconds"}
    query = start(changes_of(spark, feed, allow_latency_ms=60_000), tmp_path, trigger)
    try:
        for records in files[:3]:
            feed.write(records)
            query.processAllAvailable()
    finally:
        query.stop()
    query = start(changes_of(spark, feed, allow_latency_ms=60_000), tmp_path, trigger)
    try:
        for records in files[3:]:
            feed.write(records)
            query.processAllAvailable()
        assert committed(tmp_path) == len(files)  # one micro-batch a file, none after the last
        assert_final_state(spark, tmp_path, feed)
    finally:
        query.stop()


def test_available_now_ends_with_every_change(spark: Any, tmp_path: Path) -> None:
    """`trigger(availableNow=True)` with the feed's commit times as processing time (`time`) and
    stage 1 in three tasks (`local_parallelism=3`, a key's rows in one of them): three files, the
    query ends by itself; three more, the query restarted from its checkpoint ends by itself too,
    the sink holding every change: its final state is the SQL truth (MB-13).  Stage 1's state (the
    state data source) has the three tasks' jobs."""
    files = cdc_files(11, 6)
    feed = Feed(tmp_path)
    for half in (files[:3], files[3:]):
        for records in half:
            feed.write(records)
        changes = changes_of(spark, feed, allow_latency_ms=60_000, time="ts_ms", local_parallelism=3)
        query = start(changes, tmp_path, {"availableNow": True})
        try:
            assert query.awaitTermination(HANG_GUARD_S), "availableNow did not end"
        finally:
            query.stop()
    assert committed(tmp_path) == len(files)
    assert_final_state(spark, tmp_path, feed)
    stage_one = (spark.read.format("statestore").option("operatorId", 1).option("stateVarName", "job")
                 .load(str(tmp_path / "checkpoint")))
    assert sorted(r.task for r in stage_one.select("key.task").collect()) == [0, 1, 2]


def write_batch(sink: str, df: Any, batch_id: int) -> None:
    """foreachBatch: the micro-batch's rows appended to the parquet sink with their batch id."""
    from pyspark.sql import functions as F

    df.withColumn("batch", F.lit(batch_id)).write.mode("append").parquet(sink)


def read_through(query: Any, file: int, deadline: float) -> None:
    """Wait until a micro-batch that read the feed's file number `file` has committed (its progress
    is reported after the commit).  `processAllAvailable()` never returns here: in `ProcessingTime`
    time mode Spark constructs a micro-batch every trigger, so it never finds no new data."""
    while True:
        progress = query.lastProgress
        end = progress["sources"][0]["endOffset"] if progress else None
        if isinstance(end, str):  # the file source's offset, as JSON
            end = json.loads(end)
        if end is not None and end["logOffset"] >= file:
            return
        assert time.monotonic() < deadline, f"file {file} was never read"
        time.sleep(0.2)


def test_bundles_across_micro_batches_flush_on_a_quiet_stream(spark: Any, tmp_path: Path) -> None:
    """`commit_finishes_bundles=False`: bundles span micro-batches, and after the last file a Spark
    processing-time timer at the assigner's deadline (MB-4) finishes the waiting bundle in a no-data
    micro-batch: the final state becomes the SQL truth, and the last change comes at most
    allow_latency_ms plus one trigger interval of micro-batches after the last file's (counted by
    batch id; a slow machine runs fewer micro-batches, not more)."""
    from flink_semantics.adapters.pyspark.mini_batch.api import STATE_STORE_CONF
    from flink_semantics.adapters.pyspark.session import query_conf

    latency_ms, interval_ms = 1_000, 500
    files = cdc_files(13, 2)
    feed = Feed(tmp_path)
    changes = changes_of(spark, feed, allow_latency_ms=latency_ms, commit_finishes_bundles=False)
    with query_conf(spark, STATE_STORE_CONF):
        query = (changes.writeStream.foreachBatch(functools.partial(write_batch, str(tmp_path / "sink")))
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime=f"{interval_ms} milliseconds").start())
    deadline = time.monotonic() + HANG_GUARD_S  # a hang guard, not a measure
    try:
        for records in files:
            feed.write(records)
            read_through(query, feed.count - 1, deadline)
        last_data = max(p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0)
        while True:
            if (tmp_path / "sink").exists():
                got, want = final_states(spark, tmp_path, feed)
                if got.to_dict("records") == want.to_dict("records"):
                    break
            assert time.monotonic() < deadline, "the waiting bundle never finished"
            time.sleep(0.5)
    finally:
        query.stop()
    last_change = spark.read.parquet(str(tmp_path / "sink")).agg({"batch": "max"}).first()[0]
    assert last_change - last_data <= latency_ms // interval_ms + 2, (last_data, last_change)


@pytest.mark.parametrize("column,type_", [("amount", "double"), ("amount", "decimal(10,2)"),
                                          ("customer", "string"), ("customer", "double")])
def test_values_not_bigint_compatible_are_refused(spark: Any, tmp_path: Path, column: str,
                                                  type_: str) -> None:
    """A key or value column of another type than BIGINT-compatible: a ValueError naming the
    column, its type and MB-30 before any query starts."""
    from flink_semantics.adapters.pyspark.mini_batch.api import changelog_aggregate

    schema = SCHEMA.replace(f"{column} long", f"{column} {type_}")
    cdc = spark.readStream.schema(schema).json(str(tmp_path))
    before = len(spark.streams.active)
    with pytest.raises(ValueError) as e:
        changelog_aggregate(cdc, key="customer", op="op", value="amount", order="lsn")
    assert f"'{column}'" in str(e.value) and type_ in str(e.value) and "MB-30" in str(e.value)
    assert len(spark.streams.active) == before


@pytest.mark.parametrize("bad,words", [
    ({"local_parallelism": 0}, ["local_parallelism", "MB-10"]),
    ({"local_parallelism": "2"}, ["local_parallelism", "MB-10"]),
    ({"local_parallelism": 2, "markers": True}, ["local_parallelism=1", "MB-8"]),
    ({"commit_finishes_bundles": "yes"}, ["commit_finishes_bundles", "MB-13"]),
    ({"on_state_update": 5}, ["on_state_update"]),
])
def test_bad_options_are_refused(spark: Any, tmp_path: Path, bad: dict[str, Any], words: list[str]) -> None:
    """The new options, bad: a ValueError naming the parameter (and the rule) before any query."""
    from flink_semantics.adapters.pyspark.mini_batch.api import changelog_aggregate

    cdc = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    before = len(spark.streams.active)
    with pytest.raises(ValueError) as e:
        changelog_aggregate(cdc, key="customer", op="op", value="amount", order="lsn", **bad)
    assert all(w in str(e.value) for w in words), str(e.value)
    assert len(spark.streams.active) == before


def test_a_null_value_fails_the_query_naming_the_row(spark: Any, tmp_path: Path) -> None:
    """A change whose value is null in a running query: the query fails with the ValueError that
    names the row's `order` value, the column and the rule; nothing is dropped silently."""
    from pyspark.errors import StreamingQueryException

    feed = Feed(tmp_path)
    feed.write([dict(zip(COLUMNS, (1, 0, "+I", 1, 3, 10))), dict(zip(COLUMNS, (2, 0, "+I", 2, 3, None)))])
    query = start(changes_of(spark, feed, allow_latency_ms=1000), tmp_path, {"availableNow": True})
    try:
        with pytest.raises(StreamingQueryException) as e:
            query.awaitTermination(HANG_GUARD_S)
    finally:
        query.stop()
    assert "lsn=2" in str(e.value) and "'amount'" in str(e.value) and "MB-30" in str(e.value), str(e.value)


@pytest.mark.parametrize("row,words", [
    ((None, 0, "+I", 1, 2), ["null order column 'lsn'", "MB-9"]),
    ((5, 0, None, 1, 2), ["lsn=5", "null op column 'op'", "MB-17"]),
    ((5, 0, "+X", 1, 2), ["lsn=5", "'+X'", "column 'op'", "MB-17"]),
    ((5, 0, "-D", None, 2), ["lsn=5", "null key column 'customer'", "MB-30"]),
    ((5, 0, "+U", 1, None), ["lsn=5", "null value column 'amount'", "MB-30"]),
    ((5, None, "+U", 1, 2), ["lsn=5", "null time column 'ts_ms'", "MB-4"]),
])
def test_bad_rows_are_named(row: tuple[Any, ...], words: list[str]) -> None:
    """Stage 1's check of each row (no Spark needed): the message names the row's order value, the
    user's column and the rule."""
    from flink_semantics.adapters.pyspark.mini_batch.api import check_row

    columns = {"order": "lsn", "op": "op", "key": "customer", "value": "amount", "time": "ts_ms"}
    with pytest.raises(ValueError) as e:
        check_row(row, columns)  # type: ignore[arg-type]
    assert all(w in str(e.value) for w in words), str(e.value)
    check_row((5, 0, "tick", None, None), columns)  # a control row needs no key or value
