"""Key groups on Flink itself: PyFlink's `key_by`, with the subtask of every update observed in the job.

A batch of schedules runs in rounds of real Flink jobs (class `Jobs`); a schedule without restores
runs in the first round's job, beside the first segment of every other.  Each pipeline of a job is a
FileSource of its updates `(schedule, step, key, value)` at parallelism 1, PyFlink's `key_by` on
the key (typed INT, BIGINT or STRING), and a Python `KeyedProcessFunction` at the schedule's
parallelism (and maximum parallelism, when the schedule sets one) that adds the value to the key's
sum in keyed `MapState` (one entry per schedule, so schedules sharing a pipeline keep their own
sums) and writes the subtask it runs in.  Routing depends on the key alone, so sharing a pipeline
changes nothing of what is observed; the source sends each schedule's updates in step order on one
channel, so a key's sums follow the steps.

Observed in the job: the subtask of each update and the key's sum there.  The hash and the key
group of the `routed` event are Flink's own functions called in Flink's JVM (`MathUtils.murmurHash`,
`KeyGroupRangeAssignment.computeKeyGroupForKeyHash` / `assignToKeyGroup`, with the default maximum
parallelism of `computeDefaultMaxParallelism`) on the JDK hash code of the key (profile `flink`)
or on the key PyFlink routes by, `Row.of(key)` (profile `pyflink`, KG-33).  A configuration is
rejected when Flink's own checks refuse it (`KeyGroupRangeAssignment.checkParallelismPreconditions`,
`computeKeyGroupRangeForOperatorIndex`), without a job.

Checkpoints and restores, at the same parallelism (KG-14) or another (KG-13, refusals KG-8, KG-15,
KG-16), run on savepoints: a round's job restores the savepoint that holds its schedules'
checkpoint, and the restored state is seen by probing every key in the restored job.  A `keyed`
event names the key group Flink keeps the key's state under, that of `Row.of(key)` (KG-33),
whatever the profile: in the `flink` profile a
restored key then differs from the spec in its key group, which the checker traces back to routing
(KG-6), not to the restore.  A `restored` event's parallelism and maximum parallelism are what the
restored job's subtasks report; its `range` events are Flink's `computeKeyGroupRangeForOperatorIndex`
at those.  Operator state is not run, nor string keys with an unpaired surrogate, which PyFlink's
Python coder refuses (CAPABILITIES says why); a surrogate pair reaches Flink as its character.

Measured on the 2-core machine (thread mode): a PyFlink job costs about 2 s to start plus about
0.4 s per Python subtask (a pipeline at parallelism p starts p + 1); a savepoint about 0.1 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flink_semantics.spec.area import get_area
from flink_semantics.spec.areas.key_groups import (
    REFUSED_ABOVE_MAX,
    REFUSED_MAX_CHANGED,
    REFUSED_PARALLELISM,
    CheckpointStep,
    RestoreStep,
    UpdateStep,
    has_lone_surrogate,
)
from flink_semantics.spec.schedule import Schedule, Trace, rejected

CAPABILITIES: dict[str, str | None] = {
    "key_groups": None,
    "key_groups.pyflink_hash": None,
    "key_groups.many_subtasks": "a local mini-cluster on two cores runs a few dozen subtasks, each with a "
                                "Python interpreter, not thousands (KG-9 and KG-10's examples)",
    "key_groups.spark_hash": "Flink has no Spark hash: the spark profile describes Spark's hash() "
                             "(KG-22..KG-30)",
    "key_groups.restore": None,
    "key_groups.rescale": None,
    "key_groups.operator_state": "PyFlink 2.3.0 gives Python functions no operator list state: its "
                                 "OperatorStateStore has get_broadcast_state only (pyflink/datastream/"
                                 "state.py), so split and union lists cannot be kept",
    "key_groups.lone_surrogates": "PyFlink 2.3.0 cannot key by a string holding an unpaired surrogate: "
                                  "key_by's STRING key coder encodes it as strict UTF-8 in Python "
                                  "(CharCoderImpl.encode_to_stream: value.encode('utf-8') raises "
                                  "UnicodeEncodeError, surrogates not allowed), so the job fails before "
                                  "Java sees the key (and py4j, which encodes its commands as UTF-8, "
                                  "cannot send it to Flink's functions either); Java's own String keys "
                                  "with unpaired surrogates are hashed by their UTF-16 units (KG-11, KG-34)",
}

_ROW_REASON = ("PyFlink's key_by keys by Row.of(key) (flink-python 2.3.0 KeyByKeySelector), not by the "
               "key: the hash code Flink routes by is 62 + the key's JDK hash code, so an update reaches "
               "the subtask of another key group than KG-1's (e.g. key 7 with max parallelism 128 goes "
               "to key group 17, not 113); the spec states PyFlink's routing as the pyflink profile "
               "(KG-33), which Flink passes")
EXPECTED_FAILURES: dict[str, str] = {
    "KG-6": _ROW_REASON,
    "KG-7": "PyFlink's key_by routes a null key instead of refusing it: the key Flink checks is "
            "Row.of(null), which is not null (its hash code is 31), so KeyGroupRangeAssignment's "
            "checkNotNull passes (KG-33)",
}

def _type_info(type_: str) -> Any:
    from pyflink.common import Types

    return {"int": Types.INT(), "long": Types.LONG(), "string": Types.STRING()}[type_]


class FlinkFunctions:
    """Flink's own key-group functions, called in Flink's JVM (cached per key)."""

    def __init__(self) -> None:
        from flink_semantics.adapters.pyflink.session import jvm

        self.jvm = jvm()
        self.kga = self.jvm.org.apache.flink.runtime.state.KeyGroupRangeAssignment
        self.murmur = self.jvm.org.apache.flink.util.MathUtils.murmurHash
        self._cache: dict[tuple[Any, ...], tuple[int, int]] = {}

    def refusal(self, parallelism: int, max_parallelism: int | None) -> str | None:
        """Flink's reason to refuse the configuration, or None."""
        from py4j.protocol import Py4JJavaError

        try:
            self.kga.checkParallelismPreconditions(parallelism)
            if max_parallelism is not None:
                self.kga.checkParallelismPreconditions(max_parallelism)
            self.kga.computeKeyGroupRangeForOperatorIndex(self.max_parallelism(parallelism, max_parallelism),
                                                          parallelism, 0)
        except Py4JJavaError as e:
            return str(e.java_exception.getMessage())
        return None

    def max_parallelism(self, parallelism: int, explicit: int | None) -> int:
        return explicit if explicit is not None else int(self.kga.computeDefaultMaxParallelism(parallelism))

    def _array(self, key: int | str | None, type_: str) -> Any:
        """A Java `Object[]` holding the key as the job's JVM does (Integer, Long, String or null).

        py4j turns a Python int into an Integer when it fits, so a long goes through a `long[]`
        boxed in Java (`Arrays.stream(long[]).boxed().toArray()`)."""
        from pyflink.java_gateway import get_gateway

        gateway = get_gateway()
        if type_ == "long" and key is not None:
            longs = gateway.new_array(self.jvm.long, 1)
            longs[0] = key
            return self.jvm.java.util.Arrays.stream(longs).boxed().toArray()
        array = gateway.new_array(self.jvm.java.lang.Object, 1)
        if key is not None:
            array[0] = key
        return array

    def route(self, key: int | str | None, type_: str, profile: str, max_parallelism: int) -> tuple[int, int]:
        """(hash, key group) of the key under the profile, computed by Flink's functions."""
        item = (key, type_, profile, max_parallelism)
        if item not in self._cache:
            array = self._array(key, type_)
            if profile == "pyflink" or key is None:  # KG-33: the key Flink routes by is Row.of(key)
                code = int(self.jvm.org.apache.flink.types.Row.of(array).hashCode())
            else:  # KG-11: the key's JDK hash code (Arrays.hashCode([k]) is 31 + hashCode(k))
                code = _int32(int(self.jvm.java.util.Arrays.hashCode(array)) - 31)
            self._cache[item] = (int(self.murmur(code)),
                                 int(self.kga.computeKeyGroupForKeyHash(code, max_parallelism)))
        return self._cache[item]


