"""Reference model of the key groups and rescaling area (spec/key-groups.md).

One keyed operator with `parallelism` subtasks.  The hashes (KG-1, KG-2, KG-11 for the `flink`
profile; KG-22..KG-27 for the `spark` profile; KG-34: a string key is its UTF-16 code units), the
key group and its subtask (KG-1, KG-3, KG-6), the ranges (KG-4), the default maximum parallelism
(KG-9, KG-10), and the redistribution of keyed (KG-12..KG-14) and operator state (KG-17..KG-21) on a
restore, refused by KG-8, KG-15 and KG-16.

Standard library and `spec` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flink_semantics.spec.areas.key_groups import (
    LOWER_BOUND_MAX_PARALLELISM,
    REFUSED_ABOVE_MAX,
    REFUSED_MAX_CHANGED,
    REFUSED_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
    AddStateStep,
    CheckpointStep,
    KeyGroupsConfig,
    RestoreStep,
    UpdateStep,
    event,
    utf16_string,
)
from flink_semantics.spec.schedule import Event, ScheduleError, Step

MASK = 0xFFFFFFFF

# --------------------------------------------------------------------------
# 32-bit arithmetic
# --------------------------------------------------------------------------


def int32(x: int) -> int:
    """The signed 32-bit value of the low 32 bits of x (Java's int overflow)."""
    x &= MASK
    return x - (1 << 32) if x & 0x80000000 else x


def _rotl(x: int, r: int) -> int:
    x &= MASK
    return ((x << r) | (x >> (32 - r))) & MASK


def _mix_k1(k: int) -> int:
    return (_rotl(k * 0xCC9E2D51, 15) * 0x1B873593) & MASK


def _mix_h1(h: int, k: int) -> int:
    return (_rotl((h ^ k) & MASK, 13) * 5 + 0xE6546B64) & MASK


def _fmix(h: int, length: int) -> int:
    h = (h ^ length) & MASK
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK
    h ^= h >> 16
    return h


# --------------------------------------------------------------------------
# The flink profile: JDK hash codes (KG-11), Flink's murmur finalizer (KG-2)
# --------------------------------------------------------------------------


def java_hash_code(key: int | str, type_: str) -> int:
    """KG-11: Integer.hashCode, Long.hashCode, String.hashCode (over UTF-16 code units, KG-34: an
    unpaired surrogate is one unit like any other, "\\ud800" -> 55296)."""
    if type_ == "int":
        return int32(key)  # type: ignore[arg-type]
    if type_ == "long":
        v = key & 0xFFFFFFFFFFFFFFFF  # type: ignore[operator]
        return int32(v ^ (v >> 32))
    units = str(key).encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & MASK
    return int32(h)


def pyflink_row_hash_code(key: int | str | None, type_: str) -> int:
    """KG-33: the hash code of PyFlink's key, `Row.of(key)` (RowUtils.deepHashCodeRow): 31 times the
    row kind's byte (INSERT: 0) plus the hash of the field array `[key]` (31 + the field's), whose
    field hash is `Arrays.deepHashCode([key])` (31 + the key's JDK hash code, 0 for null)."""
    if key is None:
        return 31
    return int32(31 + 31 + java_hash_code(key, type_))


def flink_murmur(code: int) -> int:
    """KG-2: MathUtils.murmurHash: one round of Murmur3 on an int, seed 0, made non-negative."""
    h = _fmix(_mix_h1(0, _mix_k1(code)), 4)
    h = int32(h)
    if h >= 0:
        return h
    return 0 if h == -(2**31) else -h


# --------------------------------------------------------------------------
# The spark profile: hash() (KG-22..KG-27)
# --------------------------------------------------------------------------


def spark_hash_int(v: int, seed: int) -> int:
    return _fmix(_mix_h1(seed, _mix_k1(v & MASK)), 4)


def spark_hash_long(v: int, seed: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    h = _mix_h1(seed, _mix_k1(v & MASK))
    h = _mix_h1(h, _mix_k1(v >> 32))
    return _fmix(h, 8)


def spark_hash_bytes(data: bytes, seed: int) -> int:
    """KG-26: Murmur3_x86_32.hashUnsafeBytes, Spark's legacy tail: every trailing byte on its own,
    sign-extended, mixed like a whole word."""
    h = seed & MASK
    n = len(data) - len(data) % 4
    for i in range(0, n, 4):
        h = _mix_h1(h, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
    for b in data[n:]:
        h = _mix_h1(h, _mix_k1(b - 256 if b >= 128 else b))
    return _fmix(h, len(data))


def java_utf8_bytes(key: str) -> bytes:
    """KG-26, KG-34: the bytes of Spark's UTF8String.fromString, Java's String.getBytes(UTF_8): a
    surrogate pair as its 4-byte sequence, each unpaired surrogate as '?' (0x3F)."""
    return utf16_string(key).encode("utf-8", "replace")


def spark_hash(key: int | str | None, type_: str) -> int:
    """KG-22: hash(key) = H(key, 42) as a signed int; KG-23: null leaves the seed."""
    seed = 42
    if key is None:
        return seed
    if type_ == "int":
        return int32(spark_hash_int(key, seed))  # type: ignore[arg-type]
    if type_ == "long":
        return int32(spark_hash_long(key, seed))  # type: ignore[arg-type]
    return int32(spark_hash_bytes(java_utf8_bytes(str(key)), seed))


# --------------------------------------------------------------------------
# Key groups, subtasks, ranges (KG-1, KG-3..KG-10)
# --------------------------------------------------------------------------


def operator_index(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """KG-3."""
    return key_group * parallelism // max_parallelism


def key_group_range(max_parallelism: int, parallelism: int, index: int) -> tuple[int, int]:
    """KG-4: subtask `index`'s inclusive range."""
    first = (index * max_parallelism + parallelism - 1) // parallelism
    last = ((index + 1) * max_parallelism - 1) // parallelism
    return first, last


def round_up_to_power_of_two(x: int) -> int:
    """KG-10."""
    return 1 << (x - 1).bit_length() if x > 1 else 1


def default_max_parallelism(parallelism: int) -> int:
    """KG-9."""
    return min(max(round_up_to_power_of_two(parallelism + parallelism // 2), LOWER_BOUND_MAX_PARALLELISM),
               UPPER_BOUND_MAX_PARALLELISM)


def within_bounds(parallelism: int, max_parallelism: int | None) -> bool:
    """KG-8."""
    ok = 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM
    if max_parallelism is not None:
        ok = ok and 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM and parallelism <= max_parallelism
    return ok


def route(key: int | str | None, type_: str, profile: str, max_parallelism: int,
          parallelism: int) -> tuple[int, int, int]:
    """(hash, key group, subtask) of a key that is not refused."""
    if profile == "spark":
        h = spark_hash(key, type_)
        kg = h % max_parallelism  # KG-30: pmod (Python's % of a positive modulus is non-negative)
    elif profile == "pyflink":
        h = flink_murmur(pyflink_row_hash_code(key, type_))  # KG-33, KG-2
        kg = h % max_parallelism
    else:
        assert key is not None
        h = flink_murmur(java_hash_code(key, type_))  # KG-1, KG-2, KG-11
        kg = h % max_parallelism
    return h, kg, operator_index(max_parallelism, parallelism, kg)  # KG-3, KG-6


# --------------------------------------------------------------------------
# Operator state on a restore (KG-17..KG-21)
# --------------------------------------------------------------------------

OperatorState = list[dict[str, list[int]]]  # per subtask: name -> elements


def repartition_operator_state(old: OperatorState, modes: dict[str, str],
                               new_parallelism: int) -> OperatorState:
    """RoundRobinOperatorStateRepartitioner, with split names visited in sorted order (a choice)."""
    old_parallelism = len(old)
    union = sorted(n for n, m in modes.items() if m == "union")
    if new_parallelism == old_parallelism:
        out = [{n: list(v) for n, v in s.items()} for s in old]  # copies: the checkpoint stays as it was
        if not union:
            return out  # KG-20
        for name in union:  # KG-18: union state in full, even at the same parallelism
            everything = [e for s in old for e in s.get(name, [])]
            for s in out:
                s[name] = list(everything)
        return out
    out = [{n: [] for n in modes} for _ in range(new_parallelism)]
    start = 0
    for name in sorted(n for n, m in modes.items() if m == "split"):  # KG-17, KG-21
        elements = [e for s in old for e in s.get(name, [])]
        base, remainder = divmod(len(elements), new_parallelism)
        next_start, taken = start, 0
        for i in range(new_parallelism):
            receiver = (i + start) % new_parallelism
            n = base
            if remainder > 0:
                n += 1
                remainder -= 1
            elif remainder == 0:
                next_start = receiver
                remainder -= 1
            out[receiver][name] = elements[taken:taken + n]
            taken += n
        start = next_start
    for name in union:  # KG-18
        everything = [e for s in old for e in s.get(name, [])]
        for s in out:
            s[name] = list(everything)
    for name in sorted(n for n, m in modes.items() if m == "broadcast"):  # KG-19
        for i, s in enumerate(out):
            s[name] = list(old[i % old_parallelism].get(name, []))
    return out


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------

Key = tuple[str, int | str | None]  # (type, key); a null key only in the spark and pyflink profiles
KeyedState = list[dict[int, dict[Key, int]]]  # per subtask: key group -> key -> sum


@dataclass
class Snapshot:
    parallelism: int
    max_parallelism: int
    explicit: bool
    keyed: KeyedState
    operator: OperatorState
    modes: dict[str, str] = field(default_factory=dict)


def _key_order(item: Key) -> tuple[str, bool, int, str]:
    """Keys of one type by value, a null key first."""
    type_, key = item
    return type_, key is not None, key if isinstance(key, int) else 0, key if isinstance(key, str) else ""


class Model:
    def __init__(self, config: KeyGroupsConfig):
        if not within_bounds(config.parallelism, config.max_parallelism):  # KG-8, rejecting
            raise ScheduleError(None, "KG-8", f"parallelism {config.parallelism} and max parallelism "
                                f"{config.max_parallelism} are not within bounds")
        self.profile = config.hash
        self.explicit = config.max_parallelism is not None
        self.max_parallelism = config.max_parallelism or default_max_parallelism(config.parallelism)
        self.parallelism = config.parallelism
        self.keyed: KeyedState = [{} for _ in range(self.parallelism)]
        self.operator: OperatorState = [{} for _ in range(self.parallelism)]
        self.modes: dict[str, str] = {}
        self.checkpoint: Snapshot | None = None

    def apply(self, index: int, step: Step) -> list[Event]:
        if isinstance(step, UpdateStep):
            return self._update(index, step)
        if isinstance(step, AddStateStep):
            self._add_state(step)
            return []
        if isinstance(step, CheckpointStep):
            self.checkpoint = Snapshot(self.parallelism, self.max_parallelism, self.explicit,
                                       [{g: dict(keys) for g, keys in s.items()} for s in self.keyed],
                                       [{n: list(v) for n, v in s.items()} for s in self.operator],
                                       dict(self.modes))
            return []
        if isinstance(step, RestoreStep):
            return self._restore(index, step)
        raise ScheduleError(index, "SCH-1", f"not a key_groups step: {step!r}")

    def _update(self, index: int, s: UpdateStep) -> list[Event]:
        if s.key is None and self.profile == "flink":
            return [event(index, "null_key")]  # KG-7
        h, kg, subtask = self.route(s.key, s.type)
        keys = self.keyed[subtask].setdefault(kg, {})
        key = utf16_string(s.key) if isinstance(s.key, str) else s.key  # KG-34: keys by their code units
        item = (s.type, key)
        keys[item] = keys.get(item, 0) + s.value
        return [event(index, "routed", key=key, type=s.type, hash=h, key_group=kg, subtask=subtask,
                      value=keys[item])]

    # The parts a restore and an update use, one method each.

    def route(self, key: int | str | None, type_: str) -> tuple[int, int, int]:
        return route(key, type_, self.profile, self.max_parallelism, self.parallelism)

    def range_of(self, parallelism: int, index: int) -> tuple[int, int]:
        return key_group_range(self.max_parallelism, parallelism, index)

    def redistribute_keyed(self, old: KeyedState, parallelism: int) -> KeyedState:
        """KG-13: each new subtask takes the key groups of its range from every old subtask."""
        new: KeyedState = [{} for _ in range(parallelism)]
        for i in range(parallelism):
            first, last = self.range_of(parallelism, i)
            for state in old:
                for g, keys in state.items():
                    if first <= g <= last:
                        new[i][g] = dict(keys)
        return new

    def redistribute_operator(self, old: OperatorState, parallelism: int) -> OperatorState:
        return repartition_operator_state(old, self.modes, parallelism)

    def _add_state(self, s: AddStateStep) -> None:
        if s.name not in self.modes:  # every subtask registers every state (possibly empty)
            self.modes[s.name] = s.mode
            for state in self.operator:
                state.setdefault(s.name, [])
        self.operator[s.subtask % self.parallelism][s.name].append(s.element)

    def _refusal(self, s: RestoreStep) -> str | None:
        if not within_bounds(s.parallelism, s.max_parallelism):
            return REFUSED_PARALLELISM  # KG-8
        c = self.checkpoint
        if c is not None and s.max_parallelism is not None and s.max_parallelism != c.max_parallelism:
            return REFUSED_MAX_CHANGED  # KG-16, checked when the checkpoint is loaded (C7)
        if c is not None and s.parallelism > c.max_parallelism:
            return REFUSED_ABOVE_MAX  # KG-15
        return None

    def _restore(self, index: int, s: RestoreStep) -> list[Event]:
        reason = self._refusal(s)
        if reason is not None:
            return [event(index, "restore_refused", reason=reason)]
        p = s.parallelism
        c = self.checkpoint
        if c is None:
            self.max_parallelism = s.max_parallelism or default_max_parallelism(p)
            self.explicit = s.max_parallelism is not None
            self.keyed = [{} for _ in range(p)]
            self.operator = [{} for _ in range(p)]  # a new job: no state names yet
            self.modes = {}
        else:
            self.max_parallelism = c.max_parallelism  # KG-16: adopted when not configured
            self.explicit = s.max_parallelism is not None or c.explicit
            self.modes = dict(c.modes)
            if p == c.parallelism:  # KG-14
                self.keyed = [{g: dict(keys) for g, keys in st.items()} for st in c.keyed]
            else:
                self.keyed = self.redistribute_keyed(c.keyed, p)
            self.operator = self.redistribute_operator(c.operator, p)
        self.parallelism = p
        events = [event(index, "restored", parallelism=p, max_parallelism=self.max_parallelism)]
        for i in range(p):
            first, last = self.range_of(p, i)
            events.append(event(index, "range", subtask=i, first=first, last=last))
        for i, state in enumerate(self.keyed):
            for g in sorted(state):
                for item in sorted(state[g], key=_key_order):
                    type_, key = item
                    events.append(event(index, "keyed", subtask=i, key_group=g, key=key, type=type_,
                                        value=state[g][item]))
        for i, ops in enumerate(self.operator):
            for name in sorted(ops):
                events.append(event(index, "operator", subtask=i, name=name, elements=sorted(ops[name])))
        return events
