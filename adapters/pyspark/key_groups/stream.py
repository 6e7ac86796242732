"""Key groups on Structured Streaming: keyed and operator state held by a real streaming query,
read back with Spark's state data source, redistributed by key-group range across a rescale and
restored into a query at the new parallelism (spec/key-groups.md).

The mapping:

* **a job** is one streaming query with `spark.sql.shuffle.partitions` = its parallelism p, on the
  RocksDB state store (pitfall P4), its own checkpoint location and a file source as its input: a
  micro-batch per file the driver writes (`processAllAvailable`);
* **a subtask** is one grouping key of `groupBy("salt").transformWithStateInPandas`: a row's
  key group and subtask are native Spark expressions (`spark.with_key_groups`: KG-1..KG-3, KG-11,
  KG-22..KG-27, KG-30), and its `salt` is the int whose Spark hash partitioning is the subtask
  (`spark.partition_salts`: `pmod(hash(salt), p)` == subtask, KG-30).  Spark's state partition of
  a grouping key is that same hash partitioning, so state partition i *is* subtask i: the state
  reader's `partition_id` is where Spark really keeps a key's state, and the trace shows it (a
  routed key's `subtask` is the partition its update ran in, `TaskContext.partitionId()`);
* **the subtask's keyed state backend** is the MapState `keyed`: (key group, type, key) -> sum;
  **its operator list state** is the ListState `operator`: (name, mode, pos, element), `pos` the
  element's place in the subtask's lists (ValueState `next_pos`);
* **a null key** under the `flink` profile is not routed (KG-7): its row goes to the group -1, whose
  processor refuses it (`null_key`) and touches no state;
* **a checkpoint** is a committed micro-batch: the `checkpoint` step runs the batch of the steps
  before it (an empty file when there are none, so there is always one) and remembers (location,
  batch id, p, maxP, explicit, the declared state names and modes: the job's metadata);
* **a restore** stops the query; the checkpoint's state is read with the state data source
  (`format("statestore")`, `stateVarName`, `batchId`: the state as of that batch, so updates after
  the checkpoint are lost, as in Flink); keyed state goes to the new subtasks by a join of the old
  and new key-group ranges (KG-13: each new subtask takes the key groups of its range from every old
  subtask whose range intersects it); operator state by Flink's round-robin repartitioner written
  as DataFrame operations (KG-17..KG-21, `_split`, `_union`, `_broadcast`); the result is the
  `initialState` of a new query at the new parallelism, applied in its first batch, and read back
  from that batch with the state data source for the trace's `keyed` and `operator` events;
* **refusals** (KG-8, KG-15, KG-16) are checked on the driver before anything stops: the running
  query goes on;
* **a string key with an unpaired surrogate** (KG-34) is refused up front (`UNSUPPORTED`): a
  Spark string is UTF-8 (`UTF8String`), and the JSON reader's `UTF8String.fromString` writes the
  surrogate as '?', so the key could not be told from "?" in the grouping, the state and the
  trace, and its UTF-16 units (KG-11) would be lost.

The engine (`engine.py`) is used for the ranges and the default maximum parallelism only; the hash,
the routing, the state and its redistribution are Spark's.  No RDD API, no SparkContext: it runs
under Spark Connect.  One schedule costs seconds (a query per job, a micro-batch per checkpoint):
the tests run a few hand-written and drawn schedules, not the suite's budget.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark.key_groups.engine import (
    default_max_parallelism,
    key_group_range,
    key_sort,
    parallelism_in_bounds,
    restore_refusal,
)
from flink_semantics.adapters.pyspark.key_groups.spark import partition_salts, with_key_groups
from flink_semantics.adapters.pyspark.session import query_conf, struct
from flink_semantics.spec.areas.key_groups import (
    AddStateStep,
    CheckpointStep,
    KeyGroupsConfig,
    RestoreStep,
    UpdateStep,
    event,
)
from flink_semantics.spec.schedule import Event, Schedule, required_capabilities

PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

# What this face of the area cannot run, and why (spec/adapter.py's form: capability -> reason).
UNSUPPORTED = {
    "key_groups.lone_surrogates": (
        "Spark's StringType holds UTF-8 (UTF8String), which has no form for an unpaired surrogate: "
        "UTF8String.fromString is String.getBytes(UTF_8), which writes it as '?' (the JSON source's "
        "path), createDataFrame's pickled rows give U+FFFD and Arrow refuses it, so such a key would "
        "be another key (\"?\") in the query's grouping and state (KG-34)"),
}
REFUSED_GROUP = -1  # the grouping key of a null key's row under `flink` (KG-7)

INPUT_SCHEMA = ("seq long, kind string, key string, type string, value long, target int, name string, "
                "mode string, element long")
OUTPUT_SCHEMA = "seq long, kind string, hash int, key_group int, partition int, value long"
INITIAL_SCHEMA = ("salt int, kind string, key_group int, type string, key string, value long, "
                  "name string, mode string, pos long, element long")
KEYED_KEY = "key_group int, type string, key string"
OPERATOR_ELEMENT = "name string, mode string, pos long, element long"

try:
    from pyspark.sql.streaming import StatefulProcessor
except ImportError:  # pyspark missing: the module still imports (the adapter reports it)
    StatefulProcessor = object  # type: ignore[assignment,misc]


class KeyGroupsProcessor(StatefulProcessor):  # type: ignore[misc,valid-type]
    """One subtask (one grouping key, its salt): its keyed state and its operator list state."""

    def init(self, handle: Any) -> None:
        self.keyed = handle.getMapState("keyed", struct(KEYED_KEY), struct("value long"))
        self.operator = handle.getListState("operator", struct(OPERATOR_ELEMENT))
        self.next_pos = handle.getValueState("next_pos", struct("pos long"))

    def _pos(self) -> int:
        return int(self.next_pos.get()[0]) if self.next_pos.exists() else 0

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        """The restored state of this subtask (KG-13, KG-17..KG-21): rows of `INITIAL_SCHEMA`."""
        pos = self._pos()
        for r in initialState.itertuples(index=False):
            if r.kind == "keyed":
                self.keyed.updateValue((int(r.key_group), r.type, _text(r.key)), (int(r.value),))
            else:
                self.operator.appendValue((r.name, r.mode, int(r.pos), int(r.element)))
                pos = max(pos, int(r.pos) + 1)
        self.next_pos.update((pos,))

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else -1
        refused = int(key[0]) == REFUSED_GROUP
        out: list[tuple[Any, ...]] = []
        pos = self._pos()
        for pdf in rows:
            for r in pdf.sort_values("seq").itertuples(index=False):
                if refused:  # KG-7: a null key is not routed
                    out.append((int(r.seq), "null_key", None, None, None, None))
                elif r.kind == "update":  # KG-6: the key's sum on the subtask of its key group
                    k = (int(r.key_group), r.type, _text(r.key))
                    before = int(self.keyed.getValue(k)[0]) if self.keyed.containsKey(k) else 0
                    total = before + int(r.value)
                    self.keyed.updateValue(k, (total,))
                    out.append((int(r.seq), "routed", int(r.hash), int(r.key_group), partition, total))
                else:  # add_state: append to this subtask's list `name`
                    self.operator.appendValue((r.name, r.mode, pos, int(r.element)))
                    pos += 1
        self.next_pos.update((pos,))
        yield pd.DataFrame(out, columns=["seq", "kind", "hash", "key_group", "partition", "value"])

    def close(self) -> None:
        pass


def _text(v: Any) -> str | None:
    """A key as pandas gives it (None or NaN for null) as text or None."""
    return v if isinstance(v, str) else None


def _functions(spark: Any) -> Any:
    from flink_semantics.adapters.pyspark.session import is_connect

    if is_connect(spark):  # a Connect client next to a classic session needs its own functions
        from pyspark.sql.connect import functions as F
    else:
        from pyspark.sql import functions as F  # type: ignore[no-redef]
    return F


def _window(spark: Any) -> Any:
    from flink_semantics.adapters.pyspark.session import is_connect

    if is_connect(spark):
        from pyspark.sql.connect.window import Window
    else:
        from pyspark.sql import Window  # type: ignore[assignment]
    return Window


def _salt(F: Any, subtask: Any, p: int) -> Any:
    """The grouping key of a row of `subtask` in a job of p subtasks (its state partition)."""
    salts = F.array(*[F.lit(v) for v in partition_salts(p)])
    # (element_at of a null index gives the array's first element here, not null: test it first)
    salt = F.when(subtask.isNull(), F.lit(REFUSED_GROUP)).otherwise(F.element_at(salts, subtask + 1))
    return salt.cast("int")


@dataclass
class Checkpoint:
    """A completed checkpoint: the query's checkpoint location and batch, and the job's metadata."""

    location: str
    batch: int
    parallelism: int
    max_parallelism: int
    explicit: bool
    modes: dict[str, str]


class Job:
    """One streaming query at parallelism p; its input is a folder of files, one per micro-batch."""

    def __init__(self, spark: Any, root: Path, p: int, max_p: int, profile: str, initial: Any = None):
        self.spark, self.p, self.max_p = spark, p, max_p
        self.name = "kg_" + uuid.uuid4().hex[:12]
        self.dir = root / self.name
        self.input = self.dir / "in"
        self.input.mkdir(parents=True)
        self.location = str(self.dir / "checkpoint")
        self.batches = 0
        F = _functions(spark)
        rows = spark.readStream.schema(INPUT_SCHEMA).json(str(self.input))
        routed = with_key_groups(rows, max_p, p, profile)  # hash, key_group, subtask: Spark expressions
        subtask = F.when(F.col("kind") == "update", F.col("subtask")).otherwise(F.col("target"))
        grouped = routed.withColumn("salt", _salt(F, subtask, p)).groupBy("salt")
        out = grouped.transformWithStateInPandas(
            KeyGroupsProcessor(), struct(OUTPUT_SCHEMA), "Append", "None",
            initialState=None if initial is None else initial.groupBy("salt"))
        with query_conf(spark, {"spark.sql.shuffle.partitions": str(p),
                           "spark.sql.streaming.stateStore.providerClass": PROVIDER}):
            self.query = (out.writeStream.format("memory").queryName(self.name).outputMode("append")
                          .option("checkpointLocation", self.location).start())

    def run_batch(self, rows: list[dict[str, Any]]) -> int:
        """One micro-batch of these input rows (possibly none); its batch id."""
        tmp = self.dir / "next.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.input / f"{self.batches:06d}.json")
        self.query.processAllAvailable()
        self.batches += 1
        return self.batches - 1

    def stop(self) -> list[Any]:
        """Stop the query; its output rows (the memory sink's table, dropped)."""
        self.query.stop()
        if self.batches == 0:
            return []
        out = self.spark.table(self.name).collect()
        self.spark.catalog.dropTempView(self.name)
        return out


def _read_state(spark: Any, location: str, variable: str, batch: int) -> Any:
    return (spark.read.format("statestore").option("stateVarName", variable)
            .option("batchId", batch).load(location))


def keyed_state(spark: Any, location: str, batch: int) -> Any:
    """(partition, key_group, type, key, value): every subtask's keyed state as of `batch`."""
    F = _functions(spark)
    return _read_state(spark, location, "keyed", batch).select(
        F.col("partition_id").alias("partition"), "user_map_key.key_group", "user_map_key.type",
        "user_map_key.key", F.col("user_map_value.value").alias("value"))


def operator_state(spark: Any, location: str, batch: int) -> Any:
    """(partition, name, mode, pos, element): every subtask's operator list state as of `batch`."""
    F = _functions(spark)
    return _read_state(spark, location, "operator", batch).select(
        F.col("partition_id").alias("partition"), "list_element.*")


# --------------------------------------------------------------------------
# Redistribution as DataFrame operations
# --------------------------------------------------------------------------


def _ranges(spark: Any, max_p: int, p: int, prefix: str) -> Any:
    rows = [(i, *key_group_range(max_p, p, i)) for i in range(p)]
    return spark.createDataFrame(rows, f"{prefix} int, {prefix}_first int, {prefix}_last int")


def redistribute_keyed(spark: Any, keyed: Any, max_p: int, old_p: int, new_p: int) -> Any:
    """KG-13 (KG-14 at the same parallelism): (new, key_group, type, key, value), each new subtask
    with the key groups of its range taken from every old subtask whose range intersects it."""
    F = _functions(spark)
    pairs = _ranges(spark, max_p, old_p, "old").join(
        _ranges(spark, max_p, new_p, "new"),
        (F.col("old_first") <= F.col("new_last")) & (F.col("new_first") <= F.col("old_last")))
    state = keyed.withColumnRenamed("partition", "old")
    kg = F.col("key_group")
    return (state.join(pairs, "old")
            .where((kg >= F.greatest("old_first", "new_first")) & (kg <= F.least("old_last", "new_last")))
            .select("new", "key_group", "type", "key", "value"))


def _split(spark: Any, split: Any, new_p: int) -> Any:
    """KG-17, KG-21: each name's elements, in old subtask then list order, cut into new_p chunks, the
    first `n mod new_p` one longer, chunk i to subtask (i + start) mod new_p, where `start` is the
    sum of the remainders of the names before it (in name order) mod new_p."""
    F, Window = _functions(spark), _window(spark)
    j = F.row_number().over(Window.partitionBy("name").orderBy("old", "pos")) - 1
    numbered = split.withColumn("j", j)
    sizes = (numbered.groupBy("name").agg(F.count("*").alias("n"))
             .withColumn("base", F.expr(f"n DIV {new_p}"))
             .withColumn("r", F.expr(f"n % {new_p}")))
    before = Window.orderBy("name").rowsBetween(Window.unboundedPreceding, -1)
    sizes = sizes.withColumn("start", F.coalesce(F.sum("r").over(before), F.lit(0)) % new_p)
    long_part = F.col("r") * (F.col("base") + 1)
    chunk = F.when(F.col("j") < long_part, F.expr("j DIV (base + 1)")).otherwise(
        F.col("r") + F.expr("(j - r * (base + 1)) DIV base"))
    return (numbered.join(sizes, "name")
            .withColumn("new", ((chunk + F.col("start")) % new_p).cast("int"))
            .select("new", "name", "mode", "old", "pos", "element"))


def _union(spark: Any, union: Any, new_p: int) -> Any:
    """KG-18: every new subtask gets every element (even at the same parallelism)."""
    targets = spark.range(new_p).selectExpr("CAST(id AS INT) AS new")
    return union.crossJoin(targets).select("new", "name", "mode", "old", "pos", "element")


def _broadcast(spark: Any, broadcast: Any, old_p: int, new_p: int) -> Any:
    """KG-19: new subtask i gets old subtask (i mod old_p)'s elements."""
    F = _functions(spark)
    targets = spark.range(new_p).selectExpr("CAST(id AS INT) AS new")
    return (broadcast.join(targets, F.col("new") % old_p == F.col("old"))
            .select("new", "name", "mode", "old", "pos", "element"))


def redistribute_operator(spark: Any, operator: Any, old_p: int, new_p: int) -> Any:
    """KG-17..KG-21: (new, name, mode, pos, element), pos renumbered per new subtask."""
    F, Window = _functions(spark), _window(spark)
    state = operator.withColumnRenamed("partition", "old")
    split = state.where(F.col("mode") == "split")
    if new_p == old_p:  # KG-20: split and broadcast state stay where they are
        kept = (state.where(F.col("mode") != "union").withColumn("new", F.col("old"))
                .select("new", "name", "mode", "old", "pos", "element"))
    else:
        kept = _split(spark, split, new_p).unionByName(
            _broadcast(spark, state.where(F.col("mode") == "broadcast"), old_p, new_p))
    moved = kept.unionByName(_union(spark, state.where(F.col("mode") == "union"), new_p))
    order = Window.partitionBy("new").orderBy("name", "old", "pos")
    return moved.withColumn("pos", (F.row_number().over(order) - 1).cast("long")).drop("old")


def initial_state(spark: Any, keyed: Any, operator: Any, new_p: int) -> Any:
    """The new query's `initialState` rows (`INITIAL_SCHEMA`), keyed by the new subtasks' salts."""
    F = _functions(spark)
    keyed_columns = ["key_group", "type", "key", "value"]
    operator_columns = ["name", "mode", "pos", "element"]
    none = lambda names: [F.lit(None).alias(c) for c in names]  # noqa: E731
    k = keyed.select(_salt(F, F.col("new"), new_p).alias("salt"), F.lit("keyed").alias("kind"),
                     *none(operator_columns), *keyed_columns)
    o = operator.select(_salt(F, F.col("new"), new_p).alias("salt"), F.lit("operator").alias("kind"),
                        *none(keyed_columns), *operator_columns)
    columns = [c.split()[0] for c in INITIAL_SCHEMA.split(", ")]
    cast = {c.split()[0]: c.split()[1] for c in INITIAL_SCHEMA.split(", ")}
    both = k.select(*columns).unionByName(o.select(*columns))
    return both.select(*[F.col(c).cast(cast[c]).alias(c) for c in columns])


# --------------------------------------------------------------------------
# A schedule
# --------------------------------------------------------------------------


def _typed(key: str | None, type_: str) -> int | str | None:
    return None if key is None else int(key) if type_ in ("int", "long") else key


class StreamRun:
    """A key groups schedule through Structured Streaming; `run()` gives the trace's events."""

    def __init__(self, spark: Any, schedule: Schedule, root: Path):
        c: KeyGroupsConfig = schedule.config
        if not parallelism_in_bounds(c.parallelism, c.max_parallelism):  # KG-8, rejecting
            raise ValueError(f"KG-8: parallelism {c.parallelism} and max parallelism {c.max_parallelism} "
                             "out of bounds")
        lacking = required_capabilities(schedule) & set(UNSUPPORTED)
        if lacking:
            raise ValueError(f"the streaming key groups cannot run this schedule: it needs "
                             f"{', '.join(sorted(lacking))}: {UNSUPPORTED[min(lacking)]}")
        self.spark, self.steps, self.root = spark, schedule.steps, root
        self.profile = c.hash
        self.p = c.parallelism
        self.max_p = c.max_parallelism or default_max_parallelism(c.parallelism)  # KG-9
        self.explicit = c.max_parallelism is not None
        self.modes: dict[str, str] = {}
        self.checkpoint: Checkpoint | None = None
        self.pending: list[dict[str, Any]] = []
        self.events: list[Event] = []
        self.job: Job | None = None
        self.stopped: list[Job] = []  # in order; the last holds the schedule's final state

    def run(self) -> list[Event]:
        try:
            self.job = Job(self.spark, self.root, self.p, self.max_p, self.profile)
            for i, s in enumerate(self.steps):
                self.apply(i, s)
            self._stop()
        finally:
            if self.job is not None:
                self.job.query.stop()
        self.events.sort(key=lambda e: e.step)  # stable: a restore's events stay in order
        return self.events

    def apply(self, index: int, s: Any) -> None:
        if isinstance(s, UpdateStep):
            self.pending.append({"seq": index, "kind": "update", "key": None if s.key is None else str(s.key),
                                 "type": s.type, "value": s.value})
        elif isinstance(s, AddStateStep):
            self.modes.setdefault(s.name, s.mode)  # the job's declared state (every subtask has it)
            self.pending.append({"seq": index, "kind": "add_state", "target": s.subtask % self.p,
                                 "name": s.name, "mode": self.modes[s.name], "element": s.element})
        elif isinstance(s, CheckpointStep):
            assert self.job is not None
            batch = self._flush(always=True)
            self.checkpoint = Checkpoint(self.job.location, batch, self.p, self.max_p, self.explicit,
                                         dict(self.modes))
        elif isinstance(s, RestoreStep):
            self._restore(index, s)
        else:
            raise ValueError(f"not a key_groups step: {s!r}")

    def _flush(self, always: bool = False) -> int:
        """Run the pending steps as one micro-batch (`always`: even none); the last batch's id."""
        assert self.job is not None
        if self.pending or always:
            self.job.run_batch(self.pending)
            self.pending = []
        return self.job.batches - 1

    def _stop(self) -> None:
        """Run what is pending, stop the query and turn its output into events."""
        assert self.job is not None
        if self.pending:
            self._flush()
        for r in self.job.stop():
            if r["kind"] == "null_key":
                self.events.append(event(r["seq"], "null_key"))
                continue
            s = self.steps[r["seq"]]
            self.events.append(event(r["seq"], "routed", key=s.key, type=s.type, hash=r["hash"],
                                     key_group=r["key_group"], subtask=r["partition"], value=r["value"]))
        self.stopped.append(self.job)
        self.job = None

    def _restore(self, index: int, s: RestoreStep) -> None:
        c_max = None if self.checkpoint is None else self.checkpoint.max_parallelism
        reason = restore_refusal(s.parallelism, s.max_parallelism, c_max)  # KG-8, KG-15, KG-16
        if reason is not None:
            self.events.append(event(index, "restore_refused", reason=reason))
            return  # the running query goes on
        self._stop()
        p, c, spark = s.parallelism, self.checkpoint, self.spark
        initial = None
        if c is None:  # a new job: empty state, no state names
            self.max_p = s.max_parallelism or default_max_parallelism(p)
            self.explicit = s.max_parallelism is not None
            self.modes = {}
        else:
            self.max_p = c.max_parallelism  # KG-16: the checkpoint's max parallelism
            self.explicit = s.max_parallelism is not None or c.explicit
            self.modes = dict(c.modes)
            keyed = redistribute_keyed(spark, keyed_state(spark, c.location, c.batch), self.max_p,
                                       c.parallelism, p)
            operator = redistribute_operator(spark, operator_state(spark, c.location, c.batch),
                                             c.parallelism, p)
            initial = initial_state(spark, keyed, operator, p)
        self.p = p
        self.job = Job(spark, self.root, p, self.max_p, self.profile, initial)
        batch = self._flush(always=True)  # the first batch applies the initial state
        self.events.append(event(index, "restored", parallelism=p, max_parallelism=self.max_p))
        for i in range(p):  # KG-4
            first, last = key_group_range(self.max_p, p, i)
            self.events.append(event(index, "range", subtask=i, first=first, last=last))
        self._restored_events(index, batch)

    def _restored_events(self, index: int, batch: int) -> None:
        """What the new query holds after its first batch, read back: subtask = state partition."""
        assert self.job is not None
        keyed = keyed_state(self.spark, self.job.location, batch).collect()
        entries = sorted(((r["partition"], r["key_group"], _typed(r["key"], r["type"]), r["type"], r["value"])
                          for r in keyed), key=lambda e: (e[0], e[1], key_sort((e[3], e[2]))))
        for t, kg, key, type_, value in entries:  # KG-13, KG-14
            self.events.append(event(index, "keyed", subtask=t, key_group=kg, key=key, type=type_,
                                     value=value))
        elements: dict[tuple[int, str], list[int]] = {}
        for r in operator_state(self.spark, self.job.location, batch).collect():
            elements.setdefault((r["partition"], r["name"]), []).append(r["element"])
        for t in range(self.p):  # KG-17..KG-21
            for name in sorted(self.modes):
                self.events.append(event(index, "operator", subtask=t, name=name,
                                         elements=sorted(elements.get((t, name), []))))


def run_schedule(spark: Any, schedule: Schedule, root: Path | None = None) -> list[Event]:
    """The schedule's events through Structured Streaming; its checkpoints removed afterwards."""
    from flink_semantics.adapters.pyspark.runtime import scratch_dir

    base = Path(root) if root is not None else scratch_dir("kg-stream-")
    try:
        return StreamRun(spark, schedule, base).run()
    finally:
        shutil.rmtree(base, ignore_errors=True)
