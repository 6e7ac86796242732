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

`--stream` measures instead the conformance schedules per second through Structured Streaming:
`--schedules` drawn schedules (default 500) of the suite's sources properties (those the streaming
face runs: not the region failover one), one call of `sources/stream.py`'s runner per property as
the suite makes them (every schedule of the call a job of one ScriptedSource query, restarted once
per round of global failovers), against the task-mode adapter (`PySparkAdapter.run_batch`) on the
same schedules, every streaming trace compared with the task mode's; and where the streaming
run's time goes: Spark's durations of the micro-batches (planning in the source's `latestOffset`,
query planning, addBatch: the read tasks and the sink, the offset and commit logs), the rest of
each query's life (start, stop, the batch whose planning fails it), and the driver (traces).

    PYTHONPATH=. python bench/sources.py --stream [--schedules 500] [--runs 3]

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


def drawn_by_property(n: int) -> dict[str, list[Any]]:
    """About n distinct schedules drawn as the suite's sources properties draw them, by property
    (the ones the streaming face runs)."""
    from drawn import drawn
    from flink_semantics.adapters.pyspark.sources.stream import STREAM_UNSUPPORTED
    from flink_semantics.conformance.areas.sources import schedules
    from flink_semantics.conformance.test_sources import FEATURES

    features = {name: f for name, f in FEATURES.items()
                if not (f.graph and "sources.region_failover" in STREAM_UNSUPPORTED)}
    return {name: drawn(schedules(f), n // len(features)) for name, f in features.items()}


def stream_call(spark: Any, batch: list[Any], timing: dict[str, float]) -> list[Any]:
    """One call of the streaming runner on a property's schedules (run_many's path, timed)."""
    from flink_semantics.adapters.pyspark.sources.stream import job_of, run_query, traces_of

    root = Path(tempfile.mkdtemp(prefix="bench-sources-stream-"))
    try:
        started = time.perf_counter()
        rows, _ = run_query(spark, [job_of(s) for s in batch], root, timing=timing)
        traces = traces_of(rows, len(batch))
        timing["call"] = timing.get("call", 0.0) + time.perf_counter() - started
        return traces
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_stream(spark: Any, n: int, runs: int) -> None:
    by_property = drawn_by_property(n)
    total = sum(len(b) for b in by_property.values())
    task_mode = PySparkAdapter(spark=spark)
    load_before = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    stream_call(spark, next(iter(by_property.values()))[:20], {})  # warm-up (workers, the JVM), not measured
    rates: dict[str, list[float]] = {"stream (run_many's runner)": [], "task mode (PySparkAdapter)": []}
    timing: dict[str, float] = {}
    per_property: dict[str, dict[str, float]] = {}
    differ = 0
    for _ in range(runs):
        seconds = 0.0
        for name, batch in by_property.items():
            own: dict[str, float] = {}
            got = stream_call(spark, batch, own)
            seconds += own["call"]
            per_property[name] = own
            for k, v in own.items():
                timing[k] = timing.get(k, 0.0) + v
            differ += sum(g != t for g, t in zip(got, task_mode.run_batch(batch)))
        rates["stream (run_many's runner)"].append(total / seconds)
        started = time.perf_counter()
        for batch in by_property.values():
            task_mode.run_batch(batch)
        rates["task mode (PySparkAdapter)"].append(total / (time.perf_counter() - started))
    load_after = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n{total} drawn schedules in {len(by_property)} calls (one per property), {runs} runs; "
          f"load average {load_before} before, {load_after} after; {differ} traces differ from task mode's")
    for name, r in rates.items():
        print(f"  {name:<28}{statistics.median(r):>8.1f} schedules/s (min {min(r):.1f}, max {max(r):.1f})")
    print("per call (the last run): schedules, query runs, micro-batches, seconds")
    for name, own in per_property.items():
        print(f"  {name:<30}{len(by_property[name]):>5}{own.get('queries', 0):>5.0f}"
              f"{own.get('batches', 0):>5.0f}{own['call']:>8.1f}")

    def t(k: str) -> float:
        return timing.get(k, 0.0) / runs

    logs = t("walCommit") + t("commitOffsets")
    parts = [("micro-batches: the source's planner (latestOffset)", t("latestOffset")),
             ("micro-batches: query planning", t("queryPlanning")),
             ("micro-batches: addBatch (read tasks, sink)", t("addBatch")),
             ("micro-batches: offset and commit logs", logs),
             ("micro-batches: other", t("triggerExecution") - t("latestOffset") - t("queryPlanning")
              - t("addBatch") - logs),
             ("queries: start, stop, the failing batch", t("query") - t("triggerExecution")),
             ("driver: the committed rows, the traces", t("call") - t("query"))]
    print(f"where a streaming run's time goes (mean seconds a run, {t('queries'):.0f} query runs, "
          f"{t('batches'):.0f} micro-batches):")
    for name, secs in parts:
        print(f"  {name:<55}{secs:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=PySparkAdapter.batch_size)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--restarts", type=int, default=4)
    parser.add_argument("--stream", action="store_true",
                        help="conformance schedules/s through streaming queries (run_many)")
    parser.add_argument("--schedules", type=int, default=500, help="drawn schedules per run (--stream)")
    args = parser.parse_args()
    from flink_semantics.adapters.pyspark.runner_session import runner_spark

    if args.stream:
        bench_stream(runner_spark(), args.schedules, args.runs)
        return

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
    spark = runner_spark()
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
