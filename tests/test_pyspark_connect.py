"""The PySpark adapter and async_map under Spark Connect.

Starts a local Spark Connect server (pyspark's sbin/start-connect-server.sh, bound to
127.0.0.1 on a free port, UI off, `local[2,8]` so failed tasks are retried, PYTHONPATH set so
the server's Python workers import adapters/ and spec/), runs the hand-derived schedules of
tests/test_pyspark_async_io.py through a Connect client session, and stops the server at the
end.  The server's logs and pid files live in a temporary directory that is removed.
Run with `-n 0`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.spec.adapter import AdapterError
from test_pyspark_async_io import CASES, REJECTED, TASK_FAILURES

from tests.async_io_cases import assert_trace
from tests.async_io_cases import parse_schedule as schedule
from tests.hang import HANG_GUARD_S

pytestmark = pytest.mark.spark

REPO = str(Path(__file__).resolve().parents[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def connect_url() -> Iterator[str]:
    from flink_semantics.adapters.pyspark.session import _check_java, _check_pyspark

    try:
        _check_pyspark()
        _check_java()
    except AdapterError as e:
        pytest.skip(str(e))
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    work = tempfile.mkdtemp(prefix="test-pyspark-connect-")
    port = _free_port()
    env = dict(os.environ, SPARK_HOME=spark_home, PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               SPARK_LOG_DIR=work, SPARK_PID_DIR=work, SPARK_IDENT_STRING=f"test{port}")
    env.pop("SPARK_REMOTE", None)
    start = [os.path.join(spark_home, "sbin", "start-connect-server.sh"), "--master", "local[2,8]",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.driver.host=127.0.0.1",
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false"]
    stop = [os.path.join(spark_home, "sbin", "stop-connect-server.sh")]
    try:
        subprocess.run(start, env=env, check=True, capture_output=True, timeout=HANG_GUARD_S)
        if not _wait_for_port(port, HANG_GUARD_S):
            logs = "\n".join(p.read_text()[-2000:] for p in Path(work).glob("*.out"))
            pytest.fail(f"the Spark Connect server did not open port {port}:\n{logs}")
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run(stop, env=env, capture_output=True, timeout=HANG_GUARD_S)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def connect_spark(connect_url: str) -> Iterator[Any]:
    from flink_semantics.adapters.pyspark.session import connect_session, is_connect

    spark = connect_session(connect_url)
    assert is_connect(spark)
    yield spark
    spark.stop()


def test_adapter_under_connect_gives_the_hand_derived_traces(connect_spark: Any) -> None:
    from flink_semantics.adapters.pyspark import PySparkAdapter

    adapter = PySparkAdapter(spark=connect_spark)
    try:
        names = list(CASES)
        schedules = [schedule(c[0], c[1]) for c in CASES.values()]
        schedules += [schedule(cfg, "record 1", validate=False) for cfg, _ in REJECTED.values()]
        traces = adapter.run_batch(schedules)
        for name, s, trace in zip(names, schedules, traces):
            assert_trace(name, s, trace, CASES[name][2])
        for (_, rule), trace in zip(REJECTED.values(), traces[len(names):]):
            (e,) = trace.events
            assert e.event == "rejected" and e.reason.startswith(rule + ":")
        # Crashes and task failures were real task failures on the Connect server, retried by it.
        for i, name in enumerate(names):
            assert adapter.task_attempts[i] >= TASK_FAILURES.get(name, 0), name
    finally:
        adapter.close()
    assert not adapter.root.exists()


def test_async_map_under_connect(connect_spark: Any) -> None:
    from flink_semantics.adapters.pyspark.async_io import async_map

    async def double(v: int) -> list[int]:
        await asyncio.sleep(((v * 7919) % 7) * 0.002)
        return [2 * v]

    df = connect_spark.range(0, 100, numPartitions=2).selectExpr("id AS value")
    rows = async_map(df, double, capacity=8, ordered=True).collect()
    assert [r.value for r in rows] == [2 * v for v in range(100)]


def test_sources_under_connect(connect_spark: Any) -> None:
    """The sources area under Connect: saved schedules with failures give their saved traces through
    the adapter, and the streaming source survives reader and query failures exactly once."""
    import gzip
    import json

    from flink_semantics.adapters.pyspark import PySparkAdapter
    from flink_semantics.adapters.pyspark.sources.faults import generate, run
    from flink_semantics.spec.schedule import schedule_from_dict, trace_from_dict

    corpus = Path(__file__).parent / "corpus" / "sources.jsonl.gz"
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    failing = ("fail", "fail_enumerator", "rescale")
    rows = [r for r in rows if any(s["op"] in failing for s in r["schedule"]["steps"])][:30]
    adapter = PySparkAdapter(spark=connect_spark)
    try:
        traces = adapter.run_batch([schedule_from_dict(r["schedule"]) for r in rows])
    finally:
        adapter.close()
    for r, trace in zip(rows, traces):
        assert trace == trace_from_dict({"events": r["trace"]}, "sources"), json.dumps(r["schedule"])
    work = tempfile.mkdtemp(prefix="test-sources-connect-")
    try:
        jobs, failures = generate(20, 2, seed=4)
        report = run(connect_spark, jobs, failures, work, log=lambda m: None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert report.injected > 2 and report.restarts == 2, report.lines()
    assert (report.lost, report.duplicated, report.two_places) == (0, 0, 0), report.lines()


def test_watermarks_under_connect(connect_spark: Any) -> None:
    """The watermarks area under Connect: the hand-worked schedules of tests/test_pyspark_watermarks.py
    give their traces, and their failovers are task failures retried by the Connect server."""
    from flink_semantics.adapters.pyspark import PySparkAdapter

    from tests.test_pyspark_watermarks import CASES, expected, rendered, schedule

    names = list(CASES)
    adapter = PySparkAdapter(spark=connect_spark)
    try:
        traces = adapter.run_batch([schedule(n) for n in names])
        for i, name in enumerate(names):
            assert rendered(traces[i]) == expected(name), name
            assert adapter.task_attempts[i] >= CASES[name][3], name
    finally:
        adapter.close()


def test_spark_native_under_connect(connect_spark: Any) -> None:
    """Spark's own watermark measured through a Connect client: two hand-worked schedules of
    tests/test_spark_native.py (the min policy; a restart keeping the global watermark) give their
    traces, read from the progress Connect reports (observed metrics included)."""
    from flink_semantics.adapters.spark_native import SparkNativeAdapter

    from tests.test_spark_native import CASES, WM

    names = ["min over streams", "a restart keeps the global watermark"]
    adapter = SparkNativeAdapter(spark=connect_spark)
    try:
        traces = adapter.run_batch([WM.schedule(CASES[n][0], CASES[n][1]) for n in names])
        for name, trace in zip(names, traces):
            assert [str(e) for e in trace.events] == [str(e) for e in WM.trace(CASES[name][2]).events], name
    finally:
        adapter.close()


def test_key_groups_stream_under_connect(connect_spark: Any) -> None:
    """Keyed and operator state in a streaming query through a Connect client: a schedule of
    tests/test_pyspark_key_groups_stream.py (the spark profile, the three operator-state modes,
    restores 3 -> 5 -> 1) gives the reference model's trace."""
    from flink_semantics.adapters.pyspark.key_groups.stream import run_schedule
    from flink_semantics.reference import expected_trace

    from tests.test_pyspark_key_groups_stream import CASES, KG, rendered

    s = KG.schedule(*CASES["spark profile, three modes, 3 -> 5 -> 1"])
    assert rendered(run_schedule(connect_spark, s)) == rendered(expected_trace(s).events)


