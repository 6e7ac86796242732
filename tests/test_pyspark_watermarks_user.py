"""`event_time_windows` (adapters/pyspark/watermarks/api.py) the way a Spark user runs it: a Kafka-like
stream of `partition`, `offset`, `timestamp`, `value` rows, JSON files written into a watched
directory while the query runs, a processing-time trigger, a foreachBatch sink, a stop and a restart
from the checkpoint in the middle, and a stream that goes quiet at the end.

The truth is computed apart from the code under test:

* which micro-batch read which file, and at what processing time, is what Spark itself logged in
  the checkpoint (`offsets/<batch>`: `batchTimestampMs` and the file source's `logOffset`;
  `sources/0`: the files of each log offset; `commits/`: the batches that completed);
* `flink_model` replays those micro-batches through Flink's rules as spec/watermarks.md states them
  (bounded out-of-orderness per split, WM-2; a periodic emission at the first micro-batch at least
  `interval` after the last, WM-3; idleness, WM-12, WM-13; a reader's minimum over its active
  splits, WM-6, WM-7, WM-11; the valve's minimum over its active, aligned channels, WM-17..WM-21)
  and Flink's window operator (a window fires when the watermark reaches its end - 1; a record whose
  window has fired is late), giving the late rows and the final watermark;
* the windows are a batch Spark SQL `group by window(timestamp, '10 seconds')` over the same files
  without the late rows, those whose end - 1 the final watermark reaches.

`processAllAvailable()` cannot be used here: a stateful operator with a processing-time timeout
makes Spark construct a micro-batch (without data) at every trigger, so the query never reports
"no new data"; the test waits instead for micro-batches it counts in the query's progress.
"""

from __future__ import annotations

import datetime
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.adapters.pyspark.session import query_conf
from flink_semantics.adapters.pyspark.watermarks.api import (
    PROVIDER_CONF,
    ROCKSDB,
    WatermarkStrategy,
    event_time_windows,
)

pytestmark = pytest.mark.spark

MIN = -(2**63)
BASE = 1_700_000_000_000  # event time 0 of the test, in ms since the epoch (a multiple of 10 s)
WINDOW = 10_000
TRIGGER_MS = 500
STRATEGY = WatermarkStrategy(readers=2, bound=1000, interval=200, idleness=3000)
SCHEMA = "partition int, offset long, timestamp timestamp, value double"
HANG_GUARD_S = 900  # never a verdict: only against a hang
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"

# The files, in the order they are written: (partition, event time in s of the test, value); each
# partition's offsets count up.  Partition 0 is fast, partition 1 lags about ten seconds behind it,
# partition 2 goes quiet after the second file; readers: partitions 0 and 2 on reader 0, 1 on
# reader 1 (partition mod 2).  After the third file, files of partitions 0 and 1 alone (KEEP_ALIVE)
# keep coming until partition 2 has been quiet for longer than the idleness timeout.  The query
# restarts before the fifth file, and the stream is quiet after the sixth.
FILES = [
    [(0, 1.0, 1), (0, 2.0, 2), (1, 0.5, 3), (2, 1.5, 4)],
    [(0, 11.0, 5), (0, 12.0, 6), (1, 3.0, 7), (2, 8.0, 8)],
    [(0, 21.0, 9), (0, 23.0, 10), (1, 9.0, 11)],
    [(0, 31.0, 12), (0, 33.0, 13), (1, 14.0, 14)],
    [(0, 41.0, 15), (1, 19.0, 16), (1, 0.2, 17), (0, 5.0, 18)],  # the last two: behind a fired window
    [(1, 25.0, 19), (0, 45.0, 20)],
]
KEEP_ALIVE = [(0, 23.0, 0), (1, 9.0, 0)]
LATE_ANYWAY = {17.0, 18.0}  # the values of FILES[4]'s last two: late whatever the timing


# --------------------------------------------------------------------------
# The input files
# --------------------------------------------------------------------------


def _iso(ms: int) -> str:
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class Numbered:
    """Rows as JSON objects, each partition's offsets counting up from 0 in the order written."""

    def __init__(self) -> None:
        self.offsets: dict[int, int] = {}

    def rows(self, rows: list[tuple[int, float, int]]) -> list[dict[str, Any]]:
        out = []
        for p, s, v in rows:
            self.offsets[p] = self.offsets.get(p, -1) + 1
            out.append({"partition": p, "offset": self.offsets[p], "timestamp": _iso(BASE + int(s * 1000)),
                        "value": float(v)})
        return out


