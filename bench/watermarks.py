"""The watermarks area on Spark: schedules per second through the adapter, and the valve's cost per
element as its input channels grow.

1. Schedules per second: about `--schedules` distinct schedules drawn (derandomized) in equal
   shares with the feature sets of the area's properties (conformance/test_watermarks.py), through
   `pyspark-local` (no Spark) and through `PySparkAdapter` in batches of `--batch` (one Spark job
   each; a `failover` step makes the task fail and Spark run it again).  Every trace is compared
   with the reference's.
2. The valve (adapters/pyspark/watermarks/engine.py, `StatusWatermarkValve`) with 1, 10, 100 and
   1,000 input channels: `--elements` inputs round-robin over the channels, rising watermarks with,
   every tenth input, the channel going idle and coming back; microseconds per input.
3. `--stream N`: about N drawn schedules through `run_many` (adapters/pyspark/watermarks/stream.py:
   the public API `flink_watermarks` in streaming queries, many schedules per query, a failover a
   query restart) against task mode (`PySparkAdapter`) on the same schedules in the same run, and
   where the streaming time goes: queries, micro-batches, Spark's phases (`durationMs` summed over
   the micro-batches: `addBatch` runs the batch, `queryPlanning` plans it), reading the sink.

    PYTHONPATH=. python bench/watermarks.py [--runs 3] [--schedules 2000] [--batch 1600]
    PYTHONPATH=. python bench/watermarks.py --stream 500 [--runs 1]

One warm Spark session (local[2] by default: adapters/pyspark/session.py).  Prints medians and
ranges over `--runs`.  The exit status is 0 whenever the benchmark ran.  Not part of the test run.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flink_semantics.adapters.pyspark.adapter import PySparkAdapter  # noqa: E402
from flink_semantics.adapters.pyspark.runtime import LocalScriptedAdapter, capabilities  # noqa: E402
from flink_semantics.adapters.pyspark.watermarks.engine import StatusWatermarkValve  # noqa: E402
from flink_semantics.conformance.areas.watermarks import feature_batches  # noqa: E402
from flink_semantics.conformance.test_watermarks import FEATURES  # noqa: E402
from flink_semantics.reference import expected_trace  # noqa: E402
from flink_semantics.spec.adapter import SCRIPTED  # noqa: E402
from flink_semantics.spec.schedule import Schedule  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _summary(values: list[float], unit: str, digits: int = 1) -> str:
    runs = ", ".join(f"{v:,.{digits}f}" for v in values)
    return f"{statistics.median(values):,.{digits}f} {unit} (runs: {runs})"


def draw(n: int) -> list[Schedule]:
    """About n distinct schedules, a like share from each property's features."""
    found: dict[Schedule, None] = {}
    for name, f in FEATURES.items():
        _draw_property(name, f.restrict(capabilities(), SCRIPTED), math.ceil(n / len(FEATURES) / 5), found)
    return list(found)


def _draw_property(name: str, f: Any, examples: int, found: dict[Schedule, None]) -> None:
    """The property's batches under its own derandomized seed (a batch gives ~5 distinct schedules)."""

    def body(data: st.DataObject) -> None:
        found.update(dict.fromkeys(data.draw(feature_batches(f))))

    body._hypothesis_internal_add_digest = name.encode()  # type: ignore[attr-defined]
    settings(derandomize=True, database=None, deadline=None, max_examples=examples,
             suppress_health_check=list(HealthCheck))(given(data=st.data())(body))()


def through(adapter: Any, schedules: list[Schedule], batch: int) -> float:
    start = time.monotonic()
    got = []
    for i in range(0, len(schedules), batch):
        got += adapter.run_batch(schedules[i:i + batch])
    seconds = time.monotonic() - start
    wrong = sum(g != expected_trace(s) for g, s in zip(got, schedules))
    if wrong:
        print(f"  {wrong} traces differ from the reference's")
    return len(schedules) / seconds


