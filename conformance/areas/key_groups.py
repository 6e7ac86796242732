"""The conformance part of the key groups area: strategies, invariants, and the checker's hooks.

Strategies draw valid schedules step by step (KG-32 holds by construction): keyed updates of int,
long and string keys (empty, non-ASCII and astral-plane strings among them, and strings with
unpaired surrogates and with pairs written as two code points, KG-34), operator state in the
three modes, checkpoints and restores at parallelisms up and down (to 1 and to the maximum
parallelism), some of them refused.  `Features` says which parts a property uses;
`Features.restrict` drops what an adapter cannot run.  With operator state and rescaling, some
integers draw a compound `burst` (elements of several names, a checkpoint, a restore), so that the
rare states where engines lose or repeat state are reached: `COVERAGE` and `coverage` name them and
their floors (conformance/coverage.py).

The checker's hooks (conformance/areas/__init__.py): this area's traces are compared exactly
(SCRIPTED); a FREE adapter cannot be checked on them.  `rules_for_events`
(conformance/areas/key_groups_blame.py) names the rule a difference shows broken.

`balance_problems` states KG-5, KG-12 and KG-21 on a trace directly: every restore's ranges cover
the key groups contiguously and within one in size, every key's state lives on the subtask whose
range holds its key group, and the split state per new subtask differs by at most one element.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from flink_semantics.conformance.areas import never_free, no_order_graph, no_output_keys, rules_from
from flink_semantics.conformance.areas.key_groups_blame import IN_FLIGHT, rules_for_events
from flink_semantics.conformance.strategies import Malformed, batches
from flink_semantics.reference.key_groups import Model, operator_index
from flink_semantics.spec.adapter import unsupported
from flink_semantics.spec.areas.key_groups import (
    MANY_SUBTASKS,
    AddStateStep,
    CheckpointStep,
    KeyGroupsConfig,
    RestoreStep,
    UpdateStep,
    has_lone_surrogate,
)
from flink_semantics.spec.schedule import Schedule, Step, Trace, validate_schedule
from hypothesis import strategies as st

AREA = "key_groups"

# --------------------------------------------------------------------------
# The checker's hooks
# --------------------------------------------------------------------------

_RULES = {
    "routed": ("KG-1", "KG-2", "KG-3", "KG-6", "KG-11", "KG-12", "KG-13", "KG-14", "KG-22", "KG-23",
               "KG-24", "KG-25", "KG-26", "KG-27", "KG-30"),
    "null_key": ("KG-7", "KG-23"),
    "restored": ("KG-9", "KG-16"),
    "restore_refused": ("KG-8", "KG-15", "KG-16"),
    "range": ("KG-4", "KG-5"),
    "keyed": ("KG-12", "KG-13", "KG-14"),
    "operator": ("KG-17", "KG-18", "KG-19", "KG-20", "KG-21"),
    "rejected": ("KG-8",),
}

_rules_of_kinds = rules_from(_RULES)


def rules_for(schedule: Schedule, kinds: Sequence[str]) -> tuple[str, ...]:
    """The rules a divergence in these event kinds concerns; restored `inflight` state (an async
    operator's stored elements, `in_flight_schedule`) concerns AIO-49 too."""
    rules = _rules_of_kinds(schedule, kinds)
    if "operator" in kinds and any(isinstance(s, AddStateStep) and s.name == IN_FLIGHT
                                   for s in schedule.steps):
        rules += ("AIO-49",)
    return rules


free_checkable, order_graph, output_keys = never_free, no_order_graph, no_output_keys
__all__ = ["rules_for_events"]  # the checker's hook, from key_groups_blame
FREE_MULTISETS: dict[str, tuple[str, ...]] = {}


# --------------------------------------------------------------------------
# Invariants stated on a trace
# --------------------------------------------------------------------------


def balance_problems(trace: Trace) -> list[str]:
    """KG-5, KG-12, KG-21 at every restore: ranges contiguous and covering, sizes within one; each
    restored key on the subtask whose range holds its key group; split state balanced (the
    `operator` events of split-mode names, told apart by the caller's `split_names`)."""
    problems: list[str] = []
    by_step: dict[int, list[Any]] = {}
    for e in trace.events:
        by_step.setdefault(e.step, []).append(e)
    for step, events in sorted(by_step.items()):
        restored = [e for e in events if e.event == "restored"]
        if not restored:
            continue
        max_p = restored[0].max_parallelism
        ranges = {e.subtask: (e.first, e.last) for e in events if e.event == "range"}
        ordered = [ranges[i] for i in sorted(ranges)]
        if not ordered or ordered[0][0] != 0 or ordered[-1][1] != max_p - 1 or any(
                a[1] + 1 != b[0] for a, b in zip(ordered, ordered[1:])):
            problems.append(f"@{step}: ranges {ordered} do not cover [0, {max_p}) contiguously")
        sizes = [b - a + 1 for a, b in ordered]
        if sizes and max(sizes) - min(sizes) > 1:
            problems.append(f"@{step}: range sizes {sizes} differ by more than one")
        for e in events:
            if e.event == "keyed" and e.subtask in ranges:
                first, last = ranges[e.subtask]
                if not first <= e.key_group <= last:
                    problems.append(f"@{step}: key group {e.key_group} restored on t{e.subtask} "
                                    f"outside its range {first}..{last}")
    return problems


def split_load_problems(schedule: Schedule, trace: Trace) -> list[str]:
    """KG-21: after a restore from a checkpoint taken at another parallelism, the split-mode elements
    per new subtask (over every split name) differ by at most one."""
    split = {s.name for s in schedule.steps if isinstance(s, AddStateStep) and s.mode == "split"}
    events: dict[int, list[Any]] = {}
    for e in trace.events:
        events.setdefault(e.step, []).append(e)
    parallelism, checkpointed = schedule.config.parallelism, None
    problems: list[str] = []
    for i, s in enumerate(schedule.steps):
        if isinstance(s, CheckpointStep):
            checkpointed = parallelism
        restored = [e for e in events.get(i, []) if e.event == "restored"]
        if not restored:
            continue
        parallelism = restored[0].parallelism
        loads = [0] * parallelism
        for e in events[i]:
            if e.event == "operator" and e.name in split:
                loads[e.subtask] += len(e.elements)
        if checkpointed is not None and checkpointed != parallelism and max(loads) - min(loads) > 1:
            problems.append(f"@{i}: split loads {loads} differ by more than one")
    return problems


def in_flight_schedule(stored: Sequence[Sequence[Any]], parallelism: int) -> Schedule:
    """AIO-49 in this area's vocabulary (spec/key-groups.md, "Async I/O in-flight elements on
    rescale"): old subtask i holds the stored elements `stored[i]` of an async operator's checkpoint
    as its split list state `inflight`, numbered 0, 1, ... in old subtask and then stored order; a
    checkpoint; a restore at `parallelism` (another than `len(stored)`: at the same one split state
    stays where it is, KG-20)."""
    steps: list[Step] = []
    for subtask, elements in enumerate(stored):
        for _ in elements:
            steps.append(AddStateStep(subtask, IN_FLIGHT, len(steps), "split"))
    steps += [CheckpointStep(), RestoreStep(parallelism, None)]
    return Schedule(AREA, KeyGroupsConfig(max(1, len(stored))), tuple(steps))


def in_flight_problems(trace: Trace, total: int) -> list[str]:
    """AIO-49 with KG-17 on the restore of an `in_flight_schedule` of `total` elements: each
    element on exactly one new subtask; each subtask's elements a contiguous run of the old order
    (so it replays them in stored order, AIO-46), the runs in subtask order (one name: no rotation,
    KG-21); their sizes differ by at most one."""
    runs = [list(e.elements) for e in sorted((e for e in trace.events if e.event == "operator"
                                               and e.name == IN_FLIGHT), key=lambda e: e.subtask)]
    problems = []
    if [x for run in runs for x in run] != list(range(total)):
        problems.append(f"the {total} stored elements are not each on exactly one new subtask, in "
                        f"contiguous runs of the old order: {runs}")
    if runs and max(map(len, runs)) - min(map(len, runs)) > 1:
        problems.append(f"the new subtasks' loads {[len(r) for r in runs]} differ by more than one")
    return problems


# --------------------------------------------------------------------------
# Generator coverage (conformance/coverage.py)
# --------------------------------------------------------------------------

NON_DIVIDING = "a rescale of keyed state to a parallelism not dividing the max parallelism"
MOVED = "a key group's state moved to another subtask"
ROTATION = "split state of several names rescaled with its extra elements rotating"
BROADCAST_UP = "broadcast state restored at a higher parallelism"
REFUSED_GOES_ON = "a refused restore followed by updates of the running job"
LONE_SURROGATE = "a string key with an unpaired surrogate, which has no UTF-8 form"

# State -> floor: the least share of the area's distinct schedules that must reach it.  Measured
# with `pytest conformance/test_key_groups.py conformance/test_coverage.py --adapter reference
# --areas key_groups` (3052 schedules; the share in parentheses), each floor about half of it.
COVERAGE = {
    NON_DIVIDING: 0.015,  # (3.4%) the three rescaling properties
    MOVED: 0.035,  # (7.7%)
    ROTATION: 0.015,  # (3.3%) test_operator_state_on_rescale, test_restore_refusals: `burst`
    BROADCAST_UP: 0.012,  # (2.5%) the same
    REFUSED_GOES_ON: 0.02,  # (4.2%) test_restore_refusals
    LONE_SURROGATE: 0.03,  # (6.5% of 4881) KG-34: string keys of every property that draws updates
}


def coverage(schedule: Schedule) -> list[str]:
    """The rare states of key groups and rescaling a schedule reaches, from one run of the
    reference model (its checkpoint read before each restore); none for a refused configuration.
    A schedule whose restores all keep the configured parallelism and name no maximum reaches no
    state of rescaling (nothing moves, nothing is refused) and is not run."""
    c = schedule.config
    validate_schedule(schedule)  # ScheduleError: none (conformance/coverage.py)
    found = [LONE_SURROGATE] if any(isinstance(s, UpdateStep) and s.type == "string"
                                    and has_lone_surrogate(s.key) for s in schedule.steps) else []
    restores = [s for s in schedule.steps if isinstance(s, RestoreStep)]
    if all(s.parallelism == c.parallelism and s.max_parallelism is None for s in restores):
        return found
    return found + _states(schedule, Model(c))


def _states(schedule: Schedule, model: Model) -> list[str]:
    found: set[str] = set()
    refused = False
    last = max(i for i, s in enumerate(schedule.steps) if isinstance(s, RestoreStep))
    for i, s in enumerate(schedule.steps[:last + 1]):  # after the last restore: only updates matter
        before = model.checkpoint if isinstance(s, RestoreStep) else None
        p = s.parallelism if isinstance(s, RestoreStep) else 0
        events = model.apply(i, s)
        if isinstance(s, RestoreStep) and events and events[0].event == "restore_refused":
            refused = True
        elif isinstance(s, UpdateStep) and refused and events and events[0].event == "routed":
            found.add(REFUSED_GOES_ON)  # KG-15, KG-16: the running job goes on unchanged
        if before is None or not events or events[0].event != "restored" or before.parallelism == p:
            continue
        max_p = before.max_parallelism
        moved = [g for old, state in enumerate(before.keyed) for g in state
                 if operator_index(max_p, p, g) != old]
        if moved:
            found.add(MOVED)  # KG-12, KG-13
            if max_p % p:
                found.add(NON_DIVIDING)  # KG-4, KG-5: ranges of unequal sizes
        split = sorted(n for n, m in before.modes.items() if m == "split")
        counts = [sum(len(state.get(n, [])) for state in before.operator) for n in split]
        if len([n for n in counts if n]) >= 2 and any(n % p for n in counts[:-1]):
            found.add(ROTATION)  # KG-17, KG-21
        broadcast = [n for n, m in before.modes.items() if m == "broadcast"]
        if p > before.parallelism and any(state.get(n) for state in before.operator for n in broadcast):
            found.add(BROADCAST_UP)  # KG-19
    if refused and any(isinstance(s, UpdateStep) and (s.key is not None or schedule.config.hash != "flink")
                       for s in schedule.steps[last + 1:]):
        found.add(REFUSED_GOES_ON)  # routed (KG-7: a null key is refused by the flink profile)
    return sorted(found)


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Features:
    """Which parts of the vocabulary a strategy uses."""

    spark_hash: bool = False
    pyflink_hash: bool = False  # the pyflink profile only (KG-33)
    operator_state: bool = False
    rescale: bool = False
    explicit_max: bool = True  # configurations may fix the maximum parallelism
    refusals: bool = False  # restores that break KG-8, KG-15 or KG-16
    restore: bool = True  # checkpoints and restores at the same parallelism
    many_subtasks: bool = True  # restores to more than 16 subtasks
    lone_surrogates: bool = True  # string keys with unpaired surrogates (KG-34)
    max_steps: int = 16

    def restrict(self, capabilities: Mapping[str, str | None], completion_order: str) -> Features:
        """These features without the ones the adapter does not support."""
        ok = lambda cap: unsupported(capabilities, f"key_groups.{cap}") is None  # noqa: E731
        return replace(self, spark_hash=self.spark_hash and ok("spark_hash"),
                       pyflink_hash=self.pyflink_hash and ok("pyflink_hash"),
                       operator_state=self.operator_state and ok("operator_state"),
                       restore=self.restore and ok("restore"),
                       many_subtasks=self.many_subtasks and ok("many_subtasks"),
                       lone_surrogates=self.lone_surrogates and ok("lone_surrogates"),
                       rescale=self.rescale and ok("rescale") and ok("restore"))


# Keys: small ints and longs (so that keys repeat and sums grow), extremes, and strings of every
# width (empty, ASCII of every length modulo 4, Latin-1, CJK, astral-plane), and (KG-34) strings with
# unpaired surrogates, "?" (what Spark makes of one, KG-26) and a pair written as two code points
# (the step holds its character, "\U0001F600").
PLAIN_STRINGS = ("", "a", "ab", "abc", "abcd", "abcde", "é", "héllo", "日本", "\U0001F600", "x\U0001F600y",
                 "ÿÿÿ", "key-42", "?", "\ud83d\ude00")
LONE_STRINGS = ("\ud800", "a\udfffé", "\udc00\ud800")
STRINGS = PLAIN_STRINGS + LONE_STRINGS
# one to four UTF-8 bytes, one or two UTF-16 units; the two surrogates pair when they meet in that order
PLAIN_CHARS = "aZ0 -é\u00ff\u0100日\uffff\U0001F600\U00010000"
CHARS = PLAIN_CHARS + "\ud800\udc00"
INT_KEYS = (0, 1, 2, 3, 7, -1, 42, 2**31 - 1, -(2**31))
LONG_KEYS = (0, 1, 7, -1, 2**32, 2**32 + 1, 2**63 - 1, -(2**63), 123456789012)
TYPES = ("int", "long", "string")
NAMES = ("a", "b", "c", "d")
FIRST_MODE = ("split", "split", "union", "broadcast")
REFUSED = ((0, None), (None, None), (2, 1), (1, None), (1, 40000), (40000, None))  # None: max + 1, max x 2

# Every step is one integer drawn by hypothesis (as in the watermarks area: few draws per schedule,
# and shrinking an integer towards 0 picks the plainest step, an update of the int key 0).
CONFIG_BITS = st.integers(0, 2**16 - 1)
STEP_BITS = st.lists(st.integers(0, 2**40 - 1), min_size=1, max_size=40)


def key_of(n: int, lone_surrogates: bool = True) -> tuple[int | str | None, str]:
    """A key and its type from an integer: one in about thirty is null; strings with unpaired
    surrogates only when `lone_surrogates`."""
    type_, n = TYPES[n % 3], n // 3
    if n % 30 == 29:
        return None, type_
    n //= 30
    if type_ == "int":
        return INT_KEYS[n % len(INT_KEYS)], type_
    if type_ == "long":
        return LONG_KEYS[n % len(LONG_KEYS)], type_
    strings, alphabet = (STRINGS, CHARS) if lone_surrogates else (PLAIN_STRINGS, PLAIN_CHARS)
    if n % 3 < 2:
        return strings[(n // 3) % len(strings)], type_
    n //= 3
    length, n = n % 6, n // 6
    chars = []
    for _ in range(length):
        chars.append(alphabet[n % len(alphabet)])
        n //= len(alphabet)
    return "".join(chars), type_


def config_of(n: int, f: Features) -> KeyGroupsConfig:
    parallelism = (1, 2, 3, 4, 5, 8)[n % 6]
    n //= 6
    max_p = None
    if f.explicit_max and n % 2:
        options = [m for m in (parallelism, 8, 10, 16, 128) if m >= parallelism]
        max_p = options[(n // 2) % len(options)]
    n //= 10
    if f.pyflink_hash:
        return KeyGroupsConfig(parallelism, max_p, "pyflink")
    return KeyGroupsConfig(parallelism, max_p, "spark" if f.spark_hash and n % 2 else "flink")


def step_of(n: int, f: Features, config: KeyGroupsConfig, modes: dict[str, str]) -> Step | list[Step]:
    """The step an integer picks (a list: the steps of a compound one, `burst`)."""
    pick, n = n % 10, n // 10
    if pick <= 4 or (pick <= 6 and not f.operator_state) or (pick >= 7 and not f.restore):
        key, type_ = key_of(n // 5, f.lone_surrogates)
        return UpdateStep(key, type_, 1 + n % 5)
    if pick == 6 and f.rescale and n % 4 == 3:
        return burst(n // 4, f, config, modes)
    if pick <= 6:
        name = NAMES[n % 4]
        mode = modes.setdefault(name, FIRST_MODE[(n // 4) % 4])
        return AddStateStep((n // 16) % 10, name, (n // 160) % 100, mode)
    if pick == 7:
        return CheckpointStep()
    return restore_of(n, f, config)


def burst(n: int, f: Features, config: KeyGroupsConfig, modes: dict[str, str]) -> list[Step]:
    """Four to seven elements of two split names over the subtasks, two of a broadcast name (those
    whose mode allows it), a checkpoint and a restore: the split names' extra elements rotate
    (KG-17, KG-21), the broadcast copies are dealt out anew (KG-19)."""
    splits = [x for x in NAMES if modes.get(x, "split") == "split"][:2]
    broadcast = [x for x in NAMES if modes.get(x) == "broadcast"] or \
        [x for x in NAMES if x not in modes and x not in splits]
    steps: list[Step] = []
    for j in range(4 + n % 4) if splits else ():
        modes.setdefault(splits[j % len(splits)], "split")
        steps.append(AddStateStep(j, splits[j % len(splits)], (n + j) % 100, "split"))
    for j in range(2) if broadcast else ():
        modes.setdefault(broadcast[0], "broadcast")
        steps.append(AddStateStep(j, broadcast[0], (n // 4 + j) % 100, "broadcast"))
    return [*steps, CheckpointStep(), restore_of(n // 4, f, config)]


def restore_of(n: int, f: Features, config: KeyGroupsConfig) -> RestoreStep:
    """A restore: at the configured parallelism without rescaling, else at a drawn one (with
    refusals, now and then one that breaks KG-8, KG-15 or KG-16)."""
    max_p = config.max_parallelism or 128
    if not f.rescale:
        return RestoreStep(config.parallelism, None)
    # Up and down, to 1 and to the maximum parallelism; to 128 subtasks only now and then: a restore
    # lists every subtask's range and operator state, so a large one is costly.
    p = (1, 2, 3, 4, 6, min(max_p, 16), max_p)[n % 7]
    n //= 7
    if p > 16 and (n % 4 or not f.many_subtasks):
        p = 5
    n //= 4
    if f.refusals and n % 4 == 0:
        p0, m = REFUSED[(n // 4) % len(REFUSED)]
        if p0 is None and max_p + 1 > MANY_SUBTASKS and not f.many_subtasks:
            p0, m = 1, None  # not above a large maximum (a job without a checkpoint would start it): KG-16
        return RestoreStep(max_p + 1 if p0 is None else p0, max_p * 2 if (p0, m) == (1, None) else m)
    return RestoreStep(p, None)


@st.composite
def schedules(draw: Any, f: Features) -> Schedule:
    """A valid key groups schedule using the features."""
    config = config_of(draw(CONFIG_BITS), f)
    modes: dict[str, str] = {}
    steps: list[Step] = []
    for n in draw(STEP_BITS)[: f.max_steps]:
        step = step_of(n, f, config, modes)
        steps += step if isinstance(step, list) else [step]
    return Schedule(AREA, config, tuple(steps))


def feature_batches(f: Features, max_size: int = 12) -> st.SearchStrategy[list[Schedule]]:
    return batches(schedules(f), max_size)


@st.composite
def rejected_configs(draw: Any) -> Schedule:
    """KG-8: configurations outside the bounds, each refused with the single `rejected` event."""
    parallelism, max_p = draw(st.sampled_from(((0, None), (-3, None), (40000, None), (4, 2), (1, 0),
                                               (1, 40000), (32769, 32769))))
    return Schedule(AREA, KeyGroupsConfig(parallelism, max_p), (UpdateStep(1),))


# --------------------------------------------------------------------------
# Malformed schedules (KG-32 and the shared SCH rules)
# --------------------------------------------------------------------------


@st.composite
def malformed_schedules(draw: Any) -> Malformed:
    """A valid schedule broken in one way that names its rule and its step."""
    base: Schedule = draw(schedules(Features(operator_state=True, max_steps=6)))
    d = base.to_dict()
    steps = d["steps"]
    n = len(steps)
    kind = draw(st.sampled_from(("string key as int", "int key out of range", "long key out of range",
                                 "int key as string", "mode changed", "unknown type", "unknown op")))
    if kind == "string key as int":
        bad: dict[str, Any] = {"op": "update", "key": "a", "type": "int"}
        return Malformed({**d, "steps": [*steps, bad]}, n, "KG-32", kind)
    if kind == "int key out of range":
        bad = {"op": "update", "key": 2**31, "type": "int"}
        return Malformed({**d, "steps": [*steps, bad]}, n, "KG-32", kind)
    if kind == "long key out of range":
        bad = {"op": "update", "key": -(2**63) - 1, "type": "long"}
        return Malformed({**d, "steps": [*steps, bad]}, n, "KG-32", kind)
    if kind == "int key as string":
        bad = {"op": "update", "key": 5, "type": "string"}
        return Malformed({**d, "steps": [*steps, bad]}, n, "KG-32", kind)
    if kind == "mode changed":
        more = [{"op": "add_state", "subtask": 0, "name": "zz", "element": 1, "mode": "split"},
                {"op": "add_state", "subtask": 0, "name": "zz", "element": 2, "mode": "union"}]
        return Malformed({**d, "steps": [*steps, *more]}, n + 1, "KG-32", kind)
    if kind == "unknown type":
        bad = {"op": "update", "key": 1, "type": "double"}
        return Malformed({**d, "steps": [*steps, bad]}, n, "SCH-2", kind)
    return Malformed({**d, "steps": [*steps, {"op": "rescale", "parallelism": 2}]}, n, "SCH-1", kind)
