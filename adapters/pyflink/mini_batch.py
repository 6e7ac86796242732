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
`+I` of a key no schedule uses (PROBE_KEY) with the step index as its value.  The probe key is an
ordinary key of the same aggregation; its result changes with every probe (its count grows), so
every bundle that holds a probe emits one probe row, and MAX(v) of it is the last step whose probe
the bundle held.  PROBE_KEY is chosen so that its BinaryRowData hash spreads to bucket 0 of Java's
HashMap (checked against Flink's own BinaryRowData at start-up), and its probe is the first input
of every bundle: Flink emits the probe first in every bundle it finishes (observed, and checked per
trace: output before any probe is an AdapterError).  So the observed changelog splits into
bundles, each named by the step that finished it.  With mini-batch on, Flink's size is `2 * size`
(a probe and a row per step: the bundles hold the same schedule rows as without probes); with it
off, each row is its own group.  A schedule without `end` gets a tail probe (TAIL); what the job
emits at that probe (the bounded input's end, which is not part of the schedule) is left out.

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
  come at wall-clock intervals, a failure cannot be placed at a step), statuses, and two-phase
  aggregation (the global bundle counts local accumulators, one per key and local bundle, so a
  probe per row no longer keeps its bundles the schedule's): the capabilities below say so.

Hence the capabilities `mini_batch.processing_time` and `mini_batch.watermarks` are declared
unsupported: the suite checks Flink on rows alone (test_per_row_changelog, test_size_bundles, the
refusals of test_configuration_validation), without `advance`, `watermark` or `end` steps.

**MB-2** is Flink's own: the planner is asked for the job graph of the configuration
(`explain_sql` with the JSON execution plan), and a refusal is the `rejected` event with Flink's
message.

**Batching.**  The schedules of a batch with the same Flink configuration run in ONE job: one
source (all rows, with a schedule id), and per schedule its own filtered aggregation operator
(`WHERE sid = i GROUP BY k`: a bundle counts the inputs of its own operator only, so schedules
never share bundles), the changelog streams unioned into one collect.

Measured on this 2-core machine while other Flink jobs ran (`run_batch` of schedules of 20 rows
and `end`, one configuration, JVM already up): 1 schedule 6.6 s (the first job of the process), 16
schedules 4.0 s (4 schedules/s), 64 schedules 7.6 s (8.4 schedules/s).  A batch costs one job per
distinct (enabled, size, two_phase, ttl, update_before), plus one planner call (no job) per
distinct refused configuration.  The whole area's suite (`--areas mini_batch`): 63 s.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

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
    "mini_batch.two_phase": "the global aggregation's bundle counts local accumulators (one a key and "
                            "local bundle), so the probe rows that tie Flink's output to steps change which "
                            "rows its bundles hold: its outputs cannot be tied to steps",
    "mini_batch.checkpoint": "a SQL job cannot place a checkpoint barrier, a crash or a restore at a step: "
                             "barriers come at wall-clock intervals (execution.checkpointing.interval), a "
                             "failure is not scriptable, and a restore needs a savepoint of a stopped job",
    "mini_batch.status": "PyFlink cannot emit a watermark status (IDLE / ACTIVE) at a chosen element, and a "
                         "SQL sink does not see the statuses the aggregation forwards",
}

# Rule -> how Flink differs, observed running it (none so far: see the module docstring for what the
# adapter cannot drive or observe, which is not a difference of Flink's).
EXPECTED_FAILURES: dict[str, str] = {}

PROBE_KEY = -80  # BinaryRowData(-80L).hashCode() spreads to HashMap bucket 0 (checked in _probe_key)
TAIL = 10**9  # the probe after the last step of a schedule without `end`
LATENCY = "100000000 d"  # the processing-time assigner's batch stays 0: no wall-clock watermark
_KINDS = ("+I", "-U", "+U", "-D")

_lock = threading.Lock()
_checked: list[int] = []


def _probe_key() -> int:
    """PROBE_KEY, after checking with Flink's BinaryRowData that HashMap (capacity up to 256) puts it
    in bucket 0: the first key a bundle emits, as it is the first the bundle holds."""
    with _lock:
        if not _checked:
            from flink_semantics.adapters.pyflink.session import jvm

            j = jvm()
            row = j.org.apache.flink.table.data.binary.BinaryRowData(1)
            writer = j.org.apache.flink.table.data.writer.BinaryRowWriter(row)
            writer.writeLong(0, PROBE_KEY)
            writer.complete()
            h = row.hashCode() & 0xFFFFFFFF
            if (h ^ (h >> 16)) & 0xFF:
                raise RuntimeError(f"probe key {PROBE_KEY} is not in HashMap bucket 0 in this Flink")
            _checked.append(PROBE_KEY)
        return _checked[0]


def _options(c: MiniBatchConfig, latency: str | None = None) -> dict[str, str]:
    out = {"table.exec.mini-batch.enabled": "true" if c.enabled else "false",
           "table.optimizer.agg-phase-strategy": "TWO_PHASE" if c.two_phase else "ONE_PHASE"}
    if c.enabled:
        out["table.exec.mini-batch.allow-latency"] = latency or LATENCY
        out["table.exec.mini-batch.size"] = str(c.size)
    if c.ttl:
        out["table.exec.state.ttl"] = "1 d"
    return out


def _table_env(options: dict[str, str]) -> tuple[Any, Any]:
    from flink_semantics.adapters.pyflink.session import stream_environment
    from pyflink.table import StreamTableEnvironment

    env = stream_environment()
    env.set_parallelism(1)
    t_env = StreamTableEnvironment.create(env)
    conf = t_env.get_config()
    for key, value in options.items():
        conf.set(key, value)
    return env, t_env


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


def _input(schedule: Schedule, sid: int, probe: int) -> list[tuple[int, str, int, int]]:
    """The schedule's input rows (sid, kind, key, value): a probe before each row and at `end`, a
    tail probe without `end`; other steps feed nothing (module docstring)."""
    rows = []
    ended = False
    for i, s in enumerate(schedule.steps):
        if isinstance(s, RowStep):
            rows += [(sid, "+I", probe, i), (sid, s.kind, s.key, s.value)]
        elif isinstance(s, EndStep):
            rows.append((sid, "+I", probe, i))
            ended = True
            break
    if not ended:
        rows.append((sid, "+I", probe, TAIL))
    return rows


def _run_group(schedules: Sequence[Schedule], c: MiniBatchConfig) -> list[Trace]:
    """Schedules of one Flink configuration in one job; one trace each."""
    from pyflink.common import Row, Types
    from pyflink.common.types import RowKind
    from pyflink.table import ChangelogMode, Schema

    probe = _probe_key()
    kinds = {"+I": RowKind.INSERT, "-U": RowKind.UPDATE_BEFORE, "+U": RowKind.UPDATE_AFTER,
             "-D": RowKind.DELETE}
    options = _options(c)
    if c.enabled:
        options["table.exec.mini-batch.size"] = str(2 * c.size)  # a probe and a row per step
    env, t_env = _table_env(options)
    rows = [Row.of_kind(kinds[kind], sid, k, v) for n, s in enumerate(schedules)
            for sid, kind, k, v in _input(s, n, probe)]
    ds = env.from_collection(rows, type_info=Types.ROW_NAMED(
        ["sid", "k", "v"], [Types.INT(), Types.LONG(), Types.LONG()]))
    t_env.create_temporary_view("mb_src", t_env.from_changelog_stream(ds))
    schema = (Schema.new_builder().column("sid", "INT").column("k", "BIGINT").column("c", "BIGINT")
              .column("s", "BIGINT").column("mn", "BIGINT").column("mx", "BIGINT").build())
    mode = ChangelogMode.all() if c.update_before else ChangelogMode.upsert()
    streams = [t_env.to_changelog_stream(t_env.sql_query(_QUERY.format(sid=sid, src="mb_src")), schema, mode)
               for sid in range(len(schedules))]
    union = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
    observed: list[list[tuple[str, tuple[int, ...]]]] = [[] for _ in schedules]
    with union.execute_and_collect() as results:
        for r in results:
            sid, *values = tuple(r)
            observed[sid].append((_KINDS[r.get_row_kind().value], tuple(values)))
    return [_trace(s, out, probe) for s, out in zip(schedules, observed)]


def _trace(schedule: Schedule, observed: list[tuple[str, tuple[int, ...]]], probe: int) -> Trace:
    """The `out` events: each row of the changelog at the step of the probe before it."""
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


def _job_key(c: MiniBatchConfig) -> tuple[Any, ...]:
    return (c.enabled, c.size if c.enabled else None, c.two_phase, c.ttl, c.update_before)


def run_batch(schedules: Sequence[Schedule]) -> list[Trace]:
    traces: dict[int, Trace] = {}
    groups: dict[tuple[Any, ...], list[int]] = {}
    refusals: dict[MiniBatchConfig, str | None] = {}
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
        groups.setdefault(_job_key(c), []).append(i)
    for indices in groups.values():
        batch = [schedules[i] for i in indices]
        for i, trace in zip(indices, _run_group(batch, batch[0].config)):
            traces[i] = trace
    return [traces[i] for i in range(len(schedules))]
