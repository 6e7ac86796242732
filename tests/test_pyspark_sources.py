"""The sources area on Spark: the Structured Streaming source under real failures (stream.py,
faults.py), and its planner without Spark.

The conformance suite checks the area's rules through `adapters/pyspark/sources/conformance.py`;
these tests check what only the streaming source shows: the committed output of generated jobs
after real reader task failures and real query failures and restarts.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def workdir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="test-sources-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------
# The planner (no Spark)
# --------------------------------------------------------------------------


def test_planner_reads_every_record_once_one_split_at_a_time() -> None:
    """Without failures, the rounds of `plan_round` read each record of each split exactly once,
    each reader finishing a split before it starts the next (SRC-39), every split assigned once."""
    pytest.importorskip("pyspark")
    from flink_semantics.adapters.pyspark.sources.faults import generate
    from flink_semantics.adapters.pyspark.sources.stream import initial_job_state, plan_round

    jobs, _ = generate(50, 0, seed=3)
    for job in jobs:
        state, read, assigned = initial_job_state(job), [], []
        while (state := plan_round(job, state, 2)) is not None:
            assigned += [s for _, splits in state["assigned"] for s in splits]
            for r, ranges in enumerate(state["read"]):
                read += [(r, s, o) for s, lo, hi in ranges for o in range(lo, hi)]
        want = [(s, o) for s, n in enumerate(job["splits"]) for o in range(n)]
        assert sorted((s, o) for _, s, o in read) == want, job
        assert sorted(assigned) == list(range(len(job["splits"]))), job
        for r in range(job["readers"]):
            splits = [s for x, s, _ in read if x == r]
            assert splits == sorted(splits, key=splits.index), f"reader {r} went back to a split: {job}"


def test_two_places_counts_offsets_with_a_split_owned_twice() -> None:
    """The SRC-16 count of the fault-injection run: a split unassigned and owned, or owned by two
    readers, makes its offset count once; a replanned copy of the same offset is not counted again."""
    from flink_semantics.adapters.pyspark.sources.faults import two_places

    def offset(unassigned: list[int], *owned: list[int]) -> dict[str, Any]:
        readers = [{"splits": [[s, 0] for s in splits]} for splits in owned]
        return {"jobs": [{"enumerator": {"unassigned": unassigned}, "readers": readers}]}

    assert two_places([offset([1], [0], [2]), offset([], [0, 1])]) == 0
    assert two_places([offset([0], [0]), offset([0], [0]), offset([], [1], [1]), offset([2], [])]) == 2


# --------------------------------------------------------------------------
# Late notifications on the engine (SRC-17): hand-derived traces
# --------------------------------------------------------------------------

# name -> (configuration, steps, the trace derived by hand from spec/sources.md)
LATE = {
    # 1's notification after 2 was taken: bucket 2 (s1) stays and comes back at the failure; only
    # the record before barrier 1 is committed.
    "after a later checkpoint was taken": (
        {"readers": 1, "splits": [1, 1, 1]},
        "register r0\nrequest r0\npoll r0 1\ncheckpoint 1\nbarrier 1\ncomplete 1 silent\nrequest r0\n"
        "poll r0 1\ncheckpoint 2\nbarrier 2\ncomplete 1\nrequest r0\nfail 0\nregister r0",
        ["@0 registered r0 []", "@1 assigned r0 s0", "@2 record r0 s0 0", "@2 split_finished r0 s0",
         "@3 enumerator_checkpoint 1 [s1, s2]", "@4 reader_checkpoint 1 r0 []", "@6 assigned r0 s1",
         "@7 record r0 s1 0", "@7 split_finished r0 s1", "@8 enumerator_checkpoint 2 [s2]",
         "@9 reader_checkpoint 2 r0 []", "@10 committed 1 [s0:0]", "@11 assigned r0 s2", "@12 reset [0]",
         "@12 aborted 2", "@12 splits_back r0 [s1, s2]", "@13 registered r0 []"]),
    # 1's notification after 2 completed without one, and after a regional restore to 2: the
    # restore committed r0's records; the late notifications commit r1's, each once.
    "after a later completion and a restore": (
        {"readers": 2, "splits": [2, 2]},
        "register r0\nregister r1\nrequest r0\nrequest r1\npoll r0 1\npoll r1 1\ncheckpoint 1\n"
        "barrier 1\ncomplete 1 silent\npoll r1 1\ncheckpoint 2\nbarrier 2\ncomplete 2 silent\nfail 0\n"
        "complete 1\ncomplete 2",
        ["@0 registered r0 []", "@1 registered r1 []", "@2 assigned r0 s0", "@3 assigned r1 s1",
         "@4 record r0 s0 0", "@5 record r1 s1 0", "@6 enumerator_checkpoint 1 []",
         "@7 reader_checkpoint 1 r0 [s0:1]", "@7 reader_checkpoint 1 r1 [s1:1]", "@9 record r1 s1 1",
         "@9 split_finished r1 s1", "@10 enumerator_checkpoint 2 []", "@11 reader_checkpoint 2 r0 [s0:1]",
         "@11 reader_checkpoint 2 r1 []", "@13 reset [0]", "@13 committed 2 [s0:0]",
         "@13 splits_back r0 []", "@14 committed 1 [s1:0]", "@15 committed 2 [s1:1]"]),
}


def _late_schedules() -> list[Any]:
    from flink_semantics.conformance.examples import notation

    n = notation("sources")
    return [n.schedule(config, steps) for config, steps, _ in LATE.values()]


def _assert_late(traces: list[Any]) -> None:
    from flink_semantics.spec.areas.sources import render_event

    for (name, (_, _, want)), trace in zip(LATE.items(), traces):
        assert [render_event(e) for e in trace.events] == want, name


def test_late_notifications_on_the_engine() -> None:
    """The engine (conformance.py) without Spark gives the hand-derived traces of late notifications."""
    from flink_semantics.adapters.pyspark.runtime import LocalScriptedAdapter

    runner = LocalScriptedAdapter()
    try:
        _assert_late(runner.run_batch(_late_schedules()))
    finally:
        runner.close()


@pytest.mark.spark
def test_late_notifications_through_spark(spark: Any) -> None:
    """The same schedules in a Spark task, the reader failure a real task failure: the late
    notifications survive the task's retry (the checkpoints' states are in the store)."""
    from flink_semantics.adapters.pyspark import PySparkAdapter

    adapter = PySparkAdapter()
    try:
        _assert_late(adapter.run_batch(_late_schedules()))
    finally:
        adapter.close()


# --------------------------------------------------------------------------
# The streaming source under failures (Spark)
# --------------------------------------------------------------------------


@pytest.mark.spark
def test_fault_injection_run(spark: Any, workdir: str) -> None:
    """The fault-injection run at its default size (`tox -e thorough` runs it at 1000 schedules and
    12 query failures): no record lost, none duplicated, no split in two places of an offset."""
    from flink_semantics.adapters.pyspark.sources.faults import (
        DEFAULT_RESTARTS,
        DEFAULT_SCHEDULES,
        generate,
        run,
    )

    restarts = DEFAULT_RESTARTS
    jobs, failures = generate(DEFAULT_SCHEDULES, restarts, seed=1)
    report = run(spark, jobs, failures, workdir, log=lambda m: None)
    print("\n".join(report.lines()))
    assert report.schedules >= 200 and report.schedules_failed >= 0.9 * report.schedules
    assert report.enumerator_failures == restarts // 2 and report.job_failures == restarts - restarts // 2
    assert report.reader_failures == sum(n for b in failures["reader"].values() for n in b.values())
    assert report.committed == sum(sum(job["splits"]) for job in jobs)
    assert (report.lost, report.duplicated, report.two_places) == (0, 0, 0), report.lines()


class AppendingSink:
    """A wrong sink: every run of a batch adds its rows to the batch's output (not idempotent)."""

    def __init__(self, directory: str):
        self.dir = directory

    def __call__(self, df: Any, batch_id: int) -> None:
        from flink_semantics.adapters.pyspark.sources.api import batch_path
        from flink_semantics.adapters.pyspark.sources.stream import inject_once

        df.write.mode("append").parquet(batch_path(Path(self.dir) / "output", batch_id))
        if batch_id == 2:
            inject_once(self.dir, f"sink-{batch_id}")


@pytest.mark.spark
def test_fault_injection_run_catches_a_sink_that_is_not_idempotent(spark: Any, workdir: str) -> None:
    """The run's counts can fail: a sink that appends a replayed batch instead of replacing it
    commits records twice after a job failure with the batch in flight."""
    from flink_semantics.adapters.pyspark.sources.faults import generate, run

    jobs, failures = generate(20, 0, seed=5)
    failures = {"reader": {}, "enumerator": {}, "sink": [2]}
    report = run(spark, jobs, failures, workdir, log=lambda m: None, sink=AppendingSink(workdir))
    assert report.job_failures == 1 and report.duplicated > 0 and report.lost == 0, report.lines()
