"""keyed_process and rescale_state side by side with what Spark 4.3 offers, in one process.

(a) A running count per key over a file stream (`--events` events over `--keys` keys, parquet
    files read `maxFilesPerTrigger` 1, `trigger(availableNow=True)`, the noop sink), at each
    `--parallelism` (state partitions): `key_groups.api.keyed_process` (a KeyedProcessor that
    emits the key's count for every event, as Flink's running count does) against Spark's native
    `groupBy(key).count()` in update mode (one row per changed key per micro-batch) and against the
    `transformWithStateInPandas` count a Spark engineer writes by hand (grouped by the key: a
    ValueState per key, one row per changed key per micro-batch).  All three on the RocksDB state
    store with changelog checkpointing (what `keyed_process`'s `start` sets).
(b) Rescale 2 -> 4 at each `--rescale-keys` size: `rescale_state` (the state data source read,
    the redistribution by key group, materialized into the noop sink) and the first micro-batch of
    the new query that loads it as `initial_state`, against Spark's own
    `spark._streamingCheckpointManager.repartition(checkpoint, 4)` on a `groupBy().count()`
    checkpoint of the same keys and that query's first micro-batch after it.  rescale_state's
    checkpoint is built by keyed_process itself (one event per key), so sizes above
    `--max-keyed-build` are measured for Spark only (the build would take longer than the run).

Prints rows/s, the ratios, the load average before and after, and where the time goes (the
micro-batches' durationMs summed, numRowsUpdated); saves the picture (`--picture`) and the
figures as JSON (`--json`).

    PYTHONPATH=. python bench/side_by_side_key_groups.py            # the issue's sizes
    PYTHONPATH=. python bench/side_by_side_key_groups.py --quick    # under a minute idle

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flink_semantics.adapters.pyspark.key_groups import api  # noqa: E402

MAX_P = 128
SCHEMA = "user long, seq long"


def session(cores: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.sql.streaming.stateStore.providerClass": api.PROVIDER,
                "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}
    builder = SparkSession.builder.master(f"local[{cores}]").appName("side-by-side-key-groups")
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(f"session: local[{cores}], " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    return spark


def write_events(directory: Path, keys: Any, files: int) -> None:
    """`keys` (a numpy array, one event each, in order) as `files` parquet files."""
    import numpy as np
    import pandas as pd

    directory.mkdir(parents=True)
    for i, part in enumerate(np.array_split(np.arange(len(keys)), files)):
        pd.DataFrame({"user": keys[part].astype("int64"), "seq": part.astype("int64")}).to_parquet(
            directory / f"part-{i:04d}.parquet", index=False)


class RunningCount(api.KeyedProcessor):
    """Flink's running count: each event emits its key's count so far."""

    state_schema = "n long"
    output_schema = "user long, n long"

    def process(self, key, row, state, ctx):  # type: ignore[no-untyped-def]
        got = state.get()
        n = 1 if got is None else got[0] + 1
        state.update((n,))
        return ((key, n),)


def plain_count_processor() -> Any:
    """The transformWithStateInPandas count a Spark engineer writes: grouped by the key itself."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class PlainCount(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "n long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n = sum(len(pdf) for pdf in rows)
            got = self.count.get()
            total = n + (0 if got is None else int(got[0]))
            self.count.update((total,))
            yield pd.DataFrame({"user": [int(key[0])], "n": [total]})

        def close(self) -> None:
            pass

    return PlainCount()


def python_per_row(rows: int = 25_000) -> dict[str, float]:
    """keyed_process's Python share alone: its processor's `handleInputRows` on `rows` rows of one
    subtask, with the state store a Python dict (no Spark task, no state server), deferred writes
    and write-through: microseconds a row and state calls a row."""
    import numpy as np
    import pandas as pd
    import pyspark

    class Task:
        def partitionId(self) -> int:
            return 0

    class Map:  # MapState's calls on a dict
        def __init__(self) -> None:
            self.d: dict[Any, Any] = {}
            self.calls = 0

        def getValue(self, k: Any) -> Any:
            self.calls += 1
            return self.d.get(k)

        def updateValue(self, k: Any, v: Any) -> None:
            self.calls += 1
            self.d[k] = v

        def removeKey(self, k: Any) -> None:
            self.calls += 1
            self.d.pop(k, None)

        def exists(self) -> bool:
            return bool(self.d)

    class Value:
        def __init__(self) -> None:
            self.v: Any = None

        def get(self) -> Any:
            return self.v

        def update(self, v: Any) -> None:
            self.v = v

    keys = np.random.default_rng(1).integers(0, rows, rows)
    columns = {"user": keys, "seq": np.arange(rows), api.TYPE: "long", api.KEY: keys.astype(str), api.JOB: 0,
               api.HASH: 0, api.GROUP: 0, api.SUBTASK: 0, api.TARGET: None, api.SALT: 0, api.AT: 0}
    pdf = pd.DataFrame(columns)
    get = pyspark.TaskContext.get
    pyspark.TaskContext.get = staticmethod(lambda: Task())  # type: ignore[method-assign,assignment]
    out: dict[str, float] = {}
    try:
        for name, hook in (("deferred", None), ("write-through", no_hook)):
            p = api._KeyGroupProcessor(RunningCount(), list(columns), None, ["user", "n"], False, 2,
                                       {0: (2, MAX_P, "flink")}, hook)
            p.keyed, p.operator, p.next_pos, p.conf = Map(), Value(), Value(), Value()
            start = time.perf_counter()
            for _ in p.handleInputRows((0, 0), iter([pdf]), None):
                pass
            out[f"{name} us/row"] = (time.perf_counter() - start) / rows * 1e6
            out[f"{name} state calls/row"] = p.keyed.calls / rows
    finally:
        pyspark.TaskContext.get = get  # type: ignore[method-assign]
    return out


