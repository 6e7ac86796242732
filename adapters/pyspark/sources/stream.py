"""A FLIP-27 source on Spark Structured Streaming (the Python data source API), and its sink.

The mapping (spec/sources.md; pyspark-notes sections 1, 4):

* **the enumerator** is the driver-side planner: `latestOffset(start)` restores the enumerator, the
  readers' split states and the registry from `start`, lets every reader without a split request
  one (SRC-6) and every reader read up to `records_per_poll` records (SRC-39), and returns the new
  state.  One micro-batch is one checkpoint interval;
* **the offset JSON is the checkpoint**: Spark writes it verbatim to `<checkpoint>/offsets/<N>`
  before batch N runs.  It holds the enumerator's unassigned splits and whom it told NoMoreSplits
  (SRC-12), every reader's owned splits with their positions (SRC-15), the tracker's bucket of the
  batch (its assignments, SRC-7, SRC-11), and the ranges each reader reads in the batch, so that a
  replay reads the same records;
* **the readers** are the partitions: `partitions(start, end)` returns one `InputPartition` per
  reader index, in order, so reader r is Spark partition r; `read()` yields its ranges, one split
  at a time in offset order;
* **the sink** (`IdempotentSink`, for `foreachBatch`) writes each batch under its batch id,
  replacing what an earlier run of the same batch id wrote: `commits/<N>` is checkpoint N
  completing (SRC-38); a replayed batch overwrites, so nothing is committed twice;
* **the notification** of checkpoint N is the source's `commit(end)`, and Spark always sends it
  late: `MicroBatchExecution.constructNextBatch` calls it with batch N's end offset once batch
  N+1's offset is written (taken), in batch order, never after a later batch's.  Nothing waits for
  it here: the tracker's bucket of a batch lives in the batch's offset, and what a failover gives
  back is decided by the commit log (`return_uncommitted`), so the notification prunes nothing (the
  conformance run, conformance.py, shows SRC-17's late notifications on the engine's tracker);
* **a reader failure** is a real task failure: Spark runs the task again (`local[N,F]`) with the
  same partition, so the new attempt reads from the restored positions (the start offset) again:
  the failed reader's splits come back to the same reader (SRC-20..SRC-25; Spark's task retry
  cannot hand them to another reader, which Flink's enumerator may do);
* **an enumerator failure** is a real query failure: the planner raises.  The harness
  (`run_until_done`) restarts the query from its checkpoint directory after deleting the offsets of
  the batches that did not commit, so the restarted planner plans from the last completed
  checkpoint and the splits assigned since go back to the enumerator (SRC-27, SRC-28).

Several independent jobs (each with its own splits and readers) can share one query: the offset
holds one state per job, and partition r holds reader r of every job.

Options (strings, as Spark passes them): `jobs` (JSON: a list of {"splits": [record counts],
"readers": n}), `records_per_poll` (default 2), `failures` (JSON, optional: the failures to inject,
see `faults.py`) and `dir` (where injected failures leave their markers).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark.runtime import InjectedFailure
from flink_semantics.adapters.pyspark.sources.engine import SourceCoordinator, SourceReader, SplitEnumerator
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

FORMAT = "flip27"
SCHEMA = "job int, reader int, split int, offset int"


def inject_once(directory: str, name: str) -> None:
    """Raise InjectedFailure unless this failure was injected before (a marker file says so)."""
    marker = Path(directory) / "injected" / name
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    raise InjectedFailure(f"injected failure: {name}")


# --------------------------------------------------------------------------
# One job's state in the offset
# --------------------------------------------------------------------------


def initial_job_state(job: dict[str, Any]) -> dict[str, Any]:
    n = len(job["splits"])
    return {"enumerator": SplitEnumerator(list(range(n)), n, True).to_json(),
            "readers": [{"splits": [], "no_more": False, "ended": False} for _ in range(job["readers"])],
            "assigned": [], "read": [[] for _ in range(job["readers"])]}


def plan_round(job: dict[str, Any], state: dict[str, Any], records_per_poll: int) -> dict[str, Any] | None:
    """One poll round of the job's readers after `state`: the new state, or None when every reader
    has reached end of input (SRC-32)."""
    if all(r["ended"] for r in state["readers"]):
        return None
    readers = [SourceReader(registered=True, splits=[list(x) for x in r["splits"]], no_more=r["no_more"],
                            ended=r["ended"]) for r in state["readers"]]

    def deliver(r: int, kind: str, split: int | None) -> None:
        if kind == "split":
            assert split is not None
            readers[r].add_split(split)
        else:
            readers[r].no_more = True
            readers[r].check_end(r, ignore)

    # Every reader is registered: it opened with its restored splits (SRC-2).
    coordinator = SourceCoordinator(SplitEnumerator.from_json(state["enumerator"]), deliver,
                                    registered=set(range(len(readers))))
    read: list[list[list[int]]] = [[] for _ in readers]
    for r, reader in enumerate(readers):
        if not reader.ended and not reader.splits:
            coordinator.request(r)  # SRC-6: a reader without a split asks for one

        def record(kind: str, reader: int = r, **fields: Any) -> None:
            if kind == "record":  # consecutive offsets of a split make one range
                ranges = read[reader]
                if ranges and ranges[-1][0] == fields["split"] and ranges[-1][2] == fields["offset"]:
                    ranges[-1][2] += 1
                else:
                    ranges.append([fields["split"], fields["offset"], fields["offset"] + 1])

        reader.poll(records_per_poll, job["splits"], r, record)
    return {"enumerator": coordinator.enumerator.to_json(),
            "readers": [{"splits": x.splits, "no_more": x.no_more, "ended": x.ended} for x in readers],
            "assigned": [[r, splits] for r, splits in coordinator.tracker.uncheckpointed.items()],
            "read": read}


def ignore(kind: str, **fields: Any) -> None:
    pass


# --------------------------------------------------------------------------
# The Spark source
# --------------------------------------------------------------------------


@dataclass
class ReaderPartition(InputPartition):
    """Reader `reader`'s work in batch `batch`: [job, split, from, to) ranges, in reading order."""

    batch: int
    reader: int
    ranges: list[list[int]]
    failures: int  # how many of its attempts fail (fault injection)


