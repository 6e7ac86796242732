"""The trace checker accepts legal traces and rejects each kind of illegal one, SCRIPTED and FREE.

Expected traces here are written by hand from the rules, not produced by the reference model.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from flink_semantics.conformance.areas import hooks
from flink_semantics.conformance.areas.async_io import order_graph
from flink_semantics.conformance.checker import compare, free_checkable
from flink_semantics.spec.adapter import FREE, SCRIPTED
from flink_semantics.spec.area import Area, KeyOrder, Notation, register, unregister
from flink_semantics.spec.areas.async_io import (
    AsyncIoConfig,
    CompleteStep,
    EndStep,
    RecordStep,
    RetryConfig,
    StatusStep,
    WatermarkStep,
    event,
)
from flink_semantics.spec.schedule import INPUT, MARKER, OUTPUT, Event, EventKind, Schedule, Step, Trace


def emit(step: int, record: int, value: int, ts: int | None) -> Event:
    return event(step, "emit", record=record, value=value, timestamp=ts)


def wm(step: int, ts: int) -> Event:
    return event(step, "watermark", timestamp=ts)


def invoke(step: int, record: int, attempt: int = 1) -> Event:
    return event(step, "invoke", record=record, attempt=attempt)


def schedule(mode: str, *, status: bool = False) -> Schedule:
    """Records 0 (ts 5) and 1 (no ts), watermark 10, records 2 (ts 7) and 3 (ts 8); completions 1, 0, 3, 2."""
    steps = [RecordStep(1, 5), RecordStep(2, None), WatermarkStep(10), RecordStep(3, 7), RecordStep(4, 8),
             CompleteStep(1, (10, 11)), CompleteStep(0, (1,)), CompleteStep(3, (3,)), CompleteStep(2, (2,)),
             EndStep()]
    if status:  # an idle status between record 2 and record 3 (step 4, records shift by one step)
        steps.insert(4, StatusStep(True))
    return Schedule("async_io", AsyncIoConfig(mode=mode, capacity=10), tuple(steps))


INVOKES = [invoke(0, 0), invoke(1, 1), invoke(3, 2), invoke(4, 3)]
# Unordered: record 1 completes first and leaves at once; record 0 then frees the watermark.
UNORDERED = Trace(tuple(INVOKES + [
    emit(5, 1, 10, None), emit(5, 1, 11, None), emit(6, 0, 1, 5), wm(6, 10),
    emit(7, 3, 3, 8), emit(8, 2, 2, 7), event(9, "finished")]))
# Ordered: nothing leaves before record 0 completes.
ORDERED = Trace(tuple(INVOKES + [
    emit(6, 0, 1, 5), emit(6, 1, 10, None), emit(6, 1, 11, None), wm(6, 10),
    emit(8, 2, 2, 7), emit(8, 3, 3, 8), event(9, "finished")]))


def outputs_replaced(trace: Trace, outputs: list[Event]) -> Trace:
    """The trace with its output events replaced, in the given order, at the output positions."""
    it = iter(outputs)
    events = [next(it, None) if e.event in ("emit", "watermark", "status") else e for e in trace.events]
    kept = [e for e in events if e is not None]
    return Trace(tuple(kept[:-1] + list(it) + kept[-1:]))


def outs(trace: Trace) -> list[Event]:
    return [e for e in trace.events if e.event in ("emit", "watermark", "status")]


# --------------------------------------------------------------------------
# SCRIPTED
# --------------------------------------------------------------------------


def test_scripted_accepts_identical_trace() -> None:
    assert compare(schedule("unordered"), UNORDERED, UNORDERED, SCRIPTED) is None


def test_scripted_accepts_other_interleaving_of_outputs_and_side_effects_in_a_step() -> None:
    s = Schedule("async_io", AsyncIoConfig(capacity=1), (RecordStep(1, None), RecordStep(2, None),
                                                         CompleteStep(0, (5,))))
    expected = Trace((invoke(0, 0), emit(2, 0, 5, None), invoke(2, 1)))
    observed = Trace((invoke(0, 0), invoke(2, 1), emit(2, 0, 5, None)))
    assert compare(s, expected, observed, SCRIPTED) is None


def test_scripted_rejects_output_in_another_step() -> None:
    e = outs(UNORDERED)
    moved = e[:-1] + [emit(9, 2, 2, 7)]  # emitted one step late
    m = compare(schedule("unordered"), UNORDERED, outputs_replaced(UNORDERED, moved), SCRIPTED)
    assert m is not None and m.step == 8 and "AIO-14" in m.rules


def test_scripted_rejects_reordered_outputs_inside_a_step() -> None:
    e = outs(UNORDERED)
    swapped = [e[1], e[0]] + e[2:]
    m = compare(schedule("unordered"), UNORDERED, outputs_replaced(UNORDERED, swapped), SCRIPTED)
    assert m is not None and m.step == 5


def test_scripted_rejects_ordered_mode_reorder() -> None:
    e = outs(ORDERED)
    reordered = [e[1], e[2], e[0]] + e[3:]
    m = compare(schedule("ordered"), ORDERED, outputs_replaced(ORDERED, reordered), SCRIPTED)
    assert m is not None and m.step == 6 and m.rules[0] == "AIO-12"


@pytest.mark.parametrize("change", ["missing", "extra", "side effect", "snapshot"])
def test_scripted_rejects_missing_and_extra_events(change: str) -> None:
    s = schedule("unordered")
    events = list(UNORDERED.events)
    if change == "missing":
        events.remove(emit(7, 3, 3, 8))
    elif change == "extra":
        events.insert(-1, emit(8, 2, 2, 7))
    elif change == "side effect":
        events[2] = invoke(3, 2, attempt=2)
    else:
        events.insert(-1, event(8, "checkpoint", id=1, snapshot=[]))
    m = compare(s, UNORDERED, Trace(tuple(events)), SCRIPTED)
    assert m is not None and m.step in (3, 7, 8)


def test_scripted_rejects_running_a_config_that_must_be_refused() -> None:
    s = Schedule("async_io", AsyncIoConfig(capacity=0), (RecordStep(1, None),))
    expected = Trace((event(-1, "rejected", reason="AIO-1: capacity must be positive"),))
    m = compare(s, expected, Trace((invoke(0, 0),)), SCRIPTED)
    assert m is not None and m.rules == ("AIO-1",)  # the rule the configuration breaks, not AIO-3 too
    assert compare(s, expected, Trace((event(-1, "rejected", reason="any text"),)), SCRIPTED) is None
    no_timeout = Schedule("async_io", AsyncIoConfig(capacity=1, retry=RetryConfig()), (RecordStep(1, None),))
    m = compare(no_timeout, expected, Trace((invoke(0, 0),)), FREE)
    assert m is not None and m.rules == ("AIO-3",)


def test_scripted_rejects_events_out_of_step_order() -> None:
    events = list(UNORDERED.events)
    events[0], events[1] = events[1], events[0]
    assert compare(schedule("unordered"), UNORDERED, Trace(tuple(events)), SCRIPTED) is not None


def test_scripted_checks_the_trace_format_when_both_traces_are_equal() -> None:
    # Equal traces skip the step-by-step comparison, not the checks of the observed trace's form.
    swapped = list(UNORDERED.events)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    beyond = [*UNORDERED.events[:-1], event(10, "finished")]  # step 10 of a 10-step schedule
    unknown = [*UNORDERED.events[:-1], Event(9, "bogus", ())]
    for events in (swapped, beyond, unknown):
        trace = Trace(tuple(events))
        m = compare(schedule("unordered"), trace, trace, SCRIPTED)
        assert m is not None and m.rules == () and m.observed, events


# --------------------------------------------------------------------------
# FREE: the partial order
# --------------------------------------------------------------------------


def free(mode: str, expected: Trace, observed_outputs: list[Event], *, status: bool = False):  # type: ignore[no-untyped-def]
    s = schedule(mode, status=status)
    assert free_checkable(s)
    return compare(s, expected, outputs_replaced(expected, observed_outputs), FREE)


def test_free_accepts_the_reference_order_and_other_linear_extensions() -> None:
    e = outs(UNORDERED)  # r1 r1 r0 W r3 r2
    assert free("unordered", UNORDERED, e) is None
    assert free("unordered", UNORDERED, [e[2], e[0], e[1], e[3], e[5], e[4]]) is None  # r0 r1 r1 W r2 r3
    # Step indices mean nothing to a FREE adapter.
    assert free("unordered", UNORDERED, [Event(0, x.event, x.data) for x in e]) is None


def test_free_unordered_accepts_exactly_the_linear_extensions() -> None:
    e = outs(UNORDERED)
    r1a, r1b, r0, w, r3, r2 = e
    legal = 0
    import itertools

    for perm in itertools.permutations(e):
        ok = free("unordered", UNORDERED, list(perm)) is None
        p = perm.index
        # Written from AIO-13/15/18 directly: records before the watermark precede it, records after
        # it follow it, record 1's run is contiguous and in result order.
        want = (max(p(r1a), p(r1b), p(r0)) < p(w) < min(p(r3), p(r2))
                and p(r1b) == p(r1a) + 1)
        assert ok == want, perm
        legal += want
    assert legal == 2 * 2  # {r1-run, r0} in 2 orders, {r3, r2} in 2 orders


def test_free_rejects_record_passing_a_watermark() -> None:
    r1a, r1b, r0, w, r3, r2 = outs(UNORDERED)
    m = free("unordered", UNORDERED, [r1a, r1b, r0, r3, w, r2])
    assert m is not None and m.rules == ("AIO-15",) and m.position == 3


def test_free_rejects_watermark_passing_a_record() -> None:
    r1a, r1b, r0, w, r3, r2 = outs(UNORDERED)
    m = free("unordered", UNORDERED, [r1a, r1b, w, r0, r3, r2])
    assert m is not None and m.rules == ("AIO-15",)


def test_free_rejects_split_result_run() -> None:
    r1a, r1b, r0, w, r3, r2 = outs(UNORDERED)
    m = free("unordered", UNORDERED, [r1a, r0, r1b, w, r3, r2])
    assert m is not None and m.rules == ("AIO-18",) and "split" in m.what


def test_free_rejects_results_out_of_result_order() -> None:
    r1a, r1b, r0, w, r3, r2 = outs(UNORDERED)
    m = free("unordered", UNORDERED, [r1b, r1a, r0, w, r3, r2])
    assert m is not None and m.rules == ("AIO-18",)


def test_free_rejects_wrong_timestamp() -> None:
    r1a, r1b, r0, w, r3, r2 = outs(UNORDERED)
    m = free("unordered", UNORDERED, [r1a, r1b, emit(6, 0, 1, None), w, r3, r2])
    assert m is not None and m.rules == ("AIO-18",) and "timestamp" in m.what


def test_free_rejects_missing_and_extra_output() -> None:
    r1a, r1b, r0, w, r3, r2 = outs(UNORDERED)
    m = free("unordered", UNORDERED, [r1a, r1b, r0, w, r3])
    assert m is not None and "missing" in m.what
    m = free("unordered", UNORDERED, [r1a, r1b, r0, w, r3, r2, emit(8, 2, 9, 7)])
    assert m is not None and "extra" in m.what


def test_free_rejects_ordered_mode_reorder() -> None:
    r0, r1a, r1b, w, r2, r3 = outs(ORDERED)
    assert free("ordered", ORDERED, [r0, r1a, r1b, w, r2, r3]) is None
    m = free("ordered", ORDERED, [r1a, r1b, r0, w, r2, r3])
    assert m is not None and m.rules == ("AIO-12",)
    m = free("ordered", ORDERED, [r0, r1a, r1b, w, r3, r2])
    assert m is not None and m.rules == ("AIO-12",)


def test_free_status_is_not_overtaken_by_later_input() -> None:
    # The status (input step 4) bypasses the queue (AIO-51): it may come before the outputs of
    # records 0..2, but before the output of record 3, which arrives after it.
    s = schedule("unordered", status=True)
    st_ = event(4, "status", idle=True)
    base = Trace(tuple([invoke(0, 0), invoke(1, 1), invoke(3, 2), st_, invoke(5, 3),
                        emit(6, 1, 10, None), emit(6, 1, 11, None), emit(7, 0, 1, 5), wm(7, 10),
                        emit(8, 3, 3, 8), emit(9, 2, 2, 7), event(10, "finished")]))
    st_o, r1a, r1b, r0, w, r3, r2 = outs(base)
    g = order_graph(s, outs(base))
    assert g.edges[("status", 0), ("emit", 3, 0)]["rule"] == "AIO-51"
    assert compare(s, base, outputs_replaced(base, [r1a, r1b, r0, w, st_o, r2, r3]), FREE) is None
    m = compare(s, base, outputs_replaced(base, [r1a, r1b, r0, w, r3, st_o, r2]), FREE)
    assert m is not None and m.rules == ("AIO-51",)


def test_free_rejects_failures_and_wrong_invokes() -> None:
    s = schedule("unordered")
    events = list(UNORDERED.events)
    events[1] = invoke(1, 1, attempt=2)
    assert compare(s, UNORDERED, Trace(tuple(events)), FREE) is not None
    events = list(UNORDERED.events)[:-1] + [event(9, "fail", record=None, reason="error")]
    assert compare(s, UNORDERED, Trace(tuple(events)), FREE) is not None


def test_free_checking_is_defined_only_without_timers_and_crashes() -> None:
    s = schedule("unordered")
    assert free_checkable(s)
    assert not free_checkable(Schedule("async_io", AsyncIoConfig(timeout=5), s.steps))
    assert not free_checkable(Schedule("async_io", s.config, s.steps[:-1]))  # no end of input
    with pytest.raises(ValueError):
        compare(Schedule("async_io", AsyncIoConfig(timeout=5), s.steps), UNORDERED, UNORDERED, FREE)


# --------------------------------------------------------------------------
# A FREE adapter with a legal, different order is accepted
# --------------------------------------------------------------------------


def test_free_order_adapter_differs_from_reference_and_is_accepted() -> None:
    from flink_semantics.conformance.areas.async_io import Features, schedules
    from flink_semantics.reference import expected_trace as reference_trace
    from flink_semantics.spec.area import all_capabilities
    from hypothesis import given, settings

    from tests.free_order_adapter import FreeOrderAdapter

    adapter = FreeOrderAdapter()
    f = Features(modes=("unordered",), statuses=True).restrict({c: None for c in all_capabilities()}, FREE)
    differed = []

    @settings(max_examples=150, derandomize=True, database=None, deadline=None)
    @given(s=schedules(f))
    def run(s: Schedule) -> None:
        expected = reference_trace(s)
        (observed,) = adapter.run_batch([s])
        assert compare(s, expected, observed, FREE) is None, s.to_json()
        if observed != expected:
            differed.append(s)
            assert compare(s, expected, observed, SCRIPTED) is not None

    run()
    assert len(differed) >= 10, "the FREE test adapter should often emit a different order"


# --------------------------------------------------------------------------
# SCRIPTED: the freedom of spec/schedules.md item 7, and nothing more
# --------------------------------------------------------------------------


def test_scripted_allows_only_the_interleaving_of_outputs_and_side_effects() -> None:
    s = Schedule("async_io", AsyncIoConfig(), tuple(RecordStep(v) for v in range(5)))
    emit0, emit1 = emit(3, 0, 1, None), emit(3, 1, 2, None)
    inv = invoke(3, 2)
    cp = event(3, "checkpoint", id=1, snapshot=[("record", 2)])
    want = Trace((emit0, inv, emit1, cp))
    assert compare(s, want, Trace((inv, emit0, emit1, cp)), SCRIPTED) is None
    assert compare(s, want, Trace((emit1, emit0, inv, cp)), SCRIPTED) is not None  # output order
    # A checkpoint (like fail and finished) keeps its place relative to outputs and side effects.
    assert compare(s, want, Trace((emit0, emit1, cp, inv)), SCRIPTED) is not None  # invoke after it
    assert compare(s, want, Trace((emit0, inv, cp, emit1)), SCRIPTED) is not None  # output after it
    assert compare(s, want, Trace((emit0, inv, emit1, cp, event(4, "finished"))), SCRIPTED) is not None
    moved = Trace((emit(2, 0, 1, None), inv, emit1, cp))
    assert compare(s, want, moved, SCRIPTED) is not None  # the step of an event
    rejected = Trace((event(-1, "rejected", reason="AIO-1: capacity must be positive"),))
    assert compare(s, Trace((event(-1, "rejected", reason="other words"),)), rejected, SCRIPTED) is None
    assert compare(s, want, rejected, SCRIPTED) is not None


# --------------------------------------------------------------------------
# An area that leaves the key order of a step's outputs free (Area.free_key_order)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Config:
    n: int = 1


@dataclass(frozen=True)
class _Put(Step):
    op: ClassVar[str] = "put"
    role: ClassVar[str | None] = INPUT
    key: str
    value: int


def _no_notation(*args: Any) -> Any:
    raise NotImplementedError


BUNDLES = Area(name="bundles", title="bundles", rules_file="bundles.md", rule_prefix="BU",
               config_type=_Config, steps=(_Put,),
               events=(EventKind("out", ("key", "value"), OUTPUT), EventKind("mark", ("n",), MARKER)),
               capabilities={}, notation=Notation(_no_notation, _no_notation, _no_notation, _no_notation),
               validate_config=lambda config: None, free_key_order=KeyOrder("BU-9", ("out",), "key"))


@pytest.fixture
def bundles(monkeypatch: pytest.MonkeyPatch) -> Iterator[Area]:
    """The toy area, with checker hooks that name BU-1 for any divergence."""
    register(BUNDLES)
    monkeypatch.setitem(sys.modules, "flink_semantics.conformance.areas.bundles",
                        types.SimpleNamespace(rules_for=lambda schedule, kinds: ("BU-1",)))
    hooks.cache_clear()
    try:
        yield BUNDLES
    finally:
        unregister(BUNDLES.name)
        hooks.cache_clear()


def _trace(*events: tuple[int, str, Any, Any]) -> Trace:
    kinds = BUNDLES.event_kinds
    return Trace(tuple(Event(step, kind, data, kinds[kind]) for step, kind, *data in events))


def _bundle_schedule() -> Schedule:
    return Schedule("bundles", _Config(), (_Put("a", 1), _Put("b", 2)))


def test_scripted_accepts_any_key_order_the_area_frees(bundles: Area) -> None:
    expected = _trace((1, "out", "a", 1), (1, "out", "b", 2), (1, "out", "a", 3), (1, "mark", 7))
    observed = _trace((1, "out", "b", 2), (1, "out", "a", 1), (1, "out", "a", 3), (1, "mark", 7))
    assert compare(_bundle_schedule(), expected, observed, SCRIPTED) is None


def test_scripted_keeps_the_order_of_one_key_and_names_the_rule(bundles: Area) -> None:
    expected = _trace((1, "out", "a", 1), (1, "out", "b", 2), (1, "out", "a", 3))
    observed = _trace((1, "out", "a", 3), (1, "out", "b", 2), (1, "out", "a", 1))
    m = compare(_bundle_schedule(), expected, observed, SCRIPTED)
    assert m is not None and m.step == 1 and "in any key order: BU-9" in m.what


def test_scripted_frees_key_order_only_between_markers_and_inside_a_step(bundles: Area) -> None:
    expected = _trace((1, "out", "a", 1), (1, "mark", 7), (1, "out", "b", 2))
    across_marker = _trace((1, "out", "b", 2), (1, "mark", 7), (1, "out", "a", 1))
    assert compare(_bundle_schedule(), expected, across_marker, SCRIPTED) is not None
    expected = _trace((0, "out", "a", 1), (1, "out", "b", 2))
    across_steps = _trace((0, "out", "b", 2), (1, "out", "a", 1))
    assert compare(_bundle_schedule(), expected, across_steps, SCRIPTED) is not None
    missing = _trace((0, "out", "a", 1))
    assert compare(_bundle_schedule(), expected, missing, SCRIPTED) is not None


def test_a_hook_that_singles_out_a_rule_leaves_the_others_possible(bundles: Area,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A `rules_for_events` hook returning Blame(broken, possible): the mismatch's rules are the
    broken ones and the others possible (their verdict inconclusive); a Blame singling out none
    blames all it may concern."""
    from flink_semantics.conformance.areas import Blame

    expected = _trace((1, "out", "a", 1))
    observed = _trace((1, "out", "a", 2))
    for told, rules, possible in ((Blame(("BU-2",), ("BU-3", "BU-2")), ("BU-2",), ("BU-3",)),
                                  (Blame((), ("BU-3", "BU-4")), ("BU-3", "BU-4"), ()),
                                  (("BU-5",), ("BU-5",), ())):
        monkeypatch.setitem(sys.modules, "flink_semantics.conformance.areas.bundles", types.SimpleNamespace(
            rules_for=lambda schedule, kinds: ("BU-1",), rules_for_events=lambda *a, told=told, **kw: told))
        hooks.cache_clear()
        m = compare(_bundle_schedule(), expected, observed, SCRIPTED)
        assert m is not None and (m.rules, m.possible) == (rules, possible), told


