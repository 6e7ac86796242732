"""changelog_aggregate (mini-batch off, on, two-phase) side by side with Spark's groupBy().agg(), in
one process.

A CDC stream of a table's rows (`--changes` changes: inserts, updates as a -U/+U pair, deletes;
each row belongs to one of `--keys` group keys) in parquet files read `maxFilesPerTrigger` 1 with
`trigger(availableNow=True)` into the noop sink:

* `changelog_aggregate(key, op, value, order=lsn, aggregates=count, sum, min, max)` with
  mini-batch off, on (`--bundle-size`, a latency long enough that bundles finish by size or at
  each committed micro-batch) and two-phase (local-global);
* Spark's `groupBy(key).agg(count, sum, min, max)` in update mode on the raw stream: NOT the same
  semantics (every change is counted as a row: a -D or -U adds to the count instead of taking a
  row back, MIN and MAX never fall back), the nearest thing Spark offers without retraction.

Prints rows/s, the ratios, the load average before and after, where the time goes (durationMs
summed over the micro-batches, each state operator's numRowsUpdated and allUpdatesTimeMs), the
output rows (an observed metric) and the state accesses: measured (stage 2's state rows updated:
one handleInputRows call, a get and an update per key per micro-batch) and those Flink's
aggregation makes (a get and a put per input row with mini-batch off, per key per bundle on,
counted on the generated stream).  Then rows/s against the bundle size (`--curve`, on
`--curve-changes` changes) for the picture (`--picture`).

    PYTHONPATH=. python bench/side_by_side_mini_batch.py            # the issue's sizes
    PYTHONPATH=. python bench/side_by_side_mini_batch.py --quick    # under a minute idle

The exit status is 0 whenever the benchmark ran: a busy machine is not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flink_semantics.adapters.pyspark.mini_batch.api import STATE_STORE_CONF, changelog_aggregate  # noqa: E402

SCHEMA = "lsn long, op string, k long, v long"


def session(cores: int, partitions: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.sql.shuffle.partitions": str(partitions),
                "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
                **STATE_STORE_CONF}
    builder = SparkSession.builder.master(f"local[{cores}]").appName("side-by-side-mini-batch")
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(f"session: local[{cores}], " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    return spark


def cdc(changes: int, keys: int, seed: int = 45) -> list[tuple[int, str, int, int]]:
    """(lsn, op, key, value): a table's rows inserted, updated (-U old, +U new) and deleted."""
    import random

    rnd = random.Random(seed)
    live: list[tuple[int, int]] = []  # (key, value) of the table's rows
    out: list[tuple[int, str, int, int]] = []
    while len(out) < changes:
        r = rnd.random()
        if not live or r < 0.5:
            row = (rnd.randrange(keys), rnd.randrange(1_000_000))
            live.append(row)
            out.append((len(out), "+I", *row))
        elif r < 0.85 and len(out) + 2 <= changes:
            i = rnd.randrange(len(live))
            old = live[i]
            new = (old[0], rnd.randrange(1_000_000))
            live[i] = new
            out.append((len(out), "-U", *old))
            out.append((len(out), "+U", *new))
        else:
            i = rnd.randrange(len(live))
            live[i], live[-1] = live[-1], live[i]
            out.append((len(out), "-D", *live.pop()))
    return out