class Flip27Source(DataSource):
    """`spark.readStream.format("flip27").option("jobs", ...).load()`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> Flip27StreamReader:
        return Flip27StreamReader(self.options)


class Flip27StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]):
        self.jobs: list[dict[str, Any]] = json.loads(options["jobs"])
        self.records_per_poll = int(options.get("records_per_poll", 2))
        self.failures: dict[str, Any] = json.loads(options.get("failures", "{}"))
        self.dir = options.get("dir", "")

    def initialOffset(self) -> dict[str, Any]:
        return {"batch": -1, "jobs": [initial_job_state(job) for job in self.jobs]}

    def getDefaultReadLimit(self) -> ReadLimit:
        """One poll round: at most `records_per_poll` records per reader of each job."""
        return ReadMaxRows(self.records_per_poll * sum(job["readers"] for job in self.jobs))

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the splits are fixed: everything there is, is there now

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The enumerator's step: one poll round (all rounds for ReadAllAvailable), or `start`."""
        batch = start["batch"] + 1
        if str(batch) in self.failures.get("enumerator", {}):
            inject_once(self.dir, f"enumerator-{batch}")  # SRC-27: the planner throws, the query fails
        states = start["jobs"]
        planned = [plan_round(job, s, self.records_per_poll) for job, s in zip(self.jobs, states)]
        if all(p is None for p in planned):
            return start  # every reader at end of input: no batch
        out = [p if p is not None else {**s, "assigned": [], "read": [[] for _ in s["read"]]}
               for p, s in zip(planned, states)]
        while isinstance(limit, ReadAllAvailable):  # further rounds, their reads appended
            more = [plan_round(job, s, self.records_per_poll) for job, s in zip(self.jobs, out)]
            if all(p is None for p in more):
                break
            out = [_merge(o, m) for o, m in zip(out, more)]
        return {"batch": batch, "jobs": out}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """Reader r is partition r (every job's reader r); a replay gets the same ranges."""
        batch = end["batch"]
        width = max(job["readers"] for job in self.jobs)
        planned = self.failures.get("reader", {}).get(str(batch), {})
        return [ReaderPartition(batch, r,
                                [[j, *rng] for j, s in enumerate(end["jobs"]) if r < len(s["read"])
                                 for rng in s["read"][r]],
                                planned.get(str(r), 0))
                for r in range(width)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, int, int]]:
        """SRC-39: each range in order, records in offset order.  An injected reader failure
        raises halfway through: Spark drops the attempt's output and runs the task again."""
        assert isinstance(partition, ReaderPartition)
        rows = [(j, partition.reader, split, offset) for j, split, lo, hi in partition.ranges
                for offset in range(lo, hi)]
        half = len(rows) // 2
        yield from rows[:half]
        for k in range(partition.failures):
            inject_once(self.dir, f"reader-{partition.batch}-{partition.reader}-{k}")
        yield from rows[half:]

    def commit(self, end: dict[str, Any]) -> None:
        pass  # checkpoint `end` completed, notified one batch late (SRC-17); its bucket is in the offset


