"""The key groups engine in plain Python: hashes, key groups, ranges, keyed and operator state, and
their redistribution on a restore (spec/key-groups.md).

* hashes: the JDK hash codes of int, long and string keys (KG-11), Flink's murmur finalizer
  (KG-2), Spark's `hash()` (Murmur3_x86_32 with seed 42, KG-22..KG-27); a string key is its UTF-16
  code units (KG-34), which Spark holds as the UTF-8 of Java's `getBytes` (an unpaired surrogate: '?');
* `KeyGroupAssignment` helpers: key group (KG-1, KG-30), operator index (KG-3), ranges (KG-4),
  default max parallelism (KG-9, KG-10), bounds (KG-8);
* `repartition_operator_state`: Flink's RoundRobinOperatorStateRepartitioner (KG-17..KG-21);
* `KeyedOperator`: one keyed operator's subtasks with their keyed and operator state, its
  checkpoints (as JSON) and its restores with the refusals (KG-8, KG-13..KG-16).

Standard library only; rule IDs in comments.  All 32-bit arithmetic is done on Python ints masked
with 0xFFFFFFFF, converted to signed where the sign matters.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
LOWER_BOUND_MAX_PARALLELISM = 1 << 7  # 128
UPPER_BOUND_MAX_PARALLELISM = 1 << 15  # 32768
SPARK_SEED = 42

REFUSED_PARALLELISM = "parallelism out of bounds"  # KG-8
REFUSED_ABOVE_MAX = "parallelism above the checkpoint's max parallelism"  # KG-15
REFUSED_MAX_CHANGED = "max parallelism changed"  # KG-16

Key = int | str | None


# --------------------------------------------------------------------------
# 32-bit helpers
# --------------------------------------------------------------------------


def to_int32(x: int) -> int:
    """The signed 32-bit value of the low 32 bits of x."""
    x &= MASK32
    return x - (1 << 32) if x & 0x80000000 else x


def _rotl32(x: int, r: int) -> int:
    x &= MASK32
    return ((x << r) | (x >> (32 - r))) & MASK32


# --------------------------------------------------------------------------
# JDK hash codes (KG-11)
# --------------------------------------------------------------------------


def java_int_hash(v: int) -> int:
    """KG-11: Integer.hashCode is the value."""
    return to_int32(v)


def java_long_hash(v: int) -> int:
    """KG-11: Long.hashCode = (int)(v ^ (v >>> 32))."""
    u = v & MASK64
    return to_int32(u ^ (u >> 32))


def java_string(s: str) -> str:
    """KG-34: the Java String a str stands for, its UTF-16 code units, as the str with its surrogate
    pairs combined (a pair given as two code points is one character) and unpaired surrogates kept."""
    return s.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")


def java_string_hash(s: str) -> int:
    """KG-11: String.hashCode = sum of c[i] * 31^(n-1-i) over the UTF-16 code units, wrapping at 32
    bits (a character outside the BMP is two surrogate units, an unpaired surrogate one: KG-34);
    "" -> 0."""
    b = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + ((b[i] << 8) | b[i + 1])) & MASK32
    return to_int32(h)


def java_hash(key: int | str, type_: str) -> int:
    if type_ == "string":
        assert isinstance(key, str)
        return java_string_hash(key)
    assert isinstance(key, int)
    return java_long_hash(key) if type_ == "long" else java_int_hash(key)


# --------------------------------------------------------------------------
# Murmur3_x86_32 pieces (Flink's MathUtils.murmurHash, Spark's Murmur3_x86_32)
# --------------------------------------------------------------------------

C1 = 0xCC9E2D51
C2 = 0x1B873593
C3 = 0xE6546B64
F1 = 0x85EBCA6B
F2 = 0xC2B2AE35


def mix_k1(k: int) -> int:
    return (_rotl32((k * C1) & MASK32, 15) * C2) & MASK32


def mix_h1(h: int, k: int) -> int:
    return (_rotl32((h ^ k) & MASK32, 13) * 5 + C3) & MASK32


def bit_mix(h: int) -> int:
    """The avalanche: h ^= h>>>16; h *= 0x85ebca6b; h ^= h>>>13; h *= 0xc2b2ae35; h ^= h>>>16."""
    h &= MASK32
    h ^= h >> 16
    h = (h * F1) & MASK32
    h ^= h >> 13
    h = (h * F2) & MASK32
    h ^= h >> 16
    return h


def fmix(h: int, length: int) -> int:
    """KG-27: the input length in bytes is xored in before the avalanche."""
    return bit_mix(h ^ length)


def flink_murmur(code: int) -> int:
    """KG-2: Flink's MathUtils.murmurHash(int): one Murmur3 block with seed 0, length 4, made
    non-negative (a negative h becomes -h; Integer.MIN_VALUE becomes 0)."""
    h = to_int32(fmix(mix_h1(0, mix_k1(code & MASK32)), 4))
    if h >= 0:
        return h
    return 0 if h == -(1 << 31) else -h


# --------------------------------------------------------------------------
# Spark's hash() (KG-22..KG-27)
# --------------------------------------------------------------------------


def spark_hash_int(v: int, seed: int = SPARK_SEED) -> int:
    """KG-24: an int is hashed with hashInt(v, seed)."""
    return to_int32(fmix(mix_h1(seed & MASK32, mix_k1(v & MASK32)), 4))


def spark_hash_long(v: int, seed: int = SPARK_SEED) -> int:
    """KG-25: a bigint is hashed with hashLong: the low word, then the high word, length 8."""
    u = v & MASK64
    h = mix_h1(seed & MASK32, mix_k1(u & MASK32))
    h = mix_h1(h, mix_k1(u >> 32))
    return to_int32(fmix(h, 8))


def spark_hash_bytes(b: bytes, seed: int = SPARK_SEED) -> int:
    """KG-26: Spark's legacy hashUnsafeBytes: 4-byte little-endian words, then every remaining byte
    on its own, sign-extended and mixed as a full block; finalised with the byte length (KG-27)."""
    h = seed & MASK32
    n = len(b)
    aligned = n - n % 4
    for i in range(0, aligned, 4):
        h = mix_h1(h, mix_k1(int.from_bytes(b[i:i + 4], "little")))
    for i in range(aligned, n):
        byte = b[i]
        h = mix_h1(h, mix_k1((byte - 256 if byte >= 128 else byte) & MASK32))
    return to_int32(fmix(h, n))


def spark_utf8(s: str) -> bytes:
    """KG-26, KG-34: the bytes of the key as Spark holds it, UTF8String.fromString(s), which is Java's
    String.getBytes(UTF_8): a surrogate pair as its 4-byte sequence, every unpaired surrogate as '?'."""
    return java_string(s).encode("utf-8", "replace")  # Python's "replace" also writes '?'


def spark_hash_string(s: str, seed: int = SPARK_SEED) -> int:
    """KG-26: a UTF8_BINARY string is hashed over the UTF-8 bytes of its UTF8String."""
    return spark_hash_bytes(spark_utf8(s), seed)


def spark_hash(key: Key, type_: str, seed: int = SPARK_SEED) -> int:
    """KG-22: hash(key) = H(key, 42); KG-23: a null leaves the seed unchanged (hash(null) = 42)."""
    if key is None:
        return to_int32(seed)
    if type_ == "string":
        assert isinstance(key, str)
        return spark_hash_string(key, seed)
    assert isinstance(key, int)
    return spark_hash_long(key, seed) if type_ == "long" else spark_hash_int(key, seed)


def pmod(a: int, n: int) -> int:
    """KG-30: Spark's pmod: r = a % n with Java's truncating remainder; r < 0 -> (r + n) % n."""
    r = abs(a) % n * (1 if a >= 0 else -1)
    return (r + n) % n if r < 0 else r


# --------------------------------------------------------------------------
# Key groups, operator indexes, ranges, bounds
# --------------------------------------------------------------------------


def round_up_to_power_of_two(x: int) -> int:
    """KG-10: the smallest power of two >= x (x >= 1)."""
    x -= 1
    for s in (1, 2, 4, 8, 16):
        x |= x >> s
    return x + 1


def default_max_parallelism(p: int) -> int:
    """KG-9: min(max(roundUpToPowerOfTwo(p + p / 2), 128), 32768)."""
    return min(max(round_up_to_power_of_two(p + p // 2), LOWER_BOUND_MAX_PARALLELISM),
               UPPER_BOUND_MAX_PARALLELISM)


def parallelism_in_bounds(p: int, max_p: int | None) -> bool:
    """KG-8: 1 <= p <= 32768; an explicit maxP: 1 <= maxP <= 32768 and p <= maxP."""
    if not 1 <= p <= UPPER_BOUND_MAX_PARALLELISM:
        return False
    return max_p is None or (1 <= max_p <= UPPER_BOUND_MAX_PARALLELISM and p <= max_p)


def flink_key_hash(key: int | str, type_: str) -> int:
    """KG-1, KG-2, KG-11: murmurHash(hashCode(key)), non-negative."""
    return flink_murmur(java_hash(key, type_))


def flink_key_group(key: int | str, type_: str, max_p: int) -> int:
    """KG-1: murmurHash(hashCode(key)) % maxP (non-negative operand: Java's % is Python's %)."""
    return flink_key_hash(key, type_) % max_p


def spark_key_group(key: Key, type_: str, max_p: int) -> int:
    """KG-30: pmod(hash(key), maxP)."""
    return pmod(spark_hash(key, type_), max_p)


def operator_index(max_p: int, p: int, key_group: int) -> int:
    """KG-3: the subtask owning key group g is g * p div maxP (KG-6 routes a key there)."""
    return key_group * p // max_p


def key_group_range(max_p: int, p: int, i: int) -> tuple[int, int]:
    """KG-4: subtask i owns [ceil(i * maxP / p), floor(((i + 1) * maxP - 1) / p)], inclusive."""
    return (i * max_p + p - 1) // p, ((i + 1) * max_p - 1) // p


# --------------------------------------------------------------------------
# Operator state repartitioning (Flink's RoundRobinOperatorStateRepartitioner)
# --------------------------------------------------------------------------

OperatorState = dict[str, list[int]]  # one subtask's operator state: name -> elements


def repartition_operator_state(old: list[OperatorState], modes: dict[str, str],
                               new_p: int) -> list[OperatorState]:
    """The operator state of `new_p` subtasks from that of `len(old)` old ones.  `modes`: every
    state name's mode (split, union, broadcast); every old subtask has every name (maybe empty)."""
    old_p = len(old)
    names = sorted(modes)
    union = [n for n in names if modes[n] == "union"]
    if new_p == old_p and not union:
        # KG-20: same parallelism, no union state: every subtask keeps its state unchanged.
        return [{n: list(s.get(n, [])) for n in names} for s in old]

    def concat(name: str) -> list[int]:
        return [e for s in old for e in s.get(name, [])]  # old subtask order

    new: list[OperatorState] = [{} for _ in range(new_p)]
    if new_p == old_p:
        # KG-18 at the same parallelism: split and broadcast state stay; union names everywhere.
        for i, s in enumerate(old):
            for n in names:
                new[i][n] = list(s.get(n, [])) if modes[n] != "union" else concat(n)
        return new

    start = 0  # KG-21: the receiver of the first extra element rotates across split names
    for n in names:  # Flink walks HashMap order; the spec fixes sorted name order
        mode = modes[n]
        if mode == "union":
            # KG-18: every new subtask gets the concatenation of every old subtask's elements.
            whole = concat(n)
            for i in range(new_p):
                new[i][n] = list(whole)
        elif mode == "broadcast":
            # KG-19: new subtask i gets the copy of old subtask i mod oldP.
            for i in range(new_p):
                new[i][n] = list(old[i % old_p].get(n, []))
        else:
            # KG-17: split: concatenation in old subtask order, cut into chunks of base, the first
            # `rem` receivers (counting from `start`) one more; the next name starts at the receiver
            # where the remainder ran out.
            elements = concat(n)
            base, rem = divmod(len(elements), new_p)
            next_start = start
            pos = 0
            for i in range(new_p):
                r = (i + start) % new_p
                take = base
                if rem > 0:
                    take += 1
                    rem -= 1
                elif rem == 0:
                    next_start = r
                    rem -= 1
                new[r][n] = elements[pos:pos + take]
                pos += take
            start = next_start
    return new


