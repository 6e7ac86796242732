"""The sources area the way a Spark user runs it: JSON-lines files written into a directory while a
streaming query reads it with the built-in file source (`Flip27Source`, format `flip27`) into
`IdempotentSink`; the query stopped and restarted from its checkpoint; a driver killed with SIGKILL
mid-stream and the query restarted.  The truth is a batch `spark.read.json` over the same files:
the committed output must equal it exactly once (no row lost, none twice).  Also a user's own
source on the FLIP-27 interface (flip27.py), its planner without Spark, and the options' errors.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

SCHEMA = "id long, file int, name string, score double"
HANG_GUARD_S = 900  # a hang guard only, far above what the work takes on a loaded machine
DRIVER = Path(__file__).resolve().parent / "flip27_driver.py"


def write_file(directory: Path, file: int, lines: int) -> None:
    """File `file` of `lines` JSON lines, written under a hidden name and renamed when complete (as
    for Spark's file source); ids are unique across files, some fields missing or null."""
    rows = []
    for k in range(lines):
        row: dict[str, Any] = {"id": file * 1000 + k, "file": file, "name": f"n{file}-{k}" * (1 + k % 3)}
        if k % 5:
            row["score"] = None if k % 7 == 0 else k / 4
        rows.append(json.dumps(row))
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".file-{file:03d}.json.tmp"
    tmp.write_text("\n".join(rows) + "\n")
    os.replace(tmp, directory / f"file-{file:03d}.json")


def truth(spark: Any, directory: Path) -> list[tuple[Any, ...]]:
    """The rows of every file, by Spark's batch JSON reader, sorted."""
    return sorted(tuple(r) for r in spark.read.schema(SCHEMA).json(str(directory)).collect())


def committed(spark: Any, out: Path, checkpoint: Path) -> list[tuple[Any, ...]]:
    """The committed micro-batches' rows (without their `batch` column), sorted, duplicates kept."""
    from flink_semantics.adapters.pyspark.sources.api import IdempotentSink

    df = IdempotentSink.read(spark, str(out), str(checkpoint))
    return [] if df is None else sorted(tuple(r) for r in df.drop("batch").collect())


def offsets(checkpoint: Path) -> list[dict[str, Any]]:
    """The source's offset of every micro-batch in the checkpoint's offset log."""
    logs = sorted((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()),
                  key=lambda p: int(p.name))
    return [json.loads(p.read_text().splitlines()[-1]) for p in logs]


def start(spark: Any, source: Path, out: Path, checkpoint: Path, **options: Any) -> Any:
    from flink_semantics.adapters.pyspark.sources.api import Flip27Source, IdempotentSink, flip27_options

    spark.dataSource.register(Flip27Source)
    df = spark.readStream.format("flip27").options(**flip27_options(source, **options)).schema(SCHEMA).load()
    return (df.writeStream.foreachBatch(IdempotentSink(str(out)))
            .option("checkpointLocation", str(checkpoint)).start())


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    yield tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"


def test_new_files_are_discovered_and_read_exactly_once_across_a_restart(
        spark: Any, dirs: tuple[Path, Path, Path]) -> None:
    """Files written between `processAllAvailable()` calls are discovered as new splits; files
    written while the query is stopped are read by the query restarted from its checkpoint; the
    committed output equals a batch read of all the files, each row once.  With files there at the
    start, a reader reads several splits in one micro-batch; no split is in two readers' ranges."""
    source, out, checkpoint = dirs
    for f in range(6):
        write_file(source, f, 40)
    query = start(spark, source, out, checkpoint, readers=2)
    try:
        query.processAllAvailable()
        assert committed(spark, out, checkpoint) == truth(spark, source)
        for f in range(6, 10):
            write_file(source, f, 30)
        query.processAllAvailable()
        assert committed(spark, out, checkpoint) == truth(spark, source)
    finally:
        query.stop()
    for f in range(10, 13):  # while no query runs
        write_file(source, f, 25)
    query = start(spark, source, out, checkpoint, readers=2)
    try:
        query.processAllAvailable()
        write_file(source, 13, 50)
        query.processAllAvailable()
    finally:
        query.stop()
    want = truth(spark, source)
    assert len(want) == 6 * 40 + 4 * 30 + 3 * 25 + 50
    assert committed(spark, out, checkpoint) == want
    logged = offsets(checkpoint)
    assert max(len(ranges) for o in logged for ranges in o["read"]) >= 2  # several splits per reader
    for o in logged:  # SRC-16: a split in one reader's ranges per batch
        ids = [r[0] for ranges in o["read"] for r in ranges]
        assert len(ids) == len(set(ids)), o


def test_a_byte_budget_cuts_files_between_lines(spark: Any, dirs: tuple[Path, Path, Path]) -> None:
    """`max_bytes_per_batch`: a reader reads at most about that much per micro-batch, each range ending
    at a line end, so a file takes several micro-batches; the output is still the batch read's, once."""
    source, out, checkpoint = dirs
    for f in range(3):
        write_file(source, f, 60)
    query = start(spark, source, out, checkpoint, readers=2, max_bytes_per_batch=1500)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert committed(spark, out, checkpoint) == truth(spark, source)
    ranges = [r for o in offsets(checkpoint) for rs in o["read"] for r in rs]
    assert len(ranges) > 3 and len({r[0] for r in ranges}) == 3  # files cut into several ranges
    for split, lo, hi in ranges:
        data = (source / split).read_bytes()
        assert hi - lo <= 1500 + 200 and data[hi - 1:hi] == b"\n" and (lo == 0 or data[lo - 1:lo] == b"\n")


def _wait_for(path: Path, process: subprocess.Popen[bytes]) -> None:
    """Wait until `path` exists (a hang guard, not a timing assertion); fail if the process ended."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the driver ended (status {process.returncode}) before writing {path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path} after {HANG_GUARD_S} s (hung)")
        time.sleep(0.5)


def test_a_killed_driver_restarts_from_its_checkpoint_exactly_once(
        spark: Any, dirs: tuple[Path, Path, Path]) -> None:
    """A driver (tests/flip27_driver.py, a process of its own) reads files with a small budget, so
    they take many micro-batches; more files arrive while it runs; it is killed with SIGKILL after
    the sink wrote micro-batch 3 and before Spark committed it.  The query restarted from the same
    checkpoint (here) runs batch 3 again, reads on, also files written after the kill: the committed
    output equals the batch read of all the files, no row lost or twice."""
    source, out, checkpoint = dirs
    for f in range(8):
        write_file(source, f, 60)
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    log = (source.parent / "driver.log").open("wb")
    driver = subprocess.Popen([sys.executable, str(DRIVER), str(source), str(out), str(checkpoint), "3"],
                              env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(out / "batch=0", driver)
        for f in range(8, 12):  # discovered while the driver runs
            write_file(source, f, 60)
        _wait_for(out / "_blocked", driver)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{(source.parent / 'driver.log').read_text()[-3000:]}") from None
    finally:
        log.close()
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)  # the driver's machine dies: Python, JVM, workers
        driver.wait(HANG_GUARD_S)
    assert (checkpoint / "offsets" / "3").exists() and not (checkpoint / "commits" / "3").exists()
    for f in range(12, 15):
        write_file(source, f, 30)
    query = start(spark, source, out, checkpoint, readers=2, max_bytes_per_batch=4096)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    want = truth(spark, source)
    assert len(want) == 12 * 60 + 3 * 30
    assert committed(spark, out, checkpoint) == want


def test_a_bad_line_fails_the_query_naming_file_and_line(spark: Any, dirs: tuple[Path, Path, Path]) -> None:
    """A line that is not JSON fails the query with an error naming the file and the line, and
    pyarrow's own message; nothing of the file is committed (never a silent drop)."""
    from pyspark.errors import StreamingQueryException

    source, out, checkpoint = dirs
    write_file(source, 0, 5)
    with open(source / "file-000.json", "ab") as fh:
        fh.write(b'{"id": 99, "file": 0}\n{"id": 100, oops\n')
    query = start(spark, source, out, checkpoint, readers=1)
    try:
        with pytest.raises(StreamingQueryException, match=r"file-000\.json line 7: not a JSON object") as e:
            query.processAllAvailable()
        assert "JSON parse error" in str(e.value) or "Invalid" in str(e.value)
    finally:
        query.stop()
    assert committed(spark, out, checkpoint) == []


# --------------------------------------------------------------------------
# A user's own source on the interface (flip27.py)
# --------------------------------------------------------------------------


def test_options_are_checked_before_the_query_starts(spark: Any, tmp_path: Path) -> None:
    """A bad or missing option is a ValueError naming it from `flip27_options` and `read_files`,
    before any query; given one by one to `format("flip27")`, a clear error naming it when Spark
    creates the source (at `load()` without a schema, at the query's start with one), never
    PySpark's UnboundLocalError."""
    from flink_semantics.adapters.pyspark.sources.api import Flip27Source, flip27_options, read_files
    from pyspark.errors import StreamingQueryException

    for kwargs, name in [({"path": ""}, "path"), ({"path": tmp_path, "readers": 0}, "readers"),
                         ({"path": tmp_path, "format": "csv"}, "format"),
                         ({"path": tmp_path, "max_bytes_per_batch": -1}, "max_bytes_per_batch")]:
        with pytest.raises(ValueError, match=f"option '{name}'"):
            flip27_options(**kwargs)
        with pytest.raises(ValueError, match=f"option '{name}'"):
            read_files(spark, schema=SCHEMA, **kwargs)
    with pytest.raises(ValueError, match="schema is missing"):
        read_files(spark, tmp_path, "")
    spark.dataSource.register(Flip27Source)
    with pytest.raises(Exception, match="flip27 needs the schema"):
        spark.readStream.format("flip27").option("path", str(tmp_path)).load()
    with pytest.raises(Exception, match="option 'path' is missing"):
        spark.readStream.format("flip27").option("readers", "2").load()
    df = (spark.readStream.format("flip27").option("readers", "x").option("path", str(tmp_path))
          .schema(SCHEMA).load())
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "checkpoint")).start()
    try:
        with pytest.raises(StreamingQueryException, match="option 'readers' must be an integer") as e:
            query.processAllAvailable()
        assert "UnboundLocalError" not in str(e.value)
    finally:
        query.stop()


