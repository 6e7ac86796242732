"""Which rule a difference between the reference's and an adapter's events of one key groups step
shows broken (issue 32): the area's `rules_for_events` hook (conformance/areas/__init__.py).

The checker hands the hook the first differing group of a step: one event a side (a marker, or an
update's one `routed` output).  Every earlier step matched, so the reference model replayed up to
the step (`_before`) is the state the adapter showed too.  Each field of an event is the spec's
formula applied to the field before it, so the first field that differs names the rule, and the
fields after it are checked against the observed value of the one before:

* an update (`_update_blame`): the hash (by the profile and the key's type: KG-24/25/26 and KG-23 in
  the `spark` profile, KG-11/KG-2 in `flink`, KG-33 in `pyflink`), then the key group from the hash
  (KG-30, KG-1 or KG-33; KG-9 where the default maximum was never shown), then the subtask from the
  key group (KG-6), then the sum (KG-6; KG-34 when two string keys of one hash were merged); a null
  key routed where refused, KG-7;
* a restore (`_restore_blame`): the refusal's reason (the rule of the first failing check of C7,
  KG-8 then KG-16 then KG-15), the restored maximum (KG-16, KG-9), a range (KG-4), a key's restored
  state (KG-14 at the checkpoint's parallelism, KG-13 at another; KG-12 when its key group
  changed), a list of operator state by its name's mode (KG-18 union, KG-19 broadcast, KG-20 at the
  same parallelism; for a split name KG-17 when the list is no chunk of any legal old order, KG-21
  when it is a chunk from another start).

The state before the step is that of the block orders (KG-17's freedom, C3) under which the
checker compared the trace (`key_groups_orders.failure_at`), else the reference's.

Rules the difference concerns but does not single out are `possible` (their verdict inconclusive).
Where nothing is singled out, every rule is possible, hence blamed (the checker's rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flink_semantics.conformance.areas import Blame
from flink_semantics.conformance.areas.key_groups_orders import Failure, failure_at, legal_old_states
from flink_semantics.reference.key_groups import (
    Model,
    OperatorState,
    Snapshot,
    int32,
    java_utf8_bytes,
    operator_index,
    repartition_operator_state,
    route,
    spark_hash_bytes,
    spark_hash_int,
    spark_hash_long,
    within_bounds,
)
from flink_semantics.spec.areas.key_groups import (
    REFUSED_ABOVE_MAX,
    REFUSED_MAX_CHANGED,
    REFUSED_PARALLELISM,
    AddStateStep,
    RestoreStep,
    UpdateStep,
    has_lone_surrogate,
)
from flink_semantics.spec.schedule import Event, Schedule

IN_FLIGHT = "inflight"  # the async operator's stored elements (AIO-49; key_groups.in_flight_schedule)
NOTHING = Blame(())

# C7: the reasons of a refused restore, in the order they are checked, and their rules.
RULE_OF_REASON = {REFUSED_PARALLELISM: "KG-8", REFUSED_MAX_CHANGED: "KG-16", REFUSED_ABOVE_MAX: "KG-15"}
SPARK_TYPE_RULE = {"int": "KG-24", "long": "KG-25", "string": "KG-26"}  # KG-23: a null key
RESTORE_ORDER = ("restored", "range", "keyed", "operator")  # a restore's events, in trace order


def rules_for_events(schedule: Schedule, step: int, expected: Sequence[Event],
                     observed: Sequence[Event], later: Sequence[Event] = ()) -> Blame:
    """The rules a difference between these events of step `step` shows broken and those it may
    concern (module docstring); NOTHING (the checker falls back to the kinds' rules) when the step or
    the events are not of one of the forms above."""
    if not 0 <= step < len(schedule.steps) or len(expected) > 1 or len(observed) > 1:
        return NOTHING
    s = schedule.steps[step]
    e = expected[0] if expected else None
    o = observed[0] if observed else None
    failure = failure_at(schedule, step)
    model = failure.before.model if failure is not None else _before(schedule, step)
    if isinstance(s, UpdateStep) and e is not None and o is not None:
        return _update_blame(schedule, step, model, e, o)
    if isinstance(s, RestoreStep):
        return _restore_blame(schedule, model, s, e, o, failure, later)
    return NOTHING


def _before(schedule: Schedule, step: int) -> Model:
    """The reference model after the steps before `step` (the state the adapter showed as well)."""
    model = Model(schedule.config)
    for i, s in enumerate(schedule.steps[:step]):
        model.apply(i, s)
    return model


# --------------------------------------------------------------------------
# Updates
# --------------------------------------------------------------------------


def _update_blame(schedule: Schedule, step: int, model: Model, e: Event, o: Event) -> Blame:
    """An update's one event: KG-7 for a null key routed where refused; else the first differing
    field of `routed` (the module docstring)."""
    profile = model.profile
    if e.event == "null_key" and o.event == "routed" and o.key is None:
        return Blame(("KG-7",))
    if e.event == "routed" and e.key is None and o.event == "null_key":
        return Blame(("KG-23",) if profile == "spark" else ("KG-33",))  # C5; KG-33: a Row is not null
    if e.event != "routed" or o.event != "routed" or (e.key, e.type) != (o.key, o.type):
        return NOTHING
    if e.hash != o.hash:
        return _also(_hash_blame(profile, e.key, e.type, e.hash, o.hash), _downstream(model, o, "hash"))
    if e.key_group != o.key_group:
        return _also(_key_group_blame(schedule, step, model), _downstream(model, o, "key_group"))
    if e.subtask != o.subtask:
        return Blame(("KG-6",), ("KG-3", *_refused_since(schedule, step)))
    return _sum_blame(schedule, step, e)


def _also(blame: Blame, more: tuple[str, ...]) -> Blame:
    """`blame` with the rules `more` broken too (where `blame` singles nothing out, all its rules)."""
    if not more:
        return blame
    first = blame.broken or blame.possible
    broken = first + tuple(r for r in more if r not in first)
    return Blame(broken, tuple(r for r in blame.possible if r not in broken))


def _downstream(model: Model, o: Event, differs: str) -> tuple[str, ...]:
    """The rules the observed event breaks after its first differing field: a key group that is not
    the observed hash's (KG-30, KG-1 or KG-33), a subtask that does not own the observed key group
    (KG-6)."""
    rules: tuple[str, ...] = ()
    m, p = model.max_parallelism, model.parallelism
    if differs == "hash" and o.key_group != o.hash % m:
        rules += ({"spark": "KG-30", "pyflink": "KG-33"}.get(model.profile, "KG-1"),)
    if o.subtask != operator_index(m, p, o.key_group):
        rules += ("KG-6",)
    return rules


def _hash_blame(profile: str, key: Any, type_: str, expected: int, observed: int) -> Blame:
    """The hash of a key: in the `spark` profile the rule of its type (KG-23 null, KG-24 int, KG-25
    long, KG-26 string), KG-22 when it is the hash with another seed than 42, KG-22 and KG-27
    possible otherwise; in `flink` KG-2 for a hash that is negative (or MIN_VALUE not made 0),
    else KG-11 and KG-2 (a hash code and its murmur hash cannot be told apart from the hash); in
    `pyflink` KG-33 with them.  KG-34 is possible for a string key whose UTF-16 units matter."""
    units = ("KG-34",) if _code_units_matter(key) else ()
    if profile == "spark":
        rule = "KG-23" if key is None else SPARK_TYPE_RULE[type_]
        if key is not None and observed == _spark_hash(key, type_, 0):
            return Blame(("KG-22",), (rule, *units))
        return Blame((rule,), tuple(r for r in ("KG-22", "KG-27", *units) if r != rule))
    if profile == "flink" and (observed < 0 or observed > 2**31 - 1 or (expected == 0 and observed == 2**31)):
        return Blame(("KG-2",), ("KG-11", *units))
    rules = ("KG-33", "KG-11", "KG-2") if profile == "pyflink" else ("KG-11", "KG-2")
    return Blame((), (*rules, *units))


def _spark_hash(key: Any, type_: str, seed: int) -> int:
    """Spark's hash of a non-null key with another seed (KG-22 starts from 42)."""
    if type_ == "int":
        return int32(spark_hash_int(key, seed))
    if type_ == "long":
        return int32(spark_hash_long(key, seed))
    return int32(spark_hash_bytes(java_utf8_bytes(str(key)), seed))


def _code_units_matter(key: Any) -> bool:
    """A string key whose UTF-16 code units differ from its code points or have no UTF-8 form."""
    return isinstance(key, str) and (has_lone_surrogate(key) or any(ord(c) > 0xFFFF for c in key))


def _key_group_blame(schedule: Schedule, step: int, model: Model) -> Blame:
    """The hash right, the key group not: KG-30 (`spark`), else KG-1 (KG-33 in `pyflink`), with the
    default maximum of KG-9 and KG-10 possible while no configuration or restore has shown it."""
    if model.profile == "spark":
        return Blame(("KG-30",))
    rule = "KG-33" if model.profile == "pyflink" else "KG-1"
    restored = _restored_before(schedule, step)
    if model.explicit or restored:
        return Blame((rule,), ("KG-16",) if restored else ())
    return Blame((), (rule, "KG-9", "KG-10"))


def _restored_before(schedule: Schedule, step: int) -> bool:
    """Whether a restore before `step` succeeded (its `restored` event showed the maximum)."""
    model = Model(schedule.config)
    for i, s in enumerate(schedule.steps[:step]):
        events = model.apply(i, s)
        if events and events[0].event == "restored":
            return True
    return False


def _refused_since(schedule: Schedule, step: int) -> tuple[str, ...]:
    """The rules of the restores refused since the last one that succeeded, before `step`: a refused
    restore leaves the running job as it was (C8), which routing and sums after it show."""
    model = Model(schedule.config)
    rules: list[str] = []
    for i, s in enumerate(schedule.steps[:step]):
        events = model.apply(i, s)
        if events and events[0].event == "restored":
            rules = []
        elif events and events[0].event == "restore_refused":
            rules.append(RULE_OF_REASON.get(events[0].reason, "KG-8"))
    return tuple(dict.fromkeys(rules))


def _sum_blame(schedule: Schedule, step: int, e: Event) -> Blame:
    """Routing right, the sum not: KG-34 when an earlier string key with other code units has the
    same hash (the two keys were merged, or one key split); KG-6 (the key's sum lives on its
    subtask) when nothing was restored or refused before; else KG-6 with the restore's rule
    (KG-13, KG-14) or the refusal's (C8: the running job goes on), none singled out."""
    earlier = [s for s in schedule.steps[:step] if isinstance(s, UpdateStep)]
    same_hash = [s for s in earlier if (s.type, s.key) != (e.type, e.key) and s.key is not None
                 and _routed_hash(schedule, s) == e.hash]
    if e.type == "string" and any(s.type == "string" for s in same_hash):
        return Blame(("KG-34",), ("KG-6",))
    restores = [s for s in schedule.steps[:step] if isinstance(s, RestoreStep)]
    if not restores and not same_hash:
        return Blame(("KG-6",))
    rules = ["KG-6", "KG-12", "KG-13", "KG-14", *_refused_since(schedule, step)]
    if same_hash:
        rules.append("KG-11")  # keys of other types with one hash code are other keys
    return Blame((), tuple(dict.fromkeys(rules)))


def _routed_hash(schedule: Schedule, s: UpdateStep) -> int:
    c = schedule.config
    return route(s.key, s.type, c.hash, 128, 1)[0]  # the hash depends on the key and the profile only


# --------------------------------------------------------------------------
# Restores
# --------------------------------------------------------------------------


def _restore_blame(schedule: Schedule, model: Model, s: RestoreStep, e: Event | None,
                   o: Event | None, failure: Failure | None = None, later: Sequence[Event] = ()) -> Blame:
    """A restore's first differing event: a refusal (`_refusal_blame`); else, where the kinds
    differ, the side whose kind comes first in a restore's events is the one the other lacks."""
    if (e is not None and e.event == "restore_refused") or (o is not None and o.event == "restore_refused"):
        return _refusal_blame(model, s, e, o)
    if e is None or o is None:
        return NOTHING
    c = model.checkpoint
    first = min((x for x in (e, o) if x.event in RESTORE_ORDER), key=lambda x: RESTORE_ORDER.index(x.event),
                default=None)
    if first is None:
        return NOTHING
    if first.event == "restored":
        return _restored_blame(c, s, e, o) if e.event == o.event else NOTHING
    if first.event == "range":
        return Blame(("KG-4",), ("KG-5",))
    if c is None:
        return NOTHING  # a restore without a checkpoint has no state to get wrong
    if first.event == "keyed":
        return _keyed_blame(schedule, model, c, s, e, o)
    if e.event == o.event == "operator" and (e.subtask, e.name) == (o.subtask, o.name):
        return _operator_blame(schedule, c, s.parallelism, o, o, failure, later)
    if e.event == o.event == "operator":  # the list of the (subtask, name) first in order is missing
        first = min((e, o), key=lambda x: (x.subtask, x.name))
    return _operator_blame(schedule, c, s.parallelism, first, None)


def _refusal_blame(model: Model, s: RestoreStep, e: Event | None, o: Event | None) -> Blame:
    """C7: a restore is refused for the first failing check of KG-8 bounds, KG-16, KG-15.  Expected
    refused and not refused: the expected reason's rule; refused when it should not be: the observed
    reason's rule; another reason that also holds: the expected reason's rule (checked too late), the
    observed one's possible; a reason that does not hold: that reason's rule."""
    want = RULE_OF_REASON.get(e.reason) if e is not None and e.event == "restore_refused" else None
    got = RULE_OF_REASON.get(o.reason) if o is not None and o.event == "restore_refused" else None
    holds = refusal_causes(model, s)
    if want is None and got is None:
        return NOTHING
    if want is None:
        return Blame((got,), tuple(r for r in holds if r != got)) if got else NOTHING
    if got is None or got in holds:
        return Blame((want,), tuple(r for r in holds if r != want))
    return Blame((got,), (want,))


def refusal_causes(model: Model, s: RestoreStep) -> tuple[str, ...]:
    """Every check of C7 that this restore fails (KG-8 bounds, KG-16, KG-15), in C7's order."""
    c = model.checkpoint
    causes = []
    if not within_bounds(s.parallelism, s.max_parallelism):
        causes.append("KG-8")
    if c is not None and s.max_parallelism is not None and s.max_parallelism != c.max_parallelism:
        causes.append("KG-16")
    if c is not None and s.parallelism > c.max_parallelism:
        causes.append("KG-15")
    return tuple(causes)


def _restored_blame(c: Snapshot | None, s: RestoreStep, e: Event, o: Event) -> Blame:
    """The restored maximum parallelism: KG-16 (the checkpoint's, or a restore's explicit one), KG-9
    (the default of a new job) with KG-10 possible."""
    if e.parallelism != o.parallelism or e.max_parallelism == o.max_parallelism:
        return NOTHING
    if c is not None or s.max_parallelism is not None:
        return Blame(("KG-16",))
    return Blame(("KG-9",), ("KG-10",))


def _keyed_blame(schedule: Schedule, model: Model, c: Snapshot, s: RestoreStep, e: Event,
                 o: Event) -> Blame:
    """A key's restored state: KG-6 when only the key groups the keys are kept under differ (the
    records went elsewhere); KG-12 when the observed key is kept under a key group not its own; else
    KG-14 at the checkpoint's parallelism, KG-13 at another (KG-12 possible: a key group split)."""
    if e.event == o.event == "keyed" and _kept_under_another_key_group(e, o):
        return Blame(("KG-6",))
    same = c.parallelism == s.parallelism
    rule = "KG-14" if same else "KG-13"
    if o.event == "keyed" and o.key_group != route(o.key, o.type, model.profile, c.max_parallelism, 1)[1]:
        return Blame(("KG-12",), (rule,))
    return Blame((rule,), ("KG-12",))


def _kept_under_another_key_group(e: Event, o: Event) -> bool:
    """The same key and sum on the subtask of another key group: the records that made it were routed
    by another key group than their `routed` events named (KG-6)."""
    return ((e.key, e.type, e.value) == (o.key, o.type, o.value) and e.key_group != o.key_group)


def _operator_blame(schedule: Schedule, c: Snapshot, p: int, first: Event, o: Event | None,
                    failure: Failure | None = None, later: Sequence[Event] = ()) -> Blame:
    """A restored list of a name (`first`: the observed list `o` when both sides list it, else the
    list one side lacks) by the name's mode (module docstring); AIO-49 too for the async operator's
    stored elements."""
    mode = c.modes.get(first.name) or _mode_in(schedule, first.name)
    if mode is None:
        return NOTHING
    if c.parallelism == p:
        blame = Blame(("KG-18",) if mode == "union" else ("KG-20",))
    elif mode == "union":
        blame = Blame(("KG-18",))
    elif mode == "broadcast":
        blame = Blame(("KG-19",))
    elif o is None:  # a list missing, or one too many
        blame = Blame(("KG-17",), ("KG-21",))
    else:
        blame = _split_blame(c, p, o, failure, later)
    if first.name == IN_FLIGHT:
        blame = Blame(("AIO-49", *blame.broken), blame.possible)
    return blame


def _mode_in(schedule: Schedule, name: str) -> str | None:
    return next((s.mode for s in schedule.steps if isinstance(s, AddStateStep) and s.name == name), None)


def _split_blame(c: Snapshot, p: int, o: Event, failure: Failure | None = None,
                 later: Sequence[Event] = ()) -> Blame:
    """A split name's list on subtask `o.subtask`, with what the adapter showed of the restore's
    other split lists (those before it matched; those after it in `later`): when some legal old
    order (KG-17: any order of a restored list's blocks still open, `failure`'s) dealt from some
    start per name gives them all, only the starts are wrong: KG-21 alone, or KG-18 when the list
    is the chunk a rotation counting the union names as split ones gives; else KG-17."""
    got = sorted(o.elements)
    held = failure.held if failure is not None and failure.held is not None else c.operator
    dealt = repartition_operator_state(held, c.modes, p)
    split = sorted(n for n, m in c.modes.items() if m == "split")
    shown = {(i, n): sorted(dealt[i].get(n, [])) for i in range(p) for n in split
             if (i, n) < (o.subtask, o.name)}
    shown[o.subtask, o.name] = got
    for e in later:  # a list the adapter did not show constrains nothing
        if e.step == o.step and e.event == "operator" and e.name in split:
            shown.setdefault((e.subtask, e.name), sorted(e.elements))

    def explains(old: OperatorState) -> bool:
        for name in split:
            elements = [x for state in old for x in state.get(name, [])]
            if not any(all(shown.get((i, name)) in (None, sorted(_chunk(elements, p, start, i)))
                           for i in range(p)) for start in range(p)):
                return False
        return True

    olds = legal_old_states(c, failure.before.saved if failure is not None else None)
    if o.subtask >= p or not any(explains(old) for old in olds):
        return Blame(("KG-17",), ("KG-21",))
    union_as_split = {n: "split" if m == "union" else m for n, m in c.modes.items()}
    if "union" in c.modes.values():
        variant = repartition_operator_state(held, union_as_split, p)
        if sorted(variant[o.subtask].get(o.name, [])) == got:
            return Blame(("KG-18",), ("KG-21",))
    return Blame(("KG-21",), ("KG-17",))


def _chunk(elements: Sequence[int], p: int, start: int, subtask: int) -> list[int]:
    """KG-17: the chunk of `subtask` when `elements` are dealt to `p` receivers served from `start`."""
    base, extra = divmod(len(elements), p)
    taken = 0
    for i in range(p):
        receiver = (start + i) % p
        n = base + (1 if i < extra else 0)
        if receiver == subtask:
            return list(elements[taken:taken + n])
        taken += n
    return []
