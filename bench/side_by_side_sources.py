"""The built-in FLIP-27 file source against Spark's own JSON file source, side by side in one session.

`--files` JSONL files of `--rows` rows in all (generated into a temporary directory, removed at the
end) are read to the end (`trigger(availableNow=True)`) by

* (a) `read_files` (adapters/pyspark/sources/api.py: format `flip27`, `--readers` readers), and
* (b) Spark's JSON file source, `spark.readStream.schema(...).json(dir)`,

each into the same two sinks: a plain `writeStream.format("parquet")` and `foreachBatch(IdempotentSink)`.
Every run is a new query with its own checkpoint and output, the row count checked.  Printed per run
kind: rows/s (median over `--runs`, with the range), the ratio flip27 / Spark into the same sink, the
load average before and after, and where the time goes (StreamingQueryProgress durationMs summed:
latestOffset is the source's planning on the driver, addBatch the read tasks and the sink;
walls minus triggerExecution is the query's start and stop); then the Python parse on its own (the
file source's reader, `JsonLinesReader.read`, in this process over every file: what the executors'
Python does per row); then the picture's sweep: rows/s into parquet against the number of files at
the same rows (`--sweep`), saved to `--svg`.

    PYTHONPATH=. python bench/side_by_side_sources.py [--runs 3] [--files 50] [--rows 200000]
    PYTHONPATH=. python bench/side_by_side_sources.py --quick      # small, under a minute idle

The exit status is 0 whenever the benchmark ran (a busy machine is not an error).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _side import durations, first_trigger, load, progress_list, session, table  # noqa: E402

SCHEMA = "id long, name string, ts long, amount double, tags string"


def generate(directory: Path, files: int, rows: int, seed: int = 7) -> int:
    """`rows` JSON lines over `files` files (written under a `_` name, then renamed); their bytes."""
    rnd = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    per, extra = divmod(rows, files)
    n, size = 0, 0
    for f in range(files):
        lines = []
        for _ in range(per + (1 if f < extra else 0)):
            lines.append(
                json.dumps(
                    {
                        "id": n,
                        "name": f"user-{rnd.randrange(10000)}",
                        "ts": 1_700_000_000_000 + n,
                        "amount": round(rnd.random() * 1000, 2),
                        "tags": rnd.choice(["a", "b,c", "d,e,f", ""]),
                    }
                )
            )
            n += 1
        tmp, final = directory / f"_part-{f:05d}.json", directory / f"part-{f:05d}.json"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(final)
        size += final.stat().st_size
    return size


def source_df(spark: Any, kind: str, directory: Path, readers: int) -> Any:
    if kind == "flip27":
        from flink_semantics.adapters.pyspark.sources.api import read_files

        return read_files(spark, directory, SCHEMA, readers=readers)
    return spark.readStream.schema(SCHEMA).json(str(directory))


def run(
    spark: Any, kind: str, sink: str, directory: Path, work: Path, rows: int, readers: int
) -> dict[str, Any]:
    """One query to the end; rows/s over its wall time (start to termination) and its durations."""
    from flink_semantics.adapters.pyspark.sources.api import IdempotentSink

    tag = f"{kind}-{sink}-{time.monotonic_ns()}"
    out, ckpt = work / f"out-{tag}", work / f"ckpt-{tag}"
    df = source_df(spark, kind, directory, readers)
    w = df.writeStream.trigger(availableNow=True).option("checkpointLocation", str(ckpt))
    t0, e0 = time.monotonic(), time.time()
    if sink == "parquet":
        q = w.format("parquet").option("path", str(out)).start()
    else:
        q = w.foreachBatch(IdempotentSink(out)).start()
    q.awaitTermination(600)
    wall = time.monotonic() - t0
    if q.exception() is not None:
        raise RuntimeError(f"{kind} into {sink} failed: {q.exception()}")
    ps = progress_list(q)
    d = durations(ps)
    first = first_trigger(ps)
    d["start"] = (first - e0) if first is not None else 0.0
    got = (
        spark.read.parquet(str(out)).count()
        if sink == "parquet"
        else IdempotentSink.read(spark, out, ckpt).count()
    )
    if got != rows:
        raise AssertionError(f"{kind} into {sink}: {got} rows written, not {rows}")
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ckpt, ignore_errors=True)
    return {"rows/s": rows / wall, "wall": wall, **d}


def tiny_source() -> Any:
    """The least a Python streaming data source is: one partition of one row, no imports of this project
    (defined here, so that cloudpickle ships it by value)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class TinyReader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, int]:
            return {"o": 0}

        def latestOffset(self) -> dict[str, int]:
            return {"o": 1}

        def partitions(self, start: Any, end: Any) -> list[Any]:
            return [InputPartition(0)] if start != end else []

        def read(self, partition: Any) -> Any:
            yield (1,)

    class Tiny(DataSource):
        @classmethod
        def name(cls) -> str:
            return "side-tiny"

        def schema(self) -> str:
            return "x long"

        def streamReader(self, schema: Any) -> Any:
            return TinyReader()

    return Tiny


