"""The conformance runner of the sources area on Structured Streaming (`--adapter pyspark-stream`).

`run_many(spark, schedules, root)` runs a batch of schedules of spec/sources.md through the
harness's source (scripted.py, `ScriptedSource`) into the public sink (api.py): each schedule is
one scripted job of one `flip27-scripted` query (its splits, its readers, its steps), written by
one `IdempotentSink`; all the schedules' jobs advance in the same
micro-batches.  A job's steps are laid out in batches (scripted.layout): a batch ends after a step
that fails a task or the query (one real failure per job and batch), so a schedule without
failures is one micro-batch and the call's query runs once more than the most global failovers
any of its schedules has.  Step by step in Spark's terms:

* a job's steps of batch N are planned by the source's driver-side planner (`latestOffset`) from
  the job's state in the previous offset, which Spark read back from its offset log; the job's
  state after them, and their trace events, are the new offset, which Spark writes to
  `<checkpoint>/offsets/<N>` before batch N runs.  A `checkpoint` step's snapshots and a
  `complete`'s restore point are in that offset; micro-batch N commits (`commits/<N>`) once the
  sink has written its rows;
* the events are rows the reader partitions yield (reader r's events in partition r, the
  coordinator's in partition 0), written by `IdempotentSink` under the batch id; the trace of a
  schedule is its job's committed rows, ordered by (step, seq);
* a `fail` of a reader (SRC-20..SRC-26) is a real task failure: the partition hosting the reader
  raises halfway through its rows, Spark drops that attempt's output and runs that task again,
  alone (`local[N,F]`), the retry yielding the same rows;
* a global failover (`fail_enumerator`, an `assign` to an unregistered reader, `rescale`:
  SRC-4, SRC-27..SRC-29, SRC-31) is a real query failure: the planner raises, the query stops, and
  it is started again from its checkpoint directory; the restarted planner plans the batch again
  from the last committed offset, where it finds the job's restore point.  A restart restarts
  every job of the query together: the layout puts every job's failover of a run in the run's
  last batch, and a job that did not fail goes on from its state in that offset (exactly once,
  SRC-38);
* `complete N` is the schedule's own notification (SRC-17): Spark's `commit(end)` always comes
  one batch late and in order, which the schedules' late notifications are (SRC-46).

Everything a schedule observes is in Spark's offset and commit logs and the sink's committed
output: nothing is kept on the side.  Job graphs and region failover (SRC-35..SRC-37) are not run
here (`STREAM_UNSUPPORTED`): Spark has no failover regions.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The harness's source and its helpers (scripted.py), importable from here as before.
from flink_semantics.adapters.pyspark import chaos
from flink_semantics.adapters.pyspark.sources.scripted import (  # noqa: F401
    SCRIPTED_FORMAT,
    ScriptedSource,
    committed_dicts,
    committed_rows,
    initial_job_state,
    inject_once,
    offsets_written,
    plan_round,
    return_uncommitted,
    scripted_options,
    sink,
)
from flink_semantics.spec.areas.sources import AREA
from flink_semantics.spec.schedule import Schedule, Trace, config_to_dict, step_to_dict

# A fault run's calls (streaming.py): sized for >= 1,000 task failures at 36 examples (issue 31):
# 28 schedules met 23 failures in one call.
FAULT_CALL_SIZE = 30

STREAM_UNSUPPORTED: dict[str, str] = {
    "sources.region_failover": (
        "Spark has no failover regions (FLIP-1): a failed task is run again alone, the other tasks of its "
        "stage keep their output, and a failed streaming query restarts all of its tasks; the Flip27 "
        "query is one stage of reader partitions, without the job graph's other tasks and pipelined or "
        "blocking edges, so the tasks a failure restarts (SRC-35, SRC-36) and their regional reset "
        "(SRC-37) would be computed in Python beside Spark, not carried by it"),
}
QUERY_TIMEOUT_S = 1800  # a hang guard on one run of a query, never a measure of speed
MAX_RESTARTS = 1000
_INJECTED = re.compile(r"injected failure: (\S+)")


def job_of(schedule: Schedule) -> dict[str, Any]:
    """The schedule as a scripted job of the source."""
    return {**config_to_dict(schedule.config), "steps": [step_to_dict(s) for s in schedule.steps]}


def run_many(spark: Any, schedules: Sequence[Schedule], root: Path) -> list[Trace]:
    """The traces of `schedules` (sources area), all of them jobs of one streaming query through
    ScriptedSource and IdempotentSink, restarted from its checkpoint after each injected query failure."""
    if not schedules:
        return []
    jobs = [job_of(s) for s in schedules]
    rows, _ = run_query(spark, jobs, Path(root))
    return traces_of(rows, len(jobs))


def run_query(spark: Any, jobs: list[dict[str, Any]], root: Path, log: Any = None,
              timing: dict[str, float] | None = None) -> tuple[list[dict[str, Any]], int]:
    """Run the jobs to the end of their scripts: the committed rows, and how many times the query
    was restarted.  `log(message)`: each run of the query (its batches and seconds); `timing`:
    where the time went, added to it (bench/sources.py --stream: Spark's durations of the
    micro-batches, seconds of each query's life, queries and batches)."""
    from pyspark.errors import StreamingQueryException

    spark.dataSource.register(ScriptedSource)
    checkpoint, out = str(root / "checkpoint"), str(root)
    # One streaming DataFrame, started again after each failure: the source is created (in a Python
    # worker of its own) once, the restarted query's planner reads its state from the checkpoint
    df = spark.readStream.format(SCRIPTED_FORMAT).option("jobs", json.dumps(jobs)).option("dir", out).load()
    for restarts in range(MAX_RESTARTS):
        started = time.monotonic()
        query = (df.writeStream.foreachBatch(sink(out)).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        try:
            if not query.awaitTermination(QUERY_TIMEOUT_S):
                query.stop()
                raise TimeoutError(f"the query did not finish within {QUERY_TIMEOUT_S} s (hung)")
            return committed_dicts(out, checkpoint), restarts
        except StreamingQueryException as e:
            if not _INJECTED.search(str(e)):
                raise RuntimeError(f"the query failed unexpectedly: {str(e).splitlines()[0]}") from None
            chaos.query_restarted(root, "global-failover")  # the loop starts it again from its checkpoint
        finally:
            if log is not None:
                log(f"query run {restarts}: {len(query.recentProgress)} batches, "
                    f"{time.monotonic() - started:.1f} s")
            if timing is not None:
                add_timing(timing, query, time.monotonic() - started)
    raise RuntimeError(f"the query still failing after {MAX_RESTARTS} restarts")


def add_timing(timing: dict[str, float], query: Any, seconds: float) -> None:
    """Add a finished query run's figures: its seconds, and its batches' durations (Spark's
    progress reports, in seconds; a batch whose planning failed the query reports none)."""
    timing["query"] = timing.get("query", 0.0) + seconds
    timing["queries"] = timing.get("queries", 0.0) + 1
    for progress in query.recentProgress:
        timing["batches"] = timing.get("batches", 0.0) + 1
        for name, ms in progress.durationMs.items():
            timing[name] = timing.get(name, 0.0) + ms / 1000


def traces_of(rows: list[dict[str, Any]], n: int) -> list[Trace]:
    """Each job's events in (step, seq) order; a row written twice (a key in two committed
    batches) is an error, not a duplicate to drop."""
    by_job: dict[int, dict[tuple[int, int], dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        if r["event"] is None:
            continue
        key = (r["step"], r["seq"])
        if key in by_job[r["job"]]:
            raise RuntimeError(f"job {r['job']}: event {key} committed twice")
        by_job[r["job"]][key] = json.loads(r["event"])
    kinds = AREA.event_kinds
    return [Trace(tuple(kinds[e["event"]].from_dict(e) for _, e in sorted(by_job[j].items())))
            for j in range(n)]
