"""Every MUST rule of spec/*.md is checked by a conformance property or says why it is Untested;
every property names rules that exist."""

from __future__ import annotations

import ast
from pathlib import Path

from flink_semantics.spec.rules import Rule, load_rules

SUITE = Path(__file__).resolve().parent.parent / "conformance"


def _mark(d: ast.expr, name: str) -> bool:
    return (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == name
            and ast.unparse(d.func.value) == "pytest.mark")


def rule_markers(path: Path) -> dict[str, list[str]]:
    """test function name -> the IDs of its @pytest.mark.rule(...) decorators (read from the source).

    A parametrized test without a static rule marker (its cases carry rule marks, such as the spec
    examples) is left out, and so is a module whose cases pytest_generate_tests makes (the corpus): the
    plugin checks those marks when it collects the cases.
    """
    out: dict[str, list[str]] = {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if any(isinstance(n, ast.FunctionDef) and n.name == "pytest_generate_tests" for n in tree.body):
        return out  # its cases are made by pytest_generate_tests, with their own rule marks
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            ids = [ast.literal_eval(a) for d in node.decorator_list if _mark(d, "rule") for a in d.args]  # type: ignore[attr-defined]
            if ids or not any(_mark(d, "parametrize") for d in node.decorator_list):
                out[node.name] = ids
    return out


def coverage_problems(rules: dict[str, Rule], markers: dict[str, list[str]]) -> list[str]:
    problems = []
    checked = {r for ids in markers.values() for r in ids}
    for name, ids in markers.items():
        if not ids:
            problems.append(f"property {name} names no rule (@pytest.mark.rule)")
        problems += [f"property {name} names unknown rule {r}" for r in ids if r not in rules]
    for r in rules.values():
        if r.level == "MUST" and r.id not in checked and not r.untested:
            problems.append(f"MUST rule {r.id} ({r.file}) is checked by no property and not marked Untested")
        if r.id in checked and r.untested:
            problems.append(f"rule {r.id} is marked Untested but a property checks it")
    return problems


def suite_markers() -> dict[str, list[str]]:
    markers: dict[str, list[str]] = {}
    for path in sorted(SUITE.glob("test_*.py")):
        markers.update({f"{path.name}::{k}": v for k, v in rule_markers(path).items()})
    return markers


def test_every_must_rule_is_covered_or_untested() -> None:
    markers = suite_markers()
    assert markers, "no properties found in conformance/"
    assert coverage_problems(load_rules(), markers) == []


def test_coverage_check_can_fail() -> None:
    rules = {
        "X-1": Rule("X-1", "t", "MUST", "text", "x.md"),
        "X-2": Rule("X-2", "t", "MUST", "text", "x.md", untested="no step for it"),
        "X-3": Rule("X-3", "t", "SHOULD", "text", "x.md"),
    }
    assert coverage_problems(rules, {"test_a": ["X-1"]}) == []
    problems = coverage_problems(rules, {"test_a": ["X-9", "X-2"], "test_b": []})
    assert problems == [
        "property test_a names unknown rule X-9",
        "property test_b names no rule (@pytest.mark.rule)",
        "MUST rule X-1 (x.md) is checked by no property and not marked Untested",
        "rule X-2 is marked Untested but a property checks it",
    ]


def test_markers_are_read_from_source(tmp_path: Path) -> None:
    f = tmp_path / "test_x.py"
    f.write_text('import pytest\n@pytest.mark.rule("A-1", "A-2")\n@pytest.mark.needs("x")\n'
                 'def test_p(): pass\ndef test_q(): pass\ndef helper(): pass\n'
                 '@pytest.mark.parametrize("x", [pytest.param(1, marks=[pytest.mark.rule("A-3")])])\n'
                 'def test_r(x): pass\n')
    assert rule_markers(f) == {"test_p": ["A-1", "A-2"], "test_q": []}
