"""The mini-batch area on Structured Streaming: the public API (adapters/pyspark/mini_batch/api.py,
`changelog_aggregate`) and the conformance runner through it (adapters/pyspark/mini_batch/stream.py,
`run_many`: many schedules per query, a query per round of incarnations, restores from each
schedule's checkpoint read with Spark's state data source), compared with the reference model's
trace by the suite's own comparison (`compare_scripted`: the keys of a bundle in any order, MB-9).

1. Hand-picked schedules in the notation of spec/mini-batch.md, one for each part of the area, all
   in one `run_many` call: one query per round, one micro-batch per planned batch.
2. The API on a stream of its own (files, as a user's CDC feed): the changelog with a subset of the
   aggregates, the state read back at a batch and given to a second query, bad arguments refused
   before any query starts.
3. The same rounds, micro-batches and stages without Spark (`run_in_process`) on the rules'
   examples and on many drawn schedules in one call: the planning itself, in seconds.

Drawn schedules through Spark are the suite's (`--adapter pyspark-stream --areas mini_batch`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance.areas.mini_batch import Features, schedules
from flink_semantics.conformance.checker import compare_scripted
from flink_semantics.conformance.examples import load_examples, notation
from flink_semantics.reference import expected_trace
from flink_semantics.spec.schedule import Event, Schedule, Trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MB = notation("mini_batch")

# name -> (configuration, steps, steps per micro-batch (None: cut only at checkpoint, crash, end))
CASES: dict[str, tuple[dict[str, Any], str, int | None]] = {
    # MB-1, MB-3, MB-24, MB-18: mini-batch off (two_phase ignored), each row a bundle of its own;
    # leading retractions of keys without state dropped; the valve passes 10, not 7 (MB-8).
    "per row": ({"enabled": False, "update_before": True, "two_phase": True}, """
        row k1 -U 4
        row k1 +I 3
        row k1 +I 5
        watermark 10
        row k1 -U 3
        row k2 -D 1
        row k2 +I 1
        watermark 7
        row k1 -D 5
        end
    """, 4),
    # MB-4, MB-5, MB-10, MB-11, MB-12, MB-20, MB-22: processing time, size 3 and the timer both
    # finish bundles; an unchanged key updated with ttl; upstream 50 dropped; two timers in one
    # advance; micro-batches of 3 steps, so bundles span them (stage 1's state crosses batches).
    "processing time": ({"enabled": True, "allow_latency": 10, "size": 3, "update_before": True,
                         "ttl": True}, """
        row k1 +I 1
        advance 9
        row k2 +I 1
        advance 1
        row k1 -U 1
        row k1 +U 1
        row k2 +I 2
        row k1 +I 3
        watermark 50
        advance 25
        row k3 +I 4
        end
    """, 3),
    # MB-6, MB-7, MB-12: the row-time assigner holds watermarks inside an interval.
    "row time": ({"enabled": True, "allow_latency": 10, "size": 100, "assigner": "rowtime"}, """
        row k1 +I 1
        watermark 5
        watermark 9
        row k1 +I 2
        watermark 25
        watermark 27
        row k2 +I 3
        watermark 29
        row k2 -U 3
        end
    """, 4),
    # MB-25, MB-26 (C1): a local flush of k2, k3 crosses the global size: k2 finishes the global
    # bundle with k1, k3 waits for the next finish (the timer's watermark).
    "two-phase": ({"enabled": True, "allow_latency": 100, "size": 2, "two_phase": True}, """
        row k1 +I 1
        row k1 +I 2
        row k2 +I 3
        row k3 +I 4
        row k1 -U 1
        advance 100
        row k2 +I 6
        row k2 -D 3
        row k4 +I 0
        end
    """, 4),
    # MB-8, MB-15: watermarks dropped while idle (the bundle waits), a repeated status not repeated.
    "statuses": ({"enabled": True, "allow_latency": 10, "size": 100}, """
        row k1 +I 4
        status idle
        advance 10
        status idle
        status active
        advance 10
        row k2 +I 1
        status idle
        advance 10
        status active
        end
    """, 4),
    # MB-13, MB-29, two-phase: checkpoints finish both bundles; the local bundle's k3 +I 9 is lost at
    # the crash; `restore 1` (an earlier checkpoint than the last) and `restore none`.
    "checkpoint, crash, restore": ({"enabled": True, "allow_latency": 100, "size": 2, "two_phase": True,
                                    "update_before": True}, """
        row k1 +I 1
        row k1 +I 2
        checkpoint 1
        row k2 +I 3
        row k3 +I 4
        checkpoint 2
        row k1 -U 1
        row k2 +I 5
        row k3 +I 9
        crash
        restore 1
        row k1 +I 7
        row k2 +I 1
        crash
        restore none
        row k4 +I 2
        end
    """, None),
    # MB-30, two-phase: SUM over BIGINT wraps around as a Java long (Flink's; Spark SQL's sum in ANSI
    # mode would raise): local accumulators of MAX + MAX wrap to -2, the wrapped sum is stored in
    # RocksDB at checkpoint 1, a retraction after it wraps again, the restore takes the state back
    # to -2; negative keys, Long.MIN_VALUE among them, are keys like any other.
    "sums wrap around": ({"enabled": True, "allow_latency": 100, "size": 2, "two_phase": True,
                          "update_before": True}, """
        row k-1 +I 9223372036854775807
        row k-1 +I 9223372036854775807
        row k-9223372036854775808 +I -9223372036854775808
        row k-9223372036854775808 +I -1
        checkpoint 1
        row k-1 +I 2
        row k-1 -U 9223372036854775807
        row k-1 +I 3
        advance 100
        crash
        restore 1
        row k-1 +I 1
        row k0 +I 4
        end
    """, 3),
}


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="test-mb-stream-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def check(schedule: Schedule, events: Sequence[Event]) -> None:
    """The observed events are the reference's trace, up to MB-9 (the suite's comparison)."""
    want = expected_trace(schedule)
    problem = compare_scripted(schedule, want, Trace(tuple(events)))
    if problem is not None:
        pytest.fail(f"{problem.what} (rules: {', '.join(problem.rules)})\nschedule: {schedule.to_json()}\n"
                    "expected:\n  " + "\n  ".join(map(MB.render, want.events))
                    + "\nobserved:\n  " + "\n  ".join(map(MB.render, events)), pytrace=False)


@pytest.mark.spark
def test_schedules_through_one_query_per_round(spark: Any, workdir: Path) -> None:
    """The hand-picked schedules and a refused one, all in one `run_many`: the reference's traces;
    a query per round (the restores of "checkpoint, crash, restore" and "sums wrap around": three
    rounds), one micro-batch per planned batch; the refused one (MB-2) ran in none."""
    from flink_semantics.adapters.pyspark.mini_batch.stream import StreamRun

    cases = [MB.schedule(config, steps) for config, steps, _ in CASES.values()]
    refused = MB.schedule({"enabled": True, "allow_latency": 0, "size": 10}, "row k1 +I 5\nend",
                          validate=False)
    run = StreamRun(spark, [*cases, refused], workdir, steps_per_batch=5)
    traces = run.run()
    for s, trace in zip(cases, traces):
        check(s, trace.events)
    assert [e.event for e in traces[-1].events] == ["rejected"]
    assert traces[-1].events[0].reason.startswith("MB-2")
    assert run.queries == 3
    assert run.micro_batches == run.planned > run.queries


# Two examples of spec/mini-batch.md with a restore, and their traces as the spec gives them.
FAULT_CASES = [
    # MB-13: the bundle finishes before the barrier; k1 +I 6 after it is lost with the crash.
    (MB.schedule({"enabled": True, "allow_latency": 100, "size": 100}, """
        row k1 +I 4
        checkpoint 1
        row k1 +I 6
        crash
        restore 1
        row k1 +I 1
        end
    """), MB.trace("""
        @1 +I k1 count=1 sum=4 min=4 max=4
        @6 +U k1 count=2 sum=5 min=1 max=4
        @6 watermark MAX
    """)),
    # MB-29: the valve starts afresh (watermark 5 passes after 10), the accumulator from checkpoint 1.
    (MB.schedule({"enabled": False}, """
        watermark 10
        checkpoint 1
        row k1 +I 1
        crash
        restore 1
        watermark 5
        row k1 +I 2
    """), MB.trace("""
        @0 watermark 10
        @2 +I k1 count=1 sum=1 min=1 max=1
        @5 watermark 5
        @6 +I k1 count=1 sum=2 min=2 max=2
    """)),
]


@pytest.mark.spark
def test_injected_task_failures_change_no_trace(spark: Any, tmp_path: Path) -> None:
    """Armed with share 1 and depth 3 (chaos.py, as the fault runs): the first three attempts of
    every task of the source reader and of both stages fail, each after more of its work (the
    stages after a state update, before the commit); Spark runs it again from the last committed
    state each time.  The traces are the spec's, as unarmed; the restore is counted as a query
    restart."""
    from flink_semantics.adapters.pyspark import chaos
    from flink_semantics.adapters.pyspark.mini_batch.stream import run_many

    batch = [s for s, _ in FAULT_CASES]
    armed, unarmed = tmp_path / "armed", tmp_path / "unarmed"
    armed.mkdir()
    unarmed.mkdir()
    chaos.arm(armed, 1.0, depth=3)
    got = run_many(spark, batch, armed)
    assert chaos.injected(armed) > 0
    assert chaos.restarts(armed) == 1  # one round of restores: one query started from checkpoints
    assert got == run_many(spark, batch, unarmed)
    assert chaos.injected(unarmed) == 0
    assert got == [want for _, want in FAULT_CASES]


# The API's stream: (lsn, ts, op, k, v) per file (a micro-batch each)
API_FILES = [
    [(1, 0, "+I", 1, 5), (2, 1, "+I", 1, 7), (3, 2, "+I", 2, 3), (4, 3, "-U", 1, 5)],
    [(5, 4, "+U", 1, 9), (6, 5, "-D", 2, 3), (7, 6, "-U", 1, 7), (8, 7, "+U", 1, 8)],
]
API_SCHEMA = "lsn long, ts long, op string, k long, v long"


def _feed(directory: Path, files: list[list[tuple[Any, ...]]]) -> None:
    directory.mkdir()
    for i, rows in enumerate(files):
        lines = [json.dumps(dict(zip(("lsn", "ts", "op", "k", "v"), r))) for r in rows]
        path = directory / f"{i:03d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # the file source takes files in mtime order


def _run_to_end(df: Any, checkpoint: Path, name: str) -> list[Any]:
    from flink_semantics.adapters.pyspark.mini_batch.api import STATE_STORE_CONF
    from flink_semantics.adapters.pyspark.session import query_conf

    with query_conf(df.sparkSession, STATE_STORE_CONF):
        query = (df.writeStream.format("memory").queryName(name).trigger(availableNow=True)
                 .option("checkpointLocation", str(checkpoint)).start())
    query.awaitTermination()
    rows = df.sparkSession.table(name).orderBy("seq", "n", "kpos", "sub").collect()
    df.sparkSession.catalog.dropTempView(name)
    return rows


@pytest.mark.spark
def test_api_on_a_stream_and_a_restore_from_its_state(spark: Any, workdir: Path) -> None:
    """`changelog_aggregate` on a file stream, COUNT and MAX only, bundles of 2 (MB-10): +I, -U/+U,
    -D (MB-19, MB-20, MB-23); the last bundle changes SUM and MIN only, so with COUNT and MAX
    selected it emits nothing (MB-21).  `aggregation_state` reads the accumulators at the last batch
    (the state data source) and a second query, mini-batch off (MB-24), starts from them (MB-29)."""
    from flink_semantics.adapters.pyspark.mini_batch.api import aggregation_state, changelog_aggregate

    _feed(workdir / "in", API_FILES)
    src = spark.readStream.schema(API_SCHEMA).option("maxFilesPerTrigger", 1).json(str(workdir / "in"))
    out = changelog_aggregate(src, key="k", op="op", value="v", aggregates=["count", "max"],
                              mini_batch=True, allow_latency_ms=1000, bundle_size=2, update_before=True,
                              order="lsn", time="ts")
    assert out.columns == ["k", "op", "count", "max", "seq", "n", "kpos", "sub"]
    rows = _run_to_end(out, workdir / "a", "mb_api_a")
    assert [(r.seq, r.k, r.op, r["count"], r["max"]) for r in rows] == [
        (2, 1, "+I", 2, 7),
        (4, 2, "+I", 1, 3), (4, 1, "-U", 2, 7), (4, 1, "+U", 1, 7),
        (6, 1, "-U", 1, 7), (6, 1, "+U", 2, 9), (6, 2, "-D", 1, 3),
    ]
    state = aggregation_state(spark, str(workdir / "a"), 1).collect()
    assert [(r.key, r["count"], r["sum"], sorted(map(tuple, json.loads(r["values"])))) for r in state] == [
        (1, 2, 17, [(8, 1), (9, 1)])]

    _feed(workdir / "in2", [[(9, 0, "-D", 1, 9)]])
    src2 = spark.readStream.schema(API_SCHEMA).json(str(workdir / "in2"))
    restored = aggregation_state(spark, str(workdir / "a"), 1)
    out2 = changelog_aggregate(src2, key="k", op="op", value="v", order="lsn", initial_state=restored)
    rows2 = _run_to_end(out2, workdir / "b", "mb_api_b")
    assert [(r.k, r.op, r["count"], r["sum"], r["min"], r["max"]) for r in rows2] == [(1, "+U", 1, 8, 8, 8)]


BAD_ARGUMENTS: list[tuple[dict[str, Any], str, str]] = [
    ({"mini_batch": True, "allow_latency_ms": 0, "bundle_size": 10}, "allow_latency_ms", "MB-2"),
    ({"mini_batch": True, "allow_latency_ms": 10, "bundle_size": -1}, "bundle_size", "MB-2"),
    ({"mini_batch": True, "allow_latency_ms": 10}, "bundle_size", "MB-2"),
    ({"aggregates": ["count", "avg"]}, "aggregates", "MB-30"),
    ({"aggregates": []}, "aggregates", "MB-30"),
    ({"assigner": "eventtime"}, "assigner", "MB-4"),
    ({"state_ttl_ms": 0}, "state_ttl_ms", "MB-22"),
    ({"key": "nope"}, "key", "MB-30"),
    ({"value": "op"}, "value", "MB-30"),
    ({"op": "k"}, "op", "MB-17"),
    ({"order": "op"}, "order", "MB-9"),
    ({"order": None}, "order", "MB-9"),
    ({"configs": {1: "fast"}, "partition_by": "k"}, "configs", "MB-2"),
    ({"configs": {1: None}}, "configs", "MB-2"),
]


@pytest.mark.spark
@pytest.mark.parametrize("bad,param,rule", BAD_ARGUMENTS)
def test_bad_arguments_are_refused_before_any_query(spark: Any, tmp_path: Path, bad: dict[str, Any],
                                                    param: str, rule: str) -> None:
    """A ValueError naming the parameter and the rule, and no query started."""
    from flink_semantics.adapters.pyspark.mini_batch.api import changelog_aggregate

    src = spark.readStream.schema(API_SCHEMA).json(str(tmp_path))
    args: dict[str, Any] = {"key": "k", "op": "op", "value": "v", "order": "lsn", **bad}
    before = len(spark.streams.active)
    with pytest.raises(ValueError) as e:
        changelog_aggregate(src, **args)
    assert param in str(e.value) and rule in str(e.value), str(e.value)
    assert len(spark.streams.active) == before


def test_examples_on_the_stages_without_spark() -> None:
    """Every executable example of spec/mini-batch.md through the rounds, micro-batches and stages
    without Spark, all in one call, at several micro-batch sizes."""
    from flink_semantics.adapters.pyspark.mini_batch.stream import run_in_process

    examples = [ex for ex in load_examples() if ex.area == "mini_batch" and ex.refusal is None]
    assert len(examples) > 30
    for steps_per_batch in (None, 1, 2, 5):
        for ex, got in zip(examples, run_in_process([ex.schedule for ex in examples], steps_per_batch)):
            assert compare_scripted(ex.schedule, ex.trace, got) is None, (ex.id, steps_per_batch)


DRAWN = st.one_of(schedules(Features(two_phase=True, checkpoints=True, status=True, rowtime=True,
                                     max_steps=40)),
                  schedules(Features(enabled=False, checkpoints=True, status=True)),
                  schedules(Features(rowtime=True, checkpoints=True, status=True)),
                  schedules(Features(checkpoints=True, status=True)))


@settings(max_examples=20, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(DRAWN, min_size=1, max_size=40), steps_per_batch=st.sampled_from([None, 1, 2, 3, 8]))
def test_drawn_batches_on_the_stages_without_spark(batch: list[Schedule],
                                                   steps_per_batch: int | None) -> None:
    """Batches of drawn schedules multiplexed through the stages without Spark (rounds, aligned
    checkpoints, restores from each schedule's own checkpoint): the reference's traces."""
    from flink_semantics.adapters.pyspark.mini_batch.stream import run_in_process

    for s, got in zip(batch, run_in_process(batch, steps_per_batch)):
        check(s, got.events)
