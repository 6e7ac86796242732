"""async_map as a Spark user runs it: JSON files written into a watched directory while a streaming
query runs, an async function calling a service on 127.0.0.1, a parquet sink, a stop and a restart
from the checkpoint; the sink is compared with the same function in batch Spark SQL over the same
files (the truth).  Also: the user's exception in the query's failure, the error output, and the
options refused before a query starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality

pytestmark = pytest.mark.spark

SCHEMA = "id long, name string, city string"
CITIES = ("Lyon", "Oslo", None)
HANG_GUARD = 600  # seconds: only against a hang, never reached by slow work


# --------------------------------------------------------------------------
# The input files, the loopback service, the function
# --------------------------------------------------------------------------


def write_people(directory: Path, name: str, ids: range) -> None:
    """A JSONL file of people, moved into the watched directory whole (the source never sees a part)."""
    staging = directory.parent / f".{name}"
    staging.write_text("".join(json.dumps({"id": i, "name": f"user{i}", "city": CITIES[i % 3]}) + "\n"
                               for i in ids), encoding="utf-8")
    os.replace(staging, directory / name)


class LookupService:
    """An asyncio TCP service on 127.0.0.1, on a thread of the test: a line "id name" in, a line
    "NAME id*10" out (the name upper-cased), for each line of a connection."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            id_, name = line.decode().split()
            writer.write(f"{name.upper()} {int(id_) * 10}\n".encode())
            await writer.drain()
        writer.close()

    async def _close(self) -> None:
        self.server.close()
        await self.server.wait_closed()

    def __enter__(self) -> LookupService:
        self._thread.start()
        assert self._ready.wait(HANG_GUARD)
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(HANG_GUARD)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(HANG_GUARD)
        self.loop.close()


def lookup_fn(port: int) -> Callable[..., Any]:
    """The user's function: a call of the service per person, `id % 3` results (none for some)."""

    async def lookup(id: int, name: str) -> list:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(f"{id} {name}\n".encode())
            await writer.drain()
            upper, tens = (await reader.readline()).decode().split()
        finally:
            writer.close()
            await writer.wait_closed()
        return [({"upper": upper, "tens": int(tens)}, copy) for copy in range(id % 3)]

    return lookup


RESULT = "profile struct<upper: string, tens: bigint>, copy int"
TRUTH = """
    SELECT id, name, city, named_struct('upper', upper(name), 'tens', id * 10) AS profile, copy
    FROM people LATERAL VIEW explode(filter(sequence(0, 2), x -> x < id % 3)) c AS copy
"""


