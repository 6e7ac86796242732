"""Key groups as native Spark expressions: the hash, key group and subtask of a key column, and the
exact placement of rows on the partition of their subtask.

Everything here is a Catalyst expression: no Python UDF, no RDD API, no SparkContext, so it runs
the same under Spark Connect.  Input: a DataFrame with a string column `key` (an int or long key
as its decimal text, null for a null key) and a string column `type` (`int`, `long`, `string`).

* profile `spark`: `hash(CAST(key AS INT))`, `hash(CAST(key AS BIGINT))` or `hash(key)` by type
  (Spark's own Murmur3 with seed 42, KG-22..KG-27), `pmod(hash, maxP)` (KG-30);
* profile `flink`: the JDK hash code in SQL (KG-11): an int is its value; a long is
  `(int)(v ^ (v >>> 32))` (`shiftrightunsigned`, `^`); a string is folded over its UTF-16 code
  units, taken from `hex(encode(key, 'UTF-16BE'))` four hex digits at a time, with the higher-order
  function `aggregate` (pure SQL, no pandas UDF); then Flink's murmur finalizer (KG-2) on bigint
  values kept in [0, 2^32) with masks: every 32-bit product is split in two 16-bit halves of the
  constant so that no intermediate passes 2^49 (ANSI mode raises on a bigint overflow), and the
  result is made non-negative; the key group is `h % maxP` (KG-1).  Each step binds its input once
  (`transform(array(x), v -> ...)[0]`, see `_let`): the expression grows linearly with the steps;
  written naively it doubles with every step that uses its input twice;
* both: `subtask = (key_group * p) div maxP` (KG-3).

A string key with an unpaired surrogate (KG-34) cannot be a value of the `key` column: a Spark string
is UTF-8 (`UTF8String`), and such a key arrives as "?" (a JVM String through `UTF8String.fromString`,
Java's `getBytes(UTF_8)`: so `hash()` of it is Spark's own, KG-26, while its UTF-16 units are lost) or as
U+FFFD (createDataFrame's pickled rows); Arrow and py4j refuse it.  The engine (`engine.py`) hashes it.

Placement (pitfall P6: `repartition(n, col)` hashes the column again, so partition != subtask):
`place_by_subtask` adds, per row, an int "salt" chosen on the driver so that Spark's hash
partitioning of it, `pmod(hash(salt), p)` (KG-30), is exactly the row's subtask, and repartitions
by that column into p partitions.  `repartitionByRange` is not used: its bounds come from a sample
of the data weighted by counts (RangePartitioner.determineBounds), so a small subtask next to a big
one can share its partition.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from flink_semantics.adapters.pyspark.key_groups.engine import (
    C1,
    C2,
    C3,
    F1,
    F2,
    MASK32,
    SPARK_SEED,
    spark_hash_int,
)

HASH_PROFILES = ("flink", "spark", "pyflink")


def functions_of(df: Any) -> Any:
    """The functions module of the DataFrame's session: Spark Connect's or the classic one (a Connect
    client may run next to a classic session, so pyspark.sql.functions cannot tell by itself)."""
    if type(df).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect import functions as F
    else:
        from pyspark.sql import functions as F  # type: ignore[no-redef]
    return F


def _lit(F: Any, v: int) -> Any:
    """A bigint literal (a small Python int would be an int literal)."""
    return F.lit(v).cast("bigint")


def _mask(F: Any, c: Any) -> Any:
    return c.bitwiseAND(_lit(F, MASK32))


def _let(F: Any, x: Any, body: Any) -> Any:
    """`body(v)` with v bound to the value of x: `transform(array(x), v -> body(v))[0]`.  A body that
    uses its argument twice would otherwise copy the whole expression of x, and the murmur steps
    chained that way grow exponentially (an expression tree of millions of nodes)."""
    return F.element_at(F.transform(F.array(x), body), 1)


def _mul32(F: Any, a: Any, const: int) -> Any:
    """(a * const) mod 2^32 for a in [0, 2^32): a * low16 + ((a * high16) mod 2^16) << 16."""
    return _let(F, a, lambda v: _mask(F, v * _lit(F, const & 0xFFFF) + F.shiftleft(
        (v * _lit(F, const >> 16)).bitwiseAND(_lit(F, 0xFFFF)), 16)))


def _rotl32(F: Any, x: Any, r: int) -> Any:
    return _let(F, x, lambda v: _mask(F, F.shiftleft(v, r)).bitwiseOR(F.shiftright(v, 32 - r)))


def _xor_shift(F: Any, h: Any, s: int) -> Any:
    return _let(F, h, lambda v: v.bitwiseXOR(F.shiftright(v, s)))


def flink_murmur_column(F: Any, code: Any) -> Any:
    """KG-2: Flink's murmurHash of a 32-bit code given as a bigint in [0, 2^32), as a non-negative int."""
    k = _mul32(F, _rotl32(F, _mul32(F, code, C1), 15), C2)  # mixK1
    h = _mask(F, _rotl32(F, k, 13) * _lit(F, 5) + _lit(F, C3))  # mixH1 with seed 0
    h = h.bitwiseXOR(_lit(F, 4))  # KG-27: the length of one int
    h = _mul32(F, _xor_shift(F, h, 16), F1)
    h = _mul32(F, _xor_shift(F, h, 13), F2)
    h = _xor_shift(F, h, 16)
    # as a signed int: h >= 2^31 is h - 2^32; KG-2: negative -> -h, Integer.MIN_VALUE (2^31) -> 0
    return _let(F, h, lambda v: F.when(v < _lit(F, 1 << 31), v).when(v == _lit(F, 1 << 31), _lit(F, 0))
                .otherwise(_lit(F, 1 << 32) - v)).cast("int")


