"""Key groups the way a Spark user runs them (adapters/pyspark/key_groups/api.py): JSON lines files
written into a watched directory while the query runs, a parquet sink, a stop, `rescale_state`
from 2 to 4 subtasks and a restart on more files, the result held to a batch Spark SQL
`groupBy(user)` over the same files; null keys refused or counted (KG-7); the checkpoint's own
parallelism and maximum parallelism, read from it, against what the user passes (KG-13, KG-16); and
Spark's own offline repartitioning of a `groupBy().count()` query, which the documentation names
next to `rescale_state`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

EVENTS = "user string, amount long"
FIRST = [("ann", 3), ("bob", 1), ("ann", 2), ("cy", 5), ("dee", 1), ("bob", 4)]
SECOND = [("ann", 1), ("eve", 2), ("cy", 1), ("fay", 7)]
THIRD = [("bob", 2), ("gus", 1), ("ann", 4), ("eve", 3), ("hal", 6)]
FOURTH = [("fay", 1), ("ann", 1), ("ivy", 2), ("cy", 2)]


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="test-kg-user-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write_events(directory: Path, name: str, rows: list[tuple[str | None, int]]) -> None:
    """One JSON lines file, written beside the watched directory and renamed into it (the file
    source never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    staged = directory.parent / f".{directory.name}-{name}"
    staged.write_text("".join(json.dumps({"user": u, "amount": a}) + "\n" for u, a in rows))
    os.replace(staged, directory / name)


def running_totals() -> Any:
    from flink_semantics.adapters.pyspark.key_groups import api

    class RunningTotals(api.KeyedProcessor):
        """Per user: (clicks so far, amount so far, the state partition that counted)."""

        state_schema = "clicks long, total long"
        output_schema = "user string, clicks long, total long, partition int"

        def process(self, key: Any, row: Any, state: Any, ctx: Any) -> list[tuple[Any, ...]]:
            clicks, total = state.get() or (0, 0)
            clicks, total = clicks + 1, total + int(row.amount)
            state.update((clicks, total))
            return [(key, clicks, total, ctx.partition)]

    return RunningTotals()


def start_totals(spark: Any, source: Path, out: Path, checkpoint: Path, parallelism: int,
                 **kw: Any) -> Any:
    """The running totals of `source`'s files into parquet files at `out` (a file source, a parquet
    sink, Spark's own trigger)."""
    from flink_semantics.adapters.pyspark.key_groups import api

    events = spark.readStream.schema(EVENTS).json(str(source))
    totals = api.keyed_process(events, key="user", processor=running_totals(), parallelism=parallelism, **kw)
    writer = (totals.writeStream.format("parquet").option("path", str(out))
              .option("checkpointLocation", str(checkpoint)))
    return api.start(writer, parallelism=parallelism, spark=spark)


def test_running_totals_rescaled_from_2_to_4_match_batch_sql(spark: Any, workdir: Path) -> None:
    """Running clicks and amounts per user at parallelism 2 (files written between
    `processAllAvailable()` calls), stopped; a wrong old parallelism or maximum parallelism for the
    checkpoint is refused naming both values and the rule (KG-13, KG-16), and so is a restart at 3
    with state rescaled to 4 or one with another hash profile (KG-1); `rescale_state` with nothing
    but the new parallelism (the checkpoint says 2 and the KG-9 default 128) to 4; a new query at 4
    on more files: each user's last output equals a batch `groupBy(user)` count and sum over every
    file, and each row of the second query ran in the partition of its key group's subtask at 4
    (KG-3, KG-13)."""
    from chispa import assert_df_equality
    from flink_semantics.adapters.pyspark.key_groups import api
    from pyspark.sql import functions as F

    before, after = workdir / "events-before", workdir / "events-after"
    ck2, ck4 = workdir / "checkpoint-p2", workdir / "checkpoint-p4"
    write_events(before, "0.json", FIRST)
    query = start_totals(spark, before, workdir / "out-p2", ck2, 2)
    try:
        query.processAllAvailable()
        write_events(before, "1.json", SECOND)
        query.processAllAvailable()
    finally:
        query.stop()

    assert api.checkpoint_config(spark, str(ck2)) == {0: (2, 128, 2, "flink")}
    with pytest.raises(ValueError, match="^parallelism: KG-13: the checkpoint has parallelism 2, not 3"):
        api.rescale_state(spark, str(ck2), parallelism=3, new_parallelism=4)
    with pytest.raises(ValueError, match="^max_parallelism: KG-16: the checkpoint has max parallelism 128, "
                                         "not 64"):
        api.rescale_state(spark, str(ck2), parallelism=2, max_parallelism=64, new_parallelism=4)
    state = api.rescale_state(spark, str(ck2), new_parallelism=4, state_schema="clicks long, total long")
    after.mkdir()  # the new query's own input: its new checkpoint has new source positions
    events = spark.readStream.schema(EVENTS).json(str(after))
    with pytest.raises(ValueError, match="^parallelism: KG-13: the initial state of job 0 was rescaled to "
                                         "parallelism 4, not 3"):
        api.keyed_process(events, key="user", processor=running_totals(), parallelism=3, initial_state=state)
    with pytest.raises(ValueError, match="^hash: KG-1: .* 'flink', not 'spark'"):
        api.keyed_process(events, key="user", processor=running_totals(), parallelism=4, hash="spark",
                          initial_state=state)

    write_events(after, "0.json", THIRD)
    query = start_totals(spark, after, workdir / "out-p4", ck4, 4, initial_state=state)
    try:
        query.processAllAvailable()
        write_events(after, "1.json", FOURTH)
        query.processAllAvailable()
    finally:
        query.stop()

    outputs = spark.read.parquet(str(workdir / "out-p2"))  # each sink's own log of committed files
    outputs = outputs.unionByName(spark.read.parquet(str(workdir / "out-p4")))
    streamed = outputs.groupBy("user").agg(F.max("clicks").alias("clicks"),
                                           F.max_by("total", "clicks").alias("total"))
    truth = (spark.read.schema(EVENTS).json([str(before), str(after)]).groupBy("user")
             .agg(F.count("*").alias("clicks"), F.sum("amount").alias("total")))
    assert_df_equality(streamed, truth, ignore_row_order=True, ignore_nullable=True)
    for r in spark.read.parquet(str(workdir / "out-p4")).collect():
        assert r.partition == api.subtask_of(r.user, "string", 128, 4), r
    assert api.checkpoint_config(spark, str(ck4)) == {0: (4, 128, 4, "flink")}


def test_null_keys_are_refused_by_default_or_counted(spark: Any, workdir: Path) -> None:
    """KG-7: a row whose key is null fails the query with an error naming the key column, the rule
    and the row (Flink's keyBy refuses it); with `null_keys="count"` such rows are left out and
    counted in the observed metric of each micro-batch's progress, and the other users' totals
    equal a batch `groupBy(user)` over the non-null rows."""
    from chispa import assert_df_equality
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    refused = workdir / "refused"
    write_events(refused, "0.json", [("ann", 1), (None, 9)])
    query = start_totals(spark, refused, workdir / "out-refused", workdir / "ck-refused", 2)
    try:
        with pytest.raises(StreamingQueryException) as raised:
            query.processAllAvailable()
    finally:
        query.stop()
    message = str(raised.value)
    assert "key: KG-7: a null key in column 'user'" in message and '{"amount":9}' in message, message

    counted = workdir / "counted"
    write_events(counted, "0.json", [("ann", 1), (None, 9), ("bob", 2)])
    query = start_totals(spark, counted, workdir / "out-counted", workdir / "ck-counted", 2,
                         null_keys="count")
    try:
        query.processAllAvailable()
        write_events(counted, "1.json", [(None, 1), (None, 2), ("ann", 3)])
        query.processAllAvailable()
        metrics = [p.observedMetrics["null_keys"]["null_keys"] for p in query.recentProgress
                   if "null_keys" in p.observedMetrics]
    finally:
        query.stop()
    assert sorted(m for m in metrics if m) == [1, 2], metrics  # one null, then two
    streamed = (spark.read.parquet(str(workdir / "out-counted")).groupBy("user")
                .agg(F.max("clicks").alias("clicks"), F.max_by("total", "clicks").alias("total")))
    truth = (spark.read.schema(EVENTS).json(str(counted)).where("user IS NOT NULL").groupBy("user")
             .agg(F.count("*").alias("clicks"), F.sum("amount").alias("total")))
    assert_df_equality(streamed, truth, ignore_row_order=True, ignore_nullable=True)


def test_restart_with_another_max_parallelism_is_refused(spark: Any, workdir: Path) -> None:
    """KG-16: the same checkpoint restarted with another maximum parallelism (same parallelism, so
    the same subtasks) fails its first micro-batch naming both values and the rule, instead of
    looking each key up in another key group and starting it from nothing."""
    from pyspark.errors import StreamingQueryException

    source, ck = workdir / "events", workdir / "checkpoint"
    write_events(source, "0.json", FIRST)
    query = start_totals(spark, source, workdir / "out", ck, 2, max_parallelism=128)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    write_events(source, "1.json", SECOND)
    query = start_totals(spark, source, workdir / "out", ck, 2, max_parallelism=64)
    try:
        with pytest.raises(StreamingQueryException) as raised:
            query.processAllAvailable()
    finally:
        query.stop()
    assert "max_parallelism: KG-16: the checkpoint has max parallelism 128, the query 64" in str(raised.value)


def test_sparks_own_repartition_continues_a_group_by_count(spark: Any, workdir: Path) -> None:
    """What Spark 4.2+ does itself (the documentation says so next to `rescale_state`): a
    `groupBy(user).count()` query on RocksDB at 2 state partitions, stopped,
    `spark._streamingCheckpointManager.repartition(checkpoint, 4)`, restarted on more files of the
    same directory (its checkpoint keeps the source's offsets): it runs at 4 state partitions and
    every count equals a batch count over all the files."""
    from chispa import assert_df_equality
    from flink_semantics.adapters.pyspark.key_groups import api
    from flink_semantics.adapters.pyspark.session import query_conf

    if not hasattr(spark, "_streamingCheckpointManager"):
        pytest.skip("StreamingCheckpointManager is Spark Classic's (4.2+): not in this session")
    source, ck = workdir / "events", workdir / "checkpoint"

    def start() -> Any:
        counts = spark.readStream.schema(EVENTS).json(str(source)).groupBy("user").count()
        writer = (counts.writeStream.format("memory").queryName("kg_native_counts").outputMode("complete")
                  .option("checkpointLocation", str(ck)))
        with query_conf(spark, api.query_confs(2)):  # RocksDB, 2 shuffle partitions for a new query
            return writer.start()

    write_events(source, "0.json", FIRST)
    query = start()
    try:
        query.processAllAvailable()
        write_events(source, "1.json", SECOND)
        query.processAllAvailable()
    finally:
        query.stop()
    spark._streamingCheckpointManager.repartition(str(ck), 4)
    spark.catalog.dropTempView("kg_native_counts")
    write_events(source, "2.json", THIRD)
    query = start()
    try:
        query.processAllAvailable()
        write_events(source, "3.json", FOURTH)
        query.processAllAvailable()
        partitions = query.lastProgress.stateOperators[0].numShufflePartitions
        counts = spark.table("kg_native_counts")
        truth = spark.read.schema(EVENTS).json(str(source)).groupBy("user").count()
        assert_df_equality(counts, truth, ignore_row_order=True, ignore_nullable=True)
    finally:
        query.stop()
        spark.catalog.dropTempView("kg_native_counts")
    assert partitions == 4


def test_a_row_of_no_configured_job_is_refused(spark: Any, workdir: Path) -> None:
    """With `jobs`, a row whose job column names no configured job fails the query with an error
    naming the column, the configured jobs and the row, instead of being dropped."""
    from flink_semantics.adapters.pyspark.key_groups import api
    from pyspark.errors import StreamingQueryException

    source = workdir / "events"
    source.mkdir()
    rows = [{"job": 0, "user": "ann", "amount": 1}, {"job": 5, "user": "bob", "amount": 2}]
    (source / "0.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    events = spark.readStream.schema(f"job int, {EVENTS}").json(str(source))
    totals = api.keyed_process(events, key="user", processor=running_totals(), parallelism=2,
                               jobs={0: api.JobSpec(), 1: api.JobSpec()})
    writer = totals.writeStream.format("noop").option("checkpointLocation", str(workdir / "ck"))
    query = api.start(writer, parallelism=2, spark=spark)
    try:
        with pytest.raises(StreamingQueryException) as raised:
            query.processAllAvailable()
    finally:
        query.stop()
    expected = 'job: a job of `jobs` (0, 1), not the row\'s: {"job":5,"user":"bob","amount":2}'
    assert expected in str(raised.value), str(raised.value)
