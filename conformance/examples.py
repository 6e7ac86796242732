"""The rules' examples of each area's rules file as data: (rule ID, schedule, expected trace).

Each area defines its notation of configurations, steps and events in its rules file ("Notation
used in the examples") and in its descriptor (spec/area.py, `Notation`); this module knows only
what every area's examples share.  An example is one paragraph of a rule's **Example** field with a
backticked configuration (`key=value …`) and backticked numbered steps (`0 <step>`, `1 <step>`); its
trace is the indented block after it, or the backticked `@…` spans inside it.  `0..100 <step {i}>`
and `@0..99 <event {i}>` stand for runs, `{i}` being the step index.  The tests write their own
cases in the same notation, one item a line: `notation(area)` serves them; traces are compared by
`flink_semantics.conformance.checker.compare_scripted`, the suite's own comparison.

An example of a malformed schedule has the one trace line `@3 refused XY-4` (`@config refused …`
for the configuration): the step and the rule of its refusal.

Examples of rules marked **Untested** are prose and are skipped (their Untested reason says why);
any other rule whose Example does not parse is an error, so a broken example cannot go unnoticed.
The examples' traces are written by hand by the spec author: `tests/test_spec_examples.py` checks the
reference model against them and `conformance/test_spec_examples.py` the adapter under test.

Standard library and `spec` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from flink_semantics.spec.area import Area, areas, get_area
from flink_semantics.spec.rules import parse_rules
from flink_semantics.spec.schedule import (
    Event,
    Schedule,
    ScheduleError,
    Trace,
    schedule_from_dict,
    validate_schedule,
)

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"


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
    # A malformed schedule's example: (step index or None for the configuration, rule) of its
    # refusal, written as the one trace line `@3 refused XY-4` or `@config refused XY-2`.
    refusal: tuple[int | None, str] | None = None

    @property
    def id(self) -> str:
        return f"{self.rule}.{self.number}"

    @property
    def area(self) -> str:
        return self.schedule.area

    @property
    def rejected(self) -> bool:
        return self.trace.rejected


@dataclass
class SpecExamples:
    examples: list[Example] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # rule ID -> why it has no executable example
    with_example: list[str] = field(default_factory=list)  # every rule ID that has an Example field


# --------------------------------------------------------------------------
# What every area's notation shares: key=value configurations, numbered steps, @step events, runs
# --------------------------------------------------------------------------

_VALUE = r"(?:\{[^}]*\}|\[[^\]]*\]|[^\s=]+)"
_CONFIG = re.compile(rf"\s*\w+={_VALUE}(?:\s+\w+={_VALUE})*\s*")
_STEP_CHUNK = re.compile(r"\d+(?:\.\.\d+)?\s+\S.*")
_RANGE = re.compile(r"(-?\d+)(?:\.\.(\d+))?\s+(.*)")
_REFUSAL = re.compile(r"@(\d+|config)\s+refused\s+([A-Z]+-\d+)")


def expand(text: str) -> list[tuple[int, str]]:
    """`3 tick 1` -> [(3, "tick 1")]; `0..2 tick {i}` -> [(0, "tick 0"), (1, "tick 1"), (2, "tick 2")]."""
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


def _events(area: Area, lines: list[str]) -> list[Event]:
    """`@3 <event>` or `@0..2 <event {i}>` lines -> the events, in the lines' order."""
    events: list[Event] = []
    for line in lines:
        if not line.startswith("@"):
            raise ValueError(f"a trace line must start with @: {line!r}")
        events += [area.notation.parse_event(n, text) for n, text in expand(line[1:])]
    return events