@contextmanager
def running(out: Any, sink: Path, checkpoint: Path) -> Iterator[Any]:
    """A parquet sink query of `out`, stopped at the end."""
    query = (out.writeStream.format("parquet").option("path", str(sink))
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        yield query
    finally:
        query.stop()


def batch_truth(spark: Any, inbox: Path, sql: str) -> Any:
    """The function in batch Spark SQL over every input file."""
    spark.read.schema(SCHEMA).json(str(inbox)).createOrReplaceTempView("people")
    try:
        return spark.sql(sql).localCheckpoint()
    finally:
        spark.catalog.dropTempView("people")


def assert_sink_equals(spark: Any, sink: Path, truth: Any, order: list[str]) -> None:
    got = spark.read.parquet(str(sink))
    assert_df_equality(got.orderBy(*order), truth.orderBy(*order), ignore_nullable=True)


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


def test_rows_keep_their_columns_across_a_restart(spark: Any, tmp_path: Path) -> None:
    """Every input column is kept and each result is a row with its struct column, zero results
    dropping the row; files come while the query runs and while it is stopped; the restarted query
    goes on from its checkpoint: the sink equals the batch SQL truth, no row lost or doubled."""
    from flink_semantics.adapters.pyspark.async_io import async_map

    inbox, sink, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    inbox.mkdir()
    write_people(inbox, "0.jsonl", range(0, 20))
    with LookupService() as service:
        def start() -> Any:
            people = spark.readStream.schema(SCHEMA).json(str(inbox))
            out = async_map(people, lookup_fn(service.port), columns=["id", "name"], result=RESULT,
                            capacity=8, ordered=True, timeout=HANG_GUARD)
            return running(out, sink, checkpoint)

        with start() as query:
            query.processAllAvailable()
            write_people(inbox, "1.jsonl", range(20, 45))
            query.processAllAvailable()
        write_people(inbox, "2.jsonl", range(45, 60))  # while no query runs
        with start() as query:
            query.processAllAvailable()
            write_people(inbox, "3.jsonl", range(60, 70))
            query.processAllAvailable()
    assert_sink_equals(spark, sink, batch_truth(spark, inbox, TRUTH), ["id", "copy"])


def failing_lookup(bad: int) -> Callable[..., Any]:
    async def lookup(id: int, name: str) -> list:
        await asyncio.sleep(0.001 * (id % 4))
        if id == bad:
            raise ValueError(f"no such user {id}")
        return [name.upper()]

    return lookup


def test_the_users_exception_is_in_the_query_failure(spark: Any, tmp_path: Path) -> None:
    """A call that fails (no retry) fails the query: its exception names the rule (AIO-23), the
    row's columns and the user's exception's type and message."""
    from flink_semantics.adapters.pyspark.async_io import async_map
    from pyspark.errors import StreamingQueryException

    inbox, sink, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    inbox.mkdir()
    write_people(inbox, "0.jsonl", range(0, 10))
    people = spark.readStream.schema(SCHEMA).json(str(inbox))
    out = async_map(people, failing_lookup(bad=13), columns=["id", "name"], result="upper string")
    with running(out, sink, checkpoint) as query:
        query.processAllAvailable()  # ids 0..9: no failure
        write_people(inbox, "1.jsonl", range(10, 20))
        with pytest.raises(StreamingQueryException) as failure:
            query.processAllAvailable()
    text = str(failure.value)
    assert "AIO-23: could not complete the row id=13, name='user13' (error): ValueError: no such user 13" \
        in text, text
    assert "AsyncFunctionFailed" in text, text


def flaky_lookup() -> Callable[..., Any]:
    async def lookup(id: int, name: str) -> list:
        if id % 5 == 0:
            raise KeyError(f"user{id}")  # every attempt
        if id % 7 == 0:
            await asyncio.sleep(HANG_GUARD)  # past the timeout: a TimeoutError
        await asyncio.sleep(0.001 * (id % 4))
        return [(name.upper(), id * 10)]

    return lookup


ERROR_TRUTH = """
    SELECT id, name, city,
           CASE WHEN id % 5 = 0 OR id % 7 = 0 THEN NULL ELSE upper(name) END AS upper,
           CASE WHEN id % 5 = 0 OR id % 7 = 0 THEN NULL ELSE id * 10 END AS tens,
           CASE WHEN id % 5 = 0 THEN concat('KeyError: ''user', id, '''')
                WHEN id % 7 = 0 THEN 'TimeoutError: Async function call has timed out.' END AS error
    FROM people
"""


def test_the_error_output_holds_the_failed_rows(spark: Any, tmp_path: Path) -> None:
    """With errors="error" a row whose call failed after its retries, or timed out, appears once
    with null results and "TypeName: message"; the others have their results and a null error; the
    query goes on; the sink equals the batch SQL truth."""
    from flink_semantics.adapters.pyspark.async_io import async_map, retry_strategy

    inbox, sink, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    inbox.mkdir()
    write_people(inbox, "0.jsonl", range(0, 25))
    people = spark.readStream.schema(SCHEMA).json(str(inbox))
    out = async_map(people, flaky_lookup(), columns=["id", "name"], result="upper string, tens long",
                    errors="error", capacity=16, ordered=False, timeout=2.0,
                    retry=retry_strategy(2, delay=0.01, on_error=KeyError))
    with running(out, sink, checkpoint) as query:
        query.processAllAvailable()
        write_people(inbox, "1.jsonl", range(25, 40))
        query.processAllAvailable()
    assert_sink_equals(spark, sink, batch_truth(spark, inbox, ERROR_TRUTH), ["id"])


def test_the_whole_row_and_a_single_result_column(spark: Any) -> None:
    """columns=None passes the row as a dict; a bare type is one column `result`; a batch DataFrame
    keeps its columns (compared with the same function in Spark SQL), with an operator per
    partition or per group (`group_col`)."""
    from flink_semantics.adapters.pyspark.async_io import async_map

    async def greet(row: dict) -> list:
        return [f"{row['name']} from {row['city']}"] if row["city"] else []

    people = spark.createDataFrame([(i, f"user{i}", CITIES[i % 3]) for i in range(12)], SCHEMA)
    people.createOrReplaceTempView("people")
    try:
        truth = spark.sql("SELECT *, concat(name, ' from ', city) AS result FROM people "
                          "WHERE city IS NOT NULL")
        for got in (async_map(people.repartition(3), greet, result="string"),
                    async_map(people.repartition(2), greet, result="string", group_col="city", capacity=1)):
            assert_df_equality(got.orderBy("id"), truth.orderBy("id"), ignore_nullable=True)
    finally:
        spark.catalog.dropTempView("people")


def test_a_result_that_does_not_fit_names_the_row_and_column(spark: Any) -> None:
    """A result value of the wrong type, or a result of the wrong shape, fails the job with an error
    naming the row and the result column (or the shape expected)."""
    from flink_semantics.adapters.pyspark.async_io import async_map

    async def bad_type(id: int) -> list:
        return [(id, "many" if id == 5 else id)]

    async def bad_shape(id: int) -> list:
        return [(id,)]

    people = spark.createDataFrame([(i, f"user{i}", CITIES[i % 3]) for i in range(8)], SCHEMA)
    with pytest.raises(Exception) as failure:
        async_map(people, bad_type, columns=["id"], result="a long, b long").collect()
    assert "ResultTypeError: async_map: the result column 'b' (int64) of the row id=5: cannot hold 'many'" \
        in str(failure.value), str(failure.value)
    with pytest.raises(Exception) as failure:
        async_map(people.coalesce(1), bad_shape, columns=["id"], result="a long, b long").collect()
    assert "(error): TypeError: async_map: a result must be a tuple of 2 values (a, b) or a dict of them, " \
        "not (0,)" in str(failure.value), str(failure.value)


def test_bad_options_are_value_errors_before_a_query(spark: Any) -> None:
    """A missing column, a bad result schema, a taken column name, value-mode options and a function
    that cannot take the columns are ValueErrors naming the parameter, before anything runs."""
    from flink_semantics.adapters.pyspark.async_io import async_map

    async def f(id: int) -> list:
        return [id]

    people = spark.createDataFrame([], SCHEMA)
    with pytest.raises(ValueError, match="columns: no column 'nope'"):
        async_map(people, f, columns=["nope"], result="x long")
    with pytest.raises(ValueError, match="result: 'x lung' is not a DDL"):
        async_map(people, f, columns=["id"], result="x lung")
    with pytest.raises(ValueError, match=r"the column names \['name'\] are taken"):
        async_map(people, f, columns=["id"], result="name string")
    with pytest.raises(ValueError, match=r"the column names \['city'\] are taken"):
        async_map(people, f, columns=["id"], result="x long", errors="city")
    with pytest.raises(ValueError, match="audit: only in value mode"):
        async_map(people, f, columns=["id"], result="x long", audit=True)
    with pytest.raises(ValueError, match=r"fn\(id.* cannot take the columns \['id', 'name'\]"):
        async_map(people, f, columns=["id", "name"], result="x long")
    with pytest.raises(ValueError, match="need result="):
        async_map(people, f, columns=["id"])


def test_outer_keeps_the_rows_without_results(spark: Any, tmp_path: Path) -> None:
    """outer=True: a row with no results comes out once with null results (explode_outer's rule),
    also after a retry on an empty result; a row retried on its empty result that then has results
    has them, once.  (A streaming query: on a batch DataFrame the end of the partition would end
    retrying, AIO-39.)"""
    from flink_semantics.adapters.pyspark.async_io import async_map, retry_strategy

    def make() -> Callable[..., Any]:
        calls: dict[int, int] = {}

        async def tens(id: int) -> list:
            calls[id] = calls.get(id, 0) + 1
            if id % 4 == 0 or (id % 4 == 1 and calls[id] == 1):
                return []  # id % 4 == 1: empty at its first attempt only
            return [id * 10]

        return tens

    inbox, sink, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    inbox.mkdir()
    write_people(inbox, "0.jsonl", range(0, 16))
    people = spark.readStream.schema(SCHEMA).json(str(inbox))
    out = async_map(people, make(), columns="id", result="tens long", outer=True, timeout=HANG_GUARD,
                    retry=retry_strategy(1, delay=0.01, on_empty=True))
    with running(out, sink, checkpoint) as query:
        query.processAllAvailable()
    truth = "SELECT *, CASE WHEN id % 4 = 0 THEN NULL ELSE id * 10 END AS tens FROM people"
    assert_sink_equals(spark, sink, batch_truth(spark, inbox, truth), ["id"])


def test_watermark_rows_pass_through_in_their_place(spark: Any) -> None:
    """With kind_col, a W row comes out as itself with a null result, and unordered output never
    lets a record pass it (AIO-13): within each stretch between W rows, completion order (the
    shorter sleep first, on virtual time)."""
    from flink_semantics.adapters.pyspark.async_io import async_map, virtual_time_loop

    async def slow(id: int) -> list:
        await asyncio.sleep(10 - id % 10)  # a higher id in its stretch completes first
        return [id + 100]

    kinds = ["R", "R", "R", "W", "R", "R", "W", "R"]
    rows = [(k, i) for i, k in enumerate(kinds)]
    df = spark.createDataFrame(rows, "kind string, id long").coalesce(1)
    got = [(r.kind, r.id, r.r) for r in async_map(df, slow, columns=["id"], result="r long",
                                                  kind_col="kind", ordered=False, capacity=10,
                                                  loop_factory=virtual_time_loop).collect()]
    assert got == [("R", 2, 102), ("R", 1, 101), ("R", 0, 100), ("W", 3, None),
                   ("R", 5, 105), ("R", 4, 104), ("W", 6, None), ("R", 7, 107)]


@pytest.mark.parametrize("ordered", [True, False])
def test_output_chunks_across_arrow_batches(monkeypatch: pytest.MonkeyPatch, ordered: bool) -> None:
    """The task's output is taken from the kept input batches chunk by chunk: with chunks that end
    inside a batch, a first chunk of status rows that leave at once, and zero, one or two results
    per row, every row comes out with its own columns and its results (the task function itself on
    Arrow batches, as mapInArrow calls it; no Spark)."""
    import functools

    import pyarrow as pa
    from flink_semantics.adapters.pyspark.async_io import api, operator_config, virtual_time_loop
    from flink_semantics.adapters.pyspark.async_io.rows import RowSpec

    async def tens(id: int) -> list:
        await asyncio.sleep((id * 7) % 5)
        return [id * 10] * (id % 3)

    monkeypatch.setattr(api, "FLUSH_EVERY", 5)  # chunks of 5 rows, batches of 7
    ids = list(range(30))
    kinds = ["S" if i < 5 else "R" for i in ids]  # the first chunk: statuses only, out at once (AIO-51)
    batches = [pa.RecordBatch.from_pydict({"id": ids[i:i + 7], "kind": kinds[i:i + 7],
                                           "name": [f"user{j}" for j in ids[i:i + 7]]})
               for i in range(0, len(ids), 7)]
    spec = RowSpec(columns=("id",), names=("tens",), types=(pa.int64(),), error_col=None)
    config = functools.partial(api._row_config_for, spec=spec,
                               config_for=functools.partial(api._same_config,
                                                            operator_config(capacity=3, ordered=ordered)))
    out = list(api._row_task(iter(batches), fn=tens, spec=spec, config_for=config, kind_col="kind",
                             group_col=None, loop_factory=virtual_time_loop, streaming=False))
    got = [(r["id"], r["name"], r["tens"]) for b in out for r in b.to_pylist()]
    expected = [(i, f"user{i}", None) for i in ids[:5]] + [
        (i, f"user{i}", i * 10) for i in ids[5:] for _ in range(i % 3)]
    assert (got if ordered else sorted(got)) == expected
