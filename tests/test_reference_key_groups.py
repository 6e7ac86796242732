"""Unit tests of the key groups reference model (reference/key_groups.py).

Expected values come from outside the model: the projects' published vectors (Spark's documentation
of hash(), the values Flink-compatible code asserts for key groups, Flink's CheckpointCoordinatorTest
and StateAssignmentOperationTest behaviours as the research notes quote them), the JDK's definitions
worked by hand, and (`spark`) Spark's own hash() computed by a local Spark session.
"""

from __future__ import annotations

import random

import pytest
from flink_semantics.reference.key_groups import (
    Model,
    default_max_parallelism,
    flink_murmur,
    int32,
    java_hash_code,
    java_utf8_bytes,
    key_group_range,
    operator_index,
    repartition_operator_state,
    round_up_to_power_of_two,
    spark_hash,
    spark_hash_bytes,
)
from flink_semantics.spec.areas.key_groups import KeyGroupsConfig, UpdateStep


def test_jdk_hash_codes_by_hand() -> None:
    """KG-11: Long.hashCode(v) = (int)(v ^ (v >>> 32)); String.hashCode over UTF-16 units."""
    assert java_hash_code(-1, "long") == 0
    assert java_hash_code(2**32, "long") == 1
    assert java_hash_code(-(2**63), "long") == -(2**31)
    assert java_hash_code(2**63 - 1, "long") == -(2**31)
    assert java_hash_code("", "string") == 0
    assert java_hash_code("a", "string") == 97
    assert java_hash_code("ab", "string") == 97 * 31 + 98
    # U+1F600 is two UTF-16 units, 0xD83D and 0xDE00.
    assert java_hash_code("\U0001F600", "string") == 0xD83D * 31 + 0xDE00
    assert java_hash_code(-5, "int") == -5


def test_flink_key_groups_published() -> None:
    """KG-1: key groups of "A" and "B" at max parallelism 128 are 104 and 17 (values asserted by
    Flink-compatible code); KG-4: range(128, 3, 1) = [43, 85]."""
    assert flink_murmur(java_hash_code("A", "string")) % 128 == 104
    assert flink_murmur(java_hash_code("B", "string")) % 128 == 17
    assert key_group_range(128, 3, 1) == (43, 85)


def test_flink_murmur_is_non_negative() -> None:
    """KG-2 over many codes, including the extremes."""
    rng = random.Random(7)
    codes = [0, 1, -1, 2**31 - 1, -(2**31)] + [rng.randint(-(2**31), 2**31 - 1) for _ in range(2000)]
    assert all(0 <= flink_murmur(c) < 2**31 for c in codes)


def test_spark_hash_published() -> None:
    """KG-22..KG-26: Spark's documentation gives hash('ABC') = -757602832; the research notes'
    traps: hash(1L) = -1712319331, hash(1) = -559580957; KG-23: hash(NULL) = 42."""
    assert spark_hash("ABC", "string") == -757602832
    assert spark_hash(1, "long") == -1712319331
    assert spark_hash(1, "int") == -559580957
    assert spark_hash(None, "string") == 42


def test_string_keys_are_their_utf16_code_units() -> None:
    """KG-11, KG-34: an unpaired surrogate is one unit, "\\ud800".hashCode() = 0xD800 = 55296, whose
    key group at 128 is 56 (the issue's value; Flink 2.3.0's assignToKeyGroup gives it too); a low
    unit before a high one is two units, 0xDC00 * 31 + 0xD800; a pair given as two code points is its
    character, and so the same key."""
    assert java_hash_code("\ud800", "string") == 0xD800 == 55296
    assert flink_murmur(55296) % 128 == 56
    assert java_hash_code("\udc00\ud800", "string") == int32(0xDC00 * 31 + 0xD800)
    assert java_hash_code("x\ud83d", "string") == ord("x") * 31 + 0xD83D
    assert java_hash_code("\ud83d\ude00", "string") == java_hash_code("\U0001F600", "string")
    assert UpdateStep("\ud83d\ude00", "string") == UpdateStep("\U0001F600", "string")
    assert UpdateStep("\ud800", "string").key == "\ud800"


