"""The fault-injection run: generated jobs through the Structured Streaming source (stream.py) with
real reader task failures and real query failures and restarts, then the committed output counted.

    python -m flink_semantics.adapters.pyspark.sources.faults                       # the default size
    python -m flink_semantics.adapters.pyspark.sources.faults --schedules 1000 --restarts 12 --seed 7

Each generated schedule is a job: its splits (record counts), its readers, and the failures it
injects: reader failures (partition r of batch N raises halfway through reading; Spark runs the
task again), enumerator failures (the planner raises while planning batch N: the query fails) and
job failures (the sink raises after writing batch N, before it commits: the query fails with the
batch in flight).  A failed query is restarted from its checkpoint directory after the offsets of
the batches that did not commit are deleted (stream.return_uncommitted), so their assignments go
back to the enumerator.  All jobs share one query (a query failure restarts them all).

It prints the failures injected, the records committed, lost and duplicated (both must be 0), and
the offsets in which a split was in two places at once (SRC-16; must be 0).  Exit status 1 when
any of those is not 0.  Runs in classic local mode, or under Spark Connect with SPARK_REMOTE.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SCHEDULES = 200
DEFAULT_RESTARTS = 4  # query failures: half in the planner, half in the sink
RECORDS_PER_POLL = 2
QUERY_TIMEOUT_S = 600  # one run of the query, from a start to its end or failure


def readers_at_work(job: dict[str, Any]) -> list[list[int]]:
    """For each batch the job runs, the readers that read a record in it (the planner is a pure
    function of the previous offset, so a replay after a failure plans the same)."""
    from flink_semantics.adapters.pyspark.sources.stream import initial_job_state, plan_round

    out: list[list[int]] = []
    state = plan_round(job, initial_job_state(job), RECORDS_PER_POLL)
    while state is not None:
        out.append([r for r, ranges in enumerate(state["read"]) if ranges])
        state = plan_round(job, state, RECORDS_PER_POLL)
    return out


def generate(schedules: int, restarts: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`schedules` jobs and the failures to inject, the same for the same seed.  Reader failures
    are task failures: the task of reader r in batch N (reader r of every job) fails once or twice
    while reading, for about half of the tasks that read something."""
    rng = random.Random(seed)
    jobs = [{"splits": [rng.randint(0, 6) for _ in range(rng.randint(1, 5))], "readers": rng.randint(1, 3)}
            for _ in range(schedules)]
    busy = sorted({(b, r) for job in jobs for b, readers in enumerate(readers_at_work(job)) for r in readers})
    tasks = rng.sample(busy, (len(busy) + 1) // 2)
    reader_failures: dict[str, dict[str, int]] = {}
    for batch, reader in sorted(tasks):
        reader_failures.setdefault(str(batch), {})[str(reader)] = rng.randint(1, 2)
    span = max(len(readers_at_work(job)) for job in jobs)
    at = rng.sample(range(1, max(span, restarts + 1)), restarts)
    failures = {"reader": reader_failures,
                "enumerator": {str(b): rng.randrange(schedules) for b in at[: restarts // 2]},
                "sink": sorted(at[restarts // 2:])}
    return jobs, failures


def schedules_hit(jobs: list[dict[str, Any]], failures: dict[str, Any]) -> int:
    """The jobs with a reader in a task that fails."""
    failed = {(int(b), int(r)) for b, readers in failures["reader"].items() for r in readers}
    return sum(any((b, r) in failed for b, readers in enumerate(readers_at_work(job)) for r in readers)
               for job in jobs)


@dataclass
class Report:
    schedules: int
    schedules_failed: int  # schedules with a reader in a task that failed
    reader_failures: int
    enumerator_failures: int
    job_failures: int
    restarts: int
    batches: int
    committed: int
    lost: int
    duplicated: int
    two_places: int
    seconds: float

    @property
    def injected(self) -> int:
        return self.reader_failures + self.enumerator_failures + self.job_failures

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.two_places == 0

    def lines(self) -> list[str]:
        return [f"schedules: {self.schedules} ({self.schedules_failed} with a reader of theirs in a failed "
                "task; every schedule goes through every query failure)",
                f"failures injected: {self.injected} (reader task failures {self.reader_failures}, "
                f"enumerator failures {self.enumerator_failures}, job failures with a batch in flight "
                f"{self.job_failures}); query restarts: {self.restarts}; batches: {self.batches}",
                f"records committed: {self.committed}",
                f"records lost: {self.lost}",
                f"records duplicated: {self.duplicated}",
                f"offsets with a split in two places: {self.two_places}",
                f"time: {self.seconds:.1f} s"]


def two_places(offsets: list[dict[str, Any]]) -> int:
    """SRC-16: offsets in which some job's split is unassigned and owned, or owned twice."""
    bad = 0
    distinct = {json.dumps(o, sort_keys=True): o for o in offsets}.values()  # a replanned batch differs
    for offset in distinct:
        bad += any(len(places) != len(set(places)) for places in map(_places, offset["jobs"]))
    return bad


def _places(state: dict[str, Any]) -> list[int]:
    """Where a job's splits are: unassigned, or owned by a reader (finished splits are nowhere)."""
    owned = [split for reader in state["readers"] for split, _ in reader["splits"]]
    return list(state["enumerator"]["unassigned"]) + owned


def run(spark: Any, jobs: list[dict[str, Any]], failures: dict[str, Any], workdir: str,
        log: Any = print, sink: Any = None) -> Report:
    """Run the jobs to the end through the source, restarting the query after each failure.
    `sink`: the foreachBatch function (default: api.IdempotentSink under `<workdir>/output`, failing
    the job after writing each batch of `failures["sink"]`, once)."""
    from flink_semantics.adapters.pyspark.sources.stream import (
        SCRIPTED_FORMAT,
        ScriptedSource,
        committed_rows,
        offsets_written,
        return_uncommitted,
    )
    from flink_semantics.adapters.pyspark.sources.stream import sink as idempotent_sink
    from pyspark.errors import StreamingQueryException

    started = time.monotonic()
    spark.dataSource.register(ScriptedSource)
    checkpoint = str(Path(workdir) / "checkpoint")
    planned_restarts = len(failures["enumerator"]) + len(failures["sink"])
    restarts, offsets = 0, list[dict[str, Any]]()
    while True:
        reader = (spark.readStream.format(SCRIPTED_FORMAT).option("jobs", json.dumps(jobs))
                  .option("records_per_poll", str(RECORDS_PER_POLL)).option("failures", json.dumps(failures))
                  .option("dir", workdir).load())
        query = (reader.writeStream.foreachBatch(sink or idempotent_sink(workdir, failures["sink"]))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            if not query.awaitTermination(QUERY_TIMEOUT_S):
                query.stop()
                raise TimeoutError(f"the query did not finish within {QUERY_TIMEOUT_S} s (hung)")
            break
        except StreamingQueryException as e:
            offsets = offsets_written(checkpoint) + offsets  # every offset ever written is checked
            restarts += 1
            cause = next((line.split("injected failure: ")[1] for line in str(e).splitlines()
                          if "InjectedFailure: injected failure: " in line), None)
            if cause is None or restarts > planned_restarts:
                raise RuntimeError(f"the query failed unexpectedly: {str(e).splitlines()[0]}") from None
            dropped = return_uncommitted(checkpoint)
            elapsed = time.monotonic() - started  # progress: the query runs planned_restarts + 1 times
            eta = elapsed / restarts * (planned_restarts + 1 - restarts)
            log(f"  query failed (injected: {cause.strip()}); uncommitted batches {dropped} returned; "
                f"restart {restarts} of {planned_restarts}, {elapsed:.0f} s so far, ETA {eta:.0f} s")
    offsets = offsets_written(checkpoint) + offsets
    markers = Counter(p.name.split("-")[0] for p in (Path(workdir) / "injected").glob("*"))
    expected = {(j, s, o) for j, job in enumerate(jobs) for s, n in enumerate(job["splits"])
                for o in range(n)}
    rows = committed_rows(workdir, checkpoint)
    got = Counter((r[0], r[2], r[3]) for r in rows)
    return Report(len(jobs), schedules_hit(jobs, failures), markers["reader"], markers["enumerator"],
                  markers["sink"], restarts,
                  len(offsets_written(checkpoint)), len(rows), len(expected - set(got)),
                  sum(n - 1 for n in got.values()) + len(set(got) - expected), two_places(offsets),
                  time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=DEFAULT_SCHEDULES)
    parser.add_argument("--restarts", type=int, default=DEFAULT_RESTARTS,
                        help="query failures to inject (half enumerator, half job failures)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    from flink_semantics.adapters.pyspark.runner_session import runner_spark

    jobs, failures = generate(args.schedules, args.restarts, args.seed)
    workdir = tempfile.mkdtemp(prefix="sources-faults-")
    try:
        print(f"fault injection: {args.schedules} schedules, seed {args.seed}", flush=True)
        report = run(runner_spark(), jobs, failures, workdir, log=lambda m: print(m, flush=True))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n".join(report.lines()))
    if not report.ok:
        print("FAILED: reproduce with: python -m flink_semantics.adapters.pyspark.sources.faults "
              f"--schedules {args.schedules} --restarts {args.restarts} --seed {args.seed}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
