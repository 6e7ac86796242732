"""The key groups area names the rule a difference shows broken (issue 32; the hook is in
conformance/areas/key_groups_blame.py).

Each case hands the hook a hand-made expected and observed event of one step; the expected events
are the spec's examples (spec/key-groups.md), the observed ones what an engine with one rule broken
would give, worked out by hand from the rule text; the Blame expected is the rule that text names.
"""

from __future__ import annotations

from typing import Any

from flink_semantics.conformance.areas import Blame
from flink_semantics.conformance.areas.key_groups_blame import rules_for_events
from flink_semantics.conformance.checker import compare
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.areas.key_groups import (
    AddStateStep,
    CheckpointStep,
    KeyGroupsConfig,
    RestoreStep,
    UpdateStep,
    event,
)
from flink_semantics.spec.schedule import Event, Schedule, Step, Trace


def schedule(config: KeyGroupsConfig, *steps: Step) -> Schedule:
    return Schedule("key_groups", config, steps)


def routed(step: int, key: Any, hash_: int, kg: int, subtask: int, value: int = 1,
           type_: str = "int") -> Event:
    return event(step, "routed", key=key, type=type_, hash=hash_, key_group=kg, subtask=subtask, value=value)


def operator(step: int, subtask: int, name: str, elements: list[int]) -> Event:
    return event(step, "operator", subtask=subtask, name=name, elements=elements)


def refused(step: int, reason: str) -> Event:
    return event(step, "restore_refused", reason=reason)


def murmur3_textbook(data: bytes, seed: int) -> int:
    """Standard Murmur3 x86_32 (the tail's bytes gathered into one word), written here from the
    algorithm's description, as a signed 32-bit int: what KG-26 says Spark's hash() is not."""
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
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


# ---- updates


