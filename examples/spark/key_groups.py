"""Restart a stateful Spark streaming query at another parallelism, its state moved by key group.

A running count of clicks per user, kept in Spark's state store.  Spark keeps a stateful query's
state partitions fixed for the life of its checkpoint (a new `spark.sql.shuffle.partitions` is
ignored on restart), so the query cannot scale out.  With `key_groups.api` each user's count lives
in one of 128 key groups, on the subtask (state partition) Flink would give it (KG-1..KG-3); the
query at parallelism 2 is stopped, its state read from the checkpoint and moved as whole key
groups to 3 subtasks (FLIP-8: KG-12, KG-13), and a new query at parallelism 3 goes on counting.

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
FIRST = ["ann", "bob", "ann", "cy", "dee", "bob", "ann", "eve"]  # users' clicks before the rescale
MORE = ["bob", "fay", "ann", "cy", "gus", "eve", "eve"]  # and after it


class RunningCount(api.KeyedProcessor):
    """Emits (user, clicks so far, the subtask that counted) for each click."""

    state_schema = "clicks long"
    output_schema = "user string, clicks long, subtask int"

    def process(self, key, row, state, ctx):
        clicks = (state.get() or (0,))[0] + 1
        state.update((clicks,))
        return [(key, clicks, ctx.partition)]


def run(spark, events: Path, checkpoint: Path, parallelism: int, initial=None) -> list:
    """One run of the query over what `events` holds (availableNow), then stopped: its output."""
    clicks = spark.readStream.schema("user string").json(str(events))
    counts = api.keyed_process(clicks, key="user", processor=RunningCount(), parallelism=parallelism,
                               max_parallelism=MAX_P, initial_state=initial)
    name = f"counts_p{parallelism}"
    writer = (counts.writeStream.format("memory").queryName(name).outputMode("append")
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    api.start(writer, parallelism=parallelism, spark=spark).awaitTermination()
    return spark.table(name).collect()


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this interpreter
    work = Path(tempfile.mkdtemp(prefix="flink-key-groups-example-"))
    spark = (SparkSession.builder.master("local[2]").appName("flink-key-groups-example")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    try:
        (work / "events").mkdir()
        (work / "events" / "part-0.json").write_text("".join(json.dumps({"user": u}) + "\n" for u in FIRST))
        before = run(spark, work / "events", work / "checkpoint-p2", parallelism=2)

        # Rescale 2 -> 3: the state as of the last committed micro-batch, moved by key group.
        state = api.rescale_state(spark, str(work / "checkpoint-p2"), parallelism=2, max_parallelism=MAX_P,
                                  new_parallelism=3, state_schema=RunningCount.state_schema)
        (work / "more").mkdir()
        (work / "more" / "part-0.json").write_text("".join(json.dumps({"user": u}) + "\n" for u in MORE))
        after = run(spark, work / "more", work / "checkpoint-p3", parallelism=3, initial=state)

        stored = (spark.read.format("statestore").option("stateVarName", "keyed")
                  .load(str(work / "checkpoint-p3"))
                  .selectExpr("user_map_key.key AS user", "user_map_value.clicks AS clicks",
                              "partition_id").collect())
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    print("at parallelism 2:", sorted((r.user, r.clicks, r.subtask) for r in before))
    print("at parallelism 3:", sorted((r.user, r.clicks, r.subtask) for r in after))
    totals = Counter(FIRST + MORE)
    # The counts go on from where the first query left them: the last count of each user is the total.
    last = {r.user: r.clicks for r in sorted(after, key=lambda r: r.clicks)}
    assert all(last[u] == totals[u] for u in set(MORE)), last
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
