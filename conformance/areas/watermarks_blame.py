"""Which rule a difference between a watermarks trace and the reference's shows broken (issue 32).

The checker compares a step's events group by group and hands the first differing pair of groups
to `rules_for_events` (conformance/areas/__init__.py).  The events before that pair are equal on
both sides, so what differs is the next thing the adapter did.  Each diagnosis below reads the
difference against the spec's rule text and the reference model's state at that point (the model
run up to the differing event, `_state_at`), and returns a `Blame`: the rule the difference shows
broken, and the rules it may concern but does not single out (their verdict is `inconclusive`).
A difference no diagnosis explains falls back to the rules of its event kinds (`rules_for`).

The diagnoses, in the order they are tried:

* `_across_restart` (WM-16): the adapter acts as the reference would had a reader, or the valve,
  kept across a failover what it had before it (its last watermark, its IDLE, a channel's value).
* `_at_end` (WM-15, WM-4): end of input finishes every split, then every reader sends MAX (ACTIVE
  first if idle, D2); a split that was added but never read, and is not finished, was not
  registered when it was added (WM-4).
* `_split_order` (WM-4): events about a reader's splits come in the order they were added (the
  order their outputs were registered); splits in the order of their first records show outputs
  registered at the first record.
* `_alignment` (WM-23, WM-25, WM-26): announcements, readers blocked, splits paused.
* `_reader_watermark` (WM-11, WM-6, WM-4): a watermark not above the last one the reader sent;
  one held back, or let through, by a split the combination leaves out (idle) or counts (new).
* `_valve_after_status` (WM-19, WM-20): the valve's answer to a reader's status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from flink_semantics.conformance.areas import Blame
from flink_semantics.reference.watermarks import Model
from flink_semantics.spec.areas.watermarks import MIN_WATERMARK, AddSplitStep, EndStep, WatermarksConfig
from flink_semantics.spec.schedule import Event, Schedule

# --------------------------------------------------------------------------
# The reference's state at the differing event
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ReaderState:
    """A reader of the reference model: its splits' partial watermarks (split -> (watermark,
    idle)), in the order registered, and what its output last sent (WM-11)."""

    partials: tuple[tuple[int, int, bool], ...]
    max_sent: int
    idle: bool
    max_allowed: int


@dataclass(frozen=True)
class ValveState:
    channels: tuple[tuple[int, bool, bool], ...]  # (watermark, idle, aligned) per channel
    last: int


@dataclass
class Facts:
    """What the diagnoses read: the reference trace up to the differing event (`before`: equal on
    both sides), the events the reference emits from there on in the step (`expected`, the rest
    of the step: `rest`), the adapter's differing group (`observed`), and the model's state."""

    schedule: Schedule
    step: int
    before: list[Event]
    expected: Sequence[Event]
    rest: list[Event]
    observed: Sequence[Event]
    readers: tuple[ReaderState, ...] = ()
    valve: ValveState | None = None
    attempts: list[list[Event]] = field(default_factory=list)  # `before`, cut at each `restarted`

    @property
    def e(self) -> Event | None:
        return self.expected[0] if self.expected else None

    @property
    def o(self) -> Event | None:
        return self.observed[0] if self.observed else None

    def this_attempt(self) -> list[Event]:
        return self.attempts[-1]

    def previous_attempt(self) -> list[Event] | None:
        return self.attempts[-2] if len(self.attempts) > 1 else None


class _Watch(list):  # type: ignore[type-arg]
    """A model's event list that takes a snapshot of the model just before the event at `at`
    (step, index within the step) is emitted."""

    def __init__(self, model: Model, at: tuple[int, int], take: Callable[[Model], None]):
        super().__init__()
        self.model, self.at, self.take = model, at, take

    def append(self, e: Event) -> None:
        if (self.model.step_index, len(self)) == self.at:
            self.take(self.model)
        super().append(e)


class _Probe(Model):
    """The reference model, watched (`_Watch`)."""

    def __init__(self, config: WatermarksConfig, at: tuple[int, int], take: Callable[[Model], None]):
        self.at, self.take = at, take
        super().__init__(config)

    def _start(self) -> None:
        if not isinstance(self.events, _Watch):
            self.events = _Watch(self, self.at, self.take)
        super()._start()


def _snapshot(model: Model) -> tuple[tuple[ReaderState, ...], ValveState]:
    readers = tuple(ReaderState(tuple((s, p.watermark, p.idle) for s, p in r.mux.partials.items()),
                                r.output.max_so_far, r.output.idle, r.max_allowed) for r in model.readers)
    channels = tuple((c.watermark, c.idle, c.aligned) for c in model.valve.channels)
    return readers, ValveState(channels, model.valve.last)


def facts(schedule: Schedule, step: int, expected: Sequence[Event], observed: Sequence[Event]) -> Facts:
    """The reference run up to the first differing group of `step` (its first event, or the step's
    end when the reference has no more events there)."""
    taken: list[tuple[tuple[ReaderState, ...], ValveState]] = []
    model = Model(schedule.config)
    trace: list[Event] = []
    for i, s in enumerate(schedule.steps[:step]):
        trace += model.apply(i, s)
    mine = model.apply(step, schedule.steps[step]) if step < len(schedule.steps) else []
    at = _index(mine, expected)
    # Again, watched at the differing event: the model's state as the reference emits it.
    model = _Probe(schedule.config, (step, at), lambda m: taken.append(_snapshot(m)))
    for i, s in enumerate(schedule.steps[:step + 1]):
        model.apply(i, s)
    if not taken:
        taken.append(_snapshot(model))
    before = trace + mine[:at]
    attempts: list[list[Event]] = [[]]
    for e in before:
        if e.event == "restarted":
            attempts.append([])
        else:
            attempts[-1].append(e)
    return Facts(schedule, step, before, expected, mine[at + len(expected):], observed, *taken[0], attempts)


def _index(events: list[Event], group: Sequence[Event]) -> int:
    """Where the group starts among a step's events (the step's end for an empty group)."""
    if not group:
        return len(events)
    n = len(group)
    starts = (i for i in range(len(events) - n + 1) if tuple(events[i:i + n]) == tuple(group))
    return next(starts, len(events))


# --------------------------------------------------------------------------
# Reading a trace
# --------------------------------------------------------------------------


def _last(events: Sequence[Event], kind: str, reader: int) -> Event | None:
    return next((e for e in reversed(events) if e.event == kind and e.reader == reader), None)


def _max_sent(events: Sequence[Event], reader: int) -> int:
    values = [e.value for e in events if e.event == "watermark" and e.reader == reader]
    return max(values, default=MIN_WATERMARK)


def _was_idle(events: Sequence[Event], reader: int) -> bool:
    last = _last(events, "status", reader)
    return last is not None and bool(last.idle)


def _first_reads(events: Sequence[Event]) -> dict[int, int]:
    """split -> the index of its first record among the events."""
    out: dict[int, int] = {}
    for i, e in enumerate(events):
        if e.event == "record":
            out.setdefault(e.split, i)
    return out


def _added(schedule: Schedule, upto: int) -> dict[int, int]:
    """split -> its reader, for every split added before step `upto`, in the order added."""
    return {s.split: s.reader for s in schedule.steps[:upto] if isinstance(s, AddSplitStep)}


# --------------------------------------------------------------------------
# Diagnoses
# --------------------------------------------------------------------------

Diagnosis = Callable[[Facts], Blame | None]


def _across_restart(f: Facts) -> Blame | None:
    """WM-16: after a failover every reader output and valve channel starts again from MIN and
    active.  The adapter's event is one the reference would give had a reader kept its IDLE or its
    highest watermark, or the valve a channel's watermark, from the attempts before."""
    if len(f.attempts) < 2:
        return None
    earlier = [x for attempt in f.attempts[:-1] for x in attempt]
    now, e, o = f.this_attempt(), f.e, f.o
    blame = Blame(("WM-16",), ("WM-11", "WM-17"))
    for ev in (e, o):
        if ev is None or ev.event not in ("status", "watermark") or ev.reader >= len(f.readers):
            continue
        r = ev.reader
        kept_idle = _was_idle(earlier, r) and _last(now, "status", r) is None
        if ev is o and ev.event == "status" and not ev.idle and kept_idle and not f.readers[r].idle:
            return blame  # ACTIVE from a reader active in this attempt, idle in the one before
        if ev is e and ev.event == "status" and ev.idle and kept_idle:
            return blame  # no IDLE from a reader idle in the attempt before
        upcoming = _next_watermark(f, r)
        if ev is e and upcoming is not None and _max_sent(now, r) < upcoming <= _max_sent(earlier, r):
            return blame  # the reference's next watermark of r is not above what r sent before
    if o is not None and o.event == "output_watermark" and f.valve is not None:
        for i, (watermark, _, aligned) in enumerate(f.valve.channels):
            if aligned and watermark < o.value <= _max_sent(earlier, i):
                return Blame(("WM-16",), ("WM-17", "WM-18"))  # a channel restarted below it, ignored
    return None


