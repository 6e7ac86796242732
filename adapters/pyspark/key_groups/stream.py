"""Key groups on Structured Streaming: the area's schedules through the public API
(`key_groups/api.py`), many schedules per query (spec/key-groups.md).

The mapping:

* **a job** of `api.keyed_process` (`jobs`: its id is part of every grouping key, with its own
  parallelism, maximum parallelism and hash profile) is one segment of a schedule: its steps from
  its start or a restore to the next restore;
* **a round** is one streaming query holding every job of that round: a job from no checkpoint
  (the schedule's first, or a restore before any checkpoint: empty state, KG-9) runs in the first
  round, a job restored from a checkpoint in the round after the job that took it; so a call runs
  as many queries as its deepest chain of restores, whatever its number of schedules.  The query
  runs on the RocksDB state store with at most `QUERY_PARTITIONS` state partitions (`api.start`), a
  file source as its input (`maxFilesPerTrigger` 1: a micro-batch per file);
* **a subtask** is one grouping key (job, salt), in state partition subtask mod the query's
  partitions: a routed key's `subtask` in the trace is the subtask of the grouping key its update
  ran in (Spark's KG-3 expression; the processor checks the partition), a restored key's the
  grouping key that holds it;
* **the keyed state** is the API's per-key state (a sum, `SumProcessor`); **operator state** its
  operator lists (`add_state` rows sent to a subtask by the `target` column);
* **a null key** under the `flink` profile is not routed (KG-7): the API's `null_key`
  (`null_keys="process"`), which gives the trace its `null_key` event;
* **a checkpoint** that a restore reads is a committed micro-batch: a job's steps up to it run in
  the micro-batches up to that batch id, the steps after it in the next one (all jobs advance in
  the same micro-batches); a checkpoint no restore reads shares the micro-batch of what follows;
* **a restore**: each restored job's state is read with the state data source at its checkpoint's
  batch id in the query that took it (`api.rescale_jobs`: keyed state by key group, operator state
  by Flink's repartitioner, as DataFrame operations), and the union is the `initialState` of the
  next round's query, read in its first micro-batch; the first micro-batch of a restored job asks
  each new subtask for what it holds (`dump` rows): the trace's `keyed` and `operator` events are
  read from the state store by the processor;
* **refusals** (KG-8, KG-15, KG-16) are decided on the driver (`api.rescale_refusal`) before
  anything stops: the running job goes on; a configuration out of bounds is `rejected`;
* **faults** (adapters/pyspark/chaos.py): the keyed tasks fail after their first state update
  (`chaos.task_point`, the API's `on_state_update` hook), Spark runs them again from the last
  committed state; each round after the first counts as a query restart.

Ranges (`range` events, KG-4) are the driver's `api.key_group_ranges`.  Everything else, the hash,
the routing, the state and its redistribution, is Spark's.
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark import chaos
from flink_semantics.adapters.pyspark.key_groups import api
from flink_semantics.adapters.pyspark.key_groups.api import JobSpec, KeyedProcessor, Rescale
from flink_semantics.adapters.pyspark.key_groups.engine import key_sort
from flink_semantics.spec.areas.key_groups import (
    AddStateStep,
    CheckpointStep,
    KeyGroupsConfig,
    RestoreStep,
    UpdateStep,
    event,
)
from flink_semantics.spec.schedule import Event, Schedule, Trace, rejected, required_capabilities

# What this face of the area cannot run, and why (capability -> Spark's reason).  The glue
# (adapters/pyspark/streaming.py) starts from the task-mode engine's capabilities and updates them
# with these: None marks one this face supports though the engine does not (the pyflink profile,
# KG-33: `spark.key_hash_column` computes PyFlink's hash of the key's Row as a Spark expression).
# A fault run's calls (streaming.py): sized for >= 1,000 task failures at 36 examples (issue 31):
# calls of 50 gave 841, so 25.
FAULT_CALL_SIZE = 25

STREAM_UNSUPPORTED: dict[str, str | None] = {
    "key_groups.pyflink_hash": None,
    "key_groups.lone_surrogates": (
        "Spark's StringType holds UTF-8 (UTF8String), which has no form for an unpaired surrogate: "
        "UTF8String.fromString is String.getBytes(UTF_8), which writes it as '?' (the JSON source's "
        "path), createDataFrame's pickled rows give U+FFFD and Arrow refuses it, so such a key would "
        "be another key (\"?\") in the query's grouping and state (KG-34)"),
}

# The state partitions of a round's query: subtask t of a job lives in partition t mod
# QUERY_PARTITIONS, as its own grouping key (a task and a RocksDB instance per subtask per
# micro-batch cost seconds each at a round's 16 subtasks).  One: bench/key_groups.py --stream on 120
# drawn schedules (3 queries, 4 micro-batches), the 2-core machine under load 8 to 10, gave 0.39
# schedules/s with one partition against 0.35 with two, the micro-batches 184 s against 240 s (one
# Python worker and one RocksDB instance per micro-batch instead of two).  Routing rows to more state
# partitions than one is checked by tests/test_pyspark_key_groups_stream.py (a partition per subtask).
QUERY_PARTITIONS = 1
INPUT_SCHEMA = ("job int, seq long, kind string, key string, type string, value long, target int, "
                "name string, mode string, element long")


class SumProcessor(KeyedProcessor):
    """The area's operator: a sum per key (KG-6), operator lists appended by `add_state`, and on a
    `dump` row everything the subtask holds (after a restore)."""

    state_schema = "value long"
    output_schema = ("seq long, kind string, hash int, key_group int, subtask int, type string, key string, "
                     "value long, name string, element long")

    def process(self, key: Any, row: Any, state: Any, ctx: Any) -> list[tuple[Any, ...]]:
        total = int((state.get() or (0,))[0]) + int(row.value)
        state.update((total,))
        seq = int(row.seq)
        return [(seq, "routed", ctx.hash, ctx.key_group, ctx.subtask, None, None, total, None, None)]

    def null_key(self, row: Any, ctx: Any) -> list[tuple[Any, ...]]:
        return [(int(row.seq), "null_key", None, None, None, None, None, None, None, None)]

    def process_subtask(self, row: Any, ctx: Any) -> list[tuple[Any, ...]]:
        seq = int(row.seq)
        if row.kind == "add_state":
            ctx.operator_list(row.name, row.mode).append(int(row.element))
            return []
        out: list[tuple[Any, ...]] = [
            (seq, "keyed", None, kg, ctx.subtask, type_, key, int(value[0]), None, None)
            for kg, type_, key, value in ctx.keyed_entries()]
        for name, (_, elements) in ctx.operator_lists().items():
            out += [(seq, "operator", None, None, ctx.subtask, None, None, None, name, e) for e in elements]
        return out


# --------------------------------------------------------------------------
# The plan: each schedule's jobs (segments between restores), decided on the driver
# --------------------------------------------------------------------------


@dataclass
class CheckpointRef:
    segment: int  # the segment (round) whose query took it
    batch: int
    parallelism: int
    max_parallelism: int
    modes: dict[str, str]


@dataclass
class Segment:
    """One job of a schedule: its parallelism, maxP and its micro-batches' input rows."""

    parallelism: int
    max_parallelism: int
    chunks: list[list[dict[str, Any]]] = field(default_factory=lambda: [[]])
    restore_step: int | None = None  # the restore that started it
    restored_from: CheckpointRef | None = None
    new_max: int | None = None  # the restore's explicit maximum parallelism

    def batches(self) -> list[list[dict[str, Any]]]:
        """The chunks to run: the last one dropped when empty (no checkpoint needs it)."""
        return self.chunks[:-1] if not self.chunks[-1] else self.chunks


