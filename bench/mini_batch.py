"""The mini-batch area on Spark: state accesses per input row and rows per second, mini-batch on
against off, for uniform and skewed keys.

A changelog of `--rows` rows (well formed: `+I` of a key's new value, and now and then a `-U`/`+U`
pair replacing a value the key holds) over `--keys` keys, either uniform or skewed (a Zipf law of
exponent 1.2: the hottest key takes about a fifth of the rows), hash-partitioned by key into
`--partitions` Spark partitions, each kept in input order (`sortWithinPartitions`).  Each Spark task
(`mapInArrow`) runs its partition through the job of adapters/pyspark/mini_batch/engine.py
(`Pipeline`: assigner, bundles, local and global aggregation, keyed state) with processing time
advancing one millisecond per row, and counts the aggregation's keyed-state accesses (a read per
key and bundle, and a write or a delete; mini-batch off: one of each per row).  Per configuration
it prints the rows per second of the job (wall time of the job, Spark's start-up excluded by a warm
session and one untimed run), state accesses per input row, and changelog rows emitted per input
row:

* `off`: mini-batch off, one row at a time (MB-24);
* `on size=N`: mini-batch on, processing-time assigner, allow-latency 1 s, size N (MB-4, MB-10);
* `two-phase size=N`: local-global aggregation (MB-25, MB-26): the global state is accessed per
  key and global bundle, after the local phase has reduced each local bundle to one row per key.

    PYTHONPATH=. python bench/mini_batch.py [--runs 3] [--rows 400000] [--keys 10000] [--partitions 2]

`--stream` measures instead the conformance schedules per second through Structured Streaming: N
drawn schedules of the suite's mini-batch properties (`--schedules`, default 500) through
`mini_batch/stream.py`'s `run_many` (all of them in one query per round of incarnations, through
`changelog_aggregate`) against the task-mode adapter (`PySparkAdapter.run_batch`) on the same
schedules, and where the streaming run's time goes: Spark's durations of the micro-batches
(query planning, addBatch: the stages and the sink, the offset and commit logs), the rest of each
query's life (start, initial state, stop), and the driver (planning, output).

    PYTHONPATH=. python bench/mini_batch.py --stream [--schedules 500] [--runs 3] [--stream-partitions 2]

One warm Spark session (local[2]: adapters/pyspark/session.py).  Prints medians and ranges over
`--runs`.  The exit status is 0 whenever the benchmark ran.  Not part of the test run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flink_semantics.adapters.pyspark.mini_batch.engine import Pipeline, Settings  # noqa: E402
from flink_semantics.adapters.pyspark.runner_session import runner_spark  # noqa: E402
from flink_semantics.adapters.pyspark.timers import VirtualClock, VirtualTimers  # noqa: E402
from flink_semantics.conformance.progress import Progress  # noqa: E402

CONFIGS: list[tuple[str, Settings]] = [
    ("off", Settings()),
    ("on size=10", Settings(enabled=True, allow_latency=1000, size=10)),
    ("on size=100", Settings(enabled=True, allow_latency=1000, size=100)),
    ("on size=1000", Settings(enabled=True, allow_latency=1000, size=1000)),
    ("two-phase size=100", Settings(enabled=True, allow_latency=1000, size=100, two_phase=True)),
    ("two-phase size=1000", Settings(enabled=True, allow_latency=1000, size=1000, two_phase=True)),
]


class CountingState(dict):  # type: ignore[type-arg]
    """The aggregation's keyed state, counting reads, writes and deletes."""

    accesses = 0

    def get(self, key: Any, default: Any = None) -> Any:
        self.accesses += 1
        return super().get(key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.accesses += 1
        super().__setitem__(key, value)

    def pop(self, key: Any, default: Any = None) -> Any:
        self.accesses += 1
        return super().pop(key, default)


class _Sink:
    def __init__(self) -> None:
        self.rows = 0

    def element(self, key: int, item: Any) -> None:
        self.rows += 1

    def watermark(self, timestamp: int) -> None:
        pass

    def status(self, idle: bool) -> None:
        pass


def run_partition(settings: Settings, batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    state = CountingState()
    timers, sink = VirtualTimers(VirtualClock()), _Sink()
    job = Pipeline(settings, state, timers, sink)
    rows = 0
    for b in batches:
        for key, kind, value in zip(b.column("key").to_pylist(), b.column("kind").to_pylist(),
                                    b.column("value").to_pylist()):
            rows += 1
            timers.advance(1, lambda: True)  # one millisecond per row
            job.row(key, kind, value)
    job.end()
    yield pa.RecordBatch.from_pydict({"rows": [rows], "accesses": [state.accesses], "out": [sink.rows]})


def changelog(n: int, keys: int, skewed: bool, seed: int = 7) -> list[tuple[int, int, str, int]]:
    """(seq, key, kind, value): +I of a new value, or (one in five) -U and +U replacing a held one."""
    rng = random.Random(seed)
    weights = [1 / (k + 1) ** 1.2 for k in range(keys)] if skewed else None
    held: dict[int, list[int]] = {}
    out: list[tuple[int, int, str, int]] = []
    while len(out) < n:
        key = rng.choices(range(keys), weights)[0] if skewed else rng.randrange(keys)
        values = held.setdefault(key, [])
        if values and rng.random() < 0.2:
            old = values.pop(rng.randrange(len(values)))
            out.append((len(out), key, "-U", old))
            new = rng.randrange(1000)
            values.append(new)
            out.append((len(out), key, "+U", new))
        else:
            v = rng.randrange(1000)
            values.append(v)
            out.append((len(out), key, "+I", v))
    return out[:n]


def measure(spark: Any, df: Any, settings: Settings) -> tuple[float, int, int, int]:
    """Seconds of one job, input rows, state accesses, changelog rows."""
    import functools

    task = functools.partial(run_partition, settings)
    start = time.perf_counter()
    got = df.mapInArrow(task, "rows long, accesses long, out long").collect()
    seconds = time.perf_counter() - start
    return seconds, sum(r["rows"] for r in got), sum(r["accesses"] for r in got), sum(r["out"] for r in got)


def drawn_schedules(n: int) -> list[Any]:
    """n distinct schedules drawn as the suite's mini-batch properties draw them (their Features)."""
    from drawn import drawn
    from flink_semantics.conformance.areas.mini_batch import Features, schedules
    from hypothesis import strategies as st

    features = [Features(enabled=False, max_steps=24), Features(max_steps=30),
                Features(rowtime=True, max_steps=30),
                Features(two_phase=True, max_steps=30), Features(checkpoints=True, max_steps=30),
                Features(status=True, max_steps=30),
                Features(rowtime=True, two_phase=True, checkpoints=True, status=True, max_steps=40)]
    return drawn(st.sampled_from(features).flatmap(schedules), n)


def bench_stream(spark: Any, n: int, runs: int, partitions: int) -> None:
    import shutil
    import tempfile
    from pathlib import Path

    from flink_semantics.adapters.pyspark.adapter import PySparkAdapter
    from flink_semantics.adapters.pyspark.mini_batch.stream import StreamRun

    batch = drawn_schedules(n)
    task_mode = PySparkAdapter(spark=spark)
    load_before = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    warm = Path(tempfile.mkdtemp())
    StreamRun(spark, batch[:20], warm).run()  # warm-up (Python workers, the JVM's code), not measured
    shutil.rmtree(warm, ignore_errors=True)
    rates: dict[str, list[float]] = {"stream (run_many)": [], "task mode (PySparkAdapter)": []}
    timing: dict[str, float] = {}
    total = 0.0
    for _ in range(runs):
        root = Path(tempfile.mkdtemp())
        t0 = time.perf_counter()
        run = StreamRun(spark, batch, root, partitions=partitions)
        run.run()
        seconds = time.perf_counter() - t0
        shutil.rmtree(root, ignore_errors=True)
        rates["stream (run_many)"].append(len(batch) / seconds)
        total += seconds
        for k, v in run.timing.items():
            timing[k] = timing.get(k, 0.0) + v
        t0 = time.perf_counter()
        task_mode.run_batch(batch)
        rates["task mode (PySparkAdapter)"].append(len(batch) / (time.perf_counter() - t0))
    load_after = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n{len(batch)} drawn schedules, {runs} runs, {run.queries} queries ({run.planned} micro-batches, "
          f"{partitions} shuffle partitions) "
          f"a run; load average {load_before} before, {load_after} after")
    for name, r in rates.items():
        print(f"  {name:<28}{statistics.median(r):>8.1f} schedules/s (min {min(r):.1f}, max {max(r):.1f})")
    def t(k: str) -> float:
        return timing.get(k, 0.0)

    batches = t("triggerExecution")
    logs = t("walCommit") + t("commitOffsets")
    print("where a streaming run's time goes (mean seconds a run):")
    parts = [("micro-batches: query planning", t("queryPlanning")),
             ("micro-batches: addBatch (stages, state store, sink)", t("addBatch")),
             ("micro-batches: offset and commit logs", logs),
             ("micro-batches: other", batches - t("queryPlanning") - t("addBatch") - logs),
             ("queries: start, stop, between batches", t("query") - batches),
             ("driver: plan, script, traces", total - t("query"))]
    for name, seconds in parts:
        print(f"  {name:<55}{seconds / runs:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--stream", action="store_true",
                        help="schedules/s through streaming queries (run_many)")
    parser.add_argument("--schedules", type=int, default=500, help="drawn schedules per run (--stream)")
    parser.add_argument("--stream-partitions", type=int, default=2,
                        help="shuffle partitions of the streaming queries (--stream; run_many's: 2)")
    args = parser.parse_args()
    spark = runner_spark()
    if args.stream:
        bench_stream(spark, args.schedules, args.runs, args.stream_partitions)
        return
    print(f"{args.rows:,} rows, {args.keys:,} keys, {args.partitions} partitions, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}")
    progress = Progress(2 * len(CONFIGS) * (args.runs + 1), "bench mini_batch", every=0)
    done = 0
    for skewed in (False, True):
        data = changelog(args.rows, args.keys, skewed)
        df = (spark.createDataFrame(data, "seq long, key long, kind string, value long")
              .repartition(args.partitions, "key").sortWithinPartitions("seq").cache())
        df.count()
        hottest = max(sum(1 for r in data if r[1] == k) for k in range(min(args.keys, 50))) / len(data)
        print(f"\n{'skewed' if skewed else 'uniform'} keys (hottest key {hottest:.2%} of the rows)")
        print(f"  {'configuration':<22} {'rows/s':>30} {'state accesses/row':>19} {'changelog rows/row':>19}")
        for name, settings in CONFIGS:
            measure(spark, df, settings)  # not timed: the Python workers warm up
            results = [measure(spark, df, settings) for _ in range(args.runs)]
            done += args.runs + 1
            progress.update(done, f"{'skewed' if skewed else 'uniform'} keys, {name}")
            rates = [rows / seconds for seconds, rows, _, _ in results]
            _, rows, accesses, out = results[0]
            spread = f"{min(rates):,.0f}-{max(rates):,.0f}"
            print(f"  {name:<22} {statistics.median(rates):>12,.0f} ({spread:>15}) "
                  f"{accesses / rows:>19.3f} {out / rows:>19.3f}")
        df.unpersist()


if __name__ == "__main__":
    main()