def _next_watermark(f: Facts, reader: int) -> int | None:
    """The value of the reader's watermark that the reference's differing event comes with: the
    event itself, or the ACTIVE just before it (WM-11), or the reader blocked on it just before
    (WM-25 with an alignment buffer of 0)."""
    e = f.e
    if e is None or e.event not in _WITH_WATERMARK or e.reader != reader:
        return None
    if e.event == "watermark":
        return int(e.value)
    if e.event == "status" and e.idle or e.event == "blocked" and f.schedule.config.alignment_buffer != 0:
        return None
    after = [x for x in (*f.expected, *f.rest)[1:] if x.event in _WITH_WATERMARK and x.reader == reader]
    after = [x for x in after if x.event != "status" or not x.idle][:2]
    watermark = next((x for x in after if x.event == "watermark"), None)
    return int(watermark.value) if watermark is not None else None


def _at_end(f: Facts) -> Blame | None:
    """WM-15 (C5, D2): at end of input every split finishes, then each reader sends MAX, ACTIVE
    first if idle.  A split missing there that was added, never read and never finished shows a
    reader without its output: not registered when added, or restored by a failover (WM-4)."""
    if not isinstance(f.schedule.steps[f.step], EndStep):
        return None
    e = f.e
    if e is not None and e.event == "split_finished":
        if e.split not in _first_reads(f.this_attempt()):
            return Blame(("WM-4",), ("WM-9", "WM-10", "WM-15", "WM-16"))
        if f.o is not None and f.o.event == "split_finished":
            return None  # another split instead: `_split_order`
        return Blame(("WM-15",), ("WM-9",))
    kinds = {x.event for x in (e, f.o) if x is not None}
    if kinds & {"split_finished", "status", "watermark"}:
        return Blame(("WM-15",), ("WM-9",))
    return None


