"""Keyed state held by key group in a Structured Streaming query, so that the query can be restarted
at another parallelism with its state moved as whole key groups (FLIP-8, spec/key-groups.md).

A stateful Spark query restarted from its checkpoint keeps the checkpoint's number of state
partitions (KG-31: a new `spark.sql.shuffle.partitions` is ignored on restart).  Spark 4.2+ can
change it offline: `spark._streamingCheckpointManager.repartition(checkpoint, n)` (experimental,
Spark Classic only, RocksDB only) rewrites a stopped query's state in its own checkpoint, each
grouping key moved to partition `pmod(hash(key), n)`, source offsets kept, so the restarted query
goes on at n partitions.  Spark has no key groups and no operator state: this module adds Flink's
model of both:

* `keyed_process(df, key=..., processor=..., parallelism=p, max_parallelism=...)` runs your
  `KeyedProcessor` per key, every key's state kept in the state store partition of the subtask
  Flink would give its key group (KG-1..KG-3: the hash, key group and subtask are Spark expressions,
  KG-11, KG-22..KG-27, KG-30, KG-33), with operator (per subtask) list state beside it;
* `start(writer, parallelism=p)` starts the query with p state partitions (RocksDB state store);
* `rescale_state(spark, checkpoint_location, ...)` (`rescale_jobs` for many jobs) reads the state as
  of a committed micro-batch with Spark's state data source and redistributes it as DataFrame
  operations: keyed state by key group to the subtask whose range holds it (KG-4, KG-5, KG-12..KG-14),
  operator state with Flink's round-robin repartitioner (KG-17..KG-21); the result is the
  `initial_state` of `keyed_process` at the new parallelism, in a query with a new checkpoint (the
  old one is left as it was; the new query's source starts afresh, so it reads the input after the
  old query's last batch).  The old parallelism, maximum parallelism and state partitions are read
  from the checkpoint (`checkpoint_config`: every subtask keeps its job's in its state).

A subtask is one grouping key, `(job, salt)`: `salt` is the int whose Spark hash partitioning with
the job is the subtask's state partition (`spark.partition_salts`): with `partitions` state
partitions (default: one per subtask), subtask t lives in partition t mod `partitions`, so that
with the default the state data source's `partition_id` *is* the subtask.  Many independent jobs
(each its own keys, maximum parallelism and hash profile) may share one query through `jobs`;
every job's rows and state are its own grouping keys.

Refusals are raised as ValueError naming the parameter and the rule before any job runs: bounds
(KG-8), a changed maximum parallelism (KG-16), a parallelism above the checkpoint's maximum (KG-15),
an old parallelism, maximum or state partitions other than the checkpoint's (KG-13, KG-16, KG-31,
after reading the checkpoint's configuration).  A null key under the flink profile is refused
(KG-7, as Flink's keyBy), or counted in an observed metric and left out (`null_keys="count"`).
No RDD API, no SparkContext: it runs under Spark Connect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flink_semantics.adapters.pyspark.key_groups.engine import (
    REFUSED_ABOVE_MAX,
    REFUSED_MAX_CHANGED,
    default_max_parallelism,
    key_group_range,
    parallelism_in_bounds,
    restore_refusal,
)
from flink_semantics.adapters.pyspark.key_groups.spark import (
    HASH_PROFILES,
    key_hash_column,
    partition_salts,
)
from flink_semantics.adapters.pyspark.session import query_conf, struct

PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
REFUSED_SALT = -1  # the grouping key of a null key's rows under the flink profile (KG-7)
KEY_TYPES = {"int": "int", "bigint": "long", "string": "string"}  # Spark type -> key type
KEYED_KEY = "key_group int, type string, key string"
OPERATOR_ELEMENT = "name string, mode string, pos long, element long"
MODES = ("split", "union", "broadcast")
# Columns the API adds to the input rows (a user's column must not have these names).
JOB, SALT, KEY, TYPE, HASH, GROUP, SUBTASK, MAXP = (
    "kg_job", "kg_salt", "kg_key", "kg_type", "kg_hash", "kg_key_group", "kg_subtask", "kg_max_p")
PROFILE, SALTS, TARGET, PAR = "kg_profile", "kg_salts", "kg_target", "kg_p"
NEW_P = "kg_new_p"  # a rescaled job's new parallelism
AT = "kg_at"  # the subtask a row runs on (its key's, or its target)
OLD_SALTS = "kg_old_salts"  # the salts of a rescaled job's subtasks in its old query
PARTS = "kg_partitions"  # the state partitions of the query an initial-state row is for
CONF = "kg_conf"  # the state variable holding a subtask's job configuration (checkpoint_config)
CONF_DDL = "parallelism int, max_parallelism int, partitions int, hash string"
RESCALED = "_kg_rescaled"  # a rescale_jobs DataFrame's job -> (new p, max p, new partitions, hash)
NULL_KEYS = ("error", "count", "process")


@dataclass(frozen=True)
class JobSpec:
    """One keyed job of a query: its maximum parallelism (None: KG-9's default of its parallelism),
    its hash profile (`flink`, `spark`, `pyflink`) and its parallelism (None: the query's; at most
    the query's: its subtask t is the query's state partition t)."""

    max_parallelism: int | None = None
    hash: str = "flink"
    parallelism: int | None = None


@dataclass(frozen=True)
class Rescale:
    """One job's restore: its state as of `batch_id` in the query at `checkpoint_location`, which ran
    it at `parallelism` with `max_parallelism` key groups, moved to `new_parallelism` subtasks
    (`new_max_parallelism`: an explicitly configured maximum, which must be the checkpoint's, KG-16)."""

    job: int
    checkpoint_location: str
    batch_id: int
    parallelism: int
    max_parallelism: int
    new_parallelism: int
    new_max_parallelism: int | None = None
    new_partitions: int | None = None  # the new query's state partitions (default: new_parallelism)
    partitions: int | None = None  # the old query's state partitions (default: parallelism)
    checkpoint_job: int | None = None  # the job's id in the old query (default: `job`)

    @property
    def old_job(self) -> int:
        return self.job if self.checkpoint_job is None else self.checkpoint_job


# --------------------------------------------------------------------------
# Configuration checks (on the driver, before any job runs)
# --------------------------------------------------------------------------


def max_parallelism_of(parallelism: int, max_parallelism: int | None) -> int:
    """KG-8 and KG-9: the maximum parallelism a job at `parallelism` runs with; ValueError naming
    the parameter and KG-8 when out of bounds."""
    if not isinstance(parallelism, int) or not parallelism_in_bounds(parallelism, None):
        raise ValueError(f"parallelism: KG-8: must be an int in 1..32768, not {parallelism!r}")
    if max_parallelism is not None and (not isinstance(max_parallelism, int)
                                        or not parallelism_in_bounds(parallelism, max_parallelism)):
        raise ValueError(f"max_parallelism: KG-8: must be an int in {parallelism}..32768 (at least the "
                         f"parallelism {parallelism}), not {max_parallelism!r}")
    return max_parallelism if max_parallelism is not None else default_max_parallelism(parallelism)


def rescale_refusal(new_parallelism: int, new_max_parallelism: int | None,
                    checkpoint_max_parallelism: int | None) -> str | None:
    """Why a restore at `new_parallelism` (explicit `new_max_parallelism`, or None) from a checkpoint
    of `checkpoint_max_parallelism` key groups (None: no checkpoint) is refused, in Flink's order
    (spec C7): KG-8 bounds, KG-16 a changed maximum, KG-15 a parallelism above the checkpoint's
    maximum; None when it is not."""
    return restore_refusal(new_parallelism, new_max_parallelism, checkpoint_max_parallelism)


def check_rescale(r: Rescale) -> None:
    """ValueError naming the parameter and the rule when the rescale is refused (KG-8, KG-15, KG-16)."""
    max_parallelism_of(r.parallelism, r.max_parallelism)
    for name, n in (("partitions", r.partitions), ("new_partitions", r.new_partitions)):
        if n is not None and (not isinstance(n, int) or not parallelism_in_bounds(n, None)):
            raise ValueError(f"{name}: KG-8: state partitions are an int in 1..32768, not {n!r}")
    reason = rescale_refusal(r.new_parallelism, r.new_max_parallelism, r.max_parallelism)
    if reason == REFUSED_MAX_CHANGED:
        raise ValueError(f"new_max_parallelism: KG-16: {reason}: the checkpoint has {r.max_parallelism} "
                         f"key groups, not {r.new_max_parallelism}")
    if reason == REFUSED_ABOVE_MAX:
        raise ValueError(f"new_parallelism: KG-15: {reason}: {r.new_parallelism} > {r.max_parallelism}")
    if reason is not None:
        parameter = "new_parallelism" if not parallelism_in_bounds(r.new_parallelism, None) \
            else "new_max_parallelism"
        raise ValueError(f"{parameter}: KG-8: {reason}: {r.new_parallelism}, {r.new_max_parallelism}")


CONFIG_FIELDS = (("parallelism", "KG-13", "parallelism"), ("max_parallelism", "KG-16", "max parallelism"),
                 ("partitions", "KG-31", "state partitions"), ("hash", "KG-1", "hash profile"))


def config_mismatch(stored: Sequence[Any], given: Sequence[Any], who: str) -> str | None:
    """Why a job configuration `given` (parallelism, maximum parallelism, state partitions, hash
    profile; None: not given) cannot run on a checkpoint holding `stored`, or None: `parameter:
    rule: both values` of the first field that differs.  A key is looked for in the key group of its
    hash (KG-1) modulo the maximum (KG-16), on the subtask of that key group at the parallelism
    (KG-13), in the state partition of that subtask (KG-31): any other value misses its state."""
    for (name, rule, what), theirs, mine in zip(CONFIG_FIELDS, stored, given):
        if mine is not None and theirs is not None and mine != theirs:
            return f"{name}: {rule}: the checkpoint has {what} {theirs!r}, {who} {mine!r}"
    return None


def subtask_of(key: int | str, key_type: str, max_parallelism: int, parallelism: int,
               hash: str = "flink") -> int:
    """Where a key's state lives, computed in Python: KG-3 of its key group (KG-1, KG-2, KG-11 for
    `flink`; KG-30 for `spark`)."""
    from flink_semantics.adapters.pyspark.key_groups.engine import (
        flink_key_group,
        operator_index,
        spark_key_group,
    )

    group = (spark_key_group(key, key_type, max_parallelism) if hash == "spark"
             else flink_key_group(key, key_type, max_parallelism))
    return operator_index(max_parallelism, parallelism, group)


def key_group_ranges(max_parallelism: int, parallelism: int) -> list[tuple[int, int]]:
    """KG-4: each subtask's inclusive key-group range."""
    return [key_group_range(max_parallelism, parallelism, i) for i in range(parallelism)]


# --------------------------------------------------------------------------
# The user's processor
# --------------------------------------------------------------------------


class KeyedProcessor:
    """What `keyed_process` runs: subclass it.  `state_schema` is the DDL of a key's state (`name
    type, ...`: int, long, string, boolean), `output_schema` that of the rows it emits.

    * `process(key, row, state, ctx)`: one row of `key` (its state: `state.get()`, a tuple or None,
      `state.update(tuple)`, `state.clear()`); returns the output rows (tuples);
    * `process_subtask(row, ctx)`: a row sent to a subtask (the `target` column), not to a key;
    * `null_key(row, ctx)`: a row with a null key under the flink profile, not routed (KG-7).

    `ctx` is the subtask: `ctx.subtask`, `ctx.partition` (the state partition Spark runs it in:
    the subtask modulo the query's `partitions`, the subtask itself by default), `ctx.job`,
    the row's `ctx.hash` and `ctx.key_group`, its operator state `ctx.operator_list(name, mode)`
    (`append(element)`, `elements()`), and `ctx.keyed_entries()`, `ctx.operator_lists()`."""

    state_schema = "value long"
    output_schema = "value long"

    def process(self, key: Any, row: Any, state: KeyState, ctx: SubtaskContext) -> Iterable[tuple[Any, ...]]:
        raise NotImplementedError

    def process_subtask(self, row: Any, ctx: SubtaskContext) -> Iterable[tuple[Any, ...]]:
        return ()

    def null_key(self, row: Any, ctx: SubtaskContext) -> Iterable[tuple[Any, ...]]:
        return ()


_REMOVED = object()  # a deferred write that removes the entry


class KeyState:
    """One key's state in its key group (the MapState entry (key group, type, key)).  `known`: the
    values of the subtask's entries read or written so far in this call (a key read again is not
    asked of the state server again).  `dirty` (None: each write goes to the state store at once):
    the entries written in this call, each sent to the state store once, with its last value, when
    the call flushes them (`SubtaskContext.flush`): a key's state is one state-server call however
    many of its rows the micro-batch holds; what the store holds mid-call is seen by no one, and a
    task that fails before its micro-batch commits leaves no write behind either way."""

    def __init__(self, store: Any, entry: tuple[Any, ...], known: dict[Any, Any] | None = None,
                 dirty: dict[Any, Any] | None = None):
        self._store, self._entry = store, entry
        self._known = {} if known is None else known
        self._dirty = dirty

    def get(self) -> tuple[Any, ...] | None:
        if self._entry not in self._known:
            value = self._store.getValue(self._entry)  # None when the key has none
            self._known[self._entry] = None if value is None else tuple(value)
        return self._known[self._entry]

    def update(self, value: tuple[Any, ...]) -> None:
        value = tuple(value)
        if self._dirty is None:
            self._store.updateValue(self._entry, value)
        else:
            self._dirty[self._entry] = value
        self._known[self._entry] = value

    def clear(self) -> None:
        if self._dirty is None:
            self._store.removeKey(self._entry)
        else:
            self._dirty[self._entry] = _REMOVED
        self._known[self._entry] = None


class OperatorList:
    """One operator list state of the subtask (`mode`: split, union or broadcast, KG-17..KG-21)."""

    def __init__(self, ctx: SubtaskContext, name: str, mode: str):
        self._ctx, self.name, self.mode = ctx, name, mode

    def append(self, element: int) -> None:
        ctx = self._ctx
        pos = ctx.next_pos()
        ctx._operator.appendValue((self.name, self.mode, pos, int(element)))
        ctx._pos = pos + 1

    def elements(self) -> list[int]:
        operator = self._ctx._operator
        return [int(e[3]) for e in operator.get() if e[0] == self.name] if operator.exists() else []


class SubtaskContext:
    """The subtask a group of rows runs on, with its keyed and operator state."""

    def __init__(self, job: int, subtask: int | None, partition: int, keyed: Any, operator: Any,
                 pos_state: Any):
        self.job, self.subtask, self.partition = job, subtask, partition
        self.hash: int | None = None
        self.key_group: int | None = None
        self._keyed, self._operator, self._pos_state = keyed, operator, pos_state
        self._pos: int | None = None  # the next operator element's position, read when first needed
        self._known: dict[Any, Any] = {}  # keyed state read or written in this call (KeyState)
        self._dirty: dict[Any, Any] = {}  # keyed state written in this call, not yet in the store

    def flush(self) -> None:
        """The keyed state written in this call into the state store: one call per written key."""
        for entry, value in self._dirty.items():
            if value is _REMOVED:
                self._keyed.removeKey(entry)
            else:
                self._keyed.updateValue(entry, value)
        self._dirty.clear()

    def next_pos(self) -> int:
        if self._pos is None:
            got = self._pos_state.get()
            self._pos = 0 if got is None else int(got[0])
        return self._pos

    def operator_list(self, name: str, mode: str = "split") -> OperatorList:
        if mode not in MODES:
            raise ValueError(f"mode: KG-32: one of {', '.join(MODES)}, not {mode!r}")
        return OperatorList(self, name, mode)

    def keyed_entries(self) -> Iterator[tuple[int, str, str | None, tuple[Any, ...]]]:
        """(key group, type, key as text, state) of every key this subtask holds."""
        self.flush()  # the store is read: this call's writes first
        if not self._keyed.exists():  # (the iterator of an empty map gives one row of nulls)
            return
        for k, v in self._keyed.iterator():
            yield int(k[0]), k[1], k[2], tuple(v)

    def operator_lists(self) -> dict[str, tuple[str, list[int]]]:
        """name -> (mode, elements in list order) of this subtask's operator state."""
        out: dict[str, tuple[str, list[int]]] = {}
        if not self._operator.exists():
            return out
        for name, mode, _pos, element in sorted(self._operator.get(), key=lambda e: int(e[2])):
            out.setdefault(name, (mode, []))[1].append(int(element))
        return out


def _plain(v: Any, type_: str) -> Any:
    """A pandas value as a plain Python value of the DDL type (numpy scalars and a long column
    made float by its nulls are not state values; NaN is None)."""
    import pandas as pd

    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    v = v.item() if hasattr(v, "item") else v
    return int(v) if type_ in ("int", "long") else bool(v) if type_ == "boolean" else v


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    import pandas as pd

    return None if v is None or pd.isna(v) else int(v)


def _typed(key: str | None, type_: str) -> int | str | None:
    return None if key is None else int(key) if type_ in ("int", "long") else key


try:
    from pyspark.sql.streaming import StatefulProcessor
except ImportError:  # pyspark missing: the module still imports
    StatefulProcessor = object  # type: ignore[assignment,misc]


class _KeyGroupProcessor(StatefulProcessor):  # type: ignore[misc,valid-type]
    """One subtask of one job (a grouping key (job, salt)): the user's processor on its rows, in
    `order` order, with the subtask's keyed state (MapState `keyed`: (key group, type, key) -> the
    user's state) and operator list state (ListState `operator`)."""

    def __init__(self, user: KeyedProcessor, columns: list[str], order: str | None, outputs: list[str],
                 with_job: bool, partitions: int, configs: Mapping[int, tuple[int, int, str]],
                 on_state_update: Callable[[str], None] | None = None):
        self.user, self.columns, self.order = user, columns, order
        self.outputs, self.with_job, self.partitions = outputs, with_job, partitions
        self.configs = dict(configs)  # job -> (parallelism, maximum parallelism, hash profile)
        self.on_state_update = on_state_update

    def init(self, handle: Any) -> None:
        self.keyed = handle.getMapState("keyed", struct(KEYED_KEY), struct(self.user.state_schema))
        self.operator = handle.getListState("operator", struct(OPERATOR_ELEMENT))
        self.next_pos = handle.getValueState("next_pos", struct("pos long"))
        self.conf = handle.getValueState(CONF, struct(CONF_DDL))

    def _config(self, job: int) -> tuple[int, int, int, str]:
        p, max_p, profile = self.configs[job]
        return p, max_p, self.partitions, profile

    def _check_config(self, job: int) -> None:
        """The job's configuration, kept in this subtask's state (`checkpoint_config` reads it back):
        written the first time, and a restart of the checkpoint with another one refused, since its
        keys would be looked for in other key groups or subtasks than those holding their state
        (KG-13, KG-16, KG-31)."""
        mine = self._config(job)
        stored = self.conf.get()
        if stored is None:
            self.conf.update(mine)
            return
        refusal = config_mismatch(tuple(stored), mine, "the query")
        if refusal is not None:
            raise ValueError(f"job {job}: {refusal}: rescale the state with key_groups.api.rescale_state "
                             "into a new checkpoint")

    def _pos(self) -> int:
        got = self.next_pos.get()  # one call to the state server (None when unset)
        return 0 if got is None else int(got[0])

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        """The restored state of this subtask (KG-13, KG-14, KG-17..KG-21): rows of `rescale_jobs`."""
        fields = [(f"s_{f.split()[0]}", f.split()[1]) for f in self.user.state_schema.split(", ")]
        job = int(key[0])
        self._check_config(job)
        p, max_p, parts, _ = self._config(job)
        pos = start = self._pos()
        for r in initialState.to_dict("records"):
            restored = (int(r[NEW_P]), int(r[MAXP]), int(r[PARTS]))
            if restored != (p, max_p, parts):  # KG-13, KG-16, KG-31: rescaled for another query
                raise ValueError(f"initial_state: job {job} was rescaled to parallelism {restored[0]}, "
                                 f"max parallelism {restored[1]}, {restored[2]} state partitions; this "
                                 f"query runs {p}, {max_p}, {parts} (KG-13, KG-16, KG-31)")
            if r["kg_kind"] == "keyed":
                self.keyed.updateValue((int(r["kg_key_group"]), r["kg_type"], _text(r["kg_key"])),
                                       tuple(_plain(r[f], t) for f, t in fields))
            else:
                element = (r["kg_name"], r["kg_mode"], int(r["kg_pos"]), int(r["kg_element"]))
                self.operator.appendValue(element)
                pos = max(pos, int(r["kg_pos"]) + 1)
        if pos != start:
            self.next_pos.update((pos,))

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        import pandas as pd
        from pyspark import TaskContext

        job, salt = int(key[0]), int(key[1])
        chunks = list(rows)
        pdf = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
        if self.order is not None and len(pdf) > 1:
            pdf = pdf.sort_values(self.order, kind="stable")
        self._check_config(job)
        task = TaskContext.get()
        assert task is not None  # (a Python worker of a Spark task)
        ctx = SubtaskContext(job, _int(pdf[AT].iloc[0]), task.partitionId(), self.keyed, self.operator,
                             self.next_pos)
        out: list[tuple[Any, ...]] = []
        if list(pdf.columns) != self.columns:
            pdf = pdf[self.columns]
        for row in pdf.itertuples(index=False):
            out.extend(self._row(salt, row, ctx))
            if self.on_state_update is not None:  # the caller's hook after each row's state update
                self.on_state_update("key_groups.keyed_process")
        ctx.flush()
        if ctx._pos is not None:
            self.next_pos.update((ctx._pos,))
        if not out:  # nothing to convert to Arrow and send (a subtask's add_state rows, an empty dump)
            return
        if self.with_job:
            out = [(job, *o) for o in out]
        yield pd.DataFrame(out, columns=self.outputs)

    def _row(self, salt: int, row: Any, ctx: SubtaskContext) -> Iterable[tuple[Any, ...]]:
        if salt == REFUSED_SALT:  # KG-7: a null key is not routed
            return self.user.null_key(row, ctx)
        if _int(getattr(row, TARGET)) is not None:
            return self.user.process_subtask(row, ctx)
        ctx.hash, ctx.key_group = int(getattr(row, HASH)), int(getattr(row, GROUP))
        if int(getattr(row, SUBTASK)) % self.partitions != ctx.partition:  # KG-6: the subtask's partition
            raise RuntimeError(f"key group {ctx.key_group} of subtask {getattr(row, SUBTASK)} reached "
                               f"partition {ctx.partition}: start the query with key_groups.api.start")
        type_, text = getattr(row, TYPE), _text(getattr(row, KEY))
        # With a hook after each row's state update, each write reaches the store before it
        # (the conformance runner fails tasks there); without one, writes are flushed per call.
        dirty = ctx._dirty if self.on_state_update is None else None
        state = KeyState(self.keyed, (ctx.key_group, type_, text), ctx._known, dirty)
        return self.user.process(_typed(text, type_), row, state, ctx)

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------
# The keyed query
# --------------------------------------------------------------------------


def _functions(df: Any) -> Any:
    from flink_semantics.adapters.pyspark.key_groups.spark import functions_of

    return functions_of(df)


def _lookup(df: Any, key: str, table: Mapping[int, Sequence[Any]], ddl: str) -> Any:
    """The rows of `df` whose int column `key` is a key of `table`, each with the columns `ddl` (`name
    type, ...`; int, string and array types) of its key's row in `table`.  The table is one literal,
    JSON text that `from_json` parses in the JVM into a map (folded once when a micro-batch is
    planned) looked up row by row: a join with a small DataFrame would run a Spark job of its own
    (its broadcast) in every micro-batch, `createDataFrame` parallelizes pickled rows that every
    micro-batch unpickles in Python workers, and a literal per value (`lit`, `struct`, `array`)
    costs a call to the JVM each, seconds for the jobs of a round (150 jobs of 8 subtasks: 3 s
    against 0.03 s)."""
    import json

    F = _functions(df)
    fields = [(f.split()[0], f.split(None, 1)[1]) for f in ddl.split(", ")]
    text = json.dumps({str(k): {n: (list(v) if isinstance(v, (list, tuple)) else v)
                                for (n, _), v in zip(fields, row)} for k, row in table.items()})
    table_type = f"map<string, struct<{', '.join(f'{n}: {t}' for n, t in fields)}>>"
    found = F.try_element_at(F.from_json(F.lit(text), table_type), F.col(key).cast("string"))
    columns = [c for c in df.columns if c not in {n for n, _ in fields}]
    return (df.withColumn("kg_found", found).where(F.col("kg_found").isNotNull())
            .select(*columns, *[F.col(f"kg_found.{n}").alias(n) for n, _ in fields]))


def _jobs_table(jobs: Mapping[int, JobSpec], parallelism: int, partitions: int) -> dict[int, tuple[Any, ...]]:
    """job -> (its parallelism, maximum parallelism, hash profile, its subtasks' salts)."""
    out: dict[int, tuple[Any, ...]] = {}
    for j, s in sorted(jobs.items()):
        p = s.parallelism or parallelism
        out[int(j)] = (p, max_parallelism_of(p, s.max_parallelism), s.hash, partition_salts(partitions, j, p))
    return out


JOBS_DDL = f"{PAR} int, {MAXP} int, {PROFILE} string, {SALTS} array<int>"


def _check_jobs(jobs: Mapping[int, JobSpec], partitions: int) -> None:
    max_parallelism_of(partitions, None)
    for j, s in jobs.items():
        if not isinstance(j, int) or not -2**31 <= j < 2**31:
            raise ValueError(f"jobs: a job id is an int, not {j!r}")
        if s.hash not in HASH_PROFILES:
            raise ValueError(f"hash: KG-1, KG-30, KG-33: one of {', '.join(HASH_PROFILES)}, not {s.hash!r}")
        p = s.parallelism or partitions
        if p > partitions:
            raise ValueError(f"jobs: KG-3: job {j}'s parallelism {p} above the query's "
                             f"{partitions} partitions")
        max_parallelism_of(p, s.max_parallelism)


def _row_json(F: Any, columns: list[str]) -> Any:
    """The user's columns of a row as JSON text, for an error that names the row."""
    return F.to_json(F.struct(*[F.col(f"`{c}`") for c in columns]))


def _null_keys(rows: Any, F: Any, user_columns: list[str], key: str, mode: str, metric: str) -> Any:
    """KG-7: the rows of a null key under the flink profile (the grouping key REFUSED_SALT): failing
    the task (`error`), left out and counted in the observed metric (`count`), or kept for the
    processor's `null_key` (`process`)."""
    refused = F.col(SALT) == F.lit(REFUSED_SALT)
    if mode == "process":
        return rows
    if mode == "count":
        counted = rows.observe(metric, F.count(F.when(refused, F.lit(1))).alias("null_keys"))
        return counted.where(~refused)
    message = F.concat(F.lit(f"key: KG-7: a null key in column {key!r} has no key group (Flink's keyBy "
                             "refuses it: 'Assigned key must not be null!'; keyed_process(null_keys="
                             "'count') leaves such rows out and counts them); the row: "),
                       _row_json(F, user_columns))
    return rows.withColumn(SALT, F.when(refused, F.raise_error(message).cast("int")).otherwise(F.col(SALT)))


def _with_rescaled(jobs: Mapping[int, JobSpec], rescaled: Mapping[int, tuple[int, int, int, str | None]],
                   parallelism: int, parts: int) -> dict[int, JobSpec]:
    """`jobs` with the maximum parallelism of the checkpoint each job was rescaled from where it is
    not configured (KG-16); ValueError naming both values and the rule when the initial state was
    rescaled to another parallelism (KG-13), maximum (KG-16) or number of state partitions (KG-31), or
    its checkpoint hashed keys with another profile (KG-1: each key's state is in its key group)."""
    out = dict(jobs)
    for j, spec in jobs.items():
        if j not in rescaled:
            continue
        new_p, max_p, new_parts, profile = rescaled[j]
        p = spec.parallelism or parallelism
        if spec.max_parallelism is None:
            out[j] = spec = JobSpec(max_p, spec.hash, spec.parallelism)  # KG-16: the checkpoint's
        checks = (("parallelism", "KG-13", "parallelism", p, new_p),
                  ("max_parallelism", "KG-16", "max parallelism", spec.max_parallelism, max_p),
                  ("partitions", "KG-31", "state partitions", parts, new_parts),
                  ("hash", "KG-1", "hash profile", spec.hash, spec.hash if profile is None else profile))
        for name, rule, what, given, theirs in checks:
            if given != theirs:
                raise ValueError(f"{name}: {rule}: the initial state of job {j} was rescaled to {what} "
                                 f"{theirs!r}, not {given!r}")
    return out


def keyed_process(df: Any, *, key: str, processor: KeyedProcessor, parallelism: int,
                  max_parallelism: int | None = None, hash: str = "flink", key_type: str | None = None,
                  target: str | None = None, order_by: str | None = None,
                  jobs: Mapping[int, JobSpec] | None = None, job_column: str = "job",
                  initial_state: Any = None, partitions: int | None = None,
                  null_keys: str = "error", null_key_metric: str = "null_keys",
                  on_state_update: Callable[[str], None] | None = None) -> Any:
    """`processor` run per key of the streaming DataFrame `df`, its state held by key group; the
    output rows (`processor.output_schema`, after a `job_column` column with `jobs`).

    Routing (KG-1..KG-3, KG-6, KG-7, KG-9..KG-11; the spark profile KG-22..KG-27, KG-30; pyflink
    KG-33): a row's key group is its key hash modulo the maximum parallelism and its subtask
    `key_group * parallelism div max_parallelism`; the row runs, and the key's state lives, in the
    state partition of that subtask.  `key`: the key column (int, bigint or string; with `key_type`,
    a string column holding each row's key as text and `key_type` the column of its type, `int`,
    `long` or `string`).  `target`: a column which, when not null, sends the row to that subtask
    (modulo the parallelism) for `processor.process_subtask` instead.  `order_by`: the order of a
    subtask's rows within a micro-batch.  `jobs`: job id -> JobSpec, for many jobs in one query
    (`job_column` names each row's job, and a row of no job of `jobs` fails the task naming the
    row; `max_parallelism` and `hash` are then each job's own).
    `initial_state`: a `rescale_state`/`rescale_jobs` DataFrame (its rows for these jobs are used);
    its new parallelism, maximum parallelism and state partitions must be this query's (KG-13,
    KG-16, KG-31), and a `max_parallelism` left None is the checkpoint's (KG-16).  `partitions`: the
    query's state partitions (default: `parallelism`, one per subtask); subtask t lives in partition
    t mod `partitions`, still its own grouping key, so a query of many small jobs or a large
    parallelism need not run a task per subtask.  Start the query with `start(writer,
    parallelism=parallelism, partitions=partitions)`.

    A null key under the `flink` profile has no key group (KG-7; the `spark` and `pyflink` profiles
    route it, KG-23, KG-33).  `null_keys` says what becomes of its rows: `"error"` (the default, as
    Flink's keyBy throws on it) fails the query's task with an error naming the key column, KG-7
    and the row; `"count"` leaves the row out and counts it in the observed metric `null_key_metric`
    (`df.observe`: `query.lastProgress.observedMetrics[null_key_metric]["null_keys"]`, per
    micro-batch); `"process"` hands it to `processor.null_key`.

    The job's parallelism, maximum parallelism, state partitions and hash profile are kept in every
    subtask's state (`checkpoint_config` reads them back); a restart of the checkpoint with other
    ones fails its first micro-batch naming both and the rule (KG-13, KG-16, KG-31), since its
    keys would be looked for where their state is not.  `on_state_update`: a callable the Python
    worker calls with the point's name (`"key_groups.keyed_process"`) after each row's state
    update (the conformance runner's fault injection passes one; None for a real query).

    ValueError, before any job runs: parallelism or maximum out of bounds (KG-8), an unknown profile,
    an unknown key type, an unknown `null_keys`, an `initial_state` rescaled for another
    configuration."""
    if not isinstance(processor, KeyedProcessor):
        raise ValueError("processor: a key_groups.api.KeyedProcessor")
    if null_keys not in NULL_KEYS:
        raise ValueError(f"null_keys: KG-7: one of {', '.join(NULL_KEYS)}, not {null_keys!r}")
    if on_state_update is not None and not callable(on_state_update):
        raise ValueError(f"on_state_update: a callable or None, not {on_state_update!r}")
    if jobs is None:
        jobs_given = False
        jobs = {0: JobSpec(max_parallelism, hash)}
    else:
        jobs_given = True
    _check_jobs(jobs, parallelism)
    parts = parallelism if partitions is None else partitions
    max_parallelism_of(parts, None)  # KG-8's bounds on the state partitions too
    if initial_state is not None:
        # (its instance dictionary: a Connect DataFrame's getattr makes a Column of any name)
        rescaled = getattr(initial_state, "__dict__", {}).get(RESCALED, {})
        jobs = _with_rescaled(jobs, rescaled, parallelism, parts)
    F = _functions(df)
    types = dict(df.dtypes)
    if key not in types:
        raise ValueError(f"key: no column {key!r}")
    if key_type is None:
        if types[key] not in KEY_TYPES:
            raise ValueError(f"key: KG-11: an int, bigint or string column, not {types[key]}")
        rows = df.withColumn(TYPE, F.lit(KEY_TYPES[types[key]]))
    else:
        rows = df.withColumn(TYPE, F.col(key_type))
    rows = rows.withColumn(KEY, F.col(key).cast("string"))
    rows = rows.withColumn(JOB, F.col(job_column).cast("int") if jobs_given else F.lit(0))
    if jobs_given:  # a row of no configured job fails the task, naming it (never dropped)
        unknown = F.concat(F.lit(f"{job_column}: a job of `jobs` ({', '.join(map(str, sorted(jobs)))}), "
                                 "not the row's: "), _row_json(F, df.columns))
        rows = rows.withColumn(JOB, F.when(F.col(JOB).isin(list(jobs)), F.col(JOB))
                               .otherwise(F.raise_error(unknown).cast("int")))
    rows = _lookup(rows, JOB, _jobs_table(jobs, parallelism, parts), JOBS_DDL)
    rows = rows.withColumn(HASH, key_hash_column(F, KEY, TYPE, F.col(PROFILE)))
    rows = rows.withColumn(GROUP, F.pmod(F.col(HASH), F.col(MAXP)).cast("int"))  # KG-1, KG-30
    rows = rows.withColumn(SUBTASK, F.expr(  # KG-3
        f"CAST((CAST({GROUP} AS BIGINT) * {PAR}) DIV {MAXP} AS INT)"))
    to = (F.pmod(F.col(target).cast("int"), F.col(PAR)) if target is not None
          else F.lit(None).cast("int"))
    rows = rows.withColumn(TARGET, to)
    subtask = F.coalesce(F.col(TARGET), F.col(SUBTASK))
    salt = F.when(subtask.isNull(), F.lit(REFUSED_SALT)).otherwise(F.element_at(F.col(SALTS), subtask + 1))
    rows = rows.withColumn(SALT, salt.cast("int")).withColumn(AT, subtask)
    rows = _null_keys(rows, F, df.columns, key, null_keys, null_key_metric)
    columns = [c for c in rows.columns if c not in (SALTS, PROFILE, MAXP, PAR)]
    job_out = [job_column] if jobs_given else []
    outputs = job_out + [f.split()[0] for f in processor.output_schema.split(", ")]
    out_schema = struct(", ".join(([f"{job_column} int"] if jobs_given else []) + [processor.output_schema]))
    configs = {j: (c[0], c[1], c[2]) for j, c in _jobs_table(jobs, parallelism, parts).items()}
    wrapped = _KeyGroupProcessor(processor, columns, order_by, outputs, jobs_given, parts, configs,
                                 on_state_update)
    initial = None
    if initial_state is not None:  # (its configuration is checked by the processor, KG-13)
        initial = initial_state.where(F.col(JOB).isin(list(jobs))).groupBy(JOB, SALT)
    return rows.select(*columns).groupBy(JOB, SALT).transformWithStateInPandas(
        wrapped, out_schema, "Append", "None", initialState=initial)


def query_confs(partitions: int) -> dict[str, str]:
    """The session settings a keyed query starts with: its state partitions, the RocksDB store."""
    return {"spark.sql.shuffle.partitions": str(partitions),
            "spark.sql.streaming.stateStore.providerClass": PROVIDER,
            # each micro-batch commits its changes, not a snapshot of every partition's RocksDB
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}


@contextmanager
def starting(spark: Any, parallelism: int, partitions: int | None = None) -> Iterator[None]:
    """Within it, queries start with `query_confs` (the session's settings restored after)."""
    max_parallelism_of(parallelism, None)
    parts = parallelism if partitions is None else partitions
    max_parallelism_of(parts, None)
    with query_conf(spark, query_confs(parts)):
        yield


def start(writer: Any, *, parallelism: int, spark: Any, partitions: int | None = None) -> Any:
    """`writer.start()` (a DataStreamWriter of `keyed_process`'s output) with `partitions` state
    partitions (default `parallelism`: one per subtask; give `keyed_process`'s) (KG-3, KG-6).  A
    restart of the same checkpoint keeps the checkpoint's number (KG-31): rescale with
    `rescale_state` into a new checkpoint instead."""
    with starting(spark, parallelism, partitions):
        return writer.start()


# --------------------------------------------------------------------------
# Rescaling: the state as of a committed batch, redistributed by key group
# --------------------------------------------------------------------------


def _read(spark: Any, location: str, variable: str, batch: int) -> Any:
    return (spark.read.format("statestore").option("stateVarName", variable)
            .option("batchId", batch).load(location))


def _plan(rescales: Sequence[Rescale]) -> dict[int, tuple[Any, ...]]:
    """job -> (old parallelism, new parallelism, maximum parallelism, new state partitions, its new
    subtasks' salts, its old subtasks' salts): PLAN_DDL."""
    out: dict[int, tuple[Any, ...]] = {}
    for r in rescales:
        parts = r.new_partitions or r.new_parallelism
        out[r.job] = (r.parallelism, r.new_parallelism, r.max_parallelism, parts,
                      partition_salts(parts, r.job, r.new_parallelism),
                      partition_salts(r.partitions or r.parallelism, r.old_job, r.parallelism))
    return out


PLAN_DDL = (f"kg_old_p int, {NEW_P} int, {MAXP} int, {PARTS} int, {SALTS} array<int>, "
            f"{OLD_SALTS} array<int>")


def _old_subtask(state: Any, F: Any) -> Any:
    """A read state row (joined with the plan) with `kg_old`, the old subtask of its grouping key:
    the index of its salt among the old query's salts (its state partition when there was one per
    subtask)."""
    return state.withColumn("kg_old", (F.array_position(F.col(OLD_SALTS), F.col("kg_old_salt")) - 1)
                            .cast("int"))


def _reads(spark: Any, rescales: Sequence[Rescale], variable: str, columns: list[Any]) -> Any:
    """Every rescaled job's state variable as of its batch: one read per (location, batch), each old
    job's rows given the id of every job restored from them (`checkpoint_job` -> `job`)."""
    F = _functions(spark.range(1))
    by_read: dict[tuple[str, int], dict[int, list[int]]] = {}
    for r in rescales:
        by_read.setdefault((r.checkpoint_location, r.batch_id), {}).setdefault(r.old_job, []).append(r.job)
    frames = [_lookup(_read(spark, loc, variable, batch)
                     .select(F.col(f"key.{SALT}").alias("kg_old_salt"),
                             F.col(f"key.{JOB}").alias("kg_old_job"), *columns),
                     "kg_old_job", {old: (new,) for old, new in jobs.items()}, "kg_new_jobs array<int>")
              .withColumn(JOB, F.explode("kg_new_jobs")).drop("kg_old_job", "kg_new_jobs")
              for (loc, batch), jobs in sorted(by_read.items())]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def redistribute_keyed(keyed: Any, F: Any) -> Any:
    """KG-12..KG-14: each key's state, whole with its key group, to the new subtask whose range
    holds the key group: `key_group * new_p div maxP` (KG-3 with the restored maxP, so new subtask i
    gets exactly the key groups of its KG-4 range from every old subtask holding them, KG-5; at the
    same parallelism each subtask its own)."""
    new = F.expr(f"CAST((CAST(key_group AS BIGINT) * {NEW_P}) DIV {MAXP} AS INT)")
    return keyed.withColumn("kg_new", new)


def _split(split: Any, F: Any, Window: Any) -> Any:
    """KG-17, KG-21: per job, each name's elements in old subtask then list order, cut into new_p
    chunks, the first `n mod new_p` one longer, chunk i to subtask (i + start) mod new_p, `start` the
    sum of the remainders of the names before it (in name order, C2) mod new_p."""
    j = F.row_number().over(Window.partitionBy(JOB, "name").orderBy("kg_old", "pos")) - 1
    numbered = split.withColumn("j", j)
    sizes = (numbered.groupBy(JOB, "name", NEW_P).agg(F.count("*").alias("n"))
             .withColumn("base", F.expr(f"n DIV {NEW_P}")).withColumn("r", F.expr(f"n % {NEW_P}")))
    before = Window.partitionBy(JOB).orderBy("name").rowsBetween(Window.unboundedPreceding, -1)
    sizes = sizes.withColumn("start", F.coalesce(F.sum("r").over(before), F.lit(0)) % F.col(NEW_P))
    chunk = F.when(F.col("j") < F.col("r") * (F.col("base") + 1), F.expr("j DIV (base + 1)")).otherwise(
        F.col("r") + F.expr("(j - r * (base + 1)) DIV base"))
    return (numbered.join(sizes.drop(NEW_P), [JOB, "name"])
            .withColumn("kg_new", ((chunk + F.col("start")) % F.col(NEW_P)).cast("int")))


def _everywhere(state: Any, F: Any) -> Any:
    return state.withColumn("kg_new", F.explode(F.sequence(F.lit(0), F.col(NEW_P) - 1)))


def redistribute_operator(operator: Any, F: Any, Window: Any) -> Any:
    """KG-17..KG-21 per job: split state dealt out in chunks (KG-17, KG-21), union state to every new
    subtask (KG-18, even at the same parallelism), broadcast copy `i mod old_p` to new subtask i
    (KG-19); at the same parallelism split and broadcast state stay where they are (KG-20).  `pos`
    renumbered per new subtask."""
    same = F.col("kg_old_p") == F.col(NEW_P)
    mode = F.col("mode")
    kept = operator.where(same & (mode != "union")).withColumn("kg_new", F.col("kg_old"))
    split = _split(operator.where(~same & (mode == "split")), F, Window)
    broadcast = _everywhere(operator.where(~same & (mode == "broadcast")), F).where(
        F.col("kg_new") % F.col("kg_old_p") == F.col("kg_old"))
    union = _everywhere(operator.where(mode == "union"), F)
    columns = [JOB, "kg_new", PARTS, NEW_P, MAXP, "name", "mode", "kg_old", "pos", "element", SALTS]
    moved = kept.select(*columns)
    for part in (split, broadcast, union):
        moved = moved.unionByName(part.select(*columns))
    order = Window.partitionBy(JOB, "kg_new").orderBy("name", "kg_old", "pos")
    return moved.withColumn("pos", (F.row_number().over(order) - 1).cast("long")).drop("kg_old")


def _window(spark: Any) -> Any:
    from flink_semantics.adapters.pyspark.session import is_connect

    if is_connect(spark):
        from pyspark.sql.connect.window import Window
    else:
        from pyspark.sql import Window  # type: ignore[assignment]
    return Window


def checkpoint_config(spark: Any, checkpoint_location: str,
                      batch_id: int | None = None) -> dict[int, tuple[int, int, int, str]]:
    """job -> (parallelism, maximum parallelism, state partitions, hash profile) of each job of the
    keyed query at `checkpoint_location` as of `batch_id` (None: its last committed batch), as
    `keyed_process` keeps it in every subtask's state (the state variable `kg_conf`, read with the
    state data source: the checkpoint's own state, committed with each batch, on any file system
    and under Spark Connect).  A job none of whose subtasks has run holds no state and is absent."""
    batch = latest_batch(spark, checkpoint_location) if batch_id is None else batch_id
    rows = (_read(spark, checkpoint_location, CONF, batch)
            .selectExpr(f"key.{JOB} AS job", "value.*").distinct().collect())
    out: dict[int, tuple[int, int, int, str]] = {}
    for r in rows:
        conf = (int(r["parallelism"]), int(r["max_parallelism"]), int(r["partitions"]), str(r["hash"]))
        if out.setdefault(int(r["job"]), conf) != conf:  # the processor refuses a second one
            raise ValueError(f"checkpoint_location: job {r['job']} holds two configurations in "
                             f"{checkpoint_location}: {out[int(r['job'])]} and {conf}")
    return out


def _check_against_checkpoints(spark: Any, rescales: Sequence[Rescale]) -> dict[int, str]:
    """ValueError naming the parameter, the rule and both values when a rescale's old parallelism,
    maximum parallelism or state partitions are not those its checkpoint holds (KG-13, KG-16,
    KG-31): the old subtasks' state would be looked for where it is not.  The hash profile of each
    job whose checkpoint holds one."""
    read: dict[tuple[str, int], dict[int, tuple[int, int, int, str]]] = {}
    profiles: dict[int, str] = {}
    for r in rescales:
        where = (r.checkpoint_location, r.batch_id)
        if where not in read:
            read[where] = checkpoint_config(spark, *where)
        stored = read[where].get(r.old_job)
        if stored is None:  # no subtask of it ran: no state to move
            continue
        reason = config_mismatch(stored, (r.parallelism, r.max_parallelism, r.partitions or r.parallelism),
                                 f"job {r.job}'s rescale says")
        if reason is not None:
            raise ValueError(f"{reason} ({r.checkpoint_location}, batch {r.batch_id})")
        profiles[r.job] = stored[3]
    return profiles


def rescale_jobs(spark: Any, rescales: Sequence[Rescale], state_schema: str = "value long", *,
                 checked: Mapping[int, str] | None = None) -> Any:
    """The initial state (for `keyed_process(initial_state=...)`) of every job in `rescales`, each read
    from its checkpoint's committed batch with the state data source and moved to its new
    parallelism: keyed state by key group (KG-12..KG-14), operator state by Flink's round-robin
    repartitioner (KG-17..KG-21).  ValueError first, naming the parameter and the rule, for a refused
    rescale (KG-8, KG-15, KG-16) or a job named twice, before any job runs; then, after reading each
    checkpoint's configuration (`checkpoint_config`), for an old parallelism, maximum parallelism or
    state partitions other than the checkpoint's (KG-13, KG-16, KG-31), before the state is read.
    `state_schema`: the processor's.  `checked`: the rescales were held to their checkpoints already
    (`rescale_state`), job -> the checkpoint's hash profile."""
    if not rescales:
        raise ValueError("rescales: at least one")
    for r in rescales:
        check_rescale(r)
    if len({r.job for r in rescales}) != len(rescales):
        raise ValueError("rescales: a job is rescaled once")
    profiles = _check_against_checkpoints(spark, rescales) if checked is None else dict(checked)
    F, Window = _functions(spark.range(1)), _window(spark)
    plan = _plan(rescales)
    fields = [f.split()[0] for f in state_schema.split(", ")]
    keyed = _reads(spark, rescales, "keyed", ["user_map_key.*", *[F.col(f"user_map_value.{f}").alias(f"s_{f}")
                                                                  for f in fields]])
    keyed = redistribute_keyed(_lookup(keyed, JOB, plan, PLAN_DDL), F)
    operator = _lookup(_reads(spark, rescales, "operator", ["list_element.*"]), JOB, plan, PLAN_DDL)
    operator = _old_subtask(operator, F)
    operator = redistribute_operator(operator, F, Window)
    state_types = {f"s_{f.split()[0]}": f.split()[1] for f in state_schema.split(", ")}
    ddl = {"kg_kind": "string", "kg_key_group": "int", "kg_type": "string", "kg_key": "string",
           **state_types, "kg_name": "string", "kg_mode": "string", "kg_pos": "bigint",
           "kg_element": "bigint"}
    cast = {"long": "bigint", "int": "int", "string": "string", "boolean": "boolean"}

    def shaped(df: Any, kind: str, given: dict[str, str]) -> Any:
        salt = F.element_at(F.col(SALTS), F.col("kg_new") + 1).alias(SALT)
        cols = [(F.col(given[c]) if c in given else F.lit(None)).cast(cast.get(t, t)).alias(c)
                for c, t in ddl.items() if c != "kg_kind"]
        return df.select(F.col(JOB), salt, F.col(PARTS), F.col(NEW_P), F.col(MAXP),
                         F.lit(kind).alias("kg_kind"), *cols)

    k = shaped(keyed, "keyed", {"kg_key_group": "key_group", "kg_type": "type", "kg_key": "key",
                                **{c: c for c in state_types}})
    o = shaped(operator, "operator", {"kg_name": "name", "kg_mode": "mode", "kg_pos": "pos",
                                      "kg_element": "element"})
    out = k.unionByName(o)
    # What keyed_process holds its own configuration to before any job runs (KG-13, KG-16, KG-31).
    setattr(out, RESCALED, {j: (v[1], v[2], v[3], profiles.get(j)) for j, v in plan.items()})
    return out


def latest_batch(spark: Any, checkpoint_location: str) -> int:
    """The last committed batch of the keyed query at `checkpoint_location` (its state metadata)."""
    F = _functions(spark.range(1))
    row = spark.read.format("state-metadata").load(checkpoint_location).agg(F.max("maxBatchId")).first()
    if row is None or row[0] is None:
        raise ValueError(f"checkpoint_location: no committed batch in {checkpoint_location}")
    return int(row[0])


def rescale_state(spark: Any, checkpoint_location: str, *, new_parallelism: int,
                  parallelism: int | None = None, max_parallelism: int | None = None,
                  new_max_parallelism: int | None = None, batch_id: int | None = None,
                  state_schema: str = "value long", partitions: int | None = None,
                  new_partitions: int | None = None) -> Any:
    """The initial state of a single-job `keyed_process` restarted at `new_parallelism` (its
    `new_partitions` state partitions, default one per subtask) from the query at
    `checkpoint_location` as of `batch_id` (None: its last committed batch), keyed state moved as
    whole key groups (KG-12..KG-14), operator state repartitioned as Flink does (KG-17..KG-21).

    The checkpoint's parallelism, maximum parallelism and state partitions are read from the
    checkpoint itself (`checkpoint_config`); `parallelism`, `max_parallelism` and `partitions`,
    when given, must be those (ValueError naming both values and the rule: KG-13, KG-16, KG-31),
    and when left None are the checkpoint's.  Refused with ValueError naming the parameter and the
    rule, before any job runs where the given values decide it: bounds (KG-8), another explicit
    maximum parallelism (KG-16), a parallelism above the maximum (KG-15).

    What Spark 4.2+ offers itself, `spark._streamingCheckpointManager.repartition(checkpoint, n)`
    (experimental, Spark Classic only, RocksDB only), rewrites the checkpoint in place with every
    grouping key moved to `pmod(hash(key), n)`; this gives Flink's placement instead (contiguous
    key-group ranges, KG-3, KG-4), keeps the maximum parallelism's limits (KG-15, KG-16),
    redistributes operator list state (KG-17..KG-21), restores any committed batch, leaves the old
    checkpoint as it was (the new query has its own) and runs under Spark Connect."""
    given = (parallelism, max_parallelism, partitions)
    if parallelism is not None:
        max_p = max_parallelism_of(parallelism, max_parallelism)
        if max_parallelism is not None:  # decided without the checkpoint
            check_rescale(Rescale(0, checkpoint_location, -1 if batch_id is None else batch_id, parallelism,
                                  max_p, new_parallelism, new_max_parallelism, new_partitions, partitions))
    batch = latest_batch(spark, checkpoint_location) if batch_id is None else batch_id
    stored = checkpoint_config(spark, checkpoint_location, batch).get(0)
    if stored is not None:
        reason = config_mismatch(stored, given, "not")
        if reason is not None:
            raise ValueError(f"{reason} ({checkpoint_location}, batch {batch})")
        parallelism, max_p, partitions = stored[0], stored[1], stored[2]
    elif parallelism is None:
        raise ValueError(f"parallelism: {checkpoint_location} holds no key groups configuration "
                         "(no subtask has run): give parallelism and max_parallelism")
    else:
        max_p = max_parallelism_of(parallelism, max_parallelism)
    r = Rescale(0, checkpoint_location, batch, parallelism, max_p, new_parallelism, new_max_parallelism,
                new_partitions, partitions)
    return rescale_jobs(spark, [r], state_schema, checked={} if stored is None else {0: stored[3]})
