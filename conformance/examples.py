"""The rules' examples of spec/*.md as data: (rule ID, schedule, expected trace).

The notation is defined in spec/async-io.md, "Notation used in the examples".  An example is one
paragraph of a rule's **Example** field with a backticked configuration (`timeout=50 capacity=2`) and
backticked numbered steps (`0 record 1`, `1 end`); its trace is the indented block after it, or the
backticked `@…` spans inside it.  `0..100 record {i}` and `@0..99 invoke r{i} #1` stand for runs.
The tests write their own cases in the same notation, one item a line: `parse_schedule`,
`parse_trace` and `render_event` (the way back) serve them; traces are compared by
`conformance.checker.compare_scripted`, the suite's own comparison.

Examples of rules marked **Untested** are prose and are skipped (their Untested reason says why);
any other rule whose Example does not parse is an error, so a broken example cannot go unnoticed.
The examples' traces are written by hand by the spec author: `tests/test_spec_examples.py` checks the
reference model against them and `conformance/test_spec_examples.py` the adapter under test.

Standard library and `spec` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from spec.rules import parse_rules
from spec.schedule import (
    EVENT_FIELDS,
    REJECTING_RULES,
    Event,
    Schedule,
    ScheduleError,
    Trace,
    event,
    schedule_from_dict,
    validate_schedule,
)

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"
# spec/schedules.md defines the vocabulary; its examples are malformed schedules (tests/test_schedule.py).
NOT_AREA_FILES = ("schedules.md",)


class ExampleError(ValueError):
    """An example that does not follow the notation; names the file, line and rule."""

    def __init__(self, file: str, line: int, rule: str, message: str):
        super().__init__(f"{file}:{line}: {rule}: example: {message}")


@dataclass(frozen=True)
class Example:
    rule: str
    number: int  # 1, 2, … inside the rule's Example field
    file: str
    line: int  # line of the paragraph that holds the schedule
    schedule: Schedule
    trace: Trace

    @property
    def id(self) -> str:
        return f"{self.rule}.{self.number}"

    @property
    def rejected(self) -> bool:
        return [e.event for e in self.trace.events] == ["rejected"]


@dataclass
class SpecExamples:
    examples: list[Example] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # rule ID -> why it has no executable example
    with_example: list[str] = field(default_factory=list)  # every rule ID that has an Example field


# --------------------------------------------------------------------------
# Small parsers: configuration, steps, trace lines
# --------------------------------------------------------------------------

_VALUE = r"(?:\{[^}]*\}|\[[^\]]*\]|[^\s=]+)"
_CONFIG = re.compile(rf"\s*\w+={_VALUE}(?:\s+\w+={_VALUE})*\s*")
_CONFIG_ITEM = re.compile(rf"(\w+)=({_VALUE})")
_STEP_CHUNK = re.compile(r"\d+(?:\.\.\d+)?\s+\S.*")
_RANGE = re.compile(r"(-?\d+)(?:\.\.(\d+))?\s+(.*)")
_INT_LIST = re.compile(r"\[\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\]")


def _int_list(text: str) -> list[int]:
    if not _INT_LIST.fullmatch(text):
        raise ValueError(f"not a list of integers: {text!r}")
    return [int(v) for v in re.findall(r"-?\d+", text)]


def _retry(text: str) -> dict[str, Any]:
    """`{fixed_delay, max_attempts 1, delay 10, if_error}` -> the JSON retry object."""
    items = [i.strip() for i in text.strip("{}").split(",") if i.strip()]
    if not items:
        raise ValueError("an empty retry strategy")
    out: dict[str, Any] = {"strategy": items[0]}
    for item in items[1:]:
        words = item.split()
        if len(words) == 1 and words[0] in ("if_empty", "if_error"):
            out[words[0]] = True
        elif len(words) == 2:
            out[words[0]] = float(words[1]) if "." in words[1] else int(words[1])
        else:
            raise ValueError(f"bad retry item {item!r}")
    return out


def parse_config(text: str) -> dict[str, Any]:
    """`mode=unordered capacity=2 retry={…}` -> the JSON configuration object."""
    out: dict[str, Any] = {}
    for key, value in _CONFIG_ITEM.findall(text):
        if key in out:
            raise ValueError(f"{key} is given twice")
        if key in ("capacity", "timeout"):
            out[key] = int(value)
        elif key == "timeout_result":
            out[key] = _int_list(value)
        elif key == "retry":
            out[key] = _retry(value)
        elif key in ("mode", "on_timeout"):
            out[key] = value
        else:
            raise ValueError(f"unknown configuration key {key!r}")
    return out


def _record_ref(word: str) -> int:
    if not re.fullmatch(r"r\d+", word):
        raise ValueError(f"expected a record name like r0, not {word!r}")
    return int(word[1:])


def parse_step(text: str) -> dict[str, Any]:
    """One step without its number: `record 7 @100`, `complete r1 [20, 21]`, `restore 1 capacity=2`…"""
    words = text.split()
    op, args = words[0], words[1:]
    n = len(args)
    if op == "record" and n in (1, 2):
        if n == 2 and not args[1].startswith("@"):
            raise ValueError(f"a record's timestamp is written @T, not {args[1]!r}")
        return {"op": op, "value": int(args[0]), "timestamp": int(args[1][1:]) if n == 2 else None}
    if op == "watermark" and n == 1:
        return {"op": op, "timestamp": int(args[0])}
    if op == "status" and n == 1 and args[0] in ("idle", "active"):
        return {"op": op, "idle": args[0] == "idle"}
    if op == "complete" and n >= 2:
        result = text.split(None, 2)[2].strip()
        return {"op": op, "record": _record_ref(args[0]),
                "result": None if result == "null" else _int_list(result)}
    if op == "error" and n == 1:
        return {"op": op, "record": _record_ref(args[0])}
    if op == "advance" and n == 1:
        return {"op": op, "ms": int(args[0])}
    if op == "checkpoint" and n == 1:
        return {"op": op, "id": int(args[0])}
    if op in ("crash", "end") and n == 0:
        return {"op": op}
    if op == "restore" and n in (1, 2):
        step: dict[str, Any] = {"op": op, "checkpoint": None if args[0] == "none" else int(args[0])}
        if n == 2:
            key, _, value = args[1].partition("=")
            if key != "capacity":
                raise ValueError(f"restore takes capacity=N, not {args[1]!r}")
            step["capacity"] = int(value)
        return step
    raise ValueError(f"not a step of the notation: {text!r}")


def _snapshot(text: str) -> list[tuple[str, int]]:
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"a snapshot is written [r0, w5], not {text!r}")
    out = []
    for item in (i.strip() for i in text[1:-1].split(",") if i.strip()):
        if re.fullmatch(r"r\d+", item):
            out.append(("record", int(item[1:])))
        elif re.fullmatch(r"w-?\d+", item):
            out.append(("watermark", int(item[1:])))
        else:
            raise ValueError(f"bad snapshot element {item!r}")
    return out


def parse_event(step: int, text: str) -> Event:
    """One trace event without its `@step`: `invoke r0 #1`, `emit r0 70 ts=100`, `fail r0 error`…"""
    words = text.split()
    kind, args = words[0], words[1:]
    n = len(args)
    if kind == "invoke" and n == 2 and args[1].startswith("#"):
        return event(step, kind, record=_record_ref(args[0]), attempt=int(args[1][1:]))
    if kind == "timeout" and n == 1:
        return event(step, kind, record=_record_ref(args[0]))
    if kind == "emit" and n == 3 and args[2].startswith("ts="):
        ts = args[2][3:]
        return event(step, kind, record=_record_ref(args[0]), value=int(args[1]),
                     timestamp=None if ts == "-" else int(ts))
    if kind == "watermark" and n == 1:
        return event(step, kind, timestamp=int(args[0]))
    if kind == "status" and n == 1 and args[0] in ("idle", "active"):
        return event(step, kind, idle=args[0] == "idle")
    if kind == "checkpoint" and n >= 2:
        return event(step, kind, id=int(args[0]), snapshot=_snapshot(text.split(None, 2)[2].strip()))
    if kind == "fail" and n == 2:
        return event(step, kind, record=None if args[0] == "-" else _record_ref(args[0]), reason=args[1])
    if kind == "finished" and n == 0:
        return event(step, kind)
    if kind == "rejected" and n == 0:
        return event(step, kind, reason="")  # the reason is free text; only the event kind is compared
    raise ValueError(f"not a trace event of the notation: {text!r}")


def expand(text: str) -> list[tuple[int, str]]:
    """`3 record 1` -> [(3, "record 1")]; `0..2 record {i}` -> [(0, "record 0"), …, (2, "record 2")]."""
    m = _RANGE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"expected `N …` or `A..B …`, not {text!r}")
    first = int(m[1])
    last = first if m[2] is None else int(m[2])
    if last < first:
        raise ValueError(f"empty range in {text!r}")
    return [(i, m[3].replace("{i}", str(i))) for i in range(first, last + 1)]


# --------------------------------------------------------------------------
# Schedules and traces one item a line (the tests' cases), and the way back
# --------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().splitlines() if line.strip()]


def _events(lines: list[str]) -> list[Event]:
    """`@3 emit r0 1 ts=-` or `@0..2 invoke r{i} #1` lines -> the events, in the lines' order."""
    events: list[Event] = []
    for line in lines:
        if not line.startswith("@"):
            raise ValueError(f"a trace line must start with @: {line!r}")
        events += [parse_event(n, text) for n, text in expand(line[1:])]
    return events