# --------------------------------------------------------------------------
# The keyed operator
# --------------------------------------------------------------------------

StateKey = tuple[str, Key]  # (type, key): an int 1 and a long 1 are different keys


@dataclass
class Subtask:
    """One subtask's state: keyed state by key group, and operator list state by name."""

    keyed: dict[int, dict[StateKey, int]] = field(default_factory=dict)
    operator: OperatorState = field(default_factory=dict)


@dataclass(frozen=True)
class Routed:
    key: Key
    type: str
    hash: int
    key_group: int
    subtask: int
    value: int


class Refused(Exception):
    """A restore refused (KG-8, KG-15, KG-16): the running job goes on unchanged."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def restore_refusal(p: int, max_p: int | None, checkpoint_max_p: int | None) -> str | None:
    """Why a restore at p subtasks (explicitly configured maxP max_p) from a checkpoint taken with
    maxP checkpoint_max_p (None: no checkpoint) is refused, or None.  In Flink's order: loading the
    checkpoint refuses a changed configured max parallelism (Checkpoints.loadAndValidateCheckpoint),
    then StateAssignmentOperation a parallelism above the checkpoint's (spec C7)."""
    if not parallelism_in_bounds(p, max_p):
        return REFUSED_PARALLELISM  # KG-8
    if checkpoint_max_p is not None and max_p is not None and max_p != checkpoint_max_p:
        return REFUSED_MAX_CHANGED  # KG-16 (explicitly configured and changed)
    if checkpoint_max_p is not None and p > checkpoint_max_p:
        return REFUSED_ABOVE_MAX  # KG-15
    return None


