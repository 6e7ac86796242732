"""Print rules of the spec: each rule's text, the properties that check it, where the reference has it.

    python -m flink_semantics.conformance rules ID ... [--area AREA]

Each ID is a rule's (`SCH-2`), or a prefix ending in `-` for every rule of it (`SCH-`); `--area`
prints every rule of an area (its `spec/<area>.md`).  For each rule: its ID, title and level, the
spec file, the rule's sentence, its rationale, source and example as the spec has them (or why it
is Untested), the conformance properties whose `rule` marker names it (with the capabilities they
need), and the lines of `reference/` that name it.  An unknown ID is a usage error (exit 2).
"""

from __future__ import annotations

import argparse
import importlib
import re
import textwrap
from functools import lru_cache
from pathlib import Path

from flink_semantics.spec.area import areas
from flink_semantics.spec.rules import Rule, load_rules

EXAMPLE = f"""examples:
  python -m flink_semantics.conformance rules SCH-2
  python -m flink_semantics.conformance rules SCH-1 SCH-3
  python -m flink_semantics.conformance rules SCH-
  python -m flink_semantics.conformance rules --area {sorted(areas())[0]}"""

def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", metavar="ID",
                        help="rule IDs (SCH-2), or prefixes ending in - (SCH-)")
    parser.add_argument("--area", choices=sorted(areas()), help="every rule of this area")


@lru_cache(maxsize=1)
def checked_by() -> dict[str, list[str]]:
    """Rule ID -> the suite's properties that name it ("test_x.py::name", with their needs)."""
    out: dict[str, list[str]] = {}
    for area in areas():
        module = importlib.import_module(f"flink_semantics.conformance.test_{area}")
        for name in sorted(dir(module)):
            func = getattr(module, name)
            if not name.startswith("test_") or not callable(func):
                continue
            for mark in getattr(func, "pytestmark", []):
                if mark.name != "rule":
                    continue
                needs = list(mark.kwargs.get("needs", ()))
                where = f"conformance/test_{area}.py::{name}"
                where += f" (needs {', '.join(needs)})" if needs else ""
                for rid in mark.args:
                    out.setdefault(rid, []).append(where)
    return out


@lru_cache(maxsize=1)
def in_reference() -> dict[str, list[str]]:
    """Rule ID -> the lines of reference/*.py that name it ("reference/x.py:12")."""
    import flink_semantics.reference as reference

    out: dict[str, list[str]] = {}
    pattern = re.compile(r"\b([A-Z]+-\d+)\b")
    for path in sorted(Path(reference.__file__).parent.glob("*.py")):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for rid in dict.fromkeys(pattern.findall(line)):
                out.setdefault(rid, []).append(f"reference/{path.name}:{no}")
    return out


def select(ids: list[str], area: str | None) -> list[Rule]:
    """The rules asked for, in the spec's order; ValueError names an unknown ID."""
    rules = load_rules()
    chosen: list[str] = []
    if area is not None:
        md = area.replace("_", "-") + ".md"
        chosen += [rid for rid, r in rules.items() if r.file == md]
    for given in ids:
        wanted = given.strip().upper()
        found = [rid for rid in rules if rid.startswith(wanted)] if wanted.endswith("-") else \
            [wanted] if wanted in rules else []
        if not found:
            prefix = wanted.split("-")[0] + "-"
            known = sorted((r for r in rules if r.startswith(prefix)), key=lambda r: int(r.split("-")[1]))
            prefixes = ", ".join(sorted({r.split("-")[0] + "-" for r in rules}))
            hint = f"{known[0]}..{known[-1]}" if known else prefixes
            raise ValueError(f"unknown rule {given!r} (known: {hint})")
        chosen += found
    return [rules[rid] for rid in dict.fromkeys(chosen)]


def describe(rule: Rule) -> list[str]:
    """A rule as lines of text."""
    def para(label: str, text: str | None) -> list[str]:
        if not text:
            return []
        return textwrap.wrap(text, 100, initial_indent=f"  {label}: ",
                             subsequent_indent=" " * (len(label) + 4))

    lines = [f"{rule.id} {rule.title} ({rule.level}, spec/{rule.file})"]
    lines += para("rule", rule.text) + para("rationale", rule.rationale) + para("source", rule.source)
    if rule.untested:
        lines += para("untested", rule.untested)
    if rule.example:
        first, *rest = [text for _, text in rule.example]
        lines.append("  example:")
        lines += [f"    {text}".rstrip() for text in [first, *textwrap.dedent("\n".join(rest)).splitlines()]]
    props = checked_by().get(rule.id, [])
    lines.append("  checked by: " + ("; ".join(props) if props else "no property (see untested, or the "
                                                                     "spec examples and corpus cases)"))
    refs = in_reference().get(rule.id, [])
    lines.append("  reference: " + (", ".join(refs) if refs else "named nowhere in reference/"))
    return lines


def run(args: argparse.Namespace) -> int:
    from flink_semantics.conformance.cli import UsageError

    if not args.ids and args.area is None:
        raise UsageError("give rule IDs (SCH-2, or SCH- for all of them) or --area AREA")
    try:
        rules = select(list(args.ids), args.area)
    except ValueError as e:
        raise UsageError(str(e)) from None
    for i, rule in enumerate(rules):
        if i:
            print()
        print("\n".join(describe(rule)))
    return 0