def parse_steps(text: str) -> list[dict[str, Any]]:
    """One step a line, without step numbers (`record 1`, `complete r0 [10]`) -> the JSON step objects."""
    return [parse_step(line) for line in _lines(text)]


def parse_schedule(config: dict[str, Any], steps: str, validate: bool = True) -> Schedule:
    """An async I/O schedule from its JSON configuration and its steps, one a line (parse_steps)."""
    return schedule_from_dict({"area": "async_io", "config": config, "steps": parse_steps(steps)},
                              validate=validate)


def parse_trace(text: str) -> Trace:
    """One event a line, each with its step: `@0 invoke r0 #1`, `@2 emit r0 10 ts=-`…"""
    return Trace(tuple(_events(_lines(text))))


# The notation of each event kind; the fields are written by _field_text.  A rejection's reason is
# free text and is left out.
_EVENT_FORMATS = {
    "invoke": "invoke {record} #{attempt}",
    "timeout": "timeout {record}",
    "emit": "emit {record} {value} ts={timestamp}",
    "watermark": "watermark {timestamp}",
    "status": "status {idle}",
    "checkpoint": "checkpoint {id} {snapshot}",
    "fail": "fail {record} {reason}",
    "finished": "finished",
    "rejected": "rejected",
}


def _field_text(name: str, value: Any) -> str:
    if name == "record":
        return "-" if value is None else f"r{value}"
    if name == "idle":
        return "idle" if value else "active"
    if name == "snapshot":
        return "[" + ", ".join(("r" if kind == "record" else "w") + str(x) for kind, x in value) + "]"
    return "-" if value is None else str(value)  # a timestamp may be absent


