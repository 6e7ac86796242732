"""PySparkAdapter: runs a batch of schedules in one Spark job.

The batch becomes rows `(sid, schedule JSON)` in one partition (or
`CONFORMANCE_SPARK_PARTITIONS`), and each task runs `run_rows` on its partition: it runs every
schedule on the implementation of its area (adapters/pyspark/runtime.py finds
`adapters/pyspark/<area>`: virtual clock, scripted outside world) and returns
`(sid, trace JSON, error, attempt)`.  On classic Spark the rows are an RDD and the task is its
`mapPartitions` (`rows_task`); a Spark Connect client has no RDDs, and there they are a DataFrame
and the task is its `mapInArrow` (`run_partition`).  The two run the same tasks, fail and retry the
same way; the RDD's task starts sooner: a job of one row 0.13 s against 0.28 s, and each round of
task retries 0.04 s against 0.17 s (2026-11-27, local[2], load 6).

Durable storage: each schedule has a directory under the job directory
(`<store>/job-<uuid>/<sid>/`) holding its sink and its checkpoint snapshots.
A crash step or a task failure stops that schedule's incarnation; once the
other schedules of the task have run up to their own end or failure, the task
raises, Spark's scheduler runs it again (`local[N,F]`), and the new attempt
resumes every unfinished schedule from its directory (a `restore` step reads
the snapshot back from it).  At the last attempt Spark allows, the task returns
the unfinished schedules instead, and the driver resumes them in another job.

The store is a temporary directory that the adapter creates and removes at
`close()`, in memory where the machine has one (runtime.scratch_dir); set
`CONFORMANCE_SPARK_STORE` (or pass `store_dir`) to a path every executor can
reach on a cluster.  Pass `spark=` to use a given session (for example a Spark
Connect client); by default the process's shared session.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import traceback
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from flink_semantics.adapters import version
from flink_semantics.adapters.pyspark.runner_session import max_task_failures
from flink_semantics.adapters.pyspark.runtime import (
    InjectedFailure,
    ScheduleStore,
    capabilities,
    run_schedule,
    scratch_dir,
)
from flink_semantics.adapters.pyspark.session import check_prerequisites, is_connect
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.schedule import Schedule, Trace, schedule_from_dict, trace_from_dict

OUTPUT_SCHEMA = "sid long, trace string, raised string, attempt int"


class ScheduleCrashed(RuntimeError):
    """The operator raised on a schedule (a bug, not a task failure the schedule asked for).

    Not an AdapterError: that one means the engine cannot run at all and ends the session, while
    this fails the property that drew the schedule and shows the traceback.
    """


TaskRow = tuple[int, str | None, str | None, int]  # sid, trace JSON, the traceback of a bug, task attempt


def run_rows(root: str, max_failures: int, rows: Iterable[tuple[int, str]]) -> list[TaskRow]:
    """The Spark task: run (or resume) every schedule of this partition, in sid order.

    Output per schedule: its trace (JSON), or an error (a bug: reported, never retried), or
    neither (still running: see below), and the task attempt that produced the row.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx is not None else 0
    # The traces of the schedules an earlier attempt of this task finished, written when it failed.
    done_file = Path(root) / f"done-{ctx.partitionId() if ctx is not None else 0}.json"
    done: dict[str, str] = json.loads(done_file.read_text()) if done_file.exists() else {}
    out: list[TaskRow] = []
    failed: list[str] = []
    for sid, text in sorted(rows):
        if str(sid) in done:
            out.append((sid, done[str(sid)], None, attempt))
            continue
        try:
            schedule = schedule_from_dict(json.loads(text), validate=False)
            events = run_schedule(schedule, ScheduleStore(Path(root) / str(sid), schedule.area))
            out.append((sid, json.dumps({"events": [e.to_dict() for e in events]}), None, attempt))
        except InjectedFailure as e:
            failed.append(f"schedule {sid}: {e}")  # its incarnation stopped at the failure
            out.append((sid, None, None, attempt))
        except Exception:
            out.append((sid, None, traceback.format_exc(), attempt))
    if failed and attempt < max_failures - 1:
        # A real task failure: Spark runs the task again; the schedules that failed resume from the
        # store, and those that finished are not run again.  The other schedules of the task first
        # ran up to their own end or failure, so the task fails once per round of failures, not
        # once per failure.
        done_file.parent.mkdir(parents=True, exist_ok=True)
        done_file.write_text(json.dumps({str(r[0]): r[1] for r in out if r[1] is not None}))
        raise InjectedFailure(f"{len(failed)} injected failure(s): " + "; ".join(failed[:3]))
    # (At the last attempt Spark allows, failing would abort the job: the unfinished schedules
    # go back to the driver, which resumes them from the store in another job.)
    return out


def rows_task(root: str, max_failures: int, rows: Iterator[tuple[int, str]]) -> Iterator[TaskRow]:
    """run_rows as an RDD's mapPartitions (classic Spark)."""
    yield from run_rows(root, max_failures, rows)


