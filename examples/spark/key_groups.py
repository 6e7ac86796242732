"""Restart a stateful Spark streaming query at another parallelism, its state moved by key group.

A running count of clicks per user, kept in Spark's state store, over JSON lines files that land in
a directory while the query runs.  With `key_groups.api` each user's count lives in one of 128 key
groups, on the subtask (state partition) Flink would give it (KG-1..KG-3); the query at parallelism
2 is stopped, its state read from the checkpoint (which also says it ran at 2 with 128 key groups)
and moved as whole key groups to 3 subtasks (FLIP-8: KG-12, KG-13), and a new query at parallelism 3
goes on counting the clicks that land afterwards.

Spark 4.2+ can itself repartition a stopped query's state offline
(`spark._streamingCheckpointManager.repartition(checkpoint, n)`, Spark Classic, RocksDB), each key
moved to `pmod(hash(key), n)`; what this adds is Flink's placement (contiguous key-group ranges),
its maximum-parallelism rules, operator state redistribution and a restore of any committed batch
into a new checkpoint.  A new checkpoint has new source positions: the new query reads the files
written after the rescale from their own directory.

    PYTHONPATH=. python examples/spark/key_groups.py

Runs in well under a minute on a laptop (local Spark), prints the counts and where each user's
state lives, and checks both.  Temporary directories are removed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from flink_semantics.adapters.pyspark.key_groups import api
from pyspark.sql import SparkSession

MAX_P = 128  # key groups: fixed for the life of the state (KG-16); the parallelism may change up to it
FIRST = [["ann", "bob", "ann", "cy"], ["dee", "bob", "ann", "eve"]]  # files of clicks before the rescale
MORE = [["bob", "fay", "ann"], ["cy", "gus", "eve", "eve"]]  # and after it


class RunningCount(api.KeyedProcessor):
    """Emits (user, clicks so far, the subtask that counted) for each click."""

    state_schema = "clicks long"
    output_schema = "user string, clicks long, subtask int"

    def process(self, key, row, state, ctx):
        clicks = (state.get() or (0,))[0] + 1
        state.update((clicks,))
        return [(key, clicks, ctx.partition)]


def land(directory: Path, n: int, users: list[str]) -> None:
    """A file of clicks arriving in the watched directory (written aside, then renamed into it)."""
    staged = directory.parent / f".{directory.name}-{n}.json"
    staged.write_text("".join(json.dumps({"user": u}) + "\n" for u in users))
    os.replace(staged, directory / f"part-{n}.json")


def run(spark, events: Path, checkpoint: Path, parallelism: int, files: list[list[str]],
        initial=None) -> list:
    """The query over `events` while `files` land in it one by one, then stopped: its output."""
    events.mkdir()
    clicks = spark.readStream.schema("user string").json(str(events))
    counts = api.keyed_process(clicks, key="user", processor=RunningCount(), parallelism=parallelism,
                               max_parallelism=MAX_P, initial_state=initial)
    name = f"counts_p{parallelism}"
    writer = (counts.writeStream.format("memory").queryName(name).outputMode("append")
              .option("checkpointLocation", str(checkpoint)))
    query = api.start(writer, parallelism=parallelism, spark=spark)
    try:
        for n, users in enumerate(files):
            land(events, n, users)
            query.processAllAvailable()  # every file so far counted and committed
    finally:
        query.stop()
    return spark.table(name).collect()


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this interpreter
    work = Path(tempfile.mkdtemp(prefix="flink-key-groups-example-"))
    spark = (SparkSession.builder.master("local[2]").appName("flink-key-groups-example")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    try:
        before = run(spark, work / "events", work / "checkpoint-p2", 2, FIRST)

        # Rescale 2 -> 3: the state as of the last committed micro-batch, moved by key group; the
        # old parallelism and key groups are read from the checkpoint (a wrong one is a ValueError).
        print("the checkpoint ran (parallelism, max parallelism, state partitions, hash):",
              api.checkpoint_config(spark, str(work / "checkpoint-p2"))[0])
        state = api.rescale_state(spark, str(work / "checkpoint-p2"), new_parallelism=3,
                                  state_schema=RunningCount.state_schema)
        after = run(spark, work / "more", work / "checkpoint-p3", 3, MORE, initial=state)

        stored = (spark.read.format("statestore").option("stateVarName", "keyed")
                  .load(str(work / "checkpoint-p3"))
                  .selectExpr("user_map_key.key AS user", "user_map_value.clicks AS clicks",
                              "partition_id").collect())
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    print("at parallelism 2:", sorted((r.user, r.clicks, r.subtask) for r in before))
    print("at parallelism 3:", sorted((r.user, r.clicks, r.subtask) for r in after))
    totals = Counter(u for users in FIRST + MORE for u in users)
    # The counts go on from where the first query left them: the last count of each user is the total.
    last = {r.user: r.clicks for r in sorted(after, key=lambda r: r.clicks)}
    assert all(last[u] == totals[u] for users in MORE for u in users), last
    for r in stored:
        # Each user's state lives in the state partition of its key group's subtask: Flink's
        # murmur hash of the JDK hash code (KG-1, KG-2, KG-11), key group * 3 div 128 (KG-3).
        subtask = api.subtask_of(r.user, "string", MAX_P, 3)
        print(f"{r.user}: {r.clicks} clicks, state in partition {r.partition_id} (Flink's subtask {subtask})")
        assert r.partition_id == subtask and r.clicks == totals[r.user], r
    assert {r.user for r in stored} == set(totals)
    assert all(r.subtask == api.subtask_of(r.user, "string", MAX_P, 2) for r in before)
    print("ok: counts continued across the rescale, every user's state on Flink's subtask")


if __name__ == "__main__":
    main()