def _int32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


# --------------------------------------------------------------------------
# Checkpoints and restores (KG-14): savepoints of running jobs, restored by new jobs
# --------------------------------------------------------------------------

_UPDATE, _PROBE, _META = 0, 1, 2  # the kinds of a line of a job's input
_META_KEY = {"int": 0, "long": 0, "string": ""}  # the key of the probe that asks the parallelism


def _keyed_function(out: str) -> Any:
    """The keyed operator: over JSON lines [sid, step, kind, key, value], it adds an update's value
    to the key's sum for its schedule (keyed MapState), and answers probes (`value` is the probe's
    index) with the key's sum there (None: no state) and the subtask's parallelism and maximum
    parallelism.  Each output is a JSON line [sid, step, tag, subtask, sum, parallelism, max
    parallelism] (tag -2 an update, -1 the parallelism probe, else a key probe's index) appended to
    a file of its own subtask in the directory `out`: not Flink's collect sink, whose buffered
    results a restored job would restore with the savepoint's state and send again."""
    import json
    import os

    from flink_semantics.adapters.pyflink.session import task_info
    from pyflink.common import Types
    from pyflink.datastream import KeyedProcessFunction
    from pyflink.datastream.state import MapStateDescriptor

    class Sum(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            self.sums = ctx.get_map_state(MapStateDescriptor("sums", Types.LONG(), Types.LONG()))
            self.subtask, self.parallelism, self.max_parallelism = task_info(ctx)
            name = str(ctx._runtime_context.getTaskInfo().getTaskNameWithSubtasks()).replace("/", "-")
            self.out = open(os.path.join(out, name), "a", encoding="utf-8")  # noqa: SIM115

        def process_element(self, line: str, ctx: Any) -> Any:
            sid, step, kind, _key, value = json.loads(line)
            total = self.sums.get(sid) if self.sums.contains(sid) else None
            if kind == _UPDATE:
                total = (total or 0) + value
                self.sums.put(sid, total)
            tag = -2 if kind == _UPDATE else value
            row = [sid, step, tag, self.subtask, total, self.parallelism, self.max_parallelism]
            self.out.write(json.dumps(row) + "\n")
            self.out.flush()
            return iter(())

        def close(self) -> None:
            self.out.close()

    return Sum()


def _outputs(out: str) -> dict[tuple[int, int, int], tuple[Any, ...]]:
    """Every output line written so far under `out`, by (sid, step, tag); a line still being
    written is left for the next look."""
    import json
    import os

    rows = {}
    for name in os.listdir(out):
        with open(os.path.join(out, name), encoding="utf-8") as f:
            for line in f:
                if line.endswith("\n"):
                    row = tuple(json.loads(line))
                    rows[(row[0], row[1], row[2])] = row
    return rows


def _segments(s: Schedule) -> list[tuple[int | None, list[tuple[int, Any]]]]:
    """The schedule cut at its restores: (the restore's step or None, the steps up to the next)."""
    out: list[tuple[int | None, list[tuple[int, Any]]]] = [(None, [])]
    for i, u in enumerate(s.steps):
        if isinstance(u, RestoreStep):
            out.append((i, []))
        else:
            out[-1][1].append((i, u))
    return out


def _key_order(type_: str, key: Any) -> tuple[str, bool, int, str]:
    """The spec's order of a restore's keys: by type, then value, a null key first."""
    return type_, key is not None, key if isinstance(key, int) else 0, key if isinstance(key, str) else ""


def _savepoint(client: Any, directory: str, patience: float = 300.0) -> str:
    """A savepoint of the running job (PyFlink 2.3.0's `trigger_savepoint` calls a Java method that
    no longer exists, so Flink's is called with the canonical format), its path.  A job whose
    subtasks are still starting refuses one ("Not all required tasks are currently running"):
    asked again until they run."""
    import time

    from flink_semantics.adapters.pyflink.session import jvm
    from py4j.protocol import Py4JJavaError

    fmt = jvm().org.apache.flink.core.execution.SavepointFormatType.CANONICAL
    deadline = time.monotonic() + patience
    while True:
        try:
            return str(client._j_job_client.triggerSavepoint(directory, fmt).get())
        except Py4JJavaError as e:
            if "Not all required tasks are currently running" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _write(directory: str, name: str, lines: dict[tuple[str, str], list[str]]) -> None:
    """Add a file of lines to each pipeline's monitored directory (hidden until complete)."""
    import os

    for (lineage, type_), chunk in lines.items():
        path = os.path.join(directory, f"{lineage}-{type_}")
        with open(os.path.join(path, f".{name}"), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in chunk))
        os.rename(os.path.join(path, f".{name}"), os.path.join(path, name))