def test_key_groups_blames_routing_not_the_restore_for_a_key_on_another_subtask() -> None:
    """After a restore, a key routed to another subtask is a routing difference (KG-6) only: restored
    state does not move a key; the same key on the right subtask with another sum concerns the
    restored state too (KG-12..KG-14)."""
    from flink_semantics.reference import expected_trace
    from flink_semantics.spec.areas.key_groups import CheckpointStep, KeyGroupsConfig, RestoreStep, UpdateStep

    schedule = Schedule("key_groups", KeyGroupsConfig(2, 10), (
        UpdateStep(7), CheckpointStep(), RestoreStep(2, None), UpdateStep(7)))
    expected = expected_trace(schedule)
    last = expected.events[-1]
    assert (last.event, last.subtask, last.value) == ("routed", 0, 2)  # KG-14's example: key 7 on t0
    for change, rules in (({"subtask": 1}, ("KG-6",)), ({"value": 1}, ("KG-6", "KG-12", "KG-13", "KG-14"))):
        fields = {name: getattr(last, name) for name in last.kind.fields}
        observed = Trace((*expected.events[:-1], last.kind(last.step, **{**fields, **change})))
        mismatch = compare(schedule, expected, observed, SCRIPTED)
        assert mismatch is not None and mismatch.rules == rules, (change, mismatch)