def stream(spark: Any, directory: Path) -> Any:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(directory))


def run_query(spark: Any, df: Any, mode: str, checkpoint: Path, partitions: int) -> dict[str, Any]:
    """df into the noop sink until its input is consumed: wall seconds and the summed progress."""
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    writer = (df.writeStream.format("noop").outputMode(mode).trigger(availableNow=True)
              .option("checkpointLocation", str(checkpoint)))
    start = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    wall = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return {"wall": wall, **progress_summary(query.recentProgress)}


def progress_summary(progress: list[Any]) -> dict[str, Any]:
    durations: dict[str, float] = {}
    rows = updated = batches = 0
    for p in progress:
        if p.numInputRows == 0 and not p.stateOperators:
            continue
        batches += 1 if p.numInputRows else 0
        rows += p.numInputRows
        for k, v in p.durationMs.items():
            durations[k] = durations.get(k, 0.0) + v / 1000
        updated += sum(op.numRowsUpdated for op in p.stateOperators)
    return {"rows": rows, "batches": batches, "durations": durations, "state_rows_updated": updated}


def where(r: dict[str, Any]) -> str:
    d = r["durations"]
    parts = [f"{k} {d[k]:.1f}" for k in ("triggerExecution", "addBatch", "queryPlanning", "walCommit",
                                           "commitOffsets", "latestOffset") if k in d]
    return (f"{r['batches']} batches; s: " + ", ".join(parts)
            + f"; state rows updated {r['state_rows_updated']:,}")


def no_hook(point: str) -> None:
    """An `on_state_update` hook that does nothing: with a hook, keyed_process writes each row's
    state to the store at once (as before it deferred the writes to one per key and call)."""


def throughput(spark: Any, work: Path, events: int, keys: int, files: int, parallelisms: list[int],
               plain_events: int, write_through: bool = False) -> list[dict[str, Any]]:
    import numpy as np

    rng = np.random.default_rng(45)
    full = rng.integers(0, keys, size=events)
    write_events(work / "events", full, files)
    # the hand-written processor's per-key calls cost most: it may run on a prefix of the same
    # events, in as many files as the same events per micro-batch make
    plain_files = max(1, round(files * plain_events / events))
    if plain_events < events:
        write_events(work / "events-plain", full[:plain_events], plain_files)
    write_events(work / "warm", rng.integers(0, 100, size=1000), 1)
    variants: dict[str, tuple[Callable[[Any], Any], str, str]] = {
        "native groupBy().count()": (lambda df: df.groupBy("user").count(), "update", "events"),
        "keyed_process": (None, "append", "events"),  # type: ignore[dict-item]
        **({"keyed_process, write-through": (None, "append", "events")}  # type: ignore[dict-item]
           if write_through else {}),
        "plain transformWithStateInPandas": (
            lambda df: df.groupBy("user").transformWithStateInPandas(
                plain_count_processor(), "user long, n long", "Append", "None"),
            "append", "events" if plain_events >= events else "events-plain"),
    }
    results = []
    n = 0
    for p in parallelisms:
        for name, (build, mode, data) in variants.items():
            def frame(directory: Path, name: str = name, build: Any = build, p: int = p) -> Any:
                df = stream(spark, directory)
                if name.startswith("keyed_process"):
                    hook = no_hook if name.endswith("write-through") else None
                    return api.keyed_process(df, key="user", processor=RunningCount(), parallelism=p,
                                             max_parallelism=MAX_P, on_state_update=hook)
                return build(df)
            n += 1
            if p == parallelisms[0]:  # warm-up: Python workers, code generation
                run_query(spark, frame(work / "warm"), mode, work / f"ck-warm-{n}", p)
            r = run_query(spark, frame(work / data), mode, work / f"ck-{n}", p)
            r.update(variant=name, parallelism=p, rows_per_s=r["rows"] / r["wall"])
            results.append(r)
            print(f"   p={p} {name:34} {r['rows']:>8,} rows in {r['wall']:6.1f} s = "
                  f"{r['rows_per_s']:>9,.0f} rows/s   ({where(r)})", flush=True)
    return results


