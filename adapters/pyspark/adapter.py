"""PySparkAdapter: runs a batch of schedules in one Spark job.

The batch becomes a DataFrame `(sid, schedule JSON)` spread over a few
partitions.  `mapInArrow` runs `run_partition` in each task: it drives one
`AsyncWaitOperator` per schedule (adapters/pyspark/scripted.py: virtual
clock, scripted calls) and returns `(sid, trace JSON, error)`.

Durable storage: each schedule has a directory under the job directory
(`<store>/job-<uuid>/<sid>/`) holding its sink and its checkpoint snapshots.
A crash step or a task failure raises in the task; Spark's scheduler runs the
task again (`local[N,F]`), and the new attempt resumes every unfinished
schedule from that directory.  The store is a temporary directory that the
adapter creates and removes at `close()`; set `CONFORMANCE_SPARK_STORE` (or
pass `store_dir`) to a path every executor can reach on a cluster.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import traceback
import uuid
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from adapters.pyspark.scripted import InjectedFailure, ScheduleStore, run_schedule
from spec.adapter import CAPABILITIES, SCRIPTED, AdapterError
from spec.schedule import RestoreStep, Schedule, Trace, schedule_from_dict, trace_from_dict

OUTPUT_SCHEMA = "sid long, trace string, error string"


def run_partition(root: str, batches: Iterator[Any]) -> Iterator[Any]:
    """The Spark task: run (or resume) every schedule of this partition, in sid order."""
    import pyarrow as pa

    rows: list[tuple[int, str]] = []
    for b in batches:
        rows += zip(b.column("sid").to_pylist(), b.column("schedule").to_pylist())
    sids, traces, errors = [], [], []
    failed: list[str] = []
    for sid, text in sorted(rows):
        trace, error = None, None
        try:
            schedule = schedule_from_dict(json.loads(text), validate=False)
            events = run_schedule(schedule, ScheduleStore(Path(root) / str(sid)))
            trace = json.dumps({"events": [e.to_dict() for e in events]})
        except InjectedFailure as e:
            failed.append(f"schedule {sid}: {e}")  # its incarnation has stopped at the failure
            continue
        except Exception:
            error = traceback.format_exc()  # a bug: reported, not retried
        sids.append(sid)
        traces.append(trace)
        errors.append(error)
    if failed:
        # A real task failure: Spark runs the task again and every schedule resumes from the
        # store.  The other schedules of the task first run up to their own end or failure,
        # so the task fails once per round of failures instead of once per failure.
        raise InjectedFailure(f"{len(failed)} injected failure(s): " + "; ".join(failed[:3]))
    schema = pa.schema([("sid", pa.int64()), ("trace", pa.string()), ("error", pa.string())])
    yield pa.RecordBatch.from_arrays(
        [pa.array(sids, pa.int64()), pa.array(traces, pa.string()), pa.array(errors, pa.string())],
        schema=schema)


def failure_bound(schedule: Schedule) -> int:
    """Task failures a schedule can cause: one per incarnation (each ends by a crash or a fail)."""
    return 1 + sum(isinstance(s, RestoreStep) for s in schedule.steps)


def chunks_by_failures(schedules: Sequence[Schedule], budget: int) -> list[list[int]]:
    """Indices of the schedules, cut so that no task can exceed `budget` task failures.

    A task fails once per round in which any of its schedules fails, so its failures are at
    most the largest bound among its schedules; a schedule above the budget gets a job of its own.
    """
    small = [i for i, s in enumerate(schedules) if failure_bound(s) <= budget]
    large = [[i] for i, s in enumerate(schedules) if failure_bound(s) > budget]
    return ([small] if small else []) + large


class PySparkAdapter:
    name = "pyspark"
    completion_order = SCRIPTED

    def __init__(self, store_dir: str | None = None, partitions: int = 4):
        root = store_dir or os.environ.get("CONFORMANCE_SPARK_STORE")
        self._owns_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="pyspark-async-io-"))
        self.partitions = partitions

    def capabilities(self) -> Mapping[str, str | None]:
        return {name: None for name in CAPABILITIES}

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        if not schedules:
            return []
        from adapters.pyspark.session import get_spark, max_task_failures

        spark = get_spark()
        job = self.root / f"job-{uuid.uuid4().hex}"
        traces: list[Trace | None] = [None] * len(schedules)
        try:
            for chunk in chunks_by_failures(schedules, max(1, max_task_failures() - 1)):
                rows = [(i, schedules[i].to_json()) for i in chunk]
                df = spark.createDataFrame(rows, "sid long, schedule string")
                df = df.repartition(min(len(rows), self.partitions))
                out = df.mapInArrow(functools.partial(run_partition, str(job)), OUTPUT_SCHEMA).collect()
                for row in out:
                    if row["error"]:
                        raise AdapterError(f"pyspark adapter: schedule {row['sid']} raised:\n{row['error']}")
                    traces[row["sid"]] = trace_from_dict(json.loads(row["trace"]))
        finally:
            shutil.rmtree(job, ignore_errors=True)
        missing = [i for i, t in enumerate(traces) if t is None]
        if missing:
            raise AdapterError(f"pyspark adapter: no trace for schedules {missing}")
        return [t for t in traces if t is not None]

    def close(self) -> None:
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)
