"""The suite catches every deliberately wrong adapter of the sources area (tests/wrong_sources.py),
in the property that checks the broken rule, and names that rule."""

from __future__ import annotations

import re

import pytest

from tests.test_suite_failures import REPO, reproducer, suite_runner

pytest_plugins = ["pytester"]


@pytest.fixture
def run_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    return suite_runner(pytester, monkeypatch, str(REPO / "conformance" / "test_sources.py"))


CASES = [
    # (wrong adapter, the property that must catch it, a rule its report must name)
    ("ReturnsRestoredSplits", "test_reader_failover", "SRC-22"),
    ("ForgetsBucketOnAbort", "test_reader_failover", "SRC-18"),
    ("ReturnedOnlyOnAddReader", "test_reader_failover", "SRC-24"),
    ("EndsBeforeNoMoreSplits", "test_assignment_and_reading", "SRC-32"),
    ("RestoresRegistry", "test_global_failover", "SRC-5"),
    ("NoValve", "test_checkpoints", "SRC-13"),
    ("RoundRobinRescale", "test_rescale", "SRC-31"),
    ("RestartsEverything", "test_region_failover", "SRC-36"),
    ("KeepsUncommittedOutput", "test_reader_failover", "SRC-38"),
]


@pytest.mark.parametrize(("adapter", "prop", "rule"), CASES, ids=[c[0] for c in CASES])
def test_wrong_sources_adapter_is_caught(run_suite, adapter: str, prop: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", f"tests.wrong_sources:{adapter}", "--areas", "sources", "-k", prop)
    out = result.stdout.str()
    assert result.ret == 1, out
    assert f"adapter '{adapter}' does not conform" in out, out
    rules = re.search(r"^rules: (.*)$", out, re.M)
    assert rules and rule in rules[1], (rule, rules and rules[1], out[-3000:])
    assert reproducer(out).startswith(f"python -m conformance check --adapter tests.wrong_sources:{adapter} ")