def write_file(directory: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """A JSON-lines file, complete when it appears (written aside, then renamed in)."""
    tmp = directory.parent / f".{name}"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(directory / name)


# --------------------------------------------------------------------------
# What Spark logged in the checkpoint
# --------------------------------------------------------------------------


def _log_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines()[1:] if line.strip()]


def logged_batches(checkpoint: Path) -> list[tuple[int, int, list[str]]]:
    """(batch id, batchTimestampMs, the files it read) of every committed micro-batch, in order."""
    files_of: dict[int, list[str]] = {}
    for f in (checkpoint / "sources" / "0").iterdir():
        if f.name.startswith("."):
            continue
        for line in _log_lines(f):
            entry = json.loads(line)
            files_of.setdefault(entry["batchId"], []).append(Path(entry["path"]).name)
    committed = sorted(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    out, previous = [], -1
    for batch in committed:
        lines = _log_lines(checkpoint / "offsets" / str(batch))
        stamp = json.loads(lines[0])["batchTimestampMs"]
        log_offset = json.loads(lines[1])["logOffset"] if lines[1] != "-" else -1
        names = [n for k in range(previous + 1, log_offset + 1) for n in files_of.get(k, [])]
        out.append((batch, stamp, sorted(set(names))))
        previous = max(previous, log_offset)
    return out


# --------------------------------------------------------------------------
# Flink's rules, from spec/watermarks.md, over the logged micro-batches
# --------------------------------------------------------------------------


class Timer:
    """WM-13: a periodic check that saw activity starts over; the first without starts the timer; a
    later one more than `timeout` after the start finds it idle."""

    def __init__(self, timeout: int) -> None:
        self.timeout, self.count, self.seen, self.start = timeout, 0, 0, None

    def idle_at(self, now: int) -> bool:
        if self.count != self.seen:
            self.seen, self.start = self.count, None
            return False
        if self.start is None:
            self.start = now
            return False
        return now - self.start > self.timeout


def flink_model(batches: list[tuple[int, list[dict[str, Any]]]], s: WatermarkStrategy, window: int
                ) -> tuple[set[tuple[int, int]], int, set[int]]:
    """The late rows (partition, offset), the final watermark of the window operator, and the
    partitions that were ever idle, for micro-batches (processing time, rows in the order read)."""
    max_ts: dict[int, int] = {}
    partial: dict[int, int] = {}
    idle: dict[int, bool] = {}
    timers: dict[int, Timer] = {}
    splits_of: dict[int, list[int]] = {r: [] for r in range(s.readers)}
    main = {r: Timer(s.idleness) for r in range(s.readers)}  # a reader's own generator never sees a record
    combined = {r: MIN for r in range(s.readers)}
    sent = {r: MIN for r in range(s.readers)}  # WM-11: the highest watermark the reader sent
    reader_idle = {r: False for r in range(s.readers)}
    channel = {r: {"wm": MIN, "idle": False, "aligned": True} for r in range(s.readers)}
    out = [MIN]
    late: set[tuple[int, int]] = set()
    ever_idle: set[int] = set()
    next_emit = None

    def valve_min() -> None:  # WM-18, WM-19 (the maximum when all are idle, D1), WM-20
        active = [c for c in channel.values() if not c["idle"]]
        if not active:
            top = max(c["wm"] for c in channel.values())
            out[0] = max(out[0], top)
            return
        aligned = [c["wm"] for c in active if c["aligned"]]
        if aligned and min(aligned) > out[0]:
            out[0] = min(aligned)

    def send_watermark(r: int, value: int) -> None:
        if value <= sent[r]:
            return
        sent[r] = value
        c = channel[r]
        if reader_idle[r]:  # ACTIVE before the watermark (WM-11); back aligned if caught up (WM-20)
            reader_idle[r] = False
            c["idle"], c["aligned"] = False, c["wm"] >= out[0]
            valve_min()
        c["wm"] = value
        if value >= out[0]:
            c["aligned"] = True
        valve_min()

    def emission(now: int) -> None:
        for r in range(s.readers):
            for p in splits_of[r]:  # WM-13: an idle generator gives nothing
                if timers[p].idle_at(now):
                    if not idle[p]:
                        ever_idle.add(p)
                    idle[p] = True
                else:
                    idle[p] = False
                    partial[p] = max(partial[p], max_ts[p] - s.bound - 1)  # WM-2, WM-5
            mine = splits_of[r]
            if mine:
                if all(idle[p] for p in mine):  # WM-6
                    candidate = max(partial[p] for p in mine)
                else:
                    candidate = min(partial[p] for p in mine if not idle[p])
                if candidate > combined[r]:  # WM-7
                    combined[r] = candidate
                    send_watermark(r, candidate)
            split_local_idle = bool(mine) and all(idle[p] for p in mine)
            if main[r].idle_at(now) and split_local_idle and not reader_idle[r]:  # WM-12
                reader_idle[r] = True
                c = channel[r]
                c["idle"], c["aligned"] = True, False
                valve_min()

    for now, rows in batches:
        if next_emit is None:
            if not rows:
                continue
            next_emit = now + s.interval  # the first micro-batch with data starts the clock
        elif now >= next_emit:
            emission(now)
            next_emit = now + s.interval
        for row in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
            p, ts = row["partition"], row["ts"]
            if p not in max_ts:  # WM-4, WM-10: a new split at MIN, active
                max_ts[p], partial[p], idle[p], timers[p] = MIN + s.bound + 1, MIN, False, Timer(s.idleness)
                splits_of[p % s.readers].append(p)
            start = ts - ts % window
            if start + window - 1 <= out[0]:
                late.add((p, row["offset"]))
            max_ts[p] = max(max_ts[p], ts)
            timers[p].count += 1
    return late, out[0], ever_idle


# --------------------------------------------------------------------------
# The query
# --------------------------------------------------------------------------


def _stamps(checkpoint: Path, after: int) -> list[int]:
    """The batchTimestampMs of the committed micro-batches after batch `after`, in order."""
    ids = sorted(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    return [json.loads(_log_lines(checkpoint / "offsets" / str(b))[0])["batchTimestampMs"]
            for b in ids if b > after]


class Progress:
    """The micro-batches of the queries seen so far, by batch id, from their progress reports."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = checkpoint
        self.batches: dict[int, dict[str, Any]] = {}

    def wait(self, query: Any, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            for p in query.recentProgress:
                self.batches[p["batchId"]] = p
            if done():
                return
            if query.exception() is not None:
                raise query.exception()
            assert time.monotonic() < deadline, f"hang guard: {what}"
            time.sleep(0.1)

    def rows_read(self) -> int:
        return sum(p["numInputRows"] for p in self.batches.values())

    def last_with_data(self) -> int:
        return max(b for b, p in self.batches.items() if p["numInputRows"])

    def idle_since(self, batch: int, timeout: int) -> bool:
        """Whether a split whose last record was read in micro-batch `batch` is idle: every
        micro-batch is a periodic emission (the trigger is longer than the interval); the first
        after `batch` resets the idleness timer, the second starts it, and a later one more than
        `timeout` after that finds it idle (WM-13); a trigger's worth of margin."""
        stamps = _stamps(self.checkpoint, batch)
        return len(stamps) >= 4 and stamps[-1] - stamps[1] > timeout + TRIGGER_MS


def _start(spark: Any, inbox: Path, checkpoint: Path, sink: Path, parallel: bool) -> Any:
    """The user's query: the JSON files as a stream, `event_time_windows`, a foreachBatch sink that
    writes each micro-batch's rows to `<batch>.json` (a re-run batch overwrites its file)."""
    from pyspark.sql import functions as F

    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inbox))
    with query_conf(spark, {PROVIDER_CONF: ROCKSDB} if parallel else {}):
        out = event_time_windows(events, split_col="partition", time_col="timestamp", order_col="offset",
                                 value_col="value", window=datetime.timedelta(seconds=10),
                                 strategy=STRATEGY, late="emit", parallel=parallel)

    def write(frame: Any, batch: int) -> None:
        rows = frame.select("kind", F.unix_millis("window_start").alias("start"), "count", "sum",
                            "split", "position").collect()
        if rows:
            tmp = sink / f".{batch}.json"
            tmp.write_text("".join(json.dumps(r.asDict()) + "\n" for r in rows))
            tmp.replace(sink / f"{batch}.json")

    with query_conf(spark, {PROVIDER_CONF: ROCKSDB} if parallel else {}):
        return (out.writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint))
                .trigger(processingTime=f"{TRIGGER_MS} milliseconds").start())


