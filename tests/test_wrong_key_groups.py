"""The suite catches every deliberately wrong adapter of the key groups area
(tests/wrong_key_groups.py), in the property that checks the broken rule, and names that rule."""

from __future__ import annotations

import re

import pytest

from tests.test_suite_failures import REPO, reproducer, suite_runner
from tests.wrong_key_groups import MUTANTS

pytest_plugins = ["pytester"]


@pytest.fixture
def run_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    return suite_runner(pytester, monkeypatch, str(REPO / "conformance" / "test_key_groups.py"))


# (wrong adapter, the property that must catch it, a rule its report must name): wrong_key_groups.MUTANTS
CASES = [(m.name, m.prop, m.rule) for m in MUTANTS if m.area in (None, "key_groups")]


@pytest.mark.parametrize(("adapter", "prop", "rule"), CASES, ids=[c[0] for c in CASES])
def test_wrong_key_groups_adapter_is_caught(run_suite, adapter: str, prop: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", f"tests.wrong_key_groups:{adapter}", "--areas", "key_groups", "-k", prop)
    out = result.stdout.str()
    assert result.ret == 1, out
    assert f"adapter '{adapter}' does not conform" in out, out
    # The rules the divergence shows broken, not "(may concern too, ...)" nor "(the property checks
    # ...)" after them.
    rules = re.search(r"^rules: (.*?)(?: \(may concern too, not singled out: [^)]*\))?"
                      r"(?: \(the property checks .*\))?$", out, re.M)
    assert rules and rule in rules[1].split(", "), (rule, rules and rules[0], out[-3000:])
    want = f"python -m flink_semantics.conformance check --adapter tests.wrong_key_groups:{adapter} "
    assert reproducer(out).startswith(want)


def test_in_flight_elements_dealt_one_by_one_are_caught(pytester: pytest.Pytester,  # type: ignore[no-untyped-def]
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The async operator's stored elements on rescale (AIO-49, checked in the async I/O suite with
    this area's schedules): split state dealt one element at a time is caught, AIO-49 named."""
    run = suite_runner(pytester, monkeypatch, str(REPO / "conformance" / "test_async_io.py"))
    result = run("--adapter", "tests.wrong_key_groups:SplitOneByOne", "--areas", "async_io",
                 "-k", "in_flight")
    out = result.stdout.str()
    assert result.ret == 1, out
    rules = re.search(r"^rules: (.*?)(?: \(the property checks .*\))?$", out, re.M)
    assert rules and "AIO-49" in rules[1].split(", "), out[-3000:]
    assert re.search(r"^AIO-49 +MUST +failed", out, re.M), out[-3000:]