class AreaNotation:
    """An area's notation, one item a line, for tests and examples."""

    def __init__(self, area: str):
        self.area = get_area(area)

    def step(self, text: str) -> dict[str, Any]:
        """One step without its number -> the JSON step object."""
        return self.area.notation.parse_step(text)

    def steps(self, text: str) -> list[dict[str, Any]]:
        """One step a line, without step numbers -> the JSON step objects."""
        return [self.step(line) for line in _lines(text)]

    def schedule(self, config: dict[str, Any], steps: str, validate: bool = True) -> Schedule:
        """A schedule from its JSON configuration and its steps, one a line."""
        return schedule_from_dict({"area": self.area.name, "config": config, "steps": self.steps(steps)},
                                  validate=validate)

    def trace(self, text: str) -> Trace:
        """One event a line, each with its step (`@0 <event>`)."""
        return Trace(tuple(_events(self.area, _lines(text))))

    def render(self, e: Event) -> str:
        """An event in the notation, with its step: the inverse of the trace notation."""
        return self.area.notation.render_event(e)


@cache
def notation(area: str) -> AreaNotation:
    return AreaNotation(area)


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

    def __init__(self, area: Area, file: str, rule: str):
        self.area = area
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
            config = self.area.notation.parse_config(config_text)
            steps = [(n, self.area.notation.parse_step(t)) for chunk in step_texts for n, t in expand(chunk)]
            numbers = [n for n, _ in steps]
            if numbers != list(range(len(steps))):
                raise ValueError(f"steps must be numbered 0, 1, 2… without gaps, not {numbers}")
            refusal = _REFUSAL.fullmatch(trace_lines[0]) if len(trace_lines) == 1 else None
            events = [] if refusal else _events(self.area, trace_lines)
            if [e.step for e in events] != sorted(e.step for e in events):
                raise ValueError("trace lines must be in step order")
            schedule = schedule_from_dict({"area": self.area.name, "config": config,
                                           "steps": [s for _, s in steps]}, validate=False)
        except (ValueError, TypeError) as e:
            raise self.error(line, str(e)) from None
        trace = Trace(tuple(events))
        if refusal:
            where = None if refusal[1] == "config" else int(refusal[1])
            self.validate_refusal(line, schedule, where, refusal[2])
            return Example(self.rule, len(self.examples) + 1, self.file, line, schedule, trace,
                           (where, refusal[2]))
        self.validate(line, schedule, trace)
        return Example(self.rule, len(self.examples) + 1, self.file, line, schedule, trace)

    def validate_refusal(self, line: int, schedule: Schedule, step: int | None, rule: str) -> None:
        """A malformed schedule's example: static validation refuses it there, or accepts it (the
        refusal is then dynamic, found by the reference model)."""
        try:
            validate_schedule(schedule)
        except ScheduleError as e:
            if (e.step, e.rule) != (step, rule):
                raise self.error(line, f"refused elsewhere: {e}") from None

    def validate(self, line: int, schedule: Schedule, trace: Trace) -> None:
        """Static validation; a refused configuration must come with the trace `@-1 rejected`."""
        rejected = trace.rejected
        if any(e.event == "rejected" for e in trace.events) and not rejected:
            raise self.error(line, "`@-1 rejected` must be the only event")
        try:
            validate_schedule(schedule)
        except ScheduleError as e:
            if not (rejected and e.step is None and e.rule in self.area.rejecting_rules):
                raise self.error(line, f"malformed schedule: {e}") from None
            return
        if rejected:
            raise self.error(line, "the trace says `rejected` but the configuration is valid")


def parse_examples(text: str, file: str, area: str) -> SpecExamples:
    """The examples of one area's rules file (its rules as spec/rules.py reads them)."""
    out = SpecExamples()
    for rule in parse_rules(text, file):
        if not rule.example:
            continue
        out.with_example.append(rule.id)
        examples = _RuleExamples(get_area(area), file, rule.id).build(_blocks(list(rule.example)))
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
    """The examples of every area's rules file."""
    out = SpecExamples()
    for area in areas().values():
        path = SPEC_DIR / area.rules_file
        part = parse_examples(path.read_text(encoding="utf-8"), f"spec/{path.name}", area.name)
        out.examples += part.examples
        out.skipped.update(part.skipped)
        out.with_example += part.with_example
    return out


def load_examples() -> list[Example]:
    return list(load_spec_examples().examples)
