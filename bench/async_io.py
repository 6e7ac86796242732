"""Throughput of async_map (adapters/pyspark/async_io.py) against Little's law.

An external service with a fixed latency L (a real `asyncio.sleep(L)`) and at most C calls in
flight per partition can serve at most C / L records per second per partition (Little's law:
10,000 rec/s for C = 100 and L = 10 ms).  The benchmark measures, per partition, the time
from the first call to the last completion (so Spark's job overhead is left out; the wall
time of the whole job is shown too) and compares it with that bound, and with a synchronous
`mapInPandas` baseline that calls `time.sleep(L)` per record (1 / L = 100 rec/s).

    python bench/async_io.py [--records 20000] [--partitions 2] [--capacity 100] [--latency 0.010]

Target: >= 90% of the bound.  Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from adapters.pyspark.async_io import async_map  # noqa: E402
from adapters.pyspark.session import get_spark  # noqa: E402


def _spans(rows: list[Any]) -> list[tuple[int, float]]:
    """Per partition: (records, seconds from the first call's start to the last call's end)."""
    by_part: dict[int, list[float]] = {}
    for r in rows:
        by_part.setdefault(r.part, []).append(r.t)
    return [(len(ts) // 2, max(ts) - min(ts)) for _, ts in sorted(by_part.items())]


def bench_async(spark: Any, records: int, partitions: int, capacity: int, latency: float,
                ordered: bool) -> tuple[float, float]:
    """(records/s per partition, median over partitions; wall seconds of the job)."""

    async def service(v: int) -> list[float]:
        start = time.perf_counter()
        await asyncio.sleep(latency)
        return [start, time.perf_counter()]  # two outputs: when the call started and ended

    df = spark.range(0, records * partitions, numPartitions=partitions).selectExpr("id AS value")
    out = async_map(df, service, capacity=capacity, ordered=ordered, result_type="double")
    out = out.selectExpr("spark_partition_id() AS part", "value AS t")
    t0 = time.perf_counter()
    rows = out.collect()
    wall = time.perf_counter() - t0
    rates = sorted(n / span for n, span in _spans(rows))
    return rates[len(rates) // 2], wall


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
    out = df.mapInPandas(task, "t double").selectExpr("spark_partition_id() AS part", "t")
    t0 = time.perf_counter()
    rows = out.collect()
    wall = time.perf_counter() - t0
    rates = sorted(n / span for n, span in _spans(rows))
    return rates[len(rates) // 2], wall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=20000, help="records per partition (async runs)")
    p.add_argument("--sync-records", type=int, default=200, help="records per partition (baseline)")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--capacity", type=int, default=100)
    p.add_argument("--latency", type=float, default=0.010, help="service latency in seconds")
    p.add_argument("--target", type=float, default=0.90, help="required fraction of the bound")
    a = p.parse_args(argv)

    spark = get_spark()
    bound = a.capacity / a.latency
    # Warm up the Python workers (not measured).
    bench_async(spark, 500, a.partitions, a.capacity, a.latency, True)

    results = []
    for ordered in (True, False):
        rate, wall = bench_async(spark, a.records, a.partitions, a.capacity, a.latency, ordered)
        results.append((f"async_map {'ordered' if ordered else 'unordered'}", a.records, rate, wall))
    rate, wall = bench_sync(spark, a.sync_records, a.partitions, a.latency)
    results.append(("mapInPandas + time.sleep", a.sync_records, rate, wall))

    print(f"\nservice latency {a.latency * 1000:.1f} ms, capacity {a.capacity}, {a.partitions} partitions; "
          f"Little's law bound = capacity / latency = {bound:,.0f} rec/s per partition\n")
    print(f"{'run':<28}{'rec/partition':>14}{'rec/s/partition':>17}{'% of bound':>12}{'job wall s':>12}")
    for name, n, rate, wall in results:
        print(f"{name:<28}{n:>14,}{rate:>17,.0f}{100 * rate / bound:>11.1f}%{wall:>12.2f}")
    worst = min(rate for name, _, rate, _ in results if name.startswith("async_map"))
    ok = worst >= a.target * bound
    print(f"\nasync_map reaches {100 * worst / bound:.1f}% of the bound "
          f"({'meets' if ok else 'MISSES'} the {100 * a.target:.0f}% target); "
          f"speed-up over the synchronous baseline: {worst / results[-1][2]:.0f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
