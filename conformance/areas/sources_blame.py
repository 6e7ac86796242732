"""Which rule a difference in a sources trace shows broken: the area's `rules_for_events` hook
(conformance/areas/__init__.py), kept apart from the strategies in conformance/areas/sources.py.

The checker hands the hook the first differing group of events of one step (expected, observed);
every earlier step, and the groups before it in the step, are equal in both traces.  So the
reference model run on the steps before (`Before`) shows what the adapter had seen too: the
tracker's buckets and the checkpoint each is under, the restore point, which splits came back,
which records a failover discarded.  Against that, the field that differs names the rule (spec/
sources.md's rule text is the oracle):

* an assignment or NoMoreSplits reaching a reader while a checkpoint awaits its barrier, or after
  a later reader's snapshot at the barrier: SRC-13 (the valve);
* END_OF_INPUT in the group, on either side: SRC-32;
* a request of (or a push to) the new attempt of a reader whose failed attempt had NoMoreSplits,
  left unanswered: SRC-25;
* a push to an unregistered reader that does not fail the job, or a reader not registering at
  `end`, when a global failover emptied the registry: SRC-5, else SRC-4;
* the tasks of a `reset`: SRC-35 when they cut a pipelined region, else SRC-36;
* the splits of a `splits_back`: a split covered by the restore point, SRC-22; one missing from
  a bucket whose checkpoint was aborted, SRC-18 (failed: SRC-19), or dropped by the notification of
  an earlier checkpoint, SRC-17; anything else (order, the uncheckpointed bucket), SRC-21;
* a `committed` event: records a failed attempt emitted after its restore point, SRC-20 (a global
  failover's, SRC-28); a record committed twice, SRC-38; else by the step: a notification, SRC-17,
  a failover, SRC-29, `end`, SRC-44;
* an assignment of a split a failover gave back (on either side): SRC-24;
* the restored splits of a `registered` event: SRC-31 after a rescale, SRC-28 after another global
  failover, SRC-21 after a reader's reset.

SRC-16 and SRC-38 are invariants derived from the other rules (spec/sources.md says so): where a
difference names the rule it comes from, they are only `possible` (inconclusive), never failed on
its account.  Anything else gets the event kinds' rules (`rules_for`), as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from flink_semantics.conformance.areas import Blame
from flink_semantics.conformance.areas.sources_orders import orders_before
from flink_semantics.reference.sources import ABORTED, Model, pipelined_regions
from flink_semantics.spec.areas.sources import (
    AbortStep,
    AssignStep,
    BarrierStep,
    CheckpointStep,
    CompleteStep,
    EndStep,
    FailEnumeratorStep,
    FailStep,
    RescaleStep,
    task_count,
)
from flink_semantics.spec.schedule import Event, Schedule, Step

Record = tuple[int, int]
# Steps that may open the valve (SRC-13): a barrier, an abort, a failure.
_OPENS_VALVE = (BarrierStep, AbortStep, FailStep, FailEnumeratorStep, RescaleStep, CompleteStep)
_DELIVERED = ("assigned", "no_more_splits")


@dataclass
class Before:
    """The reference model after the steps before `step`, and what those steps showed."""

    schedule: Schedule
    step: int
    model: Model
    taken_at: dict[int, int] = field(default_factory=dict)  # checkpoint -> the step that took it
    failed: set[int] = field(default_factory=set)  # checkpoints whose enumerator snapshot threw
    notified: list[tuple[int, int]] = field(default_factory=list)  # (step, checkpoint) notifications
    returned: set[int] = field(default_factory=set)  # splits given back and not assigned since
    discarded: Counter = field(default_factory=Counter)  # records a reader's reset discarded (SRC-20)
    discarded_globally: Counter = field(default_factory=Counter)  # ... a global failover (SRC-28)
    committed: Counter = field(default_factory=Counter)
    unregistered_globally: set[int] = field(default_factory=set)  # readers a global failover unregistered
    restart: dict[int, str] = field(default_factory=dict)  # reader -> how it last restarted
    told_before_reset: set[int] = field(default_factory=set)  # readers reset after NoMoreSplits was signalled

    @property
    def current(self) -> Step:
        return self.schedule.steps[self.step]


def before(schedule: Schedule, step: int) -> Before:
    """Run the reference model on the steps before `step`, noting what the judges need."""
    ctx = Before(schedule, step, Model(schedule.config))
    ctx.model.block_orders = orders_before(schedule, step)  # the checker's choice (SRC-31's freedom)
    for i, s in enumerate(schedule.steps[:step]):
        _apply(ctx, i, s)
    return ctx


def _uncommitted(model: Model, r: int) -> list[Record]:
    """What reader r's sink would discard if it restarted now: its records since the last barrier,
    and those staged before a barrier after the restore point."""
    reader = model.readers[r]
    point = model.last_completed
    staged = [p for k, ps in reader.staged.items() if point is None or k > point for p in ps]
    return [tuple(p) for p in [*reader.pending, *staged]]  # type: ignore[misc]


def _apply(ctx: Before, i: int, s: Step) -> None:
    m = ctx.model
    lost = {r: _uncommitted(m, r) for r in range(m.parallelism)}
    registered = {r for r in range(m.parallelism) if m.readers[r].registered}
    told = set(m.no_more)  # the coordinator signalled NoMoreSplits (SRC-9), delivered or held
    if isinstance(s, CheckpointStep):
        ctx.taken_at[s.id] = i
        if s.fails:
            ctx.failed.add(s.id)
    for e in m.apply(i, s):
        if e.event == "reset":
            for r in (t for t in e.tasks if t < len(lost)):
                ctx.discarded.update(lost[r])
                ctx.restart[r] = "reset"
                ctx.unregistered_globally.discard(r)
                if r in told:
                    ctx.told_before_reset.add(r)
        elif e.event == "global_failover":
            ctx.discarded_globally.update(p for ps in lost.values() for p in ps)
            ctx.unregistered_globally = registered | ctx.unregistered_globally
            ctx.restart = {r: e.cause for r in range(m.parallelism)}
            ctx.returned = set()  # the enumerator is restored: nothing was given back to it
        elif e.event == "registered":
            ctx.unregistered_globally.discard(e.reader)
        elif e.event == "splits_back":
            ctx.returned.update(e.splits)
        elif e.event == "assigned":
            ctx.returned.discard(e.split)
        elif e.event == "committed":
            ctx.committed.update(tuple(p) for p in e.records)
            if isinstance(s, CompleteStep):
                ctx.notified.append((i, s.id))
    ctx.unregistered_globally = {r for r in ctx.unregistered_globally if r < m.parallelism}


# --------------------------------------------------------------------------
# The judges: each a Blame when the difference is of its kind, else None
# --------------------------------------------------------------------------

Judge = Callable[[Before, Sequence[Event], Sequence[Event]], Blame | None]


def _of(events: Sequence[Event], *kinds: str) -> list[Event]:
    return [e for e in events if e.event in kinds]


def _valve(ctx: Before, exp: Sequence[Event], obs: Sequence[Event]) -> Blame | None:
    """SRC-13: an event delivered while the valve holds it (a checkpoint awaits its barrier and the
    step opens nothing), or at the barrier, before the reader's snapshot or after a later one's."""
    if ctx.model.valve is None:
        return None
    early = [e for e in _of(obs, *_DELIVERED) if e not in exp]
    if not isinstance(ctx.current, _OPENS_VALVE) and early:
        return Blame(("SRC-13",), ("SRC-8", "SRC-10"))
    if isinstance(ctx.current, BarrierStep):
        sides = {e.event for e in exp}, {e.event for e in obs}
        for a, b in (sides, sides[::-1]):
            if "reader_checkpoint" in a and b & set(_DELIVERED):
                return Blame(("SRC-13",), ("SRC-15",))
    return None


def _end_of_input(ctx: Before, exp: Sequence[Event], obs: Sequence[Event]) -> Blame | None:
    """SRC-32: END_OF_INPUT reported where the reference does not, or not where it does."""
    if _of(exp, "end_of_input") != _of(obs, "end_of_input"):
        return Blame(("SRC-32",), ("SRC-9",))
    return None


def _no_more_again(ctx: Before, exp: Sequence[Event], obs: Sequence[Event]) -> Blame | None:
    """SRC-25: the new attempt of a reader that got NoMoreSplits before its reset may request again
    and get NoMoreSplits again (the reset clears the flag, SRC-21): an answer to its request (or a
    push to it, or what the valve held for it) missing, where the reference delivers one."""
    s = ctx.current
    want = {e.reader for e in _of(exp, *_DELIVERED)}
    if isinstance(s, AssignStep) and _of(exp, "global_failover"):
        want.add(s.reader)
    got = {e.reader for e in _of(obs, *_DELIVERED)}
    if isinstance(s, AssignStep) and _of(obs, "global_failover"):
        got.add(s.reader)
    if (want - got) & ctx.told_before_reset:
        return Blame(("SRC-25",), ("SRC-6", "SRC-21"))
    return None


def _registry(ctx: Before, exp: Sequence[Event], obs: Sequence[Event]) -> Blame | None:
    """SRC-4, SRC-5: a push to a reader that is not registered must fail the job; after a global
    failover no reader is registered until it registers again (also at `end`, which registers every
    reader that is not)."""
    s = ctx.current
    if isinstance(s, AssignStep):
        want = [e for e in _of(exp, "global_failover") if e.cause == "unregistered"]
        got = [e for e in _of(obs, "global_failover") if e.cause == "unregistered"]
        if want and not got:
            rule = "SRC-5" if s.reader in ctx.unregistered_globally else "SRC-4"
            if set(ctx.model.queue) <= ctx.returned:  # an empty queue would explain it too
                return Blame((rule, "SRC-24"))  # both: the step cannot tell which
            return Blame((rule,), ("SRC-28",))
        if got and not want:
            return Blame(("SRC-4",), ())
    if isinstance(s, EndStep):
        missing = {e.reader for e in _of(exp, "registered")} - {e.reader for e in _of(obs, "registered")}
        if missing and missing <= ctx.unregistered_globally:
            return Blame(("SRC-5",), ("SRC-28", "SRC-44"))
    return None


def _reset(ctx: Before, exp: Sequence[Event], obs: Sequence[Event]) -> Blame | None:
    """SRC-35, SRC-36: the tasks a failure restarts.  A set that cuts a pipelined region shows the
    regions wrong (SRC-35); a union of regions, the closure over blocking edges (SRC-36)."""
    want, got = _of(exp, "reset"), _of(obs, "reset")
    if not want or not got or want[0].tasks == got[0].tasks:
        return None
    c = ctx.schedule.config
    regions = pipelined_regions(task_count(c), [(e[0], e[1]) for e in c.pipelined],
                                [(e[0], e[1]) for e in c.blocking])
    tasks = set(got[0].tasks)
    if all(r <= tasks or not r & tasks for r in regions):
        return Blame(("SRC-36",), ("SRC-35", "SRC-37"))
    return Blame(("SRC-35",), ("SRC-36", "SRC-37"))


def _splits_back(ctx: Before, exp: Sequence[Event], obs: Sequence[Event]) -> Blame | None:
    """SRC-17, SRC-18, SRC-19, SRC-21, SRC-22, SRC-23: what a reset gives back, judged by the bucket
    each differing split was tracked under."""
    want, got = _of(exp, "splits_back"), _of(obs, "splits_back")
    if len(want) != 1 or len(got) != 1 or want[0].reader != got[0].reader:
        return None
    m, r = ctx.model, want[0].reader
    point = m.last_completed
    extra = [s for s in got[0].splits if s not in want[0].splits]
    missing = [s for s in want[0].splits if s not in got[0].splits]
    covered = {s for k, bucket in m.tracker.items() if point is not None and k <= point
               for s in bucket.get(r, [])} | {s for s, _ in m.restored_state(r)}
    if any(s in covered for s in extra):
        return Blame(("SRC-22",), ("SRC-21",))
    # Each bucket after the restore point, and the rules that would have dropped it: a missing
    # split's bucket names them; one given back whole clears those that would have dropped it too.
    after = {k: bucket[r] for k, bucket in m.tracker.items() if r in bucket and (point is None or k > point)}
    suspects: set[str] = set()
    cleared: set[str] = set()
    for k, splits in after.items():
        causes = _droppers(ctx, k)
        if any(s in missing for s in splits):
            suspects |= causes
        elif all(s in got[0].splits for s in splits):
            cleared |= causes
    if suspects:
        broken = tuple(sorted(suspects - cleared or suspects))
        possible = sorted({*suspects, "SRC-21", *(("SRC-18",) if "SRC-19" in broken else ())} - set(broken))
        return Blame(broken, tuple(possible))
    others = {s for k, bucket in m.tracker.items() for q, ss in bucket.items() if q != r for s in ss}
    if any(s in others for s in extra):
        return Blame(("SRC-23",), ("SRC-21",))
    return Blame(("SRC-21",), ("SRC-7", "SRC-11"))


def _droppers(ctx: Before, k: int) -> set[str]:
    """The rules whose breach would drop the bucket under checkpoint k: its checkpoint failed
    (SRC-19) or was aborted (SRC-18); an earlier checkpoint's notification came after k was taken
    (SRC-17)."""
    out = set()
    if k in ctx.failed:
        out.add("SRC-19")
    elif ctx.model.checkpoints[k].state == ABORTED:
        out.add("SRC-18")
    if any(n < k and at > ctx.taken_at[k] for at, n in ctx.notified):
        out.add("SRC-17")
    return out


def _records(events: Sequence[Event]) -> Counter:
    return Counter(tuple(p) for e in events if e.event == "committed" for p in e.records)


def _commits(ctx: Before, exp: Sequence[Event], obs: Sequence[Event]) -> Blame | None:
    """SRC-17, SRC-20, SRC-28, SRC-29, SRC-38, SRC-44: what the sinks commit, judged by the records
    too many and by the step."""
    if not _of(exp, "committed") and not _of(obs, "committed"):
        return None
    if _of(exp, "record", "split_finished") != _of(obs, "record", "split_finished"):
        return None  # the reading differs first
    want, got = _records(exp), _records(obs)
    extra = got - want
    if extra & ctx.discarded:
        return Blame(("SRC-20",), ("SRC-38",))
    if extra & ctx.discarded_globally:
        return Blame(("SRC-28",), ("SRC-38",))
    if any(got[p] + ctx.committed[p] > 1 for p in extra):
        return Blame(("SRC-38",), ())  # a record committed twice, by no rule above
    s = ctx.current
    if isinstance(s, CompleteStep):
        return Blame(("SRC-17",), ("SRC-38",))
    if isinstance(s, EndStep):
        return Blame(("SRC-44",), ("SRC-38",))
    return Blame(("SRC-29",), ("SRC-20", "SRC-28", "SRC-38"))


def _returned(ctx: Before, exp: Sequence[Event], obs: Sequence[Event]) -> Blame | None:
    """SRC-24: a split a failover gave back is assigned like any other, to whichever reader asks."""
    mine = [e.split for e in _of(exp, "assigned") if e.split in ctx.returned]
    theirs = [e.split for e in _of(obs, "assigned") if e.split in ctx.returned]
    if mine != theirs:
        return Blame(("SRC-24",), ("SRC-10",))
    return None


def _restored(ctx: Before, exp: Sequence[Event], obs: Sequence[Event]) -> Blame | None:
    """SRC-21, SRC-28, SRC-31: the restored splits a new attempt registers with (SRC-2)."""
    want, got = _of(exp, "registered"), _of(obs, "registered")
    if len(want) != 1 or len(got) != 1 or want[0].reader != got[0].reader or want[0].splits == got[0].splits:
        return None
    how = ctx.restart.get(want[0].reader)
    rule = {"rescale": "SRC-31", "reset": "SRC-21", None: "SRC-2"}.get(how, "SRC-28")
    return Blame((rule,), tuple(r for r in ("SRC-2",) if r != rule))


JUDGES: tuple[Judge, ...] = (_valve, _end_of_input, _no_more_again, _registry, _reset, _splits_back, _commits,
                             _returned, _restored)


def rules_for_events(schedule: Schedule, step: int, expected: Sequence[Event],
                     observed: Sequence[Event], later: Sequence[Event] = ()) -> Blame | tuple[str, ...]:
    """The rule a difference between these events of one step shows broken (the module docstring
    says how each is told), with the rules it may concern too as `possible`; an empty tuple (the
    event kinds' rules) when none of the judges recognizes it."""
    if step < 0 or step >= len(schedule.steps):
        return ()
    ctx = before(schedule, step)
    for judge in JUDGES:
        told = judge(ctx, expected, observed)
        if told is not None:
            return told
    return ()