def test_key_groups_blames_routing_for_state_kept_under_another_key_group() -> None:
    """At a restore, a key kept under another key group (the same sum, on that group's subtask) was
    routed by another key group than its `routed` events said: KG-6; under the same key group on
    another subtask it is the restore's doing (KG-12, KG-13, KG-14)."""
    from flink_semantics.reference import expected_trace
    from flink_semantics.spec.areas.key_groups import CheckpointStep, KeyGroupsConfig, RestoreStep, UpdateStep

    schedule = Schedule("key_groups", KeyGroupsConfig(1, None), (UpdateStep(0), CheckpointStep(),
                                                                 RestoreStep(2, None)))
    expected = expected_trace(schedule)
    keyed = expected.events[-1]
    assert (keyed.event, keyed.key_group, keyed.subtask) == ("keyed", 94, 1)  # t1 holds 64..127
    fields = {name: getattr(keyed, name) for name in keyed.kind.fields}
    for change, rules in (({"subtask": 0, "key_group": 21}, ("KG-6",)),
                          ({"subtask": 0}, ("KG-13",))):
        observed = Trace((*expected.events[:-1], keyed.kind(keyed.step, **{**fields, **change})))
        mismatch = compare(schedule, expected, observed, SCRIPTED)
        assert mismatch is not None and set(mismatch.rules) >= set(rules), (change, mismatch)
        assert ("KG-6" in mismatch.rules) == ("key_group" in change), (change, mismatch)


