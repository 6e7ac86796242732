"""Deliberately wrong adapters of the key groups area, to show that the suite catches them
(tests/test_wrong_key_groups.py).

Each runs the reference model with one rule broken (a subclass of `reference.key_groups.Model`);
they are test doubles, so unlike real adapters they may import `reference`.  Schedules of other
areas go to the reference unchanged.
"""

from __future__ import annotations

from flink_semantics.conformance.strength import Mutant
from flink_semantics.reference.key_groups import (
    KeyedState,
    Model,
    OperatorState,
    int32,
    java_hash_code,
    java_utf8_bytes,
    operator_index,
    repartition_operator_state,
    route,
    spark_hash_bytes,
    spark_hash_int,
    within_bounds,
)
from flink_semantics.spec.areas.key_groups import (
    REFUSED_ABOVE_MAX,
    REFUSED_MAX_CHANGED,
    REFUSED_PARALLELISM,
    RestoreStep,
)

from tests.wrong_area import WrongArea


class WrongKeyGroups(WrongArea):
    """Runs key groups schedules on `model` (a broken Model), the rest on the reference."""

    area = "key_groups"
    model = Model


# ---- hash mod parallelism instead of key groups (breaks KG-3, KG-6)


class _HashModParallelism(Model):
    def route(self, key: int | str | None, type_: str) -> tuple[int, int, int]:
        h, kg, _ = route(key, type_, self.profile, self.max_parallelism, self.parallelism)
        return h, kg, h % self.parallelism


class HashModParallelism(WrongKeyGroups):
    model = _HashModParallelism


# ---- ranges by floor at both ends instead of Flink's ceiling start (breaks KG-4, KG-13)


class _FloorRanges(Model):
    def range_of(self, parallelism: int, index: int) -> tuple[int, int]:
        m = self.max_parallelism
        return index * m // parallelism, (index + 1) * m // parallelism - 1


class FloorRanges(WrongKeyGroups):
    model = _FloorRanges


# ---- Spark's hash of a string computed from Java's String.hashCode (breaks KG-26)


class _JavaStringHashInSpark(Model):
    def route(self, key: int | str | None, type_: str) -> tuple[int, int, int]:
        if self.profile != "spark" or type_ != "string" or key is None:
            return super().route(key, type_)
        h = int32(spark_hash_int(java_hash_code(key, "string"), 42))
        kg = h % self.max_parallelism
        return h, kg, operator_index(self.max_parallelism, self.parallelism, kg)


class JavaStringHashInSpark(WrongKeyGroups):
    model = _JavaStringHashInSpark


# ---- Spark's hash of a string over UTF-8 with `surrogatepass` (breaks KG-26, KG-34): an unpaired
# surrogate as the 3 bytes ED A0 80 (for D800) Java never writes, instead of Java's '?'


class _SurrogatepassInSpark(Model):
    def route(self, key: int | str | None, type_: str) -> tuple[int, int, int]:
        if self.profile != "spark" or type_ != "string" or key is None:
            return super().route(key, type_)
        h = int32(spark_hash_bytes(str(key).encode("utf-8", "surrogatepass"), 42))
        kg = h % self.max_parallelism
        return h, kg, operator_index(self.max_parallelism, self.parallelism, kg)


class SurrogatepassInSpark(WrongKeyGroups):
    model = _SurrogatepassInSpark


# ---- union state split like split state (breaks KG-18)


class _UnionSplit(Model):
    def redistribute_operator(self, old: OperatorState, parallelism: int) -> OperatorState:
        modes = {n: "split" if m == "union" else m for n, m in self.modes.items()}
        return repartition_operator_state(old, modes, parallelism)


class UnionSplit(WrongKeyGroups):
    model = _UnionSplit


# ---- a rescale that moves single keys by hash mod the new parallelism (breaks KG-12, KG-13)


class _MovesSingleKeys(Model):
    def redistribute_keyed(self, old: KeyedState, parallelism: int) -> KeyedState:
        new: KeyedState = [{} for _ in range(parallelism)]
        for state in old:
            for g, keys in state.items():
                for item, value in keys.items():
                    h = route(item[1], item[0], self.profile, self.max_parallelism, parallelism)[0]
                    new[h % parallelism].setdefault(g, {})[item] = value
        return new


class MovesSingleKeys(WrongKeyGroups):
    model = _MovesSingleKeys


# ---- split state dealt one element at a time instead of in contiguous chunks (breaks KG-17, AIO-49):
# on a rescale each receiver, served from the start the rotation gives (KG-21), takes every p-th
# element, so its count is KG-17's and only the contiguity differs


class _SplitOneByOne(Model):
    def redistribute_operator(self, old: OperatorState, parallelism: int) -> OperatorState:
        new = repartition_operator_state(old, self.modes, parallelism)
        if parallelism == len(old):
            return new  # KG-20: nothing is dealt out
        start = 0
        for name in sorted(n for n, m in self.modes.items() if m == "split"):
            elements = [e for s in old for e in s.get(name, [])]
            for i in range(parallelism):
                new[(start + i) % parallelism][name] = elements[i::parallelism]
            if len(elements) % parallelism:  # KG-21: the next name starts where the extras ran out
                start = (start + len(elements) % parallelism) % parallelism
        return new


