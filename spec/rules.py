"""The rule registry: every rule of spec/*.md, parsed from the Markdown.

A rule is a level-3 heading `### ID Title` followed by bullet fields:

    ### XY-12 A rule's title
    - **Level:** MUST
    - **Rule:** In ordered mode the operator MUST ...
    - **Rationale:** ...
    - **Source:** ...
    - **Example:** ...
    - **Untested:** reason        (only when no conformance property checks it)

A field runs until the next field or heading, so an Example may go on over several lines
(paragraphs and indented trace blocks); `Rule.example` keeps those lines with their line numbers
for conformance/examples.py, which makes the examples executable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SPEC_DIR = Path(__file__).resolve().parent
LEVELS = ("MUST", "SHOULD", "MAY")
_HEADING = re.compile(r"^###\s+(?P<id>[A-Z]+-\d+)\s+(?P<title>.+?)\s*$")
_FIELD = re.compile(r"^-\s+\*\*(?P<name>[A-Za-z ]+):\*\*\s*(?P<value>.*)$")


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    level: str
    text: str
    file: str
    untested: str | None = None
    example: tuple[tuple[int, str], ...] = ()  # (line number, text) of the Example field, in order
    rationale: str | None = None
    source: str | None = None


class RuleFileError(ValueError):
    pass


def parse_rules(text: str, file: str) -> list[Rule]:
    rules: list[Rule] = []
    current: dict[str, str] | None = None
    field_lines: dict[str, list[tuple[int, str]]] = {}  # field name -> its lines, first one included
    field: list[tuple[int, str]] | None = None  # the field being read

    def close() -> None:
        if current is None:
            return
        rid = current["id"]
        level = current.get("Level", "").strip()
        if level not in LEVELS:
            raise RuleFileError(f"{file}: rule {rid} has no Level among {LEVELS}")
        body = current.get("Rule", "").strip()
        if not body:
            raise RuleFileError(f"{file}: rule {rid} has no Rule sentence")
        example = tuple(field_lines.get("Example", ()))
        rules.append(Rule(rid, current["title"], level, body, file, current.get("Untested"), example,
                          _joined(field_lines.get("Rationale")), _joined(field_lines.get("Source"))))

    for no, line in enumerate(text.splitlines(), start=1):
        m = _HEADING.match(line)
        if m or line.startswith("#"):
            close()
            current = {"id": m["id"], "title": m["title"]} if m else None
            field_lines, field = {}, None
            continue
        if current is None:
            continue
        f = _FIELD.match(line)
        if f:
            name = f["name"].strip()
            current[name] = f["value"].strip()
            field = field_lines.setdefault(name, [])
            field.append((no, f["value"].strip()))
        elif field is not None:
            field.append((no, line))
    close()
    return rules


def _joined(lines: list[tuple[int, str]] | None) -> str | None:
    """A field's text over its lines, as one paragraph."""
    return " ".join(text.strip() for _, text in lines if text.strip()) if lines else None


@lru_cache(maxsize=1)
def load_rules() -> dict[str, Rule]:
    """All rules of all spec files, by ID.  Raises on a duplicate ID."""
    out: dict[str, Rule] = {}
    for path in sorted(SPEC_DIR.glob("*.md")):
        for r in parse_rules(path.read_text(encoding="utf-8"), path.name):
            if r.id in out:
                raise RuleFileError(f"rule {r.id} is defined twice ({out[r.id].file}, {r.file})")
            out[r.id] = r
    return out
