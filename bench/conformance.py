"""Schedules per second through Spark, against batch size, and where the time goes.

The async I/O conformance suite draws schedules with hypothesis, runs them through an adapter in
batches and checks every trace against the reference (conformance/checker.py).  Through Spark
(adapters/pyspark/adapter.py) each `run_batch` is one Spark job, and a schedule that crashes or
fails makes its task fail and Spark run it again.  The benchmark draws about `--schedules`
distinct schedules from the feature sets of the suite's properties (conformance/test_async_io.py)
and measures, in turn:

1. the suite: the cost of drawing a distinct schedule, and of checking one (oracle + compare);
2. the operator without Spark: `pyspark-local` (same runtime, retries in-process), and the Spark
   task function `run_partition` called in-process on the schedules that do not fail;
3. storage: the files and bytes the runtime's ScheduleStore writes, and the time spent in it;
4. Spark job overhead (a trivial job) and the session's start-up;
5. task retries: a batch of ~400 schedules that do not fail against the same batch with 1 in 20
   replaced by failing ones, spread over every task or all in one, i.e. the cost of a retry round;
6. every schedule through Spark in batches of each `--sizes`, with a check of every trace;

and ends with a table of where the time of one schedule goes at each batch size.

    python bench/conformance.py [--schedules 2000] [--sizes 25,100,400,1600]

One warm Spark session (local[2] by default: adapters/pyspark/session.py).  The exit status is 0
whenever the benchmark ran (mismatches are printed, not an error).  Not part of the test run.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flink_semantics.adapters.pyspark.adapter import PySparkAdapter, failure_bound, run_partition  # noqa: E402
from flink_semantics.adapters.pyspark.runner_session import max_task_failures, runner_spark  # noqa: E402
from flink_semantics.adapters.pyspark.runtime import LocalScriptedAdapter, ScheduleStore, capabilities  # noqa: E402
from flink_semantics.conformance.areas.async_io import Features, schedules  # noqa: E402
from flink_semantics.conformance.checker import compare  # noqa: E402
from flink_semantics.conformance.strategies import batches  # noqa: E402
from flink_semantics.reference import expected_trace  # noqa: E402
from flink_semantics.spec.adapter import SCRIPTED  # noqa: E402
from flink_semantics.spec.schedule import Schedule, Trace  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# The feature sets of the suite's properties (conformance/test_async_io.py), drawn in equal shares.
PROPERTIES: dict[str, Features] = {
    "ordered_mode": Features(modes=("ordered",)),
    "unordered_mode": Features(modes=("unordered",), end=False, max_steps=20),
    "watermarks": Features(max_steps=16),
    "watermark_statuses": Features(statuses=True),
    "capacity_and_admission": Features(max_capacity=3, max_steps=18),
    "results": Features(repeats=True),
    "failures": Features(errors=True, nulls=True),
    "timeouts": Features(timeouts=True, errors=True, max_steps=16),
    "retries": Features(timeouts=True, retries=True, errors=True, max_steps=18),
    "end_of_input": Features(drain=True, repeats=False),
    "checkpoint_and_restore": replace(
        Features(checkpoints=True, errors=True, timeouts=True, retries=True, max_steps=20),
        on_timeout=("fail", "complete")),
}
BATCH = 12  # the suite's largest batch per example (conformance.plugin.DEFAULT_BATCH_SIZE)
EXAMPLE_YIELD = 5  # distinct schedules an example gives (batches of 1..12, some repeats)
STORE_METHODS = ("load", "mark_ended", "write_checkpoint", "read_checkpoint")


@dataclass
class Drawn:
    schedules: list[Schedule]
    expected: list[Trace]
    failing: list[bool]

    def split(self) -> tuple[list[Schedule], list[Schedule]]:
        """(the schedules that do not fail, the failing ones: fewest incarnations first)."""
        ok = [s for s, f in zip(self.schedules, self.failing) if not f]
        bad = sorted((s for s, f in zip(self.schedules, self.failing) if f), key=failure_bound)
        return ok, bad


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def ms(seconds: float, n: int) -> str:
    return f"{1000 * seconds / max(n, 1):8.3f} ms"


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# --------------------------------------------------------------------------
# 1. The suite: drawing and checking
# --------------------------------------------------------------------------


def _draw_property(name: str, f: Features, examples: int, found: dict[Schedule, None]) -> None:
    def body(data: st.DataObject) -> None:
        found.update(dict.fromkeys(data.draw(batches(schedules(f), BATCH))))

    # Each property of the suite is its own test function, hence its own derandomized seed.
    body._hypothesis_internal_add_digest = name.encode()  # type: ignore[attr-defined]
    run = settings(derandomize=True, database=None, deadline=None, max_examples=examples,
                   suppress_health_check=list(HealthCheck))(given(data=st.data())(body))
    run()


def draw_schedules(n: int) -> tuple[list[Schedule], float]:
    """About n distinct schedules, a like share from each property (rounds until n); (schedules, seconds)."""
    found: dict[Schedule, None] = {}
    t0 = time.perf_counter()
    for round_ in itertools.count():
        examples = math.ceil((n - len(found)) / len(PROPERTIES) / EXAMPLE_YIELD)
        for name, f in PROPERTIES.items():
            _draw_property(f"{name}:{round_}", f.restrict(capabilities(), SCRIPTED), examples, found)
        if len(found) >= n:
            return list(found), time.perf_counter() - t0


def fails(schedule: Schedule, expected: Trace) -> bool:
    """Whether the schedule makes its Spark task fail (a crash step, or a `fail` in its trace)."""
    return any(s.op == "crash" for s in schedule.steps) or any(e.event == "fail" for e in expected.events)


def mismatches(schedules: Sequence[Schedule], expected: Sequence[Trace], observed: Sequence[Trace]) -> int:
    return sum(compare(s, e, o, SCRIPTED) is not None for s, e, o in zip(schedules, expected, observed))


def section_suite(n: int) -> tuple[Drawn, list[Trace], dict[str, float]]:
    drawn, t_draw = draw_schedules(n)
    distinct = len(drawn)
    print(f"\n1. the suite ({len(PROPERTIES)} properties' feature sets, batches of up to {BATCH})")
    print(f"   draw         {ms(t_draw, distinct)} per distinct schedule  "
          f"({distinct} distinct in {t_draw:.2f} s)")
    expected, t_oracle = timed(lambda: [expected_trace(s) for s in drawn])
    local = LocalScriptedAdapter()
    try:
        observed, t_local = timed(lambda: local.run_batch(drawn))
    finally:
        local.close()
    bad, t_compare = timed(lambda: mismatches(drawn, expected, observed))
    print(f"   check        {ms(t_oracle + t_compare, len(drawn))} per schedule  "
          f"(expected_trace {ms(t_oracle, len(drawn)).strip()}, compare {ms(t_compare, len(drawn)).strip()}; "
          f"pyspark-local mismatches: {bad})")
    failing = [fails(s, e) for s, e in zip(drawn, expected)]
    times = {"draw": t_draw / distinct, "check": (t_oracle + t_compare) / len(drawn), "local": t_local}
    return Drawn(drawn, expected, failing), observed, times


# --------------------------------------------------------------------------
# 2. The operator without Spark, and 3. storage
# --------------------------------------------------------------------------


def partition_batch(schedules: Sequence[Schedule]) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array(range(len(schedules)), pa.int64()),
                                       pa.array([s.to_json() for s in schedules], pa.string())],
                                      names=["sid", "schedule"])


def time_partition(schedules: Sequence[Schedule]) -> tuple[float, int]:
    """run_partition in this process (no Spark) on schedules that do not fail: (seconds, errors)."""
    batch = partition_batch(schedules)
    root = tempfile.mkdtemp(prefix="bench-partition-")
    try:
        out, seconds = timed(lambda: list(run_partition(root, max_task_failures(), iter([batch]))))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = sum(b.num_rows for b in out)
    errors = sum(v is not None for b in out for v in b.column("raised").to_pylist())
    return seconds, errors + len(schedules) - rows


def section_operator(d: Drawn, t_local: float) -> float:
    ok, _ = d.split()
    t_part, errors = time_partition(ok)
    n = len(d.schedules)
    print("\n2. the operator without Spark")
    print(f"   pyspark-local run_batch      {ms(t_local, n)} per schedule  ({n} schedules, "
          f"{sum(d.failing)} failing: retried in-process)")
    print(f"   run_partition in-process     {ms(t_part, len(ok))} per schedule  ({len(ok)} that do not fail; "
          f"JSON in and out, store look-ups; errors: {errors})")
    return t_part / max(len(ok), 1)


@contextmanager
def store_timing(acc: dict[str, list[float]]) -> Iterator[None]:
    """Count the calls of ScheduleStore's methods and the time spent in them (this process only)."""
    originals = {name: getattr(ScheduleStore, name) for name in STORE_METHODS}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed_call(self: ScheduleStore, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(self, *args, **kwargs)
            finally:
                acc[name][0] += 1
                acc[name][1] += time.perf_counter() - t0
        return timed_call

    for name, fn in originals.items():
        acc[name] = [0, 0.0]
        setattr(ScheduleStore, name, wrap(name, fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(ScheduleStore, name, fn)


def disk_usage(root: Path) -> tuple[int, int, int]:
    """(schedule directories, files, bytes) under root."""
    dirs = sum(1 for p in root.iterdir() if p.is_dir()) if root.exists() else 0
    files = [p for p in root.rglob("*") if p.is_file()]
    return dirs, len(files), sum(p.stat().st_size for p in files)


def section_storage(d: Drawn, t_local: float) -> float:
    acc: dict[str, list[float]] = {}
    local = LocalScriptedAdapter()
    try:
        with store_timing(acc):
            local.run_batch(d.schedules)
        dirs, files, size = disk_usage(local.root)
    finally:
        local.close()
    n, per_k = len(d.schedules), 1000 / len(d.schedules)
    t_store = sum(t for _, t in acc.values())
    print("\n3. storage (ScheduleStore, through pyspark-local: what each schedule leaves on disk)")
    print(f"   per 1000 schedules: {dirs * per_k:,.0f} schedule directories, {files * per_k:,.0f} files, "
          f"{size * per_k / 1024:,.1f} KiB  ({dirs} of {n} schedules touched the disk)")
    calls = ", ".join(f"{name} {int(c)} ({1000 * t:.1f} ms)" for name, (c, t) in acc.items())
    print(f"   calls: {calls}")
    print(f"   time in the store   {ms(t_store, n)} per schedule  ({100 * t_store / t_local:.0f}% of the "
          f"pyspark-local run; Spark's done-<partition>.json files of failed tasks not included)")
    return t_store / n


# --------------------------------------------------------------------------
# 4. Spark: job overhead and start-up; 5. task retries; 6. batch size
# --------------------------------------------------------------------------


class CountingAdapter(PySparkAdapter):
    """PySparkAdapter, counting the Spark jobs its run_batch calls start (one `_job` each)."""

    jobs = 0

    def _job(self, spark: Any, job: str, rows: list[tuple[int, str]]) -> list[Any]:
        self.jobs += 1
        return super()._job(spark, job, rows)


def section_spark(spark: Any, t_session: float, adapter: PySparkAdapter) -> tuple[float, int]:
    _, t_prepare = timed(adapter.prepare)
    tasks = adapter.partitions  # the tasks of one of the adapter's jobs
    root = tempfile.mkdtemp(prefix="bench-trivial-")
    try:  # the adapter's own job (an RDD's mapPartitions; mapInArrow under Spark Connect), no schedules
        trivial = statistics.median(timed(lambda: adapter._job(spark, root, []))[1] for _ in range(5))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n4. Spark job overhead")
    print(f"   trivial job ({tasks} task(s), the adapter's job of no schedules): {1000 * trivial:.0f} ms "
          "(median of 5)")
    print(f"   session start-up: {t_session:.2f} s (JVM and session) + {t_prepare:.2f} s (prepare(): first "
          f"Python job, workers) = {t_session + t_prepare:.2f} s; {tasks} tasks per job")
    return trivial, tasks


def _median_run(adapter: PySparkAdapter, batch: list[Schedule]) -> tuple[float, int, int]:
    """Median seconds of 3 runs; retry rounds (highest task attempt) and retried traces of the last."""
    seconds = statistics.median(timed(lambda: adapter.run_batch(batch))[1] for _ in range(3))
    attempts = adapter.task_attempts.values()
    return seconds, max(attempts, default=0), sum(a > 0 for a in attempts)


def _with_failing(clean: list[Schedule], bad: list[Schedule], k: int, span: int) -> list[Schedule]:
    """clean with k schedules replaced by failing ones, evenly over its first `span` positions."""
    mixed, step = list(clean), max(1, span // k)
    for j, s in enumerate(bad[:k]):
        mixed[j * step] = s
    return mixed


def section_retries(adapter: PySparkAdapter, d: Drawn, tasks: int, size: int = 400) -> float:
    """The cost of a retry round: failing schedules spread over every task, and all in one task."""
    ok, bad = d.split()
    clean = ok[:size]
    k = min(len(bad), max(1, len(clean) // 20))
    print("\n5. task retries")
    if not clean or not k:
        print("   not measured: no schedules that fail, or none that do not")
        return 0.0
    t_clean, _, _ = _median_run(adapter, clean)
    print(f"   {len(clean)} schedules, none failing: {t_clean:.2f} s (median of 3)")
    costs = []
    spans = (("spread over the tasks", len(clean)), ("all in the first task", len(clean) // tasks))
    spans = spans if tasks > 1 else (("in the job's one task", len(clean)),)
    for where, span in spans:
        t_mixed, rounds, retried = _median_run(adapter, _with_failing(clean, bad, k, span))
        costs.append(cost := (t_mixed - t_clean) / max(rounds, 1))
        print(f"   {k} replaced by failing ones, {where}: {t_mixed:.2f} s, {rounds} retry round(s), "
              f"{retried} traces from a retried attempt: {1000 * cost:.0f} ms a round")
    return costs[0]  # the budget uses the spread case: the suite's batches mix failing schedules in


def run_sizes(adapter: PySparkAdapter, counter: CountingAdapter, d: Drawn, size: int) -> dict[str, float]:
    n = len(d.schedules)
    counter.jobs, rounds, retried, traces = 0, 0, 0, []
    t0 = time.perf_counter()
    for i in range(0, n, size):
        traces += adapter.run_batch(d.schedules[i:i + size])
        rounds += max(adapter.task_attempts.values(), default=0)
        retried += sum(a > 0 for a in adapter.task_attempts.values())
    wall = time.perf_counter() - t0
    return {"size": size, "calls": math.ceil(n / size), "jobs": counter.jobs, "wall": wall, "rounds": rounds,
            "retried": retried, "bad": mismatches(d.schedules, d.expected, traces)}


def section_sizes(adapter: PySparkAdapter, counter: CountingAdapter, d: Drawn,
                  sizes: Sequence[int]) -> list[dict[str, float]]:
    n = len(d.schedules)
    print(f"\n6. through Spark against batch size ({n} schedules, {sum(d.failing)} failing)")
    print(f"   {'batch':>6}{'run_batch':>10}{'jobs':>6}{'wall s':>8}{'sched/s':>9}{'ms/sched':>10}"
          f"{'retry rounds':>14}{'retried':>9}{'mismatches':>12}")
    out = []
    for size in sizes:
        r = run_sizes(adapter, counter, d, size)
        print(f"   {size:>6}{r['calls']:>10}{r['jobs']:>6}{r['wall']:>8.2f}{n / r['wall']:>9.0f}"
              f"{1000 * r['wall'] / n:>10.2f}{r['rounds']:>14}{r['retried']:>9}{r['bad']:>12}")
        out.append(r)
    print("   (retried: schedules whose trace came from a retried task attempt, with the failing ones "
          "of their task)")
    return out


# --------------------------------------------------------------------------
# Where the time goes
# --------------------------------------------------------------------------


def section_budget(n: int, runs: list[dict[str, float]], costs: dict[str, float]) -> None:
    """Per schedule, at each batch size: the measured time through Spark split into its parts."""
    print("\nwhere the time of one schedule goes (ms; the operator and storage divided by the tasks "
          "running at once)")
    print(f"   {'batch size':<48}" + "".join(f"{int(r['size']):>9}" for r in runs))
    spark = [r["wall"] / n for r in runs]
    overhead = [r["jobs"] * costs["job"] / n for r in runs]
    retries = [r["rounds"] * costs["round"] / n for r in runs]
    operator = [costs["partition"] / costs["tasks"]] * len(runs)
    storage = [costs["store"] / costs["tasks"]] * len(runs)
    rest = [s - o - r - p for s, o, r, p in zip(spark, overhead, retries, operator)]
    total = [s + costs["draw"] + costs["check"] for s in spark]
    lines = [("through Spark (measured)", spark), ("  job overhead (jobs x trivial job)", overhead),
             ("  task retries (rounds x retry round, estimate)", retries),
             ("  the operator (run_partition in-process)", operator),
             ("    of which storage (ScheduleStore)", storage),
             ("  the rest (pickles, scheduling, workers, driver)", rest),
             ("the suite: draw", [costs["draw"]] * len(runs)),
             ("the suite: check (oracle + compare)", [costs["check"]] * len(runs)),
             ("a suite run: Spark + draw + check", total)]
    for label, values in lines:
        print(f"   {label:<48}" + "".join(f"{1000 * v:>9.3f}" for v in values))
    print(f"   {'schedules/s of a suite run':<48}" + "".join(f"{1 / t:>9.0f}" for t in total))
    print("   (the rest: the measured time less the parts, which are measured apart; below 0 when they "
          "overshoot)")


# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schedules", type=int, default=2000, help="distinct schedules to draw")
    p.add_argument("--sizes", default="25,100,400,1600", help="batch sizes (capped at --schedules)")
    a = p.parse_args(argv)

    import pyspark

    print(f"conformance through Spark: {os.cpu_count()} CPUs, load average (1 / 5 / 15 min) {load()}, "
          f"pyspark {pyspark.__version__}, {a.schedules} schedules asked")
    d, _, times = section_suite(a.schedules)
    n = len(d.schedules)
    sizes = list(dict.fromkeys(min(int(s), n) for s in a.sizes.split(",")))
    print(f"   {n} schedules: {sum(d.failing)} fail (a crash step or a `fail` event), "
          f"{statistics.mean(len(s.steps) for s in d.schedules):.1f} steps on average")
    partition = section_operator(d, times["local"])
    store = section_storage(d, times["local"])

    spark, t_session = timed(runner_spark)
    adapter = counter = CountingAdapter(spark=spark)
    try:
        trivial, tasks = section_spark(spark, t_session, adapter)
        per_round = section_retries(adapter, d, tasks)
        runs = section_sizes(adapter, counter, d, sizes)
    finally:
        adapter.close()
    costs = {"job": trivial, "round": per_round, "partition": partition, "store": store, "tasks": tasks,
             "draw": times["draw"], "check": times["check"]}
    section_budget(n, runs, costs)
    print(f"\nload average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
