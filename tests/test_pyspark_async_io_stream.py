"""async_map on streaming DataFrames, and async I/O schedules through it (async_io/stream.py).

The spec's own examples (spec/async-io.md, traces written by hand there) run through `run_many` in one
streaming query and are compared with the written traces; the new options of async_map are checked
on hand-derived values (virtual time: a sleep of 2 s ends at exactly 2.0 on the loop's clock).
Checkpoints, crashes and restores (a committed micro-batch; a query stopped and started again from a
copy of its checkpoint location) are checked on hand-written traces, Spark's deviation included: a
micro-batch commits only after the calls in flight completed.
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

from tests.async_io_cases import assert_trace, parse_schedule, render_event

pytestmark = pytest.mark.spark

CHECKPOINT_STEPS = ("checkpoint", "crash", "restore")  # the spec's examples of them all hold an element
# in flight at the checkpoint, which a Spark micro-batch never commits (stream-expected-failures.json)


@pytest.fixture(scope="module")
def spark() -> Any:
    from flink_semantics.adapters.pyspark.runner_session import runner_spark

    return runner_spark()


def test_spec_examples_through_a_streaming_query(spark: Any) -> None:
    from flink_semantics.adapters.pyspark.async_io.stream import run_many

    examples = [e for e in load_examples() if e.area == "async_io" and e.refusal is None
                and not any(s.op in CHECKPOINT_STEPS for s in e.schedule.steps)]
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


# Nothing in flight at the checkpoint: Spark's commit is Flink's checkpoint.  r1 is called and lost in
# the crash (AIO-58); the restore of checkpoint 1 restores an empty queue, with capacity 1 (AIO-57),
# so r3 waits for r2's result.
RESTORED = ({"capacity": 2}, """
    record 7
    complete r0 [70]
    checkpoint 1
    record 8
    crash
    restore 1 capacity=1
    record 9
    record 6
    complete r2 [90]
    complete r3 [60]
""", """
    @0 invoke r0 #1
    @1 emit r0 70 ts=-
    @2 checkpoint 1 []
    @3 invoke r1 #1
    @6 invoke r2 #1
    @8 emit r2 90 ts=-
    @8 invoke r3 #1
    @9 emit r3 60 ts=-
""")


def test_plan_cuts_micro_batches_at_checkpoints_and_queries_at_restores() -> None:
    from flink_semantics.adapters.pyspark.async_io.stream import plan

    p = plan(3, parse_schedule(*RESTORED[:2]))
    first, second = p.incarnations
    assert [[r[:3] for r in seg.rows] for seg in first] == [[("R", None, "3:0")], [("R", None, "3:1"),
                                                                                  ("X", None, "")]]
    assert [(seg.records_before, seg.capacity, seg.checkpoint) for seg in first] == [(0, None, (2, 1)),
                                                                                      (1, None, None)]
    [seg] = second
    assert [r[:3] for r in seg.rows] == [("R", None, "3:2"), ("R", None, "3:3"), ("E", None, "")]
    assert (seg.records_before, seg.capacity, seg.checkpoint) == (2, 1, None)


def test_checkpoint_crash_and_restore_through_queries(spark: Any, tmp_path: Path) -> None:
    """Beside a schedule without checkpoints (one round only), RESTORED runs in two queries: the
    second starts from a copy of the first one's checkpoint location cut after the micro-batch that
    committed checkpoint 1 (offset 0), and runs the micro-batch of offset 1 again with new input."""
    from flink_semantics.adapters.pyspark import chaos
    from flink_semantics.adapters.pyspark.async_io.stream import run_many

    plain = parse_schedule({"capacity": 1}, "record 5\ncomplete r0 [50]\nend")
    schedules = [parse_schedule(*RESTORED[:2]), plain]
    restored, other = run_many(spark, schedules, tmp_path)
    assert_trace("restored", schedules[0], restored, RESTORED[2])
    assert_trace("plain", plain, other, "@0 invoke r0 #1\n@1 emit r0 50 ts=-\n@2 finished")
    assert sorted(f.name for f in (tmp_path / "checkpoint-0" / "commits").iterdir() if f.name.isdigit()) \
        == ["0", "1"]
    assert sorted(f.name for f in (tmp_path / "checkpoint-1" / "commits").iterdir() if f.name.isdigit()) \
        == ["0", "1"]
    assert chaos.restarts(tmp_path) == 1


def test_a_micro_batch_commits_after_the_calls_in_flight(spark: Any, tmp_path: Path) -> None:
    """Spark's deviation (AIO-44, stream-expected-failures.json): at checkpoint 1 r0 is in flight; Flink
    stores it (`@1 checkpoint 1 [r0]`), while the micro-batch waits for r0's result (at step 2) and
    commits after it, holding nothing."""
    from flink_semantics.adapters.pyspark.async_io.stream import run_many

    schedule = parse_schedule({"capacity": 1}, "record 7\ncheckpoint 1\ncomplete r0 [70]")
    [trace] = run_many(spark, [schedule], tmp_path)
    assert [render_event(e) for e in trace.events] == ["@0 invoke r0 #1", "@2 emit r0 70 ts=-",
                                                       "@1 checkpoint 1 []"]


def test_injected_task_failures_leave_the_traces_unchanged(spark: Any, tmp_path: Path) -> None:
    """Every source task fails in its first three attempts, a quarter, half and three quarters
    through its partition (chaos.arm share 1, depth 3, as the fault runs): Spark runs it again from
    the same offsets each time, and the traces are the hand-written ones, as unarmed."""
    from flink_semantics.adapters.pyspark import chaos
    from flink_semantics.adapters.pyspark.async_io.stream import run_many

    plain = parse_schedule({"capacity": 2, "mode": "unordered"},
                           "record 1\nrecord 2\ncomplete r1 [20]\ncomplete r0 [10]\nend")
    schedules = [parse_schedule(*RESTORED[:2]), plain]
    expected = [RESTORED[2], "@0 invoke r0 #1\n@1 invoke r1 #1\n@2 emit r1 20 ts=-\n@3 emit r0 10 ts=-"
                             "\n@4 finished"]
    (tmp_path / "plain").mkdir()
    (tmp_path / "armed").mkdir()
    unarmed = run_many(spark, schedules, tmp_path / "plain")
    chaos.arm(tmp_path / "armed", 1.0, depth=3)
    armed = run_many(spark, schedules, tmp_path / "armed")
    for s, want, a, b in zip(schedules, expected, unarmed, armed):
        assert_trace("unarmed", s, a, want)
        assert_trace("armed", s, b, want)
    assert armed == unarmed
    assert chaos.injected(tmp_path / "plain") == 0
    assert chaos.injected(tmp_path / "armed") > 0
