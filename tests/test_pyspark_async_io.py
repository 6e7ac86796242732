"""Tests of the PySpark async I/O operator (adapters/pyspark).

Three parts:

1. Conformance mode through Spark: a batch of schedules runs in one Spark job and every trace
   is compared with a trace derived by hand from the rules of spec/async-io.md (written in the
   notation of that file; several are the rules' own examples, the others are derived in the
   comments).  The cases the reference model is checked on too are in tests/async_io_cases.py.
   Crash steps and task failures are real Spark task failures: the adapter reports the task
   attempt that produced each trace.
2. The durable store and resumption, without Spark.
3. `async_map` on real DataFrames with real asyncio sleeps, and the operator on a real event
   loop without Spark.

Run with `-n 0`: one Spark session for the module (about 10 s to start).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.adapters.pyspark.runtime import (
    InjectedFailure,
    ScheduleStore,
    run_schedule,
    run_with_retries,
)
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.areas.async_io import CAPABILITIES
from flink_semantics.spec.schedule import Trace

from tests.async_io_cases import CASES as SHARED_CASES
from tests.async_io_cases import assert_trace, parse_schedule, render_event
from tests.hang import HANG_GUARD_S

# --------------------------------------------------------------------------
# Hand-derived cases: those of tests/async_io_cases.py (the reference is checked on them too), and these
# --------------------------------------------------------------------------

RETRY_EMPTY = {"strategy": "fixed_delay", "max_attempts": 1, "delay": 5, "if_empty": True}

# name -> (config, steps, expected trace)
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    **SHARED_CASES,
    # AIO-18 with timestamps, unordered and no watermark: r1 leaves first; its two values
    # form one run without timestamp; r0's value carries its timestamp 100.  End with an
    # empty queue finishes at once (AIO-56).
    "unordered-timestamps": ({"mode": "unordered", "capacity": 2}, """
        record 7 @100
        record 8
        complete r1 [80, 81]
        complete r0 [70]
        end
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @2 emit r1 80 ts=-
        @2 emit r1 81 ts=-
        @3 emit r0 70 ts=100
        @4 finished
    """),
    # AIO-28: the default handler fails the task (a real Spark task failure here).
    "timeout-fail": ({"timeout": 50}, """
        record 1
        advance 50
    """, """
        @0 invoke r0 #1
        @1 timeout r0
        @1 fail r0 timeout
    """),
    # AIO-33/34/36, derived: unordered, r0's empty result is retried once after 5 ms (attempt 1
    # <= max_attempts 1), r1's result leaves at once; attempt 2 of r0 ends empty again and
    # 2 > max_attempts, so it is final and emits nothing; end finishes with an empty queue.
    "retry-empty": ({"mode": "unordered", "capacity": 2, "timeout": 100, "retry": RETRY_EMPTY}, """
        record 1 @10
        record 2 @20
        complete r0 []
        complete r1 [7]
        advance 5
        complete r0 []
        end
    """, """
        @0 invoke r0 #1
        @1 invoke r1 #1
        @3 emit r1 7 ts=20
        @4 invoke r0 #2
        @6 finished
    """),
    # Derived: two crashes, so two task failures.  Checkpoint 2 holds r0 and r1 (AIO-44);
    # r0's output before the second crash is not in checkpoint 2's state, so after restoring
    # checkpoint 2 with capacity 1 (AIO-57) r0 is called again and r1 waits for its slot.
    "two-crashes": ({}, """
        record 1
        checkpoint 1
        crash
        restore 1
        record 2
        checkpoint 2
        complete r0 [5]
        crash
        restore 2 capacity=1
        complete r0 [6]
        complete r1 [7]
        end
    """, """
        @0 invoke r0 #1
        @1 checkpoint 1 [r0]
        @3 invoke r0 #1
        @4 invoke r1 #1
        @5 checkpoint 2 [r0, r1]
        @6 emit r0 5 ts=-
        @8 invoke r0 #1
        @9 emit r0 6 ts=-
        @9 invoke r1 #1
        @10 emit r1 7 ts=-
        @11 finished
    """),
}

# name -> the task failures (crashes and failing steps) the case causes, where there are any
TASK_FAILURES: dict[str, int] = {
    "timeout-fail": 1,
    "retry-error": 1,
    "crash-restore": 2,
    "fail-restore": 1,
    "restore-smaller": 1,
    "two-crashes": 2,
}

REJECTED: dict[str, tuple[dict[str, Any], str]] = {
    "capacity-0": ({"capacity": 0}, "AIO-1"),
    "retry-without-timeout": ({"timeout": 0, "retry": RETRY_EMPTY}, "AIO-3"),
}


# --------------------------------------------------------------------------
# Spark fixtures
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def adapter(spark: Any) -> Iterator[Any]:
    from flink_semantics.adapters.pyspark import PySparkAdapter

    a = PySparkAdapter()
    yield a
    a.close()
    assert not a.root.exists(), "the adapter must remove its store at close()"


@pytest.fixture(scope="module")
def batch(adapter: Any) -> dict[str, Trace]:
    """Every hand-derived case, in one run_batch (one Spark job per round of failures)."""
    names = list(CASES) + list(REJECTED)
    schedules = [parse_schedule(config, steps) for config, steps, _ in CASES.values()]
    schedules += [parse_schedule(cfg, "record 1", validate=False) for cfg, _ in REJECTED.values()]
    traces = adapter.run_batch(schedules)
    assert len(traces) == len(names)
    return dict(zip(names, traces))


# --------------------------------------------------------------------------
# 1. Conformance mode through Spark
# --------------------------------------------------------------------------

pytestmark = pytest.mark.spark


def test_adapter_declares_everything(spark: Any) -> None:
    from flink_semantics.adapters.pyspark import PySparkAdapter

    a = PySparkAdapter()
    try:
        assert a.name == "pyspark" and a.completion_order == SCRIPTED
        from flink_semantics.adapters.pyspark.key_groups import conformance as key_groups
        from flink_semantics.adapters.pyspark.mini_batch import conformance as mini_batch
        from flink_semantics.adapters.pyspark.sources import conformance as sources
        from flink_semantics.adapters.pyspark.watermarks import conformance as watermarks

        assert dict(a.capabilities()) == {"async_io": None, **{name: None for name in CAPABILITIES},
                                          "sources": None, **sources.CAPABILITIES,
                                          "watermarks": None, **watermarks.CAPABILITIES,
                                          "key_groups": None, **key_groups.CAPABILITIES,
                                          "mini_batch": None, **mini_batch.CAPABILITIES}
    finally:
        a.close()


@pytest.mark.parametrize("name", list(CASES))
def test_hand_derived_trace(batch: dict[str, Trace], name: str) -> None:
    assert_trace(name, parse_schedule(*CASES[name][:2]), batch[name], CASES[name][2])


@pytest.mark.parametrize("name", list(REJECTED))
def test_invalid_configuration_is_rejected(batch: dict[str, Trace], name: str) -> None:
    (e,) = batch[name].events
    assert (e.step, e.event) == (-1, "rejected")
    assert e.reason.startswith(REJECTED[name][1] + ":"), e.reason


def test_failures_are_real_task_retries(adapter: Any, batch: dict[str, Trace]) -> None:
    """A trace of a schedule with n crashes/failures comes from task attempt >= n (Spark retried it)."""
    assert set(TASK_FAILURES) <= set(CASES)
    for i, name in enumerate(CASES):
        failures = TASK_FAILURES.get(name, 0)
        assert adapter.task_attempts[i] >= failures, (name, adapter.task_attempts[i])
    assert max(adapter.task_attempts.values()) >= 2


def test_same_batch_same_traces(adapter: Any, batch: dict[str, Trace]) -> None:
    names = ["unordered", "crash-restore", "two-crashes"]
    again = adapter.run_batch([parse_schedule(*CASES[n][:2]) for n in names])
    assert [t.to_json() for t in again] == [batch[n].to_json() for n in names]


def test_job_directories_are_removed(adapter: Any, batch: dict[str, Trace]) -> None:
    assert list(adapter.root.iterdir()) == []


# --------------------------------------------------------------------------
# 2. The durable store and resumption (no Spark)
# --------------------------------------------------------------------------


@pytest.fixture
def tmp_store() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="test-pyspark-store-"))
    yield path
    shutil.rmtree(path)


def test_crash_raises_and_the_next_attempt_resumes_from_the_store(tmp_store: Path) -> None:
    s = parse_schedule(*CASES["two-crashes"][:2])
    for n in range(2):
        with pytest.raises(InjectedFailure, match=f"step {(2, 7)[n]}"):
            run_schedule(s, ScheduleStore(tmp_store, s.area))
    assert sorted(p.name for p in tmp_store.iterdir()) == ["ckpt-1.json", "ckpt-2.json", "sink.jsonl"]
    trace = Trace(tuple(run_schedule(s, ScheduleStore(tmp_store, s.area))))
    assert_trace("two-crashes", s, trace, CASES["two-crashes"][2])
    # A finished schedule is read back from its sink, not run again.
    assert run_schedule(s, ScheduleStore(tmp_store, s.area)) == list(trace.events)


def test_restore_reads_the_snapshot_from_durable_storage(tmp_store: Path) -> None:
    s = parse_schedule(*CASES["restore-smaller"][:2])
    with pytest.raises(InjectedFailure):
        run_schedule(s, ScheduleStore(tmp_store, s.area))
    # Tamper with the stored snapshot: the restored incarnation must replay what is on disk.
    (tmp_store / "ckpt-1.json").write_text(json.dumps([{"record": 2, "value": 3, "timestamp": None}]))
    trace = Trace(tuple(run_schedule(s, ScheduleStore(tmp_store, s.area))))
    assert [render_event(e) for e in trace if e.step >= 5] == ["@5 invoke r2 #1"]


def test_events_of_an_attempt_that_died_without_a_marker_are_dropped(tmp_store: Path) -> None:
    s = parse_schedule(*CASES["crash-restore"][:2])
    with pytest.raises(InjectedFailure):
        run_schedule(s, ScheduleStore(tmp_store, s.area))
    with open(tmp_store / "sink.jsonl", "a") as f:  # a half-done attempt: an event, no marker
        f.write(json.dumps({"event": {"step": 7, "event": "invoke", "record": 5, "attempt": 9}}) + "\n")
    trace = Trace(tuple(run_with_retries(s, tmp_store)))  # the fail at step 9 is one more attempt
    assert_trace("crash-restore", s, trace, CASES["crash-restore"][2])


# --------------------------------------------------------------------------
# 3. async_map: real asyncio
# --------------------------------------------------------------------------


def test_async_map_ordered_output_is_input_order(spark: Any) -> None:
    from flink_semantics.adapters.pyspark.async_io import async_map

    async def double(v: int) -> list[int]:
        await asyncio.sleep(((v * 7919) % 7) * 0.002)
        return [2 * v]

    df = spark.range(0, 300, numPartitions=2).selectExpr("'R' AS kind", "id AS ts", "id AS value")
    rows = async_map(df, double, capacity=10, ordered=True).collect()
    assert [(r.kind, r.ts, r.value) for r in rows] == [("R", v, 2 * v) for v in range(300)]


def _input_with_watermarks(spark: Any, n: int, every: int) -> Any:
    rows = [("W", i, None) if i % every == every - 1 else ("R", i, i) for i in range(n)]
    return spark.createDataFrame(rows, "kind string, ts long, value long").coalesce(1)


def test_async_map_unordered_never_passes_a_watermark(spark: Any) -> None:
    from flink_semantics.adapters.pyspark.async_io import async_map

    async def slow_even(v: int) -> list[int]:
        await asyncio.sleep(0.02 if v % 2 == 0 else 0.001)  # odd values overtake even ones
        return [v]

    n, every = 120, 8
    rows = async_map(_input_with_watermarks(spark, n, every), slow_even, capacity=5, ordered=False).collect()
    out = [(r.kind, r.ts) for r in rows]
    # Expected by segment: the records between two watermarks, in any order, then the watermark.
    segments: list[tuple[list[int], int]] = []
    current: list[int] = []
    for i in range(n):
        if i % every == every - 1:
            segments.append((sorted(current), i))
            current = []
        else:
            current.append(i)
    pos = 0
    for records, wm in segments:
        got = out[pos:pos + len(records)]
        assert sorted(ts for _, ts in got) == records and all(k == "R" for k, _ in got), got
        assert out[pos + len(records)] == ("W", wm)
        pos += len(records) + 1
    assert pos == len(out)
    # Inside segments the output is really unordered (completion order): an odd value passed an even one.
    assert [ts for k, ts in out if k == "R"] != sorted(ts for k, ts in out if k == "R")


def test_async_map_keeps_at_most_capacity_calls_in_flight(spark: Any) -> None:
    from flink_semantics.adapters.pyspark.async_io import async_map

    state = {"in_flight": 0}

    async def peak(v: int) -> list[int]:
        state["in_flight"] += 1  # one copy of `state` per task: counts this partition's calls
        seen = state["in_flight"]
        await asyncio.sleep(0.005)
        state["in_flight"] -= 1
        return [seen]

    for capacity in (1, 7):
        for ordered in (True, False):
            df = spark.range(0, 200, numPartitions=2).selectExpr("id AS value")
            seen = [r.value for r in async_map(df, peak, capacity=capacity, ordered=ordered).collect()]
            assert len(seen) == 200
            assert max(seen) == capacity, (capacity, ordered)  # reached, never exceeded (AIO-9)


def test_async_map_watermarks_take_slots(spark: Any) -> None:
    from flink_semantics.adapters.pyspark.async_io import async_map

    state = {"in_flight": 0}

    async def peak(v: int) -> list[int]:
        state["in_flight"] += 1
        seen = state["in_flight"]
        await asyncio.sleep(0.005)
        state["in_flight"] -= 1
        return [seen]

    # Capacity 2 and a watermark after every record: while a record is in flight, its watermark
    # holds the other slot (AIO-6), so no two calls are ever in flight together.
    rows = [("W", i, None) if i % 2 else ("R", i, i) for i in range(40)]
    df = spark.createDataFrame(rows, "kind string, ts long, value long").coalesce(1)
    out = async_map(df, peak, capacity=2, ordered=False).collect()
    assert max(r.value for r in out if r.kind == "R") == 1


def test_async_map_timeout_result_and_retry(spark: Any) -> None:
    from flink_semantics.adapters.pyspark.async_io import async_map, retry_strategy

    attempts: dict[int, int] = {}

    async def flaky(v: int) -> list[int]:
        attempts[v] = attempts.get(v, 0) + 1
        if v % 3 == 0:
            await asyncio.sleep(10)  # never in time: the timeout handler gives [-1] (AIO-29)
        if v % 3 == 1 and v < 20 and attempts[v] == 1:
            raise ConnectionError("first attempt fails")  # retried (AIO-33)
        return [v]

    # Capacity 5 over 30 rows in one partition: end of input (which ends retrying, AIO-39) is
    # taken only when r29 is admitted, long after the failing first attempts of r1..r19.
    df = spark.range(0, 30, numPartitions=1).selectExpr("id AS value")
    rows = async_map(df, flaky, capacity=5, timeout=0.3, on_timeout=[-1],
                     retry=retry_strategy(2, delay=0.01, on_error=ConnectionError)).collect()
    assert [r.value for r in rows] == [-1 if v % 3 == 0 else v for v in range(30)]


def test_async_map_refuses_invalid_configurations() -> None:
    from flink_semantics.adapters.pyspark.async_io import async_map, retry_strategy

    async def f(v: int) -> list[int]:
        return [v]

    with pytest.raises(ValueError, match="AIO-1"):
        async_map(None, f, capacity=0)
    with pytest.raises(ValueError, match="AIO-3"):
        async_map(None, f, retry=retry_strategy(1, on_error=True))
    with pytest.raises(TypeError, match="async def"):
        async_map(None, lambda v: [v])  # type: ignore[arg-type, return-value]


def test_operator_on_a_real_loop_fails_the_task_on_timeout() -> None:
    """The same operator on a real event loop (no Spark): the default timeout handler fails (AIO-28)."""
    from flink_semantics.adapters.pyspark.async_io import AsyncFunctionFailed, operator_config, run_operator

    async def hang(v: int) -> list[int]:
        await asyncio.sleep(10)
        return [v]

    rows = [("R", None, 1)]
    with pytest.raises(AsyncFunctionFailed, match=r"AIO-23.*\(timeout\)"):
        list(run_operator(iter(rows), hang, operator_config(timeout=0.02)))


def test_operator_on_a_real_loop_refuses_null_results() -> None:
    from flink_semantics.adapters.pyspark.async_io import AsyncFunctionFailed, operator_config, run_operator

    async def none(v: int) -> Any:
        return None

    with pytest.raises(AsyncFunctionFailed, match="null_result"):
        list(run_operator(iter([("R", None, 1)]), none, operator_config()))


def test_operator_on_a_real_loop_does_not_retry_after_end_of_input() -> None:
    """AIO-39: end of input comes right behind the only record, so its error is final."""
    from flink_semantics.adapters.pyspark.async_io import (
        AsyncFunctionFailed,
        operator_config,
        retry_strategy,
        run_operator,
    )

    async def fails(v: int) -> list[int]:
        raise ConnectionError("down")

    config = operator_config(timeout=1.0, retry=retry_strategy(3, delay=0.001, on_error=True))
    with pytest.raises(AsyncFunctionFailed, match=r"AIO-23.*\(error\)"):
        list(run_operator(iter([("R", None, 1)]), fails, config))


def test_missing_java_is_a_one_line_adapter_error() -> None:
    import subprocess
    import sys

    code = (  # the adapter refuses to build, before any JVM starts
        "from flink_semantics.adapters.pyspark import PySparkAdapter\n"
        "from flink_semantics.spec.adapter import AdapterError\n"
        "try:\n"
        "    PySparkAdapter()\n"
        "except AdapterError as e:\n"
        "    print(repr(str(e)))\n"
    )
    env = {"JAVA_HOME": "/nonexistent-java", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=HANG_GUARD_S)
    message = out.stdout.strip()
    assert message.startswith("'pyspark adapter: Java not found") and "\\n" not in message, out
