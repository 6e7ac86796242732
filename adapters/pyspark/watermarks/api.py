"""Flink's event-time watermarks on a Spark streaming DataFrame: `event_time_windows` and
`flink_watermarks`.

Apache Spark has one event-time watermark per query (`withWatermark`: the maximum event time seen
minus a delay, over all partitions, advanced between micro-batches; no idleness, no alignment).
Flink makes one per *split* (a Kafka partition, a file), combines them per *source reader* and again
per downstream task, with idleness (a silent split must not hold the others back) and alignment (a
split or reader running ahead of the slowest stops reading).  This module gives a Spark user that,
rule by rule of spec/watermarks.md, on their own stream of events, in two forms:

    from flink_semantics.adapters.pyspark.watermarks.api import (
        WatermarkStrategy, event_time_windows, flink_watermarks)

    # tumbling windows closed by Flink's watermark, on a Kafka source's own columns:
    windows = event_time_windows(kafka, split_col="partition", time_col="timestamp",
                                 order_col="offset", value_col="amount", window=timedelta(seconds=10),
                                 strategy=WatermarkStrategy(readers=2, bound=5000, interval=200,
                                                            idleness=30000), late="emit")
    windows.writeStream.trigger(processingTime="1 second")...  # kind: window / late (/ watermark)

    # the watermark events themselves, for a source log with `seq` and `tick` rows (below):
    out = flink_watermarks(events, WatermarkStrategy(readers=2, bound=5, interval=10, idleness=30))
    out.filter("kind = 'output_watermark'")            # what the downstream task's valve emits

`event_time_windows` (its docstring has the details) needs no sequence number and no processing-time
rows: processing time is Spark's (the micro-batch's timestamp, with a processing-time timeout so
that micro-batches without data move it), and the result is the window aggregates, emitted once
when the valve's watermark passes the window's end, and the late rows dropped or emitted.  It is
one `applyInPandasWithState` group (`window_group`, `WindowStage`): the readers of `SourceStage`
below, the valve of the window operator's task and the open windows, in the group's state; with
`parallel=True`, one `transformWithStateInPandas` group per reader (`reader_processor`) and then
the window operator's `applyInPandasWithState` group (`operator_group`, `WindowOperator`).

`flink_watermarks` is the watermark log, for a source log whose processing time is in the data (the
conformance runners drive it).  Its **input** is a *source log*: a streaming DataFrame with the columns

* `seq` (long, required): the order in which the rows became available (within a stream);
* `split` (int, required): the split of a record, of `add_split` or of `finish_split`;
* `ts` (long, required): a record's event time (a record with a null `split` or `ts` fails the
  query naming its `seq`, the column and the rule);
* `value` (optional): a record's payload, passed through as a string;
* `op` (string, optional, default `record`): `record`; `add_split` (to reader `reader`);
  `finish_split`; `tick` (processing time advances by `ms`); `align` (an alignment round);
  `failover` (the job failed and restarted: WM-16); `end` (the input ends: WM-15);
* `reader` (int, optional): `add_split`'s reader;
* `ms` (long, optional): `tick`'s advance in ms;
* with `stream=<column>`: independent sources in one query, each with its own readers, valve and
  (with a mapping of strategies) its own strategy.

A split seen first in a record is added just before it, to reader `reader` if given and else to
`split mod readers` (WM-4 holds from there).  **Processing time** is what the log says: a `tick`
row moves it, and every periodic emission instant on the way fires (WM-3), so the result does not
depend on when Spark runs the micro-batch.  Rows of one stream may come in any number of
micro-batches: every reader's and every valve's state is kept in Spark's state store between them
(adapters/pyspark/watermarks/snapshots.py has what is kept).

The **output** (append mode) has one row per thing that happened, in order per `(stream, target)`
by `idx`: `kind` is `record` (a reader emitted it: `split`, `ts`, `value`), `watermark` / `status`
(a reader sent its combined watermark / IDLE or ACTIVE downstream: `reader`, `watermark` / `idle`),
`output_watermark` / `output_status` (the valve of downstream task `target` emitted it: `watermark`
/ `idle`), `split_finished`, `max_allowed` (the alignment coordinator's announcement, `watermark`),
`blocked` / `unblocked` (`reader`), `paused` / `resumed` (`split`) and `restarted`.  Every row
carries `seq` (the input row that caused it) and `current_watermark` (the valve's output so far,
`MIN` before any): the column to filter late records by.  Records go to downstream task
`split mod downstream`; every other row goes to every task.

The pipeline: source log -> `groupBy(stream).applyInPandasWithState(stream_group)`, one stateful
operator whose group is one stream: its source (its readers, each with its splits' generators,
multiplexer, idleness and alignment, and the alignment coordinator, acting in the log's order) and
the valves (`StatusWatermarkValve`) of its `downstream` tasks, each fed what the readers sent in
their order (records routed by split, everything else broadcast); the source's and each valve's
state are kept in the group's `GroupState` (any state store provider).  The readers of one stream
are one group: the coordinator's round (spec C4) needs all of them in one step, and the spec orders
what they do (C3); different streams run in parallel.  A `failover` row makes the readers start
again from MIN with the splits they had and the records not read (WM-16) and every valve of the
stream start anew; Spark's own checkpoint keeps everything else, so a query restarted from it goes
on where it was.

What it costs: one stateful operator, so each micro-batch is one shuffle's worth of tasks plus a
Python call per stream with data in the batch; bench/watermarks.py.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from flink_semantics.adapters.pyspark.session import struct
from flink_semantics.adapters.pyspark.watermarks.engine import (
    MIN,
    AlignmentCoordinator,
    SourceReader,
    StatusWatermarkValve,
)
from flink_semantics.adapters.pyspark.watermarks.snapshots import (
    restore_reader,
    restore_valve,
    snapshot_reader,
    snapshot_valve,
)

OPS = ("record", "add_split", "finish_split", "tick", "align", "failover", "end")
LOG_SCHEMA = "stream string, seq long, op string, split int, reader int, ts long, ms long, value string"
# What the source sends downstream, in order (`pos`) per stream.
SENT_SCHEMA = ("stream string, pos long, seq long, kind string, reader int, split int, ts long, "
               "watermark long, idle boolean, value string")
OUTPUT_SCHEMA = ("stream string, target int, idx long, seq long, kind string, reader int, split int, "
                 "ts long, watermark long, idle boolean, current_watermark long, value string")
STATE_SCHEMA = "state string"
# The state store provider setting and RocksDB's (the example runs on it; any provider works).
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _need(ok: bool, parameter: str, rule: str, message: str) -> None:
    if not ok:
        raise ValueError(f"{parameter}: {message} ({rule})")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class WatermarkStrategy:
    """Per split, Flink's `WatermarkStrategy.forBoundedOutOfOrderness(bound)` (punctuated or
    periodic) `.withIdleness(idleness)` `.withWatermarkAlignment(max_drift)`, on a source of `readers`
    parallel readers with `pipeline.auto-watermark-interval` = `interval`:

    * `readers`: source readers, each an input channel of the downstream valve (WM-17..WM-21);
    * `bound`: every split's generator gives `max ts - bound - 1` (WM-2);
    * `interval`: periodic emission every `interval` ms of processing time, 0 for none (WM-3);
    * `punctuated`: emit on every record instead (WM-8, spec C1);
    * `idleness`: a split silent for that long goes idle (WM-13, WM-14), or None;
    * `max_drift`: watermark alignment of readers and splits (WM-22..WM-26), or None;
    * `alignment_buffer`: alignment rounds an alignment check looks back (WM-25; 0: the latest).

    Invalid values raise ValueError naming the parameter and the rule, before any job runs."""

    readers: int = 1
    bound: int = 0
    interval: int = 200
    punctuated: bool = False
    idleness: int | None = None
    max_drift: int | None = None
    alignment_buffer: int = 3

    def __post_init__(self) -> None:
        _need(_is_int(self.readers) and self.readers >= 1, "readers", "WM-17",
              f"a source has at least one reader, each a channel of the valve, not {self.readers!r}")
        _need(_is_int(self.bound) and self.bound >= 0, "bound", "WM-2",
              f"the out-of-orderness bound is a non-negative integer, not {self.bound!r}")
        _need(_is_int(self.interval) and self.interval >= 0, "interval", "WM-3",
              f"the periodic emission interval is a non-negative integer (0: none), not {self.interval!r}")
        _need(isinstance(self.punctuated, bool), "punctuated", "WM-8",
              f"punctuated is a boolean, not {self.punctuated!r}")
        _need(self.idleness is None or (_is_int(self.idleness) and self.idleness > 0), "idleness", "WM-28",
              f"the idleness timeout is a positive duration, not {self.idleness!r}")
        _need(self.max_drift is None or (_is_int(self.max_drift) and self.max_drift > 0), "max_drift",
              "WM-28", f"the maximum drift is a positive duration, not {self.max_drift!r}")
        _need(_is_int(self.alignment_buffer) and self.alignment_buffer >= 0, "alignment_buffer", "WM-25",
              f"the alignment buffer is a non-negative integer, not {self.alignment_buffer!r}")


# --------------------------------------------------------------------------
# The source: readers and coordinator of one stream
# --------------------------------------------------------------------------

Row = tuple[int, int, str, int, int, int, int, bool, Any]  # SENT_SCHEMA without the stream


class SourceStage:
    """One stream's source: `strategy.readers` engine readers on the log's processing time, the
    alignment coordinator, and the split -> reader map; `rows` collects what they emit and send, in
    order (spec C3: readers act in index order, what one sends goes before the next acts)."""

    def __init__(self, strategy: WatermarkStrategy, saved: Mapping[str, Any] | None):
        self.strategy = strategy
        self.seq = 0  # the log row being handled
        self.rows: list[Row] = []
        self.now = 0
        self.next_emit: int | None = strategy.interval or None  # WM-3: from the start
        self.reader_of: dict[int, int] = {}
        self.closed: set[int] = set()  # splits whose end has become available
        self.payloads: dict[int, list[Any]] = {}  # each split's values not yet read, in order
        self.reports: dict[int, int] = {}  # the coordinator's (WM-23)
        self.pos = 0
        self.ended = False
        self.readers = [self._fresh(r) for r in range(strategy.readers)]
        if saved is not None:
            self._restore(saved)

    def _fresh(self, index: int) -> SourceReader:
        return SourceReader(index, self.strategy, lambda: self.now, self._emit, self._send,
                            self.strategy.max_drift is not None)

    # ---- rows --------------------------------------------------------------

    def _row(self, kind: str, reader: int = -1, split: int = -1, ts: int = 0, watermark: int = 0,
             idle: bool = False, value: Any = None) -> None:
        self.rows.append((self.pos, self.seq, kind, reader, split, ts, watermark, idle, value))
        self.pos += 1

    def _emit(self, kind: str, **f: Any) -> None:
        if kind == "record":  # WM-1: the record goes out before its generator sees it
            self._row(kind, split=f["split"], ts=f["ts"], value=self.payloads[f["split"]].pop(0))
        else:  # split_finished, blocked / unblocked, paused / resumed
            self._row(kind, reader=f.get("reader", -1), split=f.get("split", -1))

    def _send(self, kind: str, **f: Any) -> None:
        if kind == "watermark":
            self._row(kind, reader=f["reader"], watermark=f["value"])
        else:
            self._row(kind, reader=f["reader"], idle=f["idle"])

    # ---- the log's rows ------------------------------------------------------

    def apply(self, seq: int, op: str, split: int, reader: int, ts: int, ms: int, value: Any) -> None:
        """One row of the source log (module docstring)."""
        self.seq = seq
        if self.ended:
            raise ValueError(f"row seq={seq}: {op} after end (WM-29: end is the last row)")
        if op == "record":
            self._record(split, reader, ts, value)
        elif op == "add_split":
            self._add(split, reader, seq)
        elif op == "finish_split":
            self._check_open(split, seq, op)
            self.closed.add(split)
            self.readers[self.reader_of[split]].finish_split(split)
        elif op == "tick":
            self._tick(ms, seq)
        elif op == "align":
            self._align(seq)
        elif op == "failover":
            self._failover()
        elif op == "end":
            self._end()
        else:
            raise ValueError(f"row seq={seq}: unknown op {op!r}; one of {', '.join(OPS)}")

    def _add(self, split: int, reader: int, seq: int) -> None:
        """WM-4: the split's generator and partial watermark are registered now."""
        if split < 0 or split in self.reader_of:
            raise ValueError(f"row seq={seq}: split {split} is added twice or negative (WM-29)")
        if not 0 <= reader < len(self.readers):
            raise ValueError(f"row seq={seq}: reader {reader} does not exist: the source has "
                             f"{len(self.readers)} (WM-29)")
        self.reader_of[split] = reader
        self.payloads[split] = []
        self.readers[reader].add_split(split)

    def _record(self, split: int, reader: int, ts: int, value: Any) -> None:
        if split not in self.reader_of:
            self._add(split, reader if 0 <= reader < len(self.readers) else split % len(self.readers),
                      self.seq)
        self._check_open(split, self.seq, "record")
        self.payloads[split].append(value)
        self.readers[self.reader_of[split]].add_record(split, ts)

    def _check_open(self, split: int, seq: int, op: str) -> None:
        if split not in self.reader_of or split in self.closed:
            raise ValueError(f"row seq={seq}: {op} of split {split}, which is not added or has "
                             "finished (WM-29)")

    def _tick(self, ms: int, seq: int) -> None:
        """WM-3: every periodic emission instant on the way, at its own time, readers in index
        order (C3)."""
        if ms <= 0:
            raise ValueError(f"row seq={seq}: a tick advances time by a positive ms, not {ms}")
        target = self.now + ms
        interval = self.strategy.interval
        while self.next_emit is not None and self.next_emit <= target:
            self.now = self.next_emit
            for r in self.readers:
                r.periodic_emit()
            self.next_emit += interval
        self.now = target

    def _align(self, seq: int) -> None:
        """C4: every reader samples, checks and reports (WM-22, WM-25, WM-26); then the coordinator
        announces the minimum plus the drift (WM-23, WM-24) and each reader that reported checks
        again; a reader released by a check reads what it held back at once."""
        if self.strategy.max_drift is None:
            raise ValueError(f"row seq={seq}: align needs a strategy with max_drift (WM-29)")
        for i, r in enumerate(self.readers):
            r.align.sample()
            report = r.align.report()
            if report is not None:
                self.reports[i] = report
            r.pump()
        coordinator = AlignmentCoordinator(self.strategy.max_drift)
        coordinator.reports = self.reports
        announcement = coordinator.announcement()
        if announcement is None:
            return
        max_allowed, receivers = announcement
        self._row("max_allowed", watermark=max_allowed)
        for i in receivers:
            self.readers[i].align.announce(max_allowed)
            self.readers[i].pump()

    def _failover(self) -> None:
        """WM-16: every reader starts again (generators, watermarks, outputs, timers, samplers) with
        the splits it had, registered again at once in the same order (WM-4), and reads the records
        still available; the coordinator forgets its reports; the periodic timer counts anew."""
        self._row("restarted")
        kept = [(list(r.splits), list(r.available)) for r in self.readers]
        self.readers = [self._fresh(i) for i in range(len(self.readers))]
        for r, (splits, available) in zip(self.readers, kept):
            for split in splits:
                r.add_split(split)
            r.available = available
        for r in self.readers:
            r.pump()
        self.reports.clear()
        self.next_emit = self.now + self.strategy.interval if self.strategy.interval else None

    def _end(self) -> None:
        """C5, WM-15 (D2): every reader reads what it holds back; every split finishes; every reader
        sends MAX (after ACTIVE if idle)."""
        for r in self.readers:
            r.read_to_end()
        for r in self.readers:
            r.finish_all()
        for r in self.readers:
            r.end(self._send)
        self.ended = True

    # ---- state between micro-batches -------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {"now": self.now, "next_emit": self.next_emit, "pos": self.pos, "ended": self.ended,
                "reader_of": [[s, r] for s, r in self.reader_of.items()], "closed": sorted(self.closed),
                "payloads": [[s, p] for s, p in self.payloads.items()],
                "reports": [[r, v] for r, v in self.reports.items()],
                "readers": [snapshot_reader(r) for r in self.readers]}

    def _restore(self, d: Mapping[str, Any]) -> None:
        self.now, self.next_emit, self.pos, self.ended = d["now"], d["next_emit"], d["pos"], d["ended"]
        self.reader_of = {s: r for s, r in d["reader_of"]}
        self.closed = set(d["closed"])
        self.payloads = {s: list(p) for s, p in d["payloads"]}
        self.reports = {r: v for r, v in d["reports"]}
        for r, saved in zip(self.readers, d["readers"]):
            restore_reader(r, saved)


