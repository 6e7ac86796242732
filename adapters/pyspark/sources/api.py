"""A FLIP-27 source for Spark Structured Streaming (the Python data source API), and its sink.

The public API a Spark user calls:

    from flink_semantics.adapters.pyspark.sources.api import Flip27Source, IdempotentSink, flip27_options

    spark.dataSource.register(Flip27Source)
    df = spark.readStream.format("flip27").options(**flip27_options([["a", "b"], ["c"]], readers=2)).load()
    q = (df.writeStream.foreachBatch(IdempotentSink("/out")).option("checkpointLocation", "/ckpt")
         .trigger(availableNow=True).start())
    q.awaitTermination()
    rows = IdempotentSink.read("/out", "/ckpt")   # what the committed micro-batches wrote

Columns: `job, reader, split, offset, value, step, seq, kind, event`.  A record is a row of kind
`record`: record `offset` of split `split`, read by reader `reader`, with its `value` (the split's
element as a string, or null for a split given as a record count).

The mapping (spec/sources.md):

* **the enumerator** is the driver-side planner: `latestOffset(start)` restores the enumerator, the
  readers' split states and the registry from `start`, lets every reader without a split request
  one (SRC-6, SRC-10: NoMoreSplits when none is left) and every reader read up to
  `records_per_poll` records, one split at a time in offset order (SRC-39, SRC-33, SRC-32), and
  returns the new state.  One micro-batch is one checkpoint interval;
* **the offset JSON is the checkpoint**: Spark writes it verbatim to `<checkpoint>/offsets/<N>`
  before batch N runs.  It holds the enumerator's unassigned splits and whom it told NoMoreSplits
  (SRC-12), every reader's owned splits with their positions (SRC-15), the tracker's bucket of the
  batch (its assignments, SRC-7, SRC-11), and the ranges each reader reads in the batch, so that a
  replay reads the same records (SRC-16: each split in one place);
* **the readers** are the partitions: `partitions(start, end)` returns one `InputPartition` per
  reader index, in order, so reader r is Spark partition r; `read()` yields its ranges;
* **the sink** (`IdempotentSink`, for `foreachBatch`) writes each batch under its batch id,
  replacing what an earlier run of the same batch id wrote: `commits/<N>` is checkpoint N
  completing (SRC-38); a replayed batch overwrites, so nothing is committed twice;
* **the notification** of checkpoint N is the source's `commit(end)`, and Spark always sends it
  late: `MicroBatchExecution.constructNextBatch` calls it with batch N's end offset once batch
  N+1's offset is written, in batch order, never after a later batch's (SRC-17, SRC-46).  Nothing
  waits for it: a batch's assignments live in its offset, and what a failover gives back is decided
  by the commit log (`return_uncommitted`, SRC-28);
* **a reader failure** is a real task failure: Spark runs the task again with the same partition,
  so the new attempt reads from the restored positions (the start offset) again (SRC-20..SRC-25);
* **an enumerator failure** is a real query failure: the planner raises, and the query is
  restarted from its checkpoint directory (SRC-27, SRC-28).

A job may instead carry a script (`"steps"`: the steps of a schedule of spec/sources.md, laid out
in micro-batches by scripted.layout: a batch ends after a step that fails a task or the query):
the conformance run (stream.py) drives the source through exactly the states the rules are about,
its rows the trace events (`kind`, `event` as JSON, keyed by `step`, `seq`).  An offset holds the
jobs' states as compressed JSON (`pack`, `unpack`; `offsets_written` reads them back).  Several
jobs share one query: the offset holds one state per job, and partition r holds reader r of every
job.

Options (strings, as Spark passes them; `flip27_options` builds and checks them): `jobs` (JSON: a
list of {"splits": [record counts or lists of strings], "readers": n}, optionally with "bounded",
"steps", "tasks", "pipelined", "blocking" for scripted jobs), or `splits` and `readers` for one job;
`records_per_poll` (default 2); `failures` (JSON, optional: failures to inject, faults.py) and
`dir` (where injected failures leave their markers).
"""

