"""The conformance part of the mini-batch aggregation area: strategies, invariants, and the checker's
hooks.

Strategies draw valid schedules step by step: every changelog is well formed by construction (MB-27:
a retraction takes back a value its key holds, or leads a key that never held one), no watermark
or end of input comes while the input is idle, a restore follows a crash (MB-28).  Each step is
one integer drawn by hypothesis, read against the schedule so far (few draws per schedule;
shrinking an integer towards 0 picks the plainest step, `row k0 +I 0`); half the crashes come
after two checkpoints and restore the older one.  Keys are longs, negative ones among them; a
quarter of the schedules draw their keys and values near the long bounds, where sums wrap around
(MB-30).  `Features` says which parts a property uses;
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
from typing import Any

from flink_semantics.conformance.areas import never_free, no_order_graph, no_output_keys
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
from flink_semantics.spec.schedule import Schedule, Step, Trace, validate_schedule
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

# State -> floor: the least share of the area's distinct schedules that must reach it.  Measured
# with `pytest conformance/test_mini_batch.py conformance/test_coverage.py --adapter reference
# --areas mini_batch` (4718 schedules; the share in parentheses), each floor about half of it; on
# 5860 schedules, with a quarter of them near the long bounds, the shares were 4.5%, 2.7%, 4.3%, 1.3%
# and 7.0% (the first four the same with no schedule near the bounds: those starve nothing).
# (A restore with a bundle open at its checkpoint cannot happen: MB-13 finishes bundles first.)
COVERAGE = {
    EMPTIED_BY_WATERMARK: 0.03,  # (6.3%) every mini-batch property
    CRASH_BUFFERED: 0.015,  # (3.2%) test_checkpoints_and_restores, test_everything_together
    RETRACTION_ACROSS: 0.025,  # (5.6%) test_local_global, test_everything_together, test_equivalences
    OLDER_RESTORE: 0.008,  # (1.8%) the checkpoint properties: two checkpoints, a crash, the older one
    SUM_WRAPS: 0.035,  # (7.0%) every property: a quarter of the schedules draw values near the long bounds
}


def coverage(schedule: Schedule) -> list[str]:
    """The rare states of mini-batch aggregation a schedule reaches: from its steps, and from one run
    of the reference model (its bundles and state read between steps) when mini-batch is on and a
    crash or a retraction comes; none for a refused or malformed schedule."""
    c: MiniBatchConfig = schedule.config
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
    if c.enabled and (retractions or crashes):
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
    model = Model(schedule.config)
    found: set[str] = set()
    for i, s in enumerate(schedule.steps):
        if isinstance(s, CrashStep) and (model.bundle.count or model.local.count):
            found.add(CRASH_BUFFERED)  # MB-29: those rows are lost
        if isinstance(s, RowStep) and s.kind in RETRACTIONS and model.two_phase:
            local = sum(-1 if kind in RETRACTIONS else 1 for kind, _ in model.local.items.get(s.key, []))
            if local <= 0:
                found.add(RETRACTION_ACROSS)  # MB-25, MB-26: a local accumulator below zero
        empties = bool(model.bundle.count or model.local.count) and _empties(model)
        events = model.apply(i, s)
        if empties and any(e.event == "watermark" for e in events):
            found.add(EMPTIED_BY_WATERMARK)  # MB-12, MB-23
    return found


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
LONG_MIN, LONG_MAX = LONG_RANGE
# Key 0 the most frequent (skew), and four others: longs, negative ones among them; values.
KEYS = (1, 2, -1, 3)
VALUES = (0, 1, 2, 3, 5, -1, 7, 9)
# Near the long bounds (MB-30): sums of two values of one sign wrap around, most of them.
WIDE_KEYS = (1, -1, LONG_MIN, LONG_MAX)
WIDE_VALUES = (LONG_MAX, 1, LONG_MIN, -1, 2**62, LONG_MAX - 1, -(2**62), 0)

CONFIG_BITS = st.integers(0, 2**20 - 1)
WIDE = st.integers(0, 3).map(lambda n: n == 3)  # a quarter of the schedules (shrinks to narrow)
STEP_BITS = st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=40)


def config_of(n: int, f: Features) -> MiniBatchConfig:
    latency, n = LATENCIES[n % len(LATENCIES)], n // len(LATENCIES)
    size, n = SIZES[n % len(SIZES)], n // len(SIZES)
    update_before, ttl, n = bool(n % 2), bool((n // 2) % 3 == 0), n // 6
    two_phase = f.two_phase or (not f.enabled and bool(n % 4 == 0))  # MB-3: ignored when off
    return MiniBatchConfig(enabled=f.enabled, allow_latency=latency if f.enabled else (n // 4) % 3,
                           size=size if f.enabled else -1, assigner="rowtime" if f.rowtime else "proctime",
                           update_before=update_before, ttl=ttl, two_phase=two_phase)


class _Draft:
    """A schedule being drawn: what each key holds (MB-27), the checkpoints' copies of it, whether
    the input is idle, the last upstream watermark; its keys and values near the long bounds or
    not (`wide`)."""

    def __init__(self, config: MiniBatchConfig, f: Features, wide: bool = False):
        self.c, self.f = config, f
        self.keys, self.values = (WIDE_KEYS, WIDE_VALUES) if wide else (KEYS, VALUES)
        self.held: dict[int, list[int]] = {}
        self.ever: set[int] = set()
        self.snapshots: dict[int, tuple[dict[int, list[int]], set[int]]] = {}
        self.idle = self.crashed = False
        self.older = False  # the next restore takes a checkpoint older than the latest
        self.watermark = 0
        self.steps: list[Step] = []

    def key(self, n: int) -> int:
        """Skewed: key 0 half the time."""
        return 0 if n % 2 == 0 else self.keys[(n // 2) % len(self.keys)]

    def row(self, n: int) -> RowStep:
        key, n = self.key(n), n // 8
        values = self.held.get(key, [])
        leading_ok = self.f.leading and key not in self.ever and not (self.c.enabled and self.c.two_phase)
        pick, n = n % 10, n // 10
        if values and pick >= 6:  # a retraction of a held value (its -U often followed by a +U)
            v = values.pop(n % len(values))
            return RowStep(key, RETRACTIONS[(n // 8) % 2], v)
        if not values and leading_ok and pick == 9:
            return RowStep(key, RETRACTIONS[(n // 8) % 2], self.values[n % len(self.values)])
        v = self.values[n % len(self.values)]
        self.held.setdefault(key, []).append(v)
        self.ever.add(key)
        return RowStep(key, "+I" if values == [] or pick % 2 == 0 else "+U", v)

    def restore(self, n: int) -> RestoreStep:
        """The restore after a crash: from a checkpoint two times in three, the latest first (an
        older one when the crash asked for it)."""
        self.crashed = False
        ids = sorted(self.snapshots)[: -1 if self.older else None]
        self.older = False
        cid = ids[-1 - (n // 3) % len(ids)] if ids and n % 3 else None
        held, ever = self.snapshots[cid] if cid is not None else ({}, set())
        self.held, self.ever = {k: list(v) for k, v in held.items()}, set(ever)
        self.idle = False
        return RestoreStep(cid)

    def step(self, n: int) -> Step | list[Step]:
        """The step an integer picks (a list: a checkpoint, a row and a crash)."""
        f = self.f
        if self.crashed:
            return self.restore(n)
        pick, n = n % 22, n // 22
        if pick < 11:
            return self.row(n)
        if pick < 14 and f.advance:
            return AdvanceStep((0, 1, 3, 5, 9, 10, 11, 25)[n % 8])
        if pick < 17 and f.upstream_watermarks and not self.idle:
            if n % 25 == 0:
                return WatermarkStep(MAX_WATERMARK)
            if n % 25 == 13:
                return WatermarkStep(-(2**63))  # Long.MIN_VALUE: never passes the valve (MB-8)
            if n % 5 == 1:  # repeats and a step back (MB-8)
                return WatermarkStep(self.watermark - (n // 5) % 3)
            self.watermark += (1, 2, 4, 7, 10, 15)[(n // 5) % 6]
            return WatermarkStep(self.watermark)
        if pick < 18 and f.status:
            self.idle = not self.idle if n % 4 else self.idle  # a repeated status now and then
            return StatusStep(self.idle)
        if pick < 21 and f.checkpoints:
            if pick < 20:
                return self.checkpoint()
            self.crashed = True
            if n % 2:  # two checkpoints or more, each followed by a row, then the crash, and a
                # restore from an older one (MB-29: the state goes back past the latest)
                steps: list[Step] = []
                for _ in range(1 if self.snapshots else 2):
                    steps += [self.checkpoint(), self.row(n // 2)]
                self.older = True
                return [*steps, CrashStep()]
            return CrashStep()
        return self.row(n)

    def checkpoint(self) -> CheckpointStep:
        cid = len(self.snapshots) + 1
        self.snapshots[cid] = ({k: list(v) for k, v in self.held.items()}, set(self.ever))
        return CheckpointStep(cid)


@st.composite
def schedules(draw: Any, f: Features) -> Schedule:
    """A valid mini-batch schedule using the features."""
    config = config_of(draw(CONFIG_BITS), f)
    draft = _Draft(config, f, draw(WIDE))
    numbers = draw(STEP_BITS)[: f.max_steps]
    steps: list[Step] = []
    for n in numbers:
        step = draft.step(n)
        steps += step if isinstance(step, list) else [step]
    if draft.crashed:
        steps.append(draft.restore(numbers[-1]))
    if f.end and numbers[0] % 4:
        if draft.idle:
            steps.append(StatusStep(False))
        steps.append(EndStep())
    return Schedule(AREA, config, tuple(steps))


def feature_batches(f: Features, max_size: int = 12) -> st.SearchStrategy[list[Schedule]]:
    return batches(schedules(f), max_size)


@st.composite
def rejected_configs(draw: Any) -> Schedule:
    """MB-2: mini-batch on with a latency or a size that is not positive."""
    latency, size = draw(st.sampled_from(((0, 10), (-1, 10), (10, 0), (10, -1), (0, 0), (-100, 5))))
    config = MiniBatchConfig(enabled=True, allow_latency=latency, size=size,
                             assigner=draw(st.sampled_from(("proctime", "rowtime"))),
                             two_phase=draw(st.booleans()))
    return Schedule(AREA, config, (RowStep(0, "+I", 1), EndStep()))


@st.composite
def changelogs(draw: Any) -> tuple[RowStep, ...]:
    """A well-formed changelog without leading retractions (so that two-phase aggregation takes it)."""
    f = Features(leading=False, checkpoints=False, status=False, upstream_watermarks=False)
    draft = _Draft(MiniBatchConfig(), f, draw(WIDE))
    return tuple(draft.row(n) for n in draw(STEP_BITS))


def configurations(n: int) -> list[MiniBatchConfig]:
    """Mini-batch off, and on in each way (MB-31), the latencies and sizes picked by `n`."""
    latency, size = LATENCIES[n % len(LATENCIES)], SIZES[(n // 8) % len(SIZES)]
    base = MiniBatchConfig(update_before=bool(n % 2), ttl=bool((n // 2) % 2))
    on = replace(base, enabled=True, allow_latency=latency, size=size)
    return [base, on, replace(on, assigner="rowtime"), replace(on, two_phase=True),
            replace(on, two_phase=True, size=SIZES[(n // 64) % len(SIZES)])]


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
    return [Schedule(AREA, c, tuple(steps)) for c in configurations(draw(CONFIG_BITS))]


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
