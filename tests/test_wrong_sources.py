"""The suite catches every deliberately wrong adapter of the sources area (tests/wrong_sources.py),
in the property that checks the broken rule, and names that rule."""

from __future__ import annotations

import re

import pytest

from tests.test_suite_failures import REPO, reproducer, suite_runner
from tests.wrong_sources import MUTANTS

pytest_plugins = ["pytester"]


@pytest.fixture
def run_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    return suite_runner(pytester, monkeypatch, str(REPO / "conformance" / "test_sources.py"))


# (wrong adapter, the property that must catch it, a rule its report must name): wrong_sources.MUTANTS
CASES = [(m.name, m.prop, m.rule) for m in MUTANTS if m.area in (None, "sources")]


@pytest.mark.parametrize(("adapter", "prop", "rule"), CASES, ids=[c[0] for c in CASES])
def test_wrong_sources_adapter_is_caught(run_suite, adapter: str, prop: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    # Unshrunk (as the async I/O mutants in test_suite_failures): this checks the catch and the rule
    # named; shrinking is tested there and measured by `strength` (docs/running-the-suite.md). No
    # corpus: nothing replayed, nor saved and drawn (tests/test_corpus_coverage_progress.py does that).
    result = run_suite("--adapter", f"tests.wrong_sources:{adapter}", "--areas", "sources", "-k", prop,
                       "--conformance-shrink", "no", "--corpus", "none")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert f"adapter '{adapter}' does not conform" in out, out
    # The rules the divergence shows broken, not "(may concern too, ...)" nor "(the property checks
    # ...)" after them.
    rules = re.search(r"^rules: (.*?)(?: \(may concern too, .*?\))?(?: \(the property checks .*\))?$",
                      out, re.M)
    assert rules and rule in rules[1].split(", "), (rule, rules and rules[0], out[-3000:])
    assert reproducer(out).startswith(
        f"python -m flink_semantics.conformance check --adapter tests.wrong_sources:{adapter} ")
