"""The suite catches every deliberately wrong adapter of the mini-batch area
(tests/wrong_mini_batch.py), in the property that checks the broken rule, and names that rule."""

from __future__ import annotations

import re

import pytest

from tests.test_suite_failures import REPO, reproducer, suite_runner

pytest_plugins = ["pytester"]


@pytest.fixture
def run_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    return suite_runner(pytester, monkeypatch, str(REPO / "conformance" / "test_mini_batch.py"))


CASES = [
    # (wrong adapter, the property that must catch it, a rule its report must name)
    ("SizeCountsKeys", "test_processing_time_bundles", "MB-10"),
    ("CountNotReset", "test_processing_time_bundles", "MB-11"),
    ("NoFinishBeforeWatermark", "test_row_time_bundles", "MB-12"),
    ("UpdateBeforeAlways", "test_per_row_aggregation", "MB-20"),
    ("NoRefreshWithTtl", "test_processing_time_bundles", "MB-22"),
    ("RetractsStatelessKeys", "test_per_row_aggregation", "MB-18"),
    ("StopsAtRetractedKey", "test_processing_time_bundles", "MB-18"),
    ("IdleKeepsWatermarks", "test_idle_statuses", "MB-15"),
    ("ValveSurvivesRestore", "test_everything_together", "MB-29"),
]


@pytest.mark.parametrize(("adapter", "prop", "rule"), CASES, ids=[c[0] for c in CASES])
def test_wrong_mini_batch_adapter_is_caught(run_suite, adapter: str, prop: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", f"tests.wrong_mini_batch:{adapter}", "--areas", "mini_batch", "-k", prop)
    out = result.stdout.str()
    assert result.ret == 1, out
    assert f"adapter '{adapter}' does not conform" in out, out
    rules = re.search(r"^rules: (.*)$", out, re.M)
    assert rules and rule in rules[1], (rule, rules and rules[1], out[-3000:])
    want = f"python -m conformance check --adapter tests.wrong_mini_batch:{adapter} "
    assert reproducer(out).startswith(want)

