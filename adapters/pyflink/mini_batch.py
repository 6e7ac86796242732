"""The mini-batch aggregation area (spec/mini-batch.md) on Apache Flink 2.3.0 itself, through PyFlink.

Every schedule runs as a real Flink SQL group aggregation,

    SELECT k, COUNT(*), SUM(v), MIN(v), MAX(v) FROM input GROUP BY k

over a bounded changelog (`from_collection` of rows with their RowKind, `from_changelog_stream`),
with the schedule's configuration as Flink's own options: `table.exec.mini-batch.enabled`,
`.size`, `.allow-latency`, `table.optimizer.agg-phase-strategy` (ONE_PHASE, or TWO_PHASE when
asked for: Flink's default AUTO splits the aggregation into local and global phases whenever
mini-batch is on, which the spec's `two_phase=false` does not), `table.exec.state.ttl` (1 day)
for `ttl`, and for `update_before=false` a sink that asks for an upsert changelog
(`to_changelog_stream(..., ChangelogMode.upsert())`), so that the planner itself drops -U.  The
changelog the aggregation emits is read back with `execute_and_collect()`.

**How outputs are tied to steps.**  A bounded job shows the changelog in order, not which input
caused each row.  So before every `row` step, and at `end`, the input carries a *probe* row:
`+I` of a key the schedule does not use (the first of PROBE_KEYS it does not: any long is a key) with
the step index as its value.  The probe key is an
ordinary key of the same aggregation; its result changes with every probe (its count grows), so
every bundle that holds a probe emits one probe row, and MAX(v) of it is the last step whose probe
the bundle held.  PROBE_KEYS are chosen so that their BinaryRowData hashes spread to bucket 0 of Java's
HashMap (checked against Flink's own BinaryRowData at start-up), and its probe is the first input
of every bundle: Flink emits the probe first in every bundle it finishes (observed, and checked per
trace: output before any probe is an AdapterError).  So the observed changelog splits into
bundles, each named by the step that finished it.  With mini-batch on, Flink's size is `2 * size`
(a probe and a row per step: the bundles hold the same schedule rows as without probes); with it
off, each row is its own group.  A schedule without `end` gets a tail probe (TAIL); what the job
emits at that probe (the bounded input's end, which is not part of the schedule) is left out.

**Two phases (MB-25, MB-26) are tied to steps by prefixes.**  A probe row in a two-phase job is a
local accumulator of its own in every local bundle, which the global bundle counts (MB-10): probes
would change which accumulators the global bundles hold.  So a two-phase schedule runs once per
`row` step i, each run its own operator: the rows up to step i, then one probe row and the end of
the bounded input.  Everything the run emits before its probe row is what the steps up to i emit:
after step i the local bundle sends the probe's accumulator first (bucket 0), so every global
bundle finished after step i holds the probe and emits it first.  Step i's output is its run's
beyond the run of the row step before (checked to extend it: Flink's output must not depend on
what comes later); `end` is a run of all rows without a probe.  The order in which the local
aggregation sends a bundle's keys decides which keys a global bundle that fills up in the middle
holds (spec C1): the spec says first arrival, Flink 2.3.0's HashMap iterates by hash bucket.  The
schedule's keys run as STAND_INS, keys whose hashes share one HashMap bucket (checked against
Flink's BinaryRowData), where HashMap iterates in insertion order, which is first arrival: C1 is
the order of an unspecified map, and the adapter picks keys where Flink's is the spec's
(tests/test_pyflink_adapter.py shows the difference with the schedule's own keys).  A bucket keeps
that order up to 8 keys; a two-phase schedule of more is an AdapterError.

**What cannot be driven or observed from Flink SQL**, and what the adapter does with it:

* processing time (`advance`): Flink's processing-time mini-batch assigner runs on the wall clock.
  The job runs with allow-latency 10^8 days, so that the assigner's first batch (`now - now mod
  I`) is 0 and it never emits a watermark during the job: bundles end by size and at end of input
  only, deterministically.  `advance` steps move nothing;
* upstream watermarks (`watermark` steps): PyFlink has no generator that emits a watermark of a
  chosen value at a chosen element, and none of MAX before the end; the steps feed nothing;
* watermarks and statuses the aggregation forwards (`watermark`, `status` events): a SQL sink
  does not see them.  The traces hold `out` events only;
* the row-time assigner (the planner picks it, C4), checkpoints, crashes and restores (barriers
  come at wall-clock intervals, a failure cannot be placed at a step) and statuses: the
  capabilities below say so.

Hence the capabilities `mini_batch.processing_time` and `mini_batch.watermarks` are declared
unsupported: the suite checks Flink on rows alone (test_per_row_changelog, test_size_bundles,
test_local_global, the refusals of test_configuration_validation), without `advance`, `watermark`
or `end` steps.

**MB-2** is Flink's own: the planner is asked for the job graph of the configuration
(`explain_sql` with the JSON execution plan), and a refusal is the `rejected` event with Flink's
message.

**Batching.**  The schedules of a batch run in as few jobs as JOB_OPERATORS allows: one source
(all rows, with a run id), and per run its own filtered aggregation operator (`WHERE sid = i GROUP
BY k`: a bundle counts the inputs of its own operator only, so runs never share bundles), each
translated with its own configuration's options (the planner reads them when it translates an
operator), the changelog streams unioned into one collect.

Measured on this 2-core machine (`run_batch` of drawn schedules, JVM and first job already done):
one phase, 16 schedules of 13 configurations 4.6 s, 64 schedules (175 steps, 32 configurations)
8.3 s, one job; two phases, 16 schedules (44 row steps) 11.3 s, 64 schedules (175 row steps, 2
jobs) 37 s: about 0.2 s a run, a run per row step.  A refused configuration costs one planner call
(no job).  The whole area's suite (`--areas mini_batch`): 85 s, test_local_global 18 s of it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from flink_semantics.spec.adapter import AdapterError
from flink_semantics.spec.areas.mini_batch import EndStep, MiniBatchConfig, RowStep, event, validate_config
from flink_semantics.spec.schedule import Event, Schedule, ScheduleError, Trace, rejected

AREA = "mini_batch"

CAPABILITIES: dict[str, str | None] = {
    "mini_batch": None,
    "mini_batch.config_validation": None,  # the planner's own refusals (MB-2)
    "mini_batch.processing_time": "Flink's processing-time mini-batch assigner runs on the wall clock, which "
                                  "a schedule's `advance` cannot move: the job runs with an allow-latency so "
                                  "long that no timer fires: bundles end by size and at end of input only",
    "mini_batch.watermarks": "PyFlink has no watermark generator that emits a chosen value at a chosen "
                             "element (nor MAX before the end), and a SQL sink does not see the watermarks "
                             "the aggregation forwards (the `watermark MAX` of end of input)",
    "mini_batch.rowtime": "Flink's planner picks the mini-batch assigner itself (spec C4): a plain GROUP BY "
                          "always gets the processing-time assigner; the row-time one comes only with a "
                          "row-time window or join after it, which changes the query",
    "mini_batch.two_phase": None,  # a run per row step (module docstring)
    "mini_batch.checkpoint": "a SQL job cannot place a checkpoint barrier, a crash or a restore at a step: "
                             "barriers come at wall-clock intervals (execution.checkpointing.interval), a "
                             "failure is not scriptable, and a restore needs a savepoint of a stopped job",
    "mini_batch.status": "PyFlink cannot emit a watermark status (IDLE / ACTIVE) at a chosen element, and a "
                         "SQL sink does not see the statuses the aggregation forwards",
}

# Rule -> how Flink differs, observed running it (none so far: see the module docstring for what the
# adapter cannot drive or observe, which is not a difference of Flink's).
EXPECTED_FAILURES: dict[str, str] = {}

# Two phases: keys whose BinaryRowData hashes share their low 8 bits, not the probe's bucket (checked in
# _stand_ins): a HashMap bucket keeps its keys in insertion order while it is a list, surely up to 8.
STAND_INS = (-252, -261, -273, -276, -314, -646, -691, -735)
# Keys whose BinaryRowData(k).hashCode() spreads to HashMap bucket 0 (checked in _probe_key); a
# schedule's probe is the first it does not use as a key.
PROBE_KEYS = (-80, -151, -157, -437)
TAIL = 10**9  # the probe after the last step of a schedule without `end`
JOB_OPERATORS = 128  # aggregation operators in one Flink job
LATENCY = "100000000 d"  # the processing-time assigner's batch stays 0: no wall-clock watermark
_KINDS = ("+I", "-U", "+U", "-D")

_lock = threading.Lock()
_spreads: dict[int, int] = {}


def _spread(key: int) -> int:
    """Java HashMap's spread hash of the BIGINT key `key`, from Flink's own BinaryRowData: the bucket
    of a HashMap of capacity n is its low log2(n) bits."""
    from flink_semantics.adapters.pyflink.session import jvm

    with _lock:
        if key not in _spreads:
            j = jvm()
            row = j.org.apache.flink.table.data.binary.BinaryRowData(1)
            writer = j.org.apache.flink.table.data.writer.BinaryRowWriter(row)
            writer.writeLong(0, key)
            writer.complete()
            h = row.hashCode() & 0xFFFFFFFF
            _spreads[key] = h ^ (h >> 16)
        return _spreads[key]


def _probe_key(schedule: Schedule) -> int:
    """The schedule's probe key: the first of PROBE_KEYS that is not one of its keys, after checking
    with Flink's BinaryRowData that HashMap (capacity up to 256) puts it in bucket 0: the first key a
    bundle emits, as it is the first the bundle holds."""
    used = {s.key for s in schedule.steps if isinstance(s, RowStep)}
    probe = next((k for k in PROBE_KEYS if k not in used), None)
    if probe is None:
        raise AdapterError(f"pyflink mini_batch: the schedule uses every probe key {PROBE_KEYS} as a key")
    if _spread(probe) & 0xFF:
        raise RuntimeError(f"probe key {probe} is not in HashMap bucket 0 in this Flink")
    return probe


def _stand_ins(schedule: Schedule) -> dict[int, int]:
    """Two phases: the Flink key of each key of the schedule, one of STAND_INS (checked with Flink's
    BinaryRowData: a HashMap of capacity 16 to 256 keeps them in one bucket, in insertion order)."""
    bucket = _spread(STAND_INS[0]) & 0xFF
    if bucket & 0xF == 0 or any(_spread(k) & 0xFF != bucket for k in STAND_INS):
        raise RuntimeError(f"the stand-in keys {STAND_INS} are not in one HashMap bucket apart from the "
                           "probe key's in this Flink")
    keys = sorted({s.key for s in schedule.steps if isinstance(s, RowStep)})
    if len(keys) > len(STAND_INS):
        raise AdapterError(f"pyflink mini_batch: a two-phase schedule of {len(keys)} keys; the adapter "
                           f"keeps Flink's order of {len(STAND_INS)} at most (module docstring)")
    return dict(zip(keys, STAND_INS))


def _options(c: MiniBatchConfig, latency: str | None = None, size: int | None = None) -> dict[str, str]:
    """Flink's options for the configuration, every one set (a job's operators have their own)."""
    return {"table.exec.mini-batch.enabled": "true" if c.enabled else "false",
            "table.optimizer.agg-phase-strategy": "TWO_PHASE" if c.two_phase else "ONE_PHASE",
            "table.exec.mini-batch.allow-latency": (latency or LATENCY) if c.enabled else "0 ms",
            "table.exec.mini-batch.size": str(size or c.size) if c.enabled else "-1",
            "table.exec.state.ttl": "1 d" if c.ttl else "0 ms"}


def _table_env(options: dict[str, str]) -> tuple[Any, Any]:
    from flink_semantics.adapters.pyflink.session import stream_environment
    from pyflink.table import StreamTableEnvironment

    env = stream_environment()
    env.set_parallelism(1)
    t_env = StreamTableEnvironment.create(env)
    _configure(t_env, options)
    return env, t_env


def _configure(t_env: Any, options: dict[str, str]) -> None:
    conf = t_env.get_config()
    for key, value in options.items():
        conf.set(key, value)


_QUERY = ("SELECT {sid} AS sid, k, COUNT(*) AS c, SUM(v) AS s, MIN(v) AS mn, MAX(v) AS mx "
          "FROM {src} WHERE sid = {sid} GROUP BY k")


def _refusal(c: MiniBatchConfig) -> str | None:
    """Flink's refusal of the configuration, asked of the planner (no job runs), or None."""
    from pyflink.common import Row, Types
    from pyflink.table import ExplainDetail

    try:
        env, t_env = _table_env(_options(c, latency=f"{c.allow_latency} ms"))
        ds = env.from_collection([Row(0, 1, 1)], type_info=Types.ROW_NAMED(
            ["sid", "k", "v"], [Types.INT(), Types.LONG(), Types.LONG()]))
        t_env.create_temporary_view("mb_src", t_env.from_changelog_stream(ds))
        t_env.explain_sql(_QUERY.format(sid=0, src="mb_src"), ExplainDetail.JSON_EXECUTION_PLAN)
    except Exception as e:  # noqa: BLE001 - Flink's refusal, whatever its class
        text = str(e).strip().splitlines()
        return next((line for line in text if "must" in line or "MiniBatch" in line), text[0] if text else
                    type(e).__name__)
    return None