def test_spark_hashes_an_unpaired_surrogate_as_a_question_mark() -> None:
    """KG-26, KG-34: Spark's bytes of a string are Java's getBytes(UTF_8) (UTF8String.fromString),
    which writes an unpaired surrogate as '?' and a pair as its character's four bytes; so
    hash('\\ud800') = hash('?'), hash('\\udc00\\ud800') = hash('??'), the escaped pair hashes as 😀
    (1877935379, KG-26's example from Spark), and none is the hash of the bytes `surrogatepass`
    writes (ED A0 80 for D800)."""
    assert java_utf8_bytes("\ud800") == b"?"
    assert java_utf8_bytes("\udc00\ud800") == b"??"
    assert java_utf8_bytes("\ud800\ud800\udc00") == b"?\xf0\x90\x80\x80"  # the second D800 pairs
    assert java_utf8_bytes("\ud83d\ude00") == "\U0001F600".encode() == b"\xf0\x9f\x98\x80"
    assert spark_hash("\ud800", "string") == spark_hash("?", "string")
    assert spark_hash("\udc00\ud800", "string") == spark_hash("??", "string")
    assert spark_hash("\ud83d\ude00", "string") == 1877935379
    cesu = "\ud800".encode("utf-8", "surrogatepass")
    assert cesu == b"\xed\xa0\x80" and spark_hash("\ud800", "string") != int32(spark_hash_bytes(cesu, 42))


def test_keys_are_kept_by_their_code_units() -> None:
    """KG-34: a pair given as two code points and its character are one key, with one sum; in the
    spark profile "\\ud800" and "?" share a hash and a key group but are two keys (C12)."""
    def sums(hash_: str, keys: list[str]) -> list[tuple[int, int]]:
        model = Model(KeyGroupsConfig(2, 128, hash_))
        steps = [UpdateStep(k, "string") for k in keys]
        return [(e.hash, e.value) for i, s in enumerate(steps) for e in model.apply(i, s)]

    a, b = sums("flink", ["\ud83d\ude00", "\U0001F600"])
    assert a[0] == b[0] and (a[1], b[1]) == (1, 2)
    a, b, c = sums("spark", ["\ud800", "?", "\ud800"])
    assert a[0] == b[0] == c[0] and (a[1], b[1], c[1]) == (1, 1, 2)


@pytest.mark.parametrize(("max_p", "p"), [(1, 1), (13, 1), (13, 2), (32767, 1), (32767, 13), (32767, 32767),
                                          (128, 3), (128, 100), (10, 10)])
