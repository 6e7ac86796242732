"""Which async I/O rule a difference between one step's events shows broken (issue 32, item 1).

The checker (conformance/checker.py) calls the area's `rules_for_events` hook with the first
differing group of one step: the expected (reference) events and the observed ones.  Everything
before that group is equal, so the adapter and the spec agree on every element admitted and
emitted so far, as far as the trace shows.  This module runs the reference model (the oracle) up to
and through the step, reads where each element is (waiting in the input channel, queued, emitted)
and answers with a `Blame`: the rule the difference breaks by the spec's text, and the rules that
could explain it too but are not singled out (their verdict `inconclusive`).  What it cannot read
falls back to the kinds' rules (an empty tuple: the area's `rules_for`) or to a plain tuple.

The readings, each from the rule's text in spec/async-io.md:

* an element admitted (invoked, emitted or stored) while the spec's queue is full, arriving in this
  step or restored: the full queue did not block the head, AIO-7 (the adapter may count slots
  otherwise, AIO-6 with a watermark queued; call before admission, AIO-9; a restore's capacity,
  AIO-57);
* the same while it already waited before the step: the step freed a slot the spec does not free,
  the slot of a completed record not yet emitted: AIO-8 when its result is not empty (an early
  emission would have shown its values), else the mode's order (AIO-12, AIO-13), AIO-8 possible;
* an element the spec admits in this step and the adapter does not: AIO-6 (the adapter lacks a slot
  the spec has: something took or kept one), AIO-7 possible; in a restore, the replay, AIO-46;
* an output that leaves before an element queued before it: ordered mode AIO-12; unordered mode
  across segments AIO-13 (AIO-15 possible when a record and a watermark cross; AIO-17 for two
  watermarks), inside a segment the completion order AIO-14;
* an output the spec emits and the adapter holds back: a watermark with nothing before it, AIO-16;
  else ordered AIO-12, unordered AIO-14 for a record, AIO-13 for a watermark;
* a record's values: another order of the same values or another timestamp, AIO-18;
* a snapshot: other elements AIO-44, the same in another order AIO-45 (AIO-55 possible in unordered
  mode); without a record the spec holds completed with an empty result, the mode's order (AIO-12,
  AIO-13: it left the queue unseen), AIO-8 and AIO-44 possible; a barrier taken while the spec's is
  blocked behind an element, AIO-44 or AIO-7 (its snapshot holds an element the spec keeps waiting);
* a status, AIO-51.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from flink_semantics.conformance.areas import Blame
from flink_semantics.reference.async_io import DONE, AsyncIoModel, Snapshot, _Record, _Watermark
from flink_semantics.spec.areas.async_io import (
    AsyncIoConfig,
    CompleteStep,
    EndStep,
    ErrorStep,
    RecordStep,
    RestoreStep,
)
from flink_semantics.spec.schedule import Event, Schedule, ScheduleError
from flink_semantics.spec.schedule import Step as StepOf

Key = tuple[str, int]  # ("record", id) or ("watermark", timestamp): an element of the input
OUTPUTS = ("emit", "watermark", "status")
RETRY_RULES = ("AIO-33", "AIO-34", "AIO-35", "AIO-36", "AIO-39", "AIO-40", "AIO-54", "AIO-60")
TIMEOUT_RULES = ("AIO-2", "AIO-26", "AIO-27", "AIO-29", "AIO-30", "AIO-31", "AIO-32", "AIO-59")


class _Tracing(AsyncIoModel):
    """The reference model, logging the elements it admits (records and watermarks), in order."""

    def __init__(self, config: AsyncIoConfig) -> None:
        self.admissions: list[Key] = []
        self.arrived: dict[int, int] = {}  # record -> the time it entered the input channel
        self.timed_out: set[int] = set()  # records whose timeout handler ran in this incarnation
        super().__init__(config)

    def apply(self, index: int, step: StepOf) -> list[Event]:
        if isinstance(step, RecordStep):
            self.arrived[len(self._inputs)] = self.now
        events = super().apply(index, step)
        self.timed_out |= {e.record for e in events if e.event == "timeout"}
        return events

    def _start_incarnation(self, capacity: int, stored: Snapshot) -> None:
        super()._start_incarnation(capacity, stored)
        self.timed_out = set()
        for kind, x in stored:  # AIO-46: a restored record enters the channel at the restore
            if kind == "record":
                self.arrived[x] = self.now

    def _take_input(self) -> bool:
        head = self._channel[0] if self._channel else None
        taken = super()._take_input()
        if taken and head is not None and head[0] in ("record", "watermark"):
            self.admissions.append(head)
        return taken


@dataclass(frozen=True)
class Entry:
    """One queued element of the spec's queue: its key, segment (its position in ordered mode),
    whether it is complete, and its result (a record's)."""

    key: Key
    segment: int
    complete: bool
    result: tuple[int, ...] = ()


def _entries(model: AsyncIoModel) -> list[Entry]:
    """The model's queue in queue order (read from the model, which has no public view of it)."""
    if not model.alive:
        return []
    queue = model._queue
    if hasattr(queue, "_entries"):
        return [_entry(e, i) for i, e in enumerate(queue._entries)]
    return [_entry(e, i) for i, s in enumerate(queue._segments)
            for e in (*s.completed, *s.incomplete.values())]


def _entry(e: _Record | _Watermark, segment: int) -> Entry:
    if isinstance(e, _Watermark):
        return Entry(("watermark", e.timestamp), segment, True)
    return Entry(("record", e.id), segment, e.state == DONE, tuple(e.result))


@dataclass
class Step:
    """The spec's state around one step: before it, its events, after it."""

    schedule: Schedule
    index: int
    before: list[Entry]  # the queue before the step
    waiting_before: list[Key]  # the input channel before the step
    queued: list[Entry]  # every element queued at some moment of the step, in queue order
    events: list[Event]  # the step's reference events
    after: list[Entry]  # the queue after the step
    waiting_after: list[Key]  # the input channel after the step
    capacity: int  # the incarnation's capacity after the step
    restored: bool  # a restore step
    full_before: bool  # an element waited at a full queue after an earlier step of the incarnation
    now: int = 0  # the clock after the step
    arrived: dict[int, int] = field(default_factory=dict)  # record -> when it entered the channel
    admitted_at: dict[int, int] = field(default_factory=dict)  # admitted record -> its admission time
    attempts: dict[int, int] = field(default_factory=dict)  # admitted record -> its attempt
    done: set[int] = field(default_factory=set)  # records complete before the step
    timed_out: set[int] = field(default_factory=set)  # records timed out before the step
    watermark_waited: bool = False  # a watermark waited at a full queue after an earlier step
    later: Sequence[Event] = ()  # the adapter's events after the differing group

    @property
    def ordered(self) -> bool:
        return self.schedule.config.mode == "ordered"


def _channel(model: AsyncIoModel) -> list[Key]:
    return [(k, x) for k, x in model._channel if k in ("record", "watermark")] if model.alive else []


def run_to(schedule: Schedule, index: int) -> Step:
    """The reference model's state before and after step `index` of a valid schedule."""
    model = _Tracing(schedule.config)
    full = waited = False
    for i, s in enumerate(schedule.steps[:index]):
        model.apply(i, s)
        full = not isinstance(s, RestoreStep) and full or _blocked(model)
        waited = waited or any(k == "watermark" for k, _ in _channel(model))
    before, waiting = _entries(model), _channel(model)
    done = {r for r, x in model._admitted.items() if x.state == DONE} if model.alive else set()
    timed_out = set(model.timed_out)
    start = len(model.admissions)
    step = schedule.steps[index]
    events = model.apply(index, step)
    restored = isinstance(step, RestoreStep)
    kept = [] if restored else list(before)
    queued = kept + _admitted(model.admissions[start:], kept, schedule.config.mode == "ordered")
    return Step(schedule, index, before, waiting, queued, list(events), _entries(model), _channel(model),
                model._capacity, restored, full and not restored, model.now, dict(model.arrived),
                {r: x.admitted_at for r, x in model._admitted.items()},
                {r: x.attempt for r, x in model._admitted.items()}, done, timed_out, waited)


def _blocked(model: AsyncIoModel) -> bool:
    """A record or a watermark waits at the head of the input channel (AIO-7: the queue is full)."""
    return model.alive and bool(model._channel) and model._channel[0][0] in ("record", "watermark")


def _admitted(keys: Sequence[Key], before: Sequence[Entry], ordered: bool) -> list[Entry]:
    """The entries the keys admitted in a step add behind `before`: a watermark is a segment of its
    own, records after a record share its segment (AIO-13); in ordered mode one position each."""
    out: list[Entry] = []
    last = before[-1] if before else None
    segment = last.segment if last else -1
    for key in keys:
        joins = not ordered and key[0] == "record" and last is not None and last.key[0] == "record"
        segment = segment if joins else segment + 1
        last = Entry(key, segment, key[0] == "watermark")
        out.append(last)
    return out


# --------------------------------------------------------------------------
# The hook
# --------------------------------------------------------------------------


def rules_for_events(schedule: Schedule, step: int, expected: Sequence[Event],
                     observed: Sequence[Event], later: Sequence[Event] = ()) -> Blame | tuple[str, ...]:
    """The rule the first difference of a step shows broken (see the module docstring).  An empty
    tuple: no reading, the kinds' rules (`rules_for`)."""
    if step < 0 or step >= len(schedule.steps):
        return ()
    if _flink_deadline_explains(schedule, step, observed, later):
        return Blame(("AIO-33",))  # D5: an outcome at its deadline retried
    if _calls_again_at_end(schedule, step, expected, observed):
        return Blame(("AIO-60",))  # D3: end of input calls again a record it must not
    kinds = {e.event for e in (*expected, *observed)}
    at = replace(run_to(schedule, step), later=tuple(later))
    if kinds & {"emit", "watermark", "status"}:
        return _outputs(at, [e for e in expected if e.event in OUTPUTS],
                        [e for e in observed if e.event in OUTPUTS])
    if kinds <= {"invoke", "timeout"}:
        return _effects(at, expected, observed)
    if kinds <= {"checkpoint"} or (len(observed) == 1 and observed[0].event == "checkpoint"):
        return _checkpoints(at, expected, observed)
    return ()


# --------------------------------------------------------------------------
# The named deviations' differences (spec/async-io.md, D3 and D5)
# --------------------------------------------------------------------------


class _FlinkDeadline(AsyncIoModel):
    """The spec's model with Flink 2.3.0's retry check (D5: `now - startTs > timeout` is a timeout,
    so an outcome exactly at admission time + `timeout` is still retried)."""

    def _before_deadline(self, record: _Record) -> bool:
        return self.now <= record.admitted_at + self.config.timeout


def _events_of(model: AsyncIoModel, steps: Sequence[StepOf]) -> tuple[list[Event], int]:
    """The model's trace of the steps, and the index of the first step it cannot take (len(steps)
    when it takes them all): a completion or an error of a record it holds no call for is dropped,
    as an engine drops a result nobody waits for; any other step it cannot take ends the run (the
    schedule was written for the spec's model, which this one left)."""
    events: list[Event] = []
    for i, s in enumerate(steps):
        try:
            events += model.apply(i, s)
        except ScheduleError:
            if not isinstance(s, (CompleteStep, ErrorStep)):
                return events, i
    return events, len(steps)


def _gives(events: Sequence[Event], upto: int, step: int, observed: Sequence[Event],
           later: Sequence[Event]) -> bool:
    """Whether a model's trace holds the adapter's differing events of the step and equals its
    events of the later steps the model took (those before `upto`)."""
    here = [e for e in events if e.step == step]
    return (all(e in here for e in observed)
            and [e for e in events if e.step > step] == [e for e in later if step < e.step < upto])


def _flink_deadline_explains(schedule: Schedule, step: int, observed: Sequence[Event],
                             later: Sequence[Event]) -> bool:
    """AIO-33 (D5): the model with Flink's retry check gives the adapter's differing events of the
    step and its events of the later steps before end of input, where the spec's model does not.
    The end step is left out: there an adapter with D5 may also call again (D3, AIO-60), which this
    model does not do."""
    if schedule.config.retry is None or schedule.config.timeout <= 0:
        return False
    flink, upto = _events_of(_FlinkDeadline(schedule.config), schedule.steps)
    spec, _ = _events_of(AsyncIoModel(schedule.config), schedule.steps)
    end = next((i for i, s in enumerate(schedule.steps) if isinstance(s, EndStep)), len(schedule.steps))
    if step < end:
        flink, upto = [e for e in flink if e.step < end], min(upto, end)
        spec = [e for e in spec if e.step < end]
    return upto > step and flink != spec and _gives(flink, upto, step, observed, later)


def _calls_again_at_end(schedule: Schedule, step: int, expected: Sequence[Event],
                        observed: Sequence[Event]) -> bool:
    """AIO-60 (D3): end of input is taken in this step and the adapter calls records the spec does
    not call again."""
    model = AsyncIoModel(schedule.config)
    for i, s in enumerate(schedule.steps[:step]):
        model.apply(i, s)
    ended = model.ended
    model.apply(step, schedule.steps[step])
    return model.ended and not ended and any(e.event == "invoke" and e not in expected for e in observed)


# --------------------------------------------------------------------------
# Admission
# --------------------------------------------------------------------------


def _over_admission(at: Step, key: Key) -> Blame | tuple[str, ...]:
    """`key` was admitted by the adapter in this step while the spec's queue kept it waiting."""
    possible = ["AIO-9"]  # AIO-9: a call before admission shows as the same invoke
    if any(e.key[0] == "watermark" for e in at.after):
        possible.append("AIO-6")  # AIO-6: the adapter may not count the watermark's slot
    if at.capacity != at.schedule.config.capacity:
        possible += ["AIO-47", "AIO-57"]  # AIO-57: the restore step's capacity
    done = [e for e in at.after if e.key[0] == "record" and e.complete]
    order = "AIO-12" if at.ordered else "AIO-13"
    # emitted out of order: nothing shows
    freed: tuple[str, ...] = (order,) if any(not e.result for e in done) else ()
    freed += ("AIO-8",) if done else ()  # AIO-8: freed at completion, not at emission
    if not freed:
        return Blame(("AIO-7",), tuple(possible))  # AIO-7: the head of a full queue must wait
    # A watermark's admission shows no event: after one waited, the adapter may have admitted it earlier
    # than the spec, unseen, with a larger bound, and the reading below does not hold.
    hidden = at.watermark_waited
    if not hidden and (at.full_before or (key in at.waiting_before and not at.restored)):
        # The adapter kept an element waiting at a full queue before, in this incarnation: its bound
        # is not larger than the spec's, so a slot was freed that the spec does not free.
        return Blame(freed[:1], tuple([*possible, *freed[1:]]))
    # A larger bound or a freed slot.  Ask the spec's model under each: the other mode (slots freed
    # at completion, out of order) and a bound up to three slots larger.  Where only one of them
    # calls the record in this step and gives the adapter's later events, it is the reading.
    if at.ordered and key[0] == "record":
        by_order = _explains(at, key[1], mode="unordered")
        by_bound = any(_explains(at, key[1], more=k) for k in (1, 2, 3))
        if by_order and not by_bound:
            return Blame(freed[:1], tuple([*possible, *freed[1:]]))
        if by_bound and not by_order:
            return Blame(("AIO-7",), tuple(possible))
    # The trace cannot tell them apart: what it shows is the head of a queue the spec holds full
    # admitted (AIO-7); the freed slot stays possible.
    return Blame(("AIO-7",), tuple([*possible, *freed]))


def _explains(at: Step, record: int, mode: str | None = None, more: int = 0) -> bool:
    """Whether the spec's model, run in `mode` or with `more` slots (the configuration's and each
    restore's capacity), calls `record` for the first time in the step and gives the adapter's events
    of the later steps it takes (`_events_of`)."""
    config = at.schedule.config
    if more and config.capacity <= 0:
        return False
    config = replace(config, mode=mode or config.mode, capacity=config.capacity + more)
    steps = [replace(s, capacity=s.capacity + more) if more and isinstance(s, RestoreStep) and s.capacity
             else s for s in at.schedule.steps]
    events, upto = _events_of(AsyncIoModel(config), steps)
    here = [e for e in events if e.step == at.index]
    called = any(e.event == "invoke" and e.record == record and e.attempt == 1 for e in here)
    return upto > at.index and called and _gives(events, upto, at.index, [], at.later)


def _late_timeout(at: Step, record: int) -> Blame:
    """The spec calls the timeout handler for `record` here (its deadline is reached), the adapter
    does not: AIO-27; the deadline's start may be wrong (AIO-2, AIO-59, AIO-26 after a retry)."""
    possible = ["AIO-2"]
    if at.admitted_at.get(record, 0) > at.arrived.get(record, 0):
        possible.append("AIO-59")
    if at.attempts.get(record, 1) > 1:
        possible.append("AIO-26")
    return Blame(("AIO-27",), tuple(possible))


def _under_admission(at: Step) -> Blame:
    """An element the spec admits in this step was not admitted by the adapter."""
    if at.restored:
        return Blame(("AIO-46",), ("AIO-47", "AIO-57"))  # AIO-46: the snapshot is replayed first
    return Blame(("AIO-6",), ("AIO-7",))  # AIO-6: only records and watermarks hold slots, until emitted


def _effects(at: Step, expected: Sequence[Event], observed: Sequence[Event]) -> Blame | tuple[str, ...]:
    """Calls and timeout handlers: the first event that differs, read as an admission or a timeout."""
    i = next((j for j, (x, y) in enumerate(zip(expected, observed)) if x != y),
             min(len(expected), len(observed)))
    extra = [e for e in observed[i:] if e not in expected[i:]]
    missing = [e for e in expected[i:] if e not in observed[i:]]
    for e in extra[:1]:
        if e.event == "timeout":
            return _early_timeout(at, e.record)
        if e.attempt == 1 and ("record", e.record) in at.waiting_after:
            return _over_admission(at, ("record", e.record))
    for e in missing[:1]:
        if e.event == "timeout":
            return _late_timeout(at, e.record)
        if e.attempt == 1:
            return _under_admission(at)
    if extra or missing:
        return RETRY_RULES if any(e.event == "invoke" and e.attempt > 1 for e in extra + missing) else ()
    # the same events in another order: AIO-7 nothing reordered, AIO-46 the replay, AIO-54 timers
    return Blame(("AIO-46",) if at.restored else ("AIO-7",), ("AIO-54",))


def _early_timeout(at: Step, record: int) -> Blame | tuple[str, ...]:
    """The adapter called the timeout handler for `record` where the spec does not."""
    if record in at.done:
        return Blame(("AIO-31",), ("AIO-32",))  # AIO-31: no timeout after completion
    if record in at.timed_out:
        return Blame(("AIO-27",))  # AIO-27: the handler is called once
    admitted = at.admitted_at.get(record)
    arrived = at.arrived.get(record)
    timeout = at.schedule.config.timeout
    if arrived is not None and (admitted is None or admitted > arrived) and arrived + timeout <= at.now:
        return Blame(("AIO-59",), ("AIO-2",))  # AIO-59: from admission, not from arrival
    if at.attempts.get(record, 1) > 1:
        return Blame(("AIO-2",), ("AIO-26",))  # the deadline is admission + timeout (AIO-26: retries too)
    return Blame(("AIO-2",))  # AIO-2: one timeout, at admission + timeout


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------


def _key(e: Event) -> Key:
    return ("record", e.record) if e.event == "emit" else ("watermark", e.timestamp)


def _emitted_before(at: Step, expected: Sequence[Event]) -> list[Key]:
    """The outputs of the step the adapter gave as the spec did, before the differing group."""
    outputs = [e for e in at.events if e.event in ("emit", "watermark")]
    if expected:
        first = next((i for i, e in enumerate(at.events) if e == expected[0]), len(at.events))
        outputs = [e for e in at.events[:first] if e.event in ("emit", "watermark")]
    return [_key(e) for e in outputs]


def _outputs(at: Step, expected: Sequence[Event], observed: Sequence[Event]) -> Blame | tuple[str, ...]:
    i = next((j for j, (x, y) in enumerate(zip(expected, observed)) if x != y),
             min(len(expected), len(observed)))
    x = expected[i] if i < len(expected) else None
    y = observed[i] if i < len(observed) else None
    if "status" in (getattr(x, "event", None), getattr(y, "event", None)):
        return Blame(("AIO-51",))  # AIO-51: a status bypasses the queue, at once when it is taken
    if x is not None and y is not None and x.event == y.event == "emit" and x.record == y.record:
        return _values(x.record, expected, observed)
    if y is None or (x is not None and _key(y) == _key(x)):
        assert x is not None
        return _held_back(at, x)
    key = _key(y)
    if key in at.waiting_after:
        return _over_admission(at, key)  # emitted before the spec even admits it
    if key[0] == "record" and not _complete(at, key[1]) and at.schedule.config.on_timeout == "complete":
        return _early_timeout(at, key[1])  # the handler's result (AIO-29) before the spec's deadline
    out = _emitted_before(at, expected) + [_key(e) for e in observed[:i]]
    place = next((e for e in at.queued if e.key == key and e.key not in out), None)
    if place is None:
        return ()  # not queued in this step: emitted twice, or never admitted
    blockers = [e for e in at.queued[:at.queued.index(place)] if e.key not in out and not _silent(at, e)]
    return _early(at, place, blockers, x)


def _complete(at: Step, record: int) -> bool:
    """Whether the spec has completed `record` by the end of the step."""
    return (record in at.done or any(e.key == ("record", record) and e.complete for e in at.after)
            or any(e.event == "emit" and e.record == record for e in at.events))


def _silent(at: Step, e: Entry) -> bool:
    """A record the spec's queue lets out in this step with an empty result: no event shows when."""
    return (e.key[0] == "record" and e.key not in {a.key for a in at.after}
            and not any(x.event == "emit" and x.record == e.key[1] for x in at.events))


def _early(at: Step, y: Entry, blockers: Sequence[Entry], x: Event | None) -> Blame | tuple[str, ...]:
    """`y` left the queue before the entries `blockers` queued before it."""
    kinds = {b.key[0] for b in blockers}
    crosses = ("AIO-15",) if kinds - {y.key[0]} or (y.key[0] == "watermark" and "record" in kinds) else ()
    if at.ordered:
        return Blame(("AIO-12",), crosses) if blockers else ("AIO-12", "AIO-18")
    earlier = [b for b in blockers if b.segment < y.segment]
    if earlier:
        if y.key[0] == "watermark" and all(b.key[0] == "watermark" for b in earlier):
            return Blame(("AIO-17",), ("AIO-13",))  # AIO-17: watermarks in admission order
        return Blame(("AIO-13",), crosses)  # AIO-13: segments in order
    if y.key[0] == "record" and x is not None and x.event == "emit":
        return Blame(("AIO-14",))  # AIO-14: inside a segment, completion order
    return ()


def _held_back(at: Step, x: Event) -> Blame | tuple[str, ...]:
    """The spec emits `x` here; the adapter emits nothing more, or `x` later."""
    if any(e.event == "timeout" for e in at.events):
        return TIMEOUT_RULES  # the timeout handler's completion (AIO-29)
    if x.event == "watermark":
        place = next((e for e in at.queued if e.key == _key(x)), None)
        if place is not None and place not in at.before and at.queued.index(place) == 0:
            return Blame(("AIO-16",))  # AIO-16: nothing before it, emitted at once
        return Blame(("AIO-12",) if at.ordered else ("AIO-13",), ("AIO-17",))
    return Blame(("AIO-12",) if at.ordered else ("AIO-14",), ("AIO-8",))


def _values(record: int, expected: Sequence[Event], observed: Sequence[Event]) -> Blame | tuple[str, ...]:
    """The outputs of one record differ in their values or timestamps."""
    want = [(e.value, e.timestamp) for e in expected if e.event == "emit" and e.record == record]
    got = [(e.value, e.timestamp) for e in observed if e.event == "emit" and e.record == record]
    if Counter(v for v, _ in want) == Counter(v for v, _ in got):
        return Blame(("AIO-18",))  # AIO-18: the values in list order, the input's timestamp
    if [v for v, _ in want] == [v for v, _ in got][:len(want)] or not got:
        return ()
    return ("AIO-18", "AIO-21", "AIO-29", "AIO-36")


# --------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------


def _checkpoints(at: Step, expected: Sequence[Event], observed: Sequence[Event]) -> Blame | tuple[str, ...]:
    x = expected[0] if expected else None
    y = observed[0] if observed else None
    if y is None or y.event != "checkpoint" or x is None or x.event != "checkpoint" or x.id != y.id:
        if y is not None and y.event == "checkpoint" and (x is None or x.event != "checkpoint"):
            # The spec's barrier waits behind a blocked element.  A snapshot holding an element the
            # spec keeps waiting shows it admitted early: AIO-7, everything behind it waits.  One
            # without it shows the barrier taken past it: AIO-44 (a checkpoint is taken where its
            # barrier leaves the channel, behind a blocked record), an early admission still possible.
            if any(tuple(k) in at.waiting_after for k in y.snapshot):
                return Blame(("AIO-7",), ("AIO-6", "AIO-9"))
            return Blame(("AIO-44",), ("AIO-7",))
        return ()
    want, got = list(x.snapshot), list(y.snapshot)
    extra = [k for k in got if k not in want]
    if extra and tuple(extra[0]) in at.waiting_after:
        return _over_admission(at, tuple(extra[0]))  # an element the spec keeps in the channel
    if Counter(want) == Counter(got):
        return Blame(("AIO-45",), () if at.ordered else ("AIO-55",))  # AIO-45: queue order
    missing = [tuple(k) for k in want if k not in got]
    if missing and _left_unseen(at, missing[0]):
        # A completed record with no result leaves the queue without an event: the adapter emitted it
        # before an entry queued before it (the mode's order), or freed its slot without emission
        # (AIO-8), or its snapshot left it out (AIO-44); the trace cannot tell them apart.
        return Blame(("AIO-12",) if at.ordered else ("AIO-13",), ("AIO-8", "AIO-44"))
    return Blame(("AIO-44",))  # AIO-44: exactly the queued input elements


def _left_unseen(at: Step, key: Key) -> bool:
    """Whether `key` is a record the spec's queue holds completed with an empty result (AIO-19) behind
    an entry it waits for: its emission would show no event."""
    entry = next((e for e in at.after if e.key == key), None)
    return entry is not None and key[0] == "record" and entry.complete and not entry.result