@dataclass
class Plan:
    schedule: Schedule
    segments: list[Segment]
    events: list[Event]  # the driver's: refusals, `restored` and `range`
    names: dict[int, list[str]]  # a restore from a checkpoint -> its state names (C10)


def plan(schedule: Schedule) -> Plan:
    """The schedule cut into jobs; refusals (KG-8, KG-15, KG-16) decided here (C7, C8)."""
    c: KeyGroupsConfig = schedule.config
    seg = Segment(c.parallelism, api.max_parallelism_of(c.parallelism, c.max_parallelism))
    out = Plan(schedule, [seg], [], {})
    modes: dict[str, str] = {}
    checkpoint: CheckpointRef | None = None
    for i, s in enumerate(schedule.steps):
        if isinstance(s, UpdateStep):
            seg.chunks[-1].append({"seq": i, "kind": "update", "type": s.type, "value": s.value,
                                   "key": None if s.key is None else str(s.key)})
        elif isinstance(s, AddStateStep):
            modes.setdefault(s.name, s.mode)  # the job's declared state (every subtask has it)
            seg.chunks[-1].append({"seq": i, "kind": "add_state", "target": s.subtask, "name": s.name,
                                   "mode": modes[s.name], "element": s.element})
        elif isinstance(s, CheckpointStep):
            checkpoint = CheckpointRef(len(out.segments) - 1, len(seg.chunks) - 1, seg.parallelism,
                                       seg.max_parallelism, dict(modes))
            seg.chunks.append([])
        elif isinstance(s, RestoreStep):
            reason = api.rescale_refusal(s.parallelism, s.max_parallelism,
                                         None if checkpoint is None else checkpoint.max_parallelism)
            if reason is not None:
                out.events.append(event(i, "restore_refused", reason=reason))
                continue  # the running job goes on (C8)
            seg = _restored(out, i, s, checkpoint)
            modes = {} if checkpoint is None else dict(checkpoint.modes)
        else:
            raise ValueError(f"not a key_groups step: {s!r}")
    _merge_unrestored(out)
    return out