class SplitOneByOne(WrongKeyGroups):
    model = _SplitOneByOne


# ---- split names each served from subtask 0, without the rotation (breaks KG-21): the first
# subtasks take the extra element of every name


class _NoRotation(Model):
    def redistribute_operator(self, old: OperatorState, parallelism: int) -> OperatorState:
        new = repartition_operator_state(old, self.modes, parallelism)
        for name, mode in self.modes.items():
            if mode == "split" and parallelism != len(old):
                alone = repartition_operator_state(old, {name: "split"}, parallelism)  # from subtask 0
                for i, s in enumerate(new):
                    s[name] = alone[i][name]
        return new


class NoRotation(WrongKeyGroups):
    model = _NoRotation


# ---- the blocks of a restored list (KG-17, C3): a subtask restored from several old subtasks holds
# each split list as blocks, one per old subtask; the order of the blocks is free (one order per new
# subtask and restore, shared by its names), the order inside a block is not


Tagged = list[dict[str, list[tuple[int, int]]]]


def _tagged_chunks(old: OperatorState, modes: dict[str, str], parallelism: int) -> Tagged:
    """Per new subtask and split name, its chunk as (old subtask, element) pairs, as dealt by the
    reference."""
    split = {n: m for n, m in modes.items() if m == "split"}
    tagged = [{n: [(j, x) for x in s.get(n, [])] for n in split} for j, s in enumerate(old)]
    return repartition_operator_state(tagged, split, parallelism)  # type: ignore[arg-type, return-value]


def _blocks_in(pairs: list[tuple[int, int]], order: list[int], reverse_inside: bool = False) -> list[int]:
    """The elements of a chunk, block by block in `order` of their old subtasks."""
    out: list[int] = []
    for j in order:
        block = [x for k, x in pairs if k == j]
        out += block[::-1] if reverse_inside else block
    return out


class _Reordered(Model):
    """Split lists restored at another parallelism, their blocks rearranged by `arrange`."""

    def arrange(self, subtask: int, name: str, pairs: list[tuple[int, int]], olds: list[int]) -> list[int]:
        raise NotImplementedError

    def redistribute_operator(self, old: OperatorState, parallelism: int) -> OperatorState:
        new = repartition_operator_state(old, self.modes, parallelism)
        if parallelism == len(old):
            return new  # KG-20: nothing is dealt out
        for i, lists in enumerate(_tagged_chunks(old, self.modes, parallelism)):
            olds = sorted({j for pairs in lists.values() for j, _ in pairs})
            for name, pairs in lists.items():
                new[i][name] = self.arrange(i, name, pairs, olds)
        return new


# A legal adapter (it must pass): the blocks held in another order than old subtask order, one per
# new subtask (reversed on even subtasks, rotated by one on odd ones), the same for all its names.


class _OtherBlockOrder(_Reordered):
    def arrange(self, subtask: int, name: str, pairs: list[tuple[int, int]], olds: list[int]) -> list[int]:
        return _blocks_in(pairs, olds[::-1] if subtask % 2 == 0 else olds[1:] + olds[:1])


class OtherBlockOrder(WrongKeyGroups):
    model = _OtherBlockOrder


# ---- the elements inside each block reversed (breaks KG-17): the chunks of a later rescale hold
# other elements


class _ReversedInsideBlocks(_Reordered):
    def arrange(self, subtask: int, name: str, pairs: list[tuple[int, int]], olds: list[int]) -> list[int]:
        return _blocks_in(pairs, olds, reverse_inside=True)


class ReversedInsideBlocks(WrongKeyGroups):
    model = _ReversedInsideBlocks


# ---- one block order per name instead of per subtask (breaks KG-17): the first split name's blocks
# reversed, the others' in old subtask order


class _BlockOrderPerName(_Reordered):
    def arrange(self, subtask: int, name: str, pairs: list[tuple[int, int]], olds: list[int]) -> list[int]:
        first = min(n for n, m in self.modes.items() if m == "split")
        return _blocks_in(pairs, olds[::-1] if name == first else olds)


class BlockOrderPerName(WrongKeyGroups):
    model = _BlockOrderPerName


# ---- the extra elements of a split name to the last receivers instead of the first (breaks KG-17):
# each subtask's count is another than KG-17's.  Not in MUTANTS: the property's smallest
# counterexample has fewer elements than subtasks, where this is dealing from another start (KG-21);
# tests/test_wrong_key_groups.py checks it on a schedule of more elements


