"""The harness's FLIP-27 source: jobs of inline record counts, or scripted by a schedule's steps.

`ScriptedSource` (format `flip27-scripted`) is the Spark source the conformance runner (stream.py)
and the fault drills (faults.py) drive; a user reads files with api.py's `Flip27Source` or
implements flip27.py's interface.  Its rows are records and trace events (columns `job, reader,
split, offset, value, step, seq, kind, event`), its offsets the jobs' states, compressed (`pack`).
Its options: `jobs` (JSON: a list of {"splits": [record counts or lists of strings], "readers":
n}, optionally with "bounded", "steps", "tasks", "pipelined", "blocking" for scripted jobs), or
`splits` and `readers` for one job (`scripted_options`); `records_per_poll` (default 2);
`failures` (JSON, optional: failures to inject, faults.py) and `dir` (where injected failures
leave their markers; the chaos runs' fault points).  Its sink is api.py's `IdempotentSink` under
`<dir>/output` (`committed_rows` reads it back).

Mapped onto Spark as flip27.py's engine is: the planner (`latestOffset(start)`) is the enumerator,
restoring every job's state from `start`; the offset is the checkpoint (SRC-12, SRC-15), holding
the batch's assignments (the tracker's bucket, SRC-7) and the ranges each reader reads, so that a
replay reads the same records (SRC-16); partition r is reader r of every job; an injected reader
failure is a real task failure, which Spark retries with the same partition (SRC-20); an injected
enumerator failure is a real query failure, restarted from the checkpoint (SRC-27, SRC-28).

A job runs either by itself (poll rounds: every reader without a split requests one, every reader
reads up to `records_per_poll` records, one split at a time, SRC-39) or by a script: the
steps of a schedule of spec/sources.md (register, request, poll, checkpoint, barrier, complete,
fail, fail_enumerator, rescale, end, ...), a few steps per micro-batch (`layout`: a batch ends
after a step that fails a task or the query, a run of the query after a query failure).  The
script is how the conformance run (stream.py) and fault drills drive the source through exactly
the states the rules are about.  The job's whole state (enumerator, tracker, registry, valve,
readers with their two-phase-commit sinks, the pending checkpoints and the restore point) is
JSON in the source's offset, which Spark writes to its offset log before the batch runs: Spark's
checkpoint holds it, and a query restarted from that checkpoint continues from it.

`ScriptedJob.step(state, index)` is a pure function of the state before the step: the state after
it, the step's trace events, and the real failure the step injects (`TASK`: the task of a reader
fails and Spark runs it again; `QUERY`: the query fails and is restarted from its checkpoint).
The rules themselves are engine.py's and conformance.py's (`SourceJob`), whose docstrings name them.
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
from flink_semantics.adapters.pyspark.sources.api import IdempotentSink, batch_path, committed_batches
from flink_semantics.adapters.pyspark.sources.conformance import LIVE, SourceJob
from flink_semantics.adapters.pyspark.sources.engine import SourceCoordinator, SourceReader, SplitEnumerator
from flink_semantics.spec.areas.sources import AREA, FailStep, SourcesConfig
from flink_semantics.spec.schedule import Event, Step
from flink_semantics.spec.schedule import from_json as step_of
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

TASK, QUERY = "task", "query"


def _copy(payload: Any) -> Any:
    """As JSON reads it back (tuples become lists): what a restored state would hold."""
    return json.loads(json.dumps(payload))


class OffsetStore:
    """The job's restore point (its last completed checkpoint) and what outlives a failure, kept in
    the job's state, that is, in the source's offset (Spark's offset log)."""

    def __init__(self, data: dict[str, Any] | None = None):
        self.data = dict(data or {})

    def write_checkpoint(self, id: int, payload: Any) -> None:
        """Checkpoint `id` completed: it is the restore point (a completion is never older, SRC-46)."""
        self.data = {k: v for k, v in self.data.items() if not k.startswith("ckpt-")}
        self.data[f"ckpt-{id}"] = _copy(payload)

    def read_checkpoint(self, id: int) -> Any:
        return self.data[f"ckpt-{id}"]

    def write_json(self, name: str, payload: Any) -> None:
        self.data[name] = _copy(payload)

    def read_json(self, name: str) -> Any:
        return self.data.pop(name)


def config_of(job: dict[str, Any]) -> SourcesConfig:
    edges = {k: tuple(tuple(e) for e in job.get(k, ())) for k in ("pipelined", "blocking")}
    return SourcesConfig(readers=job["readers"], splits=tuple(job["splits"]),
                         bounded=job.get("bounded", True), tasks=job.get("tasks", 0), **edges)


def initial_state(job: dict[str, Any]) -> dict[str, Any]:
    """The job before its first step."""
    events: list[Event] = []
    return to_json(SourceJob(config_of(job), OffsetStore(), events.append), OffsetStore())


def to_json(job: SourceJob, store: OffsetStore) -> dict[str, Any]:
    return ({"sizes": job.sizes, "parallelism": job.parallelism,
                  "checkpoints": [[k, v] for k, v in job.checkpoints.items()],
                  "snapshots": [[k, v] for k, v in job.snapshots.items()],
                  "last_completed": job.last_completed, "coordinator": job.coordinator.to_json(),
                  "readers": [r.to_json() for r in job.readers], "store": store.data})


def job_from_json(job_spec: dict[str, Any], d: dict[str, Any], record: Any) -> tuple[SourceJob, OffsetStore]:
    store = OffsetStore(d["store"])
    job = SourceJob(config_of(job_spec), store, record)
    job.sizes, job.parallelism, job.last_completed = list(d["sizes"]), d["parallelism"], d["last_completed"]
    job.checkpoints = {k: v for k, v in d["checkpoints"]}
    # a barrier appends to its pending snapshot: a copy, the previous offset stays as it was
    job.snapshots = {k: {**v, "readers": list(v["readers"])} for k, v in d["snapshots"]}
    job.coordinator = SourceCoordinator.from_json(d["coordinator"], job.deliver)
    job.readers = [SourceReader.from_json(r) for r in d["readers"]]
    return job, store


def parse_steps(job_spec: dict[str, Any]) -> list[Step]:
    """The job's script as steps of spec/sources.md."""
    return [step_of(AREA.step_types[d["op"]], {k: v for k, v in d.items() if k != "op"}, i, "step", d["op"])
            for i, d in enumerate(job_spec["steps"])]


def step(job_spec: dict[str, Any], s: Step, state: dict[str, Any], index: int) -> tuple[
        dict[str, Any], list[Event], str | None]:
    """Step `index` of the job's script on `state`: the new state, the step's events, and the real
    failure it injects (TASK, QUERY or None).  A failed incarnation resumes at once from what
    outlives it (the surviving tasks' state, or only the restore point for a global failover)."""
    events: list[Event] = []
    job, store = job_from_json(job_spec, state, events.append)
    job.apply(index, s)
    failure = None
    if job.failure is not None:
        live = store.read_json(LIVE)
        failure = QUERY if live["global"] else TASK
        job.resume(live)
        job.failure = None
    return to_json(job, store), events, failure


def failed_task(job_spec: dict[str, Any], index: int) -> int | None:
    """The task a `fail` step fails (SRC-20), else None."""
    s = job_spec["steps"][index]
    return s["task"] if s["op"] == FailStep.op else None


# --------------------------------------------------------------------------
# The jobs' steps laid out in micro-batches and query runs
# --------------------------------------------------------------------------


def failures(job_spec: dict[str, Any]) -> list[str | None]:
    """The real failure each step of the job's script injects (TASK, QUERY or None): the script
    run once through, on the planner, only to lay its steps out in batches (`layout`)."""
    state, out = initial_state(job_spec), []
    for index, s in enumerate(parse_steps(job_spec)):
        state, _, failure = step(job_spec, s, state, index)
        out.append(TASK if failure is None and failed_task(job_spec, index) is not None else failure)
    return out


def segments(kinds: list[str | None]) -> list[list[int]]:
    """A job's steps cut into batches (a batch ends after a step that fails a task or the query:
    one real failure per job and batch), and those into segments, one per run of the query (a
    segment ends with a query failure): each batch as its number of steps."""
    out: list[list[int]] = [[]]
    size = 0
    for kind in kinds:
        size += 1
        if kind is not None:
            out[-1].append(size)
            size = 0
            if kind == QUERY:
                out.append([])
    if size:
        out[-1].append(size)
    return out


def layout(kinds_of_jobs: list[list[str | None]]) -> list[dict[int, int]]:
    """For each job, batch id -> how many of its steps that micro-batch runs.

    The query runs once more than the most query failures a job has: run i holds every job's
    segment i, and lasts as many batches as the longest of them.  A segment that ends with a query
    failure takes the run's last batches, so that every job failing over in run i does so in the
    batch whose planning fails the query; the others start with the run and idle once done."""
    jobs = [segments(kinds) for kinds in kinds_of_jobs]
    runs = max((len(s) for s in jobs), default=0)
    lengths = [max(len(s[i]) for s in jobs if i < len(s)) for i in range(runs)]
    starts = [sum(lengths[:i]) for i in range(runs)]
    out: list[dict[int, int]] = []
    for segs in jobs:
        batches: dict[int, int] = {}
        for i, seg in enumerate(segs):
            first = starts[i] + (lengths[i] - len(seg) if i < len(segs) - 1 else 0)
            batches.update({first + k: n for k, n in enumerate(seg)})
        out.append(batches)
    return out


# --------------------------------------------------------------------------
# The harness's Spark source: jobs in its options, their states in its offsets
# --------------------------------------------------------------------------

SCRIPTED_FORMAT = "flip27-scripted"
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


def scripted_options(splits: Sequence[int | Sequence[str]], readers: int = 1,
                     records_per_poll: int = 2) -> dict[str, str]:
    """The options of `format("flip27-scripted")` for one job: `splits`, each a record count or a list of
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
        return {"script": initial_state(job), "next": 0, "events": [], "failure": None}
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
# One job's state in the offset: a script, its steps laid out in batches (py)
# --------------------------------------------------------------------------


def plan_step(job: dict[str, Any], steps: list[Any], state: dict[str, Any]) -> dict[str, Any] | None:
    """The job's next step (of `steps`, its parsed script) after `state`, or None when its script is done."""
    index = state["next"]
    if index >= len(steps):
        return None
    after, events, failure = step(job, steps[index], state["script"], index)
    return {"script": after, "next": index + 1, "events": [e.to_dict() for e in events], "failure": failure,
            "failed_task": failed_task(job, index)}


def plan_steps(job: dict[str, Any], steps: list[Any], state: dict[str, Any], count: int) -> dict[str, Any]:
    """The job's next `count` steps in one batch: the state after the last, all their events in
    order; a failure only the last may inject (layout ends a batch after one)."""
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
class ScriptedPartition(InputPartition):
    """Reader `reader`'s work in batch `batch`: [job, split, from, to) ranges, in reading order, and
    the scripted jobs' events of the readers this partition hosts."""

    batch: int
    reader: int
    ranges: list[list[int]]
    failures: int  # how many of its attempts fail (fault injection)
    events: list[list[Any]]  # [job, seq, event dict]


class ScriptedSource(DataSource):
    """The harness's source, `spark.readStream.format("flip27-scripted").option("jobs", ...).load()`
    (the section's comment).  Follows SRC-2, SRC-6, SRC-12, SRC-15, SRC-16, SRC-17, SRC-20, SRC-27,
    SRC-28, SRC-32, SRC-33, SRC-38, SRC-39."""

    @classmethod
    def name(cls) -> str:
        return SCRIPTED_FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> ScriptedStreamReader:
        return ScriptedStreamReader(self.options)


def jobs_option(options: Mapping[str, str]) -> list[dict[str, Any]]:
    if "jobs" in options:
        jobs = json.loads(options["jobs"])
    elif "splits" in options:
        jobs = [{"splits": json.loads(options["splits"]), "readers": int(options.get("readers", "1"))}]
    else:
        raise ValueError("flip27-scripted needs the option jobs (or splits and readers): see "
                         "scripted_options")
    check_jobs(jobs)
    return jobs


class ScriptedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
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
            self._steps[j] = parse_steps(job)
        if state["next"] >= len(self._steps[j]):
            return None
        count = self._batches()[j].get(batch, 0)
        if not count and batch > max(self._batches()[j], default=-1):
            raise RuntimeError(f"job {j}: steps left after its last batch in the layout ({batch})")
        return plan_steps(job, self._steps[j], state, count) if count else idle(state)

    def _batches(self) -> list[dict[int, int]]:
        """The scripted jobs' steps laid out in batches and query runs (layout), computed
        once per query from the scripts (a pure function of them: a restarted query gets the same)."""
        if self._layout is None:
            self._layout = layout([failures(job) if "steps" in job else []
                                            for job in self.jobs])
        return self._layout

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The enumerator's step: one poll round (all rounds for ReadAllAvailable) of every job, the
        steps of this batch of every scripted job (layout); or `start` when every job is
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
        if any(p is not None and p.get("failure") == QUERY for p in planned):
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
        return [ScriptedPartition(batch, r, _ranges(states, r), planned.get(str(r), 0), events[r])
                for r in range(width)]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        """SRC-39: each range in order, records in offset order; a scripted job's events.  An
        injected reader failure raises halfway through: Spark drops the attempt's output and runs
        the task again."""
        assert isinstance(partition, ScriptedPartition)
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
# The committed output, the offsets, a failover's return of uncommitted batches
# --------------------------------------------------------------------------


def output_dir(directory: str | Path) -> str:
    """Where the harness's IdempotentSink writes under the run's directory."""
    return str(Path(directory) / "output")


def sink(directory: str | Path, fail_batches: Sequence[int] = ()) -> IdempotentSink:
    """The run's sink; `fail_batches`: job failures injected after the write, before the commit."""
    from functools import partial

    hook = partial(fail_after_write, str(directory), list(fail_batches)) if fail_batches else None
    return IdempotentSink(output_dir(directory), after_write=hook)


def fail_after_write(directory: str, batches: list[int], batch_id: int) -> None:
    if batch_id in batches:
        inject_once(directory, f"sink-{batch_id}")


def committed_rows(directory: str, checkpoint: str) -> list[list[Any]]:
    """The sink's output (under `output_dir(directory)`) of every batch the checkpoint's commit log
    confirms, in batch order, each row in COLUMNS order."""
    import pyarrow.parquet as pq

    out, rows = output_dir(directory), []
    for n in committed_batches(out, checkpoint):
        path = Path(batch_path(out, n))
        if any(p.suffix == ".parquet" for p in path.iterdir()):
            rows += [[r[c] for c in COLUMNS] for r in pq.read_table(path).to_pylist()]
    return rows


def committed_dicts(directory: str, checkpoint: str) -> list[dict[str, Any]]:
    """`committed_rows` as dicts by column."""
    return [dict(zip(COLUMNS, r)) for r in committed_rows(directory, checkpoint)]


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
