"""The key groups area on Spark: the cost of computing key groups, and what a rescale moves.

1. Key groups per second: `--keys` long keys (`spark.range`) and as many string keys
   (`concat('key-', id)`), through three native Spark expressions, each summed over all rows in one
   job: Spark's plain hash partitioning `pmod(hash(key), p)`; the `spark` profile (`hash`, `pmod`
   by the key group, then the subtask: adapters/pyspark/key_groups/spark.py); the `flink` profile
   (the JDK hash code and Flink's murmur finalizer written as SQL).  For scale, the same keys'
   Flink key groups in plain Python (adapters/pyspark/key_groups/engine.py) on `--python-keys`.
2. A rescale of `--keys` keys' keyed state from p to p' subtasks (maxP 128, flink profile): the
   redistribution as DataFrame operations (`stream.redistribute_keyed`: the join of old and new
   key-group ranges) written to the `noop` sink, in seconds; the fraction of keys whose subtask
   changes with key-group ranges, with Spark's hash partitioning (`pmod(hash, p)` -> `pmod(hash,
   p')`), the least any assignment of the same new ranges to the new subtask indexes moves (a
   maximum-weight matching of ranges to indexes, networkx, in key groups), and the least any
   placement moves, 1 - min(p, p') / max(p, p') (each new subtask can keep at most the share of one
   old subtask); and the most old subtasks a new subtask takes
   keys from ("sources"): with ranges a few contiguous key groups each, with hash partitioning
   every old subtask (which must then be scanned key by key).

    PYTHONPATH=. python bench/key_groups.py [--runs 3] [--keys 1000000]
    PYTHONPATH=. python bench/key_groups.py --stream [--schedules 500] [--runs 1] [--calls 1] \
        [--query-partitions 1]

`--stream` measures instead the conformance schedules per second through streaming queries:
`--schedules` drawn schedules of every supported feature (the rescaling properties' features)
through `key_groups/stream.py`'s `run_many` (the public API, one query per round of restores:
as many as the call's deepest chain of restores, each with at most `--query-partitions` state
partitions, default 1 as stream.QUERY_PARTITIONS) against the task-mode adapter (the engine in a
Spark task), and where run_many's time goes: query starts, micro-batches (the first of a round reads
the restored state with the state data source and redistributes it), query stops, outputs.
`--calls k` cuts the schedules into k run_many calls, as the suite does (a call per property:
about 50 to 70 schedules).

One warm Spark session (local[2]: adapters/pyspark/session.py).  Prints medians and ranges over
`--runs`.  The exit status is 0 whenever the benchmark ran.  Not part of the test run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import networkx as nx  # noqa: E402
from flink_semantics.adapters.pyspark.key_groups.api import MAXP, NEW_P, redistribute_keyed  # noqa: E402
from flink_semantics.adapters.pyspark.key_groups.engine import flink_key_group, key_group_range  # noqa: E402
from flink_semantics.adapters.pyspark.key_groups.spark import with_key_groups  # noqa: E402
from flink_semantics.adapters.pyspark.runner_session import runner_spark  # noqa: E402

MAX_P = 128
RESCALES = [(2, 3), (3, 2), (4, 8), (8, 4), (3, 5), (1, 4), (6, 1), (16, 128)]


def _summary(values: list[float], unit: str, digits: int = 1) -> str:
    runs = ", ".join(f"{v:,.{digits}f}" for v in values)
    return f"{statistics.median(values):,.{digits}f} {unit} (runs: {runs})"


def timed(runs: int, action: Callable[[], Any]) -> list[float]:
    """Seconds per run, after one run not timed (code generation, caches)."""
    action()
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        out.append(time.perf_counter() - start)
    return out


def keys(spark: Any, n: int, type_: str) -> Any:
    from pyspark.sql import functions as F

    ids = spark.range(n)
    key = F.col("id").cast("string") if type_ == "long" else F.concat(F.lit("key-"), F.col("id"))
    return ids.select(key.alias("key"), F.lit(type_).alias("type"))


def rates(spark: Any, n: int, runs: int, p: int = 4) -> None:
    from pyspark.sql import functions as F

    print(f"1. key groups per second, {n:,} keys of each type, maxP {MAX_P}, p {p}")
    for type_ in ("long", "string"):
        df = keys(spark, n, type_).cache()
        df.count()
        typed = F.col("key").cast("bigint") if type_ == "long" else F.col("key")
        methods = {
            "plain pmod(hash(key), p)": df.select(F.pmod(F.hash(typed), F.lit(p)).alias("subtask")),
            "spark profile (key group, subtask)": with_key_groups(df, MAX_P, p, "spark"),
            "flink profile (JDK hash code, murmur)": with_key_groups(df, MAX_P, p, "flink"),
        }
        for name, frame in methods.items():
            seconds = timed(runs, lambda f=frame: f.agg(F.sum("subtask")).collect())
            print(f"   {type_:6} {name:40} {_summary([n / s / 1e6 for s in seconds], 'M keys/s', 2)}")
        df.unpersist()
    python_keys = min(n, 100_000)
    sample = list(range(python_keys))
    seconds = timed(runs, lambda: [flink_key_group(k, "long", MAX_P) for k in sample])
    print(f"   long   {'flink profile in plain Python':40} "
          f"{_summary([python_keys / s / 1e6 for s in seconds], 'M keys/s', 2)}")


def rescales(spark: Any, n: int, runs: int) -> None:
    from pyspark.sql import functions as F

    print(f"2. rescales of {n:,} keys' keyed state (maxP {MAX_P}, flink profile)")
    print(f"   {'':9} {'':30} {'moved':^35} {'sources':^17}")
    print(f"   {'p -> p2':9} {'redistribution (noop sink)':30} {'ranges':>8} {'best':>8} {'hash':>8} "
          f"{'minimum':>8} {'ranges':>8} {'hash':>8}")
    base = keys(spark, n, "long")
    for p, p2 in RESCALES:
        state = (with_key_groups(base, MAX_P, p, "flink")
                 .select(F.col("subtask").alias("partition"), "key_group", "type", "key",
                         F.lit(1).cast("long").alias("value"))
                 .cache())
        state.count()
        moved = (redistribute_keyed(state.withColumn(NEW_P, F.lit(p2)).withColumn(MAXP, F.lit(MAX_P)), F)
                 .select(F.col("kg_new").alias("new"), "key_group", "type", "key", "value"))
        seconds = timed(runs, lambda m=moved: m.write.format("noop").mode("overwrite").save())
        pairs = moved.join(state.select("key", F.col("partition").alias("old")), "key")
        check = pairs.agg(F.count("*").alias("n"),
                          F.sum((F.col("new") != F.col("old")).cast("int")).alias("moved")).collect()[0]
        assert check["n"] == n, f"{check['n']} keys after the rescale, {n} before"
        h = F.hash(F.col("key").cast("bigint"))
        hashed = base.select(F.pmod(h, F.lit(p)).alias("old"), F.pmod(h, F.lit(p2)).alias("new"))
        hash_moved = hashed.agg(F.avg((F.col("old") != F.col("new")).cast("double"))).collect()[0][0]
        minimum = 1 - min(p, p2) / max(p, p2)
        sources = max_sources(pairs), max_sources(hashed)
        print(f"   {f'{p} -> {p2}':9} {_summary(seconds, 's', 2):30} {check['moved'] / n:>8.1%} "
              f"{best_range_assignment(MAX_P, p, p2):>8.1%} {hash_moved:>8.1%} {minimum:>8.1%} "
              f"{sources[0]:>8} {sources[1]:>8}")
        state.unpersist()


def best_range_assignment(max_p: int, p: int, p2: int) -> float:
    """The fraction of key groups that must move when the new ranges (Flink's p2 contiguous ranges)
    may go to the new subtask indexes in any order: 1 - the maximum-weight matching of ranges to
    indexes, weighted by the overlap of the range with the old range of the same index."""
    g = nx.Graph()
    for j in range(p2):
        first, last = key_group_range(max_p, p2, j)
        for k in range(min(p, p2)):
            old_first, old_last = key_group_range(max_p, p, k)
            overlap = min(last, old_last) - max(first, old_first) + 1
            if overlap > 0:
                g.add_edge(("range", j), ("index", k), weight=overlap)
    kept = sum(g.edges[e]["weight"] for e in nx.max_weight_matching(g))
    return 1 - kept / max_p


def max_sources(pairs: Any) -> int:
    """The most old subtasks any new subtask takes keys from (columns `old`, `new`)."""
    from pyspark.sql import functions as F

    return int(pairs.groupBy("new").agg(F.countDistinct("old").alias("k")).agg(F.max("k")).collect()[0][0])


def drawn_schedules(n: int) -> list[Any]:
    """n distinct drawn schedules of the rescaling properties' features (what pyspark-stream runs)."""
    from drawn import drawn
    from flink_semantics.conformance.areas.key_groups import Features, schedules

    features = Features(spark_hash=True, operator_state=True, rescale=True, refusals=True,
                        lone_surrogates=False, many_subtasks=False, max_steps=20)
    return drawn(schedules(features), n)


def bench_stream(spark: Any, n: int, runs: int, calls: int = 1, partitions: int = 2) -> None:
    import shutil
    import tempfile
    from pathlib import Path

    from flink_semantics.adapters.pyspark.adapter import PySparkAdapter
    from flink_semantics.adapters.pyspark.key_groups.stream import run_many

    batch = drawn_schedules(n)
    task_mode = PySparkAdapter(spark=spark)
    print(f"cpus {os.cpu_count()}, load before {os.getloadavg()[0]:.1f}; {len(batch)} drawn schedules "
          f"in {calls} run_many call(s), at most {partitions} state partitions a query")
    rates: dict[str, list[float]] = {"stream (run_many)": [], "task mode (PySparkAdapter)": []}
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="bench-kg-"))
        timings: dict[str, float] = {}
        start = time.perf_counter()
        try:
            for k in range(calls):  # the suite's calls: one per property
                run_many(spark, batch[k * len(batch) // calls:(k + 1) * len(batch) // calls], root / str(k),
                         timings, partitions)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        rates["stream (run_many)"].append(len(batch) / (time.perf_counter() - start))
        counts = ("queries", "micro-batches run")
        spent = [f"{k} {v:.1f}" + ("" if k in counts else " s") for k, v in timings.items()]
        print("   run_many:", ", ".join(spent))
        start = time.perf_counter()
        task_mode.run_batch(batch)
        rates["task mode (PySparkAdapter)"].append(len(batch) / (time.perf_counter() - start))
    task_mode.close()
    for name, r in rates.items():
        print(f"   {name:<30} {_summary(r, 'schedules/s', 2)}")
    print(f"load after {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--stream", action="store_true", help="schedules/s through run_many vs task mode")
    parser.add_argument("--schedules", type=int, default=500, help="drawn schedules (--stream)")
    parser.add_argument("--calls", type=int, default=1, help="run_many calls (--stream)")
    parser.add_argument("--query-partitions", type=int, default=1,
                        help="the most state partitions of a round's query (--stream; "
                             "stream.QUERY_PARTITIONS)")
    args = parser.parse_args()
    spark = runner_spark()
    if args.stream:
        bench_stream(spark, args.schedules, args.runs, args.calls, args.query_partitions)
        return
    print(f"cpus {os.cpu_count()}, load before {os.getloadavg()[0]:.1f}")
    rates(spark, args.keys, args.runs)
    rescales(spark, args.keys, args.runs)
    print(f"load after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
