"""`event_time_windows` against Spark's `withWatermark` + `groupBy(window(...))`, side by side in one session.

`--events` events (default 84,000) over `--splits` splits (Kafka-like `partition`, `offset`, `ts` in
ms, `value`) as `--files` JSON-lines files (a temporary directory, removed at the end), split 0
lagging `--lag` ms behind the others and the last split idle after the first file.  The same
streaming DataFrame (Spark's JSON file source, `maxFilesPerTrigger`, a processing-time trigger)
feeds

* `event_time_windows(..., window=1000)` (adapters/pyspark/watermarks/api.py), default (one group)
  and `parallel=True` (a group per reader, then the window operator), with
  `WatermarkStrategy(readers=2, bound=--bound, interval=200, idleness=2000)`;
* Spark: `withWatermark("t", "<bound> milliseconds").groupBy(window("t", "1 second"))` with the
  same count and sum, append mode;

each into a memory sink.  A run ends when the query's progress has counted every event.  rows/s is
the events over the processing time of the micro-batches that carried them (their
`triggerExecution`: what each side spends per event, without the trigger's idle waits); the wall
time from start to the last event's batch is printed too.  Printed: rows/s (median over `--runs`,
range), the ratio to withWatermark, the load before and after, where the time goes (durationMs
summed: addBatch is the stateful operator's tasks, Python included; queryPlanning, latestOffset,
the logs), the windows emitted, and the Python per event on its own (`WindowStage.run` in this
process on the same events: the readers, valve and windows without Spark); then the picture's
sweep over the number of splits, saved to `--svg`.

    PYTHONPATH=. python bench/side_by_side_watermarks.py [--runs 3] [--events 84000] [--splits 8]
    PYTHONPATH=. python bench/side_by_side_watermarks.py --quick

The exit status is 0 whenever the benchmark ran.
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

from _side import durations, load, progress_list, session, table, wait_rows  # noqa: E402

SCHEMA = "partition int, offset long, ts long, value double"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
KINDS = ("event_time_windows", "event_time_windows parallel", "withWatermark")
FLOOR = "applyInPandasWithState floor"  # the one-group design's floor in Spark (`--floor`)


def count_group(key: Any, frames: Any, state: Any) -> Any:
    """The least a stateful Python group can do: count its rows into its GroupState, one output row."""
    import pandas as pd

    n = sum(len(f) for f in frames)
    total = (state.get[0] if state.exists else 0) + n
    state.update((total,))
    yield pd.DataFrame({"n": [total]})


def generate(directory: Path, events: int, splits: int, files: int, lag: int, seed: int = 3) -> list[tuple]:
    """The events as files, file f covering event time [f s, f+1 s) (split 0 `lag` ms behind, the
    last split only in file 0), modification times in file order; the events (for the Python-alone
    measurement)."""
    rnd = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    per = events // files
    offsets = [0] * splits
    out = []
    base = time.time() - files - 10
    for f in range(files):
        lines = []
        active = splits if (f == 0 or splits == 1) else splits - 1
        for i in range(per):
            p = i % active
            ts = f * 1000 + (i * 1000) // per + rnd.randrange(50) - (lag if p == 0 and splits > 1 else 0)
            ev = (p, offsets[p], max(ts, 0), round(rnd.random() * 10, 3))
            offsets[p] += 1
            out.append(ev)
            lines.append(json.dumps(dict(zip(("partition", "offset", "ts", "value"), ev))))
        tmp, final = directory / f"_e-{f:04d}.json", directory / f"e-{f:04d}.json"
        tmp.write_text("\n".join(lines) + "\n")
        os.utime(tmp, (base + f, base + f))
        tmp.rename(final)
    return out


def query(spark: Any, kind: str, directory: Path, a: argparse.Namespace, name: str, ckpt: Path) -> Any:
    from flink_semantics.adapters.pyspark.watermarks.api import WatermarkStrategy, event_time_windows
    from pyspark.sql import functions as F

    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", a.per_trigger).json(str(directory))
    if kind == FLOOR:
        out = (
            events.withColumn("source", F.lit(""))
            .groupBy("source")
            .applyInPandasWithState(count_group, "n long", "n long", "append", "NoTimeout")
        )
    elif kind == "withWatermark":
        out = (
            events.withColumn("t", F.timestamp_millis("ts"))
            .withWatermark("t", f"{a.bound} milliseconds")
            .groupBy(F.window("t", "1 second"))
            .agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
        )
    else:
        strategy = WatermarkStrategy(readers=2, bound=a.bound, interval=200, idleness=2000)
        out = event_time_windows(
            events,
            split_col="partition",
            time_col="ts",
            order_col="offset",
            value_col="value",
            window=1000,
            strategy=strategy,
            parallel=kind.endswith("parallel"),
        )
    return (
        out.writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime=a.trigger)
        .start()
    )


def run(
    spark: Any, kind: str, directory: Path, work: Path, events: int, a: argparse.Namespace
) -> dict[str, Any]:
    name = f"q{time.monotonic_ns()}"
    ckpt = work / name
    q = query(spark, kind, directory, a, name, ckpt)
    try:
        wall = wait_rows(q, events, timeout=600)
        ps = progress_list(q)
    finally:
        q.stop()
    d = durations(ps)
    busy = sum(p["durationMs"].get("triggerExecution", 0) for p in ps if p.get("numInputRows", 0)) / 1000
    windows = spark.sql(
        f"select count(*) from {name}"
        + ("" if kind in ("withWatermark", FLOOR) else " where kind = 'window'")
    ).first()[0]
    spark.catalog.dropTempView(name)
    shutil.rmtree(ckpt, ignore_errors=True)
    return {
        "rows/s": events / busy,
        "busy": busy,
        "wall": wall,
        "wall rows/s": events / wall,
        "windows": windows,
        **d,
    }


def python_alone(evs: list[tuple], files: int, bound: int) -> float:
    """WindowStage.run over the events in `files` micro-batches, 500 ms apart: seconds."""
    from flink_semantics.adapters.pyspark.watermarks.api import WatermarkStrategy, WindowStage

    strategy = WatermarkStrategy(readers=2, bound=bound, interval=200, idleness=2000)
    per = len(evs) // files
    saved = None
    t0 = time.perf_counter()
    for f in range(files):
        stage = WindowStage(strategy, 1000, "drop", False, saved)
        stage.run(1_000_000 + 500 * f, [(p, o, t, None, v) for p, o, t, v in evs[f * per : (f + 1) * per]])
        saved = json.loads(json.dumps(stage.snapshot()))  # as the GroupState keeps it
    return time.perf_counter() - t0


def fmt(x: float) -> str:
    return f"{x:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=84_000)
    ap.add_argument("--splits", type=int, default=8)
    ap.add_argument("--files", type=int, default=42)
    ap.add_argument("--per-trigger", type=int, default=6, help="maxFilesPerTrigger")
    ap.add_argument("--trigger", default="500 milliseconds")
    ap.add_argument(
        "--bound", type=int, default=1000, help="out-of-orderness bound = withWatermark delay, ms"
    )
    ap.add_argument("--lag", type=int, default=3000, help="split 0's lag, ms")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sweep", default="2,4,8,16", help="split counts of the picture; '' for none")
    ap.add_argument("--sweep-events", type=int, default=21_000, help="events of each sweep point")
    ap.add_argument("--svg", default="docs/benchmarks/watermarks.svg")
    ap.add_argument("--quick", action="store_true", help="8,400 events in 12 files, 1 run, no sweep")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also a counting applyInPandasWithState (one group) on the same events: its floor",
    )
    a = ap.parse_args(argv)
    if a.quick:
        a.events, a.files, a.runs, a.sweep, a.svg = 8_400, 12, 1, "", ""
    root = Path(tempfile.mkdtemp(prefix="side-watermarks-"))
    try:
        return bench(a, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench(a: argparse.Namespace, root: Path) -> int:
    data, work = root / "in", root / "work"
    evs = generate(data, a.events, a.splits, a.files, a.lag)
    events = len(evs)
    print(
        f"data: {events:,} events, {a.splits} splits (split 0 {a.lag} ms behind, split {a.splits - 1} idle "
        f"after the first file), {a.files} files, maxFilesPerTrigger {a.per_trigger}, trigger {a.trigger}, "
        f"window 1 s, bound/delay {a.bound} ms; cpu_count {os.cpu_count()}"
    )
    spark = session(a.master, {"spark.sql.streaming.stateStore.providerClass": ROCKSDB})
    import pyspark

    print(f"pyspark {pyspark.__version__}")
    warm = root / "warm"
    wevs = generate(warm, 600, a.splits, 3, a.lag)
    kinds = KINDS + ((FLOOR,) if a.floor else ())
    for kind in kinds:  # Python workers, RocksDB: not measured
        run(spark, kind, warm, work, len(wevs), a)
    before = load()
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for i in range(a.runs):
        for k in kinds if i % 2 == 0 else tuple(reversed(kinds)):
            results[k].append(run(spark, k, data, work, events, a))
    after = load()
    med = {k: statistics.median(r["rows/s"] for r in v) for k, v in results.items()}
    base = med["withWatermark"]
    rows = []
    for k in kinds:
        v = [r["rows/s"] for r in results[k]]
        wall = statistics.median(r["wall rows/s"] for r in results[k])
        windows = "/".join(sorted({str(r["windows"]) for r in results[k]}))
        rows.append(
            [k, fmt(med[k]), f"{fmt(min(v))}–{fmt(max(v))}", f"{med[k] / base:.2f}", fmt(wall), windows]
        )
    print(f"\nevents per second of processing, median of {a.runs} (load {before} before, {after} after)")
    print(
        table(
            ["query", "rows/s", "range", "ratio to withWatermark", "rows/s of wall time", "windows emitted"],
            rows,
        )
    )
    for k in KINDS[:2]:
        r = med[k] / base
        print(f"target {k} >= 0.8x withWatermark: {r:.2f} -> {'met' if r >= 0.8 else 'NOT met'}")
    keys = ["latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets"]
    trows = []
    for k in kinds:
        m = {key: statistics.mean(r.get(key, 0.0) for r in results[k]) for key in keys}
        busy = statistics.mean(r["busy"] for r in results[k])
        n = statistics.mean(r["batches"] for r in results[k])
        trows.append(
            [
                k,
                f"{n:.0f}",
                f"{busy:.2f}",
                *(f"{m[key]:.2f}" for key in keys),
                f"{statistics.mean(r['wall'] for r in results[k]):.2f}",
            ]
        )
    print("\nwhere the time goes (s, mean per run; durationMs summed over every progress entry)")
    print(table(["query", "batches with data", "their triggerExecution", *keys, "wall"], trows))
    secs = python_alone(evs, a.files, a.bound)
    print(
        f"\nthe readers, valve and windows in Python alone (WindowStage.run, {a.files} batches, JSON state "
        f"between them): {secs:.2f} s = {fmt(events / secs)} events/s, {secs / events * 1e6:.1f} µs per event"
    )
    sweep = [int(x) for x in a.sweep.split(",") if x.strip()]
    points: dict[str, list[float]] = {k: [] for k in KINDS}
    if sweep:
        s_before = load()
        for n in sweep:
            d = root / f"sweep-{n}"
            n_events = len(generate(d, a.sweep_events, n, a.files, a.lag))
            for k in KINDS:
                points[k].append(run(spark, k, d, work, n_events, a)["rows/s"])
            shutil.rmtree(d, ignore_errors=True)
        print(
            f"\nsweep over splits, {a.sweep_events:,} events, one run each "
            f"(load {s_before} before, {load()} after)"
        )
        print(
            table(
                ["splits", *(f"{k} rows/s" for k in KINDS), "ratio default", "ratio parallel"],
                [
                    [
                        n,
                        *(fmt(points[k][i]) for k in KINDS),
                        f"{points[KINDS[0]][i] / points[KINDS[2]][i]:.2f}",
                        f"{points[KINDS[1]][i] / points[KINDS[2]][i]:.2f}",
                    ]
                    for i, n in enumerate(sweep)
                ],
            )
        )
    spark.stop()
    if sweep and a.svg:
        picture(a.svg, sweep, points, a.sweep_events)
    return 0


def picture(path: str, sweep: list[int], points: dict[str, list[float]], events: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k in KINDS:
        ax.plot(sweep, points[k], marker="o", label=k if k != "withWatermark" else "withWatermark + window")
    ax.set_xlabel("splits (one lagging, one idle)")
    ax.set_ylabel("events per second of processing")
    ax.set_title(f"{events:,} events, 1 s tumbling windows, local[2]")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"picture: {path}")


if __name__ == "__main__":
    sys.exit(main())
