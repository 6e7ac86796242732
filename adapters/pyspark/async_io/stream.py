"""Async I/O on Structured Streaming: schedules of spec/async-io.md through `async_map` in a
streaming query, many schedules per query.

The mapping:

* **The input** is a streaming DataFrame from a Python data source (`flink_async_io_script`, the
  `ScriptSource` below) reading a script file the driver writes: for every schedule (its id `sid`)
  its input steps as rows `(sid, kind, ts, value, at)`: a `record` step a row of kind "R" (value
  "sid:record"), a `watermark` step a row of kind "W", a `status` step a row of kind "S" (async_map's
  in-band statuses, `ts` 1 idle), an `end` step a row of kind "E"; `at` is the
  step's instant (below).  The whole batch of schedules is one micro-batch (offset `{"batch": 0}`),
  spread over `PARTITIONS` input partitions; `mapInArrow` is narrow, so each partition is one task,
  and `async_map(group_col="sid")` gives every schedule an operator of its own in that task, with
  its own configuration (`group_config`).
* **Virtual time**: every task runs on `virtual_time_loop` (async_map's `loop_factory`): an asyncio
  loop whose clock jumps to the next timer when idle.  Step i of a schedule happens at the instant
  `ms_i + (i + 1) * delta` milliseconds, where `ms_i` is the schedule's processing time after step i
  (the sum of its `advance` steps) and `delta` is small enough that all steps of a schedule fit in
  half a millisecond: instants increase step by step, and a timer (timeout, retry) that the
  schedule's clock reaches at an `advance` step falls between that step's and the previous step's
  instant.  An input row enters its operator at its step's instant (`arrival_col="at"`).
* **The function** is the scripted service of spec/schedules.md (execution model 6): a call of
  record r made at time t completes at the first `complete` / `error` step of r whose instant is
  after t, with that step's result (a `null` result returns None; an `error` raises).  So every call
  completes exactly when the schedule says.  A call the schedule never completes returns [] after
  the schedule's last step, and the input of a schedule without an `end` step ends there too (the
  end of Spark's micro-batch ends the input): what happens after the last step is not part of the
  trace and is dropped.
* **The trace** comes from the query's output with `audit=True` (async_map's rows of results,
  watermarks, calls, timeouts, failures and end of input, each with its loop time `at`): an event
  at time t belongs to the first step whose instant is not before t.
* **A failure** (AIO-23) is `on_failure="report"`: the schedule's operator stops at once (AIO-58)
  and reports it, while the other schedules of the task go on.
* **Refused configurations** (AIO-1, AIO-3): async_map's `operator_config` raises ValueError
  before any query runs; the trace is `rejected`.

Checkpoints, crashes and restores are not run (`STREAM_UNSUPPORTED`): a micro-batch commits only
after its partition's input ended and the queue drained, so a Spark checkpoint never holds an
element in flight.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import json
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark.async_io.api import (
    async_map,
    operator_config,
    retry_strategy,
    virtual_time_loop,
)
from flink_semantics.adapters.pyspark.async_io.operator import OperatorConfig
from flink_semantics.adapters.pyspark.session import query_conf
from flink_semantics.spec.areas.async_io import (
    AdvanceStep,
    AsyncIoConfig,
    CompleteStep,
    EndStep,
    ErrorStep,
    RecordStep,
    StatusStep,
    WatermarkStep,
    event,
    retry_enabled,
)
from flink_semantics.spec.schedule import Event, Schedule, Trace, rejected

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pyspark missing: the module still imports (the adapter reports it)
    DataSource = DataSourceStreamReader = InputPartition = SupportsTriggerAvailableNow = object  # type: ignore

FORMAT = "flink_async_io_script"
PARTITIONS = 4
SPAN_MS = 0.5  # all step instants of a schedule lie within this many ms of their processing time

STREAM_UNSUPPORTED: dict[str, str] = {
    "async_io.checkpoint": (
        "a Spark micro-batch commits only after its partition's input ended and async_map's queue "
        "drained (the end of a partition is end of input), so a checkpoint never holds an element in "
        "flight and a restart replays the uncommitted micro-batch's input instead of restoring "
        "queued elements: checkpoint barriers inside a partition have no counterpart in Spark"),
}


# --------------------------------------------------------------------------
# A schedule's instants, input rows and script
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """A schedule's step instants (ms), input rows and its function's script."""

    instants: tuple[float, ...]
    rows: tuple[tuple[str, int | None, str, float], ...]  # (kind, ts, value, at seconds)
    # record -> ((at seconds, result or None, error message or None), ...) in step order
    script: Mapping[int, tuple[tuple[float, tuple[int, ...] | None, str | None], ...]]
    horizon: float  # seconds: after the last step

    @property
    def delta(self) -> float:
        return SPAN_MS / (len(self.instants) + 2)


def plan(sid: int, schedule: Schedule) -> Plan:
    """The schedule's instants, rows and script.  With retry on, a `null` completion is no completion:
    the retrying future refuses null at the call and the call stays outstanding (AIO-20), which a
    coroutine can only show by not returning then."""
    steps = schedule.steps
    refuses_null = retry_enabled(schedule.config)
    delta = SPAN_MS / (len(steps) + 2)
    ms = 0
    instants: list[float] = []
    rows: list[tuple[str, int | None, str, float]] = []
    script: dict[int, list[tuple[float, tuple[int, ...] | None, str | None]]] = {}
    n_records = 0
    for i, s in enumerate(steps):
        if isinstance(s, AdvanceStep):
            ms += s.ms
        at_ms = ms + (i + 1) * delta
        instants.append(at_ms)
        at = at_ms / 1000.0
        if isinstance(s, RecordStep):
            rows.append(("R", s.timestamp, f"{sid}:{n_records}", at))
            n_records += 1
        elif isinstance(s, WatermarkStep):
            rows.append(("W", s.timestamp, "", at))
        elif isinstance(s, StatusStep):
            rows.append(("S", 1 if s.idle else 0, "", at))
        elif isinstance(s, EndStep):
            rows.append(("E", None, "", at))
        elif isinstance(s, CompleteStep) and not (s.result is None and refuses_null):
            script.setdefault(s.record, []).append((at, None if s.result is None else tuple(s.result), None))
        elif isinstance(s, ErrorStep):
            script.setdefault(s.record, []).append((at, None, s.message))
    last = instants[-1] if instants else 0.0
    horizon = (last + delta / 2) / 1000.0
    if not any(isinstance(s, EndStep) for s in steps):
        rows.append(("E", None, "", horizon))  # the micro-batch ends after the schedule's last step
    return Plan(tuple(instants), tuple(rows), {r: tuple(v) for r, v in script.items()}, horizon)


async def scripted_service(value: str, *, scripts: Mapping[int, Mapping[int, Any]],
                           horizons: Mapping[int, float], tolerance: float = 1e-9) -> list[int] | None:
    """The scripted service (execution model 6): the call completes at the first completion step of
    its record after the call, as that step says; a call never completed returns [] at the horizon."""
    sid, record = (int(x) for x in value.split(":"))
    loop = asyncio.get_running_loop()
    now = loop.time()
    later = [c for c in scripts[sid].get(record, ()) if c[0] > now + tolerance]
    at, result, message = later[0] if later else (max(now, horizons[sid]), (), None)
    if at > now:
        fut = loop.create_future()
        loop.call_at(at, _resolve, fut)
        await fut
    if message is not None:
        raise RuntimeError(message)
    return None if result is None else list(result)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def config_of(c: AsyncIoConfig) -> OperatorConfig:
    """The schedule's configuration through async_map's own builders (ValueError: AIO-1, AIO-3)."""
    retry = None
    if c.retry is not None:
        r = c.retry
        if r.strategy == "fixed_delay":
            retry = retry_strategy(r.max_attempts, delay=r.delay / 1000, on_empty=r.if_empty,
                                   on_error=r.if_error)
        else:
            retry = retry_strategy(r.max_attempts, initial_delay=r.initial_delay / 1000,
                                   max_delay=r.max_delay / 1000, multiplier=r.multiplier,
                                   on_empty=r.if_empty, on_error=r.if_error)
    on_timeout: Any = list(c.timeout_result) if c.on_timeout == "complete" else c.on_timeout
    return operator_config(capacity=c.capacity, ordered=c.mode == "ordered",
                           timeout=c.timeout / 1000 if c.timeout > 0 else None,
                           on_timeout=on_timeout, retry=retry)


def _config_for(sid: int, *, configs: Mapping[int, OperatorConfig]) -> OperatorConfig:
    return configs[sid]


# --------------------------------------------------------------------------
# The source
# --------------------------------------------------------------------------


def source_schema() -> Any:
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    return StructType([StructField("sid", LongType()), StructField("kind", StringType()),
                       StructField("ts", LongType()), StructField("value", StringType()),
                       StructField("at", DoubleType())])


@dataclass
class ScriptPartition(InputPartition):  # type: ignore[misc,valid-type]
    rows: list[list[Any]]


def read_script(path: str) -> list[list[list[list[Any]]]]:
    """The script: micro-batches, each a list of partitions, each a list of rows."""
    with open(path, encoding="utf-8") as fh:
        return list(json.load(fh))


class ScriptSource(DataSource):  # type: ignore[misc,valid-type]
    """`spark.readStream.format("flink_async_io_script").option("script", path).load()`: the
    script's micro-batches, each with its partitions."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> Any:
        return source_schema()

    def streamReader(self, schema: Any) -> ScriptReader:
        return ScriptReader(self.options)


class ScriptReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,valid-type]
    """Offsets `{"batch": i}`: the script's micro-batches up to i delivered; one per micro-batch."""

    def __init__(self, options: Mapping[str, str]):
        self.path = options["script"]

    def initialOffset(self) -> dict[str, int]:
        return {"batch": -1}

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # what the script holds is available now

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        available = len(read_script(self.path))
        first = (start or self.initialOffset())["batch"] + 1
        return {"batch": min(first, available - 1)} if first < available else (start or self.initialOffset())

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
        batches = read_script(self.path)[start["batch"] + 1:end["batch"] + 1]
        return [ScriptPartition(part) for b in batches for part in b]

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        for r in partition.rows:
            yield tuple(r)

    def commit(self, end: dict[str, int]) -> None:
        pass


# --------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------


def events_of(p: Plan, rows: Sequence[Mapping[str, Any]]) -> list[Event]:
    """async_map's audit rows of one schedule (in output order) as trace events."""
    tolerance = p.delta / 10
    out: list[Event] = []
    for r in rows:
        ms = r["at"] * 1000.0
        step = bisect.bisect_left(p.instants, ms - tolerance)
        if step >= len(p.instants):
            continue  # after the schedule's last step
        kind = r["kind"]
        if kind == "R":
            out.append(event(step, "emit", record=r["seq"], value=r["value"], timestamp=r["ts"]))
        elif kind == "W":
            out.append(event(step, "watermark", timestamp=r["ts"]))
        elif kind == "S":
            out.append(event(step, "status", idle=bool(r["ts"])))
        elif kind == "I":
            out.append(event(step, "invoke", record=r["seq"], attempt=r["attempt"]))
        elif kind == "T":
            out.append(event(step, "timeout", record=r["seq"]))
        elif kind == "F":
            out.append(event(step, "fail", record=r["seq"], reason=r["reason"]))
        elif kind == "E":
            out.append(event(step, "finished"))
    return out


