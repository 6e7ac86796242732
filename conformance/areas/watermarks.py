"""The conformance part of the watermarks area: invariants, coverage, and the checker's hooks.

The strategies (valid schedules drawn step by step, malformed ones, the async I/O operator fed from
the valve) are in conformance/areas/watermarks_strategies.py; this module re-exports them.
`COVERAGE` and `coverage` name the rare states where engines get watermarks wrong, and their floors
(conformance/coverage.py).

The checker's hooks (conformance/areas/__init__.py): this area's traces are compared exactly
(SCRIPTED); a FREE adapter cannot be checked on them (`free_checkable` is False); a difference
names the rule it shows broken, the others it may concern inconclusive (`rules_for_events`,
conformance/areas/watermarks_blame.py).

`monotonic_problems` states WM-7, WM-11 and WM-18 on a trace directly: within one attempt of the
job, what each reader sends and what the valve emits strictly increase.  The properties hold the
oracle's traces to it, so the oracle cannot drift from the invariant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flink_semantics.conformance.areas import (
    Blame,
    never_free,
    no_order_graph,
    no_output_keys,
    rules_from,
    watermarks_blame,
)
from flink_semantics.conformance.areas.watermarks_strategies import (  # noqa: F401 (re-exported)
    Features,
    downstream_inputs,
    feature_batches,
    into_async_io,
    malformed_schedules,
    schedules,
)
from flink_semantics.reference.watermarks import Model
from flink_semantics.spec.areas.watermarks import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    AlignStep,
    EndStep,
    RecordStep,
)
from flink_semantics.spec.schedule import Event, Schedule, Trace, validate_schedule

AREA = "watermarks"

# --------------------------------------------------------------------------
# The checker's hooks
# --------------------------------------------------------------------------

_RULES = {
    "record": ("WM-1", "WM-25", "WM-26"),
    "watermark": ("WM-2", "WM-3", "WM-4", "WM-5", "WM-6", "WM-7", "WM-8", "WM-10", "WM-11", "WM-13", "WM-15",
                  "WM-16"),
    "status": ("WM-6", "WM-11", "WM-12", "WM-13", "WM-14"),  # WM-6: the combination of idle splits is idle
    "output_watermark": ("WM-17", "WM-18", "WM-19", "WM-20"),
    "output_status": ("WM-19", "WM-21"),
    "split_finished": ("WM-9", "WM-15"),
    "max_allowed": ("WM-22", "WM-23", "WM-24"),
    "blocked": ("WM-25",),
    "unblocked": ("WM-25",),
    "paused": ("WM-26",),
    "resumed": ("WM-26",),
    "restarted": ("WM-16",),
}


rules_for = rules_from(_RULES)  # the rules a divergence in these event kinds concerns


def rules_for_events(schedule: Schedule, step: int, expected: Sequence[Event],
                     observed: Sequence[Event], later: Sequence[Event] = ()) -> tuple[str, ...] | Blame:
    """The rule a difference between these events of one step shows broken, and those it may
    concern but does not single out (conformance/areas/watermarks_blame.py: read against the
    spec's rules and the reference model's state at the difference); anything no diagnosis
    explains: the kinds' rules."""
    return watermarks_blame.blame(schedule, step, expected, observed) or ()


# Every event of this area is placed by the schedule's steps: compared exactly, never FREE.
free_checkable, order_graph, output_keys = never_free, no_order_graph, no_output_keys
FREE_MULTISETS: dict[str, tuple[str, ...]] = {}


# --------------------------------------------------------------------------
# Invariants stated on a trace
# --------------------------------------------------------------------------


def monotonic_problems(trace: Trace) -> list[str]:
    """WM-7, WM-11, WM-18: within an attempt (between `restarted` events), every watermark a reader
    sends is above the ones it sent before, and so is every watermark the valve emits."""
    problems: list[str] = []
    last: dict[Any, int] = {}
    for e in trace.events:
        if e.event == "restarted":
            last = {}
        elif e.event in ("watermark", "output_watermark"):
            who = e.reader if e.event == "watermark" else "valve"
            if who in last and e.value <= last[who]:
                problems.append(f"@{e.step} {who}: watermark {e.value} after {last[who]}")
            last[who] = e.value
    return problems


# --------------------------------------------------------------------------
# Generator coverage (conformance/coverage.py)
# --------------------------------------------------------------------------

ALL_IDLE = "every channel of the valve idle at once (two readers or more)"
BACK_BELOW = "an idle reader back active below the valve's output"
BLOCKED = "a reader blocked by alignment"
PAUSED = "a split paused by alignment"
END_IDLE = "end of input with an idle reader"
RESTART_ALIGNED = "a failover while alignment holds a reader or a split"
FLUSH_BELOW = ("the valve's last active channel goes idle below its output while an idle one holds a "
               "higher watermark")