def _split_order(f: Facts) -> Blame | None:
    """WM-4 (and WM-3's "in the order the splits were added"): a reader's splits finish, pause and
    resume in the order they were added, the order their outputs were registered.  The adapter's
    split comes first where it was added later but read first: outputs registered at the first
    record."""
    e, o = f.e, f.o
    if e is None or o is None or e.event != o.event or e.event not in ("split_finished", "paused", "resumed"):
        return None
    added = list(_added(f.schedule, f.step + 1))
    reads = _first_reads(f.this_attempt())
    if e.split in added and o.split in added and added.index(e.split) < added.index(o.split) \
            and reads.get(o.split, -1) < reads.get(e.split, 1 << 62) and o.split in reads:
        return Blame(("WM-4",), ("WM-3", "WM-15", "WM-26"))
    return None


def _alignment(f: Facts) -> Blame | None:
    """WM-25 for a reader blocked or unblocked, WM-26 for a split paused or resumed, WM-23 for an
    announcement (WM-22's reports and WM-24's going down it may concern too); a reader's decision
    first, since a reader checks before its splits (C4)."""
    kinds = {x.event for x in (f.e, f.o) if x is not None}
    if kinds & {"blocked", "unblocked"}:
        return Blame(("WM-25",), ("WM-22", "WM-23", "WM-24"))
    if kinds & {"paused", "resumed"}:
        return Blame(("WM-26",), ("WM-22", "WM-23", "WM-24"))
    if kinds == {"max_allowed"}:
        return Blame(("WM-23",), ("WM-22", "WM-24"))
    return None