def test_a_textbook_murmur3_string_tail_blames_kg26_alone() -> None:
    """KG-26's example: "abcde" (5 bytes) hashes to 814637928 in Spark; the standard tail gives
    another hash, key group pmod(h, 128) and its subtask: only the string hash rule is broken, the
    seed (KG-22) and the finaliser's length (KG-27) possible."""
    s = schedule(KeyGroupsConfig(2, 128, "spark"), UpdateStep("abcde", "string"))
    h = murmur3_textbook(b"abcde", 42)
    assert h != 814637928
    kg = h % 128
    blame = rules_for_events(s, 0, [routed(0, "abcde", 814637928, 104, 1, type_="string")],
                             [routed(0, "abcde", h, kg, kg * 2 // 128, type_="string")])
    assert blame == Blame(("KG-26",), ("KG-22", "KG-27"))


def test_a_spark_int_hash_blames_the_int_rule_and_a_null_key_kg23() -> None:
    """KG-24's example (7 hashes to 1079293707, kg 11, t0); KG-23's (null: the seed, 42)."""
    s = schedule(KeyGroupsConfig(2, 128, "spark"), UpdateStep(7), UpdateStep(None))
    blame = rules_for_events(s, 0, [routed(0, 7, 1079293707, 11, 0)], [routed(0, 7, 1079293700, 4, 0)])
    assert blame == Blame(("KG-24",), ("KG-22", "KG-27"))
    blame = rules_for_events(s, 1, [routed(1, None, 42, 42, 0)], [routed(1, None, 0, 0, 0)])
    assert blame == Blame(("KG-23",), ("KG-22", "KG-27"))


def test_a_key_group_that_is_not_the_observed_hash_s_is_blamed_too() -> None:
    """A wrong string hash (KG-26) whose key group is not pmod of that hash either: KG-30 too."""
    s = schedule(KeyGroupsConfig(2, 128, "spark"), UpdateStep("abcd", "string"))
    blame = rules_for_events(s, 0, [routed(0, "abcd", -396302900, 76, 1, type_="string")],
                             [routed(0, "abcd", 5, 76, 1, type_="string")])
    assert blame == Blame(("KG-26", "KG-30"), ("KG-22", "KG-27"))


def test_a_subtask_that_does_not_own_the_key_group_blames_kg6() -> None:
    """KG-6's example: 7 goes to t1 (kg 113 of 128, p = 2); on t0 the routing is broken, KG-3 possible."""
    s = schedule(KeyGroupsConfig(2, 128), UpdateStep(7))
    blame = rules_for_events(s, 0, [routed(0, 7, 1343918321, 113, 1)], [routed(0, 7, 1343918321, 113, 0)])
    assert blame == Blame(("KG-6",), ("KG-3",))


def test_a_null_key_routed_in_the_flink_profile_blames_kg7() -> None:
    s = schedule(KeyGroupsConfig(2), UpdateStep(None))
    blame = rules_for_events(s, 0, [event(0, "null_key")], [routed(0, None, 31, 31, 0)])
    assert blame == Blame(("KG-7",))


def test_a_flink_key_group_off_an_explicit_maximum_blames_kg1_alone() -> None:
    """KG-1's example: 7 with 10 key groups is kg 1 (1343918321 % 10); kg 3 with the right hash."""
    s = schedule(KeyGroupsConfig(1, 10), UpdateStep(7))
    blame = rules_for_events(s, 0, [routed(0, 7, 1343918321, 1, 0)], [routed(0, 7, 1343918321, 3, 0)])
    assert blame == Blame(("KG-1",))


def test_keys_merged_by_one_spark_hash_blame_kg34() -> None:
    """KG-26's third example: "\\ud800" and "?" share a hash but are two keys (C12, KG-34); "?"
    with the sum 2 was merged with the unpaired surrogate."""
    s = schedule(KeyGroupsConfig(2, 128, "spark"), UpdateStep("\ud800", "string"), UpdateStep("?", "string"))
    blame = rules_for_events(s, 1, [routed(1, "?", 1940951976, 40, 0, 1, "string")],
                             [routed(1, "?", 1940951976, 40, 0, 2, "string")])
    assert blame == Blame(("KG-34",), ("KG-6",))


# ---- operator state


KG21 = schedule(KeyGroupsConfig(2), *(AddStateStep(t, n, e) for t, n, e in (
    (0, "a", 1), (0, "a", 2), (1, "a", 3), (1, "a", 4), (0, "b", 5), (0, "b", 6), (1, "b", 7), (1, "b", 8))),
    CheckpointStep(), RestoreStep(3))


def test_a_missing_rotation_across_split_names_blames_kg21_alone() -> None:
    """KG-21's example: `b` is served from t1, so t0 gets [8]; without the rotation it is served from
    t0 and t0 gets [5, 6], a contiguous chunk of KG-17's size: KG-21 broken, KG-17 possible."""
    blame = rules_for_events(KG21, 9, [operator(9, 0, "b", [8])], [operator(9, 0, "b", [5, 6])])
    assert blame == Blame(("KG-21",), ("KG-17",))


def test_split_state_dealt_in_no_contiguous_chunk_blames_kg17() -> None:
    """KG-17's first example: t0 takes [1, 2] of 1, 2, 3, 4, 5; [1, 4] (one element at a time) is no
    contiguous chunk from any start."""
    adds = (AddStateStep(t, "offsets", e) for t, e in ((0, 1), (0, 2), (1, 3), (1, 4), (1, 5)))
    s = schedule(KeyGroupsConfig(2), *adds, CheckpointStep(), RestoreStep(3))
    blame = rules_for_events(s, 6, [operator(6, 0, "offsets", [1, 2])], [operator(6, 0, "offsets", [1, 4])])
    assert blame == Blame(("KG-17",), ("KG-21",))


def test_union_state_split_blames_kg18_even_where_a_split_name_shows_it() -> None:
    """KG-18: union state in full everywhere.  With the union name `a` (t0: [1]) before the split
    name `b` (t0: [5], t1: [6]), restored at 3: `b` is served from t0, so t0 gets [5]; an engine
    that deals `a` like a split name starts `b` after it, at t1, and t0 gets []: the start is
    another one (KG-21 possible), and it is the rotation that counts the union name (KG-18)."""
    s = schedule(KeyGroupsConfig(2), AddStateStep(0, "a", 1, "union"), AddStateStep(0, "b", 5),
                 AddStateStep(1, "b", 6), CheckpointStep(), RestoreStep(3))
    assert rules_for_events(s, 4, [operator(4, 0, "b", [5])], [operator(4, 0, "b", [])]) == \
        Blame(("KG-18",), ("KG-21",))
    assert rules_for_events(s, 4, [operator(4, 1, "a", [1])], [operator(4, 1, "a", [])]) == Blame(("KG-18",))


def test_broadcast_and_same_parallelism_lists_blame_their_rules() -> None:
    """KG-19's example (new t2 takes old t0's copy [1, 2]); KG-20's (same parallelism: t0 keeps
    [1, 5])."""
    adds = (AddStateStep(t, "rules", e, "broadcast") for t, e in ((0, 1), (0, 2), (1, 3)))
    s = schedule(KeyGroupsConfig(2), *adds, CheckpointStep(), RestoreStep(3))
    assert rules_for_events(s, 4, [operator(4, 2, "rules", [1, 2])], [operator(4, 2, "rules", [3])]) == \
        Blame(("KG-19",))
    s = schedule(KeyGroupsConfig(2), AddStateStep(0, "offsets", 5), AddStateStep(0, "offsets", 1),
                 CheckpointStep(), RestoreStep(2))
    assert rules_for_events(s, 3, [operator(3, 0, "offsets", [1, 5])], [operator(3, 0, "offsets", [1])]) == \
        Blame(("KG-20",))


def test_the_async_operator_s_stored_elements_blame_aio49_too() -> None:
    """AIO-49 (spec/key-groups.md, "Async I/O in-flight elements on rescale"): t0 [0], t1 [1, 2]
    restored at 2 from 3 elements... here at 1: t0 gets [0, 1, 2]; [0, 2] is no chunk (KG-17)."""
    s = schedule(KeyGroupsConfig(2), AddStateStep(0, "inflight", 0), AddStateStep(1, "inflight", 1),
                 AddStateStep(1, "inflight", 2), CheckpointStep(), RestoreStep(1))
    blame = rules_for_events(s, 4, [operator(4, 0, "inflight", [0, 1, 2])],
                             [operator(4, 0, "inflight", [0, 2])])
    assert blame == Blame(("AIO-49", "KG-17"), ("KG-21",))


# ---- keyed state and ranges


def test_a_range_off_kg4_blames_kg4_with_kg5_possible() -> None:
    """KG-4's example: t1 of 3 owns 43..85 of 128; 42..84 (floor at both ends) is another range."""
    s = schedule(KeyGroupsConfig(3, 128), RestoreStep(3))
    blame = rules_for_events(s, 0, [event(0, "range", subtask=1, first=43, last=85)],
                             [event(0, "range", subtask=1, first=42, last=84)])
    assert blame == Blame(("KG-4",), ("KG-5",))


def test_a_restored_key_on_a_subtask_outside_its_range_blames_the_restore() -> None:
    """KG-13's example: key group 4 moves from old t0 to new t1 (range 4..6); on t0 it breaks KG-13
    (KG-12 possible: a key group may have been split); at the checkpoint's parallelism KG-14."""
    s = schedule(KeyGroupsConfig(2, 10), UpdateStep(0), CheckpointStep(), RestoreStep(3))
    keyed = {"key_group": 4, "key": 0, "type": "int", "value": 1}
    blame = rules_for_events(s, 2, [event(2, "keyed", subtask=1, **keyed)],
                             [event(2, "keyed", subtask=0, **keyed)])
    assert blame == Blame(("KG-13",), ("KG-12",))
    s = schedule(KeyGroupsConfig(2, 10), UpdateStep(7), UpdateStep(12), CheckpointStep(), RestoreStep(2))
    keyed = {"key_group": 1, "key": 7, "type": "int", "value": 1}
    blame = rules_for_events(s, 3, [event(3, "keyed", subtask=0, **keyed)],
                             [event(3, "keyed", subtask=1, **keyed)])
    assert blame == Blame(("KG-14",), ("KG-12",))


def test_a_restore_that_does_not_adopt_the_checkpoint_s_maximum_blames_kg16() -> None:
    """KG-16's example: restore 3 from a checkpoint of 128 key groups adopts 128."""
    s = schedule(KeyGroupsConfig(2), CheckpointStep(), RestoreStep(3))
    blame = rules_for_events(s, 1, [event(1, "restored", parallelism=3, max_parallelism=128)],
                             [event(1, "restored", parallelism=3, max_parallelism=256)])
    assert blame == Blame(("KG-16",))


# ---- refusals (C7: KG-8 bounds, then KG-16, then KG-15)


C7 = schedule(KeyGroupsConfig(2), CheckpointStep(), RestoreStep(200, 256), RestoreStep(300, 256),
              RestoreStep(3))


def test_kg15_checked_before_kg16_blames_kg16() -> None:
    """KG-16's example of C7: restore 200 max=256 from 128 key groups breaks KG-16 and KG-15 and is
    refused for the changed maximum; refused as above the maximum, KG-16 was checked too late."""
    blame = rules_for_events(C7, 1, [refused(1, "max parallelism changed")],
                             [refused(1, "parallelism above the checkpoint's max parallelism")])
    assert blame == Blame(("KG-16",), ("KG-15",))


def test_three_causes_refused_for_a_later_one_blame_the_bounds() -> None:
    """restore 300 max=256 breaks KG-8 (300 > 256), KG-16 (256 is not 128) and KG-15 (300 > 128)."""
    blame = rules_for_events(C7, 2, [refused(2, "parallelism out of bounds")],
                             [refused(2, "max parallelism changed")])
    assert blame == Blame(("KG-8",), ("KG-16", "KG-15"))


def test_a_refusal_for_a_reason_that_does_not_hold_blames_that_reason_s_rule() -> None:
    """restore 3 (no maximum) is not refused: refused as a changed maximum, KG-16 is broken; a
    refusal not made (the restore run) is the expected reason's rule."""
    blame = rules_for_events(C7, 3, [event(3, "restored", parallelism=3, max_parallelism=128)],
                             [refused(3, "max parallelism changed")])
    assert blame == Blame(("KG-16",))
    blame = rules_for_events(C7, 1, [refused(1, "max parallelism changed")],
                             [event(1, "restored", parallelism=200, max_parallelism=256)])
    assert blame == Blame(("KG-16",), ("KG-15",))


def test_the_checker_fails_the_broken_rule_and_leaves_the_others_possible() -> None:
    """Through the checker: the mismatch's rules are the broken ones, its `possible` the others."""
    s = KG21
    expected = Trace(tuple(event(9, "operator", subtask=t, name=n, elements=e) for t, n, e in (
        (0, "a", [1, 2]), (0, "b", [8]), (1, "a", [3]), (1, "b", [5, 6]), (2, "a", [4]), (2, "b", [7]))))
    head = (event(9, "restored", parallelism=3, max_parallelism=128),
            *(event(9, "range", subtask=t, first=f, last=la)
              for t, f, la in ((0, 0, 42), (1, 43, 85), (2, 86, 127))))
    no_rotation = ((0, "a", [1, 2]), (0, "b", [5, 6]), (1, "a", [3]), (1, "b", [7]), (2, "a", [4]),
                   (2, "b", [8]))
    observed = Trace((*head, *(operator(9, t, n, e) for t, n, e in no_rotation)))
    mismatch = compare(s, Trace((*head, *expected.events)), observed, SCRIPTED)
    assert mismatch is not None and mismatch.rules == ("KG-21",) and mismatch.possible == ("KG-17",), mismatch