from __future__ import annotations

import base64
import json
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark.runtime import InjectedFailure
from flink_semantics.adapters.pyspark.sources import scripted
from flink_semantics.adapters.pyspark.sources.engine import SourceCoordinator, SourceReader, SplitEnumerator
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

FORMAT = "flip27"
SCHEMA = ("job int, reader int, split int, offset int, value string, step int, seq int, kind string, "
          "event string")
COLUMNS = tuple(c.split()[0] for c in SCHEMA.split(", "))
Row = tuple[Any, ...]


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
# Options, checked before any query runs
# --------------------------------------------------------------------------


def flip27_options(splits: Sequence[int | Sequence[str]], readers: int = 1,
                   records_per_poll: int = 2) -> dict[str, str]:
    """The options of `format("flip27")` for one job: `splits`, each a record count or a list of
    string records (the split's elements, read in order, SRC-39); `readers`, the source's
    parallelism; `records_per_poll`, the records each reader reads per micro-batch.  Raises
    ValueError naming the parameter and the rule on bad input."""
    job = {"splits": [s if isinstance(s, int) else list(s) for s in splits], "readers": readers}
    check_jobs([job])
    check_records_per_poll(records_per_poll)
    return {"jobs": json.dumps([job]), "records_per_poll": str(records_per_poll)}