def _count(lines: dict[tuple[str, str], list[str]]) -> int:
    return sum(len(chunk) for chunk in lines.values())


class _Refused(Exception):
    """Flink refused to restore a job's savepoint at its parallelism: the spec's reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Job:
    """A job of a round: the savepoint it restores (None: none), its lineages' parallelism and the
    maximum parallelism it configures (None: none), and its schedules."""

    parent: str | None
    ops: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    members: list[int] = field(default_factory=list)
    probed: set[int] = field(default_factory=set)  # members whose segment starts with a restore
    risky: bool = False  # holds a restore Flink may refuse (KG-15, KG-16)


# Flink's messages when it refuses to restore a savepoint (Checkpoints.loadAndValidateCheckpoint,
# StateAssignmentOperation.checkParallelismPreconditions) -> the spec's reasons
_REFUSALS = (("lower than the configured parallelism", REFUSED_ABOVE_MAX),  # KG-15
             ("Max parallelism mismatch between checkpoint/savepoint state and new program",
              REFUSED_MAX_CHANGED),  # KG-16
             ("This is currently not supported", REFUSED_MAX_CHANGED))  # KG-16


class Jobs:
    """The schedules of a batch, run in rounds of real Flink jobs.

    Each schedule is cut at its restores into segments; round k runs segment k of every schedule
    that has one.  A schedule's state lives in a *lineage*: keyed operators (one per key type, each
    a pipeline of its own FileSource, PyFlink's `key_by` and the keyed function, with a stable uid).
    A restore from a checkpoint keeps the lineage: the next job restores the savepoint that holds
    the checkpoint (`execution.state-recovery.path`, other state ignored) with the lineage at the
    restore's parallelism and maximum parallelism (none configured: Flink adopts the savepoint's),
    so Flink itself deals the key groups' state out to the new subtasks.  A restore without a
    checkpoint starts a new lineage, a job from nothing.  A job restores one savepoint and holds a
    lineage once, so a round has a job per savepoint and parallelism a lineage is restored at, and
    a restore Flink may refuse (another parallelism, or a configured maximum) has a job of its own.

    A job reads first the probes of each restored schedule (every key it updated before the
    restore, and one that asks the parallelism and maximum parallelism), then the updates up to the
    segment's last checkpoint; then, when a restore follows, a savepoint (the checkpoint); then the
    updates after the checkpoint, which the restore loses; then a second savepoint (the running job,
    for a restore that is refused), and the job is cancelled.  A restore out of bounds is refused
    by Flink's own `KeyGroupRangeAssignment` checks (KG-8), one that Flink's job refuses to start is
    refused with Flink's reason (KG-15, KG-16); either way the running job goes on: the next job
    restores the second savepoint at the running parallelism.  Inputs are files added to each
    pipeline's monitored directory; the keyed function writes one output a line to files of its own
    (Flink's collect sink is not used: restored from a savepoint, it sends the savepoint's buffered
    results again and loses the new job's).
    """

    def __init__(self, schedules: dict[int, Schedule], flink: FlinkFunctions) -> None:
        self.schedules = schedules
        self.flink = flink
        self.segments = {sid: _segments(s) for sid, s in schedules.items()}
        self.lineage: dict[tuple[int, int], str] = {}  # (sid, segment) -> lineage
        self.types: dict[str, set[str]] = {}  # lineage -> its key types
        for sid, s in schedules.items():
            p, m = s.config.parallelism, s.config.max_parallelism
            name = f"r0-p{p}-m{m}"
            checkpointed = False
            for k, (restore, steps) in enumerate(self.segments[sid]):
                r = s.steps[restore] if restore is not None else None
                if r is not None and not checkpointed and self._bounds(r) is None:
                    name = f"r{k}-p{r.parallelism}-m{r.max_parallelism}"  # a new job from nothing
                self.lineage[(sid, k)] = name
                types = self.types.setdefault(name, set())
                types.update(u.type for _, u in steps if isinstance(u, UpdateStep))
                types.update(type_ for type_, _ in self._probes(sid, restore))
                checkpointed = checkpointed or any(isinstance(u, CheckpointStep) for _, u in steps)
        for types in self.types.values():
            if not types:
                types.add("int")  # a lineage without updates still answers the parallelism probe
        self.observed: dict[tuple[int, int, int], tuple[Any, ...]] = {}  # (sid, step, tag) -> output
        self.refused: dict[tuple[int, int], str] = {}  # (sid, restore step) -> reason
        self.checkpoints: dict[int, str | None] = {}  # sid -> the savepoint of its latest checkpoint
        self.at_checkpoint: dict[int, int] = {}  # sid -> its lineage's parallelism then
        self.fallback: dict[tuple[int, int], tuple[str | None, int]] = {}  # a refused restore's job
        self.jobs = 0

    def _bounds(self, r: RestoreStep) -> str | None:
        """KG-8: Flink's own checks of the restore's parallelism and maximum, without a job."""
        return None if self.flink.refusal(r.parallelism, r.max_parallelism) is None else REFUSED_PARALLELISM

    def run(self, root: str) -> None:
        first = _Job(None)
        for sid, s in self.schedules.items():
            first.ops[self.lineage[(sid, 0)]] = (s.config.parallelism, s.config.max_parallelism)
            first.members.append(sid)
        jobs = [first]
        for k in range(max(len(segs) for segs in self.segments.values())):
            ran = self._run_round(k, jobs, root)
            jobs = self._plan(k + 1, ran)

    def _plan(self, k: int, ran: list[tuple[_Job, str | None]]) -> list[_Job]:
        """Round k's jobs from the jobs of round k-1 and the savepoints of those still running."""
        jobs: list[_Job] = []

        def place(parent: str | None, sid: int, p: int, m: int | None, probed: bool, risky: bool) -> None:
            name = self.lineage[(sid, k)]
            for job in jobs:  # a restore Flink may refuse shares its job only with the same restore
                if job.parent != parent or job.risky != risky:
                    continue
                if (job.ops == {name: (p, m)}) if risky else job.ops.get(name, (p, m)) == (p, m):
                    break
            else:
                job = _Job(parent, risky=risky)
                jobs.append(job)
            job.ops[name] = (p, m)
            job.members.append(sid)
            if probed:
                job.probed.add(sid)

        for job, running in ran:
            for sid in job.members:
                if k >= len(self.segments[sid]):
                    continue
                restore = self.segments[sid][k][0]
                r = self.schedules[sid].steps[restore]
                name, before = self.lineage[(sid, k)], self.lineage[(sid, k - 1)]
                p_running = job.ops[before][0]
                if self._bounds(r) is not None:
                    self.refused[(sid, restore)] = REFUSED_PARALLELISM
                    place(running, sid, p_running, None, False, False)
                elif name != before:  # no checkpoint: a new job from nothing
                    place(None, sid, r.parallelism, r.max_parallelism, True, False)
                else:
                    parent = self.checkpoints[sid]
                    same = (r.parallelism, r.max_parallelism) == (self.at_checkpoint[sid], None)
                    place(parent, sid, r.parallelism, r.max_parallelism, True, not same)
                    self.fallback[(sid, restore)] = (running, p_running)
        return jobs

    def _run_round(self, k: int, jobs: list[_Job], root: str) -> list[tuple[_Job, str | None]]:
        ran = []
        queue = list(jobs)
        while queue:
            job = queue.pop(0)
            try:
                checkpoint, running = self._run_job(k, job, root)
            except _Refused as e:  # a risky job holds one restore of one lineage
                retries: dict[tuple[str | None, int], _Job] = {}
                for sid in job.members:  # the running jobs go on: their savepoints at their parallelism
                    restore = self.segments[sid][k][0]
                    self.refused[(sid, restore)] = e.reason
                    running_sp, p_running = self.fallback[(sid, restore)]
                    retry = retries.setdefault((running_sp, p_running), _Job(running_sp))
                    retry.ops[self.lineage[(sid, k)]] = (p_running, None)
                    retry.members.append(sid)
                queue += retries.values()
                continue
            for sid in job.members:
                name = self.lineage[(sid, k)]
                steps = self.segments[sid][k][1]
                if any(isinstance(u, CheckpointStep) for _, u in steps):
                    self.checkpoints[sid] = checkpoint
                    self.at_checkpoint[sid] = job.ops[name][0]
            ran.append((job, running))
        return ran

    def _run_job(self, k: int, job: _Job, root: str) -> tuple[str | None, str | None]:
        """Run segment k of the job's schedules; the savepoints of the checkpoint and of the running
        job (None when no restore follows)."""
        import json
        import os
        import uuid

        from flink_semantics.adapters.pyflink.session import jvm, stream_environment
        from py4j.protocol import Py4JJavaError
        from pyflink.common import Duration, WatermarkStrategy
        from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

        self.jobs += 1
        here = os.path.join(root, f"job{self.jobs}")
        job_id = uuid.uuid4().hex  # the uids of the sources, which no savepoint may restore
        before: dict[tuple[str, str], list[str]] = {}  # probes, then updates up to the last checkpoint
        after: dict[tuple[str, str], list[str]] = {}  # the updates after it
        for sid in job.members:
            restore, steps = self.segments[sid][k]
            name = self.lineage[(sid, k)]
            types = self.types[name]

            def add(into: dict[tuple[str, str], list[str]], type_: str, *line: Any) -> None:
                into.setdefault((name, type_), []).append(json.dumps([sid, *line]))  # noqa: B023

            if sid in job.probed:
                for j, (type_, key) in enumerate(self._probes(sid, restore)):
                    add(before, type_, restore, _PROBE, key, j)
                add(before, min(types), restore, _META, _META_KEY[min(types)], -1)
            last = max((i for i, (_, u) in enumerate(steps) if isinstance(u, CheckpointStep)), default=-1)
            for i, (step, u) in enumerate(steps):
                if isinstance(u, UpdateStep):
                    add(before if i < last else after, u.type, step, _UPDATE, u.key, u.value)
        follows = [sid for sid in job.members if k + 1 < len(self.segments[sid])]
        checkpointed = [sid for sid in follows
                        if any(isinstance(u, CheckpointStep) for _, u in self.segments[sid][k][1])]
        extra = {}
        if job.parent is not None:
            extra = {"execution.state-recovery.path": job.parent,
                     "execution.state-recovery.ignore-unclaimed-state": "true"}
        env = stream_environment(**extra)
        env.set_parallelism(1)
        out = os.path.join(here, "out")
        os.makedirs(out)
        streams = []
        for name, (p, m) in sorted(job.ops.items()):
            for type_ in sorted(self.types[name]):
                uid = f"{name}-{type_}"
                directory = os.path.join(here, uid)
                os.makedirs(directory)
                source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), directory) \
                    .monitor_continuously(Duration.of_millis(20)).build()
                lines = env.from_source(source, WatermarkStrategy.no_watermarks(), f"in-{uid}") \
                    .uid(f"in-{uid}-{job_id}")
                keyed = lines.key_by(lambda line: json.loads(line)[3], key_type=_type_info(type_))
                stream = keyed.process(_keyed_function(out)).uid(uid).name(uid).set_parallelism(p)
                if m is not None:
                    stream = stream.set_max_parallelism(m)
                streams.append(stream)
        union = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
        union._j_data_stream.sinkTo(jvm().org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink())
        _write(here, "a", before)
        try:
            client = env.execute_async(f"conformance key_groups job {self.jobs}")
        except Py4JJavaError as e:
            reason = next((r for text, r in _REFUSALS if text in str(e)), None)
            if reason is None or not job.risky:
                raise
            raise _Refused(reason) from None
        try:
            self._take(client, out, _count(before))
            checkpoint = _savepoint(client, os.path.join(root, "savepoints")) if checkpointed else None
            _write(here, "b", after)
            self._take(client, out, _count(before) + _count(after))
            running = _savepoint(client, os.path.join(root, "savepoints")) if follows else None
        finally:
            client._j_job_client.cancel().get()
        return checkpoint, running

    def _take(self, client: Any, out: str, want: int, patience: float = 600.0) -> None:
        """Wait until the job has written `want` outputs, one a line read (or failed, or `patience` s)."""
        import time

        deadline = time.monotonic() + patience
        while True:
            rows = _outputs(out)
            if len(rows) >= want:
                self.observed.update(rows)
                return
            status = str(client._j_job_client.getJobStatus().get())
            if status in ("FAILED", "CANCELED", "FINISHED") or time.monotonic() > deadline:
                raise RuntimeError(f"pyflink key_groups: job {status} with {len(rows)} of {want} outputs "
                                   f"after {patience:.0f} s at most")
            time.sleep(0.02)

    def _probes(self, sid: int, restore: int | None) -> list[tuple[str, Any]]:
        """Every key the schedule updated before the restore, once, in step order."""
        keys: list[tuple[str, Any]] = []
        for u in self.schedules[sid].steps[:restore or 0]:
            if isinstance(u, UpdateStep) and (u.type, u.key) not in keys:
                keys.append((u.type, u.key))
        return keys

    def trace(self, sid: int) -> Trace:
        """The schedule's events: updates and probes as observed; hashes, key groups and ranges by
        Flink's functions at the maximum parallelism the job reported."""
        s = self.schedules[sid]
        kinds = get_area("key_groups").event_kinds
        events = []
        for step, u in enumerate(s.steps):
            if isinstance(u, UpdateStep):
                row = self.observed[(sid, step, -2)]
                h, kg = self.flink.route(u.key, u.type, s.config.hash, row[6])
                events.append(kinds["routed"](step, key=u.key, type=u.type, hash=h, key_group=kg,
                                              subtask=row[3], value=row[4]))
            elif isinstance(u, RestoreStep) and (sid, step) in self.refused:
                events.append(kinds["restore_refused"](step, reason=self.refused[(sid, step)]))
            elif isinstance(u, RestoreStep):
                meta = self.observed[(sid, step, -1)]
                p, max_p = meta[5], meta[6]
                events.append(kinds["restored"](step, parallelism=p, max_parallelism=max_p))
                for i in range(p):
                    r = self.flink.kga.computeKeyGroupRangeForOperatorIndex(max_p, p, i)
                    events.append(kinds["range"](step, subtask=i, first=int(r.getStartKeyGroup()),
                                                 last=int(r.getEndKeyGroup())))
                keyed = []
                for j, (type_, key) in enumerate(self._probes(sid, step)):
                    row = self.observed[(sid, step, j)]
                    if row[4] is not None:  # kept under the key group of the key Flink routes by, Row.of(key)
                        kg = self.flink.route(key, type_, "pyflink", max_p)[1]
                        keyed.append((row[3], kg, _key_order(type_, key), kinds["keyed"](
                            step, subtask=row[3], key_group=kg, key=key, type=type_, value=row[4])))
                events += [e for *_, e in sorted(keyed, key=lambda item: item[:3])]
        return Trace(tuple(events))


