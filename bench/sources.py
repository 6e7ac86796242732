"""The sources area on Spark: schedules per second through the adapter, and the cost of one
enumerator failover (a query failure and restart) of the Structured Streaming source.

1. Schedules per second: the 1600 schedules of the sources regression corpus
   (tests/corpus/sources.jsonl.gz, drawn by the strategies of the area's properties) through
   `pyspark-local` (no Spark) and through `PySparkAdapter` in batches of `--batch` (one Spark job
   each; a `fail`, `fail_enumerator` or `rescale` step makes the task fail and Spark run it again).
   Every trace is compared with the saved one.
2. One enumerator failover: the fault-injection run's source (adapters/pyspark/sources/stream.py)
   on `--jobs` generated jobs, without failures and with `--restarts` planner failures, each a real
   query failure and restart from the checkpoint directory; the difference divided by the restarts.

    PYTHONPATH=. python bench/sources.py [--runs 3] [--batch 400] [--jobs 50] [--restarts 4]

One warm Spark session (local[2] by default: adapters/pyspark/session.py).  Prints medians and
ranges over `--runs`.  The exit status is 0 whenever the benchmark ran.  Not part of the test run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flink_semantics.adapters.pyspark.adapter import PySparkAdapter  # noqa: E402
from flink_semantics.adapters.pyspark.runtime import LocalScriptedAdapter  # noqa: E402
from flink_semantics.spec.schedule import schedule_from_dict, trace_from_dict  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "sources.jsonl.gz"


def _summary(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):,.1f} {unit} (runs: {', '.join(f'{v:,.1f}' for v in values)})"


def corpus() -> tuple[list[Any], list[Any]]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    schedules = [schedule_from_dict(r["schedule"]) for r in rows]
    return schedules, [trace_from_dict({"events": r["trace"]}, "sources") for r in rows]


def through(adapter: Any, schedules: list[Any], traces: list[Any], batch: int) -> float:
    start = time.monotonic()
    got = []
    for i in range(0, len(schedules), batch):
        got += adapter.run_batch(schedules[i:i + batch])
    seconds = time.monotonic() - start
    wrong = sum(g != t for g, t in zip(got, traces))
    if wrong:
        print(f"  {wrong} traces differ from the corpus")
    return len(schedules) / seconds


def failover_cost(spark: Any, jobs: int, restarts: int) -> tuple[float, float]:
    from flink_semantics.adapters.pyspark.sources.faults import generate, run

    plan, _ = generate(jobs, 0, seed=11)
    times = []
    for failures in ({"reader": {}, "enumerator": {}, "sink": []},
                     {"reader": {}, "enumerator": {str(b): 0 for b in range(1, restarts + 1)}, "sink": []}):
        work = tempfile.mkdtemp(prefix="bench-sources-")
        try:
            report = run(spark, plan, failures, work, log=lambda m: None)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        assert report.ok and report.restarts == len(failures["enumerator"]), report.lines()
        times.append(report.seconds)
    return times[0], (times[1] - times[0]) / restarts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=PySparkAdapter.batch_size)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--restarts", type=int, default=4)
    args = parser.parse_args()
    from flink_semantics.adapters.pyspark.session import get_spark

    schedules, traces = corpus()
    failing = sum(any(s.op in ("fail", "fail_enumerator", "rescale") for s in x.steps) for x in schedules)
    print(f"{len(schedules)} schedules ({failing} with a task failure), cpus {os.cpu_count()}, "
          f"load {os.getloadavg()[0]:.1f}")
    local = LocalScriptedAdapter()
    try:
        rates = [through(local, schedules, traces, args.batch) for _ in range(args.runs)]
    finally:
        local.close()
    print(f"pyspark-local: {_summary(rates, 'schedules/s')}")
    spark = get_spark()
    adapter = PySparkAdapter()
    try:
        adapter.prepare()
        rates = [through(adapter, schedules, traces, args.batch) for _ in range(args.runs)]
    finally:
        adapter.close()
    print(f"pyspark, batches of {args.batch}: {_summary(rates, 'schedules/s')}")
    base, cost = [], []
    failover_cost(spark, args.jobs, 1)  # warm-up: the source's first query starts its Python workers
    for _ in range(args.runs):
        b, c = failover_cost(spark, args.jobs, args.restarts)
        base.append(b)
        cost.append(c)
    print(f"streaming source, {args.jobs} jobs to the end without failures: {_summary(base, 's')}")
    print(f"one enumerator failover (query failure, uncommitted offsets returned, restart): "
          f"{_summary(cost, 's')}; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
