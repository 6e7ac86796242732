"""Throughput of async_map (adapters/pyspark/async_io.py) against Little's law.

An external service with a fixed latency L (a real `asyncio.sleep(L)`) and at most C calls in
flight per partition can serve at most C / L records per second per partition (Little's law:
10,000 rec/s for C = 100 and L = 10 ms).  The benchmark measures, per partition, the time
from the first call to the last completion (so Spark's job overhead is left out; the wall
time of the whole job is shown too) and compares it with that bound, and with a synchronous
`mapInPandas` baseline that calls `time.sleep(L)` per record (bound 1 / L = 100 rec/s).

Each of `--runs` runs measures the three variants in turn in one warm Spark session; the
output gives the median, min and max over the runs, and the machine's load before and after.

    python bench/async_io.py [--runs 5] [--records 20000] [--partitions 1] [--capacity 100]
                             [--latency 0.010] [--target 0.90] [--strict]

    python bench/async_io.py --stream [--schedules 500] [--runs 3]

`--stream` measures instead the conformance schedules per second through streaming queries: N
schedules drawn from the suite's strategies (every property's features) run through
`async_io/stream.py`'s `run_many` (async_map in streaming queries: one, and one more per restart
round of the schedules with crashes and restores) against the task-mode adapter
(`PySparkAdapter.run_batch`: the operator in Spark tasks on the virtual clock of runtime.py).

The exit status is 0 whenever the benchmark ran: a figure below `--target` is reported, not
an error, unless `--strict` is given.  Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flink_semantics.adapters.pyspark.async_io import async_map  # noqa: E402
from flink_semantics.adapters.pyspark.runner_session import runner_spark  # noqa: E402
from flink_semantics.conformance.progress import Progress  # noqa: E402


def _measure(out: Any) -> tuple[float, float]:
    """Collect `out` (column t: the start and end instants of each call, two rows per record).

    Returns (records/s per partition, median over partitions; wall seconds of the job).
    """
    t0 = time.perf_counter()
    rows = out.selectExpr("spark_partition_id() AS part", "t").collect()
    wall = time.perf_counter() - t0
    by_part: dict[int, list[float]] = {}
    for r in rows:
        by_part.setdefault(r.part, []).append(r.t)
    return statistics.median(len(ts) / 2 / (max(ts) - min(ts)) for ts in by_part.values()), wall


def bench_async(spark: Any, records: int, partitions: int, capacity: int, latency: float,
                ordered: bool) -> tuple[float, float]:
    async def service(v: int) -> list[float]:
        start = time.perf_counter()
        await asyncio.sleep(latency)
        return [start, time.perf_counter()]  # two outputs: when the call started and ended

    df = spark.range(0, records * partitions, numPartitions=partitions).selectExpr("id AS value")
    out = async_map(df, service, capacity=capacity, ordered=ordered, result_type="double")
    return _measure(out.selectExpr("value AS t"))


def bench_sync(spark: Any, records: int, partitions: int, latency: float) -> tuple[float, float]:
    """The synchronous baseline: one blocking call per record in mapInPandas."""
    import pandas as pd

    def task(batches: Any) -> Any:
        for pdf in batches:
            out = []
            for _v in pdf["value"]:
                start = time.perf_counter()
                time.sleep(latency)
                out += [start, time.perf_counter()]
            yield pd.DataFrame({"t": out})

    df = spark.range(0, records * partitions, numPartitions=partitions).selectExpr("id AS value")
    return _measure(df.mapInPandas(task, "t double"))


def drawn_schedules(n: int) -> list[Any]:
    """n distinct schedules drawn as the suite's async I/O properties draw them (checkpoints, crashes
    and restores included, as test_checkpoint_and_restore draws them)."""
    from drawn import drawn
    from flink_semantics.conformance.areas.async_io import Features, schedules
    from hypothesis import strategies as st

    features = [Features(), Features(timeouts=True, errors=True, max_steps=16),
                Features(timeouts=True, retries=True, errors=True, max_steps=18),
                Features(errors=True, nulls=True), Features(max_capacity=3, max_steps=18),
                Features(statuses=True),
                Features(checkpoints=True, errors=True, timeouts=True, retries=True, max_steps=20)]
    return drawn(st.sampled_from(features).flatmap(schedules), n)


def stream_shape(batch: list[Any]) -> tuple[int, int]:
    """The queries (rounds: a restart each after the first) and micro-batches run_many runs."""
    from flink_semantics.adapters.pyspark.async_io.stream import config_of, plan

    plans = []
    for sid, s in enumerate(batch):
        try:
            config_of(s.config)
        except ValueError:
            continue
        plans.append(plan(sid, s))
    rounds = max((len(p.incarnations) for p in plans), default=0)
    batches = sum(max(len(p.incarnations[k]) for p in plans if k < len(p.incarnations))
                  for k in range(rounds))
    return rounds, batches


def bench_stream(spark: Any, n: int, runs: int) -> int:
    import shutil
    import tempfile
    from pathlib import Path

    from flink_semantics.adapters.pyspark.adapter import PySparkAdapter
    from flink_semantics.adapters.pyspark.async_io.stream import run_many

    batch = drawn_schedules(n)
    task_mode = PySparkAdapter(spark=spark)
    load_before = _load()
    warm = Path(tempfile.mkdtemp())
    run_many(spark, batch[:20], warm)  # warm-up, not measured
    shutil.rmtree(warm, ignore_errors=True)
    rates: dict[str, list[float]] = {"stream (run_many)": [], "task mode (PySparkAdapter)": []}
    for _ in range(runs):
        root = Path(tempfile.mkdtemp())
        t0 = time.perf_counter()
        run_many(spark, batch, root)
        rates["stream (run_many)"].append(len(batch) / (time.perf_counter() - t0))
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        task_mode.run_batch(batch)
        rates["task mode (PySparkAdapter)"].append(len(batch) / (time.perf_counter() - t0))
    print(f"\n{len(batch)} drawn schedules, {runs} runs; load average {load_before} before, {_load()} after")
    queries, micro_batches = stream_shape(batch)
    print(f"run_many: {queries} queries (each after the first started from a copy of the previous one's "
          f"checkpoint), {micro_batches} micro-batches in all")
    for name, r in rates.items():
        print(f"{name:<30}{statistics.median(r):>10.1f} schedules/s (min {min(r):.1f}, max {max(r):.1f})")
    return 0


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="runs of each variant; the median is reported")
    p.add_argument("--records", type=int, default=20000, help="records per partition (async runs)")
    p.add_argument("--sync-records", type=int, default=200, help="records per partition (baseline)")
    p.add_argument("--partitions", type=int, default=1,
                   help="partitions (default 1: on 2 cores the JVM needs the other one)")
    p.add_argument("--capacity", type=int, default=100)
    p.add_argument("--latency", type=float, default=0.010, help="service latency in seconds")
    p.add_argument("--target", type=float, default=0.90, help="expected fraction of the bound (reported)")
    p.add_argument("--strict", action="store_true", help="exit 1 when async_map's median misses the target")
    p.add_argument("--stream", action="store_true", help="schedules/s through streaming queries (run_many)")
    p.add_argument("--schedules", type=int, default=500, help="drawn schedules per run (--stream)")
    a = p.parse_args(argv)
    if a.stream:
        return bench_stream(runner_spark(), a.schedules, a.runs)

    load_before = _load()
    spark = runner_spark()
    bench_async(spark, 500, a.partitions, a.capacity, a.latency, True)  # warm-up, not measured

    bound, sync_bound = a.capacity / a.latency, 1 / a.latency
    variants: list[tuple[str, int, float, Any]] = [
        ("async_map ordered", a.records, bound,
         lambda: bench_async(spark, a.records, a.partitions, a.capacity, a.latency, True)),
        ("async_map unordered", a.records, bound,
         lambda: bench_async(spark, a.records, a.partitions, a.capacity, a.latency, False)),
        ("mapInPandas + time.sleep", a.sync_records, sync_bound,
         lambda: bench_sync(spark, a.sync_records, a.partitions, a.latency)),
    ]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, *_ in variants}
    progress = Progress(a.runs * len(variants), "bench async_io", every=0)
    for i in range(a.runs):  # interleaved, so that a change of load affects every variant alike
        for j, (name, _n, _bound, run) in enumerate(variants):
            results[name].append(run())
            progress.update(i * len(variants) + j + 1, f"run {i + 1} of {a.runs}: {name}")
    load_after = _load()

    print(f"\n{a.runs} runs, {a.partitions} partition(s), capacity {a.capacity}, "
          f"latency {a.latency * 1000:g} ms; Little's-law bound per partition: {bound:,.0f} rec/s "
          f"(baseline: {sync_bound:,.0f})")
    print(f"machine: {os.cpu_count()} CPUs, load average (1 / 5 / 15 min) {load_before} before, "
          f"{load_after} after\n")
    print(f"{'run':<26}{'rec/partition':>14}{'rec/s/partition':>17}{'% of bound':>12}"
          f"{'min-max %':>14}{'job wall s':>12}")
    rates, pcts = {}, {}
    for name, n, b, _run in variants:
        rates[name] = statistics.median(rate for rate, _ in results[name])
        pcts[name] = 100 * rates[name] / b
        each = [100 * rate / b for rate, _ in results[name]]
        wall = statistics.median(wall for _, wall in results[name])
        print(f"{name:<26}{n:>14,}{rates[name]:>17,.0f}{pcts[name]:>11.1f}%"
              f"{f'{min(each):.1f}-{max(each):.1f}':>14}{wall:>12.2f}")
    print("(medians over the runs; each run's figure is the median over partitions)")

    worst = min(pcts["async_map ordered"], pcts["async_map unordered"])
    slowest = min(rates["async_map ordered"], rates["async_map unordered"])
    print(f"\nasync_map: {worst:.1f}% of the bound (median, the lower of ordered and unordered); "
          f"speed-up over the synchronous baseline: {slowest / rates['mapInPandas + time.sleep']:.0f}x")
    missed = round(worst, 1) < 100 * a.target  # as printed
    if missed:
        print(f"below the {100 * a.target:.0f}% target: the figures depend on the machine's load "
              f"(load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs after the runs)")
    return 1 if missed and a.strict else 0


if __name__ == "__main__":
    sys.exit(main())
