"""The sources and failover area (spec/sources.md): configuration, steps, events, capabilities, notation.

A FLIP-27 source: a split enumerator on the coordinator, one reader per source subtask, a sink
chained to each reader that commits on checkpoint completion, and optionally a job graph of other
tasks around the readers (region failover, FLIP-1).

Standard library and `spec` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flink_semantics.spec.area import Area, Mark, Notation, Timeline, int_list, numbered, template_renderer
from flink_semantics.spec.schedule import (
    CHECKPOINT,
    END,
    MARKER,
    OUTPUT,
    Event,
    EventKind,
    Schedule,
    ScheduleError,
    Step,
)

NON_NEGATIVE = {"min": 0}
POSITIVE = {"min": 1}
Edge = tuple[int, ...]  # [producer task, consumer task]

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SourcesConfig:
    """`readers`: the source's parallelism (readers 0..readers-1 are tasks 0..readers-1).
    `splits`: the record count of each split the enumerator starts with (splits 0, 1, ...).
    `bounded`: a bounded source (SRC-10) or an unbounded one whose splits are discovered (SRC-42).
    `tasks`, `pipelined`, `blocking`: the job graph's other tasks (readers .. readers+tasks-1) and
    its edges, [producer, consumer] pairs (SRC-35)."""

    readers: int = field(default=1, metadata=POSITIVE)
    splits: tuple[int, ...] = ()
    bounded: bool = True
    tasks: int = field(default=0, metadata=NON_NEGATIVE)
    pipelined: tuple[Edge, ...] = ()
    blocking: tuple[Edge, ...] = ()

    @property
    def has_graph(self) -> bool:
        return bool(self.tasks or self.pipelined or self.blocking)


def task_count(c: SourcesConfig) -> int:
    return c.readers + c.tasks


def is_acyclic(nodes: int, edges: list[tuple[int, int]]) -> bool:
    """Kahn's algorithm: whether the directed graph has no cycle."""
    indegree = [0] * nodes
    out: list[list[int]] = [[] for _ in range(nodes)]
    for u, v in edges:
        out[u].append(v)
        indegree[v] += 1
    ready = [n for n in range(nodes) if indegree[n] == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for v in out[n]:
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
    return seen == nodes


def validate_config(c: SourcesConfig) -> None:
    """SRC-40 (split sizes) and SRC-43 (the job graph): malformed configurations."""
    if any(n < 0 for n in c.splits):
        raise ScheduleError(None, "SRC-40", f"a split's record count must be >= 0: {list(c.splits)}")
    n = task_count(c)
    edges = []
    for kind, pairs in (("pipelined", c.pipelined), ("blocking", c.blocking)):
        for e in pairs:
            if len(e) != 2 or not all(0 <= t < n for t in e) or e[0] == e[1]:
                raise ScheduleError(None, "SRC-43", f"{kind} edge {list(e)} must join two different "
                                    f"tasks of 0..{n - 1}")
            edges.append((e[0], e[1]))
    if len(set(edges)) != len(edges):
        raise ScheduleError(None, "SRC-43", "an edge is given twice")
    if not is_acyclic(n, edges):
        raise ScheduleError(None, "SRC-43", "the job graph has a cycle")


# --------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RegisterStep(Step):
    """Reader `reader`'s new attempt opens: it takes its restored splits, then registers (SRC-2)."""

    op: ClassVar[str] = "register"
    reader: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class RequestStep(Step):
    """The reader sends a split request (SRC-6)."""

    op: ClassVar[str] = "request"
    reader: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class AssignStep(Step):
    """The enumerator assigns its next split to the reader without a request (a push, SRC-4)."""

    op: ClassVar[str] = "assign"
    reader: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class DiscoverStep(Step):
    """A new split with `records` records appears; the enumerator discovers every split it has not
    seen yet (unbounded sources only, SRC-42)."""

    op: ClassVar[str] = "discover"
    records: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class PollStep(Step):
    """The reader emits up to `records` records (SRC-32, SRC-33)."""

    op: ClassVar[str] = "poll"
    reader: int = field(metadata=NON_NEGATIVE)
    records: int = field(default=1, metadata=POSITIVE)


@dataclass(frozen=True)
class CheckpointStep(Step):
    """Coordinator checkpoint `id` (SRC-11); `fails`: the enumerator's snapshot throws (SRC-19)."""

    op: ClassVar[str] = "checkpoint"
    role: ClassVar[str | None] = CHECKPOINT
    id: int = field(metadata=NON_NEGATIVE)
    fails: bool = False


@dataclass(frozen=True)
class BarrierStep(Step):
    """Checkpoint `id`'s barrier is injected at every reader: each snapshots (SRC-13, SRC-15)."""

    op: ClassVar[str] = "barrier"
    id: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class CompleteStep(Step):
    """Checkpoint `id` completes; `notify`: the completion is notified at once (SRC-17, SRC-29).
    Naming a checkpoint that completed without notification, it is that notification arriving late
    (SRC-17); never a second notification, nor one after a later checkpoint's (SRC-46)."""

    op: ClassVar[str] = "complete"
    id: int = field(metadata=NON_NEGATIVE)
    notify: bool = True


@dataclass(frozen=True)
class AbortStep(Step):
    """Checkpoint `id` is aborted (SRC-18)."""

    op: ClassVar[str] = "abort"
    id: int = field(metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class FailStep(Step):
    """Task `task` fails; the blocking results of the tasks in `lost` are lost with it (SRC-20,
    SRC-36)."""

    op: ClassVar[str] = "fail"
    task: int = field(metadata=NON_NEGATIVE)
    lost: tuple[int, ...] = ()


@dataclass(frozen=True)
class FailEnumeratorStep(Step):
    """The enumerator throws: a global failover (SRC-27)."""

    op: ClassVar[str] = "fail_enumerator"


@dataclass(frozen=True)
class RescaleStep(Step):
    """The job restarts from its last completed checkpoint with `readers` readers (SRC-31)."""

    op: ClassVar[str] = "rescale"
    readers: int = field(metadata=POSITIVE)


@dataclass(frozen=True)
class EndStep(Step):
    """The job runs to completion (bounded sources only, SRC-44)."""

    op: ClassVar[str] = "end"
    role: ClassVar[str | None] = END


STEPS = (RegisterStep, RequestStep, AssignStep, DiscoverStep, PollStep, CheckpointStep, BarrierStep,
         CompleteStep, AbortStep, FailStep, FailEnumeratorStep, RescaleStep, EndStep)
READER_STEPS = (RegisterStep, RequestStep, AssignStep, PollStep)


def validate_steps(schedule: Schedule) -> None:
    """The static rules of this area's schedules: SRC-41 (readers and tasks exist), SRC-42 (discovery
    only in unbounded sources), SRC-44 (end only in bounded sources, and last), SRC-45 (no rescale of a
    job graph)."""
    c: SourcesConfig = schedule.config
    readers = c.readers
    last = len(schedule.steps) - 1
    for i, s in enumerate(schedule.steps):
        if isinstance(s, READER_STEPS) and s.reader >= readers:
            raise ScheduleError(i, "SRC-41", f"reader {s.reader} is unknown: the source has {readers} "
                                "reader(s)", s.op)
        elif isinstance(s, FailStep):
            n = readers + c.tasks  # a job graph is never rescaled (SRC-45)
            if s.task >= n or any(not 0 <= t < n for t in s.lost):
                raise ScheduleError(i, "SRC-41", f"the job has tasks 0..{n - 1} only", s.op)
            producers = {e[0] for e in c.blocking}
            if any(t not in producers for t in s.lost):
                raise ScheduleError(i, "SRC-41", "only a task with a blocking output can lose a result",
                                    s.op)
        elif isinstance(s, DiscoverStep) and c.bounded:
            raise ScheduleError(i, "SRC-42", "a bounded source discovers no splits", s.op)
        elif isinstance(s, EndStep) and (not c.bounded or i != last):
            raise ScheduleError(i, "SRC-44", "end is the last step, of a bounded source only", s.op)
        elif isinstance(s, RescaleStep):
            if c.has_graph:
                raise ScheduleError(i, "SRC-45", "a job graph is not rescaled", s.op)
            readers = s.readers


# --------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------

# A reader's split state: (split, position) pairs; JSON [[0, 2], ...] as lists.
EVENTS = (
    EventKind("registered", ("reader", "splits"), MARKER),  # opened with restored splits, then registered
    EventKind("assigned", ("reader", "split"), MARKER),  # the reader took an AddSplitEvent
    EventKind("no_more_splits", ("reader",), MARKER),  # the reader took NoMoreSplits
    EventKind("record", ("reader", "split", "offset"), OUTPUT),  # the reader emitted a record
    EventKind("split_finished", ("reader", "split"), MARKER),
    EventKind("end_of_input", ("reader",), MARKER),
    EventKind("enumerator_checkpoint", ("id", "splits"), MARKER),  # the enumerator's snapshot
    EventKind("checkpoint_failed", ("id",), MARKER),  # the enumerator's snapshot threw
    EventKind("reader_checkpoint", ("id", "reader", "splits"), MARKER),  # a reader's snapshot
    EventKind("committed", ("checkpoint", "records"), OUTPUT),  # the sink committed (split, offset)s
    EventKind("aborted", ("id",), MARKER),
    EventKind("splits_back", ("reader", "splits"), MARKER),  # enumerator.addSplitsBack(splits, reader)
    EventKind("reset", ("tasks",), MARKER),  # a region failover restarted these tasks
    EventKind("global_failover", ("checkpoint", "cause"), MARKER),  # everything restored
    EventKind("finished", (), MARKER, final=True),  # every reader at end of input, all committed
)
CAUSES = ("enumerator", "unregistered", "rescale")

# --------------------------------------------------------------------------
# Capabilities
# --------------------------------------------------------------------------

CAPABILITIES = {
    "sources.checkpoint": "checkpoint, barrier, complete and abort steps (SRC-11..SRC-19)",
    "sources.reader_failover": "reader failures and their regional reset (SRC-20..SRC-26)",
    "sources.global_failover": "enumerator failures and global restores (SRC-4, SRC-27..SRC-29)",
    "sources.rescale": "restarting with another reader parallelism (SRC-31)",
    "sources.unbounded": "unbounded sources and split discovery (SRC-42)",
    "sources.region_failover": "job graphs and pipelined-region failover (SRC-35..SRC-37)",
}


def required_capabilities(schedule: Schedule) -> frozenset[str]:
    c: SourcesConfig = schedule.config
    caps = set()
    if not c.bounded:
        caps.add("sources.unbounded")
    if c.has_graph:
        caps.add("sources.region_failover")
    ops = {s.op for s in schedule.steps}
    if ops & {"checkpoint", "barrier", "complete", "abort"}:
        caps.add("sources.checkpoint")
    if "fail" in ops and not c.has_graph:
        caps.add("sources.reader_failover")
    if ops & {"fail_enumerator", "assign"}:  # an assignment may fail the job (SRC-4)
        caps.add("sources.global_failover")
    if "rescale" in ops:
        caps.add("sources.rescale")
    return frozenset(caps)


# --------------------------------------------------------------------------
# Notation of the examples (spec/sources.md, "Notation used in the examples")
# --------------------------------------------------------------------------

_CONFIG_ITEM = re.compile(r"(\w+)=(\[[^\]]*\]|[^\s=]+)")


def _edges(text: str) -> list[list[int]]:
    """`[0>2, 1>2]` -> [[0, 2], [1, 2]]."""
    items = [i.strip() for i in text.strip("[]").split(",") if i.strip()]
    if not all(re.fullmatch(r"\d+>\d+", i) for i in items):
        raise ValueError(f"edges are written [0>2, 1>2], not {text!r}")
    return [[int(x) for x in i.split(">")] for i in items]


def parse_config(text: str) -> dict[str, Any]:
    """`readers=2 splits=[3, 1] bounded=no tasks=1 pipelined=[0>2] blocking=[]` -> JSON."""
    out: dict[str, Any] = {}
    for key, value in _CONFIG_ITEM.findall(text):
        if key in out:
            raise ValueError(f"{key} is given twice")
        if key in ("readers", "tasks"):
            out[key] = int(value)
        elif key == "splits":
            out[key] = int_list(value)
        elif key == "bounded" and value in ("yes", "no"):
            out[key] = value == "yes"
        elif key in ("pipelined", "blocking"):
            out[key] = _edges(value)
        else:
            raise ValueError(f"unknown configuration item {key}={value}")
    return out


def _reader(word: str) -> int:
    if not re.fullmatch(r"r\d+", word):
        raise ValueError(f"expected a reader like r0, not {word!r}")
    return int(word[1:])


def _split(word: str) -> int:
    if not re.fullmatch(r"s\d+", word):
        raise ValueError(f"expected a split like s0, not {word!r}")
    return int(word[1:])


def parse_step(text: str) -> dict[str, Any]:
    """One step: `register r0`, `poll r0 2`, `checkpoint 1 fails`, `complete 1 silent`, `fail 2 lost=[1]`…"""
    words = text.split()
    op, args = words[0], words[1:]
    n = len(args)
    if op in ("register", "request", "assign") and n == 1:
        return {"op": op, "reader": _reader(args[0])}
    if op == "poll" and n == 2:
        return {"op": op, "reader": _reader(args[0]), "records": int(args[1])}
    if op == "discover" and n == 1:
        return {"op": op, "records": int(args[0])}
    if op == "checkpoint" and n in (1, 2) and args[1:] in ([], ["fails"]):
        return {"op": op, "id": int(args[0]), "fails": n == 2}
    if op in ("barrier", "abort") and n == 1:
        return {"op": op, "id": int(args[0])}
    if op == "complete" and n in (1, 2) and args[1:] in ([], ["silent"]):
        return {"op": op, "id": int(args[0]), "notify": n == 1}
    if op == "fail" and n in (1, 2):
        step: dict[str, Any] = {"op": op, "task": int(args[0])}
        if n == 2:
            if not args[1].startswith("lost="):
                raise ValueError(f"fail takes lost=[...], not {args[1]!r}")
            step["lost"] = int_list(args[1][5:])
        return step
    if op in ("fail_enumerator", "end") and n == 0:
        return {"op": op}
    if op == "rescale" and n == 1:
        return {"op": op, "readers": int(args[0])}
    raise ValueError(f"not a step of the notation: {text!r}")


def _items(text: str) -> list[str]:
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"expected a bracketed list, not {text!r}")
    return [i.strip() for i in text[1:-1].split(",") if i.strip()]


def _positions(text: str) -> list[list[int]]:
    """`[s0:1, s2:0]` -> [[0, 1], [2, 0]]: (split, position) or (split, offset) pairs."""
    out = []
    for item in _items(text):
        m = re.fullmatch(r"s(\d+):(\d+)", item)
        if not m:
            raise ValueError(f"expected s<split>:<n>, not {item!r}")
        out.append([int(m[1]), int(m[2])])
    return out


def _rest(text: str, words: int) -> str:
    return text.split(None, words)[words].strip()


def parse_event(step: int, text: str) -> Event:
    """One event without its `@step`: `assigned r0 s1`, `record r0 s1 0`, `committed 1 [s0:0]`…"""
    words = text.split()
    kind, args = words[0], words[1:]
    n = len(args)
    if kind == "registered" and n >= 2:
        return event(step, kind, reader=_reader(args[0]), splits=_positions(_rest(text, 2)))
    if kind in ("assigned", "split_finished") and n == 2:
        return event(step, kind, reader=_reader(args[0]), split=_split(args[1]))
    if kind in ("no_more_splits", "end_of_input") and n == 1:
        return event(step, kind, reader=_reader(args[0]))
    if kind == "record" and n == 3:
        return event(step, kind, reader=_reader(args[0]), split=_split(args[1]), offset=int(args[2]))
    if kind == "enumerator_checkpoint" and n >= 2:
        return event(step, kind, id=int(args[0]), splits=[_split(s) for s in _items(_rest(text, 2))])
    if kind in ("checkpoint_failed", "aborted") and n == 1:
        return event(step, kind, id=int(args[0]))
    if kind == "reader_checkpoint" and n >= 3:
        return event(step, kind, id=int(args[0]), reader=_reader(args[1]), splits=_positions(_rest(text, 3)))
    if kind == "committed" and n >= 2:
        return event(step, kind, checkpoint=None if args[0] == "-" else int(args[0]),
                     records=_positions(_rest(text, 2)))
    if kind == "splits_back" and n >= 2:
        return event(step, kind, reader=_reader(args[0]), splits=[_split(s) for s in _items(_rest(text, 2))])
    if kind == "reset" and n >= 1:
        return event(step, kind, tasks=[int(t) for t in _items(_rest(text, 1))])
    if kind == "global_failover" and n == 2 and args[1] in CAUSES:
        return event(step, kind, checkpoint=None if args[0] == "-" else int(args[0]), cause=args[1])
    if kind == "finished" and n == 0:
        return event(step, kind)
    if kind == "rejected" and n == 0:
        return event(step, kind, reason="")
    raise ValueError(f"not a trace event of the notation: {text!r}")


def _text(name: str, value: Any) -> str:
    if name == "reader":
        return f"r{value}"
    if name == "split":
        return f"s{value}"
    if name in ("splits", "records") and value and isinstance(value[0], tuple):
        return "[" + ", ".join(f"s{s}:{p}" for s, p in value) + "]"
    if name == "splits":
        return "[" + ", ".join(f"s{s}" for s in value) + "]"
    if name in ("tasks", "records"):
        return "[" + ", ".join(str(t) for t in value) + "]"
    return "-" if value is None else str(value)


_EVENT_FORMATS = {
    "registered": "registered {reader} {splits}",
    "assigned": "assigned {reader} {split}",
    "no_more_splits": "no_more_splits {reader}",
    "record": "record {reader} {split} {offset}",
    "split_finished": "split_finished {reader} {split}",
    "end_of_input": "end_of_input {reader}",
    "enumerator_checkpoint": "enumerator_checkpoint {id} {splits}",
    "checkpoint_failed": "checkpoint_failed {id}",
    "reader_checkpoint": "reader_checkpoint {id} {reader} {splits}",
    "committed": "committed {checkpoint} {records}",
    "aborted": "aborted {id}",
    "splits_back": "splits_back {reader} {splits}",
    "reset": "reset {tasks}",
    "global_failover": "global_failover {checkpoint} {cause}",
    "finished": "finished",
    "rejected": "rejected",
}


# An event in the notation, with its step: the inverse of parse_event.
render_event = template_renderer(_EVENT_FORMATS, _text)


# --------------------------------------------------------------------------
# The counterexample timeline (conformance/draw.py): the enumerator, each reader, the sink
# --------------------------------------------------------------------------


def _step_lanes(schedule: Schedule) -> list[str]:
    """A reader's steps on its lane, a failed task on its own (a reader's while it is one), the
    enumerator's on the enumerator's, checkpoints, rescales and the end on the coordinator's."""
    readers = schedule.config.readers
    out = []
    for s in schedule.steps:
        if isinstance(s, READER_STEPS):
            out.append(numbered("reader", s.reader))
        elif isinstance(s, FailStep):
            out.append(numbered("reader" if s.task < readers else "task", s.task))
        elif isinstance(s, (DiscoverStep, FailEnumeratorStep)):
            out.append("enumerator")
        else:
            readers = s.readers if isinstance(s, RescaleStep) else readers
            out.append("coordinator")
    return out


_READER_EVENTS = ("registered", "assigned", "no_more_splits", "record", "split_finished", "end_of_input",
                  "reader_checkpoint")


def _event_lane(schedule: Schedule, e: Event) -> str:
    if e.event in _READER_EVENTS:
        return numbered("reader", e.reader)
    if e.event in ("enumerator_checkpoint", "checkpoint_failed", "splits_back"):
        return "enumerator"
    return "sink" if e.event == "committed" else "coordinator"


TIMELINE = Timeline(
    step_lanes=_step_lanes,
    event_lane=_event_lane,
    step_marks={"request": Mark.CALL, "poll": Mark.RECORD, "barrier": Mark.CHECKPOINT,
                "complete": Mark.CHECKPOINT, "fail": Mark.FAILURE, "fail_enumerator": Mark.FAILURE,
                "rescale": Mark.RESTORE},
    event_marks={"record": Mark.OUTPUT, "committed": Mark.OUTPUT, "enumerator_checkpoint": Mark.CHECKPOINT,
                 "reader_checkpoint": Mark.CHECKPOINT, "checkpoint_failed": Mark.FAILURE,
                 "reset": Mark.RESTORE, "global_failover": Mark.RESTORE},
)


# --------------------------------------------------------------------------
# The descriptor
# --------------------------------------------------------------------------

AREA = Area(
    name="sources",
    title="sources and failover",
    rules_file="sources.md",
    rule_prefix="SRC",
    config_type=SourcesConfig,
    steps=STEPS,
    events=EVENTS,
    capabilities=CAPABILITIES,
    notation=Notation(parse_config, parse_step, parse_event, render_event),
    validate_config=validate_config,
    validate_steps=validate_steps,
    required_capabilities=required_capabilities,
    timeline=TIMELINE,
)
event = AREA.event