def rescale(spark: Any, work: Path, sizes: list[int], max_keyed_build: int) -> list[dict[str, Any]]:
    import numpy as np

    out = []
    for keys in sizes:
        rng = np.random.default_rng(keys)
        base = work / f"rescale-{keys}"
        write_events(base / "events", rng.permutation(keys), max(1, keys // 100_000))
        write_events(base / "more", rng.integers(0, keys, size=1000), 1)
        write_events(base / "more-native", rng.integers(0, keys, size=1000), 1)
        r: dict[str, Any] = {"keys": keys}
        # Spark's own: groupBy().count() at 2, repartition to 4 offline, restarted at 4
        native_ck, native_in = base / "ck-native", base / "native-in"
        shutil.copytree(base / "events", native_in)
        build = run_query(spark, stream(spark, native_in).groupBy("user").count(), "update", native_ck, 2)
        start = time.perf_counter()
        spark._streamingCheckpointManager.repartition(str(native_ck), 4)
        r["spark_repartition_s"] = time.perf_counter() - start
        shutil.copy(base / "more-native" / "part-0000.parquet", native_in / "zz-more.parquet")
        after = run_query(spark, stream(spark, native_in).groupBy("user").count(), "update", native_ck, 4)
        r["spark_first_batch_s"] = after["wall"]
        r["spark_build_s"] = build["wall"]
        line = (f"   {keys:>9,} keys  Spark repartition {r['spark_repartition_s']:6.1f} s, restarted "
                f"query {r['spark_first_batch_s']:5.1f} s (build {build['wall']:.1f} s)")
        if keys <= max_keyed_build:
            ck = base / "ck-keyed"
            df = stream(spark, base / "events")
            built = run_query(spark, api.keyed_process(df, key="user", processor=RunningCount(),
                                                       parallelism=2, max_parallelism=MAX_P),
                              "append", ck, 2)
            start = time.perf_counter()
            conf = api.checkpoint_config(spark, str(ck))
            r["config_s"] = time.perf_counter() - start
            state = api.rescale_state(spark, str(ck), new_parallelism=4,
                                      state_schema=RunningCount.state_schema)
            r["plan_s"] = time.perf_counter() - start - r["config_s"]
            t = time.perf_counter()
            state.write.format("noop").mode("overwrite").save()  # the read and the shuffle
            r["redistribute_s"] = time.perf_counter() - t
            r["rescale_state_s"] = time.perf_counter() - start - r["config_s"]  # its own reads only
            new = api.keyed_process(stream(spark, base / "more"), key="user", processor=RunningCount(),
                                    parallelism=4, initial_state=state)
            first = run_query(spark, new, "append", base / "ck-keyed-4", 4)
            r["keyed_first_batch_s"] = first["wall"]
            r["keyed_first_batch"] = first["durations"]
            r["keyed_build_s"] = built["wall"]
            line += (f"\n   {'':>9}       rescale_state {r['rescale_state_s']:6.1f} s (its checkpoint "
                     f"reads {r['plan_s']:.1f}: latest batch, checkpoint_config, plan; "
                     f"state read + redistribution "
                     f"{r['redistribute_s']:.1f}), restarted query with initial_state "
                     f"{first['wall']:.1f} s (addBatch {first['durations'].get('addBatch', 0):.1f}); "
                     f"conf {conf[0]} (checkpoint_config alone {r['config_s']:.1f} s); "
                     f"build {built['wall']:.1f} s")
            total_ours = r["rescale_state_s"] + r["keyed_first_batch_s"]
            total_spark = r["spark_repartition_s"] + r["spark_first_batch_s"]
            line += (f"\n   {'':>9}       rescale + restart: rescale_state {total_ours:.1f} s, Spark "
                     f"{total_spark:.1f} s: ratio (Spark / ours) {total_spark / total_ours:.2f}")
        else:
            line += f"\n   {'':>9}       rescale_state: not measured (building {keys:,} keys through " \
                    f"keyed_process is above --max-keyed-build {max_keyed_build:,})"
        print(line, flush=True)
        out.append(r)
        shutil.rmtree(base, ignore_errors=True)
    return out


def picture(path: str, tp: list[dict[str, Any]], rs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = list(dict.fromkeys(r["variant"] for r in tp))
    ps = sorted({r["parallelism"] for r in tp})
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ys = [next((r["rows_per_s"] for r in tp if r["variant"] == name and r["parallelism"] == p), 0)
              for p in ps]
        a.bar([j + i * width for j in range(len(ps))], ys, width, label=name)
    a.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(ps))], [f"parallelism {p}" for p in ps])
    a.set_ylabel("events/s")
    a.set_title("running count per key")
    a.legend(fontsize=8)
    xs = [r["keys"] for r in rs]
    b.plot(xs, [r["spark_repartition_s"] for r in rs], "o-", label="Spark repartition (offline)")
    b.plot(xs, [r["spark_repartition_s"] + r["spark_first_batch_s"] for r in rs], "o--",
           label="Spark repartition + restarted query")
    ours = [r for r in rs if "rescale_state_s" in r]
    b.plot([r["keys"] for r in ours], [r["rescale_state_s"] for r in ours], "s-",
           label="rescale_state (read + redistribute)")
    b.plot([r["keys"] for r in ours], [r["rescale_state_s"] + r["keyed_first_batch_s"] for r in ours], "s--",
           label="rescale_state + query with initial_state")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("keys in the state")
    b.set_ylabel("seconds")
    b.set_title("rescale 2 -> 4")
    b.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"picture: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--files", type=int, default=6, help="micro-batches (one file each)")
    parser.add_argument("--parallelism", default="2,4")
    parser.add_argument("--plain-events", type=int, default=None,
                        help="events for the hand-written processor (default: --events)")
    parser.add_argument("--rescale-keys", default="10000,100000,1000000")
    parser.add_argument("--max-keyed-build", type=int, default=100_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--picture", default=None, help="e.g. docs/benchmarks/key_groups.svg")
    parser.add_argument("--json", default=None)
    parser.add_argument("--skip", choices=("throughput", "rescale"), default=None)
    parser.add_argument("--write-through", action="store_true",
                        help="also keyed_process with a no-op on_state_update hook: each row's write at once")
    parser.add_argument("--quick", action="store_true", help="small sizes: under a minute idle")
    args = parser.parse_args()
    if args.quick:
        args.events, args.keys, args.files, args.parallelism = 6_000, 1_000, 2, "2"
        args.rescale_keys, args.max_keyed_build = "1000", 1000
    plain = args.plain_events or args.events
    spark = session(args.cores)
    work = Path(tempfile.mkdtemp(prefix="bench-kg-side-"))
    load_before = os.getloadavg()
    print(f"cpus {os.cpu_count()}, load before " + " ".join(f"{x:.2f}" for x in load_before))
    tp: list[dict[str, Any]] = []
    rs: list[dict[str, Any]] = []
    try:
        if args.skip != "throughput":
            print(f"(a) running count: {args.events:,} events, {args.keys:,} keys, {args.files} "
                  f"micro-batches (plain processor: {plain:,} events)", flush=True)
            tp = throughput(spark, work, args.events, args.keys, args.files,
                            [int(p) for p in args.parallelism.split(",")], plain, args.write_through)
            for p in sorted({r["parallelism"] for r in tp}):
                by = {r["variant"]: r["rows_per_s"] for r in tp if r["parallelism"] == p}
                ours = by["keyed_process"]
                print(f"   p={p}: keyed_process / native = {ours / by['native groupBy().count()']:.2f} "
                      f"(target >= 0.5), keyed_process / plain = "
                      f"{ours / by['plain transformWithStateInPandas']:.2f} (target >= 3)")
                if "keyed_process, write-through" in by:
                    print(f"   p={p}: keyed_process / its write-through = "
                          f"{ours / by['keyed_process, write-through']:.2f}")
            python_per_row()  # (warm-up: imports, pandas' caches)
            alone = python_per_row()
            print("   keyed_process's Python alone (a dict for the state store, 25,000 rows of a subtask): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in alone.items()))
        if args.skip != "rescale":
            print("(b) rescale 2 -> 4", flush=True)
            rs = rescale(spark, work, [int(k) for k in args.rescale_keys.split(",")], args.max_keyed_build)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"load after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    if args.picture and tp and rs:
        picture(args.picture, tp, rs)
    if args.json:
        Path(args.json).write_text(json.dumps({"throughput": tp, "rescale": rs, "load_before": load_before,
                                               "load_after": load_after, "args": vars(args)}, indent=1))


if __name__ == "__main__":
    main()