def valve_cost(channels: int, elements: int) -> float:
    """Microseconds per valve input with `channels` channels."""
    valve = StatusWatermarkValve(channels, lambda kind, **fields: None)
    start = time.perf_counter()
    for i in range(elements):
        ch = i % channels
        if i % 10 == 9:
            valve.input_status(True, ch)
            valve.input_status(False, ch)
        else:
            valve.input_watermark(i, ch)
    return (time.perf_counter() - start) / elements * 1e6


def stream_mode(n: int, runs: int) -> None:
    """Schedules/s through run_many and through task mode, the same schedules, and the phases."""
    import shutil
    import tempfile
    from pathlib import Path

    from flink_semantics.adapters.pyspark.runner_session import runner_spark
    from flink_semantics.adapters.pyspark.watermarks.stream import run_many

    schedules = draw(n)[:n]
    failing = sum(any(s.op == "failover" for s in x.steps) for x in schedules)
    print(f"{len(schedules)} schedules ({failing} with a failover), cpus {os.cpu_count()}, "
          f"load {os.getloadavg()[0]:.1f}")
    spark = runner_spark()
    expected = [expected_trace(s) for s in schedules]
    rates, phases = [], []
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="wm-bench-"))
        stats: dict[str, float] = {}
        start = time.monotonic()
        try:
            got = run_many(spark, schedules, root, stats)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        seconds = time.monotonic() - start
        wrong = sum(g != e for g, e in zip(got, expected))
        if wrong:
            print(f"  {wrong} traces differ from the reference's")
        rates.append(len(schedules) / seconds)
        phases.append((seconds, stats))
    print(f"pyspark-stream (run_many, one call): {_summary(rates, 'schedules/s')}; "
          f"load {os.getloadavg()[0]:.1f}")
    for seconds, stats in phases:
        spark_phases = ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in sorted(stats.items())
                                 if k.endswith("_s") and k not in ("run_s", "read_s", "triggerExecution_s"))
        print(f"  {seconds:.1f} s: {stats.get('queries', 0):.0f} queries, {stats.get('batches', 0):.0f} "
              f"micro-batches; queries {stats.get('run_s', 0):.1f} s (micro-batches "
              f"{stats.get('triggerExecution_s', 0):.1f} s: {spark_phases}; the rest: query starts and "
              f"stops), reading the sink {stats.get('read_s', 0):.1f} s")
    adapter = PySparkAdapter()
    try:
        adapter.prepare()
        rates = [through(adapter, schedules, len(schedules)) for _ in range(runs)]
    finally:
        adapter.close()
    print(f"pyspark (task mode), the same schedules in one batch: {_summary(rates, 'schedules/s')}; "
          f"load {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--schedules", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=PySparkAdapter.batch_size)
    parser.add_argument("--elements", type=int, default=100_000)
    parser.add_argument("--stream", type=int, default=0,
                        help="only the streaming mode: about this many schedules through run_many")
    args = parser.parse_args()
    if args.stream:
        stream_mode(args.stream, args.runs)
        return

    for channels in (1, 10, 100, 1000):
        costs = [valve_cost(channels, args.elements) for _ in range(args.runs)]
        print(f"valve, {channels:>5} channel(s): {_summary(costs, 'µs per input', 2)}")
    schedules = draw(args.schedules)
    failing = sum(any(s.op == "failover" for s in x.steps) for x in schedules)
    steps = statistics.mean(len(x.steps) for x in schedules)
    print(f"{len(schedules)} schedules ({failing} with a failover, {steps:.1f} steps on average), "
          f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    local = LocalScriptedAdapter()
    try:
        rates = [through(local, schedules, args.batch) for _ in range(args.runs)]
    finally:
        local.close()
    print(f"pyspark-local: {_summary(rates, 'schedules/s')}")
    adapter = PySparkAdapter()
    try:
        adapter.prepare()
        rates = [through(adapter, schedules, args.batch) for _ in range(args.runs)]
    finally:
        adapter.close()
    print(f"pyspark, batches of {args.batch}: {_summary(rates, 'schedules/s')}; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
