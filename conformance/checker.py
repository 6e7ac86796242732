"""Comparing an adapter's trace with the reference trace of the same schedule.

Two comparisons, chosen by the adapter's `completion_order` (spec/adapter.py):

* SCRIPTED adapters complete calls exactly when the schedule says, so their trace must equal the
  reference trace step by step, with one freedom (spec/schedules.md item 7): inside a step, the
  output events (emit, watermark, status) and the side-effect events (invoke, timeout) are two
  sequences whose interleaving is not specified, while every other event (checkpoint, fail,
  finished) keeps its place relative to both.  `_canonical` puts one step's events in that form.

* FREE adapters cannot control when calls complete, so step indices mean nothing to them.  Their
  outputs must be one of the orders the rules allow: a linear extension of a partial order built
  with networkx from the reference outputs and the schedule (AIO-12..AIO-18, AIO-51), where each
  record's results also form one contiguous run (AIO-18).  FREE checking is defined only for
  schedules without timers and without checkpoints, crashes or restores (no timeout, no retry,
  no checkpoint/crash/restore step), without errors or null results, and in which every record
  completes once and input ends: there the outputs do not depend on when calls complete, only on
  the order in which they do.  `free_checkable` says whether a schedule is such a schedule.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import networkx as nx

from adapters.reference import ReferenceAdapter
from spec.adapter import FREE
from spec.schedule import (
    OUTPUT_EVENTS,
    CompleteStep,
    ErrorStep,
    Event,
    RecordStep,
    Schedule,
    StatusStep,
    Step,
    Trace,
    WatermarkStep,
    step_to_dict,
)

SIDE_EFFECTS = frozenset({"invoke", "timeout"})


def reference_trace(schedule: Schedule) -> Trace:
    """The trace the rules require: the reference run, or `rejected` for a refused configuration
    (raises ScheduleError for a malformed schedule)."""
    return ReferenceAdapter().run_one(schedule)


@dataclass
class Mismatch:
    """How an observed trace departs from the expected one."""

    what: str  # one line: what differs
    rules: tuple[str, ...]  # the rules the divergence concerns
    step: int | None = None  # the first diverging step (None when steps are not compared)
    expected: list[Event] = field(default_factory=list)  # expected events around the divergence
    observed: list[Event] = field(default_factory=list)  # observed events around the divergence
    position: int | None = None  # FREE: index of the first bad event in `observed`


# --------------------------------------------------------------------------
# Which rules a kind of divergence concerns (a hint for the report)
# --------------------------------------------------------------------------


def rules_for(kinds: Iterable[str], mode: str) -> tuple[str, ...]:
    out: list[str] = []
    table = {
        "emit": ("AIO-12",) if mode == "ordered" else ("AIO-13", "AIO-14", "AIO-15"),
        "watermark": ("AIO-12", "AIO-15", "AIO-16", "AIO-17") if mode == "ordered"
        else ("AIO-13", "AIO-15", "AIO-16", "AIO-17"),
        "status": ("AIO-51",),
        "invoke": ("AIO-6", "AIO-7", "AIO-9"),
        "timeout": ("AIO-26", "AIO-27", "AIO-31"),
        "checkpoint": ("AIO-44", "AIO-45"),
        "fail": ("AIO-20", "AIO-23", "AIO-28"),
        "finished": ("AIO-42",),
        "rejected": ("AIO-1", "AIO-3"),
    }
    for k in kinds:
        for r in table.get(k, ()):
            if r not in out:
                out.append(r)
    return tuple(out)


# --------------------------------------------------------------------------
# SCRIPTED: exact comparison per step
# --------------------------------------------------------------------------


def _by_step(trace: Trace) -> dict[int, list[Event]]:
    groups: dict[int, list[Event]] = defaultdict(list)
    for e in trace.events:
        groups[e.step].append(e)
    return groups


Group = tuple[str, tuple[Event, ...]]


def _canonical(events: Sequence[Event]) -> list[Group]:
    """One step's events up to the freedom of item 7: every other event (checkpoint, fail,
    finished) in place; between two of them, the outputs and the side effects as two sequences."""
    out: list[Group] = []
    outputs: list[Event] = []
    effects: list[Event] = []

    def flush() -> None:  # empty groups are left out, so the first difference names a real kind
        out.extend((label, tuple(group)) for label, group in
                   (("output events", outputs), ("side-effect events", effects)) if group)
        outputs.clear()
        effects.clear()

    for e in events:
        if e.event in OUTPUT_EVENTS:
            outputs.append(e)
        elif e.event in SIDE_EFFECTS:
            effects.append(e)
        else:
            flush()
            out.append((e.event + " event", (e,)))
    flush()
    return out


def _first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _steps_in_order(schedule: Schedule, trace: Trace) -> Mismatch | None:
    last = -1
    n = len(schedule.steps)
    for e in trace.events:
        if e.step < last or e.step >= n or (e.step < 0 and e.event != "rejected"):
            return Mismatch(f"trace event {e} is out of step order or names no step of the schedule",
                            (), step=max(last, 0), observed=[e])
        last = e.step
    return None


def _rejection(expected: Trace, observed: Trace) -> Mismatch | None:
    """AIO-1, AIO-3: a refused configuration gives exactly one `rejected` event."""
    exp_rej = [e.event for e in expected.events] == ["rejected"]
    obs_rej = [e.event for e in observed.events] == ["rejected"]
    if exp_rej and not obs_rej:
        return Mismatch("the configuration must be refused (a single 'rejected' event)", ("AIO-1", "AIO-3"),
                        step=-1, expected=list(expected.events), observed=list(observed.events)[:6])
    if obs_rej and not exp_rej:
        return Mismatch("a valid configuration was refused", ("AIO-1", "AIO-3"), step=-1,
                        expected=list(expected.events)[:6], observed=list(observed.events))
    return None


def compare_scripted(schedule: Schedule, expected: Trace, observed: Trace) -> Mismatch | None:
    bad = _rejection(expected, observed)
    if bad or [e.event for e in expected.events] == ["rejected"]:
        return bad
    bad = _steps_in_order(schedule, observed)
    if bad:
        return bad
    exp, obs = _by_step(expected), _by_step(observed)
    for step in sorted(set(exp) | set(obs)):
        a, b = _canonical(exp.get(step, [])), _canonical(obs.get(step, []))
        i = _first_difference(a, b)
        if i is None:
            continue
        groups = a[i:i + 1] + b[i:i + 1]
        kinds = {e.event for _, events in groups for e in events}
        return Mismatch(f"step {step}: {groups[0][0]} differ (group {i} of the step)",
                        rules_for(sorted(kinds), schedule.config.mode), step=step,
                        expected=exp.get(step, []), observed=obs.get(step, []))
    return None


# --------------------------------------------------------------------------
# FREE: the partial order of output events
# --------------------------------------------------------------------------


def free_checkable(schedule: Schedule) -> bool:
    """Whether FREE checking is defined for this schedule (see the module docstring)."""
    c = schedule.config
    if c.timeout > 0 or c.retry is not None:
        return False
    if any(s.op in ("checkpoint", "crash", "restore") for s in schedule.steps):
        return False
    if any(isinstance(s, ErrorStep) or (isinstance(s, CompleteStep) and s.result is None)
           for s in schedule.steps):
        return False
    completed = Counter(s.record for s in schedule.steps if isinstance(s, CompleteStep))
    n_records = len(schedule.records)
    if any(completed[r] != 1 for r in range(n_records)):
        return False
    return any(s.op == "end" for s in schedule.steps)


Node = tuple  # ("emit", record, k) | ("watermark", i) | ("status", i)


def _key(e: Event, counts: Counter) -> Node:
    if e.event == "emit":
        k = counts[("emit", e.record)]
        counts[("emit", e.record)] += 1
        return ("emit", e.record, k)
    i = counts[e.event]
    counts[e.event] += 1
    return (e.event, i)


def _input_positions(steps: Sequence[Step]) -> dict[tuple, int]:
    """Position in the input of ("record", r), ("watermark", i) and ("status", i)."""
    pos: dict[tuple, int] = {}
    counts: Counter = Counter()
    for p, s in enumerate(steps):
        kind = {RecordStep: "record", WatermarkStep: "watermark", StatusStep: "status"}.get(type(s))
        if kind:
            pos[(kind, counts[kind])] = p
            counts[kind] += 1
    return pos


def _input_of(node: Node) -> tuple:
    return ("record", node[1]) if node[0] == "emit" else node


def order_graph(schedule: Schedule, outputs: Sequence[Event]) -> nx.DiGraph:
    """The partial order the rules allow on `outputs` (the reference's output events).

    Nodes are ("emit", record, k) for the k-th result of a record, ("watermark", i) and
    ("status", i) for the i-th output watermark or status; each node's `event` attribute is the
    expected event.  An edge u -> v with attribute `rule` means u must come before v.
    """
    g = nx.DiGraph()
    counts: Counter = Counter()
    for e in outputs:
        g.add_node(_key(e, counts), event=e)
    pos = _input_positions(schedule.steps)
    missing = [n for n in g if _input_of(n) not in pos]
    if missing:
        raise ValueError(f"outputs {missing} have no input element in the schedule")
    by_input = sorted(g.nodes, key=lambda n: (pos[_input_of(n)], n))

    def edge(u: Node, v: Node, rule: str) -> None:
        if not g.has_edge(u, v):
            g.add_edge(u, v, rule=rule)

    # AIO-18: a record's results in result order.
    for n in by_input:
        if n[0] == "emit" and n[2] > 0:
            edge(("emit", n[1], n[2] - 1), n, "AIO-18")
    queued = [n for n in by_input if n[0] != "status"]
    if schedule.config.mode == "ordered":
        # AIO-12: records and watermarks leave in input order.
        for u, v in zip(queued, queued[1:]):
            edge(u, v, "AIO-12")
    else:
        # AIO-13, AIO-15, AIO-17: watermarks in input order; a record neither overtakes a watermark
        # nor is overtaken by one; inside a segment any order (AIO-14: completion order, which a
        # FREE adapter does not control).
        marks = [n for n in queued if n[0] == "watermark"]
        for u, v in zip(marks, marks[1:]):
            edge(u, v, "AIO-17")
        for n in queued:
            if n[0] != "emit":
                continue
            before = [m for m in marks if pos[m] < pos[_input_of(n)]]
            after = [m for m in marks if pos[m] > pos[_input_of(n)]]
            if before:
                edge(before[-1], n, "AIO-15")
            if after:
                edge(n, after[0], "AIO-15")
    # AIO-51: a status bypasses the queue: it is emitted when it is taken from the input, so after
    # the statuses before it and before any output of a later input element.
    statuses = [n for n in by_input if n[0] == "status"]
    for u, v in zip(statuses, statuses[1:]):
        edge(u, v, "AIO-51")
    for s in statuses:
        for n in queued:
            if pos[_input_of(n)] > pos[s]:
                edge(s, n, "AIO-51")
    return g


def _free_outputs(schedule: Schedule, expected: Trace, observed: Trace) -> Mismatch | None:
    exp_out = [e for e in expected.events if e.event in OUTPUT_EVENTS]
    obs_out = [e for e in observed.events if e.event in OUTPUT_EVENTS]
    mode = schedule.config.mode
    g = order_graph(schedule, exp_out)
    counts: Counter = Counter()
    keys = [_key(e, counts) for e in obs_out]

    def fail(what: str, rules: tuple[str, ...], at: int | None) -> Mismatch:
        return Mismatch(what, rules, expected=exp_out, observed=obs_out, position=at)

    for i, (k, e) in enumerate(zip(keys, obs_out)):
        if k not in g:
            return fail(f"extra output {e}: the reference emits no such output",
                        rules_for([e.event], mode), i)
        want = g.nodes[k]["event"]
        if e.data != want.data:
            rule = ("AIO-18",) if e.event == "emit" else rules_for([e.event], mode)
            return fail(f"output {e} should be {want} (value and input timestamp)", rule, i)
    seen = set(keys)
    absent = [n for n in g.nodes if n not in seen]
    if absent:
        return fail(f"missing output {g.nodes[absent[0]]['event']}", rules_for([absent[0][0]], mode), None)
    at = {k: i for i, k in enumerate(keys)}
    violated = [(at[v], u, v) for u, v in g.edges if at[u] > at[v]]
    if violated:
        i, u, v = min(violated)
        return fail(f"{g.nodes[v]['event']} must come after {g.nodes[u]['event']}",
                    (g.edges[u, v]["rule"],), i)
    # AIO-18: one contiguous run per record.
    runs: dict[int, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        if k[0] == "emit":
            runs[k[1]].append(i)
    for record, places in runs.items():
        gap = next((i for i in range(places[0], places[-1]) if i not in places), None)
        if gap is not None:
            return fail(f"the results of record {record} are split by {obs_out[gap]}", ("AIO-18",), gap)
    return None


def compare_free(schedule: Schedule, expected: Trace, observed: Trace) -> Mismatch | None:
    bad = _rejection(expected, observed)
    if bad or [e.event for e in expected.events] == ["rejected"]:
        return bad
    if not free_checkable(schedule):
        raise ValueError("FREE checking is defined only for schedules that free_checkable() accepts")
    bad = _free_outputs(schedule, expected, observed)
    if bad:
        return bad
    for kind, fields_ in (("invoke", ("record", "attempt")), ("fail", ("record", "reason")),
                          ("timeout", ("record",)), ("checkpoint", ("id",)), ("finished", ())):
        exp = Counter(tuple(getattr(e, f) for f in fields_) for e in expected.events if e.event == kind)
        obs = Counter(tuple(getattr(e, f) for f in fields_) for e in observed.events if e.event == kind)
        if exp != obs:
            return Mismatch(f"{kind} events differ (compared as a multiset): "
                            f"expected {sorted(exp.elements())}, observed {sorted(obs.elements())}",
                            rules_for([kind], schedule.config.mode),
                            expected=[e for e in expected.events if e.event == kind],
                            observed=[e for e in observed.events if e.event == kind])
    if observed.events and any(e.event == "finished" for e in observed.events) \
            and observed.events[-1].event != "finished":
        return Mismatch("'finished' must be the last event", ("AIO-42",), observed=list(observed.events[-4:]))
    return None


def compare(schedule: Schedule, expected: Trace, observed: Trace, completion_order: str) -> Mismatch | None:
    if completion_order == FREE:
        return compare_free(schedule, expected, observed)
    return compare_scripted(schedule, expected, observed)


# --------------------------------------------------------------------------
# The failure report
# --------------------------------------------------------------------------


def _step_text(s: Step) -> str:
    d = step_to_dict(s)
    op = d.pop("op")
    return (op + " " + " ".join(f"{k}={json.dumps(v)}" for k, v in d.items())).rstrip()


def _window(events: Sequence[Event], step: int, radius: int = 1) -> list[Event]:
    return [e for e in events if step - radius <= e.step <= step + radius]


def reproducer(schedule: Schedule, adapter_spec: str) -> str:
    return (f"python -m conformance check --adapter {shlex.quote(adapter_spec)} "
            f"--json {shlex.quote(schedule.to_json())}")


def format_report(schedule: Schedule, mismatch: Mismatch, *, adapter_name: str, adapter_spec: str,
                  expected: Trace, observed: Trace, property_rules: Sequence[str] = ()) -> str:
    rules = ", ".join(mismatch.rules) or "the trace format of spec/schedules.md"
    lines = [f"adapter {adapter_name!r} does not conform: {mismatch.what}",
             f"rules: {rules}" + (f" (the property checks {', '.join(property_rules)})" if property_rules
                                  else ""),
             f"config: {json.dumps(schedule.config.to_dict())}",
             "schedule:"]
    for i, s in enumerate(schedule.steps):
        mark = ">>" if i == mismatch.step else "  "
        lines.append(f"  {mark} {i:3d}: {_step_text(s)}")
    if mismatch.step is not None and mismatch.step >= 0:
        lines.append(f"expected events (reference), steps {max(mismatch.step - 1, 0)}..{mismatch.step + 1}:")
        lines += [f"    {e}" for e in _window(expected.events, mismatch.step)] or ["    (none)"]
        lines.append(f"observed events ({adapter_name}), same steps:")
        lines += [f"    {e}" for e in _window(observed.events, mismatch.step)] or ["    (none)"]
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