@pytest.fixture
def work() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="wm-user-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("parallel", [False, True], ids=["one-group", "parallel-readers"])
def test_windows_close_on_flinks_watermark_across_a_restart(spark: Any, work: Path, parallel: bool) -> None:
    """Partitions 0 (fast), 1 (lagging) and 2 (quiet after the second file), written file by file
    into the watched directory, the query restarted from its checkpoint before the fifth file: the
    windows emitted are the batch SQL windows of the rows that were not late, up to the final
    watermark; the late rows emitted are those Flink's rules make late in the micro-batches Spark
    logged; partition 2 went idle and did not hold the others back; the quiet stream closed the
    windows up to its last records (every partition idle: the maximum, WM-19).  The same with the
    readers as groups of their own before the window operator (`parallel`)."""
    from pyspark.sql import functions as F

    inbox, checkpoint, sink = work / "in", work / "checkpoint", work / "sink"
    inbox.mkdir()
    sink.mkdir()
    progress, numbering = Progress(checkpoint), Numbered()
    written = [0]
    query = _start(spark, inbox, checkpoint, sink, parallel)

    def put(name: str, rows: list[tuple[int, float, int]]) -> None:
        write_file(inbox, name, numbering.rows(rows))
        written[0] += len(rows)
        progress.wait(query, lambda: progress.rows_read() >= written[0], name)

    try:
        for i, rows in enumerate(FILES):
            if i == 4:  # a restart from the checkpoint in the middle
                query.stop()
                query = _start(spark, inbox, checkpoint, sink, parallel)
            put(f"{i:03d}.json", rows)
            if i == 1:
                quiet_from = progress.last_with_data()  # partition 2's last records
            if i == 2:  # partitions 0 and 1 go on until partition 2 is idle
                k = 0
                while not progress.idle_since(quiet_from, STRATEGY.idleness):
                    put(f"{i:03d}-{k:03d}.json", KEEP_ALIVE)
                    k += 1
        last = progress.last_with_data()
        progress.wait(query, lambda: progress.idle_since(last, STRATEGY.idleness), "the quiet end")
    finally:
        query.stop()

    rows_of = {}
    for f in sorted(inbox.iterdir()):
        rows_of[f.name] = [json.loads(line) for line in f.read_text().splitlines()]
    logged = logged_batches(checkpoint)
    assert sorted(n for _, _, names in logged for n in names) == sorted(rows_of)  # each file once
    batches = [(stamp, [{**r, "ts": _ms(r["timestamp"])} for n in names for r in rows_of[n]])
               for _, stamp, names in logged]
    late, final, ever_idle = flink_model(batches, STRATEGY, WINDOW)
    assert 2 in ever_idle
    values = {(r["partition"], r["offset"]): r["value"] for rows in rows_of.values() for r in rows}
    assert LATE_ANYWAY <= {values[k] for k in late}
    assert final >= BASE + 39_999  # the quiet end closed [30 s, 40 s)

    emitted = [json.loads(line) for b, _, _ in logged if (sink / f"{b}.json").exists()
               for line in (sink / f"{b}.json").read_text().splitlines()]
    events = spark.read.schema(SCHEMA).json(str(inbox))
    late_df = spark.createDataFrame(sorted(late), "partition int, offset long")
    truth = (events.join(late_df, ["partition", "offset"], "left_anti")
             .groupBy(F.window("timestamp", "10 seconds").alias("w"))
             .agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
             .where(F.unix_millis(F.col("w.end")) - 1 <= final)
             .select(F.unix_millis(F.col("w.start")).alias("start"), "count", "sum"))
    windows = sorted((r["start"], r["count"], r["sum"]) for r in emitted if r["kind"] == "window")
    assert windows == sorted(tuple(r) for r in truth.collect())
    assert {(r["split"], r["position"]) for r in emitted if r["kind"] == "late"} == late