# The JDK String.hashCode of column {key} over its UTF-16 code units (KG-11), as a bigint in
# [0, 2^32): h = (31 * h + unit) mod 2^32 folded with `aggregate` over the code units' indexes.
_STRING_HASH_CODE = """CASE WHEN length({key}) = 0 THEN CAST(0 AS BIGINT) ELSE aggregate(
    sequence(0, CAST(length(hex(encode({key}, 'UTF-16BE'))) / 4 AS INT) - 1),
    CAST(0 AS BIGINT),
    (acc, i) -> (acc * 31 + CAST(conv(substring(hex(encode({key}, 'UTF-16BE')), i * 4 + 1, 4), 16, 10)
                 AS BIGINT)) & 4294967295) END"""


def java_hash_code_column(F: Any, key_name: str = "key", type_name: str = "type") -> Any:
    """KG-11: the JDK hash code of the string column `key_name` read as the type in `type_name`,
    as a bigint in [0, 2^32) (the int's 32 bits unsigned)."""
    key, type_ = F.col(key_name), F.col(type_name)
    as_int = _mask(F, key.cast("int").cast("bigint"))  # Integer.hashCode: the value
    v = key.cast("bigint")
    as_long = _mask(F, v.bitwiseXOR(F.shiftrightunsigned(v, 32)))  # Long.hashCode
    return (F.when(type_ == "int", as_int).when(type_ == "long", as_long)
            .otherwise(F.expr(_STRING_HASH_CODE.format(key=f"`{key_name}`"))))


def spark_hash_column(F: Any, key: Any, type_: Any) -> Any:
    """KG-22..KG-27: Spark's own hash() of the key at its type (a null key: 42, KG-23)."""
    return (F.when(type_ == "int", F.hash(key.cast("int")))
            .when(type_ == "long", F.hash(key.cast("bigint")))
            .otherwise(F.hash(key)))


