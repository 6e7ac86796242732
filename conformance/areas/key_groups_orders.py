"""The freedom of KG-17 (C3) in the checker: the order of the blocks of a restored list.

A new subtask restored from several old subtasks' handles holds each split name's list as blocks,
one per old subtask (its elements in their old order), the blocks in an order spec/key-groups.md
leaves open: one order of those old subtasks per new subtask and restore, the same for all its
split names (Flink 2.3.0: the `HashMap` of `RoundRobinOperatorStateRepartitioner`'s
`mergeMapList`, read in that order by `OperatorStateRestoreOperation`).  The order never shows in
the restore's own events (a list is listed ascending), only at a later rescale, which deals the
lists in the order held.

`legal_reference(schedule, expected, observed)` is the area's hook for the checker
(conformance/areas/__init__.py): the reference model's trace under the block orders that the
observed trace shows, so an adapter that holds the blocks in another legal order is held to the
trace of that order; where no choice gives the observed trace, the trace of the choice that agrees
with it longest, and the state before the first step that differs, for the blame
(`state_before`).  The reference model itself stays deterministic: old subtask order.

The search follows the schedule with every choice the observed trace has left open.  Orders are
resolved at the rescale that deals from them: there the observed chunks (each subtask's list, a
multiset) fix them, old subtask by old subtask, with the elements placed so far checked against the
chunks they fall in (`_resolutions`).
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from flink_semantics.reference.key_groups import Model, OperatorState, Snapshot, repartition_operator_state
from flink_semantics.spec.areas.key_groups import CheckpointStep, RestoreStep
from flink_semantics.spec.schedule import Event, Schedule, Step, Trace

# The blocks a subtask holds at the front of its split lists: (old subtask, name -> count), in the
# order the reference holds them (old subtask order); empty when nothing is left to choose.
Blocks = list[tuple[int, dict[str, int]]]

MAX_CANDIDATES = 256  # states kept per step while the observed trace has not told them apart
MAX_NODES = 200_000  # placements tried when resolving one rescale (a hang guard on huge fan-ins)


@dataclass
class Candidate:
    """The reference model under one choice of block orders so far: `blocks` of the running state
    (per subtask) and `saved` of the checkpoint's, both still open; `events`, the trace so far."""

    model: Model
    blocks: list[Blocks]
    saved: list[Blocks] | None
    events: list[Event]


@dataclass
class Failure:
    """Where the closest choice's trace first differs from the observed one: the step, the state
    before it (`before`), and the checkpoint's lists as that choice holds them (`held`: the old
    order its restore dealt from, when the step is a restore)."""

    step: int
    before: Candidate
    held: OperatorState | None


# The checker's hook and the blame's state (one schedule remembered: the last one checked)
_LAST: dict[Schedule, Failure] = {}


def legal_reference(schedule: Schedule, expected: Trace, observed: Trace) -> Trace | None:
    """KG-17's freedom (module docstring): the reference trace under the block orders the observed
    trace shows, or the one that agrees with it longest; None when there is nothing to choose."""
    trace, at_failure = closest_trace(schedule, observed)
    _LAST.clear()
    if at_failure is not None:
        _LAST[schedule] = at_failure
    return None if trace == expected else trace


def failure_at(schedule: Schedule, step: int) -> Failure | None:
    """Where the choice `legal_reference` last kept for this schedule fails, when that is `step`
    (the blame's starting point)."""
    kept = _LAST.get(schedule)
    return copy.deepcopy(kept) if kept is not None and kept.step == step else None


def closest_trace(schedule: Schedule, observed: Trace) -> tuple[Trace, Failure | None]:
    """The trace of a choice of block orders that gives `observed` (None: no failure), else that of
    the choice whose events agree longest, with the step where it differs and its state before."""
    wanted: dict[int, list[Event]] = {}
    for e in observed.events:
        wanted.setdefault(e.step, []).append(e)
    p = schedule.config.parallelism
    candidates = [Candidate(Model(schedule.config), [[] for _ in range(p)], None, [])]
    for i, s in enumerate(schedule.steps):
        want = wanted.get(i, [])
        kept: dict[str, Candidate] = {}
        tried: list[tuple[Candidate, Candidate, list[Event]]] = []
        for c in candidates:
            for after, events in _step(c, i, s, want):
                if events == want:
                    after.events += events
                    kept.setdefault(_state_key(after), after)
                else:
                    tried.append((c, after, events))
        if not kept:
            before, after, events = max(tried, key=lambda t: _agreeing(t[2], want))
            checkpoint = after.model.checkpoint
            failure = Failure(i, before, copy.deepcopy(checkpoint.operator) if checkpoint else None)
            after.events += events
            return Trace(tuple(_finish(after, schedule, i + 1))), failure
        candidates = list(kept.values())[:MAX_CANDIDATES]
    return Trace(tuple(candidates[0].events)), None