Input = list[tuple[str, int, int]]  # (kind, key, value) rows of one aggregation operator
Changelog = list[tuple[str, tuple[int, ...]]]  # (kind, (key, count, sum, min, max)) it emitted


def _probed(schedule: Schedule, probe: int) -> Input:
    """The schedule's input rows with a probe before each row and at `end`, a tail probe without
    `end`; other steps feed nothing (module docstring)."""
    rows: Input = []
    for i, s in enumerate(schedule.steps):
        if isinstance(s, RowStep):
            rows += [("+I", probe, i), (s.kind, s.key, s.value)]
        elif isinstance(s, EndStep):
            return rows + [("+I", probe, i)]
    return rows + [("+I", probe, TAIL)]


def _cuts(schedule: Schedule, probe: int, keys: dict[int, int]) -> list[tuple[int, bool, Input]]:
    """Two-phase: the runs of a schedule, as (step, probed, input): for each row step, the rows up to
    it, then a probe and end of input (probed); with `end`, all its rows and end of input."""
    rows: Input = []
    runs = []
    for i, s in enumerate(schedule.steps):
        if isinstance(s, RowStep):
            rows.append((s.kind, keys[s.key], s.value))
            runs.append((i, True, rows + [("+I", probe, i)]))
        elif isinstance(s, EndStep):
            runs.append((i, False, list(rows)))
            break
    return runs