def key_hash_column(F: Any, key_name: str, type_name: str, profile: Any) -> Any:
    """The key hash of the text column `key_name` read as the type in `type_name`, in `profile` (a
    name of HASH_PROFILES, or a string Column naming each row's profile): `flink`, Flink's murmur hash
    of the JDK hash code (KG-1, KG-2, KG-11; null for a null key, KG-7); `spark`, Spark's hash()
    (KG-22..KG-27, 42 for a null key, KG-23); `pyflink`, Flink's murmur hash of the hash code of
    `Row.of(key)`: 62 + the JDK hash code, 31 for a null key (KG-33)."""
    key, type_ = F.col(key_name), F.col(type_name)
    if isinstance(profile, str):
        if profile not in HASH_PROFILES:
            raise ValueError(f"unknown hash profile {profile!r}")
        if profile == "spark":
            return spark_hash_column(F, key, type_)
        profile = F.lit(profile)
    code = java_hash_code_column(F, key_name, type_name)
    row_code = F.when(key.isNull(), _lit(F, 31)).otherwise(_mask(F, code + _lit(F, 62)))  # KG-33
    murmur = flink_murmur_column(F, F.when(profile == "pyflink", row_code).otherwise(code))
    return (F.when(profile == "spark", spark_hash_column(F, key, type_))
            .when(key.isNull() & (profile == "flink"), F.lit(None).cast("int"))
            .otherwise(murmur))


def with_key_groups(df: Any, max_p: int, p: int, profile: str = "flink") -> Any:
    """`df` (columns `key` string, `type` string) with `hash`, `key_group` and `subtask` (ints).
    Under `flink` a null key has null in all three (KG-7: not routed); under `spark` it is routed
    with hash 42 (KG-23), under `pyflink` with the hash of Row.of(null) (KG-33)."""
    if profile not in HASH_PROFILES:
        raise ValueError(f"unknown hash profile {profile!r}")
    if not (1 <= p <= max_p <= 1 << 15):
        raise ValueError(f"KG-8: parallelism {p} and max parallelism {max_p} out of bounds")
    F = functions_of(df)
    out = df.withColumn("hash", key_hash_column(F, "key", "type", profile))
    out = out.withColumn("key_group", F.pmod(F.col("hash"), F.lit(max_p)).cast("int"))  # KG-1, KG-30
    return out.withColumn(  # KG-3
        "subtask", F.expr(f"CAST((CAST(key_group AS BIGINT) * {p}) DIV {max_p} AS INT)"))


def partition_salts(p: int, job: int | None = None, count: int | None = None) -> list[int]:
    """For every subtask s < p, the smallest int v >= 0 with pmod(hash(v), p) == s: the partition
    Spark's hash partitioning (Murmur3 seed 42, KG-22, KG-24, KG-30) gives an int column holding v;
    with `job`, the partition of the two int columns (job, v): pmod(hash(job, v), p) == s.  With
    `count` (more subtasks than the p partitions), `count` distinct ints, subtask s's in partition
    s mod p: the (s div p)-th int landing there (for count <= p, the first `count` of the above)."""
    return list(_salts(p, job, p if count is None else count))


@cache
def _salts(p: int, job: int | None, count: int) -> tuple[int, ...]:
    seed = SPARK_SEED if job is None else spark_hash_int(job)  # KG-22: the fold over the columns
    wanted = [len(range(r, count, p)) for r in range(p)]  # the subtasks landing in partition r
    found: list[list[int]] = [[] for _ in range(p)]
    missing = sum(wanted)
    v = 0
    while missing:
        s = spark_hash_int(v, seed) % p
        if len(found[s]) < wanted[s]:
            found[s].append(v)
            missing -= 1
        v += 1
    return tuple(found[t % p][t // p] for t in range(count))


def place_by_subtask(df: Any, p: int, column: str = "subtask") -> Any:
    """`df` in exactly p partitions, each row in the partition whose index is its `column` value
    (0 <= value < p): `spark_partition_id()` equals the subtask."""
    F = functions_of(df)
    salts = F.array(*[F.lit(v) for v in partition_salts(p)])
    salted = df.withColumn("_kg_salt", F.element_at(salts, F.col(column) + 1))
    return salted.repartition(p, "_kg_salt").drop("_kg_salt")


def keys_frame(spark: Any, keys: list[tuple[int | str | None, str]]) -> Any:
    """A DataFrame of (key, type) rows from Python keys: int and long keys as decimal text."""
    rows = [(None if k is None else str(k), t) for k, t in keys]
    return spark.createDataFrame(rows, "key string, type string")
