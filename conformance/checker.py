"""Comparing an adapter's trace with the reference trace of the same schedule.  Names no area.

Two comparisons, chosen by the adapter's `completion_order` (spec/adapter.py):

* SCRIPTED adapters follow the schedule exactly, so their trace must equal the reference trace
  step by step, with one freedom (spec/schedules.md item 7): inside a step, the output events and
  the side-effect events (each event kind says which it is) are two sequences whose interleaving is
  not specified, while every other event (a marker) keeps its place relative to both.  An area may
  grant one more (its descriptor's `free_key_order`, naming the rule): a run of output events of
  some kinds in any order of a key, each key's events in their own order.  `_canonical` puts one
  step's events in that form.

* FREE adapters cannot control when outside work completes, so step indices mean nothing to them.
  Their outputs must be one of the orders the rules allow: a linear extension of a partial order
  that the area builds with networkx from the reference outputs and the schedule
  (`order_graph`), where every edge names the rule that imposes it and nodes that share a `run`
  attribute must also be contiguous; the other events are compared as multisets.  The area says
  for which schedules this is defined (`free_checkable`).

The area's hooks live in conformance/areas/<area>.py (conformance/areas/__init__.py).  Which rules
a divergence concerns is the area's hint (`rules_for`) for the report.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from flink_semantics.conformance.areas import Blame, hooks
from flink_semantics.spec.adapter import FREE
from flink_semantics.spec.area import KeyOrder, get_area
from flink_semantics.spec.schedule import (
    EFFECT,
    OUTPUT,
    Event,
    Schedule,
    ScheduleError,
    Step,
    Trace,
    config_to_dict,
    step_to_dict,
)


@dataclass
class Mismatch:
    """How an observed trace departs from the expected one."""

    what: str  # one line: what differs
    rules: tuple[str, ...]  # the rules the divergence concerns (shows broken, where the area can tell)
    step: int | None = None  # the first diverging step (None when steps are not compared)
    expected: list[Event] = field(default_factory=list)  # expected events around the divergence
    observed: list[Event] = field(default_factory=list)  # observed events around the divergence
    position: int | None = None  # FREE: index of the first bad event in `observed`
    possible: tuple[str, ...] = ()  # rules it may concern too, that the evidence cannot single out
    reference: Trace | None = None  # the legal reference trace compared with, where not the one given


# --------------------------------------------------------------------------
# SCRIPTED: exact comparison per step
# --------------------------------------------------------------------------


def _by_step(trace: Trace) -> dict[int, list[Event]]:
    groups: dict[int, list[Event]] = defaultdict(list)
    for e in trace.events:
        groups[e.step].append(e)
    return groups


Group = tuple[str, tuple[Event, ...]]


def _value_order(value: object) -> tuple[str, object]:
    """A total order on field values of mixed types (None, ints, strings)."""
    return type(value).__name__, 0 if value is None else value


def _in_key_order(outputs: list[Event], key_order: KeyOrder) -> list[Event]:
    """The outputs with each run of events of the freed kinds sorted by the key, stably (a key's own
    events keep their order)."""
    out: list[Event] = []
    run: list[Event] = []
    for e in [*outputs, None]:
        if e is not None and e.event in key_order.kinds:
            run.append(e)
            continue
        out += sorted(run, key=lambda x: _value_order(getattr(x, key_order.field)))
        run = []
        if e is not None:
            out.append(e)
    return out


def _canonical(events: Sequence[Event], groups: dict[str, str],
               key_order: KeyOrder | None = None) -> list[Group]:
    """One step's events up to the freedom of item 7: every marker in place; between two markers,
    the outputs and the side effects as two sequences, the outputs up to the area's `key_order`.
    `groups`: event kind -> its group."""
    out: list[Group] = []
    outputs: list[Event] = []
    effects: list[Event] = []
    label = "output events"
    if key_order is not None:
        label += f" (in any {key_order.field} order: {key_order.rule})"

    def flush() -> None:  # empty groups are left out, so the first difference names a real kind
        ordered = outputs if key_order is None else _in_key_order(outputs, key_order)
        out.extend((name, tuple(group)) for name, group in
                   ((label, ordered), ("side-effect events", effects)) if group)
        outputs.clear()
        effects.clear()

    for e in events:
        group = groups.get(e.event)
        if group == OUTPUT:
            outputs.append(e)
        elif group == EFFECT:
            effects.append(e)
        else:
            flush()
            out.append((e.event + " event", (e,)))
    flush()
    return out


def same_step(area_name: str, a: Sequence[Event], b: Sequence[Event]) -> bool:
    """Whether two lists of one step's events are equal up to the freedom of item 7 (and the area's
    key order): for an area's `legal_reference`, which follows a schedule step by step."""
    area = get_area(area_name)
    groups = {name: kind.group for name, kind in area.event_kinds.items()}
    return _canonical(a, groups, area.free_key_order) == _canonical(b, groups, area.free_key_order)