# Splits "name:size" a test makes appear (no Spark: the planner runs in this process).
AVAILABLE: list[str] = []


def _numbers_source(readers: int, budget: int | None) -> Any:
    """A user's own source: splits "name:size" of `size` numbers, discovered from the option
    `splits` (JSON) or else from AVAILABLE, a budget in records (the option `budget`, else
    `budget`).  Its classes are local, so that Spark's workers get them by value."""
    from flink_semantics.adapters.pyspark.sources.api import (
        FifoEnumerator,
        Planned,
        Split,
        SplitReader,
        SplitSource,
    )

    class Numbers(FifoEnumerator):
        def __init__(self, snapshot: Any, available: list[str]):
            super().__init__(snapshot)
            self.known = list((snapshot or {}).get("known", []))
            self.available = available

        def discover(self) -> None:
            new = [s for s in self.available if s not in self.known]
            self.known += new
            self.add_splits([Split(s, 0) for s in new])

        def snapshot(self) -> Any:
            return {**super().snapshot(), "known": self.known}

    class NumbersReader(SplitReader):
        def plan(self, split: Split, start: Any, budget: int | None) -> Planned:
            size = int(split.id.split(":")[1])
            end = size if budget is None else min(size, start + budget)
            return Planned(end, end - start, finished=end >= size)

        def read(self, split: Split, start: Any, end: Any) -> Iterator[Any]:
            yield from ((split.id, n) for n in range(start, end))

    class NumbersSource(SplitSource):
        @classmethod
        def name(cls) -> str:
            return "numbers"

        def schema(self) -> str:
            return "split string, n int"

        def budget(self) -> int | None:
            return int(self.options["budget"]) if "budget" in self.options else budget

        def create_enumerator(self, snapshot: Any) -> Numbers:
            splits = self.options.get("splits")
            return Numbers(snapshot, json.loads(splits) if splits else AVAILABLE)

        def create_reader(self, schema: Any) -> NumbersReader:
            return NumbersReader()

    return NumbersSource({"readers": str(readers)})


