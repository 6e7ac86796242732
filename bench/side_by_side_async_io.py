"""async_map side by side with what a Spark engineer writes by hand and with Spark 4.3's Arrow UDF.

    python bench/side_by_side_async_io.py [--rows 50000] [--partitions 2] [--capacity 100]
        [--latency 0.010] [--service tcp|sleep] [--sweep 10,50,100,200] [--svg PATH] [--quick]

One process, one Spark session (`local[N]`, loopback, UI off), the same generated data for every
variant: `--rows` rows (id long, key string) written once as `--partitions` parquet files, read back
as that many partitions, in batch and as a streaming query over the same files (availableNow, noop
sink).  The service is, with `--service tcp` (default), an asyncio TCP server on 127.0.0.1 started
by the bench in a thread of the driver: every request line is answered after `--latency` seconds;
each Spark task holds one connection and multiplexes its calls over it, as a client library of a
real service would.  With `--service sleep` the service is `asyncio.sleep(latency)`.

Variants, each computing r = 2 * id per row:

* async_map row mode (`columns="id", result="r long"`), ordered and unordered, `capacity`;
* hand-written: mapInPandas with an asyncio loop per task, `asyncio.Semaphore(capacity)` and
  `gather` per Arrow batch (the lines a Spark engineer writes);
* Spark 4.3's Arrow UDF: `@udf(useArrow=True)` with a blocking `time.sleep(latency)` under
  `spark.sql.execution.pythonUDF.arrow.concurrency.level=capacity` (a thread pool per batch).

Printed: rows/s (batch: rows / wall time of a noop write; streaming: rows / the micro-batches'
triggerExecution time, StreamingQueryProgress), % of Little's law (capacity x partitions / latency),
the ratios of async_map to the alternatives, the load average before and after, where the time goes
(the streaming durationMs, and the Python cost per row with a service of no latency, profiled in
this process without Spark), and with `--sweep` rows/s against the capacity, drawn to `--svg`.
Exit status 0 whenever the benchmark ran: figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# --------------------------------------------------------------------------
# The service: a loopback asyncio TCP server of fixed latency, and its client
# --------------------------------------------------------------------------


class _ServerProtocol(asyncio.Protocol):
    """Answers each complete request line after `latency` seconds (the lines back, as they came)."""

    latency = 0.0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.rest = b""

    def data_received(self, data: bytes) -> None:
        data = self.rest + data
        cut = data.rfind(b"\n") + 1
        self.rest = data[cut:]
        if cut:
            loop = asyncio.get_running_loop()
            loop.call_later(self.latency, self._reply, data[:cut])

    def _reply(self, lines: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(lines)


def start_server(latency: float) -> tuple[int, Any]:
    """The server on its own event loop in a daemon thread of this process; (port, stop)."""
    loop = asyncio.new_event_loop()
    ready: dict[str, Any] = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)
        protocol = type("Server", (_ServerProtocol,), {"latency": latency})
        server = loop.run_until_complete(loop.create_server(protocol, "127.0.0.1", 0))
        ready["port"] = server.sockets[0].getsockname()[1]
        ready["server"] = server
        loop.run_forever()
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()

    thread = threading.Thread(target=serve, name=f"service-{latency}", daemon=True)
    thread.start()
    while "port" not in ready:
        time.sleep(0.01)

    def stop() -> None:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    return ready["port"], stop


class _ClientProtocol(asyncio.Protocol):
    """One connection of a Spark task: calls numbered, answers matched by number."""

    def __init__(self) -> None:
        self.pending: dict[int, asyncio.Future] = {}
        self.next = 0
        self.rest = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        data = self.rest + data
        lines = data.split(b"\n")
        self.rest = lines.pop()
        for line in lines:
            fut = self.pending.pop(int(line), None)
            if fut is not None and not fut.done():
                fut.set_result(None)

    def connection_lost(self, exc: Any) -> None:
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("the service closed the connection"))

    async def call(self) -> None:
        n = self.next
        self.next += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[n] = fut
        self.transport.write(b"%d\n" % n)
        await fut


def make_service(kind: str, port: int, latency: float) -> Any:
    """The async call of the service (returns 2 * id): the same for async_map and hand-written."""
    connections: dict[Any, Any] = {}  # one connection per event loop (one per Spark task)

    async def tcp(value: int) -> int:
        loop = asyncio.get_running_loop()
        conn = connections.get(loop)
        if conn is None:
            conn = connections[loop] = loop.create_task(
                loop.create_connection(_ClientProtocol, "127.0.0.1", port))
        _, protocol = await conn
        await protocol.call()
        return 2 * value

    async def sleep(value: int) -> int:
        await asyncio.sleep(latency)
        return 2 * value

    return tcp if kind == "tcp" else sleep


# --------------------------------------------------------------------------
# The variants: DataFrame -> DataFrame with a column r
# --------------------------------------------------------------------------


def with_async_map(df: Any, call: Any, capacity: int, ordered: bool) -> Any:
    from flink_semantics.adapters.pyspark.async_io import async_map

    async def fn(id: int) -> list:
        return [await call(id)]

    return async_map(df, fn, columns="id", result="r long", capacity=capacity, ordered=ordered)


def with_hand_written(df: Any, call: Any, capacity: int) -> Any:
    """What a Spark engineer writes: mapInPandas, a loop per task, a semaphore, gather per batch."""
    def task(batches: Any) -> Any:
        loop = asyncio.new_event_loop()

        async def one(sem: asyncio.Semaphore, v: int) -> int:
            async with sem:
                return await call(v)

        async def run(values: list) -> list:
            sem = asyncio.Semaphore(capacity)
            return await asyncio.gather(*(one(sem, v) for v in values))

        try:
            for pdf in batches:
                pdf["r"] = loop.run_until_complete(run(pdf["id"].tolist()))
                yield pdf
        finally:
            loop.close()

    return df.mapInPandas(task, "id long, key string, r long")


def with_arrow_udf(df: Any, latency: float) -> Any:
    """Spark 4.3's Arrow UDF: a blocking call per row on the session's arrow.concurrency.level threads."""
    from pyspark.sql.functions import udf

    @udf("long", useArrow=True)
    def blocking(id: int) -> int:
        time.sleep(latency)
        return 2 * id

    return df.withColumn("r", blocking("id"))


def variants(call: Any, capacity: int, latency: float) -> list[tuple[str, Any]]:
    return [
        ("async_map ordered", lambda df: with_async_map(df, call, capacity, True)),
        ("async_map unordered", lambda df: with_async_map(df, call, capacity, False)),
        ("hand-written mapInPandas + Semaphore", lambda df: with_hand_written(df, call, capacity)),
        ("Arrow UDF, concurrency.level", lambda df: with_arrow_udf(df, latency)),
    ]


# --------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------


def session(partitions: int, capacity: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers run this interpreter
    settings = {
        "spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": str(partitions),
        # one parquet file per partition: the files are small, Spark would pack them into one split
        "spark.sql.files.openCostInBytes": str(1 << 30),
        "spark.sql.execution.pythonUDF.arrow.concurrency.level": str(capacity),
        "spark.sql.streaming.schemaInference": "false",
    }
    builder = SparkSession.builder.master(f"local[{partitions}]").appName("side_by_side_async_io")
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    shown = ", ".join(f"{k}={v}" for k, v in settings.items())
    print(f"session: PYSPARK_PYTHON={os.environ['PYSPARK_PYTHON']}, master local[{partitions}]; {shown}")
    return spark


def make_data(spark: Any, rows: int, partitions: int, root: str) -> str:
    path = os.path.join(root, f"data-{rows}")
    if not os.path.exists(path):
        (spark.range(0, rows, numPartitions=partitions).selectExpr("id", "concat('k', id) AS key")
         .write.parquet(path))
    return path


SCHEMA = "id long, key string"


def run_batch(spark: Any, path: str, variant: Any) -> dict[str, float]:
    df = spark.read.schema(SCHEMA).parquet(path)
    t0 = time.perf_counter()
    variant(df).write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - t0
    return {"wall": wall, "partitions": df.rdd.getNumPartitions()}


def run_stream(spark: Any, path: str, variant: Any, root: str) -> dict[str, float]:
    df = spark.readStream.schema(SCHEMA).parquet(path)
    checkpoint = tempfile.mkdtemp(dir=root)
    t0 = time.perf_counter()
    q = (variant(df).writeStream.format("noop").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination(600)
    wall = time.perf_counter() - t0
    progress = [p for p in q.recentProgress if p.numInputRows]
    q.stop()
    shutil.rmtree(checkpoint, ignore_errors=True)
    rows = sum(p.numInputRows for p in progress)
    durations: dict[str, int] = {}
    for p in progress:
        for k, v in p.durationMs.items():
            durations[k] = durations.get(k, 0) + v
    trigger_s = durations.get("triggerExecution", 0) / 1000
    return {"rows": rows, "wall": wall, "trigger": trigger_s, "batches": len(progress),
            "durations": durations}


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def measure_all(spark: Any, path: str, rows: int, names: list[tuple[str, Any]], root: str,
                stream: bool, runs: int) -> dict[tuple[str, str], float]:
    rates: dict[tuple[str, str], list[float]] = {}
    details: dict[tuple[str, str], Any] = {}
    for _ in range(runs):  # interleaved: a change of load touches every variant alike
        for name, variant in names:
            r = run_batch(spark, path, variant)
            rates.setdefault((name, "batch"), []).append(rows / r["wall"])
            if stream:
                s = run_stream(spark, path, variant, root)
                rates.setdefault((name, "stream"), []).append(s["rows"] / max(s["trigger"], 1e-9))
                details[(name, "stream")] = s
    measure_all.details = details  # type: ignore[attr-defined]
    return {k: statistics.median(v) for k, v in rates.items()}


# --------------------------------------------------------------------------
# Where the time goes: Python per row with a service of no latency, no Spark
# --------------------------------------------------------------------------


def python_per_row(rows: int, capacity: int, top: int) -> None:
    """CPU µs of Python per row in a task's body, the service answering at once (no I/O awaited)."""
    import pyarrow as pa
    from flink_semantics.adapters.pyspark.async_io import api

    async def fn(id: int) -> list:
        return [2 * id]

    async def call(v: int) -> int:
        return 2 * v

    batch_rows = 10_000
    ids = list(range(rows))
    batches = [pa.RecordBatch.from_pydict({"id": ids[i:i + batch_rows],
                                           "key": [f"k{j}" for j in ids[i:i + batch_rows]]})
               for i in range(0, rows, batch_rows)]

    def async_map_body(ordered: bool) -> Any:
        captured: dict[str, Any] = {}

        class Capture:
            columns = ["id", "key"]
            isStreaming = False
            sparkSession = None
            schema = None

            def mapInArrow(self, task: Any, schema: Any) -> Any:
                captured["task"] = task

        # The task async_map builds, without a Spark job: its own checks need a session's DDL parser,
        # so the result columns are given as a DataType.
        from pyspark.sql.types import LongType, StructField, StructType
        cap = Capture()
        cap.schema = StructType([StructField("id", LongType()), StructField("key", LongType())])
        api.async_map(cap, fn, columns="id", result=LongType(), capacity=capacity, ordered=ordered)
        task = captured["task"]
        return lambda: sum(b.num_rows for b in task(iter(batches)))

    def hand_body() -> Any:
        def run_task() -> int:
            loop = asyncio.new_event_loop()

            async def one(sem: asyncio.Semaphore, v: int) -> int:
                async with sem:
                    return await call(v)

            async def run(values: list) -> list:
                sem = asyncio.Semaphore(capacity)
                return await asyncio.gather(*(one(sem, v) for v in values))

            n = 0
            for b in batches:
                pdf = b.to_pandas()
                pdf["r"] = loop.run_until_complete(run(pdf["id"].tolist()))
                n += len(pa.RecordBatch.from_pandas(pdf))
            loop.close()
            return n

        return run_task

    print(f"\nwhere the time goes: Python per row, {rows:,} rows in this process (no Spark), the service "
          f"answering at once, capacity {capacity}")
    bodies = [("async_map ordered", async_map_body(True)), ("async_map unordered", async_map_body(False)),
              ("hand-written mapInPandas + Semaphore", hand_body())]
    for name, body in bodies:
        body()  # warm-up
        t0 = time.process_time()  # CPU time: the other processes of a loaded machine left out
        n = body()
        dt = time.process_time() - t0
        print(f"  {name:<40}{1e6 * dt / rows:>8.1f} CPU µs/row  ({n:,} rows out)")
    if top:
        prof = cProfile.Profile()
        prof.enable()
        bodies[0][1]()
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
        print(f"  cProfile of async_map ordered (top {top} by own time):")
        for line in out.getvalue().splitlines():
            if line.strip() and ("{" in line or "/" in line or "ncalls" in line):
                print("   ", line.strip()[:150])


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def draw(sweep: dict[int, dict[str, float]], partitions: int, latency: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    caps = sorted(sweep)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(caps, [c * partitions / latency for c in caps], "k--",
            label="Little's law (capacity x tasks / latency)")
    for name in next(iter(sweep.values())):
        ax.plot(caps, [sweep[c][name] for c in caps], "o-", label=name)
    ax.set_xlabel(f"capacity (calls in flight per task), {partitions} tasks, {latency * 1000:g} ms service")
    ax.set_ylabel("rows/s (batch)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(caps)
    ax.set_xticklabels([str(c) for c in caps])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("async_map side by side (2-core machine)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path)
    print(f"picture: {path}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--capacity", type=int, default=100)
    p.add_argument("--latency", type=float, default=0.010, help="service latency, seconds")
    p.add_argument("--service", choices=("tcp", "sleep"), default="tcp")
    p.add_argument("--runs", type=int, default=1, help="runs of each variant (median)")
    p.add_argument("--no-stream", action="store_true", help="batch only")
    p.add_argument("--sweep", default="", help="capacities for the picture, e.g. 10,50,100,200")
    p.add_argument("--svg", default="docs/benchmarks/async_io.svg")
    p.add_argument("--profile", type=int, default=15, help="top functions of the profile (0: none)")
    p.add_argument("--quick", action="store_true", help="2,000 rows, no sweep, no profile listing")
    a = p.parse_args(argv)
    if a.quick:
        a.rows, a.sweep, a.profile = 2_000, "", 0

    load_before = load()
    print(f"load average (1 / 5 / 15 min) before: {load_before}; {os.cpu_count()} CPUs")
    root = tempfile.mkdtemp(prefix="sbs_async_io_")
    port, stop = start_server(a.latency)
    zero_port, stop_zero = start_server(0.0)
    spark = session(a.partitions, a.capacity)
    try:
        path = make_data(spark, a.rows, a.partitions, root)
        print(f"data: {a.rows:,} rows (id long, key string), {a.partitions} parquet files; service: "
              + (f"asyncio TCP server on 127.0.0.1:{port}, {a.latency * 1000:g} ms a call"
                 if a.service == "tcp" else f"asyncio.sleep({a.latency})")
              + "; the Arrow UDF blocks in time.sleep for the same latency")
        call = make_service(a.service, port, a.latency)
        names = variants(call, a.capacity, a.latency)
        warm = make_data(spark, 500, a.partitions, root)
        for _, variant in names:  # warm-up: Python workers, imports, the first job
            run_batch(spark, warm, variant)
        little = a.capacity * a.partitions / a.latency
        rates = measure_all(spark, path, a.rows, names, root, not a.no_stream, a.runs)
        details = measure_all.details  # type: ignore[attr-defined]
        load_after = load()

        print(f"\nresults: {a.rows:,} rows, {a.partitions} tasks, capacity {a.capacity}, "
              f"{a.latency * 1000:g} ms; Little's law {little:,.0f} rows/s; median of {a.runs} run(s)")
        print(f"load average before {load_before}, after {load_after}\n")
        print(f"| {'variant':<38} | {'mode':<6} | {'rows/s':>8} | {'% of Little':>11} | "
              f"{'x hand-written':>14} | {'x Arrow UDF':>11} |")
        print(f"|{'-' * 40}|{'-' * 8}|{'-' * 10}|{'-' * 13}|{'-' * 16}|{'-' * 13}|")
        for (name, mode), rate in rates.items():
            hand = rates.get(("hand-written mapInPandas + Semaphore", mode))
            udf = rates.get(("Arrow UDF, concurrency.level", mode))
            print(f"| {name:<38} | {mode:<6} | {rate:>8,.0f} | {100 * rate / little:>10.1f}% | "
                  f"{rate / hand:>13.2f}x | {rate / udf:>10.2f}x |")
        if details:
            print("\nstreaming: micro-batches and durationMs (summed over the query's micro-batches)")
            for (name, _mode), s in details.items():
                d = s["durations"]
                parts = ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]))
                print(f"  {name:<38} {s['batches']} batch(es), {s['rows']:,} rows, query wall "
                      f"{s['wall']:.2f} s; {parts}")

        if a.service == "tcp" and not a.quick:
            zero = make_service("tcp", zero_port, 0.0)
            zrates = {}
            for name, variant in variants(zero, a.capacity, 0.0)[:3]:
                r = run_batch(spark, path, variant)
                zrates[name] = a.rows / r["wall"]
            print("\nthe service at 0 ms (what a row costs in the whole pipeline: Arrow, worker, service):")
            for name, rate in zrates.items():
                print(f"  {name:<40}{rate:>9,.0f} rows/s  {1e6 * a.partitions / rate:>7.1f} µs/row per task")

        sweep: dict[int, dict[str, float]] = {}
        for cap in [int(c) for c in a.sweep.split(",") if c]:
            spark.conf.set("spark.sql.execution.pythonUDF.arrow.concurrency.level", str(cap))
            bound = cap * a.partitions / a.latency
            n = max(5_000, min(a.rows, int(bound * 2.5)))  # about 2.5 s at the bound
            sweep_path = make_data(spark, n, a.partitions, root)
            sweep[cap] = {}
            for name, variant in variants(call, cap, a.latency):
                sweep[cap][name] = n / run_batch(spark, sweep_path, variant)["wall"]
            print(f"sweep capacity {cap}: {n:,} rows, Little's law {bound:,.0f}: "
                  + ", ".join(f"{k} {v:,.0f}" for k, v in sweep[cap].items()) + f" (load {load()})")
        if sweep:
            draw(sweep, a.partitions, a.latency, a.svg)
    finally:
        spark.stop()
        stop()
        stop_zero()
        shutil.rmtree(root, ignore_errors=True)
    python_per_row(min(a.rows, 50_000), a.capacity, a.profile)
    print(f"\nload average after everything: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
