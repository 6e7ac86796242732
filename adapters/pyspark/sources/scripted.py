"""A scripted job of the FLIP-27 source: its steps given in advance, laid out in micro-batches.

The source (api.py) runs a job either by itself (poll rounds, the user's case) or by a script: the
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

import json
from typing import Any

from flink_semantics.adapters.pyspark.sources.conformance import LIVE, SourceJob
from flink_semantics.adapters.pyspark.sources.engine import SourceCoordinator, SourceReader
from flink_semantics.spec.areas.sources import AREA, FailStep, SourcesConfig
from flink_semantics.spec.schedule import Event, Step
from flink_semantics.spec.schedule import from_json as step_of

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