def run_partition(root: str, max_failures: int, batches: Iterator[Any]) -> Iterator[Any]:
    """run_rows as a DataFrame's mapInArrow (Spark Connect): Arrow batches in, one batch out."""
    import pyarrow as pa

    rows: list[tuple[int, str]] = []
    for b in batches:
        rows += zip(b.column("sid").to_pylist(), b.column("schedule").to_pylist())
    sids, traces, raised, attempts = zip(*run_rows(root, max_failures, rows)) if rows else ((), (), (), ())
    schema = pa.schema([("sid", pa.int64()), ("trace", pa.string()), ("raised", pa.string()),
                        ("attempt", pa.int32())])
    yield pa.RecordBatch.from_arrays(
        [pa.array(sids, pa.int64()), pa.array(traces, pa.string()), pa.array(raised, pa.string()),
         pa.array(attempts, pa.int32())], schema=schema)


def _passthrough(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def failure_bound(schedule: Schedule) -> int:
    """Task failures a schedule can cause: at most one per step (a step ends at most one
    incarnation), whatever the area."""
    return 1 + len(schedule.steps)


class PySparkAdapter:
    name = "pyspark"
    completion_order = SCRIPTED
    version = version("pyspark", "PySpark")
    # Budget hint (spec/adapter.py): a Spark job costs 0.1-0.3 s whatever its size (0.2-0.5 s under
    # Connect), about 1.5 ms a schedule, and a round of task retries (as many rounds as its
    # most-failing schedule has failures) about 0.04 s (0.17 s under Connect's mapInArrow): so the
    # suite gathers the batches of many examples into few large jobs (a property's ~600 schedules
    # in two: the first starts once a quarter of 1600 is gathered).
    batch_size = 1600
    # Two jobs at a time: a job whose task is being retried mostly waits (in Spark and the new
    # Python worker), and the other job's task runs meanwhile.  run_batch keeps no state between
    # calls but `task_attempts`, which each call replaces whole.
    concurrent_jobs = 2

    def __init__(self, store_dir: str | None = None, spark: Any = None, partitions: int | None = None):
        if spark is None:  # fail now, in one line, when pyspark or Java is missing
            check_prerequisites()
        root = store_dir or os.environ.get("CONFORMANCE_SPARK_STORE")
        self._owns_root = root is None
        self.root = Path(root) if root else scratch_dir("pyspark-conformance-")
        self.spark = spark  # None: the process's shared session (adapters/pyspark/session.py)
        # Tasks per job.  One by default: the suite draws the next schedules on one core while Spark
        # runs a job on the other, and a round of task failures then costs one task, not two
        # (bench/conformance.py measures both).
        self.partitions = partitions or int(os.environ.get("CONFORMANCE_SPARK_PARTITIONS", 1))
        self.task_attempts: dict[int, int] = {}  # schedule index -> Spark task attempt of its trace

    def prepare(self) -> None:
        """Start Spark and its Python workers once, before the first batch (spec/adapter.py)."""
        from flink_semantics.adapters.pyspark.runner_session import runner_spark

        spark = self.spark if self.spark is not None else runner_spark()
        if is_connect(spark):
            spark.createDataFrame([(0,)], "x long").mapInArrow(_passthrough, "x long").collect()
        else:
            spark.sparkContext.parallelize([0], 1).mapPartitions(_passthrough).collect()

    def capabilities(self) -> Mapping[str, str | None]:
        return capabilities()

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        if not schedules:
            return []
        from flink_semantics.adapters.pyspark.runner_session import runner_spark

        spark = self.spark if self.spark is not None else runner_spark()
        job = self.root / f"job-{uuid.uuid4().hex}"
        traces: dict[int, Trace] = {}
        attempts: dict[int, int] = {}
        pending = list(range(len(schedules)))
        rounds = sum(failure_bound(s) for s in schedules) + 1
        try:
            while pending and rounds > 0:
                rounds -= 1
                rows = [(i, schedules[i].to_json()) for i in pending]
                for sid, trace, raised, attempt in self._job(spark, str(job), rows):
                    if raised:  # a bug in the operator: the property fails, with the traceback
                        raise ScheduleCrashed(f"pyspark adapter: schedule {sid} raised:\n{raised}")
                    if trace is not None:
                        traces[sid] = trace_from_dict(json.loads(trace), schedules[sid].area)
                        attempts[sid] = attempt
                pending = [i for i in pending if i not in traces]
        finally:
            shutil.rmtree(job, ignore_errors=True)
        self.task_attempts = attempts  # of the last run_batch to finish
        if pending:
            raise ScheduleCrashed(f"pyspark adapter: no trace for schedules {pending}")
        return [traces[i] for i in range(len(schedules))]

    def _job(self, spark: Any, job: str, rows: list[tuple[int, str]]) -> list[TaskRow]:
        """One Spark job, one stage, no shuffle: the rows in `partitions` tasks, each running run_rows."""
        attempts = max_task_failures()
        if is_connect(spark):  # no RDDs: a local relation, coalesced, and mapInArrow
            df = spark.createDataFrame(rows, "sid long, schedule string").coalesce(self.partitions)
            task = functools.partial(run_partition, job, attempts)
            return [tuple(row) for row in df.mapInArrow(task, OUTPUT_SCHEMA).collect()]
        task = functools.partial(rows_task, job, attempts)
        return spark.sparkContext.parallelize(rows, self.partitions).mapPartitions(task).collect()

    def close(self) -> None:
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)