def _merge(a: dict[str, Any], b: dict[str, Any] | None) -> dict[str, Any]:
    """Two rounds of one job in one batch: the later state, both rounds' assignments and reads."""
    if b is None:
        return a
    return {**b, "assigned": a["assigned"] + b["assigned"],
            "read": [ra + rb for ra, rb in zip(a["read"], b["read"])]}


# --------------------------------------------------------------------------
# The sink and the query
# --------------------------------------------------------------------------


class IdempotentSink:
    """`foreachBatch`: batch N's rows go to `<dir>/batch-<N>.json`, replacing an earlier run's
    (SRC-38: a replayed batch is written again, not twice).  `fail_batches`: injected job failures
    after the write, before the batch commits (the query fails with batch N in flight)."""

    def __init__(self, directory: str, fail_batches: list[int] = ()):  # type: ignore[assignment]
        self.dir = directory
        self.fail_batches = list(fail_batches)

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [[r["job"], r["reader"], r["split"], r["offset"]] for r in df.collect()]
        out = Path(self.dir) / "output"
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".batch-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out / f"batch-{batch_id}.json")
        if batch_id in self.fail_batches:
            inject_once(self.dir, f"sink-{batch_id}")


def committed_rows(directory: str, checkpoint: str) -> list[list[int]]:
    """The sink's output of every batch the checkpoint's commit log confirms."""
    commits = Path(checkpoint) / "commits"
    done = {int(p.name) for p in commits.iterdir() if p.name.isdigit()} if commits.exists() else set()
    out = Path(directory) / "output"
    rows: list[list[int]] = []
    for n in sorted(done):
        path = out / f"batch-{n}.json"
        if path.exists():
            rows += json.loads(path.read_text())
    return rows


def return_uncommitted(checkpoint: str) -> list[int]:
    """Delete the offsets of the batches that did not commit, so that the restarted planner plans
    from the last completed checkpoint (SRC-28).  The batch ids it deleted."""
    offsets, commits = Path(checkpoint) / "offsets", Path(checkpoint) / "commits"
    if not offsets.exists():
        return []
    done = {p.name for p in commits.iterdir()} if commits.exists() else set()
    dropped = []
    for p in sorted(offsets.iterdir()):
        if p.name.isdigit() and p.name not in done:
            p.unlink()
            crc = offsets / f".{p.name}.crc"
            if crc.exists():
                crc.unlink()
            dropped.append(int(p.name))
    return dropped


def offsets_written(checkpoint: str) -> list[dict[str, Any]]:
    """Every offset in the checkpoint's offset log, in batch order (the source's JSON line)."""
    offsets = Path(checkpoint) / "offsets"
    out = []
    for p in sorted((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        out.append(json.loads(p.read_text().splitlines()[-1]))
    return out