def _first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _unknown_events(schedule: Schedule, trace: Trace) -> Mismatch | None:
    kinds = get_area(schedule.area).event_kinds
    for e in trace.events:
        if e.event not in kinds:
            return Mismatch(f"trace event {e} is of no event kind of area {schedule.area!r} "
                            f"({', '.join(kinds)})", (), step=max(e.step, 0), observed=[e])
    return None


def _steps_in_order(schedule: Schedule, trace: Trace) -> Mismatch | None:
    last = -1
    n = len(schedule.steps)
    for e in trace.events:
        if e.step < last or e.step >= n or (e.step < 0 and e.event != "rejected"):
            return Mismatch(f"trace event {e} is out of step order or names no step of the schedule",
                            (), step=max(last, 0), observed=[e])
        last = e.step
    return None


def _rejection(schedule: Schedule, expected: Trace, observed: Trace) -> Mismatch | None:
    """A refused configuration gives exactly one `rejected` event (the area's rejecting rules)."""
    area = get_area(schedule.area)
    rules = area.rejecting_rules
    if expected.rejected and not observed.rejected:
        try:  # the rule the configuration breaks, when the area's check names one of its rejecting rules
            area.validate_config(schedule.config)
        except ScheduleError as e:
            rules = (e.rule,) if e.rule in rules else rules
        return Mismatch("the configuration must be refused (a single 'rejected' event)", rules,
                        step=-1, expected=list(expected.events), observed=list(observed.events)[:6])
    if observed.rejected and not expected.rejected:
        return Mismatch("a valid configuration was refused", rules, step=-1,
                        expected=list(expected.events)[:6], observed=list(observed.events))
    return None


def _common(schedule: Schedule, expected: Trace, observed: Trace) -> tuple[bool, Mismatch | None]:
    """(done, mismatch) for what both comparisons check first: event kinds, rejection."""
    bad = _unknown_events(schedule, observed) or _rejection(schedule, expected, observed)
    return bad is not None or expected.rejected, bad


def _bound(schedule: Schedule, trace: Trace) -> Trace:
    """The trace with each event bound to its area's kind by name (an adapter may build events by
    hand); events of no kind of the area are left as they are, for `_unknown_events` to report."""
    kinds = get_area(schedule.area).event_kinds
    return Trace(tuple(Event(e.step, e.event, e.data, kinds[e.event]) if e.event in kinds else e
                       for e in trace.events))


def compare_scripted(schedule: Schedule, expected: Trace, observed: Trace) -> Mismatch | None:
    done, bad = _common(schedule, expected, observed)
    if done:
        return bad
    bad = _steps_in_order(schedule, observed)
    if bad:
        return bad
    area = get_area(schedule.area)
    groups = {name: kind.group for name, kind in area.event_kinds.items()}
    exp, obs = _by_step(expected), _by_step(observed)
    for step in sorted(set(exp) | set(obs)):
        a = _canonical(exp.get(step, []), groups, area.free_key_order)
        b = _canonical(obs.get(step, []), groups, area.free_key_order)
        i = _first_difference(a, b)
        if i is None:
            continue
        pair = a[i:i + 1] + b[i:i + 1]
        kinds = {e.event for _, events in pair for e in events}
        later = [e for _, events in b[i + 1:] for e in events] + [e for s in sorted(obs) if s > step
                                                                    for e in obs[s]]
        told = _rules_of_difference(schedule, step, a[i:i + 1], b[i:i + 1], kinds, later)
        broken = told.broken or told.possible  # nothing singled out: every rule it may concern
        return Mismatch(f"step {step}: {pair[0][0]} differ (group {i} of the step)", broken, step=step,
                        expected=exp.get(step, []), observed=obs.get(step, []),
                        possible=tuple(r for r in told.possible if r not in broken))
    return None


def _rules_of_difference(schedule: Schedule, step: int, a: Sequence[Group], b: Sequence[Group],
                         kinds: set[str], later: Sequence[Event]) -> Blame:
    """The rules a difference between two groups of a step concerns: the area's `rules_for_events`
    hook where it has one and it names rules (it sees the events, so it can tell which field
    differs, and which rule that shows broken: a `Blame`; `later`, the adapter's events after the
    group, tells an output that came late from one that never came), else `rules_for` on the event
    kinds."""
    area = hooks(schedule.area)
    narrow = getattr(area, "rules_for_events", None)
    if narrow is not None:
        expected = [e for _, events in a for e in events]
        observed = [e for _, events in b for e in events]
        rules = narrow(schedule, step, expected, observed, later=later)
        if isinstance(rules, Blame) and (rules.broken or rules.possible):
            return rules
        if rules and not isinstance(rules, Blame):
            return Blame(tuple(rules))
    return Blame(tuple(area.rules_for(schedule, sorted(kinds))))