def key_sort(key: StateKey) -> tuple[Any, ...]:
    """Keys by type, then null first, then by value (keys of one type compare by value)."""
    type_, k = key
    return (type_, 0, 0) if k is None else (type_, 1, k)


class KeyedOperator:
    """One keyed operator: `p` subtasks and `max_p` key groups, with a hash profile."""

    def __init__(self, p: int, max_p: int | None, profile: str):
        if not parallelism_in_bounds(p, max_p):  # KG-8
            raise ValueError(f"KG-8: parallelism {p} / max parallelism {max_p} out of bounds")
        self.profile = profile
        self.p = p
        self.explicit = max_p is not None
        self.max_p = max_p if max_p is not None else default_max_parallelism(p)  # KG-9
        self.subtasks = [Subtask() for _ in range(p)]
        self.modes: dict[str, str] = {}

    # ---- routing -----------------------------------------------------------------

    def route(self, key: Key, type_: str) -> tuple[int, int, int] | None:
        """(hash, key group, subtask) of a key; None for a null key under the flink profile."""
        if self.profile == "spark":
            h = spark_hash(key, type_)  # KG-22..KG-27; KG-23: null -> 42, routed
            kg = pmod(h, self.max_p)  # KG-30
        else:
            if key is None:
                return None  # KG-7: a null key is refused, never hashed
            h = flink_key_hash(key, type_)  # KG-11, KG-2
            kg = h % self.max_p  # KG-1
        return h, kg, operator_index(self.max_p, self.p, kg)  # KG-3, KG-6

    def update(self, key: Key, type_: str, value: int) -> Routed | None:
        """A keyed record: the key's sum on the subtask owning its key group grows by value."""
        r = self.route(key, type_)
        if r is None:
            return None
        h, kg, t = r
        if isinstance(key, str):
            key = java_string(key)  # KG-34: one key per sequence of UTF-16 code units
        group = self.subtasks[t].keyed.setdefault(kg, {})
        total = group.get((type_, key), 0) + value
        group[(type_, key)] = total
        return Routed(key, type_, h, kg, t, total)

    def add_state(self, subtask: int, name: str, element: int, mode: str) -> None:
        """Subtask `subtask mod p` appends to its list `name`; every subtask registers the name."""
        self.modes.setdefault(name, mode)
        for s in self.subtasks:
            s.operator.setdefault(name, [])
        self.subtasks[subtask % self.p].operator[name].append(element)

    # ---- checkpoints -------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The checkpoint as JSON: p, maxP, whether maxP was explicit, the modes, and every
        subtask's keyed state (with its key-group range) and operator state."""
        subtasks = []
        for i, s in enumerate(self.subtasks):
            keyed = [[kg, t, k, v] for kg, group in sorted(s.keyed.items()) for (t, k), v in group.items()]
            subtasks.append({"range": list(key_group_range(self.max_p, self.p, i)), "keyed": keyed,
                             "operator": {n: list(e) for n, e in s.operator.items()}})
        return {"parallelism": self.p, "max_parallelism": self.max_p, "explicit": self.explicit,
                "modes": dict(self.modes), "subtasks": subtasks}

    def check_restore(self, p: int, max_p: int | None, checkpoint: dict[str, Any] | None) -> None:
        """Raise Refused when a restore at p (explicit maxP max_p) from the checkpoint is refused."""
        reason = restore_refusal(p, max_p, None if checkpoint is None else checkpoint["max_parallelism"])
        if reason is not None:
            raise Refused(reason)

    @classmethod
    def restore(cls, p: int, max_p: int | None, profile: str,
                checkpoint: dict[str, Any] | None) -> KeyedOperator:
        """A new job of p subtasks from the checkpoint (None: empty state, no state names).  Its
        operator state has the checkpoint's names on every new subtask (C4), and only those: a name
        first used after the checkpoint is not part of the restored state.  Call check_restore
        first: this assumes the restore is allowed."""
        if checkpoint is None:
            return cls(p, max_p, profile)  # empty state; maxP = m' or the KG-9 default of p'
        op = cls(p, checkpoint["max_parallelism"], profile)  # KG-16: the checkpoint's maxP adopted
        op.explicit = max_p is not None or bool(checkpoint["explicit"])
        op.modes = dict(checkpoint["modes"])
        old = checkpoint["subtasks"]
        old_p = checkpoint["parallelism"]
        if p == old_p:
            # KG-14: same parallelism, subtask i gets old subtask i's keyed state unchanged.
            for i, s in enumerate(old):
                for kg, t, k, v in s["keyed"]:
                    op.subtasks[i].keyed.setdefault(kg, {})[(t, k)] = v
        else:
            # KG-13: new subtask i gets exactly the key groups of its range (with the restored maxP),
            # from every old subtask whose range intersects it, restricted to the intersection.
            for i in range(p):
                first, last = key_group_range(op.max_p, p, i)
                for s in old:
                    o_first, o_last = s["range"]
                    if o_last < first or o_first > last:
                        continue
                    for kg, t, k, v in s["keyed"]:
                        if max(first, o_first) <= kg <= min(last, o_last):
                            op.subtasks[i].keyed.setdefault(kg, {})[(t, k)] = v
        # KG-17..KG-21: operator state by Flink's round-robin repartitioner.
        new = repartition_operator_state([s["operator"] for s in old], op.modes, p)
        for sub, state in zip(op.subtasks, new):
            sub.operator = state
        return op

    # ---- what a restore shows ----------------------------------------------------

    def ranges(self) -> Iterator[tuple[int, int, int]]:
        """KG-4: (subtask, first, last) per subtask."""
        for i in range(self.p):
            yield (i, *key_group_range(self.max_p, self.p, i))

    def keyed_entries(self) -> list[tuple[int, int, Key, str, int]]:
        """(subtask, key group, key, type, value), sorted by (subtask, key group, type, key)."""
        out = []
        for i, s in enumerate(self.subtasks):
            for kg, group in s.keyed.items():
                for (t, k), v in group.items():
                    out.append((i, kg, k, t, v))
        out.sort(key=lambda e: (e[0], e[1], key_sort((e[3], e[2]))))
        return out

    def operator_entries(self) -> list[tuple[int, str, list[int]]]:
        """(subtask, name, elements ascending) per subtask and name in sorted order."""
        return [(i, n, sorted(s.operator.get(n, []))) for i, s in enumerate(self.subtasks)
                for n in sorted(self.modes)]
