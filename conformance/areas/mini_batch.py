"""The conformance part of the mini-batch aggregation area: strategies, invariants, and the checker's
hooks.

Strategies draw valid schedules step by step: every changelog is well formed by construction (MB-27:
a retraction takes back a value its key holds, or leads a key that never held one), no watermark
or end of input comes while the input is idle, a restore follows a crash (MB-28).  A schedule is a
hypothesis list of drawn steps (`intents`: a step kind, then each field from a strategy of its
own), each made valid against the schedule so far (`_Draft`), so that shrinking removes any single
step and simplifies any field towards the plainest (`row k0 +I`); a crash comes with its restore,
from the latest checkpoint, an older one (two checkpoints taken first where fewer were) or none.
Keys are longs, negative ones among them; a third of the schedules draw their keys and values near
the long bounds, where sums wrap around (MB-30).  `Features` says which parts a property uses;
`Features.restrict` drops what an adapter cannot run.  `COVERAGE` and `coverage` name the rare
states where engines lose or repeat results, and their floors (conformance/coverage.py).

The checker's hooks (conformance/areas/__init__.py): this area's traces are compared exactly
(SCRIPTED), the keys of one bundle in any order (the descriptor's `free_key_order`, MB-9); a FREE
adapter cannot be checked on them.  Which rule a difference shows broken: `rules_for_events`
(conformance/areas/mini_batch_blame.py).

The invariants state MB-31 and MB-32 on traces: `final_results` (the changelog applied as upserts
and deletes), `compaction_problems` (each key's mini-batch results a subsequence of its per-row
results, at most one change per key between two markers of a step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from flink_semantics.conformance.areas import never_free, no_order_graph, no_output_keys
from flink_semantics.conformance.areas.mini_batch_blame import SIZE, WATERMARK, Finish, Replay
from flink_semantics.conformance.areas.mini_batch_blame import rules_for_events as rules_for_events
from flink_semantics.conformance.strategies import Malformed, batches
from flink_semantics.reference.mini_batch import Acc, Model
from flink_semantics.spec.adapter import unsupported
from flink_semantics.spec.areas.mini_batch import (
    LONG_RANGE,
    MAX_WATERMARK,
    RETRACTIONS,
    AdvanceStep,
    CheckpointStep,
    CrashStep,
    EndStep,
    MiniBatchConfig,
    RestoreStep,
    RowStep,
    StatusStep,
    WatermarkStep,
)
from flink_semantics.spec.schedule import Event, Schedule, Step, Trace, validate_schedule
from hypothesis import strategies as st

AREA = "mini_batch"

# --------------------------------------------------------------------------
# The checker's hooks
# --------------------------------------------------------------------------

_CHANGELOG = ("MB-17", "MB-18", "MB-19", "MB-20", "MB-21", "MB-22", "MB-23", "MB-30")


def rules_for(schedule: Schedule, kinds: Sequence[str]) -> tuple[str, ...]:
    """The rules a divergence in these event kinds concerns, for this schedule's configuration."""
    c: MiniBatchConfig = schedule.config
    if "rejected" in kinds:
        return ("MB-2",)
    assigner: tuple[str, ...] = ()
    if c.enabled:
        assigner = ("MB-4", "MB-5") if c.assigner == "proctime" else ("MB-6", "MB-7")
    steps = {s.op for s in schedule.steps}
    restores: tuple[str, ...] = ("MB-13", "MB-29") if "restore" in steps else ()
    restores += ("MB-15",) if "status" in steps else ()
    rules: list[str] = []
    for kind in kinds:
        if kind == "out":
            if not c.enabled:
                rules += ["MB-1", "MB-24", *_CHANGELOG, *restores]
            else:
                rules += ["MB-9", "MB-10", "MB-11", "MB-12", "MB-13", "MB-14", "MB-16", *assigner,
                          *_CHANGELOG, *restores]
                if c.two_phase:
                    rules += ["MB-3", "MB-25", "MB-26"]
        elif kind == "watermark":
            rules += [*assigner, "MB-8", *restores]
        elif kind == "status":
            rules += ["MB-8", "MB-15"]
    return tuple(dict.fromkeys(rules))