def start_cost(spark: Any, work: Path, runs: int) -> list[tuple[float, float]]:
    """A minimal Python streaming source to the end (availableNow, noop sink): (start to the first
    trigger, wall) per run: what any Python data source's query pays before it reads."""
    spark.dataSource.register(tiny_source())
    out = []
    for _ in range(runs):
        ckpt = work / f"tiny-{time.monotonic_ns()}"
        t0, e0 = time.monotonic(), time.time()
        q = (
            spark.readStream.format("side-tiny")
            .load()
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .option("checkpointLocation", str(ckpt))
            .start()
        )
        q.awaitTermination(600)
        wall = time.monotonic() - t0
        first = first_trigger(progress_list(q))
        out.append(((first - e0) if first is not None else 0.0, wall))
        shutil.rmtree(ckpt, ignore_errors=True)
    return out


def parse_alone(directory: Path, rows: int) -> tuple[float, int]:
    """The file source's reader over every file in this process: seconds, record batches."""
    from flink_semantics.adapters.pyspark.sources.files import JsonLinesReader
    from flink_semantics.adapters.pyspark.sources.flip27 import Split
    from pyspark.sql.types import _parse_datatype_string

    reader = JsonLinesReader(str(directory), _parse_datatype_string(SCHEMA))
    t0 = time.perf_counter()
    n = batches = 0
    for p in sorted(directory.iterdir()):
        size = p.stat().st_size
        for b in reader.read(Split(p.name, 0), 0, size):
            n += b.num_rows
            batches += 1
    assert n == rows, (n, rows)
    return time.perf_counter() - t0, batches