def render_event(e: Event) -> str:
    """An event in the notation, with its step (`@2 emit r0 10 ts=-`): the inverse of parse_event."""
    fields = {name: _field_text(name, v) for name, v in zip(EVENT_FIELDS[e.event], e.data)}
    return f"@{e.step} " + _EVENT_FORMATS[e.event].format(**fields)


# --------------------------------------------------------------------------
# The Markdown: Example fields, paragraphs, examples
# --------------------------------------------------------------------------

@dataclass
class _Block:
    kind: str  # "text" or "code"
    line: int
    lines: list[str]


def _blocks(lines: list[tuple[int, str]]) -> list[_Block]:
    """Split an Example field into text paragraphs and indented code blocks."""
    blocks: list[_Block] = []
    for no, raw in lines:
        if not raw.strip():
            blocks.append(_Block("blank", no, []))
            continue
        kind = "code" if len(raw) - len(raw.lstrip()) >= 4 else "text"
        if blocks and blocks[-1].kind == kind:
            blocks[-1].lines.append(raw.strip())
        else:
            blocks.append(_Block(kind, no, [raw.strip()]))
    return [b for b in blocks if b.kind != "blank"]


class _RuleExamples:
    """Builds the examples of one rule's Example field."""

    def __init__(self, file: str, rule: str):
        self.file = file
        self.rule = rule
        self.examples: list[Example] = []

    def error(self, line: int, message: str) -> ExampleError:
        return ExampleError(self.file, line, self.rule, message)

    def build(self, blocks: list[_Block]) -> list[Example]:
        i = 0
        while i < len(blocks):
            b = blocks[i]
            if b.kind == "code":
                raise self.error(b.line, "a trace block must follow a paragraph with steps")
            chunks = re.findall(r"`([^`]+)`", " ".join(b.lines))
            configs = [c for c in chunks if _CONFIG.fullmatch(c)]
            steps = [c for c in chunks if _STEP_CHUNK.fullmatch(c)]
            inline = [c for c in chunks if c.startswith("@")]
            code = blocks[i + 1] if i + 1 < len(blocks) and blocks[i + 1].kind == "code" else None
            i += 2 if code else 1
            if not steps:
                if inline or code or configs:
                    raise self.error(b.line, "a configuration or trace without steps")
                continue
            if len(configs) > 1:
                raise self.error(b.line, f"more than one configuration span: {configs}")
            if bool(inline) == bool(code):
                raise self.error(b.line, "the steps need exactly one trace: a block after the paragraph "
                                         "or backticked @… spans in it")
            trace_lines = inline or (code.lines if code else [])
            self.examples.append(self.example(b.line, configs[0] if configs else "", steps, trace_lines))
        return self.examples

    def example(self, line: int, config_text: str, step_texts: list[str], trace_lines: list[str]) -> Example:
        try:
            config = parse_config(config_text)
            steps = [(n, parse_step(t)) for chunk in step_texts for n, t in expand(chunk)]
            numbers = [n for n, _ in steps]
            if numbers != list(range(len(steps))):
                raise ValueError(f"steps must be numbered 0, 1, 2… without gaps, not {numbers}")
            events = _events(trace_lines)
            if [e.step for e in events] != sorted(e.step for e in events):
                raise ValueError("trace lines must be in step order")
            schedule = schedule_from_dict({"area": "async_io", "config": config,
                                           "steps": [s for _, s in steps]}, validate=False)
        except (ValueError, TypeError) as e:
            raise self.error(line, str(e)) from None
        trace = Trace(tuple(events))
        self.validate(line, schedule, trace)
        return Example(self.rule, len(self.examples) + 1, self.file, line, schedule, trace)

    def validate(self, line: int, schedule: Schedule, trace: Trace) -> None:
        """Static validation; a refused configuration must come with the trace `@-1 rejected`."""
        rejected = [e.event for e in trace.events] == ["rejected"]
        if any(e.event == "rejected" for e in trace.events) and not rejected:
            raise self.error(line, "`@-1 rejected` must be the only event")
        try:
            validate_schedule(schedule)
        except ScheduleError as e:
            if not (rejected and e.step is None and e.rule in REJECTING_RULES):
                raise self.error(line, f"malformed schedule: {e}") from None
            return
        if rejected:
            raise self.error(line, "the trace says `rejected` but the configuration is valid")


def parse_examples(text: str, file: str) -> SpecExamples:
    """The examples of one spec file (its rules as spec/rules.py reads them)."""
    out = SpecExamples()
    for rule in parse_rules(text, file):
        if not rule.example:
            continue
        out.with_example.append(rule.id)
        examples = _RuleExamples(file, rule.id).build(_blocks(list(rule.example)))
        if examples:
            out.examples += examples
        elif rule.untested is not None:
            out.skipped[rule.id] = f"Untested: {rule.untested}"
        else:
            raise ExampleError(file, rule.example[0][0], rule.id,
                               "no executable example, and the rule is not marked Untested")
    return out


@lru_cache(maxsize=1)
def load_spec_examples() -> SpecExamples:
    """The examples of every area file of spec/."""
    out = SpecExamples()
    for path in sorted(SPEC_DIR.glob("*.md")):
        if path.name in NOT_AREA_FILES:
            continue
        part = parse_examples(path.read_text(encoding="utf-8"), f"spec/{path.name}")
        out.examples += part.examples
        out.skipped.update(part.skipped)
        out.with_example += part.with_example
    return out


def load_examples() -> list[Example]:
    return list(load_spec_examples().examples)