def _strategy_of(strategies: Mapping[str, WatermarkStrategy] | WatermarkStrategy, stream: str
                 ) -> WatermarkStrategy:
    if isinstance(strategies, WatermarkStrategy):
        return strategies
    if stream not in strategies:
        raise ValueError(f"stream {stream!r} has no strategy")
    return strategies[stream]


def _columns(frames: Iterator[Any], names: list[str]) -> list[tuple[Any, ...]]:
    """The group's rows as Python tuples (no numpy scalars: they go into JSON)."""
    import pandas as pd

    parts = list(frames)
    frame = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    return list(zip(*(frame[n].tolist() for n in names)))


def _names(schema: str) -> list[str]:
    return [f.split()[0] for f in schema.split(", ")]


def _frame(rows: list[tuple[Any, ...]], schema: str) -> Any:
    """Rows as a pandas DataFrame of `schema`'s columns (built column by column: cheaper)."""
    import pandas as pd

    return pd.DataFrame(dict(zip(_names(schema), map(list, zip(*rows)))))


def _source_rows(strategy: WatermarkStrategy, stream: str, rows: list[tuple[Any, ...]],
                 saved: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """The source of stream `stream` over its log rows (seq, op, split, reader, ts, ms, value) of
    one micro-batch, in `seq` order, from its state `saved`: the new state and what it sent (rows
    of SENT_SCHEMA)."""
    stage = SourceStage(strategy, saved)
    for seq, op, split, reader, ts, ms, value in sorted(rows, key=lambda r: r[0]):
        stage.apply(seq, op, split, reader, ts, ms, value)
    return stage.snapshot(), [(stream, *r) for r in stage.rows]


def _valve_rows(channels: int, stream: str, target: int, sent: list[tuple[Any, ...]],
                saved: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """Downstream task `target` of stream `stream`: what the readers sent (SENT_SCHEMA rows), in
    their order (`pos`), through the valve restored from `saved` (WM-17..WM-21); out go the records,
    what the readers sent, the valve's outputs right after the input that caused them, and the
    events (`restarted` starts the valve anew, WM-16).  The new state and the output rows
    (OUTPUT_SCHEMA)."""

    out: list[tuple[Any, ...]] = []
    at = [0]  # the seq of the row being handled
    idx = 0

    def emit(kind: str, **f: Any) -> None:
        put(kind, -1, -1, 0, f.get("value", 0), f.get("idle", False), None)

    def put(kind: str, reader: int, split: int, ts: int, watermark: int, idle: bool, value: Any) -> None:
        out.append((stream, target, idx + len(out), at[0], kind, reader, split, ts, watermark, idle,
                    valve.last_watermark, value))

    valve = StatusWatermarkValve(channels, emit)
    if saved is not None:
        idx = saved["idx"]
        restore_valve(valve, saved["valve"])
    for _, _, at[0], kind, reader, split, ts, watermark, idle, value in sorted(sent, key=lambda r: r[1]):
        if kind == "restarted":
            valve = StatusWatermarkValve(channels, emit)  # WM-16: every channel at MIN and active
        put(kind, reader, split, ts, watermark, idle, value)
        if kind == "watermark":
            valve.input_watermark(watermark, reader)
        elif kind == "status":
            valve.input_status(idle, reader)
    return {"idx": idx + len(out), "valve": snapshot_valve(valve)}, out


LOG_NAMES = ["seq", "op", "split", "reader", "ts", "ms", "value"]
SENT_NAMES = ["stream", "pos", "seq", "kind", "reader", "split", "ts", "watermark", "idle", "value"]


def source_task(strategy: WatermarkStrategy, stream: str, frames: Iterator[Any],
                saved: str | None) -> tuple[str, Any]:
    """`_source_rows` on pandas frames of the log and JSON state: the new state and what the source
    sent (a DataFrame of SENT_SCHEMA, or None)."""
    state, rows = _source_rows(strategy, stream, _columns(frames, LOG_NAMES),
                               None if saved is None else json.loads(saved))
    return json.dumps(state), (_frame(rows, SENT_SCHEMA) if rows else None)


def valve_task(channels: int, stream: str, target: int, frames: Iterator[Any],
               saved: str | None) -> tuple[str, Any]:
    """`_valve_rows` on pandas frames of SENT_SCHEMA and JSON state: the new state and the output
    (a DataFrame of OUTPUT_SCHEMA, or None)."""
    state, out = _valve_rows(channels, stream, target, _columns(frames, SENT_NAMES),
                             None if saved is None else json.loads(saved))
    return json.dumps(state), (_frame(out, OUTPUT_SCHEMA) if out else None)


def _routed(sent: list[tuple[Any, ...]], downstream: int) -> list[list[tuple[Any, ...]]]:
    """What each downstream task gets: a record goes to task `split mod downstream`, every other row
    to every task (in Flink, records are partitioned and watermarks and statuses broadcast)."""
    out: list[list[tuple[Any, ...]]] = [[] for _ in range(downstream)]
    for r in sent:
        if r[3] == "record":
            out[r[5] % downstream].append(r)
        else:
            for rows in out:
                rows.append(r)
    return out


def stream_task(strategy: WatermarkStrategy, stream: str, downstream: int, rows: list[tuple[Any, ...]],
                saved: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """One stream's micro-batch: its log rows through its source, what that sent routed to its
    `downstream` tasks' valves; the new state (the source's and each valve's) and the output rows."""
    source, sent = _source_rows(strategy, stream, rows, None if saved is None else saved["source"])
    valves = [None] * downstream if saved is None else saved["valves"]
    out: list[tuple[Any, ...]] = []
    for target, part in enumerate(_routed(sent, downstream)):
        if part:
            valves[target], rows_out = _valve_rows(strategy.readers, stream, target, part, valves[target])
            out += rows_out
    return {"source": source, "valves": valves}, out


def stream_group(strategies: Any, downstream: int, on_state_update: Callable[[], None] | None,
                 key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """The stateful function of `applyInPandasWithState`: one stream's micro-batch (`stream_task`)
    from its GroupState and back.  `on_state_update` (flink_watermarks' hook) runs right after the
    group's state update, before its output is yielded: a test harness may fail the task there, and
    Spark then runs it again from the last committed state store version."""
    stream = key[0]
    saved = json.loads(state.get[0]) if state.exists else None
    new, out = stream_task(_strategy_of(strategies, stream), stream, downstream,
                           _columns(frames, LOG_NAMES), saved)
    state.update((json.dumps(new),))
    if on_state_update is not None:
        on_state_update()
    if out:
        yield _frame(out, OUTPUT_SCHEMA)


# --------------------------------------------------------------------------
# The public function
# --------------------------------------------------------------------------


def _null_error(where: list[tuple[str, Any]], column: str, rule: str, why: str) -> Any:
    """The running query fails naming the row, the null column and the rule (no silent default)."""
    return _row_error(where, f"column {column!r} is null; {why} ({rule})")


def _source_log(events: Any, stream: str | None) -> Any:
    """The user's columns as LOG_SCHEMA (missing optional columns filled in).  A record row with a
    null `split` or `ts` fails the query naming the row (WM-4, WM-2); `seq` is never null."""
    from pyspark.sql import functions as F

    cols = set(events.columns)
    for required in ("seq", "split", "ts"):
        _need(required in cols, "events", "WM-1",
              f"column {required!r} is missing: a source log has seq (the order rows became available), "
              "split and ts")
    _need(stream is None or stream in cols, "stream", "WM-29", f"column {stream!r} is not in events")

    def col(name: str, kind: str, default: Any) -> Any:
        if name not in cols:
            return F.lit(default).cast(kind)
        return F.coalesce(F.col(name).cast(kind), F.lit(default).cast(kind))

    op = col("op", "string", "record")
    where = [("seq", F.col("seq")), ("split", F.col("split"))]
    record = op == F.lit("record")
    seq = F.when(F.col("seq").isNull(), _null_error(where, "seq", "WM-1", "seq orders the source log")
                 ).otherwise(F.col("seq").cast("long"))
    split = F.when(record & F.col("split").isNull(), _null_error(
        where, "split", "WM-4", "a record belongs to a split, whose generator it feeds")).otherwise(
        col("split", "int", -1))
    ts = F.when(record & F.col("ts").isNull(), _null_error(
        where, "ts", "WM-2", "a record needs an event time for its split's generator")).otherwise(
        col("ts", "long", 0))
    return events.select(
        (F.col(stream).cast("string") if stream else F.lit("")).alias("stream"),
        seq.alias("seq"), op.alias("op"), split.alias("split"), col("reader", "int", -1).alias("reader"),
        ts.alias("ts"), col("ms", "long", 0).alias("ms"),
        (F.col("value").cast("string") if "value" in cols else F.lit(None).cast("string")).alias("value"))


def flink_watermarks(events: Any, strategy: WatermarkStrategy | Mapping[Any, WatermarkStrategy], *,
                     stream: str | None = None, downstream: int = 1,
                     on_state_update: Callable[[], None] | None = None) -> Any:
    """Flink's watermarks for a streaming DataFrame of events in splits (the module docstring has the
    columns in and out): per split a generator (bounded out-of-orderness, periodic or punctuated:
    WM-1..WM-5, WM-8), per reader the combination of its splits (WM-6, WM-7, WM-9..WM-12),
    idleness (WM-13, WM-14), end of input (WM-15), failover (WM-16), the valve of each downstream
    task over the readers' channels (WM-17..WM-21, spec D1) and alignment (WM-22..WM-26).

    `strategy`: one `WatermarkStrategy`, or a mapping stream key -> strategy (with `stream`, the
    column naming each row's independent source; keys are compared as strings).  `downstream`: the
    downstream tasks (valves); a record goes to task `split mod downstream`.  `on_state_update`: a
    hook for test harnesses (a picklable callable without arguments, run in the stateful task right
    after each group's state update, before its output; None in a real query): the stream runner
    (stream.py) passes one that fails the task on purpose, mid-partition, so that Spark runs it
    again from the last committed state.  Returns the streaming
    DataFrame of OUTPUT_SCHEMA, for `outputMode("append")`.

    ValueError, naming the parameter and the rule, before any job runs: an invalid strategy
    (WatermarkStrategy), a missing column, a mapping without `stream`, `downstream` < 1, a batch
    DataFrame, alignment with speculative execution on (WM-27)."""

    if isinstance(strategy, Mapping):
        _need(stream is not None, "stream", "WM-17", "a mapping of strategies needs the stream column")
        _need(all(isinstance(s, WatermarkStrategy) for s in strategy.values()), "strategy", "WM-2",
              "every value of the mapping is a WatermarkStrategy")
        strategies: Any = {str(k): v for k, v in strategy.items()}
        aligned = any(s.max_drift is not None for s in strategies.values())
    else:
        _need(isinstance(strategy, WatermarkStrategy), "strategy", "WM-2",
              f"a WatermarkStrategy, not {type(strategy).__name__}")
        strategies, aligned = strategy, strategy.max_drift is not None
    _need(_is_int(downstream) and downstream >= 1, "downstream", "WM-17",
          f"at least one downstream task, not {downstream!r}")
    _need(bool(getattr(events, "isStreaming", False)), "events", "WM-3",
          "a streaming DataFrame (spark.readStream...): processing time and state cross micro-batches")
    speculation = str(events.sparkSession.conf.get("spark.speculation", "false")).lower()
    _need(not (aligned and speculation == "true"), "strategy.max_drift", "WM-27",
          "watermark alignment is refused with speculative execution (spark.speculation) on")
    return _source_log(events, stream).groupBy("stream").applyInPandasWithState(
        functools.partial(stream_group, strategies, downstream, on_state_update), struct(OUTPUT_SCHEMA),
        struct(STATE_SCHEMA), "append", "NoTimeout")


# --------------------------------------------------------------------------
# Event-time windows closed by Flink's watermark: event_time_windows
# --------------------------------------------------------------------------

LATE_MODES = ("drop", "emit")
WINDOW_NAMES = ["split", "position", "ts", "key", "value"]
WINDOW_STATE = "state string"
# What the stateful function yields (times in ms); event_time_windows' select gives the user's types.
WINDOW_FIELDS = [("kind", "string"), ("key", "string"), ("window_start", "long"), ("window_end", "long"),
                 ("count", "long"), ("sum", "double"), ("split", "int"), ("position", "long"),
                 ("event_time", "long"), ("value", "double"), ("watermark", "long"),
                 ("processing_time", "long")]
WINDOW_KINDS = ("window", "late", "watermark")
Window = tuple[Any, int]  # (key, start)


class WindowOperator:
    """The window operator's task in `event_time_windows`: the valve over the readers' channels
    (WM-17..WM-21) and the tumbling windows of `size` ms, each (key, start) -> [count, sum, values
    counted in sum].  `feed` takes what the readers emitted and sent, in order; each record meets
    the valve's watermark at its point in that order."""

    def __init__(self, readers: int, size: int, late: str, watermark_rows: bool,
                 saved: Mapping[str, Any] | None):
        self.size = size
        self.late = late
        self.watermark_rows = watermark_rows
        self.valve = StatusWatermarkValve(readers, self._on_valve)
        self.windows: dict[Window, list[Any]] = {}
        self.out: list[tuple[Any, ...]] = []
        self.now = 0
        if saved is not None:
            restore_valve(self.valve, saved["valve"])
            self.windows = {(k, s): acc for k, s, *acc in saved["windows"]}

    def feed(self, now: int, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Rows (kind, reader, split, ts, watermark, idle, payload) into the valve and the windows;
        the output rows."""
        self.now = now
        for kind, reader, split, ts, watermark, idle, payload in rows:
            if kind == "watermark":
                self.valve.input_watermark(watermark, reader)
            elif kind == "status":
                self.valve.input_status(idle, reader)
            elif kind == "record":
                self._record(split, ts, *payload)
        return self.out

    def _record(self, split: int, ts: int, key: Any, value: Any, position: int) -> None:
        """A record into its window, or late: its window's last ms is at or below the watermark (Flink's
        WindowOperator.isWindowLate with allowed lateness 0: the window has fired already)."""
        start = ts - ts % self.size
        watermark = self.valve.last_watermark
        if start + self.size - 1 <= watermark:
            if self.late == "emit":
                self.out.append(("late", key, start, start + self.size, None, None, split, position, ts,
                                 value, watermark, self.now))
            return
        acc = self.windows.setdefault((key, start), [0, 0.0, 0])
        acc[0] += 1
        if value is not None:
            acc[1] += value
            acc[2] += 1

    def _on_valve(self, kind: str, **f: Any) -> None:
        """The valve's output: a higher watermark fires every window whose last ms it reaches
        (Flink's EventTimeTrigger: at watermark >= window end - 1), in order of end and key."""
        if kind != "output_watermark":
            return
        watermark = f["value"]
        if self.watermark_rows:
            self.out.append(("watermark", None, None, None, None, None, None, None, None, None,
                             watermark, self.now))
        due = [w for w in self.windows if w[1] + self.size - 1 <= watermark]
        for key, start in sorted(due, key=lambda w: (w[1], w[0] is not None, w[0] or "")):
            count, total, counted = self.windows.pop((key, start))
            self.out.append(("window", key, start, start + self.size, count, total if counted else None,
                             None, None, None, None, watermark, self.now))

    def snapshot(self) -> dict[str, Any]:
        return {"valve": snapshot_valve(self.valve),
                "windows": [[k, s, *acc] for (k, s), acc in self.windows.items()]}


def source_step(src: SourceStage, strategy: WatermarkStrategy, started: bool, now: int,
                records: list[tuple[Any, ...]]) -> int:
    """The readers of `src` in the micro-batch at `now`: first, if `interval` ms have passed since
    the last one, one periodic emission at `now` (WM-3), readers in index order (C3), then one
    alignment round (C4) if the strategy aligns; then the batch's records (split, position, ts,
    key, value) are read, split by split in ascending split order, each split's in `position`
    order (each record goes out before its generator sees it, WM-1; a punctuated generator's
    watermark follows it at once, WM-8).  What they emitted and sent is in `src.rows`; the number
    of those rows the emission gave."""
    src.now = now
    interval = strategy.interval
    if not started:  # WM-3: the first emission `interval` after the first micro-batch
        src.next_emit = now + interval if interval else None
    elif src.next_emit is not None and src.next_emit <= now:
        for r in src.readers:  # WM-3, WM-13: one emission, as a timer that fires late fires once
            r.periodic_emit()
        if strategy.max_drift is not None:
            src._align(-1)
        src.next_emit = now + interval
    emitted = len(src.rows)
    for split, position, ts, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        src.seq = position
        src._record(split, -1, ts, [key, value, position])  # reader: split mod readers
    return emitted


class WindowStage:
    """One source's micro-batch in `event_time_windows` (one stateful group), at processing time
    `now` (the micro-batch's timestamp): its readers (SourceStage: per-split generators,
    multiplexer, idleness, alignment; `source_step`) and the window operator's task
    (`WindowOperator`), fed what the readers emitted and sent, in order."""

    def __init__(self, strategy: WatermarkStrategy, size: int, late: str, watermark_rows: bool,
                 saved: Mapping[str, Any] | None):
        self.strategy = strategy
        self.source = SourceStage(strategy, None if saved is None else saved["source"])
        self.started = saved is not None
        self.operator = WindowOperator(strategy.readers, size, late, watermark_rows, saved)

    def run(self, now: int, records: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The micro-batch at `now`: records (split, position, ts, key, value); the output rows."""
        source_step(self.source, self.strategy, self.started, now, records)
        self.started = True
        rows = [(kind, reader, split, ts, watermark, idle, payload)
                for _, _, kind, reader, split, ts, watermark, idle, payload in self.source.rows]
        self.source.rows.clear()
        return self.operator.feed(now, rows)

    def snapshot(self) -> dict[str, Any]:
        return {"source": self.source.snapshot(), **self.operator.snapshot()}


def _window_frames(frames: Iterator[Any]) -> list[tuple[Any, ...]]:
    """The group's rows of one micro-batch as Python values (a null value as None), none on a timeout."""
    parts = [f for f in frames if len(f)]
    if not parts:
        return []
    rows = _columns(iter(parts), WINDOW_NAMES)
    return [(s, p, t, k, None if v is None or v != v else float(v)) for s, p, t, k, v in rows]


def window_group(strategy: WatermarkStrategy, size: int, late: str, watermark_rows: bool,
                 key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """The stateful function of `event_time_windows`' `applyInPandasWithState`: the source's
    micro-batch (`WindowStage`) at Spark's processing time from its GroupState and back, with a
    processing-time timeout at the next periodic emission so that a batch without data runs it."""
    now = int(state.getCurrentProcessingTimeMs())
    saved = json.loads(state.get[0]) if state.exists else None
    stage = WindowStage(strategy, size, late, watermark_rows, saved)
    out = stage.run(now, _window_frames(frames))
    state.update((json.dumps(stage.snapshot()),))
    next_emit = stage.source.next_emit
    if next_emit is not None:  # Spark times out once its batch timestamp is above now + duration
        state.setTimeoutDuration(max(1, next_emit - 1 - now))
    if out:
        yield _pandas(WINDOW_FIELDS, out)


_PANDAS = {"string": object, "long": "Int64", "int": "Int32", "double": "Float64", "boolean": "boolean"}


def _pandas(fields: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> Any:
    import pandas as pd

    columns = list(zip(*rows))
    return pd.DataFrame({name: pd.Series(list(values), dtype=_PANDAS[kind])
                         for (name, kind), values in zip(fields, columns)})


# --------------------------------------------------------------------------
# event_time_windows(parallel=True): the readers in parallel, then the window operator
# --------------------------------------------------------------------------

# What a reader's group sends to the window operator: `phase` 0 for its periodic emission's rows, 1
# for what its records gave; `pos` the order within the reader's micro-batch.
SENT_FIELDS = [("reader", "int"), ("phase", "int"), ("pos", "long"), ("kind", "string"), ("split", "int"),
               ("ts", "long"), ("watermark", "long"), ("idle", "boolean"), ("key", "string"),
               ("value", "double"), ("position", "long")]
SENT_KINDS = ("record", "watermark", "status")


def reader_step(strategy: WatermarkStrategy, reader: int, now: int, records: list[tuple[Any, ...]],
                saved: Mapping[str, Any] | None) -> tuple[dict[str, Any], int | None, list[tuple[Any, ...]]]:
    """One reader (`split mod readers`) in its own group: `source_step` on a one-reader SourceStage
    restored from `saved`; its new state, its next periodic emission, and what it emitted and sent
    (SENT_FIELDS rows)."""
    import dataclasses

    one = dataclasses.replace(strategy, readers=1)
    src = SourceStage(one, saved)
    emitted = source_step(src, one, saved is not None, now, records)
    out = []
    for i, (_, _, kind, _, split, ts, watermark, idle, payload) in enumerate(src.rows):
        if kind in SENT_KINDS:
            k, v, p = payload if kind == "record" else (None, None, None)
            out.append((reader, 0 if i < emitted else 1, i, kind, split, ts, watermark, idle, k, v, p))
    src.rows.clear()
    return src.snapshot(), src.next_emit, out


def reader_processor(strategy: WatermarkStrategy) -> Any:
    """The `StatefulProcessor` of the readers' `transformWithStateInPandas` (time mode
    ProcessingTime): `reader_step` on each micro-batch with records and on each expired timer, the
    state a JSON value, and one timer 1 ms before the next periodic emission (Spark fires it in a
    micro-batch whose timestamp has passed it; the emission happens there once `interval` has)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class ReaderProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.state = handle.getValueState("reader", _struct([("state", "string")]))

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            yield from self._step(key, _window_frames(rows), timerValues)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
            yield from self._step(key, [], timerValues)

        def _step(self, key: Any, records: list[tuple[Any, ...]], timerValues: Any) -> Iterator[Any]:
            now = int(timerValues.getCurrentProcessingTimeInMs())
            saved = json.loads(self.state.get()[0]) if self.state.exists() else None
            new, next_emit, out = reader_step(strategy, int(key[0]), now, records, saved)
            self.state.update((json.dumps(new),))
            for t in list(self.handle.listTimers()):
                self.handle.deleteTimer(t)
            if next_emit is not None:
                self.handle.registerTimer(next_emit - 1)
            if out:
                yield _pandas(SENT_FIELDS, out)

        def close(self) -> None:
            pass

    return ReaderProcessor()


def operator_group(strategy: WatermarkStrategy, size: int, late: str, watermark_rows: bool,
                   key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """The stateful function of the window operator's task after the readers' groups: their rows of
    the micro-batch in the order of one group (every reader's emission, readers in index order,
    C3; then each reader's records, readers in index order) into the WindowOperator.  A reader
    that has sent nothing (it has no split) goes idle as its main output would (WM-12): once
    `idleness` has passed after the first emission; it comes back active with its first row."""
    now = int(state.getCurrentProcessingTimeMs())
    saved = json.loads(state.get[0]) if state.exists else None
    op = WindowOperator(strategy.readers, size, late, watermark_rows, saved)
    start = now if saved is None else saved["start"]
    heard = set() if saved is None else set(saved["heard"])
    silent = set() if saved is None else set(saved["silent"])  # marked idle here
    parts = [f for f in frames if len(f)]
    rows = _columns(iter(parts), [n for n, _ in SENT_FIELDS]) if parts else []
    rows.sort(key=lambda r: (r[1], r[0], r[2]))  # phase, reader, pos
    fed: list[tuple[Any, ...]] = []
    idleness = strategy.idleness
    timeout = idleness is not None and len(heard) < strategy.readers
    if idleness is not None and timeout and now - start - strategy.interval > idleness:  # WM-12, WM-13
        for r in sorted(set(range(strategy.readers)) - heard - silent):
            fed.append(("status", r, None, None, None, True, None))
            silent.add(r)
    for reader, _, _, kind, split, ts, watermark, idle, k, v, p in rows:
        heard.add(reader)
        if reader in silent:
            fed.append(("status", reader, None, None, None, False, None))
            silent.discard(reader)
        payload = [k, None if v is None or v != v else float(v), int(p)] if kind == "record" else None
        fed.append((kind, reader, split, ts, watermark, idle, payload))
    out = op.feed(now, fed)
    state.update((json.dumps({**op.snapshot(), "start": start, "heard": sorted(heard),
                              "silent": sorted(silent)}),))
    if timeout:
        state.setTimeoutDuration(max(1, strategy.interval))
    if out:
        yield _pandas(WINDOW_FIELDS, out)


def _struct(fields: list[tuple[str, str]]) -> Any:
    from pyspark.sql.types import (
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    types = {"string": StringType(), "long": LongType(), "int": IntegerType(), "double": DoubleType(),
             "boolean": BooleanType()}
    return StructType([StructField(n, types[t]) for n, t in fields])


def _window_ms(window: Any) -> int:
    import datetime

    if isinstance(window, datetime.timedelta):
        ms = window / datetime.timedelta(milliseconds=1)
        _need(ms == int(ms) and ms > 0, "window", "WM-28",
              f"a tumbling window is a positive whole number of ms, not {window!r}")
        return int(ms)
    _need(_is_int(window) and window > 0, "window", "WM-28",
          f"a tumbling window is a positive number of ms (or a timedelta), not {window!r}")
    return int(window)


def _row_error(where: list[tuple[str, Any]], message: str) -> Any:
    """Spark's `raise_error`, its message naming the row by `where` (label, column) pairs."""
    from pyspark.sql import functions as F

    parts: list[Any] = [F.lit("row")]
    for label, c in where:
        parts += [F.lit(f" {label}="), F.coalesce(c.cast("string"), F.lit("null"))]
    parts.append(F.lit(f": {message}"))
    return F.raise_error(F.concat(*parts))


def _check_columns(events: Any, split_col: str, time_col: str, value_col: str | None,
                   key_col: str | None, order_col: str | None) -> bool:
    """ValueError for a missing column or one of the wrong type; whether the event time is a
    timestamp (else an integer of ms)."""
    from pyspark.sql.types import (
        ByteType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        ShortType,
        TimestampNTZType,
        TimestampType,
    )

    integral = (ByteType, ShortType, IntegerType, LongType)
    types = {f.name: f.dataType for f in events.schema.fields}
    for parameter, name in (("split_col", split_col), ("time_col", time_col), ("value_col", value_col),
                            ("key_col", key_col), ("order_col", order_col)):
        _need(name is None or name in types, parameter, "WM-4",
              f"column {name!r} is not in events (columns: {', '.join(types)})")

    def kind(name: str | None) -> str:
        return types[name].simpleString() if name else ""

    is_time = isinstance(types[time_col], (TimestampType, TimestampNTZType))
    _need(isinstance(types[split_col], integral), "split_col", "WM-4",
          f"the split column {split_col!r} is an integer (a Kafka partition), not {kind(split_col)}")
    _need(is_time or isinstance(types[time_col], integral), "time_col", "WM-2",
          f"the event time {time_col!r} is a timestamp or an integer of ms, not {kind(time_col)}")
    numeric = (*integral, FloatType, DoubleType, DecimalType)
    _need(value_col is None or isinstance(types[value_col], numeric), "value_col", "WM-2",
          f"the value column {value_col!r} is numeric (it is summed), not {kind(value_col)}")
    _need(order_col is None or isinstance(types[order_col], integral), "order_col", "WM-1",
          f"the order column {order_col!r} is an integer (a Kafka offset), not {kind(order_col)}")
    return is_time


def _not_null(c: Any, where: list[tuple[str, Any]], message: str) -> Any:
    from pyspark.sql import functions as F

    return F.when(c.isNull(), _row_error(where, message))


def _window_input(events: Any, split_col: str, time_col: str, value_col: str | None, key_col: str | None,
                  order_col: str | None) -> tuple[Any, bool]:
    """The user's columns as (source, split, position, ts, key, value), ts in ms; whether the event
    time is a timestamp.  A null split, event time or order column, or a negative split, fails the
    running query naming the row (split and position), the column and the rule."""
    from pyspark.sql import functions as F

    is_time = _check_columns(events, split_col, time_col, value_col, key_col, order_col)
    split, time = F.col(split_col), F.col(time_col)
    where = [(split_col, split), (order_col or time_col, F.col(order_col or time_col))]
    ms = F.unix_millis(time.cast("timestamp")) if is_time else time.cast("long")
    ts = _not_null(time, where, f"column {time_col!r} is null; a record needs an event time for its "
                   "split's generator (WM-2)").otherwise(ms)
    split_e = (_not_null(split, where, f"column {split_col!r} is null; a record belongs to a split, whose "
                         "generator it feeds (WM-4)")
               .when(split < 0, _row_error(where, f"column {split_col!r} is negative; splits are numbered "
                                           "from 0 (WM-29)")).otherwise(split.cast("int")))
    position = ts
    if order_col is not None:
        order = F.col(order_col)
        position = _not_null(order, where, f"column {order_col!r} is null; it orders the records of a "
                             "split (WM-1)").otherwise(order.cast("long"))
    key = F.col(key_col).cast("string") if key_col else F.lit(None).cast("string")
    value = F.col(value_col).cast("double") if value_col else F.lit(None).cast("double")
    return events.select(F.lit("").alias("source"), split_e.alias("split"), position.alias("position"),
                         ts.alias("ts"), key.alias("key"), value.alias("value")), is_time


def event_time_windows(events: Any, *, split_col: str, time_col: str, window: Any,
                       strategy: WatermarkStrategy, value_col: str | None = None, key_col: str | None = None,
                       order_col: str | None = None, late: str = "drop", watermark_rows: bool = False,
                       parallel: bool = False) -> Any:
    """Tumbling event-time windows of `window` ms (an int, or a timedelta) over a streaming DataFrame of
    events in splits, closed by Flink's watermark: the README's watermarks section has the whole
    story; in short:

    * `split_col`: the split of a row (an integer column, e.g. a Kafka source's `partition`);
      `time_col`: its event time (a timestamp, e.g. Kafka's `timestamp`, or an integer of ms);
      `value_col` (numeric, optional): what each window sums; `key_col` (optional): windows per key;
      `order_col` (integer, optional, e.g. Kafka's `offset`): the order of a split's rows in a
      micro-batch, by event time without it.  No sequence number, no processing-time rows.
    * Per split Flink's generator of `strategy` (bounded out-of-orderness `bound`: `max ts - bound -
      1`, WM-2; periodic every `interval` ms of processing time, WM-3, or punctuated, WM-8), the
      splits of reader `split mod readers` combined as the minimum over the active ones (WM-6,
      WM-7), idleness after `idleness` ms of processing time without a record (WM-13), alignment
      with `max_drift` (WM-25, WM-26), and the window operator's valve over the readers
      (WM-17..WM-21).  Processing time is Spark's: the micro-batch's timestamp
      (`GroupState.getCurrentProcessingTimeMs`); a periodic emission happens in the first
      micro-batch at least `interval` ms after the previous one, once; a processing-time timeout
      makes Spark run a micro-batch without data for it, so a quiet stream's splits go idle and its
      windows close.
    * Output (append mode), `kind` = `window`: `key`, `window_start`, `window_end` (the event
      time's type), `count`, `sum` (of `value_col`, null without values), emitted once, when the
      valve's watermark reaches `window_end - 1` (Flink's EventTimeTrigger); `watermark` (ms) is
      that watermark, `processing_time` (ms) the micro-batch's.  A record whose window has fired
      (`window_end - 1 <= watermark` when it is read: Flink's WindowOperator drops it) is dropped
      with `late="drop"`, or with `late="emit"` comes out as a row of `kind` = `late` with `split`,
      `position`, `event_time`, `key`, `value` and the `watermark` it missed.  With
      `watermark_rows=True`, each rise of the valve's watermark is a row of `kind` = `watermark`.

    Use a processing-time trigger (`trigger(processingTime=...)`): its micro-batches without data
    drive idleness and close windows.  With `availableNow` the query ends only with
    `spark.sql.streaming.noDataMicroBatches.enabled` false, and then processing time moves only
    with data.

    By default the whole source is one stateful group: its readers, the valve and the windows in one
    task per micro-batch.  With `parallel=True` each reader is a group of its own (`reader_processor`
    in Spark's `transformWithStateInPandas`, readers in parallel tasks; it needs the RocksDB state
    store provider) and the window operator a second stateful operator after a shuffle
    (`operator_group`), which orders the readers' rows as the one group does (every reader's
    emission first, readers in index order, C3; then their records, reader by reader, where the one
    group reads split by split: the same result unless `punctuated`).  Not with alignment (the
    coordinator's round needs every reader's report at once).  A reader without splits has no
    group: the window operator marks its channel idle once `idleness` has passed after the first
    emission, as its main output would (WM-12), and active with its first row; without `idleness`
    it holds the valve back, as in Flink.

    ValueError, naming the parameter and the rule, before the query starts: a batch DataFrame, a
    missing column or one of the wrong type, a non-positive window, an unknown `late`, a periodic
    strategy with `interval` 0 (no watermark at all), alignment with speculative execution (WM-27).
    In the running query, a null split, event time or order column, or a negative split, fails the
    query naming the row (split and position), the column and the rule."""
    from pyspark.sql import functions as F

    _need(bool(getattr(events, "isStreaming", False)), "events", "WM-3",
          "a streaming DataFrame (spark.readStream...): processing time and state cross micro-batches")
    _need(isinstance(strategy, WatermarkStrategy), "strategy", "WM-2",
          f"a WatermarkStrategy, not {type(strategy).__name__}")
    _need(strategy.interval > 0 or strategy.punctuated, "strategy.interval", "WM-3",
          "a periodic generator with no periodic emission (interval 0) gives no watermark, and no "
          "window would ever close")
    size = _window_ms(window)
    _need(late in LATE_MODES, "late", "WM-1", f"one of {', '.join(LATE_MODES)}, not {late!r}")
    _need(isinstance(watermark_rows, bool), "watermark_rows", "WM-18", f"a boolean, not {watermark_rows!r}")
    speculation = str(events.sparkSession.conf.get("spark.speculation", "false")).lower()
    _need(not (strategy.max_drift is not None and speculation == "true"), "strategy.max_drift", "WM-27",
          "watermark alignment is refused with speculative execution (spark.speculation) on")
    _need(isinstance(parallel, bool), "parallel", "WM-17", f"a boolean, not {parallel!r}")
    _need(not (parallel and strategy.max_drift is not None), "parallel", "WM-23",
          "alignment needs every reader in one group: the coordinator's round takes all their reports")
    provider = str(events.sparkSession.conf.get(PROVIDER_CONF, ""))
    _need(not parallel or provider == ROCKSDB, "parallel", "WM-17",
          f"the readers' groups run in Spark's transformWithStateInPandas, which needs {PROVIDER_CONF} = "
          f"{ROCKSDB} (set it in the session), not {provider or 'the default'!r}")
    rows, is_time = _window_input(events, split_col, time_col, value_col, key_col, order_col)
    timeout = "ProcessingTimeTimeout"
    if parallel:
        sent = rows.withColumn("reader", F.pmod(F.col("split"), F.lit(strategy.readers))).groupBy(
            "reader").transformWithStateInPandas(reader_processor(strategy), _struct(SENT_FIELDS), "Append",
                                                 "ProcessingTime")
        out = sent.withColumn("source", F.lit("")).groupBy("source").applyInPandasWithState(
            functools.partial(operator_group, strategy, size, late, watermark_rows), _struct(WINDOW_FIELDS),
            struct(WINDOW_STATE), "append", timeout)
    else:
        out = rows.groupBy("source").applyInPandasWithState(
            functools.partial(window_group, strategy, size, late, watermark_rows), _struct(WINDOW_FIELDS),
            struct(WINDOW_STATE), "append", timeout)
    if not is_time:
        return out
    times = {"window_start", "window_end", "event_time"}
    return out.select(*[F.timestamp_millis(F.col(n)).alias(n) if n in times else F.col(n)
                        for n, _ in WINDOW_FIELDS])


__all__ = ["MIN", "OUTPUT_SCHEMA", "WatermarkStrategy", "event_time_windows", "flink_watermarks"]