def test_key_groups_blames_utf16_units_only_where_a_string_key_was_hashed_otherwise() -> None:
    """KG-34 (a string key is its UTF-16 code units) is named with the hash's rules when a key with
    a surrogate pair or an unpaired surrogate gets another hash; the same key on another subtask
    under the right key group is routing's alone (KG-6), as for any key (found by the pyflink run)."""
    from flink_semantics.reference import expected_trace
    from flink_semantics.spec.areas.key_groups import KeyGroupsConfig, UpdateStep

    schedule = Schedule("key_groups", KeyGroupsConfig(4, None), (UpdateStep("a-\u00e9\U00010000", "string"),))
    expected = expected_trace(schedule)
    routed = expected.events[-1]
    assert (routed.event, routed.key_group, routed.subtask) == ("routed", 62, 1)  # 62 * 4 // 128 = 1
    fields = {name: getattr(routed, name) for name in routed.kind.fields}
    other_hash = {"hash": 1, "key_group": 1, "subtask": 0}  # only the hash is wrong
    for change, rules in (({"subtask": 2}, ("KG-6",)), (other_hash, ("KG-11", "KG-2", "KG-34"))):
        observed = Trace((*expected.events[:-1], routed.kind(routed.step, **{**fields, **change})))
        mismatch = compare(schedule, expected, observed, SCRIPTED)
        assert mismatch is not None and mismatch.rules == rules, (change, mismatch)



def test_the_event_diff_marks_what_differs_and_cuts_long_equal_runs() -> None:
    """Expected against observed in the spec's notation: '-' expected only, '+' observed only, a run
    of equal events longer than 2 x context cut to its ends (written by hand, not by the checker)."""
    from flink_semantics.conformance.checker import event_diff
    from flink_semantics.spec.schedule import OUTPUT, EventKind

    emit = EventKind("emit", ("value",), OUTPUT)
    want = [emit(0, value=v) for v in range(10)] + [emit(1, value=5)]
    got = [emit(0, value=v) for v in range(10)] + [emit(1, value=6), emit(1, value=7)]
    assert event_diff(want, got, context=2) == [
        "    … 8 equal events",
        "    @0 emit value=8",
        "    @0 emit value=9",
        "-   @1 emit value=5",
        "+   @1 emit value=6",
        "+   @1 emit value=7",
    ]
    assert event_diff([], []) == ["    (no events)"]