def test_mini_batch_stream_under_connect(connect_spark: Any) -> None:
    """Mini-batch aggregation as streaming queries through a Connect client: a schedule of
    tests/test_pyspark_mini_batch_stream.py (two-phase, checkpoints, a crash, a restore from an
    earlier checkpoint and one from none) gives the reference model's trace."""
    from flink_semantics.adapters.pyspark.mini_batch.stream import run_schedule

    from tests.test_pyspark_mini_batch_stream import CASES, MB, check

    config, steps, steps_per_batch = CASES["checkpoint, crash, restore"]
    s = MB.schedule(config, steps)
    check(s, run_schedule(connect_spark, s, steps_per_batch=steps_per_batch))


def test_async_map_row_mode_under_connect(connect_spark: Any) -> None:
    """async_map's row mode through a Connect client: the input row kept, a struct of two typed
    results, and a failing call's own exception in the error column, against the same computation
    in Spark SQL over the same rows."""
    from flink_semantics.adapters.pyspark.async_io import async_map

    async def lookup(id_: int, name: str) -> list[tuple[str, int]]:
        await asyncio.sleep((id_ % 5) * 0.001)
        if id_ % 7 == 3:
            raise ValueError(f"no such user {id_}")
        return [(name.upper(), id_ * 10)]

    df = connect_spark.range(0, 60, numPartitions=2).selectExpr("id", "concat('user', id) AS name")
    out = async_map(df, lookup, columns=["id", "name"], result="upper string, tens long", errors="error",
                    capacity=8, ordered=False)
    truth = df.selectExpr("id", "name",
                          "CASE WHEN id % 7 = 3 THEN NULL ELSE upper(name) END AS upper",
                          "CASE WHEN id % 7 = 3 THEN NULL ELSE id * 10 END AS tens",
                          "CASE WHEN id % 7 = 3 THEN concat('ValueError: no such user ', id) END AS error")
    assert out.columns == truth.columns
    assert sorted(map(tuple, out.collect())) == sorted(map(tuple, truth.collect()))


def test_file_source_under_connect(connect_spark: Any, tmp_path: Path) -> None:
    """The built-in FLIP-27 file source and IdempotentSink through a Connect client: a directory of
    JSON-lines files read to its end (`availableNow`), the committed output equal to a batch read of
    the same files."""
    import json

    from flink_semantics.adapters.pyspark.sources.api import IdempotentSink, read_files

    data = tmp_path / "in"
    data.mkdir()
    for f in range(4):
        lines = [json.dumps({"id": f * 100 + i, "name": f"n{f}-{i}"}) for i in range(25)]
        (data / f"part-{f}.json").write_text("\n".join(lines) + "\n")
    stream = read_files(connect_spark, data, "id long, name string", readers=2)
    out, ckpt = tmp_path / "out", tmp_path / "checkpoint"
    query = (stream.writeStream.foreachBatch(IdempotentSink(out)).option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(HANG_GUARD_S), "the file source's query did not end (hang guard)"
    got = IdempotentSink.read(connect_spark, out, ckpt)
    truth = connect_spark.read.schema("id long, name string").json(str(data))
    assert got is not None
    assert sorted(map(tuple, got.select("id", "name").collect())) == sorted(map(tuple, truth.collect()))