# --------------------------------------------------------------------------
# FREE: the partial order of output events
# --------------------------------------------------------------------------


def free_checkable(schedule: Schedule) -> bool:
    """Whether FREE checking is defined for this schedule (the area decides)."""
    return bool(hooks(schedule.area).free_checkable(schedule))


def _free_outputs(schedule: Schedule, expected: Trace, observed: Trace) -> Mismatch | None:
    area = hooks(schedule.area)
    groups = get_area(schedule.area).event_kinds
    exp_out = [e for e in expected.events if groups[e.event].group == OUTPUT]
    obs_out = [e for e in observed.events if groups[e.event].group == OUTPUT]
    g = area.order_graph(schedule, exp_out)
    keys = area.output_keys(obs_out)

    def fail(what: str, rules: Sequence[str], at: int | None) -> Mismatch:
        return Mismatch(what, tuple(rules), expected=exp_out, observed=obs_out, position=at)

    for i, (k, e) in enumerate(zip(keys, obs_out)):
        if k not in g:
            return fail(f"extra output {e}: the reference emits no such output",
                        area.rules_for(schedule, [e.event]), i)
        want = g.nodes[k]["event"]
        if e.data != want.data:
            rules = g.nodes[k].get("rules") or area.rules_for(schedule, [e.event])
            return fail(f"output {e} should be {want}", rules, i)
    seen = set(keys)
    absent = [n for n in g.nodes if n not in seen]
    if absent:
        e = g.nodes[absent[0]]["event"]
        return fail(f"missing output {e}", area.rules_for(schedule, [e.event]), None)
    at = {k: i for i, k in enumerate(keys)}
    violated = [(at[v], u, v) for u, v in g.edges if at[u] > at[v]]
    if violated:
        i, u, v = min(violated)
        return fail(f"{g.nodes[v]['event']} must come after {g.nodes[u]['event']}",
                    (g.edges[u, v]["rule"],), i)
    # Nodes sharing a `run` (key, rule) attribute form one contiguous run.
    runs: dict[object, list[int]] = defaultdict(list)
    rule_of: dict[object, str] = {}
    for i, k in enumerate(keys):
        if "run" in g.nodes[k]:
            run, rule = g.nodes[k]["run"]
            runs[run].append(i)
            rule_of[run] = rule
    for run, places in runs.items():
        gap = next((i for i in range(places[0], places[-1]) if i not in places), None)
        if gap is not None:
            return fail(f"the run of {g.nodes[keys[places[0]]]['event']} is split by {obs_out[gap]}",
                        (rule_of[run],), gap)
    return None


def compare_free(schedule: Schedule, expected: Trace, observed: Trace) -> Mismatch | None:
    done, bad = _common(schedule, expected, observed)
    if done:
        return bad
    if not free_checkable(schedule):
        raise ValueError("FREE checking is defined only for schedules that free_checkable() accepts")
    bad = _free_outputs(schedule, expected, observed)
    if bad:
        return bad
    area = hooks(schedule.area)
    for kind, fields_ in area.FREE_MULTISETS.items():
        exp = Counter(tuple(getattr(e, f) for f in fields_) for e in expected.events if e.event == kind)
        obs = Counter(tuple(getattr(e, f) for f in fields_) for e in observed.events if e.event == kind)
        if exp != obs:
            return Mismatch(f"{kind} events differ (compared as a multiset): "
                            f"expected {sorted(exp.elements())}, observed {sorted(obs.elements())}",
                            area.rules_for(schedule, [kind]),
                            expected=[e for e in expected.events if e.event == kind],
                            observed=[e for e in observed.events if e.event == kind])
    kinds = get_area(schedule.area).event_kinds
    final = [e for e in observed.events if kinds[e.event].final]
    if final and observed.events[-1] != final[0]:
        return Mismatch(f"'{final[0].event}' must be the last event",
                        area.rules_for(schedule, [final[0].event]), observed=list(observed.events[-4:]))
    return None


def _same_events(schedule: Schedule, expected: Trace, observed: Trace) -> bool:
    """Whether a SCRIPTED comparison finds no difference at once: the two traces have equal events
    (step, kind, fields), every one of a kind of the area, in step order.  `compare_scripted` would
    find none then (its step groups are equal), so most conforming traces skip its work."""
    if expected.events != observed.events:
        return False
    bad = _unknown_events(schedule, observed)
    return bad is None and (expected.rejected or _steps_in_order(schedule, observed) is None)