def _agreeing(events: Sequence[Event], want: Sequence[Event]) -> int:
    return next((n for n, (a, b) in enumerate(zip(events, want)) if a != b), min(len(events), len(want)))


def _finish(c: Candidate, schedule: Schedule, start: int) -> list[Event]:
    """The rest of the trace from step `start`, every later order the reference's."""
    for i, s in enumerate(schedule.steps[start:], start):
        c.events += _apply(c, i, s)
    return c.events


def _state_key(c: Candidate) -> str:
    checkpoint = c.model.checkpoint
    return repr((c.model.operator, checkpoint.operator if checkpoint else None, c.blocks, c.saved))


# --------------------------------------------------------------------------
# One step under every choice
# --------------------------------------------------------------------------


Stepped = tuple[Candidate, list[Event]]


def _step(c: Candidate, index: int, s: Step, want: Sequence[Event]) -> Iterator[Stepped]:
    """The candidate after step `index` under each choice it leaves open (the observed events of the
    step, `want`, narrow the choices of a rescale), with the step's events; always at least one."""
    checkpoint = c.model.checkpoint
    if not _deals_open_blocks(c, s):
        after = copy.deepcopy(c)
        yield after, _apply(after, index, s)
        return
    assert isinstance(s, RestoreStep) and checkpoint is not None and c.saved is not None
    found = False
    for orders in itertools.islice(_resolutions(checkpoint, c.saved, s.parallelism, want), MAX_CANDIDATES):
        found = True
        yield _resolved(c, index, s, orders)
    if not found:  # no order gives the observed chunks: the reference's, for the blame
        yield _resolved(c, index, s, {})


def _deals_open_blocks(c: Candidate, s: Step) -> bool:
    """Whether step `s` is a rescale that deals from a checkpoint with blocks whose order is open."""
    checkpoint = c.model.checkpoint
    return (isinstance(s, RestoreStep) and checkpoint is not None and c.model._refusal(s) is None
            and s.parallelism != checkpoint.parallelism and c.saved is not None
            and any(len(b) > 1 for b in c.saved))


def _resolved(c: Candidate, index: int, s: Step, orders: dict[int, tuple[int, ...]]) -> Stepped:
    """The candidate with its checkpoint's blocks held in `orders` (old subtask -> the order of its
    blocks' old subtasks; the reference's where not given), after step `index`."""
    after = copy.deepcopy(c)
    checkpoint = after.model.checkpoint
    assert checkpoint is not None and after.saved is not None
    checkpoint.operator = [held(lists, after.saved[j], orders.get(j))
                           for j, lists in enumerate(checkpoint.operator)]
    after.saved = [[] for _ in checkpoint.operator]  # now fixed: restoring it again deals the same
    return after, _apply(after, index, s)


def _apply(c: Candidate, index: int, s: Step) -> list[Event]:
    """Step `s` on the candidate's model, with the blocks its state holds afterwards."""
    checkpoint = c.model.checkpoint
    events = c.model.apply(index, s)
    if isinstance(s, CheckpointStep):
        c.saved = copy.deepcopy(c.blocks)
    elif isinstance(s, RestoreStep) and events and events[0].event == "restored":
        if checkpoint is None:
            c.blocks = [[] for _ in range(s.parallelism)]  # a new job
        elif s.parallelism == checkpoint.parallelism:  # KG-20: the lists stay as they are held
            c.blocks = copy.deepcopy(c.saved) if c.saved is not None else [[] for _ in range(s.parallelism)]
        else:
            c.blocks = blocks_of(checkpoint, s.parallelism)
    return events


# --------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------


def _split_modes(modes: dict[str, str]) -> dict[str, str]:
    return {n: m for n, m in modes.items() if m == "split"}


def blocks_of(checkpoint: Snapshot, parallelism: int) -> list[Blocks]:
    """KG-17: the blocks each new subtask holds after the checkpoint's split lists are dealt to
    `parallelism` subtasks: the reference's dealing of each element's old subtask."""
    split = _split_modes(checkpoint.modes)
    tagged = [{n: [j] * len(lists.get(n, [])) for n in split} for j, lists in enumerate(checkpoint.operator)]
    out: list[Blocks] = []
    for lists in repartition_operator_state(tagged, split, parallelism):
        counts: dict[int, dict[str, int]] = {}
        for name, tags in lists.items():
            for j in tags:
                counts.setdefault(j, {}).setdefault(name, 0)
                counts[j][name] += 1
        out.append(sorted(counts.items()))
    return out


