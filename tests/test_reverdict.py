"""`python -m flink_semantics.conformance reverdict` (conformance/reverdict.py): a report's verdicts
recomputed from its recorded properties, with the expected failures an adapter declares or those
the report lists; exit 1 when a verdict changed (a check), --write rewrites; bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance.cli import main


class ListsWm1:
    """An adapter's factory that declares WM-1 an expected failure (read without building it)."""

    expected_failures = {"WM-1": "no per-split watermark here"}


def a_report() -> dict[str, Any]:
    """A watermarks report whose one property failed on WM-1 (a MUST rule), written by a run
    whose adapter listed no expected failures."""
    prop = {"nodeid": "conformance/test_watermarks.py::test_x", "rules": ["WM-1"], "outcome": "failed",
            "schedules": 3, "blamed": ["WM-1"], "reproducer": "python -m x", "reason": None,
            "found_after": 3, "counterexample_steps": 2, "replay": False, "adapter": True, "possible": []}
    return {"adapter": "someone", "areas": ["watermarks"], "run": {},
            "rules": [{"id": "WM-1", "area": "watermarks", "level": "MUST", "verdict": "failed",
                       "schedules": 0, "reason": "1 of 1 properties naming it failed on it",
                       "reproducer": "python -m x"}],
            "properties": [prop]}


def verdict_of(path: Path, rule: str) -> str:
    (v,) = [r["verdict"] for r in json.loads(path.read_text())["rules"] if r["id"] == rule]
    return str(v)


def test_the_adapters_expected_failure_turns_a_failure_into_one(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(a_report()))
    adapter = f"{__name__}:ListsWm1"
    assert main(["reverdict", str(path), "--adapter", adapter]) == 1  # a check: it would change
    assert f"{path}: WM-1 failed -> expected failure" in capsys.readouterr().out
    assert verdict_of(path, "WM-1") == "failed"  # not written without --write
    assert main(["reverdict", str(path), "--adapter", adapter, "--write"]) == 0
    data = json.loads(path.read_text())
    (wm1,) = [r for r in data["rules"] if r["id"] == "WM-1"]
    assert wm1["verdict"] == "expected failure" and wm1["reason"] == "no per-split watermark here"
    assert data["properties"][0]["outcome"] == "expected failure"
    assert main(["reverdict", str(path), "--adapter", adapter]) == 0  # now it agrees
    assert f"{path}: 0 verdicts changed" in capsys.readouterr().out


def test_without_an_adapter_the_reports_own_list_keeps_its_verdicts(tmp_path: Path) -> None:
    """Recomputed with what the report lists (no expected failure here), the failure stays one;
    and a report written with WM-1 listed keeps its expected failure."""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(a_report()))
    assert main(["reverdict", str(path), "--write"]) == 0  # the watermark rules the sketch leaves out
    assert verdict_of(path, "WM-1") == "failed" and verdict_of(path, "WM-2") == "not run"
    assert main(["reverdict", str(path)]) == 0
    listed = json.loads(path.read_text())
    for r in listed["rules"]:
        if r["id"] == "WM-1":
            r.update(verdict="expected failure", reason="listed reason")
    listed["properties"][0]["outcome"] = "expected failure"
    path.write_text(json.dumps(listed))
    assert main(["reverdict", str(path)]) == 0
    assert main(["reverdict", str(path), "--write"]) == 0 and verdict_of(path, "WM-1") == "expected failure"


@pytest.mark.parametrize("content, says", [
    ("not json", "cannot read a JSON report"),
    (json.dumps({"adapter": "x"}), "not a conformance report"),
    (json.dumps({**a_report(), "properties": [{"nodeid": "n", "rules": [], "outcome": "passed"}]}),
     "does not say whether it calls the adapter"),
])
def test_a_bad_report_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       content: str, says: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content)
    assert main(["reverdict", str(path)]) == 2
    err = capsys.readouterr().err
    assert says in err and str(path) in err and len(err.strip().splitlines()) == 1


def test_an_unknown_adapter_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(a_report()))
    assert main(["reverdict", str(path), "--adapter", "no-such-engine"]) == 2
    assert "unknown adapter 'no-such-engine'" in capsys.readouterr().err


def test_a_stale_rules_listed_reason_is_kept(tmp_path: Path) -> None:
    """A rule listed as an expected failure that passed stays stale when recomputed from the
    report's own list, with the reason it was listed with."""
    report = a_report()
    report["properties"][0].update(outcome="passed", blamed=[], reproducer=None, found_after=None)
    report["rules"][0].update(verdict="stale", reproducer=None,
                              reason="listed as an expected failure (no per-split watermark), but it passed")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    assert main(["reverdict", str(path), "--write"]) == 0
    (wm1,) = [r for r in json.loads(path.read_text())["rules"] if r["id"] == "WM-1"]
    assert (wm1["verdict"], wm1["reason"]) == (
        "stale", "listed as an expected failure (no per-split watermark), but it passed")