def test_ranges_cover_every_key_group(max_p: int, p: int) -> None:
    """KG-5 (CheckpointCoordinatorTest.testCreateKeyGroupPartitions): every key group lies in the range
    of the subtask KG-3 names; the ranges are contiguous, disjoint, covering, within one in size."""
    ranges = [key_group_range(max_p, p, i) for i in range(p)]
    assert ranges[0][0] == 0 and ranges[-1][1] == max_p - 1
    assert all(ranges[i][1] + 1 == ranges[i + 1][0] for i in range(p - 1))
    sizes = [last - first + 1 for first, last in ranges]
    assert max(sizes) - min(sizes) <= 1
    step = max(1, max_p // 2000)
    for g in range(0, max_p, step):
        first, last = ranges[operator_index(max_p, p, g)]
        assert first <= g <= last


def test_default_max_parallelism() -> None:
    """KG-9, KG-10: 1.5 x p rounded up to a power of two, within [128, 32768]."""
    assert [round_up_to_power_of_two(x) for x in (1, 2, 3, 4, 5)] == [1, 2, 4, 4, 8]
    assert default_max_parallelism(1) == 128
    assert default_max_parallelism(85) == 128  # 127 -> 128
    assert default_max_parallelism(86) == 256  # 129 -> 256
    assert default_max_parallelism(100) == 256
    assert default_max_parallelism(30000) == 32768


def test_split_state_examples_of_the_notes() -> None:
    """KG-17 (RoundRobinOperatorStateRepartitioner): 5 elements 2 -> 3 subtasks give [2, 2, 1];
    5 elements 3 -> 2 give [3, 2]; 4 elements 2 -> 4 give one each; in old subtask order."""
    out = repartition_operator_state([{"s": [0, 1, 2]}, {"s": [3, 4]}], {"s": "split"}, 3)
    assert [o["s"] for o in out] == [[0, 1], [2, 3], [4]]
    out = repartition_operator_state([{"s": [0, 1]}, {"s": [2, 3]}, {"s": [4]}], {"s": "split"}, 2)
    assert [o["s"] for o in out] == [[0, 1, 2], [3, 4]]
    out = repartition_operator_state([{"s": [0, 1]}, {"s": [2, 3]}], {"s": "split"}, 4)
    assert [o["s"] for o in out] == [[0], [1], [2], [3]]


def test_split_state_rotates_across_names() -> None:
    """KG-21: the first receiver without an extra element starts the next name: "a" (5 elements to
    3 subtasks: 2, 2, 1, the first without extra is subtask 2), then "b" (4 elements: from subtask 2:
    2 gets 2, 0 gets 1, 1 gets 1)."""
    out = repartition_operator_state([{"a": [0, 1, 2, 3, 4], "b": [10, 11, 12, 13]}, {"a": [], "b": []}],
                                     {"a": "split", "b": "split"}, 3)
    assert [o["a"] for o in out] == [[0, 1], [2, 3], [4]]
    assert [o["b"] for o in out] == [[12], [13], [10, 11]]
    loads = [len(o["a"]) + len(o["b"]) for o in out]
    assert max(loads) - min(loads) <= 1


def test_union_and_broadcast() -> None:
    """KG-18: union state in full everywhere, also at the same parallelism; KG-19: new subtask i gets
    old copy i mod old parallelism; KG-20: same parallelism and no union: unchanged."""
    old = [{"u": [1], "b": [7], "s": [5]}, {"u": [2], "b": [8], "s": []}]
    modes = {"u": "union", "b": "broadcast", "s": "split"}
    out = repartition_operator_state(old, modes, 3)
    assert [o["u"] for o in out] == [[1, 2]] * 3
    assert [o["b"] for o in out] == [[7], [8], [7]]
    same = repartition_operator_state(old, modes, 2)
    assert [o["u"] for o in same] == [[1, 2], [1, 2]] and [o["s"] for o in same] == [[5], []]
    no_union = repartition_operator_state([{"s": [5]}, {"s": []}], {"s": "split"}, 2)
    assert [o["s"] for o in no_union] == [[5], []]


KEYS = [(0, "int"), (1, "int"), (-1, "int"), (2**31 - 1, "int"), (-(2**31), "int"), (123456, "int"),
        (0, "long"), (1, "long"), (-1, "long"), (2**32, "long"), (2**63 - 1, "long"), (-(2**63), "long"),
        ("", "string"), ("a", "string"), ("ABC", "string"), ("abcd", "string"), ("abcde", "string"),
        ("héllo", "string"), ("日本語", "string"), ("\U0001F600x", "string"), ("ÿ", "string")]


@pytest.mark.spark
def test_spark_hash_matches_spark() -> None:
    """KG-22..KG-27 against Spark itself: hash() of int, bigint and string columns, and pmod."""
    from flink_semantics.adapters.pyspark.runner_session import runner_spark
    from pyspark.sql import functions as F

    spark = runner_spark()
    rows = [(str(k) if t != "string" else k, t) for k, t in KEYS]
    df = spark.createDataFrame(rows, "k string, t string")
    got = {}
    for t, cast in (("int", "int"), ("long", "bigint"), ("string", "string")):
        part = df.where(F.col("t") == t).select("k", F.hash(F.col("k").cast(cast)).alias("h"),
                                                 F.expr(f"pmod(hash(cast(k as {cast})), 128)").alias("g"))
        got.update({(r["k"], t): (r["h"], r["g"]) for r in part.collect()})
    for k, t in KEYS:
        h = spark_hash(k, t)
        assert got[(str(k) if t != "string" else k, t)] == (h, h % 128), (k, t)


SURROGATE_KEYS = ["\ud800", "\udfff", "a\udfffé", "\udc00\ud800", "x\ud83d", "\ud800\ud800\udc00",
                  "\ud83d\ude00", "?", "??", "\U0001F600"]


def sql_literal(key: str) -> str:
    """A Spark SQL string literal of every UTF-16 unit of the key as a Unicode escape: Spark's parser
    makes it a Java String with those units, unpaired surrogates included."""
    units = key.encode("utf-16-be", "surrogatepass")
    escapes = (f"\\u{int.from_bytes(units[i:i + 2], 'big'):04X}" for i in range(0, len(units), 2))
    return "'" + "".join(escapes) + "'"


@pytest.mark.spark
def test_spark_hash_of_surrogates_matches_spark() -> None:
    """KG-26, KG-34 against Spark itself: hash() and the UTF-8 bytes of SQL literals holding unpaired
    surrogates and pairs, as the reference computes them."""
    from flink_semantics.adapters.pyspark.runner_session import runner_spark

    spark = runner_spark()
    columns = [f"hash({sql_literal(k)}) AS h{i}, hex(encode({sql_literal(k)}, 'UTF-8')) AS b{i}"
               for i, k in enumerate(SURROGATE_KEYS)]
    row = spark.sql("SELECT " + ", ".join(columns)).collect()[0]
    for i, k in enumerate(SURROGATE_KEYS):
        assert (row[f"h{i}"], row[f"b{i}"]) == (spark_hash(k, "string"), java_utf8_bytes(k).hex().upper()), k