def _ms(iso: str) -> int:
    t = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC)
    return round(t.timestamp() * 1000)


# --------------------------------------------------------------------------
# Bad options and bad rows
# --------------------------------------------------------------------------


def _events(spark: Any, directory: Path, schema: str = SCHEMA) -> Any:
    directory.mkdir(exist_ok=True)
    return spark.readStream.schema(schema).json(str(directory))


GOOD = {"split_col": "partition", "time_col": "timestamp", "window": 10_000, "strategy": STRATEGY}


@pytest.mark.parametrize(("change", "parameter", "rule"), [
    ({"split_col": "part"}, "split_col", "WM-4"),
    ({"time_col": "value"}, "time_col", "WM-2"),
    ({"value_col": "timestamp"}, "value_col", "WM-2"),
    ({"order_col": "nope"}, "order_col", "WM-4"),
    ({"window": 0}, "window", "WM-28"),
    ({"window": datetime.timedelta(microseconds=10)}, "window", "WM-28"),
    ({"late": "keep"}, "late", "WM-1"),
    ({"strategy": {"bound": 5}}, "strategy", "WM-2"),
    ({"strategy": WatermarkStrategy(interval=0)}, "strategy.interval", "WM-3"),
    ({"parallel": True, "strategy": WatermarkStrategy(max_drift=10)}, "parallel", "WM-23"),
    ({"parallel": True}, "parallel", "WM-17"),  # the session's default state store: not RocksDB
])
def test_bad_options_are_refused_before_the_query_starts(spark: Any, work: Path, change: dict[str, Any],
                                                         parameter: str, rule: str) -> None:
    """A missing column, a column of the wrong type, a non-positive window, an unknown `late`, a
    strategy that is not one or one that never emits a watermark, parallel readers with alignment
    or without the RocksDB state store: ValueError naming the parameter and the rule, and no query
    runs."""
    before = len(spark.streams.active)
    with query_conf(spark, {PROVIDER_CONF: HDFS}), \
            pytest.raises(ValueError, match=rf"^{parameter}: .*\({rule}\)$"):
        event_time_windows(_events(spark, work / "in"), **{**GOOD, **change})
    assert len(spark.streams.active) == before