# --------------------------------------------------------------------------
# run_many
# --------------------------------------------------------------------------


def _write(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def run_many(spark: Any, schedules: Sequence[Schedule], root: Path, partitions: int = PARTITIONS
             ) -> list[Trace]:
    """The traces of a batch of async I/O schedules, all of them through `async_map` in one streaming
    query (one micro-batch; each schedule an operator of its own, `group_col="sid"`)."""
    traces: dict[int, Trace] = {}
    configs: dict[int, OperatorConfig] = {}
    plans: dict[int, Plan] = {}
    for sid, s in enumerate(schedules):
        try:
            configs[sid] = config_of(s.config)  # AIO-1, AIO-3: refused before any query
        except ValueError as e:
            traces[sid] = Trace((rejected(str(e)),))
            continue
        plans[sid] = plan(sid, s)
    if plans:
        rows = _run_query(spark, plans, configs, root, partitions)
        for sid, p in plans.items():
            traces[sid] = Trace(tuple(events_of(p, rows.get(sid, []))))
    return [traces[i] for i in range(len(schedules))]


def _run_query(spark: Any, plans: Mapping[int, Plan], configs: Mapping[int, OperatorConfig], root: Path,
               partitions: int) -> dict[int, list[dict[str, Any]]]:
    parts: list[list[list[Any]]] = [[] for _ in range(min(partitions, len(plans)))]
    for i, (sid, p) in enumerate(plans.items()):
        parts[i % len(parts)] += [[sid, kind, ts, value, at] for kind, ts, value, at in p.rows]
    script = root / "script.json"
    _write(script, [parts])
    spark.dataSource.register(ScriptSource)
    src = spark.readStream.format(FORMAT).option("script", str(script)).load()
    fn = functools.partial(scripted_service, scripts={sid: p.script for sid, p in plans.items()},
                           horizons={sid: p.horizon for sid, p in plans.items()})
    out = async_map(src, fn, value_col="value", kind_col="kind", ts_col="ts", group_col="sid",
                    group_config=functools.partial(_config_for, configs=dict(configs)),
                    arrival_col="at", loop_factory=virtual_time_loop, audit=True, on_failure="report")
    name = f"aio_stream_{uuid.uuid4().hex[:12]}"
    with query_conf(spark, {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}):
        query = (out.writeStream.format("memory").queryName(name).outputMode("append")
                 .option("checkpointLocation", str(root / "checkpoint")).trigger(availableNow=True).start())
    try:
        query.awaitTermination()
        got = spark.table(name).collect()
    finally:
        query.stop()
        spark.catalog.dropTempView(name)
    by_sid: dict[int, list[dict[str, Any]]] = {}
    for r in got:
        by_sid.setdefault(r["sid"], []).append(r.asDict())
    return by_sid
