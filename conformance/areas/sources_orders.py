"""The freedom of SRC-31 in the checker: the order of the blocks of a reader's restored state.

On a rescale each new reader's part of the old readers' states is made of blocks, one per old
reader (its splits in their order); spec/sources.md leaves the order of the blocks open: one order
of those old readers per new reader and restore point (Flink 2.3.0: the `HashMap` of
`RoundRobinOperatorStateRepartitioner`'s `mergeMapList`, read in that order by
`OperatorStateRestoreOperation`; a later restore from the same checkpoint at the same parallelism
assigns the same handles, so the same order).  The reader then reads its splits in that order
(SRC-39), and its `registered` event shows them.

`legal_reference(schedule, expected, observed)` is the area's hook for the checker
(conformance/areas/__init__.py): the reference model's trace under the block orders the observed
trace shows (the model's `block_orders`), or, where none gives it, under the choice that agrees
with it longest; `orders_before(schedule, step)` gives the blame that choice.  The reference model
itself stays deterministic: old reader order.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from flink_semantics.conformance.checker import same_step
from flink_semantics.reference.sources import Model, dealt_readers
from flink_semantics.spec.areas.sources import RescaleStep
from flink_semantics.spec.schedule import Event, Schedule, ScheduleError, Step, Trace

MAX_CANDIDATES = 256  # choices kept per step while the observed trace has not told them apart
Orders = dict[tuple[int, int, int], tuple[int, ...]]  # Model.block_orders


@dataclass
class Candidate:
    model: Model
    events: list[Event]


_LAST: dict[Schedule, tuple[int, Orders]] = {}  # the last schedule checked: where it fails, its orders


def legal_reference(schedule: Schedule, expected: Trace, observed: Trace) -> Trace | None:
    """SRC-31's freedom (module docstring): the reference trace under the block orders the observed
    trace shows, or the one that agrees with it longest; None when that is `expected`."""
    trace, failure = closest_trace(schedule, observed)
    _LAST.clear()
    if failure is not None:
        _LAST[schedule] = failure
    return None if trace == expected else trace


def orders_before(schedule: Schedule, step: int) -> Orders:
    """The block orders of the choice `legal_reference` last kept for this schedule, when `step` is
    where its trace first differs from the observed one; else none (the reference's)."""
    kept = _LAST.get(schedule)
    return dict(kept[1]) if kept is not None and kept[0] == step else {}


def closest_trace(schedule: Schedule, observed: Trace) -> tuple[Trace, tuple[int, Orders] | None]:
    """The trace of a choice of block orders that gives `observed` (None: no failure), else that of
    the choice whose events agree longest, with the step where it differs and the choice."""
    wanted: dict[int, list[Event]] = {}
    for e in observed.events:
        wanted.setdefault(e.step, []).append(e)
    candidates = [Candidate(Model(schedule.config), [])]
    for i, s in enumerate(schedule.steps):
        want = wanted.get(i, [])
        kept: dict[str, Candidate] = {}
        tried: list[tuple[Candidate, list[Event]]] = []
        for c in candidates:
            for after in _choices(c, s):
                try:
                    events = after.model.apply(i, s)
                except ScheduleError:
                    continue  # not a schedule this choice can run: no trace of it
                if same_step(schedule.area, events, want):
                    after.events += events
                    kept.setdefault(_state_key(after.model), after)
                else:
                    tried.append((after, events))
        if not kept:
            if not tried:
                return Trace(tuple(candidates[0].events)), None
            after, events = max(tried, key=lambda t: _agreeing(t[1], want))
            failure = (i, dict(after.model.block_orders))
            after.events += events
            for j, rest in enumerate(schedule.steps[i + 1:], i + 1):
                after.events += after.model.apply(j, rest)
            return Trace(tuple(after.events)), failure
        candidates = list(kept.values())[:MAX_CANDIDATES]
    return Trace(tuple(candidates[0].events)), None


def _agreeing(events: Sequence[Event], want: Sequence[Event]) -> int:
    return next((n for n, (a, b) in enumerate(zip(events, want)) if a != b), min(len(events), len(want)))


def _state_key(model: Model) -> str:
    return repr({k: v for k, v in vars(model).items() if k not in ("out", "step", "block_orders")})


def _choices(c: Candidate, s: Step) -> Iterator[Candidate]:
    """The candidate once per choice step `s` opens (a rescale from a checkpoint at another
    parallelism: each new reader's blocks in every order, the reference's first), copied."""
    model = c.model
    cp = model.checkpoints.get(model.last_completed) if model.last_completed is not None else None
    if not isinstance(s, RescaleStep) or cp is None or cp.parallelism == s.readers:
        yield copy.deepcopy(c)
        return
    per_reader = []
    for r, part in enumerate(dealt_readers(cp, s.readers)):
        olds = list(dict.fromkeys(old for old, _ in part))
        per_reader.append([((cp.id, s.readers, r), order) for order in itertools.permutations(olds)])
    for choice in itertools.islice(itertools.product(*per_reader), MAX_CANDIDATES):
        after = copy.deepcopy(c)
        after.model.block_orders.update(choice)
        yield after