def test_a_batch_dataframe_is_refused(spark: Any) -> None:
    """`event_time_windows` needs a streaming DataFrame (processing time and state cross micro-batches)."""
    batch = spark.createDataFrame([], SCHEMA)
    with pytest.raises(ValueError, match=r"^events: a streaming DataFrame"):
        event_time_windows(batch, **GOOD)


@pytest.mark.parametrize(("row", "column", "rule"), [
    ({"partition": 1, "offset": 3, "timestamp": None, "value": 1.0}, "timestamp", "WM-2"),
    ({"partition": None, "offset": 3, "timestamp": _iso(BASE), "value": 1.0}, "partition", "WM-4"),
])
def test_a_null_split_or_event_time_fails_the_query_naming_the_row(
        spark: Any, work: Path, row: dict[str, Any], column: str, rule: str) -> None:
    """A row with a null event time or split, among good ones, fails the running query with the
    row's split and offset, the column and the rule in the message: never a silent 0 or a split -1."""
    from pyspark.errors import StreamingQueryException

    inbox = work / "in"
    inbox.mkdir()
    good = {"partition": 0, "offset": 0, "timestamp": _iso(BASE), "value": 2.0}
    write_file(inbox, "000.json", [good, row])
    out = event_time_windows(_events(spark, inbox), **GOOD, order_col="offset")
    query = (out.writeStream.format("memory").queryName(f"wm_null_{column}")
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(processingTime=f"{TRIGGER_MS} milliseconds").start())
    try:
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(HANG_GUARD_S)
    finally:
        query.stop()
    message = str(failure.value)
    split = "null" if row["partition"] is None else str(row["partition"])
    assert f"row partition={split} offset=3: column '{column}' is null" in message
    assert f"({rule})" in message


def test_a_null_ts_in_a_source_log_fails_naming_the_row(spark: Any, work: Path) -> None:
    """`flink_watermarks`: a record row with a null `ts` fails the query naming its seq and split and
    the rule (it used to become event time 0)."""
    from flink_semantics.adapters.pyspark.watermarks.api import flink_watermarks
    from pyspark.errors import StreamingQueryException

    inbox = work / "log"
    inbox.mkdir()
    write_file(inbox, "000.json", [{"seq": 0, "split": 0, "ts": 5}, {"seq": 1, "split": 2, "ts": None}])
    out = flink_watermarks(_events(spark, inbox, "seq long, split int, ts long"), WatermarkStrategy())
    query = (out.writeStream.format("memory").queryName("wm_null_log")
             .option("checkpointLocation", str(work / "checkpoint")).trigger(availableNow=True).start())
    try:
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(HANG_GUARD_S)
    finally:
        query.stop()
    assert "row seq=1 split=2: column 'ts' is null" in str(failure.value)
    assert "(WM-2)" in str(failure.value)


# --------------------------------------------------------------------------
# The stateful function's stage, micro-batch by micro-batch, without Spark
# --------------------------------------------------------------------------