BACK_ALONE = "an idle channel back active moves the valve's output before its next watermark"
# Combinations (issue 32 item 6): where two features meet.
IDLE_HELD = "a reader idle while alignment holds another reader or a split (idleness and alignment)"
IDLE_ABOVE = ("an idle split above the allowed maximum at an alignment check: neither paused nor resumed "
              "(idleness and split alignment, WM-26)")
AT_ALLOWED = "a reader's watermark exactly at the allowed maximum at a check: it goes on reading (WM-25)"
IDLE_ADVANCES = "a channel going idle moves the valve's output up while another channel is active (WM-19)"
OUT_OF_ORDER = ("a record below its split's highest timestamp while another split of its reader is "
                "active (per-split generators and out-of-order timestamps, WM-2, WM-4)")

# State -> floor: the least share of the area's distinct schedules that must reach it.  Measured
# with `pytest conformance/test_watermarks.py conformance/test_coverage.py --adapter reference
# --areas watermarks` (4853 schedules; the share in parentheses), each floor about half of it.
COVERAGE = {
    ALL_IDLE: 0.08,  # (17.0%) test_valve's rounds end so, and idleness with several readers
    BACK_BELOW: 0.03,  # (7.5%) test_valve
    BLOCKED: 0.015,  # (3.2%) test_alignment, test_monotonic_within_an_attempt: `leap`
    PAUSED: 0.025,  # (5.7%) the same
    END_IDLE: 0.06,  # (11.9%) idleness with `end`
    RESTART_ALIGNED: 0.01,  # (1.9%) test_monotonic_within_an_attempt: a failover after a `leap`
    FLUSH_BELOW: 0.009,  # (1.9%) test_valve's relay: where Flink 2.3.0 flushes nothing (D1)
    BACK_ALONE: 0.008,  # (1.7%) test_valve's relay: where Flink 2.3.0 stalls (D1)
    # Combinations (issue 32 item 6), measured in the same run (4853 schedules):
    IDLE_HELD: 0.003,  # (0.7%) test_alignment: `idle_leap`
    IDLE_ABOVE: 0.012,  # (2.6%) test_alignment, test_monotonic_within_an_attempt: `idle_leap`
    AT_ALLOWED: 0.004,  # (0.9%) the same: `edge`
    IDLE_ADVANCES: 0.07,  # (14.6%) idleness with several readers
    OUT_OF_ORDER: 0.11,  # (23.4%) records at drawn timestamps on several splits
}


def _possible(schedule: Schedule) -> set[str]:
    """The states the schedule's configuration and steps leave possible."""
    c, ops = schedule.config, {s.op for s in schedule.steps}
    out = set()
    if c.idleness is not None:
        out |= {ALL_IDLE, BACK_BELOW} if c.readers >= 2 else set()
        out |= {FLUSH_BELOW, BACK_ALONE} if c.readers >= 3 else set()  # D1: neither with two channels
        out |= {END_IDLE} if "end" in ops else set()
        out |= {IDLE_ADVANCES} if c.readers >= 2 else set()
    if c.max_drift is not None and "align" in ops:
        out |= {BLOCKED, PAUSED, AT_ALLOWED} | ({RESTART_ALIGNED} if "failover" in ops else set())
        out |= {IDLE_HELD, IDLE_ABOVE} if c.idleness is not None else set()
    return out | {OUT_OF_ORDER}


def coverage(schedule: Schedule) -> list[str]:
    """The rare states of the watermarks area a schedule reaches, read from its reference trace
    (the model run step by step, until every state left possible is found); none for a malformed
    schedule."""
    possible = _possible(schedule)
    if not possible:
        return []
    validate_schedule(schedule)  # ScheduleError: none (conformance/coverage.py)
    model = Model(schedule.config)
    return _states(schedule, model, possible)


