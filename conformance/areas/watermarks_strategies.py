"""The strategies of the watermarks area: valid schedules drawn step by step (WM-29 holds by
construction), and malformed schedules broken in one way (or two, where the checks are ordered) that
name their rule.

`Features` says which parts of the vocabulary a property uses; `Features.restrict` drops what an
adapter cannot run.  A configuration is drawn field by field (`draw_config`), then a list of moves
(`moves`): each its kind, then only the fields that kind uses (`_FIELDS`: a record its split and
timestamp, a tick its duration, an added split its reader, a finish its split, align and failover
nothing), each field with its own strategy, so that shrinking drops any single move and simplifies
any field towards the plainest step (a record with a small timestamp); no drawn integer stands for
several fields.  The moves are a list of lists, so that a schedule has about fifteen of them (a flat
`st.lists` averages five and its average cannot be set).  With alignment, some moves are bursts
(`leap`: a split far ahead, then announcements) so that readers and splits are held, and failovers
come while they are; `edge` puts a reader exactly at the allowed maximum or one above it (WM-25's
boundary), and `idle_leap` lets a split far ahead go idle before the announcements (idleness and
split alignment together, WM-26); a burst draws its split, the other split it writes to and its
offset, and shrinking removes it, or turns it into a plain step, as a whole.  Malformed schedules
combine two causes too (`_refused_twice`), where the checks are ordered.  The valve's property draws
rounds of records and silences instead, and some of them follow D1's relay among three readers
(`_relay`), so that both halves of Flink 2.3.0's valve bug show.  `into_async_io` feeds what the
valve's task receives into an async I/O operator.  The rare states these reach, and their floors,
are in conformance/areas/watermarks.py (`COVERAGE`, `coverage`).

The strategies are built once and drawn many times (module constants, `functools.cache` on the
factories): hypothesis validates each new strategy object and looks `st.integers(a, b)` up in a
cache, which cost more than the draws themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from flink_semantics.conformance.strategies import Malformed, batches
from flink_semantics.conformance.strategies import with_changes as _with
from flink_semantics.spec.adapter import unsupported
from flink_semantics.spec.areas.watermarks import (
    AddSplitStep,
    AlignStep,
    EndStep,
    FailoverStep,
    FinishSplitStep,
    RecordStep,
    TickStep,
    WatermarksConfig,
)
from flink_semantics.spec.schedule import Schedule, Step, Trace
from hypothesis import strategies as st

AREA = "watermarks"

# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Features:
    """Which parts of the vocabulary a strategy uses."""

    max_readers: int = 1
    min_readers: int = 1
    max_splits: int = 3  # per reader
    punctuated: bool = False
    idleness: bool = False
    alignment: bool = False
    failover: bool = False
    finish: bool = True  # finish_split steps
    end: bool = True  # schedules may end with `end`
    rounds: bool = False  # one split per reader, then rounds: records for some readers, then a tick
    max_steps: int = 20

    def restrict(self, capabilities: Mapping[str, str | None], completion_order: str) -> Features:
        """These features without the ones the adapter does not support."""
        ok = lambda cap: unsupported(capabilities, f"watermarks.{cap}") is None  # noqa: E731
        channels = ok("channels")
        return replace(self, max_readers=self.max_readers if channels else 1,
                       min_readers=self.min_readers if channels else 1,
                       punctuated=self.punctuated and ok("punctuated"),
                       idleness=self.idleness and ok("idleness"),
                       alignment=self.alignment and ok("alignment"),
                       failover=self.failover and ok("failover"))


# Strategies built once and drawn many times: building one per draw (`st.integers(a, b)`, a
# composite) costs a cache look-up and a validation each time, more than the draw.
_BOUNDS = st.integers(0, 3)
_INTERVALS = st.sampled_from((10, 5))
_IDLENESS = st.sampled_from((15, 10, 25))
_DRIFTS = st.sampled_from((5, 10, 20))
_BUFFERS = st.integers(0, 3)
_BOOLEANS = st.booleans()


@functools.cache
def _readers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


def draw_config(draw: Any, f: Features) -> WatermarksConfig:
    """A configuration, field by field, each shrinking towards its plainest value."""
    return WatermarksConfig(
        readers=draw(_readers(f.min_readers, f.max_readers)),
        bound=draw(_BOUNDS),
        interval=draw(_INTERVALS),
        idleness=draw(_IDLENESS) if f.idleness else None,
        max_drift=draw(_DRIFTS) if f.alignment else None,
        alignment_buffer=draw(_BUFFERS) if f.alignment else 3,
        punctuated=f.punctuated and draw(_BOOLEANS),
    )


@dataclass(frozen=True)
class Move:
    """One drawn step: its kind, then only the fields that kind uses, each with a strategy of its own
    (`which`: a live split, or a reader; `value`: a timestamp, a duration, or a burst's offset;
    `other`: the other split a burst writes to), so that shrinking can drop the move and simplify
    each field.  A burst (`leap`, `edge`, `idle_leap`) is one move of several steps, which shrinking
    removes or turns into a plain step as a whole."""

    kind: str
    which: int = 0
    value: int = 0
    other: int = 0


_WHICH = st.integers(0, 7)  # a live split (modulo their number), or a reader
_VALUE = st.integers(0, 47)  # a timestamp; a duration (modulo the configuration's span)
_OFFSET = st.integers(0, 7)  # how far beyond every drift a leap goes; an edge's 1 above the drift
_FIELDS: dict[str, tuple[tuple[str, st.SearchStrategy[int]], ...]] = {
    "record": (("which", _WHICH), ("value", _VALUE)),
    "tick": (("value", _VALUE),),
    "add_split": (("which", _WHICH),),
    "finish_split": (("which", _WHICH),),
    "align": (),
    "failover": (),
    "leap": (("which", _WHICH), ("other", _WHICH), ("value", _OFFSET)),
    "edge": (("which", _WHICH), ("other", _WHICH), ("value", _BOOLEANS)),
    "idle_leap": (("which", _WHICH), ("other", _WHICH), ("value", _OFFSET)),
}


def _kinds(f: Features) -> tuple[str, ...]:
    """The kinds of move a feature set draws, weighted by repetition, the plainest first."""
    kinds = ["record"] * 3 + ["tick"] * 3 + ["add_split"] * 2 + (["finish_split"] if f.finish else [])
    if f.alignment:
        kinds += ["align"] * 4 + ["leap", "edge"] + (["idle_leap"] if f.idleness else [])
    return (*kinds, *(["failover"] if f.failover else []))


@st.composite
def _move(draw: Any, kinds: st.SearchStrategy[str]) -> Move:
    """A move: its kind, then the fields that kind uses (`_FIELDS`), and no others."""
    kind = draw(kinds)
    return Move(kind, **{name: int(draw(field)) for name, field in _FIELDS[kind]})


@functools.cache
def moves(f: Features) -> st.SearchStrategy[list[Move]]:
    """About fifteen moves on average: a list of lists (a flat `st.lists` averages five, and its
    average cannot be set), one strategy per feature set."""
    move = _move(st.sampled_from(_kinds(f)))
    return st.lists(st.lists(move, min_size=1, max_size=10), min_size=1, max_size=5).map(
        lambda chunks: [m for chunk in chunks for m in chunk])


class _Drawing:
    """One schedule being drawn: the splits added and finished so far."""

    def __init__(self, f: Features, config: WatermarksConfig):
        self.f, self.config = f, config
        self.splits: dict[int, int] = {}  # split -> reader
        self.finished: set[int] = set()
        self.steps: list[Step] = []
        self.top = 0  # the highest timestamp of a record so far

    def live(self) -> list[int]:
        return [s for s in self.splits if s not in self.finished]

    def steps_of(self, m: Move) -> list[Step]:
        """The steps a move stands for in the schedule drawn so far: always valid (WM-29); a move
        that has nothing to act on (a record with no live split) adds a split, or ticks."""
        live, c = self.live(), self.config
        room = len(self.splits) < self.f.max_splits * c.readers
        add = AddSplitStep(m.which % c.readers, len(self.splits))
        if m.kind in ("record", "finish_split", "leap", "edge", "idle_leap") and not live:
            return [add if room else TickStep(1 + m.value % 5)]
        if m.kind == "record":
            return [RecordStep(live[m.which % len(live)], m.value)]
        if m.kind == "add_split" and room:
            return [add]
        if m.kind == "finish_split":
            return [FinishSplitStep(live[m.which % len(live)])]
        if m.kind == "align":
            return [AlignStep()]
        if m.kind == "failover":
            return [FailoverStep()]
        if m.kind in ("leap", "edge", "idle_leap"):
            return list(getattr(self, m.kind)(live, m))
        return [TickStep(1 + m.value % (2 * c.interval + 3))]

    def leap(self, live: list[int], m: Move) -> list[Step]:
        """A record on another live split (`other`) at the highest timestamp so far, one on a live
        split (`which`) beyond every drift ahead of it (by 21 + `value`), a periodic interval, and
        announcements until the samplers hold it (WM-22..WM-24): that split, or its reader, is ahead
        and is held (WM-25, WM-26); with failovers, one follows while it is held (WM-16: alignment
        starts afresh)."""
        split = live[m.which % len(live)]
        others = [s for s in live if s != split]
        steps: list[Step] = [RecordStep(others[m.other % len(others)], self.top)] if others else []
        steps += [RecordStep(split, self.top + 21 + m.value), TickStep(self.config.interval)]
        steps += [AlignStep()] * max(1, self.config.alignment_buffer)
        return steps + [FailoverStep()] if self.f.failover else steps

    def _rounds_to_hold(self) -> list[Step]:
        """A periodic interval, then announcements until the samplers hold what it sent (WM-22..WM-24)."""
        return [TickStep(self.config.interval)] + [AlignStep()] * max(1, self.config.alignment_buffer)

    def edge(self, live: list[int], m: Move) -> list[Step]:
        """A record on a live split (`other`) of another reader at the highest timestamp so far, and
        one on a live split (`which`) exactly the drift above it, or one more (`value`): a reader at
        the allowed maximum goes on reading, one above it stops (WM-25's boundary)."""
        split = live[m.which % len(live)]
        lows = [s for s in live if self.splits[s] != self.splits[split]] or [s for s in live if s != split]
        steps: list[Step] = [RecordStep(lows[m.other % len(lows)], self.top)] if lows else []
        drift = self.config.max_drift or 0
        steps.append(RecordStep(split, self.top + drift + m.value))
        return steps + self._rounds_to_hold()

    def idle_leap(self, live: list[int], m: Move) -> list[Step]:
        """A split (`which`) far ahead (by 21 + `value`), then silent while another split (`other`, of
        its reader if it has one) goes on at the highest timestamp so far, past the idleness timeout,
        then announcements: an idle split above the allowed maximum, which alignment neither pauses
        nor resumes (WM-26), and an idle reader while others are held (WM-14, WM-25)."""
        split = live[m.which % len(live)]
        siblings = [s for s in live if s != split and self.splits[s] == self.splits[split]]
        talking = siblings or [s for s in live if s != split]
        steps: list[Step] = [RecordStep(split, self.top + 21 + m.value), TickStep(self.config.interval)]
        for _ in range((self.config.idleness or 0) // max(self.config.interval, 1) + 2):
            steps += [RecordStep(talking[m.other % len(talking)], self.top)] if talking else []
            steps.append(TickStep(self.config.interval))
        return steps + [AlignStep()] * max(1, self.config.alignment_buffer)

    def apply(self, s: Step) -> None:
        if isinstance(s, AddSplitStep):
            self.splits[s.split] = s.reader
        elif isinstance(s, FinishSplitStep):
            self.finished.add(s.split)
        elif isinstance(s, RecordStep):
            self.top = max(self.top, s.ts)
        self.steps.append(s)


_TOGGLE = st.integers(0, 3)
_RISE = st.integers(1, 2)


@functools.cache
def _round_lists(readers: int) -> st.SearchStrategy[list[list[tuple[tuple[int, int], ...]]]]:
    """Rounds (lists of lists, about fifteen), each a (toggle, rise) for every reader."""
    one = st.tuples(*[st.tuples(_TOGGLE, _RISE)] * readers)
    return st.lists(st.lists(one, min_size=1, max_size=10), min_size=1, max_size=5)


@functools.cache
def _permutations(readers: int) -> st.SearchStrategy[list[int]]:
    return st.permutations(range(readers))


def _rounds(draw: Any, config: WatermarksConfig) -> list[Step]:
    """One split per reader, then rounds: a record for each reader that is talking, then a
    periodic interval; each round, each reader starts talking, or falls silent, or talks again with
    odds of one in four (a drawn 3 of 0..3; 0, where shrinking goes, changes nothing), and its
    timestamp rises by a drawn 1 or 2.  Reader r's timestamps rise from 100 x r, so the readers'
    watermarks are ordered.  At the end, silence until every reader is idle, in the order of their
    last records.  So the valve's channels go idle, and come back below or above its output, in many
    orders (WM-19, WM-20)."""
    rounds = draw(_round_lists(config.readers))
    steps: list[Step] = [AddSplitStep(r, r) for r in range(config.readers)]
    ts = [100 * r for r in range(config.readers)]
    talking = [True] * config.readers
    for per_reader in (x for chunk in rounds for x in chunk):
        for r, (toggle, rise) in enumerate(per_reader):
            talking[r] = talking[r] != (toggle == 3)
            if talking[r]:
                ts[r] += rise
                steps.append(RecordStep(r, ts[r]))
        steps.append(TickStep(max(config.interval, 1)))
    steps.append(TickStep(max(config.interval, 1) * 3 + (config.idleness or 0)))
    return steps


def _relay(draw: Any, config: WatermarksConfig) -> list[Step]:
    """D1's relay (WM-19, WM-20) among three readers, whose roles (low, middle, high: timestamps
    rising from 0, 100, 200) are a drawn permutation; any other reader stays silent.  Phases, each a
    record for every talking reader and then idleness + interval ms, so that a reader silent for a
    phase goes idle in it and a talking one never does; each phase is drawn once or twice, each
    timestamp rises by a drawn 1 or 2.  All talk; the high one falls silent (idle above the valve's
    output); the low one too (the output moves to the middle one's); the low one talks again (back
    below the output: unaligned); the middle one falls silent (no active channel is aligned); then,
    if drawn, the high one talks again (back as the only aligned channel: Flink 2.3.0 stalls), and
    the silence at the end leaves the low one, or the high one, last (Flink 2.3.0 flushes nothing,
    the fix the maximum)."""
    steps: list[Step] = [AddSplitStep(r, r) for r in range(config.readers)]
    low, middle, high = draw(_permutations(config.readers))[:3]
    roles = [low, middle, high]
    ts = {r: 100 * roles.index(r) for r in roles}
    phases = [set(), {high}, {high, low}, {high}, {high, middle}]
    phases += [{middle}] if draw(_BOOLEANS) else []
    for silent in phases:
        for _ in range(draw(_RISE)):
            for r in roles:
                if r not in silent:
                    ts[r] += draw(_RISE)
                    steps.append(RecordStep(r, ts[r]))
            steps.append(TickStep((config.idleness or 0) + max(config.interval, 1)))
    steps.append(TickStep(max(config.interval, 1) * 3 + (config.idleness or 0)))
    return steps


@st.composite
def schedules(draw: Any, f: Features, config: WatermarksConfig | None = None) -> Schedule:
    """A valid watermarks schedule using the features: a configuration drawn field by field, then
    moves (`moves`), or, for the valve, rounds (`_rounds`, or `_relay` one time in four with three
    readers and idleness)."""
    if config is None:
        config = draw_config(draw, f)
    d = _Drawing(f, config)
    if f.rounds:
        relay = config.readers >= 3 and config.idleness is not None and draw(_TOGGLE) == 3
        rounds = (_relay if relay else _rounds)(draw, config)
        for s in rounds[: f.max_steps - 1] + rounds[-1:]:
            d.apply(s)
    else:
        for m in draw(moves(f))[: f.max_steps]:
            for s in d.steps_of(m):
                d.apply(s)
    if f.end and draw(_BOOLEANS):
        d.apply(EndStep())
    return Schedule(AREA, config, tuple(d.steps))


@functools.cache
def _schedules_of(f: Features) -> st.SearchStrategy[Schedule]:
    """`schedules(f)`, one strategy per feature set."""
    return schedules(f)


@functools.cache
def feature_batches(f: Features, max_size: int = 12) -> st.SearchStrategy[list[Schedule]]:
    """Batches of schedules using the features: one strategy per feature set and size."""
    return batches(_schedules_of(f), max_size)


# --------------------------------------------------------------------------
# Malformed schedules (WM-28, WM-29 and the shared SCH rules)
# --------------------------------------------------------------------------


@st.composite
def malformed_schedules(draw: Any) -> Malformed:
    """A valid schedule broken in one way that names its rule and its step."""
    base: Schedule = draw(_schedules_of(Features(max_readers=3, max_steps=8, end=False)))
    steps = base.to_dict()["steps"]
    n = len(steps)
    kind = draw(st.sampled_from(("zero idleness", "negative drift", "unknown reader", "split added twice",
                                 "record of an unknown split", "record after finish", "align unaligned",
                                 "end in the middle", "negative bound", "unknown op", *_TWICE)))
    if kind in _TWICE:
        return _refused_twice(base, kind)
    if kind == "zero idleness":
        return Malformed(_with(base, {"idleness": 0}), None, "WM-28", kind)
    if kind == "negative drift":
        return Malformed(_with(base, {"max_drift": -5}), None, "WM-28", kind)
    if kind == "negative bound":
        return Malformed(_with(base, {"bound": -1}), None, "SCH-2", kind)
    unused = n + 100  # a split id no step uses
    if kind == "unknown reader":
        bad = {"op": "add_split", "reader": base.config.readers, "split": unused}
        return Malformed(_with(base, steps=[*steps, bad]), n, "WM-29", kind)
    if kind == "split added twice":
        add = {"op": "add_split", "reader": 0, "split": unused}
        return Malformed(_with(base, steps=[*steps, add, add]), n + 1, "WM-29", kind)
    if kind == "record of an unknown split":
        return Malformed(_with(base, steps=[*steps, {"op": "record", "split": unused, "ts": 1}]), n,
                         "WM-29", kind)
    if kind == "record after finish":
        more = [{"op": "add_split", "reader": 0, "split": unused}, {"op": "finish_split", "split": unused},
                {"op": "record", "split": unused, "ts": 1}]
        return Malformed(_with(base, steps=[*steps, *more]), n + 2, "WM-29", kind)
    if kind == "align unaligned":
        return Malformed(_with(base, steps=[*steps, {"op": "align"}]), n, "WM-29", kind)
    if kind == "end in the middle":
        return Malformed(_with(base, steps=[{"op": "end"}, {"op": "tick", "ms": 1}]), 0, "WM-29", kind)
    return Malformed(_with(base, steps=[*steps, {"op": "emit", "value": 1}]), n, "SCH-1", "unknown op")


# Two causes at once (issue 32 item 6), where the checks are ordered: a configuration's field types
# (SCH-2) before what they mean (WM-28), the configuration before the steps, the steps in order.
_TWICE = ("zero idleness and negative drift", "negative bound and zero idleness",
          "zero idleness and an unknown reader", "align unaligned, then a record of an unknown split")


def _refused_twice(base: Schedule, kind: str) -> Malformed:
    steps = base.to_dict()["steps"]
    n, unused = len(steps), len(steps) + 100
    if kind == "zero idleness and negative drift":
        return Malformed(_with(base, {"idleness": 0, "max_drift": -5}), None, "WM-28", kind)
    if kind == "negative bound and zero idleness":
        return Malformed(_with(base, {"bound": -1, "idleness": 0}), None, "SCH-2", kind)
    if kind == "zero idleness and an unknown reader":
        bad = {"op": "add_split", "reader": base.config.readers, "split": unused}
        return Malformed(_with(base, {"idleness": 0}, [*steps, bad]), None, "WM-28", kind)
    more: list[dict[str, Any]] = [{"op": "align"}, {"op": "record", "split": unused, "ts": 1}]
    return Malformed(_with(base, {"max_drift": None}, [*steps, *more]), n, "WM-29", kind)


# --------------------------------------------------------------------------
# Into the async I/O operator (the two areas' models in sequence)
# --------------------------------------------------------------------------


def downstream_inputs(trace: Trace) -> list[tuple[str, Any]]:
    """What the task after the valve receives, in order: the readers' records (their timestamps),
    the valve's watermarks and statuses."""
    out: list[tuple[str, Any]] = []
    for e in trace.events:
        if e.event == "record":
            out.append(("record", e.ts))
        elif e.event == "output_watermark":
            out.append(("watermark", e.value))
        elif e.event == "output_status":
            out.append(("status", e.idle))
    return out


@st.composite
def into_async_io(draw: Any, f: Features, modes: Sequence[str]) -> Schedule:
    """A watermarks schedule run on the reference; what its valve's task receives becomes the input
    of an async I/O operator in that task (capacity 100, so every record is admitted at once), each
    call completing, with its record's index as its result, at a drawn later point."""
    from flink_semantics.reference import expected_trace
    from flink_semantics.spec.areas.async_io import AsyncIoConfig, CompleteStep, StatusStep, WatermarkStep
    from flink_semantics.spec.areas.async_io import RecordStep as AsyncRecord

    inputs = downstream_inputs(expected_trace(draw(_schedules_of(f))))
    config = AsyncIoConfig(mode=draw(st.sampled_from(list(modes))))
    steps: list[Step] = []
    outstanding: list[int] = []
    for kind, value in inputs:
        while outstanding and draw(st.integers(0, 2)) == 0:
            i = outstanding.pop(draw(st.integers(0, len(outstanding) - 1)))
            steps.append(CompleteStep(i, (i,)))
        if kind == "record":
            outstanding.append(sum(isinstance(s, AsyncRecord) for s in steps))
            steps.append(AsyncRecord(outstanding[-1], value))
        elif kind == "watermark":
            steps.append(WatermarkStep(value))
        else:
            steps.append(StatusStep(value))
    steps += [CompleteStep(i, (i,)) for i in outstanding]
    return Schedule("async_io", config, tuple(steps))