def test_the_window_stage_by_hand() -> None:
    """WindowStage over four micro-batches, its state through JSON between them as the state store
    keeps it: no emission in the first batch or before `interval` has passed (WM-3); the reader's
    watermark is the minimum over its splits (WM-6) less the bound; a window fires when the
    watermark reaches its end - 1, per key, with a null sum for a window without values; a record
    of a fired window is late and emitted with the watermark it missed."""
    from flink_semantics.adapters.pyspark.watermarks.api import WindowStage

    strategy = WatermarkStrategy(readers=1, bound=0, interval=100)
    batches = [
        (1000, [(0, 0, 3, "a", 1.0), (0, 1, 12, "b", 2.0), (1, 0, 5, "a", None), (1, 1, 1, "c", None)]),
        (1050, [(0, 2, 4, "a", 3.0)]),  # before the first emission at 1100: the watermark is MIN
        (1100, [(1, 2, 15, "a", 1.0)]),  # emission first: min(12, 5) - 1 = 4, nothing fires
        (1250, [(0, 3, 8, "b", 5.0)]),  # emission: min(12, 15) - 1 = 11: [0, 10) fires; then late
    ]
    saved, out = None, []
    for now, records in batches:
        stage = WindowStage(strategy, 10, "emit", False, saved)
        out.append(stage.run(now, records))
        saved = json.loads(json.dumps(stage.snapshot()))
    assert out[:3] == [[], [], []]
    assert out[3] == [
        ("window", "a", 0, 10, 3, 4.0, None, None, None, None, 11, 1250),
        ("window", "c", 0, 10, 1, None, None, None, None, None, 11, 1250),
        ("late", "b", 0, 10, None, None, 0, 3, 8, 5.0, 11, 1250),
    ]
    assert sorted([k, s] for k, s, *_ in saved["windows"]) == [["a", 10], ["b", 10]]


class FakeGroupState:
    """Just what operator_group uses of applyInPandasWithState's GroupState, its value kept as the
    state store keeps it (a JSON string)."""

    def __init__(self) -> None:
        self.value: tuple[str] | None = None
        self.now = 0

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple[str]:
        assert self.value is not None
        return self.value

    def update(self, value: tuple[str]) -> None:
        self.value = value

    def setTimeoutDuration(self, ms: int) -> None:  # noqa: N802
        assert ms > 0

    def getCurrentProcessingTimeMs(self) -> int:  # noqa: N802
        return self.now


def test_the_window_operator_of_parallel_readers_by_hand() -> None:
    """operator_group (parallel=True's window operator) with two readers of which only reader 0
    has sent anything: reader 1's channel holds the valve at MIN until `idleness` has passed after
    the first emission, then goes idle (WM-12) and the valve follows reader 0 (WM-19); a window
    fires when the watermark reaches its end - 1; reader 1's first row makes its channel active
    again, below the valve's watermark (WM-20), and its record of the fired window is late."""
    import pandas as pd
    from flink_semantics.adapters.pyspark.watermarks.api import SENT_FIELDS, operator_group

    strategy = WatermarkStrategy(readers=2, bound=0, interval=100, idleness=1000)
    names = [n for n, _ in SENT_FIELDS]

    def sent(*rows: tuple[Any, ...]) -> list[Any]:
        return [pd.DataFrame([dict(zip(names, r)) for r in rows])] if rows else []

    state = FakeGroupState()
    calls = [
        (1000, sent((0, 1, 0, "record", 0, 5, 0, False, None, 5.0, 0))),
        (1100, sent((0, 0, 0, "watermark", -1, 0, 4, False, None, None, None))),
        (2200, sent()),  # 2200 - 1000 - 100 > 1000: reader 1 idle, the valve at reader 0's 4
        (2300, sent((0, 0, 0, "watermark", -1, 0, 12, False, None, None, None))),
        (2400, sent((1, 1, 0, "record", 1, 3, 0, False, None, 1.0, 0))),
    ]
    out = []
    for now, frames in calls:
        state.now = now
        for frame in operator_group(strategy, 10, "emit", True, ("",), iter(frames), state):
            out += [tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False)]
    assert out == [
        ("watermark", None, None, None, None, None, None, None, None, None, 4, 2200),
        ("watermark", None, None, None, None, None, None, None, None, None, 12, 2300),
        ("window", None, 0, 10, 1, 5.0, None, None, None, None, 12, 2300),
        ("late", None, 0, 10, None, None, 1, 0, 3, 1.0, 12, 2400),
    ]