def _merge_unrestored(out: Plan) -> None:
    """Fewer micro-batches: a checkpoint no restore reads needs no micro-batch of its own, so each
    segment's chunks are merged up to the checkpoints a restore reads (the batch ids those restores
    read are renumbered); the steps keep their order (`seq`) within a micro-batch."""
    refs = list({id(seg.restored_from): seg.restored_from for seg in out.segments
                 if seg.restored_from is not None}.values())  # a checkpoint read by many restores: once
    for number, seg in enumerate(out.segments):
        mine = sorted({r.batch for r in refs if r.segment == number})
        merged: list[list[dict[str, Any]]] = []
        first = 0
        for b in mine:
            merged.append([row for chunk in seg.chunks[first:b + 1] for row in chunk])
            first = b + 1
        merged.append([row for chunk in seg.chunks[first:] for row in chunk])
        seg.chunks = merged
        for r in refs:
            if r.segment == number:
                r.batch = mine.index(r.batch)


def _restored(out: Plan, i: int, s: RestoreStep, checkpoint: CheckpointRef | None) -> Segment:
    p = s.parallelism
    if checkpoint is None:  # a new job: empty state, its own maxP (KG-9, KG-16)
        seg = Segment(p, api.max_parallelism_of(p, s.max_parallelism), restore_step=i)
    else:  # KG-16: the checkpoint's maxP; a dump row per new subtask reads back what it holds
        seg = Segment(p, checkpoint.max_parallelism, restore_step=i, restored_from=checkpoint,
                      new_max=s.max_parallelism)
        seg.chunks[0] = [{"seq": i, "kind": "dump", "target": t} for t in range(p)]
        out.names[i] = sorted(checkpoint.modes)
    out.segments.append(seg)
    out.events.append(event(i, "restored", parallelism=p, max_parallelism=seg.max_parallelism))
    for t, (first, last) in enumerate(api.key_group_ranges(seg.max_parallelism, p)):  # KG-4
        out.events.append(event(i, "range", subtask=t, first=first, last=last))
    return seg


# --------------------------------------------------------------------------
# Running the rounds
# --------------------------------------------------------------------------

# (schedule, segment) -> (its query's checkpoint, the query's state partitions, its job id there)
Locations = dict[tuple[int, int], tuple[str, int, int]]


@dataclass
class Job:
    """One segment of one schedule: a job (`api.JobSpec`) of the query of its round."""

    id: int
    sid: int  # the schedule's index in the call
    number: int  # the segment's index in its schedule
    segment: Segment
    round: int  # 0 for a job from no checkpoint, else one more than the job whose checkpoint it reads


def jobs_of(plans: dict[int, Plan]) -> list[Job]:
    """Every segment of every schedule as a job, in the earliest round it can run in: a restore
    reads the state of an earlier job's committed micro-batch, so it runs one round after that job;
    a job started from no checkpoint (empty state, KG-9) runs in the first round."""
    out: list[Job] = []
    for sid, p in sorted(plans.items()):
        rounds: list[int] = []
        for number, seg in enumerate(p.segments):
            ref = seg.restored_from
            rounds.append(0 if ref is None else rounds[ref.segment] + 1)
            out.append(Job(len(out), sid, number, seg, rounds[-1]))
    return out