def check_records_per_poll(n: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("records_per_poll must be an int >= 1 (SRC-39: a poll emits up to that many), "
                         f"not {n!r}")


def check_jobs(jobs: Any) -> None:
    """SRC-40: split sizes are counts (>= 0) or lists of strings; SRC-41: a job has >= 1 reader."""
    if not isinstance(jobs, list):
        raise ValueError(f"jobs must be a list of jobs, not {type(jobs).__name__}")
    for j, job in enumerate(jobs):
        readers = job.get("readers") if isinstance(job, dict) else None
        if isinstance(readers, bool) or not isinstance(readers, int) or readers < 1:
            raise ValueError(f"readers (job {j}) must be an int >= 1 (SRC-41: the source's parallelism), "
                             f"not {readers!r}")
        splits = job.get("splits")
        if not isinstance(splits, list):
            raise ValueError(f"splits (job {j}) must be a list, not {type(splits).__name__}")
        for k, s in enumerate(splits):
            count_ok = isinstance(s, int) and not isinstance(s, bool) and s >= 0
            list_ok = isinstance(s, list) and all(isinstance(x, str) for x in s)
            if not (count_ok or list_ok):
                raise ValueError(f"splits[{k}] (job {j}) must be a record count >= 0 or a list of strings "
                                 f"(SRC-40: split sizes are counts), not {s!r}")


def sizes(job: dict[str, Any]) -> list[int]:
    """Each split's record count."""
    return [s if isinstance(s, int) else len(s) for s in job["splits"]]


# --------------------------------------------------------------------------
# One job's state in the offset: poll rounds (an unscripted job)
# --------------------------------------------------------------------------


def initial_job_state(job: dict[str, Any]) -> dict[str, Any]:
    if "steps" in job:
        return {"script": scripted.initial_state(job), "next": 0, "events": [], "failure": None}
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

        reader.poll(records_per_poll, sizes(job), r, record)
    return {"enumerator": coordinator.enumerator.to_json(),
            "readers": [{"splits": x.splits, "no_more": x.no_more, "ended": x.ended} for x in readers],
            "assigned": [[r, splits] for r, splits in coordinator.tracker.uncheckpointed.items()],
            "read": read}


def ignore(kind: str, **fields: Any) -> None:
    pass


def _merge(a: dict[str, Any], b: dict[str, Any] | None) -> dict[str, Any]:
    """Two rounds of one job in one batch: the later state, both rounds' assignments and reads."""
    if b is None:
        return a
    return {**b, "assigned": a["assigned"] + b["assigned"],
            "read": [ra + rb for ra, rb in zip(a["read"], b["read"])]}


def idle(state: dict[str, Any]) -> dict[str, Any]:
    """A job with nothing to do in a batch: its state, reading nothing."""
    if "script" in state:
        return {**state, "events": [], "failure": None, "failed_task": None}
    return {**state, "assigned": [], "read": [[] for _ in state["read"]]}


# --------------------------------------------------------------------------
# One job's state in the offset: a script, its steps laid out in batches (scripted.py)
# --------------------------------------------------------------------------


def plan_step(job: dict[str, Any], steps: list[Any], state: dict[str, Any]) -> dict[str, Any] | None:
    """The job's next step (of `steps`, its parsed script) after `state`, or None when its script is done."""
    index = state["next"]
    if index >= len(steps):
        return None
    after, events, failure = scripted.step(job, steps[index], state["script"], index)
    return {"script": after, "next": index + 1, "events": [e.to_dict() for e in events], "failure": failure,
            "failed_task": scripted.failed_task(job, index)}


def plan_steps(job: dict[str, Any], steps: list[Any], state: dict[str, Any], count: int) -> dict[str, Any]:
    """The job's next `count` steps in one batch: the state after the last, all their events in
    order; a failure only the last may inject (scripted.layout ends a batch after one)."""
    events: list[dict[str, Any]] = []
    for _ in range(count):
        after = plan_step(job, steps, state)
        if after is None:
            raise RuntimeError(f"the layout gives a batch more steps than the script has ({len(steps)})")
        events += after["events"]
        state = after
    return {**state, "events": events}


def parallelism(state: dict[str, Any]) -> int:
    return state["script"]["parallelism"] if "script" in state else len(state["read"])


# --------------------------------------------------------------------------
# The Spark source
# --------------------------------------------------------------------------


@dataclass
class ReaderPartition(InputPartition):
    """Reader `reader`'s work in batch `batch`: [job, split, from, to) ranges, in reading order, and
    the scripted jobs' events of the readers this partition hosts."""

    batch: int
    reader: int
    ranges: list[list[int]]
    failures: int  # how many of its attempts fail (fault injection)
    events: list[list[Any]]  # [job, seq, event dict]


class Flip27Source(DataSource):
    """A FLIP-27 source: `spark.readStream.format("flip27").options(**flip27_options(...)).load()`.
    Follows SRC-2, SRC-6..SRC-17, SRC-20..SRC-28, SRC-32, SRC-33, SRC-38, SRC-39 (the module's
    docstring maps each to Spark)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> Flip27StreamReader:
        return Flip27StreamReader(self.options)


def jobs_option(options: Mapping[str, str]) -> list[dict[str, Any]]:
    if "jobs" in options:
        jobs = json.loads(options["jobs"])
    elif "splits" in options:
        jobs = [{"splits": json.loads(options["splits"]), "readers": int(options.get("readers", "1"))}]
    else:
        raise ValueError("flip27 needs the option jobs (or splits and readers): see flip27_options")
    check_jobs(jobs)
    return jobs


class Flip27StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]):
        self.jobs = jobs_option(options)
        self.records_per_poll = int(options.get("records_per_poll", 2))
        check_records_per_poll(self.records_per_poll)
        self.failures: dict[str, Any] = json.loads(options.get("failures", "{}"))
        self.dir = options.get("dir", "")
        self._steps: dict[int, list[Any]] = {}  # job -> its parsed script, planner side only
        self._layout: list[dict[int, int]] | None = None  # job -> {batch: its steps}, planner side only

    def __getstate__(self) -> dict[str, Any]:
        """What the read tasks get: the splits (their values), not the scripts or their layout."""
        jobs = [{k: v for k, v in job.items() if k != "steps"} for job in self.jobs]
        return {**self.__dict__, "jobs": jobs, "_steps": {}, "_layout": None}

    def initialOffset(self) -> dict[str, Any]:
        return pack(-1, [initial_job_state(job) for job in self.jobs])

    def getDefaultReadLimit(self) -> ReadLimit:
        """One poll round: at most `records_per_poll` records per reader of each job."""
        return ReadMaxRows(self.records_per_poll * sum(job["readers"] for job in self.jobs))

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the splits are fixed: everything there is, is there now

    def _plan(self, j: int, state: dict[str, Any], batch: int) -> dict[str, Any] | None:
        """Job j's part of batch `batch` after `state`: None when it is done, its state unchanged
        (idle) when the layout gives it no step in this batch."""
        job = self.jobs[j]
        if "steps" not in job:
            return plan_round(job, state, self.records_per_poll)
        if j not in self._steps:
            self._steps[j] = scripted.parse_steps(job)
        if state["next"] >= len(self._steps[j]):
            return None
        count = self._batches()[j].get(batch, 0)
        if not count and batch > max(self._batches()[j], default=-1):
            raise RuntimeError(f"job {j}: steps left after its last batch in the layout ({batch})")
        return plan_steps(job, self._steps[j], state, count) if count else idle(state)

    def _batches(self) -> list[dict[int, int]]:
        """The scripted jobs' steps laid out in batches and query runs (scripted.layout), computed
        once per query from the scripts (a pure function of them: a restarted query gets the same)."""
        if self._layout is None:
            self._layout = scripted.layout([scripted.failures(job) if "steps" in job else []
                                            for job in self.jobs])
        return self._layout

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The enumerator's step: one poll round (all rounds for ReadAllAvailable) of every job, the
        steps of this batch of every scripted job (scripted.layout); or `start` when every job is
        done."""
        batch, states = unpack(start)
        batch += 1
        if str(batch) in self.failures.get("enumerator", {}):
            inject_once(self.dir, f"enumerator-{batch}")  # SRC-27: the planner throws, the query fails
        planned = [self._plan(j, s, batch) for j, s in enumerate(states)]
        if all(p is None for p in planned):
            return start  # every reader at end of input: no batch
        out = [idle(s) if p is None else p for p, s in zip(planned, states)]
        while isinstance(limit, ReadAllAvailable):  # further rounds, their reads appended
            more = [None if "steps" in job else plan_round(job, s, self.records_per_poll)
                    for job, s in zip(self.jobs, out)]
            if all(p is None for p in more):
                break
            out = [o if "steps" in job else _merge(o, m) for job, o, m in zip(self.jobs, out, more)]
        if any(p is not None and p.get("failure") == scripted.QUERY for p in planned):
            # SRC-27, SRC-4, SRC-31: a global failover is a real query failure, which restarts every
            # job of the query (the layout has all of a run's failovers in its last batch); the
            # restarted query plans this batch again from the last committed offset
            inject_once(self.dir, f"query-{batch}")
        return pack(batch, out)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """Reader r is partition r (every job's reader r); a replay gets the same ranges and events."""
        batch, states = unpack(end)
        width = max(parallelism(s) for s in states)
        planned = dict(self.failures.get("reader", {}).get(str(batch), {}))
        events: list[list[list[Any]]] = [[] for _ in range(width)]
        for j, s in enumerate(states):
            if "script" not in s:
                continue
            if s.get("failed_task") is not None:  # SRC-20: the task hosting it really fails, once
                p = s["failed_task"] % width
                planned[str(p)] = max(planned.get(str(p), 0), 1)
            for seq, e in enumerate(s["events"]):
                events[e.get("reader", 0) % width].append([j, seq, e])
        return [ReaderPartition(batch, r, _ranges(states, r), planned.get(str(r), 0), events[r])
                for r in range(width)]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        """SRC-39: each range in order, records in offset order; a scripted job's events.  An
        injected reader failure raises halfway through: Spark drops the attempt's output and runs
        the task again."""
        assert isinstance(partition, ReaderPartition)
        rows = [(j, partition.reader, split, offset, self._value(j, split, offset), partition.batch, None,
                 "record", None)
                for j, split, lo, hi in partition.ranges for offset in range(lo, hi)]
        rows += [event_row(j, seq, e) for j, seq, e in partition.events]
        half = len(rows) // 2
        yield from rows[:half]
        for k in range(partition.failures):
            inject_once(self.dir, f"reader-{partition.batch}-{partition.reader}-{k}")
        from flink_semantics.adapters.pyspark import chaos

        if self.dir:  # the fault runs (chaos.py): an armed run fails this attempt, its partition half read
            chaos.task_point(self.dir, "flip27-read")
        # ... and each retry further into the second half (chaos.partly_read's points)
        yield from chaos.partly_read(rows[half:], self.dir or None, "flip27-read")

    def _value(self, job: int, split: int, offset: int) -> str | None:
        s = self.jobs[job]["splits"][split]
        return None if isinstance(s, int) else s[offset]

    def commit(self, end: dict[str, Any]) -> None:
        pass  # checkpoint `end` completed, notified one batch late (SRC-17); its bucket is in the offset


def _ranges(states: list[dict[str, Any]], r: int) -> list[list[int]]:
    """Reader r's [job, split, from, to) ranges of the batch, over the unscripted jobs."""
    return [[j, *rng] for j, s in enumerate(states) if "read" in s and r < len(s["read"])
            for rng in s["read"][r]]


def pack(batch: int, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The offset of batch `batch`: the jobs' states as compressed JSON (about a tenth of its size:
    Spark writes every offset to its log and passes it between the JVM and the planner)."""
    text = json.dumps(jobs, separators=(",", ":")).encode()
    return {"batch": batch, "jobs": base64.b64encode(zlib.compress(text, 6)).decode("ascii")}


def unpack(offset: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """An offset's batch id and the jobs' states (`pack`)."""
    return offset["batch"], json.loads(zlib.decompress(base64.b64decode(offset["jobs"])))


def event_row(job: int, seq: int, e: dict[str, Any]) -> Row:
    """A scripted job's trace event as a row."""
    return (job, e.get("reader"), e.get("split"), e.get("offset"), None, e["step"], seq, e["event"],
            json.dumps(e))


# --------------------------------------------------------------------------
# The sink
# --------------------------------------------------------------------------


class IdempotentSink:
    """`foreachBatch(IdempotentSink(directory))`: batch N's rows go to `<directory>/output/batch-<N>.json`,
    replacing an earlier run's (SRC-38: a replayed batch is written again, not twice); only the
    batches the checkpoint's commit log confirms count (`IdempotentSink.read`).  `fail_batches`:
    injected job failures after the write, before the batch commits (fault drills)."""

    def __init__(self, directory: str, fail_batches: Sequence[int] = ()):
        self.dir = str(directory)
        self.fail_batches = list(fail_batches)

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [list(r) for r in df.collect()]
        out = Path(self.dir) / "output"
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".batch-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out / f"batch-{batch_id}.json")
        if batch_id in self.fail_batches:
            inject_once(self.dir, f"sink-{batch_id}")

    @staticmethod
    def read(directory: str, checkpoint: str) -> list[dict[str, Any]]:
        """The committed rows (every batch in the checkpoint's commit log), as dicts by column."""
        return [dict(zip(COLUMNS, r)) for r in committed_rows(str(directory), str(checkpoint))]


def committed_rows(directory: str, checkpoint: str) -> list[list[Any]]:
    """The sink's output of every batch the checkpoint's commit log confirms, in batch order."""
    commits = Path(checkpoint) / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []
    last = max(done, default=-1)  # batches commit in order; Spark purges the log's oldest entries
    out = Path(directory) / "output"
    found = sorted(int(p.name[6:-5]) for p in out.glob("batch-*.json")) if out.exists() else []
    rows: list[list[Any]] = []
    for n in found:
        if n <= last:
            rows += json.loads((out / f"batch-{n}.json").read_text())
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
        batch, jobs = unpack(json.loads(p.read_text().splitlines()[-1]))
        out.append({"batch": batch, "jobs": jobs})
    return out
