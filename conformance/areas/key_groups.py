"""The conformance part of the key groups area: strategies, invariants, and the checker's hooks.

Strategies (conformance/areas/key_groups_strategies.py, `schedules` and `Features` re-exported
here) draw valid schedules step by step with hypothesis' own composition (KG-32 holds by
construction): keyed updates of int, long and string keys (empty, non-ASCII and astral-plane
strings among them, and strings with unpaired surrogates and with pairs written as two code points,
KG-34), operator state in the three modes, checkpoints and restores at parallelisms up and down (to
1 and to the maximum parallelism), some of them refused for one, two or all three of C7's causes.
With operator state and rescaling, some blocks are a `burst` (elements of several names, a
checkpoint, a restore), so that the rare states where engines lose or repeat state are reached:
`COVERAGE` and `coverage` name them and their floors (conformance/coverage.py).

The checker's hooks (conformance/areas/__init__.py): this area's traces are compared exactly
(SCRIPTED); a FREE adapter cannot be checked on them, and the one freedom of KG-17 (C3: the order
in which a subtask restored from several old subtasks holds their blocks) is granted by
`legal_reference` (conformance/areas/key_groups_orders.py).  `rules_for_events`
(conformance/areas/key_groups_blame.py) names the rule a difference shows broken.

`balance_problems` states KG-5, KG-12 and KG-21 on a trace directly: every restore's ranges cover
the key groups contiguously and within one in size, every key's state lives on the subtask whose
range holds its key group, and the split state per new subtask differs by at most one element.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flink_semantics.conformance.areas import never_free, no_order_graph, no_output_keys, rules_from
from flink_semantics.conformance.areas.key_groups_blame import IN_FLIGHT, refusal_causes, rules_for_events
from flink_semantics.conformance.areas.key_groups_orders import legal_reference
from flink_semantics.conformance.areas.key_groups_strategies import Features, schedules
from flink_semantics.conformance.strategies import Malformed, batches
from flink_semantics.reference.key_groups import Model, operator_index
from flink_semantics.spec.areas.key_groups import (
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
__all__ = ["Features", "legal_reference", "rules_for_events", "schedules"]  # from their modules
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
# Combinations of refusal causes (C7 refuses for the first failing check: KG-8, KG-16, KG-15)
MAX_CHANGED_AND_ABOVE = "a restore refused with a changed maximum, above the checkpoint's maximum (C7: KG-16)"
THREE_CAUSES = "a restore out of bounds, with a changed maximum and above the checkpoint's maximum (C7: KG-8)"

# State -> floor: the least share of the area's distinct schedules that must reach it.  Measured
# with `pytest conformance --adapter reference --areas key_groups` (5034 schedules, the strategies
# of key_groups_strategies.py; the share in parentheses), each floor at most about half of it.
COVERAGE = {
    NON_DIVIDING: 0.015,  # (4.5%) the three rescaling properties
    MOVED: 0.035,  # (8.6%)
    ROTATION: 0.015,  # (4.8%) test_operator_state_on_rescale, test_restore_refusals: `burst`
    BROADCAST_UP: 0.012,  # (3.1%) the same
    REFUSED_GOES_ON: 0.02,  # (7.0%) test_restore_refusals, test_pyflink_rescale
    MAX_CHANGED_AND_ABOVE: 0.015,  # (3.5%) the same: CAUSES
    THREE_CAUSES: 0.008,  # (1.8%) the same
    LONE_SURROGATE: 0.03,  # (21.7%) KG-34: string keys of every property that draws updates
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
            causes = refusal_causes(model, s)  # a refusal leaves the model as it was (C8)
            if {"KG-16", "KG-15"} <= set(causes):
                found.add(MAX_CHANGED_AND_ABOVE)  # C7: KG-16 is checked before KG-15
            if len(causes) == 3:
                found.add(THREE_CAUSES)  # C7: KG-8's bounds first
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
