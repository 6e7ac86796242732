"""Which rule a difference between the reference's and an adapter's events of one mini-batch step
shows broken (issue 32): the area's `rules_for_events` hook (conformance/areas/__init__.py).

The checker hands the hook the first differing group of a step (the outputs between two markers,
or one marker).  Every earlier step matched, so the reference model replayed through the step
(`Replay`, which notes why each bundle finished and what each key's result was) tells what the
adapter should have done there.  The difference, read key by key, names the rule:

* only the sums differ, or only MIN/MAX: MB-30 (SUM as a Java long; MIN and MAX with retraction);
* only the `-U` rows differ, their presence against `update_before`: MB-20;
* a key whose result did not change: refreshed without `ttl` (MB-21) or not refreshed with it
  (MB-22);
* a key without state whose leading retractions the reference dropped (MB-18), or keys lost after
  a key the reference skipped because nothing of it remained (MB-18: the next key goes on; lost,
  not late: the adapter's later events lack them);
* outputs or a watermark where the reference dropped the assigner's watermark while idle: MB-15;
* outputs the reference emits and the adapter does not, by what finished the reference's bundle:
  its size (MB-10: the finish came late), a watermark (MB-12: not finished before it; MB-29 when
  that watermark is one the valve passed only because a restore started it afresh, MB-8 possible),
  a checkpoint barrier (MB-13), end of input (MB-14);
* outputs the adapter emits at a row where the reference finishes nothing (a size finish too
  early): MB-11 when a finish by something else than the size came before in the incarnation
  (its count not reset), else MB-10.

Anything else: no rule singled out (an empty tuple), so the checker falls back to the event kinds'
rules (`rules_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flink_semantics.conformance.areas import Blame
from flink_semantics.reference.mini_batch import LONG_MIN, Bundle, Model
from flink_semantics.spec.areas.mini_batch import RETRACTIONS, MiniBatchConfig, RowStep
from flink_semantics.spec.schedule import Event, Schedule

SIZE, WATERMARK, CHECKPOINT, END = "size", "watermark", "checkpoint", "end"
RULE_OF_CAUSE = {SIZE: "MB-10", WATERMARK: "MB-12", CHECKPOINT: "MB-13", END: "MB-14"}


@dataclass
class Finish:
    """A bundle finished by the reference: at which step, which one (`local` or the aggregation's
    `global`), why (`cause`, with the watermark's timestamp), in which incarnation, and the output
    events it gave (a local finish: those of the aggregation's finishes it set off)."""

    step: int
    phase: str
    cause: str
    incarnation: int
    events: list[Event] = field(default_factory=list)
    timestamp: int | None = None
    past_valve: int = LONG_MIN  # the highest watermark the valve passed in earlier incarnations
    within: Finish | None = None  # the finish that set this one off (a local one's, for the global)


@dataclass
class Applied:
    """A key's rows applied by the reference (one-phase, MB-17..MB-24): whether it had state, whether
    leading retractions were dropped (MB-18), and whether nothing remained (the key skipped)."""

    step: int
    key: int
    order: int  # its place among the keys of its bundle (first arrival)
    leading: bool
    skipped: bool
    finish: Finish | None


@dataclass
class Result:
    """A key's result compared by the reference: before and after (MB-19..MB-23)."""

    step: int
    key: int
    prev: tuple[int, int, int, int] | None
    new: tuple[int, int, int, int] | None


@dataclass
class Passed:
    """A watermark the reference's valve passed (MB-8): in which incarnation, and the highest one it
    passed in the earlier ones (MB-29: a restore starts the valve afresh)."""

    step: int
    timestamp: int
    incarnation: int
    past_valve: int

    @property
    def only_afresh(self) -> bool:
        """Passed only because the restore started the valve afresh: a valve remembering the earlier
        incarnations' watermarks would drop it."""
        return self.incarnation > 0 and self.timestamp <= self.past_valve


class _TracedBundle(Bundle):
    """A bundle that tells the replay when and why it finishes."""

    def __init__(self, replay: Replay, phase: str, bundle: Bundle):
        super().__init__(bundle.size, bundle._finish)
        self.replay, self.phase, self.adding = replay, phase, False

    def add(self, index: int, key: int, item: object) -> None:
        self.adding = True  # a finish now is the size trigger's (MB-10)
        try:
            super().add(index, key, item)
        finally:
            self.adding = False

    def finish(self, index: int) -> None:
        if not self.items:
            super().finish(index)
            return
        r = self.replay
        cause, ts = (SIZE, None) if self.adding else r.why
        done = Finish(index, self.phase, cause, r.incarnation, timestamp=ts, past_valve=r.past_valve,
                      within=r.current_finish)
        r.finishes.append(done)
        outer, r.current_finish = r.current_finish, done
        start = len(r.out)
        try:
            super().finish(index)
        finally:
            r.current_finish = outer
        done.events = list(r.out[start:])


class Replay(Model):
    """The reference model, noting what the blame needs: each bundle finish and its cause, each
    key's application and result, the watermarks the assigner dropped while idle (MB-15), and the
    highest watermark the valve passed in earlier incarnations (MB-29)."""

    def __init__(self, config: MiniBatchConfig):
        self.finishes: list[Finish] = []
        self.applied: list[Applied] = []
        self.results: list[Result] = []
        self.idle_dropped: list[tuple[int, int]] = []
        self.passed: list[Passed] = []
        self.why: tuple[str, int | None] = (END, None)
        self.incarnation = -1
        self.past_valve = LONG_MIN
        self.current_finish: Finish | None = None
        self.order = 0
        super().__init__(config)

    def _open(self) -> None:
        self.past_valve = max(self.past_valve, getattr(self, "valve_last", LONG_MIN))
        self.incarnation += 1
        super()._open()
        self.bundle = _TracedBundle(self, "global", self.bundle)
        self.local = _TracedBundle(self, "local", self.local)

    def _because(self, cause: str, ts: int | None, run: Any, *args: Any) -> None:
        outer, self.why = self.why, (cause, ts)
        try:
            run(*args)
        finally:
            self.why = outer

    def _assigner_emits(self, index: int, ts: int) -> None:
        if self.idle:
            self.idle_dropped.append((index, ts))
        self._because(WATERMARK, ts, super()._assigner_emits, index, ts)

    def _to_exchange(self, index: int, ts: int) -> None:
        if ts > self.valve_last:
            self.passed.append(Passed(index, ts, self.incarnation, self.past_valve))
        self._because(WATERMARK, ts, super()._to_exchange, index, ts)

    def _checkpoint(self, index: int, cid: int) -> None:
        self._because(CHECKPOINT, None, super()._checkpoint, index, cid)

    def _end(self, index: int) -> None:
        self._because(END, None, super()._end, index)

    def _finish_one_phase(self, items: dict[int, list], index: int) -> None:
        self.order = 0
        super()._finish_one_phase(items, index)

    def _apply_rows(self, index: int, key: int, rows: list[tuple[str, int]]) -> None:
        stateless = key not in self.state
        leading = stateless and bool(rows) and rows[0][0] in RETRACTIONS
        skipped = stateless and all(kind in RETRACTIONS for kind, _ in rows)
        self.applied.append(Applied(index, key, self.order, leading, skipped, self.current_finish))
        self.order += 1
        super()._apply_rows(index, key, rows)

    def _result(self, index: int, key: int, prev: tuple[int, int, int, int] | None, acc: Any) -> None:
        self.results.append(Result(index, key, prev, acc.value() if acc.count else None))
        super()._result(index, key, prev, acc)


def replay(schedule: Schedule, through: int) -> Replay:
    """The reference model run through step `through`, with its notes."""
    model = Replay(schedule.config)
    for i, s in enumerate(schedule.steps[:through + 1]):
        model.apply(i, s)
    return model


# --------------------------------------------------------------------------
# The hook
# --------------------------------------------------------------------------


def _outputs_by_key(events: Sequence[Event]) -> dict[int, list[Event]]:
    out: dict[int, list[Event]] = {}
    for e in events:
        if e.event == "out":
            out.setdefault(e.key, []).append(e)
    return out


@dataclass
class Difference:
    """The first differing group, key by key: `want` and `got` hold each differing key's outputs."""

    schedule: Schedule
    step: int
    expected: Sequence[Event]
    observed: Sequence[Event]
    model: Replay
    want: dict[int, list[Event]]
    got: dict[int, list[Event]]
    later: Sequence[Event] = ()  # the adapter's events after the group

    def came_later(self) -> bool:
        """Every key the adapter lacks has an output later in its trace counting at least the rows
        of the reference's (its finish came late, the rows not lost)."""
        def count(events: Sequence[Event]) -> int:
            return max((e.count for e in events if e.event == "out" and e.change != "-U"), default=0)

        return all(count([e for e in self.later if e.event == "out" and e.key == k]) >= count(self.want[k])
                   for k in self.want)

    @property
    def missing_only(self) -> bool:
        """The adapter emits none of the differing keys' outputs."""
        return bool(self.want) and not any(self.got.values())

    @property
    def extra_only(self) -> bool:
        """The reference emits none of the differing keys' outputs."""
        return bool(self.got) and not any(self.want.values())

    def results(self) -> dict[int, Result]:
        return {r.key: r for r in self.model.results if r.step == self.step}


def difference(schedule: Schedule, step: int, expected: Sequence[Event],
               observed: Sequence[Event], later: Sequence[Event] = ()) -> Difference:
    want, got = _outputs_by_key(expected), _outputs_by_key(observed)
    keys = [k for k in dict.fromkeys([*want, *got]) if want.get(k, []) != got.get(k, [])]
    return Difference(schedule, step, expected, observed, replay(schedule, step),
                      {k: want.get(k, []) for k in keys}, {k: got.get(k, []) for k in keys}, later)


def rules_for_events(schedule: Schedule, step: int, expected: Sequence[Event],
                     observed: Sequence[Event], later: Sequence[Event] = ()) -> Blame | tuple[str, ...]:
    """The rule the first differing group of a step shows broken (the module docstring), or () when
    the difference singles none out."""
    if not 0 <= step < len(schedule.steps):
        return ()
    d = difference(schedule, step, expected, observed, later)
    for diagnose in (_arithmetic, _update_before, _refresh, _leading_retractions, _idle, _valve, _late,
                     _early, _boundaries):
        blame = diagnose(d)
        if blame is not None:
            return blame
    return ()


def _same_but(a: Event, b: Event, fields: Sequence[str]) -> bool:
    """Whether two out events agree on every field but `fields`."""
    return all(getattr(a, f) == getattr(b, f) for f in ("key", "change", "count", "sum", "min", "max")
               if f not in fields)


def _arithmetic(d: Difference) -> Blame | None:
    """MB-30: every differing key's rows agree but for the sum (SUM as a Java long), or but for
    MIN and MAX (with retraction: every value kept with its multiplicity)."""
    if not d.want:
        return None
    pairs = [(a, b) for k in d.want for a, b in zip(d.want[k], d.got[k])]
    if any(len(d.want[k]) != len(d.got[k]) for k in d.want) or not pairs:
        return None
    if all(_same_but(a, b, ("sum",)) for a, b in pairs) or all(_same_but(a, b, ("min", "max"))
                                                               for a, b in pairs):
        return Blame(("MB-30",))
    return None


def _update_before(d: Difference) -> Blame | None:
    """MB-20: the differing keys' rows agree once `-U` rows are left out, and the adapter emits `-U`
    rows without `update_before` or none with it."""
    def plain(events: list[Event]) -> list[Event]:
        return [e for e in events if e.change != "-U"]

    if not d.want or any(plain(d.want[k]) != plain(d.got[k]) for k in d.want):
        return None
    has = any(e.change == "-U" for k in d.got for e in d.got[k])
    lacks = any(e.change == "-U" for k in d.want for e in d.want[k]) and not has
    if (has and not d.schedule.config.update_before) or (lacks and d.schedule.config.update_before):
        return Blame(("MB-20",))
    return None


def _refresh(d: Difference) -> Blame | None:
    """MB-21, MB-22: every differing key kept its result in the reference (before = after), and the
    adapter refreshes it without `ttl` (MB-21) or does not with it (MB-22)."""
    results = d.results()
    if not d.want or any(k not in results or results[k].prev is None or results[k].prev != results[k].new
                         for k in d.want):
        return None
    if d.schedule.config.ttl and d.missing_only:
        return Blame(("MB-22",))
    if not d.schedule.config.ttl and d.extra_only:
        return Blame(("MB-21",))
    return None


def _leading_retractions(d: Difference) -> Blame | None:
    """MB-18: a differing key without state whose leading retractions the reference dropped; or
    keys the adapter lost after a key the reference skipped (nothing of it remained), those before
    it in the bundle emitted alike, and their outputs not coming later (a finish that came late
    loses none of them: `_late`)."""
    applied = [a for a in d.model.applied if a.step == d.step]
    leading = {a.key for a in applied if a.leading}
    # Every differing key one with leading retractions, or some of them whose rows the adapter
    # changed (when it only lacks them and other keys too, the whole finish is missing: `_late`).
    if leading & set(d.want) and (set(d.want) <= leading or not d.missing_only):
        return Blame(("MB-18",))
    if not d.missing_only or d.came_later():
        return None
    for skip in (a for a in applied if a.skipped):
        later = {a.key for a in applied if a.finish is skip.finish and a.order > skip.order}
        if set(d.want) <= later:
            return Blame(("MB-18",))
    return None


def _idle(d: Difference) -> Blame | None:
    """MB-15: where the reference's assigner dropped a watermark at its idle output in this step,
    the adapter emits outputs or a watermark the reference does not."""
    dropped = {ts for step, ts in d.model.idle_dropped if step == d.step}
    if not dropped:
        return None
    extra_watermark = any(e.event == "watermark" and e.timestamp in dropped for e in d.observed) and not any(
        e.event == "watermark" for e in d.expected)
    if d.extra_only or extra_watermark:
        return Blame(("MB-15",))
    return None


def _finish_of(d: Difference, e: Event) -> Finish | None:
    """The reference's finish of this step that gave the output event `e` (the innermost)."""
    found = None
    for f in d.model.finishes:
        if f.step == d.step and e in f.events:
            found = f if found is None or (found.phase == "local" and f.phase == "global") else found
    return found


def _late(d: Difference) -> Blame | None:
    """The adapter lacks outputs the reference emits: the rule of what finished the reference's
    bundle (RULE_OF_CAUSE); a watermark the valve passed only because the restore started it
    afresh (at or below what it passed before): MB-29, MB-8 possible."""
    if not d.missing_only:
        return None
    finishes = [_finish_of(d, e) for k in d.want for e in d.want[k]]
    if any(f is None for f in finishes):
        return None
    causes = {f.cause for f in finishes if f is not None}
    if len(causes) != 1:
        return None
    cause = causes.pop()
    if cause == WATERMARK and not any(e.event == "watermark" for e in d.observed):
        stamps = {f.timestamp for f in finishes if f is not None}
        if any(p.only_afresh for p in d.model.passed if p.step == d.step and p.timestamp in stamps):
            return Blame(("MB-29",), ("MB-8",))
    return Blame((RULE_OF_CAUSE[cause],))


def _valve(d: Difference) -> Blame | None:
    """MB-29: the reference forwards a watermark its valve passed only because the restore started
    it afresh, and the adapter does not (MB-8 possible: the valve's own rule)."""
    if len(d.expected) != 1 or d.expected[0].event != "watermark":
        return None
    if any(e.event == "watermark" and e.timestamp == d.expected[0].timestamp for e in d.observed):
        return None
    if any(p.step == d.step and p.timestamp == d.expected[0].timestamp and p.only_afresh
           for p in d.model.passed):
        return Blame(("MB-29",), ("MB-8",))
    return None


def _early(d: Difference) -> Blame | None:
    """The adapter emits outputs at a row where the reference finishes no bundle, or more than the
    reference's size finishes of the step hold (in two-phase aggregation, a key's accumulator in a
    global bundle that the reference's finished without it): the size trigger fired early
    (`_too_soon`)."""
    here = [f for f in d.model.finishes if f.step == d.step]
    if not d.extra_only or any(f.cause != SIZE for f in here):
        return None
    if not here and not isinstance(d.schedule.steps[d.step], RowStep):
        return None
    return _too_soon(d)


def _too_soon(d: Difference) -> Blame:
    """A size finish too early: MB-11 when a bundle of this incarnation finished before by something
    else than its size (its count not reset), else MB-10."""
    before = [f for f in d.model.finishes if f.incarnation == d.model.incarnation and f.step < d.step]
    if any(f.cause != SIZE for f in before):
        return Blame(("MB-11",), ("MB-10",))
    return Blame(("MB-10",), ("MB-11",))


def _final(events: list[Event]) -> tuple[Any, ...] | None:
    """A key's result after its changes of the group (None: deleted or none)."""
    last = [e for e in events if e.change != "-U"]
    return None if not last or last[-1].change == "-D" else tuple(last[-1].data[2:])


def _last_change(events: list[Event]) -> int:
    """Where a key's last change starts among its events (its `-U` with its `+U`)."""
    i = len(events) - 1
    return i - 1 if i > 0 and events[i].change == "+U" and events[i - 1].change == "-U" else i


def _boundaries(d: Difference) -> Blame | None:
    """Each differing key ends with the same result, in fewer changes or in more than the
    reference's: bundles finished at other inputs.  Fewer, where the reference's earlier changes
    come from size finishes: one finish came late (MB-10); more: a size finish too early
    (`_too_soon`)."""
    if not d.want or any(_final(d.want[k]) != _final(d.got[k]) for k in d.want):
        return None
    fewer = all(len(d.got[k]) < len(d.want[k]) for k in d.want)
    more = all(len(d.got[k]) > len(d.want[k]) for k in d.want)
    if fewer:
        earlier = [_finish_of(d, e) for k in d.want for e in d.want[k][:_last_change(d.want[k])]]
        if earlier and all(f is not None and f.cause == SIZE for f in earlier):
            return Blame(("MB-10",))
    elif more:
        return _too_soon(d)
    return None