def _collect(runs: Sequence[tuple[MiniBatchConfig, int, Input]]) -> list[Changelog]:
    """Each run (configuration, Flink's size, input) through its own aggregation operator, with its own
    options (the planner reads them when it translates the operator), JOB_OPERATORS a job: the
    changelog each emits."""
    from pyflink.common import Row, Types
    from pyflink.common.types import RowKind
    from pyflink.table import ChangelogMode, Schema

    kinds = {"+I": RowKind.INSERT, "-U": RowKind.UPDATE_BEFORE, "+U": RowKind.UPDATE_AFTER,
             "-D": RowKind.DELETE}
    schema = (Schema.new_builder().column("sid", "INT").column("k", "BIGINT").column("c", "BIGINT")
              .column("s", "BIGINT").column("mn", "BIGINT").column("mx", "BIGINT").build())
    observed: list[Changelog] = [[] for _ in runs]
    for first in range(0, len(runs), JOB_OPERATORS):
        chunk = range(first, min(first + JOB_OPERATORS, len(runs)))
        rows = [Row.of_kind(kinds[kind], sid, k, v) for sid in chunk for kind, k, v in runs[sid][2]]
        if not rows:
            continue  # runs without input (two phases: `end` alone) emit nothing
        env, t_env = _table_env({})
        ds = env.from_collection(rows, type_info=Types.ROW_NAMED(
            ["sid", "k", "v"], [Types.INT(), Types.LONG(), Types.LONG()]))
        t_env.create_temporary_view("mb_src", t_env.from_changelog_stream(ds))
        streams = []
        for sid in chunk:
            c, size, _ = runs[sid]
            _configure(t_env, _options(c, size=size))
            mode = ChangelogMode.all() if c.update_before else ChangelogMode.upsert()
            query = t_env.sql_query(_QUERY.format(sid=sid, src="mb_src"))
            streams.append(t_env.to_changelog_stream(query, schema, mode))
        union = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
        with union.execute_and_collect() as results:
            for r in results:
                sid, *values = tuple(r)
                observed[sid].append((_KINDS[r.get_row_kind().value], tuple(values)))
    return observed