def _reader_watermark(f: Facts) -> Blame | None:
    """A reader's watermark differs (or what comes with it: a reader blocked on it with an
    alignment buffer of 0, WM-25; the ACTIVE before it, WM-11).  Not above the last one it sent in
    this attempt: WM-11 (WM-7, the combination passed on, may be why).  The reference's, held back
    or let through by a split: one idle below it, which the minimum leaves out (WM-6); one added
    and never read, which holds the minimum at MIN, and without which the adapter's value is the
    minimum, or would block the reader (WM-4: its output registered when added; WM-10, the MIN it
    starts at, may be why too)."""
    e, o = f.e, f.o
    if o is not None and o.event == "watermark" and o.value <= _max_sent(f.this_attempt(), o.reader):
        return Blame(("WM-11",), ("WM-7",))
    held = _next_watermark(f, e.reader) if e is not None and e.event in _WITH_WATERMARK else None
    if e is not None and held is not None and (o is None or o.event != "watermark" or o.value < held):
        reader = f.readers[e.reader] if e.reader < len(f.readers) else None
        if reader and any(idle and w < held for _, w, idle in reader.partials):
            return Blame(("WM-6",), ("WM-5", "WM-13", "WM-25"))
    if o is None or o.event not in _WITH_WATERMARK or (o.event == "status" and o.idle):
        return None
    top = _without_new_splits(f, o.reader)
    same = e is not None and e.event == o.event and getattr(e, "reader", None) == o.reader
    if top is None or (same and o.event != "watermark"):
        return None
    reader = f.readers[o.reader]
    if o.event == "watermark" and top == o.value and (e is None or e.event != "watermark" or top > e.value):
        return Blame(("WM-4",), ("WM-10",))
    if o.event == "status" and reader.idle:
        return Blame(("WM-4",), ("WM-10", "WM-11"))  # ACTIVE: a watermark the reference holds at MIN
    if o.event == "blocked" and f.schedule.config.alignment_buffer == 0 and top > reader.max_allowed:
        return Blame(("WM-4",), ("WM-10", "WM-25"))
    return None


_WITH_WATERMARK = ("watermark", "status", "blocked")  # a reader's events that come with its watermark


def _without_new_splits(f: Facts, r: int) -> int | None:
    """The reference reader's combination without its splits that hold it at MIN, registered and
    never read in this attempt (WM-4, WM-10); None if it has none, or nothing else is active."""
    if r >= len(f.readers):
        return None
    reads = _first_reads(f.this_attempt())
    partials = f.readers[r].partials
    new = [s for s, w, idle in partials if w == MIN_WATERMARK and not idle and s not in reads]
    others = [w for s, w, idle in partials if not idle and s not in new]
    return min(others) if new and others else None


def _valve_after_status(f: Facts) -> Blame | None:
    """The valve's output differs where the reference's follows a reader's status in the same
    step (its watermark, or the IDLE a flush comes before): the valve's answer to that status,
    WM-19 for IDLE (the channel leaves the minimum; the last one flushes the maximum), WM-20 for
    ACTIVE (the channel comes back, aligned or not, and the minimum is re-derived); WM-21 may be
    concerned for a status.  The reader events before it are equal, and a valve's channels move
    only with them (WM-17), so the valve's answer to the status is what differs."""
    e = f.e
    if len(f.expected) != 1 or e is None or e.event not in ("output_watermark", "output_status"):
        return None
    if e.event == "output_status" and not any(x.event == "output_watermark" for x in f.observed):
        return None
    mine = [x for x in f.before if x.step == f.step]
    cause = next((x for x in reversed(mine) if x.event in ("status", "watermark")), None)
    if cause is None or cause.event != "status":
        return None
    return Blame(("WM-19" if cause.idle else "WM-20",), ("WM-21",) if e.event == "output_status" else ())


DIAGNOSES: tuple[Diagnosis, ...] = (_across_restart, _at_end, _split_order, _reader_watermark, _alignment,
                                    _valve_after_status)


def blame(schedule: Schedule, step: int, expected: Sequence[Event],
          observed: Sequence[Event]) -> Blame | None:
    """The first diagnosis that explains the difference, or None (the event kinds' rules)."""
    if step < 0 or step >= len(schedule.steps):
        return None
    f = facts(schedule, step, expected, observed)
    for diagnose in DIAGNOSES:
        found = diagnose(f)
        if found is not None:
            return found
    return None