def write(directory: Path, rows: list[tuple[int, str, int, int]], files: int) -> None:
    import pandas as pd

    directory.mkdir(parents=True)
    df = pd.DataFrame(rows, columns=["lsn", "op", "k", "v"])
    step = -(-len(df) // files)
    for i in range(files):
        df.iloc[i * step:(i + 1) * step].to_parquet(directory / f"part-{i:04d}.parquet", index=False)


def flink_accesses(rows: list[tuple[int, str, int, int]], files: int, bundle: int | None) -> int:
    """The state gets and puts Flink's group aggregation makes on this stream: one each per input
    row without mini-batch, one each per key of each bundle with it (bundles of `bundle` rows, all
    finished at each micro-batch's end, as changelog_aggregate does by default)."""
    if bundle is None:
        return 2 * len(rows)
    step = -(-len(rows) // files)
    total = 0
    for i in range(files):
        batch = rows[i * step:(i + 1) * step]
        for j in range(0, len(batch), bundle):
            total += 2 * len({r[2] for r in batch[j:j + bundle]})
    return total


def run(spark: Any, df: Any, mode: str, checkpoint: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    observed = df.observe("out", F.count(F.lit(1)).alias("rows"))
    start = time.perf_counter()
    query = (observed.writeStream.format("noop").outputMode(mode).trigger(availableNow=True)
             .option("checkpointLocation", str(checkpoint)).start())
    query.awaitTermination()
    wall = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    durations: dict[str, float] = {}
    ops: dict[int, dict[str, float]] = {}
    rows = out = batches = 0
    for p in query.recentProgress:
        rows += p.numInputRows
        batches += 1 if p.numInputRows else 0
        for k, v in p.durationMs.items():
            durations[k] = durations.get(k, 0.0) + v / 1000
        for i, op in enumerate(p.stateOperators):
            o = ops.setdefault(i, {"name": op.operatorName, "updated": 0, "update_s": 0.0, "total": 0})
            o["updated"] += op.numRowsUpdated
            o["update_s"] += op.allUpdatesTimeMs / 1000
            o["total"] = op.numRowsTotal
        metric = p.observedMetrics.get("out")
        out += int(metric["rows"]) if metric is not None else 0
    return {"wall": wall, "rows": rows, "batches": batches, "out_rows": out, "durations": durations,
            "operators": list(ops.values()), "rows_per_s": rows / wall}


def describe(r: dict[str, Any]) -> str:
    d = r["durations"]
    parts = [f"{k} {d[k]:.1f}" for k in ("addBatch", "queryPlanning", "walCommit", "commitOffsets") if k in d]
    ops = "; ".join(f"op{i} {o['name']}: {o['updated']:,} state rows updated, allUpdatesTime "
                    f"{o['update_s']:.1f} s" for i, o in enumerate(r["operators"]))
    return f"{r['batches']} batches, {r['out_rows']:,} rows out; s: {', '.join(parts)}; {ops}"


def variants(bundle: int) -> dict[str, dict[str, Any] | None]:
    latency = 3_600_000  # an hour: bundles finish by size, or at each committed micro-batch (MB-13)
    return {"naive groupBy().agg() (update)": None,
            "changelog_aggregate, mini-batch off": {},
            f"changelog_aggregate, mini-batch on (size {bundle})":
                {"mini_batch": True, "allow_latency_ms": latency, "bundle_size": bundle},
            f"changelog_aggregate, two-phase (size {bundle})":
                {"mini_batch": True, "allow_latency_ms": latency, "bundle_size": bundle, "two_phase": True}}


def frame(spark: Any, directory: Path, options: dict[str, Any] | None) -> tuple[Any, str]:
    from pyspark.sql import functions as F

    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(directory))
    if options is None:
        return df.groupBy("k").agg(F.count("*").alias("count"), F.sum("v").alias("sum"),
                                   F.min("v").alias("min"), F.max("v").alias("max")), "update"
    return changelog_aggregate(df, key="k", op="op", value="v", order="lsn", **options), "append"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=150_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--files", type=int, default=6, help="micro-batches (one file each)")
    parser.add_argument("--bundle-size", type=int, default=1000)
    parser.add_argument("--curve", default="10,100,1000,10000", help="bundle sizes for the picture ('' none)")
    parser.add_argument("--curve-changes", type=int, default=30_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=2, help="spark.sql.shuffle.partitions")
    parser.add_argument("--picture", default=None, help="e.g. docs/benchmarks/mini_batch.svg")
    parser.add_argument("--json", default=None)
    parser.add_argument("--quick", action="store_true", help="small sizes: under a minute idle")
    args = parser.parse_args()
    if args.quick:
        args.changes, args.keys, args.files, args.bundle_size, args.curve = 3_000, 200, 2, 100, ""
    spark = session(args.cores, args.partitions)
    work = Path(tempfile.mkdtemp(prefix="bench-mb-side-"))
    load_before = os.getloadavg()
    print(f"cpus {os.cpu_count()}, load before " + " ".join(f"{x:.2f}" for x in load_before))
    results: list[dict[str, Any]] = []
    curve: list[dict[str, Any]] = []
    try:
        rows = cdc(args.changes, args.keys)
        write(work / "cdc", rows, args.files)
        write(work / "warm", cdc(500, 50, seed=1), 1)
        print(f"{args.changes:,} CDC changes over {args.keys:,} keys, {args.files} micro-batches", flush=True)
        for i, (name, options) in enumerate(variants(args.bundle_size).items()):
            if i < 2:  # warm-up: the JVM's code generation, Python workers
                df, mode = frame(spark, work / "warm", options)
                run(spark, df, mode, work / f"ck-warm-{i}")
            df, mode = frame(spark, work / "cdc", options)
            r = run(spark, df, mode, work / f"ck-{i}")
            bundle = None if not options or not options.get("mini_batch") else options["bundle_size"]
            accesses = flink_accesses(rows, args.files, bundle) if options is not None else None
            r.update(variant=name, flink_accesses=accesses)
            results.append(r)
            print(f"   {name:44} {r['rows']:>8,} rows in {r['wall']:6.1f} s = {r['rows_per_s']:>8,.0f} rows/s"
                  f"   ({describe(r)})", flush=True)
        naive = results[0]["rows_per_s"]
        for r in results[1:]:
            print(f"   {r['variant']:44} / naive = {r['rows_per_s'] / naive:.2f} (target >= 0.5); "
                  f"Flink's state accesses {r['flink_accesses']:,} = {r['flink_accesses'] / r['rows']:.2f} "
                  f"a row; Spark's stage-2 state rows updated "
                  f"{max(o['updated'] for o in r['operators']):,}")
        on_off = results[2]["rows_per_s"] / results[1]["rows_per_s"]
        print(f"   mini-batch on / off = {on_off:.2f} (target > 1)")
        sizes = [int(s) for s in args.curve.split(",") if s]
        if sizes:
            small = rows[:args.curve_changes]
            write(work / "curve", small, args.files)
            print(f"rows/s against the bundle size, {len(small):,} changes", flush=True)
            for size in [None, *sizes]:
                options = {} if size is None else {"mini_batch": True, "allow_latency_ms": 3_600_000,
                                                   "bundle_size": size}
                df, mode = frame(spark, work / "curve", options)
                r = run(spark, df, mode, work / f"ck-curve-{size}")
                r.update(bundle=size, flink_accesses=flink_accesses(small, args.files, size))
                curve.append(r)
                print(f"   bundle {str(size or 'off'):>6}: {r['rows_per_s']:>7,.0f} rows/s, Flink's accesses "
                      f"{r['flink_accesses'] / r['rows']:.2f} a row, {r['out_rows']:,} rows out "
                      f"({describe(r)})", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"load after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    if args.picture and curve:
        picture(args.picture, results, curve)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "curve": curve, "load_before": load_before,
                                               "load_after": load_after, "args": vars(args)}, indent=1))


def picture(path: str, results: list[dict[str, Any]], curve: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.barh([r["variant"] for r in results], [r["rows_per_s"] for r in results])
    a.set_xlabel("changes/s")
    a.set_title(f"{results[0]['rows']:,} CDC changes")
    a.tick_params(axis="y", labelsize=7)
    on = [c for c in curve if c["bundle"] is not None]
    off = next(c for c in curve if c["bundle"] is None)
    b.plot([c["bundle"] for c in on], [c["rows_per_s"] for c in on], "o-", label="mini-batch on")
    b.axhline(off["rows_per_s"], linestyle="--", color="gray", label="mini-batch off")
    b2 = b.twinx()
    b2.plot([c["bundle"] for c in on], [c["flink_accesses"] / c["rows"] for c in on], "s:", color="C3",
            label="Flink's state accesses a row")
    b2.set_ylabel("state accesses a row (Flink's model)")
    b.set_xscale("log")
    b.set_xlabel("bundle size (rows)")
    b.set_ylabel("changes/s")
    b.set_title(f"rows/s against the bundle size ({off['rows']:,} changes)")
    b.legend(loc="upper left", fontsize=8)
    b2.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"picture: {path}")


if __name__ == "__main__":
    main()