def _trace(schedule: Schedule, observed: Changelog, probe: int) -> Trace:
    """One phase: each row of the changelog at the step of the probe before it."""
    events: list[Event] = []
    step: int | None = None
    for change, (key, count, sum_, min_, max_) in observed:
        if key == probe:
            if change in ("+I", "+U"):
                step = max_  # the last probe in the bundle: the step that finished it
            continue
        if step is None:
            raise RuntimeError(f"pyflink mini_batch: output {change} k{key} before any probe row: the "
                               "probe does not lead Flink's bundle output\n" + schedule.to_json())
        if step == TAIL:
            continue  # emitted at the end of the bounded input, after the schedule's last step
        events.append(event(step, "out", key=key, change=change, count=count, sum=sum_, min=min_, max=max_))
    return Trace(tuple(events))


def _two_phase_trace(schedule: Schedule, runs: Sequence[tuple[int, bool, Changelog]], probe: int,
                     keys: dict[int, int]) -> Trace:
    """Two phases: the rows a run emitted before its probe are those of the steps up to its cut; each
    step's are the rows its run emitted beyond those of the run before."""
    back = {flink: key for key, flink in keys.items()}
    events: list[Event] = []
    before: Changelog = []
    for step, probed, out in runs:
        at = next((n for n, (_, values) in enumerate(out) if values[0] == probe), None)
        if probed and at is None:
            raise RuntimeError(f"pyflink mini_batch: no probe row in the run up to step {step}\n"
                               + schedule.to_json())
        upto = out[:at] if probed else out
        if upto[:len(before)] != before:
            raise RuntimeError(f"pyflink mini_batch: the run up to step {step} did not emit what the run "
                               "before it did: Flink's output is not deterministic\n" + schedule.to_json())
        for change, (key, count, sum_, min_, max_) in upto[len(before):]:
            events.append(event(step, "out", key=back[key], change=change, count=count, sum=sum_, min=min_,
                                 max=max_))
        before = upto
    return Trace(tuple(events))


