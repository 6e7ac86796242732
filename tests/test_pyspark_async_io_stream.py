"""async_map on streaming DataFrames, and async I/O schedules through it (async_io/stream.py).

The spec's own examples (spec/async-io.md, traces written by hand there) run through `run_many` in one
streaming query and are compared with the written traces; the new options of async_map are checked
on hand-derived values (virtual time: a sleep of 2 s ends at exactly 2.0 on the loop's clock).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance.checker import compare_scripted
from flink_semantics.conformance.examples import load_examples

pytestmark = pytest.mark.spark

UNSUPPORTED_STEPS = ("checkpoint", "crash", "restore")


@pytest.fixture(scope="module")
def spark() -> Any:
    from flink_semantics.adapters.pyspark.session import get_spark

    return get_spark()


def test_spec_examples_through_a_streaming_query(spark: Any) -> None:
    from flink_semantics.adapters.pyspark.async_io.stream import run_many

    examples = [e for e in load_examples() if e.area == "async_io" and e.refusal is None
                and not any(s.op in UNSUPPORTED_STEPS for s in e.schedule.steps)]
    assert len(examples) > 40
    root = Path(tempfile.mkdtemp())
    try:
        traces = run_many(spark, [e.schedule for e in examples], root, partitions=2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    problems = [f"{e.id}: {m}" for e, t in zip(examples, traces)
                if (m := compare_scripted(e.schedule, e.trace, t)) is not None]
    assert not problems, "\n".join(problems)


def test_refused_configuration_runs_no_query() -> None:
    from flink_semantics.adapters.pyspark.async_io.stream import run_many
    from flink_semantics.spec.areas.async_io import AsyncIoConfig, RecordStep
    from flink_semantics.spec.schedule import Schedule

    schedule = Schedule("async_io", AsyncIoConfig(capacity=0), (RecordStep(7),))
    [trace] = run_many(None, [schedule], Path("/nonexistent"))  # no session needed: nothing runs
    assert trace.rejected and "AIO-1" in trace.events[0].reason


def test_async_map_groups_on_virtual_time(spark: Any) -> None:
    """Two groups, capacity 1 each: a group's calls run one after the other, the groups side by side;
    on virtual time a call sleeping v seconds ends exactly v seconds after its admission."""
    from flink_semantics.adapters.pyspark.async_io import async_map, virtual_time_loop

    async def slow_double(v: int) -> list[int]:
        await asyncio.sleep(v)
        return [2 * v]

    rows = [(1, "R", 3), (1, "R", 2), (2, "R", 1), (2, "R", 5)]
    df = spark.createDataFrame(rows, "g long, kind string, value long").coalesce(1)
    out = async_map(df, slow_double, capacity=1, group_col="g", loop_factory=virtual_time_loop,
                    audit=True).collect()
    results = sorted((r.g, r.value, r.at) for r in out if r.kind == "R")
    assert results == [(1, 4, 5.0), (1, 6, 3.0), (2, 2, 1.0), (2, 10, 6.0)]
    calls = sorted((r.g, r.seq, r.attempt, r.at) for r in out if r.kind == "I")
    assert calls == [(1, 0, 1, 0.0), (1, 1, 1, 3.0), (2, 0, 1, 0.0), (2, 1, 1, 1.0)]
    assert sorted(r.g for r in out if r.kind == "E") == [1, 2]


def test_on_failure_report_stops_only_the_failed_group(spark: Any) -> None:
    from flink_semantics.adapters.pyspark.async_io import async_map, virtual_time_loop

    async def fails_on_zero(v: int) -> list[int]:
        await asyncio.sleep(1)
        if v == 0:
            raise ConnectionError("down")
        return [v]

    rows = [(1, 0), (1, 7), (2, 8), (2, 9)]
    df = spark.createDataFrame(rows, "g long, value long").coalesce(1)
    out = async_map(df, fails_on_zero, capacity=1, group_col="g", loop_factory=virtual_time_loop,
                    audit=True, on_failure="report").collect()
    assert sorted((r.g, r.value) for r in out if r.kind == "R") == [(2, 8), (2, 9)]  # AIO-58: nothing of g 1
    assert [(r.g, r.seq, r.reason) for r in out if r.kind == "F"] == [(1, 0, "error")]
    assert [r.g for r in out if r.kind == "E"] == [2]


def test_bad_options_are_value_errors_naming_the_parameter() -> None:
    from flink_semantics.adapters.pyspark.async_io import async_map

    async def f(v: int) -> list[int]:
        return [v]

    with pytest.raises(ValueError, match="on_failure"):
        async_map(None, f, on_failure="ignore")
    with pytest.raises(ValueError, match="needs audit"):
        async_map(None, f, on_failure="report")


def test_timers_of_one_deadline_fire_in_registration_order() -> None:
    """AIO-54 on an asyncio loop: asyncio's timer heap does not keep insertion order for equal times."""
    from flink_semantics.adapters.pyspark.async_io.api import LoopTimers, virtual_time_loop

    loop = virtual_time_loop()
    timers = LoopTimers(loop)
    fired: list[int] = []
    for i in range(20):
        timers.register(5.0 if i % 2 else 3.0, lambda i=i: fired.append(i))
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()
    assert fired == [i for i in range(0, 20, 2)] + [i for i in range(1, 20, 2)]
