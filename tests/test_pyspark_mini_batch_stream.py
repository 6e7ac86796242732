"""The mini-batch area on Structured Streaming (adapters/pyspark/mini_batch/stream.py): schedules run
as real streaming queries (a scripted Python source, the job's non-keyed part and the aggregation as
two chained `transformWithStateInPandas` on RocksDB, a query per incarnation, checkpoints as
committed micro-batches, restores from copies of their directories), compared with the reference
model's trace by the suite's own comparison (`compare_scripted`: the keys of a bundle in any order,
MB-9).

1. Hand-picked schedules in the notation of spec/mini-batch.md, one for each part of the area, some
   cut into micro-batches of a few steps so that bundles span micro-batches; each checks that Spark
   ran one micro-batch per batch of the script.
2. A few drawn schedules (mixed features, checkpoints and restores among them).
3. The same stages and micro-batches without Spark (`run_in_process`) on the rules' examples and on
   many drawn schedules: the staging itself, in a second.

A schedule costs seconds (a query per incarnation, about a second a micro-batch): few of them here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance.areas.mini_batch import Features, schedules
from flink_semantics.conformance.checker import compare_scripted
from flink_semantics.conformance.examples import load_examples, notation
from flink_semantics.reference import expected_trace
from flink_semantics.spec.areas.mini_batch import RestoreStep, RowStep
from flink_semantics.spec.schedule import Event, Schedule, Trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.spark

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


# Cases run with the keys' state in two partitions (the others in one): the same trace.
PARTITIONS = {"two-phase": 2, "processing time": 2}


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="test-mb-stream-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def check(schedule: Schedule, events: list[Event]) -> None:
    """The observed events are the reference's trace, up to MB-9 (the suite's comparison)."""
    want = expected_trace(schedule)
    problem = compare_scripted(schedule, want, Trace(tuple(events)))
    if problem is not None:
        pytest.fail(f"{problem.what} (rules: {', '.join(problem.rules)})\nschedule: {schedule.to_json()}\n"
                    "expected:\n  " + "\n  ".join(map(MB.render, want.events))
                    + "\nobserved:\n  " + "\n  ".join(map(MB.render, events)), pytrace=False)


def through_the_stream(spark: Any, schedule: Schedule, root: Path, steps_per_batch: int | None,
                       partitions: int) -> Any:
    from flink_semantics.adapters.pyspark.mini_batch.stream import StreamRun

    run = StreamRun(spark, schedule, root, steps_per_batch, partitions)
    run.run()
    return run


@pytest.mark.parametrize("name", list(CASES))
def test_schedule_through_structured_streaming(name: str, spark: Any, workdir: Path) -> None:
    """A hand-picked schedule gives the reference's trace, one micro-batch per script batch."""
    config, steps, steps_per_batch = CASES[name]
    s = MB.schedule(config, steps)
    run = through_the_stream(spark, s, workdir, steps_per_batch, PARTITIONS.get(name, 1))
    check(s, run.events)
    assert run.micro_batches == run.planned, (run.micro_batches, run.planned)
    assert run.planned > len(run.queries), "a query of one micro-batch"


def test_refused_configuration_runs_no_query(spark: Any) -> None:
    """MB-2: the single `rejected` event, and no query started."""
    from flink_semantics.adapters.pyspark.mini_batch.stream import run_schedule

    s = MB.schedule({"enabled": True, "allow_latency": 0, "size": 10, "two_phase": True}, "row k1 +I 5\nend",
                    validate=False)
    before = len(spark.streams.active)
    events = run_schedule(spark, s)
    check(s, events)
    assert [e.event for e in events] == ["rejected"] and events[0].reason.startswith("MB-2")
    assert len(spark.streams.active) == before


def _worth_a_query(s: Schedule) -> bool:
    """A restore or two (a query each: a drawn schedule costs seconds), one from a checkpoint, and
    rows enough to bundle (the first examples hypothesis draws are the plainest)."""
    restores = [step for step in s.steps if isinstance(step, RestoreStep)]
    rows = sum(isinstance(step, RowStep) for step in s.steps)
    return 1 <= len(restores) <= 2 and any(r.checkpoint is not None for r in restores) and rows >= 5


FEATURES = [Features(checkpoints=True, status=True, max_steps=16, two_phase=True),
            Features(checkpoints=True, status=True, max_steps=16, enabled=False),
            Features(checkpoints=True, status=True, max_steps=16, rowtime=True)]
DRAWN = st.one_of(*(schedules(f).filter(_worth_a_query) for f in FEATURES))


# A drawn schedule is a query (about 14 s): two in the default run, more in `tox -e thorough`.
@settings(max_examples=2 if os.environ.get("CONFORMANCE_PROFILE", "default") == "default" else 8,
          deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much])
@given(schedule=DRAWN)
def test_drawn_schedules_through_structured_streaming(schedule: Schedule, spark: Any) -> None:
    """Drawn schedules (two-phase, mini-batch off, row time; statuses, checkpoints and restores):
    the reference's traces, in micro-batches of 3 steps."""
    from flink_semantics.adapters.pyspark.mini_batch.stream import run_schedule

    check(schedule, run_schedule(spark, schedule, steps_per_batch=3))


def test_examples_on_the_stages_without_spark() -> None:
    """Every executable example of spec/mini-batch.md through the stages and micro-batches without
    Spark, at several micro-batch sizes."""
    from flink_semantics.adapters.pyspark.mini_batch.stream import run_in_process

    examples = [ex for ex in load_examples() if ex.area == "mini_batch" and ex.refusal is None]
    assert len(examples) > 30
    for ex in examples:
        for steps_per_batch in (None, 1, 2, 5):
            got = Trace(tuple(run_in_process(ex.schedule, steps_per_batch)))
            assert compare_scripted(ex.schedule, ex.trace, got) is None, (ex.id, steps_per_batch)


@settings(max_examples=300, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(schedule=st.one_of(schedules(Features(two_phase=True, checkpoints=True, status=True)),
                          schedules(Features(enabled=False, checkpoints=True, status=True)),
                          schedules(Features(rowtime=True, checkpoints=True, status=True)),
                          schedules(Features(checkpoints=True, status=True))),
       steps_per_batch=st.sampled_from([None, 1, 2, 3, 7]))
def test_drawn_schedules_on_the_stages_without_spark(schedule: Schedule, steps_per_batch: int | None) -> None:
    """Many drawn schedules through the stages without Spark: the reference's traces."""
    from flink_semantics.adapters.pyspark.mini_batch.stream import run_in_process

    check(schedule, run_in_process(schedule, steps_per_batch))