class Round:
    """The query of one round: every job that runs in it, each at its own parallelism."""

    def __init__(self, spark: Any, root: Path, number: int, plans: dict[int, Plan], jobs: list[Job],
                 locations: Locations, timings: dict[str, float] | None = None,
                 partitions: int = QUERY_PARTITIONS):
        self.spark, self.root, self.number = spark, root, number
        self.partitions = partitions  # the most state partitions of its query
        self.timings = timings if timings is not None else {}
        self.plans = plans
        self.locations = locations  # (sid, segment) -> (its query's checkpoint, state partitions, job id)
        self.jobs = {j.id: j for j in jobs if j.round == number}
        self.queries: list[tuple[Any, str]] = []

    def initial_state(self, partitions: int) -> Any:
        """The restored jobs' state, moved to their new parallelism (read by the round's query in its
        first micro-batch)."""
        rescales = []
        for job_id, job in sorted(self.jobs.items()):
            ref, seg = job.segment.restored_from, job.segment
            if ref is not None:
                location, old_partitions, old_job = self.locations[(job.sid, ref.segment)]
                rescales.append(Rescale(job_id, location, ref.batch, ref.parallelism, ref.max_parallelism,
                                        seg.parallelism, seg.new_max, partitions, old_partitions, old_job))
        return api.rescale_jobs(self.spark, rescales) if rescales else None

    def run(self) -> list[Any]:
        """The round's query (started, run to the end of its input, stopped): its output rows."""
        ids = sorted(self.jobs)
        batches = max((len(self.jobs[j].segment.batches()) for j in ids), default=0)
        if not batches:
            return []
        parallelism = max(self.jobs[j].segment.parallelism for j in ids)
        partitions = min(parallelism, self.partitions)
        with self._timed("state reads and redistribution"):
            initial = self.initial_state(partitions)
        if self.number:  # the last round's query stopped; a new one starts from the state it committed
            chaos.query_restarted(self.root, "key_groups.restore")
        with self._timed("query starts"):
            query, name = self._query(parallelism, partitions, ids, batches, initial)
        self.queries.append((query, name))
        try:
            with self._timed("micro-batches"):
                query.processAllAvailable()
        finally:
            with self._timed("query stops"):
                query.stop()
        self.timings["queries"] = self.timings.get("queries", 0) + 1
        self.timings["micro-batches run"] = self.timings.get("micro-batches run", 0) + batches
        for progress in query.recentProgress:  # Spark's own durations of the micro-batches
            for what, ms in progress.durationMs.items():
                if what != "triggerExecution":
                    self.timings[f"  {what}"] = self.timings.get(f"  {what}", 0.0) + ms / 1000
        with self._timed("outputs"):
            return self.output()

    @contextmanager
    def _timed(self, what: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[what] = self.timings.get(what, 0.0) + time.perf_counter() - start

    def _query(self, p: int, partitions: int, ids: list[int], batches: int, initial: Any) -> tuple[Any, str]:
        name = f"kg_{uuid.uuid4().hex[:12]}"
        base = self.root / name
        inp = base / "in"
        inp.mkdir(parents=True)
        for k in range(batches):  # micro-batch k: every job's steps up to its k-th checkpoint
            rows = [{"job": j, **r} for j in ids for r in _chunk(self.jobs[j].segment, k)]
            path = inp / f"{k:06d}.json"
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            os.utime(path, (1_000_000 + k, 1_000_000 + k))  # the file source takes them in this order
        location = str(base / "checkpoint")
        for j in ids:
            self.locations[(self.jobs[j].sid, self.jobs[j].number)] = (location, partitions, j)
        jobs = {j: self._spec(self.jobs[j]) for j in ids}
        df = self.spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(inp))
        out = api.keyed_process(df, key="key", key_type="type", target="target", order_by="seq",
                                processor=SumProcessor(), parallelism=p, jobs=jobs, job_column="job",
                                initial_state=initial, partitions=partitions, null_keys="process",
                                on_state_update=functools.partial(chaos.task_point, str(self.root)))
        writer = (out.writeStream.format("memory").queryName(name).outputMode("append")
                  .option("checkpointLocation", location))
        return api.start(writer, parallelism=p, spark=self.spark, partitions=partitions), name

    def _spec(self, job: Job) -> JobSpec:
        hash_profile = self.plans[job.sid].schedule.config.hash
        return JobSpec(job.segment.max_parallelism, hash_profile, job.segment.parallelism)

    def stop(self) -> None:
        for q, _ in self.queries:
            q.stop()

    def output(self) -> list[Any]:
        tables = [self.spark.table(name) for _, name in self.queries]
        if not tables:
            return []
        union = tables[0]
        for t in tables[1:]:
            union = union.unionByName(t)
        rows = union.collect()
        for _, name in self.queries:
            self.spark.catalog.dropTempView(name)
        return rows