def _two_phase(c: MiniBatchConfig) -> bool:
    return c.enabled and c.two_phase  # MB-3: the planner splits the aggregation only with mini-batch


def run_batch(schedules: Sequence[Schedule]) -> list[Trace]:
    """Every schedule of the batch in as few Flink jobs as JOB_OPERATORS allows; a refused
    configuration asks the planner (no job)."""
    traces: dict[int, Trace] = {}
    refusals: dict[MiniBatchConfig, str | None] = {}
    probes: dict[int, int] = {}
    keys: dict[int, dict[int, int]] = {}
    runs: dict[int, list[tuple[int, bool, Input]]] = {}
    for i, s in enumerate(schedules):
        c: MiniBatchConfig = s.config
        try:
            validate_config(c)
        except ScheduleError:  # the spec says the job refuses it: ask Flink
            if c not in refusals:
                refusals[c] = _refusal(c)
            reason = refusals[c]
            if reason is not None:
                traces[i] = Trace((rejected(reason),))
                continue
        probes[i] = _probe_key(s)
        if _two_phase(c):
            keys[i] = _stand_ins(s)
            runs[i] = _cuts(s, probes[i], keys[i])
        else:
            runs[i] = [(TAIL, True, _probed(s, probes[i]))]  # one run, its probes name the steps (_trace)
    # one phase: a probe and a row per step, so Flink's bundles of twice the size hold the same rows
    sizes = {i: schedules[i].config.size * (1 if i in keys else 2) for i in runs}
    observed = iter(_collect([(schedules[i].config, sizes[i], rows) for i in runs for _, _, rows in runs[i]]))
    for i, cuts in runs.items():
        out = [(step, probed, next(observed)) for step, probed, _ in cuts]
        traces[i] = (_two_phase_trace(schedules[i], out, probes[i], keys[i]) if i in keys
                     else _trace(schedules[i], out[0][2], probes[i]))
    return [traces[i] for i in range(len(schedules))]