def _rounds(source: Any, offset: dict[str, Any]) -> list[dict[str, Any]]:
    """Planning rounds from `offset` until one plans nothing (returns its start): their offsets."""
    reader, out = source.streamReader(None), []
    while True:
        start = json.loads(json.dumps(offset))  # as Spark's offset log gives it back
        after = reader.latestOffset(start, None)
        if after is start:
            return out
        out.append(after)
        offset = after


def _read(source: Any, offsets_: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
    from flink_semantics.adapters.pyspark.sources.flip27 import ReaderPartition

    reader = source.streamReader(None)
    parts = [p for o in offsets_ for p in reader.partitions(None, o)]
    return [(p.reader, *row) for p in parts if isinstance(p, ReaderPartition) for row in reader.read(p)]


def test_a_users_source_is_planned_per_split_range() -> None:
    """The planner on a user's enumerator and reader: a reader asks for a split whenever it has none
    unfinished, so it reads several in one micro-batch within its budget (SRC-6, SRC-33, SRC-39);
    splits appearing between rounds are discovered (SRC-42); every record is read once; a round
    with nothing new plans no batch; a restart with fewer readers hands the splits of the readers
    that are gone back to the enumerator at their positions (SRC-21)."""
    AVAILABLE[:] = ["a:3", "b:5", "c:0", "d:4"]
    source = _numbers_source(readers=2, budget=4)
    first = source.streamReader(None).latestOffset(source.streamReader(None).initialOffset(), None)
    # reader 0: a (3 of its budget of 4), then 1 record of b; reader 1: c (empty), then d (4)
    assert first["read"] == [[["a:3", 0, 3], ["b:5", 0, 1]], [["d:4", 0, 4]]]
    assert first["owned"][0] == [["b:5", 1]]  # unfinished: it holds it and asks for no other
    rounds = [first, *_rounds(source, first)]
    AVAILABLE.append("e:6")
    rounds += _rounds(source, rounds[-1])
    assert _rounds(source, rounds[-1]) == []  # nothing new: no batch
    got = sorted((s, n) for _, s, n in _read(source, rounds))
    assert got == sorted((s, n) for s in AVAILABLE for n in range(int(s.split(":")[1])))
    # a reader with an unfinished split at a position, then a restart with one reader
    AVAILABLE[:] = ["x:10", "y:10"]
    two = _numbers_source(readers=2, budget=3)
    offset = two.streamReader(None).latestOffset(two.streamReader(None).initialOffset(), None)
    assert offset["owned"] == [[["x:10", 3]], [["y:10", 3]]]
    one = _numbers_source(readers=1, budget=None)
    after = one.streamReader(None).latestOffset(offset, None)
    assert after["read"] == [[["x:10", 3, 10], ["y:10", 3, 10]]]  # y resumes where reader 1 left it
    # the reader's own error, with the split it was planning
    AVAILABLE[:] = ["bad:x"]
    with pytest.raises(ValueError, match="invalid literal") as e:
        one.streamReader(None).latestOffset(one.streamReader(None).initialOffset(), None)
    assert e.value.__notes__ == ["flip27: reader 0 planning split 'bad:x' from 0"]


def test_a_users_source_through_spark_with_trigger_available_now(spark: Any, tmp_path: Path) -> None:
    """The same user's source in Spark: its reader's rows (tuples) read on the executors, a
    budget of 4 records per reader and micro-batch, `trigger(availableNow=True)` running it to
    the end of its splits; every number of every split committed once, each split in order
    within its micro-batches."""
    from flink_semantics.adapters.pyspark.sources.api import IdempotentSink

    splits = ["a:3", "b:9", "c:0", "d:4", "e:7"]
    spark.dataSource.register(type(_numbers_source(2, None)))
    df = (spark.readStream.format("numbers").option("readers", "2").option("budget", "4")
          .option("splits", json.dumps(splits)).load())
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (df.writeStream.foreachBatch(IdempotentSink(str(out)))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(HANG_GUARD_S), "hung"
    rows = IdempotentSink.read(spark, str(out), str(checkpoint)).collect()
    assert sorted((r["split"], r["n"]) for r in rows) == sorted(
        (s, n) for s in splits for n in range(int(s.split(":")[1])))
    batches = {r["batch"] for r in rows}
    assert len(batches) >= 3  # 23 records, at most 2 readers x 4 per micro-batch
    for s in splits:
        ns = [(r["batch"], r["n"]) for r in rows if r["split"] == s]
        assert [n for _, n in sorted(ns)] == sorted(n for _, n in ns)  # SRC-39: in order across batches

