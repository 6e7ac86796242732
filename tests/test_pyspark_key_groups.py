"""Tests of the PySpark key groups implementation (adapters/pyspark/key_groups).

1. The engine with hand-worked and published values: JDK hash codes, Flink's murmur finalizer and
   key groups ("A" -> 104, "B" -> 17 at 128), Spark's hash() (hash('ABC') = -757602832 from Spark's
   documentation; hash(1L) = -1712319331, hash(1) = -559580957), ranges, the default maximum
   parallelism, the operator-state repartitioner (5 elements 2 -> 3 subtasks [2, 2, 1], 3 -> 2 [3, 2],
   the rotation of KG-21).
2. Whole schedules on `Run` (the pyspark-local path), with traces worked by hand.
3. A differential test against the reference model on drawn schedules, whole traces compared.
4. (`spark`) The native Spark expressions of spark.py agree with the engine on ~200 keys of each
   type for both profiles, and placement by subtask is exact (`spark_partition_id()` == subtask).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.adapters.pyspark.key_groups.conformance import CAPABILITIES
from flink_semantics.adapters.pyspark.key_groups.engine import (
    default_max_parallelism,
    flink_key_group,
    flink_key_hash,
    flink_murmur,
    java_int_hash,
    java_long_hash,
    java_string_hash,
    key_group_range,
    operator_index,
    pmod,
    repartition_operator_state,
    round_up_to_power_of_two,
    spark_hash,
    spark_hash_int,
    spark_key_group,
    spark_utf8,
)
from flink_semantics.adapters.pyspark.runtime import run_with_retries
from flink_semantics.conformance.areas.key_groups import Features, rejected_configs, schedules
from flink_semantics.conformance.examples import notation
from flink_semantics.spec.areas.key_groups import AREA
from flink_semantics.spec.schedule import make_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KG = notation("key_groups")


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="test-pyspark-kg-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------
# 1. The engine
# --------------------------------------------------------------------------


def test_capabilities_are_the_areas() -> None:
    assert set(CAPABILITIES) == set(AREA.capabilities)


def test_jdk_hash_codes_by_hand() -> None:
    """KG-11: Integer -> value; Long -> (int)(v ^ (v >>> 32)); String over UTF-16 code units."""
    assert java_int_hash(-5) == -5 and java_int_hash(2**31 - 1) == 2**31 - 1
    assert java_long_hash(0) == 0
    assert java_long_hash(-1) == 0  # 0xFFFFFFFF ^ 0xFFFFFFFF
    assert java_long_hash(2**32) == 1
    assert java_long_hash(2**32 + 1) == 0  # 1 ^ 1
    assert java_long_hash(-(2**63)) == -(2**31)  # 0x80000000 ^ 0
    assert java_long_hash(2**63 - 1) == -(2**31)  # 0x7FFFFFFF ^ 0xFFFFFFFF
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("ab") == 97 * 31 + 98
    assert java_string_hash("é") == 0xE9
    # U+1F600 is two UTF-16 units, 0xD83D and 0xDE00 (not one code point).
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00
    # 32-bit wrap: "polygenelubricants" is the classic String whose hashCode is Integer.MIN_VALUE.
    assert java_string_hash("polygenelubricants") == -(2**31)


def test_string_keys_are_java_strings() -> None:
    """KG-11, KG-26, KG-34: an unpaired surrogate is one UTF-16 unit ("\\ud800".hashCode() = 55296,
    key group 56 of 128: the issue's value) and, in Spark's bytes (Java's getBytes(UTF_8)), '?'; a
    pair given as two code points is its character."""
    assert java_string_hash("\ud800") == 55296 and flink_key_group("\ud800", "string", 128) == 56
    assert java_string_hash("\ud83d\ude00") == java_string_hash("\U0001F600")
    assert spark_utf8("\ud800") == b"?" and spark_utf8("\udc00\ud800") == b"??"
    assert spark_utf8("\ud83d\ude00") == b"\xf0\x9f\x98\x80"
    assert spark_hash("\ud800", "string") == spark_hash("?", "string")
    assert spark_hash("\ud83d\ude00", "string") == 1877935379  # KG-26's example, hash('😀') in Spark


def test_flink_key_groups_published() -> None:
    """KG-1: the key groups of "A" and "B" at 128 are 104 and 17; spec/key-groups.md's examples:
    7 -> hash 1343918321, kg 113; "a" -> hash 1455541201, kg 81."""
    assert flink_key_group("A", "string", 128) == 104
    assert flink_key_group("B", "string", 128) == 17
    assert flink_key_hash(7, "int") == 1343918321 and flink_key_group(7, "int", 128) == 113
    assert flink_key_hash("a", "string") == 1455541201 and flink_key_group("a", "string", 128) == 81


def test_flink_murmur_non_negative_and_equal_to_spark_murmur_with_seed_0() -> None:
    """KG-2: non-negative; and Flink's murmurHash(x) is |Murmur3 hashInt(x, seed 0)| (MIN_VALUE -> 0)."""
    for code in [0, 1, -1, 2**31 - 1, -(2**31), *range(-500, 500, 7), *range(10**6, 10**9, 10**7)]:
        h = flink_murmur(code)
        m = spark_hash_int(code, seed=0)
        assert 0 <= h < 2**31
        assert h == (0 if m == -(2**31) else abs(m))


def test_spark_hash_published() -> None:
    """KG-22..KG-26: hash('ABC') = -757602832 (Spark's documentation); hash(1L) = -1712319331 and
    hash(1) = -559580957 (the bigint trap); KG-23: hash(NULL) = 42; KG-30: pmod."""
    assert spark_hash("ABC", "string") == -757602832
    assert spark_hash(1, "long") == -1712319331
    assert spark_hash(1, "int") == -559580957
    assert spark_hash(None, "int") == spark_hash(None, "string") == 42
    assert spark_key_group(None, "long", 128) == 42
    assert pmod(-7, 3) == 2 and pmod(7, 3) == 1 and pmod(-6, 3) == 0
    assert spark_key_group("ABC", "string", 128) == (-757602832) % 128


def test_ranges_and_operator_index() -> None:
    """KG-3, KG-4, KG-5: range(128, 3, 1) = [43, 85]; ranges cover contiguously, sizes within one,
    and the owner of every key group holds it in its range."""
    assert key_group_range(128, 3, 1) == (43, 85)
    assert [key_group_range(128, 3, i) for i in range(3)] == [(0, 42), (43, 85), (86, 127)]
    for max_p, p in [(128, 1), (128, 3), (10, 4), (7, 7), (300, 128), (32768, 32768), (32768, 3)]:
        ranges = [key_group_range(max_p, p, i) for i in range(p)]
        assert ranges[0][0] == 0 and ranges[-1][1] == max_p - 1
        assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))
        sizes = {b - a + 1 for a, b in ranges}
        assert max(sizes) - min(sizes) <= 1
        for g in range(0, max_p, max(1, max_p // 500)):
            first, last = ranges[operator_index(max_p, p, g)]
            assert first <= g <= last


def test_default_max_parallelism() -> None:
    """KG-9, KG-10: min(max(roundUp(p + p/2), 128), 32768)."""
    assert [round_up_to_power_of_two(x) for x in (1, 2, 3, 4, 5, 129)] == [1, 2, 4, 4, 8, 256]
    assert default_max_parallelism(1) == 128
    assert default_max_parallelism(85) == 128  # 127 -> 128
    assert default_max_parallelism(86) == 256  # 129 -> 256
    assert default_max_parallelism(100) == 256
    assert default_max_parallelism(32768) == 32768  # 49152 -> 65536, capped


def _split(old: list[list[int]], new_p: int, name: str = "s") -> list[list[int]]:
    state = [{name: lst} for lst in old]
    return [s[name] for s in repartition_operator_state(state, {name: "split"}, new_p)]


def test_split_state_published_examples() -> None:
    """KG-17: 5 elements 2 -> 3 subtasks: [e0 e1 | e2 e3 | e4]; 3 -> 2: [3, 2]; 4 over 2 -> 4: one each."""
    assert _split([[0, 1, 2], [3, 4]], 3) == [[0, 1], [2, 3], [4]]
    assert _split([[0, 1], [2, 3], [4]], 2) == [[0, 1, 2], [3, 4]]
    assert _split([[0, 1], [2, 3]], 4) == [[0], [1], [2], [3]]
    assert _split([[0, 1], [2, 3]], 1) == [[0, 1, 2, 3]]


def test_split_state_rotation_across_names() -> None:
    """KG-21: names in sorted order; a: 4 elements over 3 from start 0: t0 2 (the extra), then the
    remainder runs out at t1: b starts at t1: t1 2, t2 1, t0 1.  Loads 3, 3, 2."""
    old = [{"a": [1, 2], "b": [10, 11]}, {"a": [3, 4], "b": [12, 13]}]
    new = repartition_operator_state(old, {"b": "split", "a": "split"}, 3)
    assert [s["a"] for s in new] == [[1, 2], [3], [4]]
    assert [s["b"] for s in new] == [[13], [10, 11], [12]]
    # Evenly divisible: the start stays where it was (the first receiver hits rem == 0).
    old = [{"a": [1, 2, 3], "b": [10]}, {"a": [4, 5, 6], "b": []}]
    new = repartition_operator_state(old, {"a": "split", "b": "split"}, 3)
    assert [s["a"] for s in new] == [[1, 2], [3, 4], [5, 6]]
    assert [s["b"] for s in new] == [[10], [], []]


def test_union_and_broadcast_and_same_parallelism() -> None:
    """KG-18: union everywhere (also at the same parallelism); KG-19: broadcast copy i mod oldP;
    KG-20: same parallelism without union: unchanged."""
    old = [{"u": [1], "b": [7], "s": [5, 6]}, {"u": [2, 3], "b": [8], "s": []}]
    modes = {"u": "union", "b": "broadcast", "s": "split"}
    new = repartition_operator_state(old, modes, 3)
    assert [s["u"] for s in new] == [[1, 2, 3]] * 3
    assert [s["b"] for s in new] == [[7], [8], [7]]
    same = repartition_operator_state(old, modes, 2)
    assert same == [{"u": [1, 2, 3], "b": [7], "s": [5, 6]}, {"u": [1, 2, 3], "b": [8], "s": []}]
    no_union = [{"b": [7], "s": [5, 6]}, {"b": [8], "s": []}]
    assert repartition_operator_state(no_union, {"b": "broadcast", "s": "split"}, 2) == no_union


# --------------------------------------------------------------------------
# 2. Whole schedules on Run
# --------------------------------------------------------------------------


def rendered(events: Any) -> list[str]:
    return [KG.render(e) if e.event != "rejected" else "rejected" for e in events]


def run(config: dict[str, Any], steps: str, workdir: Path, validate: bool = True) -> list[str]:
    return rendered(run_with_retries(KG.schedule(config, steps, validate), workdir))


def test_the_spec_trace_example(workdir: Path) -> None:
    """spec/key-groups.md's first example: two keys, a split list, a checkpoint, restore 2 -> 3."""
    steps = """update 7
               update "a" 5
               add_state t0 offsets 1
               checkpoint
               restore 3"""
    assert run({"parallelism": 2}, steps, workdir) == rendered(KG.trace("""
        @0 routed 7 hash=1343918321 kg=113 t1 sum=1
        @1 routed "a" hash=1455541201 kg=81 t1 sum=5
        @4 restored 3 max=128
        @4 range t0 0 42
        @4 range t1 43 85
        @4 range t2 86 127
        @4 keyed t1 kg=81 "a" sum=5
        @4 keyed t2 kg=113 7 sum=1
        @4 operator t0 offsets [1]
        @4 operator t1 offsets []
        @4 operator t2 offsets []"""))


def test_null_keys_and_refusals(workdir: Path) -> None:
    """KG-7: flink refuses a null key; KG-23: spark routes it with 42.  Refusals in order (KG-8,
    KG-16, KG-15: C7, as Flink 2.3.0 refuses a savepoint), the running job kept, updates since the
    checkpoint included (C8)."""
    assert run({"parallelism": 1}, "update null", workdir / "a") == ["@0 null_key"]
    assert run({"parallelism": 3, "hash": "spark"}, "update null 2", workdir / "b") == [
        "@0 routed null hash=42 kg=42 t0 sum=2"]  # 42 * 3 // 128 = 0
    steps = """update 7
               checkpoint
               update 7
               restore 0
               restore 5
               restore 5 max=8
               restore 2 max=5
               update 7"""
    assert run({"parallelism": 2, "max_parallelism": 4}, steps, workdir / "c") == [
        "@0 routed 7 hash=1343918321 kg=1 t0 sum=1",  # 1343918321 % 4 = 1; 1 * 2 // 4 = 0
        "@2 routed 7 hash=1343918321 kg=1 t0 sum=2",
        "@3 refused parallelism out of bounds",
        "@4 refused parallelism above the checkpoint's max parallelism",
        "@5 refused max parallelism changed",  # KG-16 before KG-15 (C7)
        "@6 refused max parallelism changed",
        "@7 routed 7 hash=1343918321 kg=1 t0 sum=3"]


def test_rejected_configurations(workdir: Path) -> None:
    """KG-8: the single `rejected` event (the schedules are not validated first: validate_config
    refuses them with KG-8, the area's rejecting rule, before any adapter would run them)."""
    configs = [{"parallelism": 0}, {"parallelism": 40000}, {"parallelism": 4, "max_parallelism": 2},
               {"parallelism": 1, "max_parallelism": 40000}]
    for i, config in enumerate(configs):
        assert run(config, "update 1", workdir / str(i), validate=False) == ["rejected"]


def test_restore_without_checkpoint_and_lost_updates(workdir: Path) -> None:
    """A restore without a checkpoint starts from empty state, without state names (maxP: the KG-9
    default of the new parallelism); with a checkpoint, what came after it is lost, operator state
    included, also after a restore at the same parallelism (KG-20: the restored lists are the new
    job's own, an append to them does not change the checkpoint)."""
    steps = """add_state t1 s 5
               restore 200"""
    out = run({"parallelism": 2}, steps, workdir / "b")
    assert out[0] == "@1 restored 200 max=512"  # roundUp(300) = 512
    assert out[1:4] == ["@1 range t0 0 2", "@1 range t1 3 5", "@1 range t2 6 7"]  # 512/200: 3, 3, 2
    assert len(out) == 201 and not [e for e in out if "operator" in e]
    steps = """add_state t0 s 1
               checkpoint
               restore 2
               add_state t0 s 2
               update 7
               restore 2"""
    assert run({"parallelism": 2}, steps, workdir / "c") == [
        "@2 restored 2 max=128", "@2 range t0 0 63", "@2 range t1 64 127",
        "@2 operator t0 s [1]", "@2 operator t1 s []",
        "@4 routed 7 hash=1343918321 kg=113 t1 sum=1",
        "@5 restored 2 max=128", "@5 range t0 0 63", "@5 range t1 64 127",
        "@5 operator t0 s [1]", "@5 operator t1 s []"]


def test_state_names_of_the_restored_state_only(workdir: Path) -> None:
    """C4: the `operator` events list the names of the restored state, on every new subtask (empty
    lists included); a name first used after the latest checkpoint is not part of it."""
    steps = """add_state t1 early 3
               checkpoint
               add_state t0 late 1
               restore 2"""
    assert run({"parallelism": 2}, steps, workdir) == [
        "@3 restored 2 max=128", "@3 range t0 0 63", "@3 range t1 64 127",
        "@3 operator t0 early []", "@3 operator t1 early [3]"]


def test_keyed_order_and_moves_on_rescale(workdir: Path) -> None:
    """KG-13: whole key groups move to the subtask whose range holds them; `keyed` sorted by subtask,
    key group, type (int < long < string), key (null first)."""
    steps = """update 1
               update 1L
               update "A"
               update "B"
               update null 3
               checkpoint
               restore 1
               restore 3"""
    out = run({"parallelism": 2, "hash": "spark"}, steps, workdir)
    keyed = [e for e in out if " keyed " in e]
    h1, hl = spark_hash(1, "int"), spark_hash(1, "long")
    ha, hb = spark_hash("A", "string"), spark_hash("B", "string")
    entries = [(1, h1, "1"), (1, hl, "1L"), (1, ha, '"A"'), (1, hb, '"B"'), (3, 42, "null")]

    def expect(p: int, step: int) -> list[str]:
        rows = []
        for v, h, text in entries:
            kg = h % 128
            type_order = 1 if text.endswith("L") else 2 if text.startswith('"') else 0
            rows.append(((kg * p // 128, kg, type_order, text != "null", text),
                         f"@{step} keyed t{kg * p // 128} kg={kg} {text} sum={v}"))
        return [r for _, r in sorted(rows)]

    assert keyed == expect(1, 6) + expect(3, 7)


# --------------------------------------------------------------------------
# 3. Differential test against the reference model
# --------------------------------------------------------------------------

_counter = itertools.count()


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(schedule=st.one_of(
    schedules(Features(spark_hash=True, operator_state=True, rescale=True, refusals=True, max_steps=24)),
    rejected_configs()))
def test_engine_agrees_with_the_reference(schedule: Any, workdir: Path) -> None:
    """Whole traces of the engine (through Run and the store) against reference.key_groups, on
    valid schedules of every feature and on configurations KG-8 rejects."""
    from flink_semantics.reference import expected_trace

    observed = make_trace(run_with_retries(schedule, workdir / str(next(_counter))))
    expected = expected_trace(schedule)
    assert rendered(observed.events) == rendered(expected.events), schedule.to_json()


# --------------------------------------------------------------------------
# 4. The native Spark expressions
# --------------------------------------------------------------------------

INTS = [0, 1, -1, 2, 7, 42, 2**31 - 1, -(2**31), 2**31 - 2, -(2**31) + 1, 65535, -65536, 123456789]
LONGS = [0, 1, -1, 7, 2**32, 2**32 + 1, 2**63 - 1, -(2**63), 2**31, -(2**31) - 1, 123456789012, -(2**40)]
STRINGS = ["", "a", "ab", "abc", "abcd", "abcde", "A", "B", "ABC", "é", "héllo", "日本", "\U0001F600",
           "x\U0001F600y", "ÿÿÿ", "key-42", "polygenelubricants", "\u0000", "\uffff", "\U0010FFFF",
           "Ωmega ünïcödé", "🎉🎉🎉🎉🎉"]


def _keys(n: int = 200) -> list[tuple[Any, str]]:
    import random

    rng = random.Random(11)
    keys: list[tuple[Any, str]] = [(None, t) for t in ("int", "long", "string")]
    keys += [(v, "int") for v in INTS] + [(rng.randint(-(2**31), 2**31 - 1), "int")
                                           for _ in range(n - len(INTS))]
    keys += [(v, "long") for v in LONGS] + [(rng.randint(-(2**63), 2**63 - 1), "long")
                                             for _ in range(n - len(LONGS))]
    alphabet = "aZ09 -éßΩ日本語\U0001F600\U0001F44D\U00010348\u0800\u07ff"
    keys += [(s, "string") for s in STRINGS] + [
        ("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))), "string")
        for _ in range(n - len(STRINGS))]
    return keys


def _engine(key: Any, type_: str, profile: str, max_p: int, p: int) -> tuple[Any, Any, Any]:
    if profile == "spark":
        h = spark_hash(key, type_)
        kg = pmod(h, max_p)
    elif key is None:
        return None, None, None
    else:
        h = flink_key_hash(key, type_)
        kg = h % max_p
    return h, kg, operator_index(max_p, p, kg)


@pytest.mark.spark
def test_spark_expressions_agree_with_the_engine(spark: Any) -> None:
    """~200 keys of each type (extremes, empty, non-ASCII, astral-plane) through both profiles'
    native expressions in one Spark job, compared with the engine."""
    from flink_semantics.adapters.pyspark.key_groups.spark import keys_frame, with_key_groups
    from pyspark.sql import functions as F

    keys = _keys()
    configs = [("flink", 128, 3), ("spark", 128, 3), ("flink", 300, 7), ("spark", 10, 10),
               ("flink", 32768, 5)]
    df = keys_frame(spark, keys).withColumn("id", F.monotonically_increasing_id())
    frames = [with_key_groups(df, max_p, p, profile).withColumn("cfg", F.lit(c))
              for c, (profile, max_p, p) in enumerate(configs)]
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f)
    rows = union.select("cfg", "key", "type", "hash", "key_group", "subtask").collect()
    assert len(rows) == len(keys) * len(configs)
    by_text = {(None if k is None else str(k), t): (k, t) for k, t in keys}
    wrong = []
    for r in rows:
        profile, max_p, p = configs[r["cfg"]]
        key, type_ = by_text[(r["key"], r["type"])]
        want = _engine(key, type_, profile, max_p, p)
        if (r["hash"], r["key_group"], r["subtask"]) != want:
            wrong.append((profile, max_p, p, key, type_, (r["hash"], r["key_group"], r["subtask"]), want))
    assert not wrong, wrong[:10]


@pytest.mark.spark
def test_placement_by_subtask_is_exact(spark: Any) -> None:
    """`place_by_subtask`: spark_partition_id() == subtask for every row (repartition(n, col) would
    hash the subtask again: pitfall P6)."""
    from flink_semantics.adapters.pyspark.key_groups.spark import (
        keys_frame,
        place_by_subtask,
        with_key_groups,
    )
    from pyspark.sql import functions as F

    p = 5
    df = with_key_groups(keys_frame(spark, [k for k in _keys(60) if k[0] is not None]), 128, p, "flink")
    placed = place_by_subtask(df, p).withColumn("pid", F.spark_partition_id())
    rows = placed.select("subtask", "pid").collect()
    assert rows and all(r["subtask"] == r["pid"] for r in rows)
    assert {r["subtask"] for r in rows} == set(range(p))


SURROGATE_KEYS = ["\ud800", "\udfff", "a\udfffé", "\udc00\ud800", "x\ud83d", "\ud800\ud800\udc00",
                  "\ud83d\ude00", "?", "??", "\U0001F600"]


def _sql_literal(key: str) -> str:
    """A Spark SQL literal with each UTF-16 unit of the key as a Unicode escape: the parser makes
    it a Java String with exactly those units (the way such a key reaches Spark's hash: py4j and
    Arrow refuse the str, createDataFrame's pickled rows turn it into U+FFFD)."""
    units = key.encode("utf-16-be", "surrogatepass")
    escapes = (f"\\u{int.from_bytes(units[i:i + 2], 'big'):04X}" for i in range(0, len(units), 2))
    return "'" + "".join(escapes) + "'"


@pytest.mark.spark
def test_spark_hash_of_surrogates_is_sparks_own(spark: Any) -> None:
    """KG-26, KG-34: the engine's hash and bytes of strings with unpaired surrogates and pairs are
    Spark's own: `hash()` and `encode(.., 'UTF-8')` of SQL literals holding those UTF-16 units."""
    columns = [f"hash({_sql_literal(k)}) AS h{i}, hex(encode({_sql_literal(k)}, 'UTF-8')) AS b{i}, "
               f"pmod(hash({_sql_literal(k)}), 128) AS g{i}" for i, k in enumerate(SURROGATE_KEYS)]
    row = spark.sql("SELECT " + ", ".join(columns)).collect()[0]
    for i, k in enumerate(SURROGATE_KEYS):
        want = (spark_hash(k, "string"), spark_utf8(k).hex().upper(), spark_key_group(k, "string", 128))
        assert (row[f"h{i}"], row[f"b{i}"], row[f"g{i}"]) == want, ascii(k)


ADAPTER_CASES = [
    ({"parallelism": 2}, 'update 7\nupdate "a" 5\nadd_state t0 offsets 1\ncheckpoint\nrestore 3'),
    ({"parallelism": 2, "max_parallelism": 4},
     "update 7\ncheckpoint\nupdate 7\nrestore 0\nrestore 5\nrestore 5 max=8\nrestore 2 max=5\nupdate 7"),
    ({"parallelism": 3, "hash": "spark"},
     'update null 2\nupdate "é"\nadd_state t0 s 1\nadd_state t1 s 2\nadd_state t2 u 3 union\n'
     'add_state t1 b 4 broadcast\ncheckpoint\nrestore 5\nupdate 9L\ncheckpoint\nrestore 1'),
    # KG-34: unpaired surrogates and an escaped pair travel as JSON text through Arrow and the store
    ({"parallelism": 2, "hash": "spark"},
     'update "\\ud800"\nupdate "?"\nupdate "\\udc00\\ud800" 2\nupdate "\\ud83d\\ude00"\ncheckpoint\n'
     'restore 3\nupdate "\\ud800"'),
    ({"parallelism": 2}, 'update "\\ud800"\nupdate "😀"\nupdate "\\ud83d\\ude00"\ncheckpoint\nrestore 1'),
    ({"parallelism": 0}, "update 1"),
]


@pytest.mark.spark
def test_schedules_through_the_spark_adapter(spark: Any, workdir: Path) -> None:
    """The area through PySparkAdapter (one Spark task runs the batch, checkpoints in the store):
    the same traces as the in-process runs above."""
    from flink_semantics.adapters.pyspark import PySparkAdapter

    batch = [KG.schedule(config, steps, validate=False) for config, steps in ADAPTER_CASES]
    local = [rendered(run_with_retries(s, workdir / str(i))) for i, s in enumerate(batch)]
    adapter = PySparkAdapter()
    try:
        assert {"key_groups", *CAPABILITIES} <= set(adapter.capabilities())
        traces = adapter.run_batch(batch)
    finally:
        adapter.close()
    assert [rendered(t.events) for t in traces] == local
    assert local[-1] == ["rejected"] and "@10 operator t0 u [3, 3, 3, 3, 3]" in local[2]
    from flink_semantics.reference import expected_trace

    assert local[3:5] == [rendered(expected_trace(s).events) for s in batch[3:5]]
    # Spark 4.3.0's hash('\uD800') = hash('?'), kept apart from "?" (C12); the pair is 😀
    assert local[3][:2] == ['@0 routed "\\ud800" hash=1940951976 kg=40 t0 sum=1',
                            '@1 routed "?" hash=1940951976 kg=40 t0 sum=1']
    assert '@2 routed "😀" hash=1934073014 kg=54 t0 sum=2' in local[4]