free_checkable, order_graph, output_keys = never_free, no_order_graph, no_output_keys
FREE_MULTISETS: dict[str, tuple[str, ...]] = {}

# --------------------------------------------------------------------------
# Invariants stated on traces (MB-31, MB-32)
# --------------------------------------------------------------------------

Result = tuple[int, int, int, int]


def final_results(trace: Trace) -> dict[int, Result]:
    """MB-31: the changelog applied as upserts and deletes: each key's last result."""
    table: dict[int, Result] = {}
    for e in trace.events:
        if e.event == "out" and e.change in ("+I", "+U"):
            table[e.key] = (e.count, e.sum, e.min, e.max)
        elif e.event == "out" and e.change == "-D":
            table.pop(e.key, None)
    return table


def _results_by_key(trace: Trace) -> dict[int, list[Result | None]]:
    """Each key's results in order (None: deleted)."""
    out: dict[int, list[Result | None]] = {}
    for e in trace.events:
        if e.event == "out" and e.change in ("+I", "+U"):
            out.setdefault(e.key, []).append((e.count, e.sum, e.min, e.max))
        elif e.event == "out" and e.change == "-D":
            out.setdefault(e.key, []).append(None)
    return out


def _is_subsequence(small: Sequence[Any], big: Sequence[Any]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def compaction_problems(per_row: Trace, mini_batch: Trace, one_phase: bool) -> list[str]:
    """MB-32: each key's mini-batch results are per-row results in the same order; in one-phase
    aggregation a key changes at most once between two markers of a step (a bundle)."""
    problems = []
    rows = _results_by_key(per_row)
    for key, results in _results_by_key(mini_batch).items():
        if not _is_subsequence(results, rows.get(key, [])):
            problems.append(f"k{key}: mini-batch results {results} are not in order among the per-row "
                            f"results {rows.get(key, [])}")
    if one_phase:
        seen: set[tuple[int, int, int]] = set()
        marker = 0
        for e in mini_batch.events:
            if e.event != "out":
                marker += 1
            elif e.change != "-U":
                if (e.step, marker, e.key) in seen:
                    problems.append(f"@{e.step}: k{e.key} changes twice in one bundle")
                seen.add((e.step, marker, e.key))
    return problems


# --------------------------------------------------------------------------
# Generator coverage (conformance/coverage.py)
# --------------------------------------------------------------------------

EMPTIED_BY_WATERMARK = "a bundle finished by a watermark with a key retracted to count zero"
CRASH_BUFFERED = "a crash with rows buffered in an open bundle"
RETRACTION_ACROSS = "two-phase: a retraction of a value accumulated in an earlier bundle"
OLDER_RESTORE = "a restore from a checkpoint older than the latest"
SUM_WRAPS = "a sum wraps around: a result differs from the one in unbounded integers"
UPDATE_SPLIT = "an update's -U and the +U after it, of one key, in two bundles (a finish between them)"
GLOBAL_SIZE_AT_WATERMARK = ("two-phase: a local flush at a watermark fills the global bundle to its size"
                            " before the accumulator of a key in it")
BOTH_REFUSED = "a configuration refused for its latency and its size at once (MB-2)"

# State -> floor: the least share of the area's distinct schedules that must reach it, set at about
# half of its share when it was added (the first five with integer-decoded steps); the share in
# parentheses is `pytest conformance --adapter reference --areas mini_batch` with the steps drawn one
# by one, two-phase rows also in runs (6230 schedules, a third of them near the long bounds).
# (A restore with a bundle open at its checkpoint cannot happen: MB-13 finishes bundles first.)
# The last three are combinations (issue 32): retractions with bundle finishes, the global size
# trigger in the middle of a watermark's flush, and both causes of MB-2.
COVERAGE = {
    EMPTIED_BY_WATERMARK: 0.015,  # (3.0%) every mini-batch property
    CRASH_BUFFERED: 0.015,  # (3.0%) test_checkpoints_and_restores, test_everything_together
    RETRACTION_ACROSS: 0.025,  # (5.6%) test_local_global, test_everything_together, test_equivalences
    OLDER_RESTORE: 0.008,  # (3.6%) the checkpoint properties: a crash restored from the latest but one
    SUM_WRAPS: 0.035,  # (4.7%) every property: a third of the schedules draw values near the long bounds
    UPDATE_SPLIT: 0.01,  # (2.4%) MB-17, MB-20: an update cut by a finish
    GLOBAL_SIZE_AT_WATERMARK: 0.0015,  # (0.3%) test_local_global, test_equivalences: a key changes twice
    BOTH_REFUSED: 0.009,  # (2.1%) test_configuration_validation: each field drawn on its own
}


def coverage(schedule: Schedule) -> list[str]:
    """The rare states of mini-batch aggregation a schedule reaches: from its steps, and from one run
    of the reference model (its bundles and state read between steps, and why each bundle finished:
    `mini_batch_blame.Replay`) when mini-batch is on and a crash, a retraction or two phases come;
    for a refused configuration, whether both of its fields are refused (MB-2); none for a malformed
    schedule."""
    c: MiniBatchConfig = schedule.config
    if c.enabled and c.allow_latency <= 0 and c.size <= 0:
        return [BOTH_REFUSED]  # MB-2, both of its causes
    found: set[str] = set()
    taken = 0
    for s in schedule.steps:
        if isinstance(s, CheckpointStep):
            taken = max(taken, s.id)
        elif isinstance(s, RestoreStep) and s.checkpoint is not None and s.checkpoint < taken:
            found.add(OLDER_RESTORE)  # MB-29
    retractions = any(isinstance(s, RowStep) and s.kind in RETRACTIONS for s in schedule.steps)
    crashes = any(isinstance(s, CrashStep) for s in schedule.steps)
    validate_schedule(schedule)  # ScheduleError: none (conformance/coverage.py)
    if c.enabled and (retractions or crashes or c.two_phase):
        found |= _model_states(schedule)
    if _sum_wraps(schedule):
        found.add(SUM_WRAPS)  # MB-30
    return sorted(found)


class UnboundedAcc(Acc):
    """SUM in unbounded integers, which MB-30 rules out: what a sum would be without wrapping."""

    def apply(self, kind: str, v: int) -> None:
        before = self.sum
        super().apply(kind, v)
        self.sum = before + (-v if kind in RETRACTIONS else v)

    def merge(self, other: Acc) -> None:
        before = self.sum
        super().merge(other)
        self.sum = before + other.sum


class UnboundedModel(Model):
    """The model with SUM in unbounded integers (also the wrong adapter SumDoesNotWrap)."""

    accumulator = UnboundedAcc


def _sum_wraps(schedule: Schedule) -> bool:
    """MB-30: whether the trace shows a wrapped sum (it differs from the trace with unbounded sums);
    only schedules whose values could add up beyond a long are run."""
    values = [abs(s.value) for s in schedule.steps if isinstance(s, RowStep)]
    if sum(values) <= LONG_RANGE[1]:
        return False
    return _events(Model(schedule.config), schedule) != _events(UnboundedModel(schedule.config), schedule)


def _events(model: Model, schedule: Schedule) -> list[Any]:
    return [e for i, s in enumerate(schedule.steps) for e in model.apply(i, s)]


def _empties(model: Model) -> bool:
    """Whether finishing the model's bundles now leaves a key with count zero (MB-23): its rows (or
    the local phase's accumulators) applied to its state."""
    inputs: dict[int, list[Acc]] = {}
    for key, items in model.bundle.items.items():
        if model.two_phase:
            inputs.setdefault(key, []).extend(items)
        else:
            acc = model.state.get(key)
            rows = list(items)
            while acc is None and rows and rows[0][0] in RETRACTIONS:  # MB-18
                rows.pop(0)
            if rows:
                acc = acc.copy() if acc is not None else Acc()
                for kind, v in rows:
                    acc.apply(kind, v)
                if acc.count == 0:
                    return True
    for key, rows in model.local.items.items() if model.two_phase else ():
        local = Acc()
        for kind, v in rows:
            local.apply(kind, v)
        inputs.setdefault(key, []).append(local)
    for key, accs in inputs.items():
        acc = model.state[key].copy() if key in model.state else Acc()
        for local in accs:
            acc.merge(local)
        if acc.count == 0:
            return True
    return False


def _model_states(schedule: Schedule) -> set[str]:
    model = Replay(schedule.config)
    found: set[str] = set()
    last: dict[int, str] = {}  # each key's last row kind in this incarnation
    rows = model.local if model.two_phase else model.bundle
    for i, s in enumerate(schedule.steps):
        if isinstance(s, CrashStep) and (model.bundle.count or model.local.count):
            found.add(CRASH_BUFFERED)  # MB-29: those rows are lost
        if isinstance(s, RestoreStep):
            last = {}
        if isinstance(s, RowStep):
            if s.kind == "+U" and last.get(s.key) == "-U" and s.key not in rows.items:
                found.add(UPDATE_SPLIT)  # MB-17, MB-20: the -U applied in a bundle of its own
            last[s.key] = s.kind
        if isinstance(s, RowStep) and s.kind in RETRACTIONS and model.two_phase:
            local = sum(-1 if kind in RETRACTIONS else 1 for kind, _ in model.local.items.get(s.key, []))
            if local <= 0:
                found.add(RETRACTION_ACROSS)  # MB-25, MB-26: a local accumulator below zero
        empties = bool(model.bundle.count or model.local.count) and _empties(model)
        events = model.apply(i, s)
        rows = model.local if model.two_phase else model.bundle  # a restore opens new bundles
        if empties and any(e.event == "watermark" for e in events):
            found.add(EMPTIED_BY_WATERMARK)  # MB-12, MB-23
    if _split_by_global_size_at_watermark(model.finishes):
        found.add(GLOBAL_SIZE_AT_WATERMARK)  # MB-10, MB-12, MB-25: the global size trigger inside a flush
    return found


def _keys_of(events: Sequence[Event]) -> set[int]:
    return {e.key for e in events if e.event == "out"}


def _split_by_global_size_at_watermark(finishes: Sequence[Finish]) -> bool:
    """Whether a local flush at a watermark filled the global bundle to its size before one of its
    keys' accumulators, that key in the finished bundle too (so the key changes twice at the
    watermark; one finish at the watermark would change it once)."""
    for i, f in enumerate(finishes):
        if f.phase == "global" and f.cause == SIZE and f.within is not None and f.within.cause == WATERMARK:
            later = [g for g in finishes[i + 1:] if g.phase == "global" and g.step == f.step]
            if any(_keys_of(f.events) & _keys_of(g.events) for g in later):
                return True
    return False


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Features:
    """Which parts of the vocabulary a strategy uses."""

    enabled: bool = True  # mini-batch on (else: off)
    rowtime: bool = False  # the row-time assigner (else processing time)
    two_phase: bool = False
    checkpoints: bool = False  # checkpoint, crash and restore steps
    status: bool = False  # idle / active statuses
    upstream_watermarks: bool = True
    advance: bool = True  # `advance` steps (processing time)
    end: bool = True  # schedules end with end of input (some)
    leading: bool = True  # leading retractions of keys that never held a value
    max_steps: int = 24

    def restrict(self, capabilities: Mapping[str, str | None], completion_order: str) -> Features:
        """These features without the ones the adapter does not support."""
        ok = lambda cap: unsupported(capabilities, f"mini_batch.{cap}") is None  # noqa: E731
        return replace(self, rowtime=self.rowtime and ok("rowtime"),
                       two_phase=self.two_phase and ok("two_phase"),
                       checkpoints=self.checkpoints and ok("checkpoint"), status=self.status and ok("status"),
                       advance=self.advance and ok("processing_time"),
                       upstream_watermarks=self.upstream_watermarks and ok("watermarks"),
                       end=self.end and ok("watermarks"))


LATENCIES = (10, 10, 5, 1, 100, 3)
SIZES = (3, 2, 1, 5, 100, 4, 8)
# Two-phase: global bundles of two or three accumulators half the time, so that a local flush at a
# watermark often fills one in its middle (GLOBAL_SIZE_AT_WATERMARK: MB-10 with MB-12).
TWO_PHASE_SIZES = (3, 2, 3, 2, 1, 5, 100, 4, 8)
LONG_MIN, LONG_MAX = LONG_RANGE
# Key 0 the most frequent (skew: half the rows), and four others: longs, negative ones among them.
KEYS = (1, 2, -1, 3)
VALUES = (0, 1, 2, 3, 5, -1, 7, 9)
# Near the long bounds (MB-30): sums of two values of one sign wrap around, most of them.
WIDE_KEYS = (1, -1, LONG_MIN, LONG_MAX)
WIDE_VALUES = (LONG_MAX, 1, LONG_MIN, -1, 2**62, LONG_MAX - 1, -(2**62), 0)
ADVANCES = (0, 1, 3, 5, 9, 10, 11, 25)
RISES = (1, 2, 4, 7, 10, 15)

WIDE = st.integers(0, 2).map(lambda n: n == 2)  # a third of the schedules (shrinks to narrow)
ENDS = st.sampled_from((False, True, True, True))  # three schedules in four end (shrinks to no end)


# @cache on a strategy factory: one strategy object per arguments, since hypothesis validates each
# new object it draws from (a third to a half of the draw's time).
@cache
@st.composite
def configs(draw: Any, f: Features) -> MiniBatchConfig:
    """A configuration using the features: each field drawn on its own (MB-3: `two_phase` asked for
    without mini-batch is ignored; `allow_latency` without it too, MB-2)."""
    update_before, ttl = draw(st.booleans()), draw(st.sampled_from((False, False, True)))
    if not f.enabled:
        return MiniBatchConfig(allow_latency=draw(st.sampled_from((0, 1, 2))), update_before=update_before,
                               ttl=ttl, two_phase=draw(st.sampled_from((False, False, False, True))))
    sizes = TWO_PHASE_SIZES if f.two_phase else SIZES
    return MiniBatchConfig(enabled=True, allow_latency=draw(st.sampled_from(LATENCIES)),
                           size=draw(st.sampled_from(sizes)), assigner="rowtime" if f.rowtime else "proctime",
                           update_before=update_before, ttl=ttl, two_phase=f.two_phase)


# --------------------------------------------------------------------------
# A step as drawn (an intent), before the schedule so far makes it a valid step
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """A row: its key (by index into the schedule's keys, 0: key 0), a kind asked for (`retract`: a
    retraction of a value the key holds, or a leading one, MB-18), which value."""

    key: int
    kind: str
    value: int


@dataclass(frozen=True)
class Rows:
    """Rows one after the other (two-phase aggregation: enough of them between two watermarks that
    a local flush at the watermark fills the global bundle in its middle, GLOBAL_SIZE_AT_WATERMARK)."""

    rows: tuple[Row, ...]


@dataclass(frozen=True)
class Time:
    """Processing time advances."""

    ms: int


@dataclass(frozen=True)
class Mark:
    """An upstream watermark: `rise` above the last one, or `same`, `back` (MB-8), `max`, `min`."""

    how: str
    by: int


@dataclass(frozen=True)
class Status:
    """A status: the other one than the input's (`toggle`), or the same again."""

    toggle: bool


@dataclass(frozen=True)
class Barrier:
    """A checkpoint barrier (ids 1, 2, ... in order)."""


@dataclass(frozen=True)
class Crash:
    """A crash and the restore after it, from the `latest` checkpoint, an `older` one (the latest
    but one: two checkpoints are taken first where fewer were, with the row `between` them) or
    `none`."""

    restore: str
    between: Row


ROW_KINDS = ("+I", "+I", "+U", "-U", "+I", "+U", "-D", "+I", "+U", "retract")
ROWS = st.builds(Row, st.sampled_from((0, 0, 0, 0, 1, 2, 3, 4)), st.sampled_from(ROW_KINDS),
                 st.integers(0, len(VALUES) - 1))
MARK_HOWS = ("rise",) * 17 + ("same", "same", "back", "back", "back", "max", "min")
MARKS = st.builds(Mark, st.sampled_from(MARK_HOWS), st.integers(0, len(RISES) - 1))
RESTORES = st.sampled_from(("latest", "latest", "older", "none"))


@cache
def intents(f: Features) -> st.SearchStrategy[Any]:
    """One step as drawn: its kind first (rows half the time), then its fields, each a strategy of its
    own, so that shrinking simplifies a field without touching the others."""
    kinds: list[st.SearchStrategy[Any]] = [ROWS] * 11
    kinds += [st.builds(Rows, st.lists(ROWS, min_size=2, max_size=6).map(tuple))] * 3 if f.two_phase else []
    kinds += [st.builds(Time, st.sampled_from(ADVANCES))] * 3 if f.advance else []
    kinds += [MARKS] * 3 if f.upstream_watermarks else []
    kinds += [st.builds(Status, st.sampled_from((True, True, True, False)))] if f.status else []
    kinds += [st.just(Barrier())] * 3 + [st.builds(Crash, RESTORES, ROWS)] * 2 if f.checkpoints else []
    return st.one_of(kinds)  # not a flatmap of the kind: one_of shrinks far faster (issue 32 item 4)


class _Draft:
    """A schedule being drawn: what each key holds (MB-27), the checkpoints' copies of it, whether
    the input is idle, the last upstream watermark; its keys and values near the long bounds or
    not (`wide`).  `steps` turns each drawn intent into valid steps."""

    def __init__(self, config: MiniBatchConfig, f: Features, wide: bool = False):
        self.c, self.f = config, f
        self.keys, self.values = (WIDE_KEYS, WIDE_VALUES) if wide else (KEYS, VALUES)
        self.held: dict[int, list[int]] = {}
        self.ever: set[int] = set()
        self.snapshots: dict[int, tuple[dict[int, list[int]], set[int]]] = {}
        self.idle = False
        self.watermark = 0

    def steps(self, intent: Any) -> list[Step]:
        """The valid steps of one intent (a crash: the crash and its restore)."""
        if isinstance(intent, Row):
            return [self.row(intent)]
        if isinstance(intent, Rows):
            return [self.row(r) for r in intent.rows]
        if isinstance(intent, Time):
            return [AdvanceStep(intent.ms)]
        if isinstance(intent, Mark):
            return [self.mark(intent)]
        if isinstance(intent, Status):
            self.idle = not self.idle if intent.toggle else self.idle
            return [StatusStep(self.idle)]
        if isinstance(intent, Barrier):
            return [self.checkpoint()]
        return [*self.older(intent), CrashStep(), self.restore(intent.restore)]

    def older(self, crash: Crash) -> list[Step]:
        """Before a crash restored from an older checkpoint: the checkpoints it needs, a row between."""
        if crash.restore != "older" or len(self.snapshots) >= 2:
            return []
        first = [] if self.snapshots else [self.checkpoint()]
        return [*first, self.row(crash.between), self.checkpoint()]

    def row(self, r: Row) -> RowStep:
        """MB-27: a retraction takes back a held value (the `value`-th), or leads a key that never
        held one (not in two-phase aggregation, C3); otherwise the row accumulates (+I when the key
        holds nothing)."""
        key = 0 if r.key == 0 else self.keys[r.key - 1]
        values = self.held.get(key, [])
        retract = r.kind in (*RETRACTIONS, "retract")
        kind = r.kind if r.kind in RETRACTIONS else "-U" if r.value % 2 else "-D"
        if retract and values:
            return RowStep(key, kind, values.pop(r.value % len(values)))
        leading_ok = self.f.leading and key not in self.ever and not (self.c.enabled and self.c.two_phase)
        v = self.values[r.value % len(self.values)]
        if retract and leading_ok and r.kind == "retract":
            return RowStep(key, kind, v)
        self.held.setdefault(key, []).append(v)
        self.ever.add(key)
        return RowStep(key, "+I" if not values or r.kind == "+I" else "+U", v)

    def mark(self, m: Mark) -> Step:
        """An upstream watermark (MB-28: while idle, the input turns active instead)."""
        if self.idle:
            self.idle = False
            return StatusStep(False)
        if m.how == "max":
            return WatermarkStep(MAX_WATERMARK)
        if m.how == "min":
            return WatermarkStep(LONG_MIN)  # Long.MIN_VALUE: never passes the valve (MB-8)
        if m.how in ("same", "back"):  # repeats and a step back (MB-8)
            return WatermarkStep(self.watermark - (m.by % 3 if m.how == "back" else 0))
        self.watermark += RISES[m.by]
        return WatermarkStep(self.watermark)

    def checkpoint(self) -> CheckpointStep:
        cid = len(self.snapshots) + 1
        self.snapshots[cid] = ({k: list(v) for k, v in self.held.items()}, set(self.ever))
        return CheckpointStep(cid)

    def restore(self, which: str) -> RestoreStep:
        """From the latest checkpoint, the one before it (MB-29: the state goes back past the latest),
        or none."""
        ids = sorted(self.snapshots)
        cid = None
        if ids and which != "none":
            cid = ids[-2] if which == "older" and len(ids) >= 2 else ids[-1]
        held, ever = self.snapshots[cid] if cid is not None else ({}, set())
        self.held, self.ever = {k: list(v) for k, v in held.items()}, set(ever)
        self.idle = False
        return RestoreStep(cid)


def steps_of(draft: _Draft, drawn: Sequence[Any]) -> list[Step]:
    out: list[Step] = []
    for intent in drawn:
        out += draft.steps(intent)
    return out


@cache
@st.composite
def schedules(draw: Any, f: Features) -> Schedule:
    """A valid mini-batch schedule using the features: a list of drawn steps (`intents`), each made
    valid against the schedule so far, ended (three in four) by end of input."""
    wide = draw(WIDE)
    config = draw(configs(f))
    draft = _Draft(config, f, wide)
    steps = steps_of(draft, draw(st.lists(intents(f), min_size=1, max_size=f.max_steps)))
    if f.end and draw(ENDS):
        if draft.idle:
            steps.append(StatusStep(False))
        steps.append(EndStep())
    return Schedule(AREA, config, tuple(steps))


def feature_batches(f: Features, max_size: int = 12) -> st.SearchStrategy[list[Schedule]]:
    return batches(schedules(f), max_size)


NOT_POSITIVE = (0, -1, -100)


@st.composite
def rejected_configs(draw: Any) -> Schedule:
    """MB-2: mini-batch on with a latency or a size that is not positive, or both (each field drawn
    on its own), over drawn steps: the configuration is refused before any step."""
    latency = draw(st.sampled_from((*NOT_POSITIVE, 10, 1)))
    size = draw(st.sampled_from(NOT_POSITIVE if latency > 0 else (*NOT_POSITIVE, 3, 1)))
    f = Features(rowtime=draw(st.booleans()), two_phase=draw(st.booleans()), max_steps=4)
    valid: Schedule = draw(schedules(f))
    config = replace(valid.config, allow_latency=latency, size=size)
    return Schedule(AREA, config, valid.steps)


@st.composite
def changelogs(draw: Any) -> tuple[RowStep, ...]:
    """A well-formed changelog without leading retractions (so that two-phase aggregation takes it)."""
    f = Features(leading=False, checkpoints=False, status=False, upstream_watermarks=False)
    draft = _Draft(MiniBatchConfig(), f, draw(WIDE))
    return tuple(draft.row(r) for r in draw(st.lists(ROWS, min_size=1, max_size=40)))


@st.composite
def configurations(draw: Any) -> list[MiniBatchConfig]:
    """Mini-batch off, and on in each way (MB-31), the latencies and sizes drawn."""
    base = MiniBatchConfig(update_before=draw(st.booleans()), ttl=draw(st.booleans()))
    on = replace(base, enabled=True, allow_latency=draw(st.sampled_from(LATENCIES)),
                 size=draw(st.sampled_from(SIZES)))
    return [base, on, replace(on, assigner="rowtime"), replace(on, two_phase=True),
            replace(on, two_phase=True, size=draw(st.sampled_from(SIZES)))]


@st.composite
def equivalent_schedules(draw: Any) -> list[Schedule]:
    """One changelog, interleaved with time (advances, upstream watermarks) and ended, under every
    configuration of `configurations`."""
    rows = draw(changelogs())
    gaps = draw(st.lists(st.integers(0, 6), min_size=len(rows), max_size=len(rows)))
    steps: list[Step] = []
    watermark = 0
    for row, gap in zip(rows, gaps):
        steps.append(row)
        if gap == 5:
            steps.append(AdvanceStep(7))
        elif gap == 6:
            watermark += 6
            steps.append(WatermarkStep(watermark))
    steps.append(EndStep())
    return [Schedule(AREA, c, tuple(steps)) for c in draw(configurations())]


# --------------------------------------------------------------------------
# Malformed schedules (MB-27, MB-28 and the shared SCH rules)
# --------------------------------------------------------------------------


@st.composite
def malformed_schedules(draw: Any) -> Malformed:
    """A valid schedule broken in one way that names its rule and its step."""
    base: Schedule = draw(schedules(Features(end=False, max_steps=6)))
    d = base.to_dict()
    steps = d["steps"]
    n = len(steps)
    kind = draw(st.sampled_from(("retract a value never held", "retract after the last value",
                                 "leading retraction in two-phase", "watermark while idle",
                                 "end while idle", "restore without crash", "unknown kind",
                                 "key beyond a long", "value beyond a long", "boolean value")))
    if kind == "retract a value never held":
        more: list[dict[str, Any]] = [{"op": "row", "key": 9, "kind": "+I", "value": 1},
                                      {"op": "row", "key": 9, "kind": "-U", "value": 2}]
        return Malformed({**d, "steps": [*steps, *more]}, n + 1, "MB-27", kind)
    if kind == "retract after the last value":
        more = [{"op": "row", "key": 9, "kind": "+I", "value": 1},
                {"op": "row", "key": 9, "kind": "-D", "value": 1},
                {"op": "row", "key": 9, "kind": "-D", "value": 1}]
        return Malformed({**d, "steps": [*steps, *more]}, n + 2, "MB-27", kind)
    if kind == "leading retraction in two-phase":
        config = {"enabled": True, "allow_latency": 10, "size": 3, "two_phase": True}
        rows = [{"op": "row", "key": 1, "kind": "+I", "value": 1},
                {"op": "row", "key": 8, "kind": "-D", "value": 1}]
        return Malformed({**d, "config": config, "steps": rows}, 1, "MB-27", kind)
    if kind in ("watermark while idle", "end while idle"):
        last: dict[str, Any] = {"op": "watermark", "timestamp": 5} if kind == "watermark while idle" \
            else {"op": "end"}
        more = [{"op": "status", "idle": False}, {"op": "status", "idle": True}, last]
        return Malformed({**d, "steps": [*steps, *more]}, n + 2, "MB-28", kind)
    if kind == "restore without crash":
        more = [{"op": "checkpoint", "id": 99}, {"op": "restore", "checkpoint": 99}]
        return Malformed({**d, "steps": [*steps, *more]}, n + 1, "MB-28", kind)
    if kind == "unknown kind":
        bad: dict[str, Any] = {"op": "row", "key": 1, "kind": "+X", "value": 1}
        return Malformed({**d, "steps": [*steps, bad]}, n, "SCH-2", kind)
    beyond = draw(st.sampled_from((2**63, 2**70, -(2**63) - 1)))
    value: int = True if kind == "boolean value" else beyond  # a bool is no integer of SCH-2
    key, value = (beyond, 1) if kind == "key beyond a long" else (1, value)
    bad = {"op": "row", "key": key, "kind": "+I", "value": value}
    return Malformed({**d, "steps": [*steps, bad]}, n, "SCH-2", kind)  # the key and value are BIGINT