def _states(schedule: Schedule, model: Model, possible: set[str]) -> list[str]:
    found: set[str] = set()
    output = MIN_WATERMARK  # the valve's last output in this attempt
    back: set[int] = set()  # readers whose ACTIVE came and whose next watermark did not yet
    held: set[Any] = set()  # blocked readers and paused splits, in this attempt
    sent: dict[int, int] = {}  # each reader's last watermark in this attempt: its channel's (WM-17)
    cause: tuple[Event, int] | None = None  # the step's last reader status since its last watermark,
    # and the valve's output before it: what the valve's outputs after it answer (WM-19, WM-20)
    top: dict[int, int] = {}  # each split's highest timestamp so far
    for i, s in enumerate(schedule.steps):
        if found >= possible:
            break
        if isinstance(s, RecordStep) and s.ts < top.get(s.split, s.ts) and _sibling_active(model, s.split):
            found.add(OUT_OF_ORDER)  # WM-2, WM-4
        if isinstance(s, RecordStep):
            top[s.split] = max(top.get(s.split, s.ts), s.ts)
        cause = None
        events = model.apply(i, s)
        if isinstance(s, AlignStep):
            found |= _after_a_round(model)
        for e in events:
            if e.event == "output_watermark":
                if cause is not None and cause[0].idle and any(not c.idle for c in model.valve.channels):
                    found.add(IDLE_ADVANCES)  # WM-19: the channel leaves the minimum
                if cause is not None and not cause[0].idle:
                    found.add(BACK_ALONE)  # WM-20, D1: 2.3.0 waits for the channel's next watermark
                output = e.value
            elif e.event == "output_status" and e.idle and schedule.config.readers >= 2:
                found.add(ALL_IDLE)  # WM-21, D1
                if cause is not None and output > cause[1] and sent.get(cause[0].reader) != cause[1]:
                    found.add(FLUSH_BELOW)  # WM-19, D1: 2.3.0 flushes only from the channel at the output
            elif e.event == "status":
                if e.idle and held and any(h != ("blocked", e.reader) for h in held):
                    found.add(IDLE_HELD)
                cause = (e, output)
                if not e.idle:
                    back.add(e.reader)
                    if isinstance(s, EndStep):
                        found.add(END_IDLE)  # WM-15, D2
            elif e.event == "watermark":
                cause, sent[e.reader] = None, e.value
                if e.reader in back:
                    back.discard(e.reader)
                    if e.value < output:
                        found.add(BACK_BELOW)  # WM-20
            elif e.event in ("blocked", "paused"):
                found.add(BLOCKED if e.event == "blocked" else PAUSED)  # WM-25, WM-26
                held.add((e.event, e.reader if e.event == "blocked" else e.split))
            elif e.event in ("unblocked", "resumed"):
                held.discard(("blocked" if e.event == "unblocked" else "paused",
                              e.reader if e.event == "unblocked" else e.split))
            elif e.event == "restarted":
                if held:
                    found.add(RESTART_ALIGNED)  # WM-16: alignment starts afresh
                output, back, held, sent = MIN_WATERMARK, set(), set(), {}
    return sorted(found)


def _sibling_active(model: Model, split: int) -> bool:
    """Whether another split of the split's reader is registered and not idle (in the model,
    before the step)."""
    reader = model.split_reader.get(split)
    if reader is None:
        return False
    return any(s != split and not p.idle for s, p in model.readers[reader].mux.partials.items())


def _after_a_round(model: Model) -> set[str]:
    """The combinations an alignment round leaves (the model after its last checks): a reader whose
    sampled watermark is the allowed maximum (WM-25's boundary), a split idle above it (WM-26)."""
    out = set()
    for reader in model.readers:
        allowed = reader.max_allowed
        if allowed != MAX_WATERMARK and reader.latest.oldest() == allowed:
            out.add(AT_ALLOWED)
        if any(state.idle and state.sampler.oldest() > allowed for state in reader.splits.values()):
            out.add(IDLE_ABOVE)
    return out


def overtaking_problems(schedule: Schedule, trace: Trace) -> list[str]:
    """AIO-15 stated on an async I/O trace from the schedule alone: a record admitted before a
    watermark is emitted before it, one admitted after it is emitted after it (every input here is
    admitted when it arrives; watermarks come out in their input order, AIO-17)."""
    order: list[tuple[str, int]] = []  # ("record", index) / ("watermark", k), in input order
    records = watermarks = 0
    for s in schedule.steps:
        if s.op == "record":
            order.append(("record", records))
            records += 1
        elif s.op == "watermark":
            order.append(("watermark", watermarks))
            watermarks += 1
    position = {item: i for i, item in enumerate(order)}
    out: list[tuple[str, int]] = []
    k = 0
    for e in trace.events:
        if e.event == "emit":
            out.append(("record", e.record))
        elif e.event == "watermark":
            out.append(("watermark", k))
            k += 1
    problems = []
    for i, a in enumerate(out):
        for b in out[i + 1:]:
            if a[0] != b[0] and position[a] > position[b]:
                problems.append(f"{a[0]} {a[1]} came out before {b[0]} {b[1]}, which was admitted before it")
    return problems