def held(lists: dict[str, list[int]], blocks: Blocks, order: Sequence[int] | None) -> dict[str, list[int]]:
    """A subtask's lists with its `blocks` (held in old subtask order at the front of each list)
    held in `order` instead (a permutation of their old subtasks; None: as they are)."""
    if order is None or len(blocks) < 2:
        return {n: list(v) for n, v in lists.items()}
    out: dict[str, list[int]] = {}
    for name, elements in lists.items():
        pieces: dict[int, list[int]] = {}
        taken = 0
        for j, counts in blocks:
            n = counts.get(name, 0)
            pieces[j] = list(elements[taken:taken + n])
            taken += n
        out[name] = [x for j in order for x in pieces[j]] + list(elements[taken:])
    return out


def block_orders(blocks: Blocks) -> Iterator[tuple[int, ...]]:
    """Every order a subtask may hold its blocks in (KG-17), the reference's first."""
    return itertools.permutations([j for j, _ in blocks])


def legal_old_states(checkpoint: Snapshot, saved: list[Blocks] | None,
                     limit: int = 5040) -> Iterator[OperatorState]:
    """The checkpoint's lists under every choice of block orders still open (at most `limit`), the
    reference's first: the old orders a rescale from it may deal from."""
    if saved is None:
        yield checkpoint.operator
        return
    choices = [block_orders(b) for b in saved]
    for orders in itertools.islice(itertools.product(*choices), limit):
        yield [held(lists, saved[j], orders[j]) for j, lists in enumerate(checkpoint.operator)]


# --------------------------------------------------------------------------
# Resolving the orders at a rescale
# --------------------------------------------------------------------------


def _resolutions(checkpoint: Snapshot, saved: list[Blocks], parallelism: int,
                 want: Sequence[Event]) -> Iterator[dict[int, tuple[int, ...]]]:
    """Every choice of block orders (old subtask -> order) under which dealing the checkpoint's split
    lists to `parallelism` subtasks gives the observed chunks (`want`'s `operator` events of split
    names, compared as multisets), old subtask by old subtask, a choice dropped as soon as an element
    it places falls in a chunk that does not hold it."""
    split = sorted(_split_modes(checkpoint.modes))
    old = checkpoint.operator
    positions: list[dict[str, list[int]]] = []  # each element's place in the old order, per name
    offset = dict.fromkeys(split, 0)
    for lists in old:
        positions.append({})
        for name in split:
            n = len(lists.get(name, []))
            positions[-1][name] = list(range(offset[name], offset[name] + n))
            offset[name] += n
    chunk_of: dict[tuple[str, int], int] = {}  # (name, position) -> the subtask it is dealt to
    dealt = repartition_operator_state(positions, dict.fromkeys(split, "split"), parallelism)
    for subtask, lists in enumerate(dealt):
        for name, places in lists.items():
            for at in places:
                chunk_of[name, at] = subtask
    remaining: dict[tuple[int, str], Counter[int]] = {
        (e.subtask, e.name): Counter(e.elements) for e in want if e.event == "operator" and e.name in split}
    nodes = [0]

    def place(j: int, order: Sequence[int] | None) -> list[tuple[int, str, int]] | None:
        lists = held(old[j], saved[j], order)
        done: list[tuple[int, str, int]] = []
        for name in split:
            for at, x in zip(positions[j][name], lists.get(name, [])):
                key = (chunk_of[name, at], name)
                left = remaining.get(key)
                if left is None or left[x] <= 0:
                    undo(done)
                    return None
                left[x] -= 1
                done.append((key[0], name, x))
        return done

    def undo(done: list[tuple[int, str, int]]) -> None:
        for subtask, name, x in done:
            remaining[subtask, name][x] += 1

    def search(j: int, chosen: dict[int, tuple[int, ...]]) -> Iterator[dict[int, tuple[int, ...]]]:
        if j == len(old):
            yield dict(chosen)
            return
        orders = list(block_orders(saved[j])) if len(saved[j]) > 1 else [None]
        for order in orders:
            nodes[0] += 1
            if nodes[0] > MAX_NODES:
                return
            done = place(j, order)
            if done is None:
                continue
            if order is not None:
                chosen[j] = tuple(order)
            yield from search(j + 1, chosen)
            chosen.pop(j, None)
            undo(done)

    yield from search(0, {})