def compare(schedule: Schedule, expected: Trace, observed: Trace, completion_order: str) -> Mismatch | None:
    if completion_order != FREE and _same_events(schedule, expected, observed):
        return None
    expected, observed = _bound(schedule, expected), _bound(schedule, observed)
    if completion_order == FREE:
        return compare_free(schedule, expected, observed)
    mismatch = compare_scripted(schedule, expected, observed)
    legal = getattr(hooks(schedule.area), "legal_reference", None)
    if mismatch is None or legal is None:
        return mismatch
    # The area's freedom of which reference trace holds (conformance/areas/__init__.py)
    other = legal(schedule, expected, observed)
    if other is None:
        return mismatch
    mismatch = compare_scripted(schedule, _bound(schedule, other), observed)
    if mismatch is not None:
        mismatch.reference = other
    return mismatch


# --------------------------------------------------------------------------
# The failure report
# --------------------------------------------------------------------------


def _step_text(s: Step) -> str:
    d = step_to_dict(s)
    op = d.pop("op")
    return (op + " " + " ".join(f"{k}={json.dumps(v)}" for k, v in d.items())).rstrip()


def _window(events: Sequence[Event], step: int, radius: int = 1) -> list[Event]:
    return [e for e in events if step - radius <= e.step <= step + radius]


def event_diff(expected: Sequence[Event], observed: Sequence[Event], context: int = 2) -> list[str]:
    """Expected against observed events as a diff in the spec's notation (`@step event field=...`):
    lines only expected marked '-', only observed '+', and runs of equal lines longer than twice
    `context` cut to their ends."""
    want, got = [str(e) for e in expected], [str(e) for e in observed]
    if not want and not got:
        return ["    (no events)"]
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=want, b=got, autojunk=False).get_opcodes():
        if tag == "equal":
            same = want[i1:i2]
            if len(same) > 2 * context + 1:
                head = same[:context] if out else []
                tail = same[-context:] if i2 < len(want) or j2 < len(got) else []
                out += [f"    {e}" for e in head]
                out.append(f"    … {len(same) - len(head) - len(tail)} equal events")
                out += [f"    {e}" for e in tail]
            else:
                out += [f"    {e}" for e in same]
            continue
        out += [f"-   {e}" for e in want[i1:i2]]
        out += [f"+   {e}" for e in got[j1:j2]]
    return out


def not_one_trace_each(traces: object, n: int) -> str | None:
    """What is wrong with a run_batch's return value for `n` schedules, or None: one Trace each."""
    if isinstance(traces, (list, tuple)) and len(traces) == n and all(isinstance(t, Trace) for t in traces):
        return None
    got = f"{len(traces)} value(s)" if isinstance(traces, (list, tuple)) else type(traces).__name__
    return f"run_batch returned {got} for {n} schedule(s); it must return one Trace per schedule"


def reproducer(schedule: Schedule, adapter_spec: str) -> str:
    return (f"python -m flink_semantics.conformance check --adapter {shlex.quote(adapter_spec)} "
            f"--json {shlex.quote(schedule.to_json())}")


def format_report(schedule: Schedule, mismatch: Mismatch, *, adapter_name: str, adapter_spec: str,
                  expected: Trace, observed: Trace, property_rules: Sequence[str] = ()) -> str:
    rules = ", ".join(mismatch.rules) or "the trace format of spec/schedules.md"
    expected = mismatch.reference or expected  # the area's legal trace closest to the observed one
    maybe = [r for r in mismatch.possible if not property_rules or r in property_rules]
    lines = [f"adapter {adapter_name!r} does not conform: {mismatch.what}",
             f"rules: {rules}" + (f" (may concern too, not singled out: {', '.join(maybe)})" if maybe else "")
             + (f" (the property checks {', '.join(property_rules)})" if property_rules else ""),
             f"config: {json.dumps(config_to_dict(schedule.config))}",
             "schedule:"]
    for i, s in enumerate(schedule.steps):
        mark = ">>" if i == mismatch.step else "  "
        lines.append(f"  {mark} {i:3d}: {_step_text(s)}")
    at = mismatch.step
    if at is not None and at >= 0:
        if at < len(schedule.steps):
            lines.append(f"first divergent step: {at} ({_step_text(schedule.steps[at])})")
        lines.append(f"events of steps {max(at - 1, 0)}..{at + 1}, expected (reference) against observed "
                     f"({adapter_name}): '-' expected only, '+' observed only")
        lines += event_diff(_window(expected.events, at), _window(observed.events, at))
    else:
        lines.append("expected events (reference; FREE: any order the rules allow):")
        lines += [f"    {e}" for e in mismatch.expected] or ["    (none)"]
        lines.append(f"observed events ({adapter_name}):")
        for i, e in enumerate(mismatch.observed):
            lines.append(f"  {'>>' if i == mismatch.position else '  '} {e}")
        if not mismatch.observed:
            lines.append("    (none)")
    lines.append("reproduce: " + reproducer(schedule, adapter_spec))
    return "\n".join(lines)