class _ExtrasLast(Model):
    def redistribute_operator(self, old: OperatorState, parallelism: int) -> OperatorState:
        new = repartition_operator_state(old, self.modes, parallelism)
        if parallelism == len(old):
            return new
        for name in (n for n, m in self.modes.items() if m == "split"):
            elements = [e for s in old for e in s.get(name, [])]
            base, extra = divmod(len(elements), parallelism)
            taken = 0
            for i in range(parallelism):
                n = base + (1 if i >= parallelism - extra else 0)
                new[i][name] = elements[taken:taken + n]
                taken += n
        return new


class ExtrasLast(WrongKeyGroups):
    model = _ExtrasLast


# ---- Spark's hash of a string with the standard Murmur3 tail (breaks KG-26): the 1 to 3 bytes after
# the last whole word gathered into one little-endian word, not mixed one by one


def _textbook_murmur3(data: bytes, seed: int) -> int:
    """Murmur3 x86_32 as its authors wrote it, a signed 32-bit int."""
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    def k1(k: int) -> int:
        return (rotl((k * 0xCC9E2D51) & m, 15) * 0x1B873593) & m

    h = seed
    n = len(data) - len(data) % 4
    for i in range(0, n, 4):
        h = (rotl(h ^ k1(int.from_bytes(data[i:i + 4], "little")), 13) * 5 + 0xE6546B64) & m
    if data[n:]:
        h ^= k1(int.from_bytes(data[n:], "little"))
    h ^= len(data)
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = ((h ^ (h >> shift)) * factor) & m
    return int32(h ^ (h >> 16))


class _TextbookMurmurTail(Model):
    def route(self, key: int | str | None, type_: str) -> tuple[int, int, int]:
        if self.profile != "spark" or type_ != "string" or key is None:
            return super().route(key, type_)
        h = _textbook_murmur3(java_utf8_bytes(str(key)), 42)
        kg = h % self.max_parallelism
        return h, kg, operator_index(self.max_parallelism, self.parallelism, kg)


class TextbookMurmurTail(WrongKeyGroups):
    model = _TextbookMurmurTail


# ---- KG-15 checked before KG-16 (breaks C7's order, so KG-16): a restore above the checkpoint's
# maximum parallelism with a changed maximum is refused as above the maximum, not for the change


class _AboveMaxBeforeMaxChanged(Model):
    def _refusal(self, s: RestoreStep) -> str | None:
        if not within_bounds(s.parallelism, s.max_parallelism):
            return REFUSED_PARALLELISM
        c = self.checkpoint
        if c is not None and s.parallelism > c.max_parallelism:
            return REFUSED_ABOVE_MAX
        if c is not None and s.max_parallelism is not None and s.max_parallelism != c.max_parallelism:
            return REFUSED_MAX_CHANGED
        return None


class AboveMaxBeforeMaxChanged(WrongKeyGroups):
    model = _AboveMaxBeforeMaxChanged


# ---- KG-8's bounds checked last (breaks C7's order, so KG-8): a restore out of bounds that also
# changes the maximum or exceeds the checkpoint's is refused for that, not as out of bounds


class _BoundsLast(Model):
    def _refusal(self, s: RestoreStep) -> str | None:
        c = self.checkpoint
        if c is not None and s.max_parallelism is not None and s.max_parallelism != c.max_parallelism:
            return REFUSED_MAX_CHANGED
        if c is not None and s.parallelism > c.max_parallelism:
            return REFUSED_ABOVE_MAX
        return None if within_bounds(s.parallelism, s.max_parallelism) else REFUSED_PARALLELISM


class BoundsLast(WrongKeyGroups):
    model = _BoundsLast


# The registry (`strength`, tests/test_wrong_key_groups.py): the property that
# must catch each mutant, and a rule its failure report must name.  SplitOneByOne is also run
# against the async I/O suite, whose in-flight elements on rescale (AIO-49) use this area's schedules.
MUTANTS = [
    Mutant("HashModParallelism", "test_flink_key_groups", "KG-6"),
    Mutant("FloorRanges", "test_keyed_state_on_rescale", "KG-4"),
    Mutant("JavaStringHashInSpark", "test_spark_hash", "KG-26"),
    Mutant("SurrogatepassInSpark", "test_spark_hash", "KG-26"),
    Mutant("UnionSplit", "test_operator_state_on_rescale", "KG-18"),
    Mutant("MovesSingleKeys", "test_keyed_state_on_rescale", "KG-13"),
    Mutant("SplitOneByOne", "test_operator_state_on_rescale", "KG-17"),
    Mutant("NoRotation", "test_operator_state_on_rescale", "KG-21"),
    Mutant("ReversedInsideBlocks", "test_operator_state_on_rescale", "KG-17"),
    Mutant("TextbookMurmurTail", "test_spark_hash", "KG-26"),
    Mutant("AboveMaxBeforeMaxChanged", "test_restore_refusals", "KG-16"),
    Mutant("BoundsLast", "test_restore_refusals", "KG-8"),
    Mutant("SplitOneByOne", "test_in_flight_elements_on_rescale", "AIO-49", area="async_io"),
]