def fmt(x: float) -> str:
    return f"{x:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument(
        "--sweep", default="10,50,200", help="file counts of the picture (same rows); '' for none"
    )
    ap.add_argument("--svg", default="docs/benchmarks/sources.svg")
    ap.add_argument(
        "--quick", action="store_true", help="10 files, 20,000 rows, 1 run, sweep 5,20, no picture"
    )
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args(argv)
    if a.quick:
        a.files, a.rows, a.runs, a.sweep, a.svg = 10, 20_000, 1, "5,20", ""
    root = Path(tempfile.mkdtemp(prefix="side-sources-"))
    try:
        return bench(a, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench(a: argparse.Namespace, root: Path) -> int:
    data, work = root / "in", root / "work"
    size = generate(data, a.files, a.rows)
    print(
        f"data: {a.files} files, {a.rows:,} rows, {size / 1e6:.1f} MB; schema {SCHEMA}; "
        f"flip27 readers {a.readers}; cpu_count {os.cpu_count()}"
    )
    spark = session(a.master)
    import pyspark

    print(f"pyspark {pyspark.__version__}")
    kinds = [
        ("flip27", "parquet"),
        ("spark-json", "parquet"),
        ("flip27", "idempotent"),
        ("spark-json", "idempotent"),
    ]
    for kind, sink in kinds:  # Python workers, the JVM's JIT on the same data: one run each, not measured
        run(spark, kind, sink, data, work, a.rows, a.readers)
    before = load()
    results: dict[tuple[str, str], list[dict[str, Any]]] = {k: [] for k in kinds}
    for i in range(a.runs):
        for k in kinds if i % 2 == 0 else list(reversed(kinds)):  # alternate the order
            results[k].append(run(spark, *k, data, work, a.rows, a.readers))
    after = load()
    med = {k: statistics.median(r["rows/s"] for r in v) for k, v in results.items()}
    rows = []
    for kind, sink in kinds:
        v = [r["rows/s"] for r in results[(kind, sink)]]
        ratio = med[(kind, sink)] / med[("spark-json", sink)]
        rows.append(
            [
                kind,
                sink,
                fmt(med[(kind, sink)]),
                f"{fmt(min(v))}–{fmt(max(v))}",
                f"{ratio:.2f}" if kind == "flip27" else "1.00",
            ]
        )
    print(f"\nrows/s, median of {a.runs} (load {before} before, {after} after)")
    print(table(["source", "sink", "rows/s", "range", "ratio to Spark's JSON, same sink"], rows))
    for sink in ("parquet", "idempotent"):
        r = med[("flip27", sink)] / med[("spark-json", sink)]
        print(
            f"target flip27 >= 1.0x Spark's JSON into {sink}: {r:.2f} -> {'met' if r >= 1.0 else 'NOT met'}"
        )

    keys = ["latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution"]
    trows = []
    for k in kinds:
        avg = {key: statistics.mean(r.get(key, 0.0) for r in results[k]) for key in keys}
        wall = statistics.mean(r["wall"] for r in results[k])
        batches = statistics.mean(r["batches"] for r in results[k])
        start = statistics.mean(r["start"] for r in results[k])
        trows.append(
            [
                *k,
                f"{wall:.2f}",
                f"{batches:.0f}",
                f"{start:.2f}",
                *(f"{avg[key]:.2f}" for key in keys),
                f"{wall - start - avg['triggerExecution']:.2f}",
            ]
        )
    print("\nwhere the time goes (s, mean per run; durationMs summed over the query's progress)")
    print(
        table(
            ["source", "sink", "wall", "batches", "start (to 1st trigger)", *keys, "stop (the rest)"], trows
        )
    )
    secs, nb = parse_alone(data, a.rows)
    print(
        f"\nthe file source's Python parse alone (JsonLinesReader.read, pyarrow.json, one process): "
        f"{secs:.2f} s for {a.rows:,} rows = {fmt(a.rows / secs)} rows/s, {nb} record batches"
    )

    tiny = start_cost(spark, work, max(a.runs, 2))
    print(
        f"a minimal Python streaming data source (one row, nothing of this project), {len(tiny)} runs: "
        f"start to the first trigger {statistics.median(t for t, _ in tiny):.2f} s "
        f"({min(t for t, _ in tiny):.2f}–{max(t for t, _ in tiny):.2f}), "
        f"wall {statistics.median(w for _, w in tiny):.2f} s"
    )

    sweep = [int(x) for x in a.sweep.split(",") if x.strip()]
    points: dict[str, list[float]] = {"flip27": [], "spark-json": []}
    if sweep:
        s_before = load()
        for n in sweep:
            d = root / f"sweep-{n}"
            generate(d, n, a.rows)
            for kind in points:
                points[kind].append(
                    statistics.median(
                        run(spark, kind, "parquet", d, work, a.rows, a.readers)["rows/s"]
                        for _ in range(min(a.runs, 2))
                    )
                )
            shutil.rmtree(d, ignore_errors=True)
        print(
            f"\nsweep, into parquet, {a.rows:,} rows, median of {min(a.runs, 2)} "
            f"(load {s_before} before, {load()} after)"
        )
        print(
            table(
                ["files", "flip27 rows/s", "Spark JSON rows/s", "ratio"],
                [
                    [n, fmt(f), fmt(s), f"{f / s:.2f}"]
                    for n, f, s in zip(sweep, points["flip27"], points["spark-json"])
                ],
            )
        )
    spark.stop()
    if sweep and a.svg:
        picture(a.svg, sweep, points, a.rows)
    return 0


def picture(path: str, sweep: list[int], points: dict[str, list[float]], rows: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for kind, label in (
        ("flip27", "read_files (FLIP-27 file source)"),
        ("spark-json", "Spark's JSON file source"),
    ):
        ax.plot(sweep, points[kind], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("files (same rows in all)")
    ax.set_ylabel("rows/s into parquet")
    ax.set_title(f"{rows:,} JSON lines, availableNow, local[2]")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"picture: {path}")


if __name__ == "__main__":
    sys.exit(main())