def _chunk(seg: Segment, k: int) -> list[dict[str, Any]]:
    batches = seg.batches()
    return batches[k] if k < len(batches) else []


def _events(p: Plan, rows: list[Any]) -> list[Event]:
    """The trace of one schedule from the driver's events and the queries' output rows."""
    steps = p.schedule.steps
    out: list[Event] = []
    restores: dict[int, list[Event]] = defaultdict(list)
    for e in p.events:
        (restores[e.step] if e.event in ("restored", "range") else out).append(e)
    keyed: dict[int, list[Any]] = defaultdict(list)
    elements: dict[tuple[int, int, str], list[int]] = defaultdict(list)
    for r in rows:
        seq = r["seq"]
        if r["kind"] == "null_key":
            out.append(event(seq, "null_key"))
        elif r["kind"] == "routed":
            s = steps[seq]
            out.append(event(seq, "routed", key=s.key, type=s.type, hash=r["hash"], key_group=r["key_group"],
                             subtask=r["subtask"], value=r["value"]))
        elif r["kind"] == "keyed":
            key = api._typed(r["key"], r["type"])
            keyed[seq].append((r["subtask"], r["key_group"], key, r["type"], r["value"]))
        else:
            elements[(seq, r["subtask"], r["name"])].append(r["element"])
    for step, head in restores.items():
        parallelism = head[0].parallelism
        order = sorted(keyed[step], key=lambda e: (e[0], e[1], key_sort((e[3], e[2]))))
        for t, kg, key, type_, value in order:
            head.append(event(step, "keyed", subtask=t, key_group=kg, key=key, type=type_, value=value))
        for t in range(parallelism):  # KG-17..KG-21: every name of the checkpoint on every subtask
            for name in p.names.get(step, []):
                head.append(event(step, "operator", subtask=t, name=name,
                                  elements=sorted(elements.get((step, t, name), []))))
        out.extend(head)
    out.sort(key=lambda e: e.step)  # stable: a restore's events stay in order
    return out


def run_many(spark: Any, schedules: Sequence[Schedule], root: Path,
             timings: dict[str, float] | None = None, partitions: int = QUERY_PARTITIONS) -> list[Trace]:
    """The traces of a batch of key groups schedules, through `api.keyed_process` and
    `api.rescale_jobs`: one query per round of restores (see the module's doc), each with at most
    `partitions` state partitions.  `timings`, when given, adds up the seconds spent per phase and
    Spark's durations of the micro-batches (bench/key_groups.py)."""
    traces: dict[int, Trace] = {}
    plans: dict[int, Plan] = {}
    for i, s in enumerate(schedules):
        lacking = required_capabilities(s) & {c for c, why in STREAM_UNSUPPORTED.items() if why is not None}
        if lacking:
            raise ValueError(f"the streaming key groups cannot run this schedule: it needs "
                             f"{', '.join(sorted(lacking))}: {STREAM_UNSUPPORTED[min(lacking)]}")
        c: KeyGroupsConfig = s.config
        try:
            plans[i] = plan(s)
        except ValueError:  # KG-8: the configuration is refused
            if api.rescale_refusal(c.parallelism, c.max_parallelism, None) is None:
                raise
            traces[i] = Trace((rejected(f"KG-8: parallelism {c.parallelism} and max parallelism "
                                        f"{c.max_parallelism} out of bounds"),))
    rows: dict[int, list[Any]] = defaultdict(list)
    locations: Locations = {}
    jobs = jobs_of(plans)
    for number in range(max((j.round for j in jobs), default=-1) + 1):
        r = Round(spark, Path(root), number, plans, jobs, locations, timings, partitions)
        try:
            got = r.run()
        finally:
            r.stop()
        for row in got:
            rows[jobs[row["job"]].sid].append(row)
    for i, p in plans.items():
        traces[i] = Trace(tuple(_events(p, rows[i])))
    return [traces[i] for i in range(len(schedules))]


def run_schedule(spark: Any, schedule: Schedule, root: Path | None = None) -> list[Event]:
    """One schedule's events through Structured Streaming; its checkpoints removed afterwards."""
    import shutil

    from flink_semantics.adapters.pyspark.runtime import scratch_dir

    base = Path(root) if root is not None else scratch_dir("kg-stream-")
    try:
        trace = run_many(spark, [schedule], base)[0]
    finally:
        if root is None:
            shutil.rmtree(base, ignore_errors=True)
    return list(trace.events)