def _unsupported(s: Schedule) -> str | None:
    """What of the schedule this adapter cannot run (the suite draws none of it: CAPABILITIES)."""
    for step, u in enumerate(s.steps):
        if not isinstance(u, (UpdateStep, CheckpointStep, RestoreStep)):
            return f"step {step} ({u.op}) needs key_groups.operator_state"
        if isinstance(u, UpdateStep) and u.type == "string" and has_lone_surrogate(u.key):
            return f"step {step} (update) needs key_groups.lone_surrogates"
    return None


def run_batch(schedules: Sequence[Schedule]) -> list[Trace]:
    import shutil
    import tempfile

    flink = FlinkFunctions()
    refusals = [flink.refusal(s.config.parallelism, s.config.max_parallelism) for s in schedules]
    running: dict[int, Schedule] = {}
    for sid, (s, refusal) in enumerate(zip(schedules, refusals)):
        if refusal is None:
            why = _unsupported(s)
            if why is not None:
                raise ValueError(f"pyflink adapter: schedule {sid}: {why}: {s.to_json()}")
            running[sid] = s
    jobs = Jobs(running, flink)
    if running:
        root = tempfile.mkdtemp(prefix="conformance-key-groups-")
        try:
            jobs.run(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return [Trace((rejected(refusal),)) if refusal is not None else jobs.trace(sid)
            for sid, refusal in enumerate(refusals)]
