"""`python -m flink_semantics.conformance strength` (conformance/strength.py): judging a mutant from its
suite's report, the tables and the catch rate on synthetic reports, and one real run on two mutants."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance import strength as S
from flink_semantics.conformance.strength import Entry, Mutant

from tests.hang import HANG_GUARD_S

REPO = Path(__file__).resolve().parent.parent


def prop(name: str, outcome: str = "passed", blamed: tuple[str, ...] = (), found_after: int | None = None,
         steps: int | None = None, area: str = "sources") -> dict[str, Any]:
    """A property's entry of a --conformance-report."""
    failed = outcome in ("failed", "expected failure")
    return {"nodeid": f"conformance/test_{area}.py::{name}", "rules": list(blamed), "outcome": outcome,
            "schedules": 600 if not failed else 300, "blamed": list(blamed),
            "reproducer": "python -m flink_semantics.conformance check ..." if failed else None,
            "reason": None,
            "found_after": found_after, "counterexample_steps": steps}


def report(*props: dict[str, Any], verdicts: dict[str, str] | None = None) -> dict[str, Any]:
    return {"adapter": "m:X", "areas": ["sources"], "properties": list(props),
            "rules": [{"id": r, "verdict": v} for r, v in (verdicts or {}).items()]}


def entry(name: str, prop_: str = "test_reader_failover", rule: str = "SRC-22",
          area: str = "sources") -> Entry:
    return Entry("tests.fake", Mutant(name, prop_, rule), area)


# --------------------------------------------------------------------------
# Judging one mutant
# --------------------------------------------------------------------------


def test_caught_by_the_expected_property_naming_the_rule() -> None:
    r = S.judge(entry("A"), report(prop("test_checkpoints"),
                                   prop("test_unbounded_sources", "failed", ("SRC-7",), 5, 9),
                                   prop("test_reader_failover", "failed", ("SRC-21", "SRC-22"), 37, 25),
                                   verdicts={"SRC-22": "failed"}))
    assert (r.status, r.by, r.found_after, r.steps) == (S.CAUGHT, "test_reader_failover", 37, 25)
    assert not r.shrunk
    assert r.passed == 1 and r.rule_verdict == "failed" and len(r.catches) == 2
    assert S.describe(r) == ("sources A: caught by test_reader_failover after 37 schedules "
                             "(25 steps, unshrunk); 1 other property failed too")


def test_the_shrinking_run_gives_the_size_and_the_rules_of_its_report_apart() -> None:
    first = report(prop("test_reader_failover", "failed", ("SRC-22",), 120, 25))
    shrunk = report(prop("test_reader_failover", "failed", ("SRC-22",), 120, 6))
    r = S.judge(entry("A"), first, shrunk)
    assert (r.status, r.found_after, r.steps, r.shrunk) == (S.CAUGHT, 120, 6, True)
    assert S.describe(r) == "sources A: caught by test_reader_failover after 120 schedules (6 steps)"
    more = S.judge(entry("A"), first,
                   report(prop("test_reader_failover", "failed", ("SRC-22", "SRC-7"), 120, 6)))
    assert S.describe(more) == S.describe(r)  # the rule still named: nothing to say
    # Shrunk, the report no longer names the rule: said, but the status is the suite run's.
    moved = S.judge(entry("A"), first, report(prop("test_reader_failover", "failed", ("SRC-7",), 120, 4)))
    assert (moved.status, moved.steps, moved.shrunk_blamed) == (S.CAUGHT, 4, ["SRC-7"])
    assert S.describe(moved).endswith("(4 steps); shrunk, its report no longer names SRC-22 (SRC-7)")


def test_caught_elsewhere_wrong_rule_escaped_and_error() -> None:
    elsewhere = S.judge(entry("B"), report(prop("test_reader_failover", "failed", ("SRC-7",), 3, 4),
                                           prop("test_rescale", "failed", ("SRC-22",), 50, 8),
                                           prop("test_checkpoints", "failed", ("SRC-22",), 10, 5)))
    assert (elsewhere.status, elsewhere.by, elsewhere.found_after) == (S.ELSEWHERE, "test_checkpoints", 10)
    elsewhere.rule_verdict = "passed"  # the properties that check SRC-22 passed: the verdict table says so
    assert S.describe(elsewhere).endswith("; the verdict table gives SRC-22 'passed'")
    assert S.describe(elsewhere).startswith("sources B: caught elsewhere: by test_checkpoints, not by "
                                            "test_reader_failover (failed naming SRC-7) after 10 schedules")

    wrong = S.judge(entry("C"), report(prop("test_rescale", "failed", ("SRC-31",), 7, 3),
                                       prop("test_reader_failover", "failed", ("SRC-7",), 9, 2)))
    assert (wrong.status, wrong.by) == (S.WRONG_RULE, "test_rescale")  # the soonest failure
    assert ("WRONG RULE: no report names SRC-22 (they name SRC-7, SRC-31; test_reader_failover: failed "
            "naming SRC-7)") in S.describe(wrong)

    escaped = S.judge(entry("D"), report(prop("test_reader_failover"), prop("test_rescale", "unsupported")))
    assert (escaped.status, escaped.passed, escaped.unsupported) == (S.ESCAPED, 1, 1)
    assert S.describe(escaped) == ("sources D: ESCAPED: no property failed (1 passed, 1 unsupported); "
                                   "it breaks SRC-22, test_reader_failover should catch it")

    error = S.judge(entry("E"), None, error="exit status 3, no report: adapter 'E' hung")
    assert error.status == S.ERROR and "hung" in S.describe(error)


def test_a_should_rule_failure_excused_without_strict_still_catches() -> None:
    r = S.judge(entry("F", "test_alignment", "WM-25", "watermarks"),
                report(prop("test_alignment", "expected failure", ("WM-25",), 40, 7, area="watermarks")))
    assert r.status == S.CAUGHT


def test_the_expected_property_is_matched_across_parametrized_cases() -> None:
    r = S.judge(entry("G", "test_spark_hash", "KG-26", "key_groups"),
                report(prop("test_spark_hash[strings]", "failed", ("KG-26",), 8, 1, area="key_groups")))
    assert (r.status, r.by) == (S.CAUGHT, "test_spark_hash[strings]")


# --------------------------------------------------------------------------
# Tables, catch rate, exit status
# --------------------------------------------------------------------------


def results() -> list[S.Result]:
    def caught(name: str, area: str, rule: str, by: str, after: int, steps: int) -> S.Result:
        return S.judge(Entry("m", Mutant(name, by, rule), area),
                       report(prop(by, "failed", (rule,), after, steps, area=area)))
    return [
        caught("A1", "sources", "SRC-22", "test_reader_failover", 10, 4),
        caught("A2", "sources", "SRC-22", "test_reader_failover", 30, 8),
        caught("A3", "sources", "SRC-5", "test_global_failover", 100, 6),
        S.judge(Entry("m", Mutant("Sneaky", "test_valve", "WM-19"), "watermarks"),
                report(prop("test_valve", area="watermarks"))),
        caught("W1", "watermarks", "WM-6", "test_idleness", 5, 3),
    ]


def test_summary_per_area_and_per_rule() -> None:
    s = S.summary(results())
    sources, watermarks = s["areas"]
    assert (sources["area"], sources["caught"], sources["mutants"]) == ("sources", 3, 3)
    assert (sources["median_schedules"], sources["median_steps"]) == (30, 6)
    assert (watermarks["caught"], watermarks["mutants"], watermarks["not_caught"]) == (1, 2, ["Sneaky"])
    rules = {(r["area"], r["rule"]): r for r in s["rules"]}
    assert list(rules) == [("sources", "SRC-5"), ("sources", "SRC-22"), ("watermarks", "WM-6"),
                           ("watermarks", "WM-19")]  # in area, then rule number, order
    src22 = rules[("sources", "SRC-22")]
    assert (src22["caught"], src22["mutants"]) == (2, 2)
    assert (src22["median_schedules"], src22["median_steps"]) == (20, 6)
    assert s["total"]["caught"] == 4 and s["catch_rate"] == pytest.approx(0.8)
    assert S.rate_line(s).startswith("catch rate: 4/5 mutants caught (80%), the broken rule named for 4 "
                                     "(its verdict 'failed' for 0; exactly it and no other rule failed "
                                     "for 0, 0%); ")
    assert "1 escaped" in S.rate_line(s)


def test_exact_blame_is_its_rule_failed_and_no_other() -> None:
    """A mutant breaking KG-21 whose verdict table fails KG-17..KG-21 is caught but not exactly
    blamed (issue 32's rotation bug); with KG-21 alone failed it is."""
    def judged(verdicts: dict[str, str]) -> S.Result:
        name = "test_operator_state_on_rescale"
        return S.judge(entry("R", name, "KG-21", "key_groups"),
                       report(prop(name, "failed", ("KG-21",), 9, 5, area="key_groups"), verdicts=verdicts))
    wide = judged({"KG-17": "failed", "KG-18": "failed", "KG-21": "failed", "KG-22": "passed"})
    assert wide.status == S.CAUGHT and not S.exactly_blamed(wide)
    assert "blamed too: KG-17, KG-18" in S.describe(wide)
    exact = judged({"KG-17": "inconclusive", "KG-21": "failed", "KG-22": "passed"})
    assert S.exactly_blamed(exact) and "blamed too" not in S.describe(exact)
    assert S.summary([wide, exact])["total"]["exactly_blamed"] == 1


def test_tables_as_text_and_markdown() -> None:
    s = S.summary(results())
    text = "\n".join(S.tables(s))
    assert "sources     3/3" in text and "watermarks  1/2" in text and "Sneaky" in text
    assert "A1: test_reader_failover; A2: test_reader_failover" in text
    assert "Sneaky: ESCAPED" in text
    md = S.tables(s, markdown=True)
    assert md[0] == "| area | caught | rule named | median schedules | median steps | not caught |"
    assert md[1] == "| --- | --- | --- | --- | --- | --- |"
    assert "| sources | 3/3 | 3/3 | 30 | 6 | — |" in md
    assert "| **all** | 4/5 | 4/5 | 20 | 5 | Sneaky |" in md
    assert "| watermarks | WM-19 | 0/1 | — | — | Sneaky: ESCAPED |" in md


def test_exit_status_fails_on_escaped_wrong_rule_and_error_not_elsewhere() -> None:
    ok = S.judge(entry("A"), report(prop("test_reader_failover", "failed", ("SRC-22",), 1, 1)))
    elsewhere = S.judge(entry("B"), report(prop("test_rescale", "failed", ("SRC-22",), 1, 1)))
    wrong = S.judge(entry("C"), report(prop("test_reader_failover", "failed", ("SRC-7",), 1, 1)))
    escaped = S.judge(entry("D"), report(prop("test_reader_failover")))
    error = S.judge(entry("E"), None)
    assert S.exit_status([ok, elsewhere]) == 0
    for bad in (wrong, escaped, error):
        assert S.exit_status([ok, bad]) == 1, bad.status


def test_the_command_prints_progress_tables_and_names_the_escaped(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    """run() over a registry, the suite runs replaced by synthetic reports."""
    by_name = {r.name: r for r in results()}
    monkeypatch.setattr(S, "load", lambda modules, only: [Entry("m", Mutant(n, r.prop, r.rule), r.area)
                                                          for n, r in by_name.items()])
    monkeypatch.setattr(S, "measure", lambda e, shrink, profile, timeout, corpus_out: by_name[e.mutant.name])
    out_json = tmp_path / "strength.json"
    args = argparse.Namespace(modules=["m"], only=[], jobs=2, shrink="catcher", profile=None,
                              timeout=HANG_GUARD_S, json_out=str(out_json), markdown=False)
    assert S.run(args) == 1
    out = capsys.readouterr().out
    assert "5 mutants of 2 areas, 2 at a time, shrinking: catcher" in out
    assert "[5/5] " in out and "ETA" in out
    assert "watermarks Sneaky: ESCAPED: no property failed" in out
    assert "catch rate: 4/5 mutants caught (80%)" in out
    data = json.loads(out_json.read_text())
    assert data["total"]["mutants"] == 5 and data["counts"]["escaped"] == 1
    assert [m["name"] for m in data["mutants"]] == list(by_name)  # in registry order
    assert data["mutants"][0]["catches"][0]["prop"] == "test_reader_failover"


# --------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------


def test_the_registries_hold_every_area_and_their_adapters() -> None:
    entries = S.load(["tests.wrong_adapters", "tests.wrong_sources", "tests.wrong_watermarks",
                      "tests.wrong_key_groups", "tests.wrong_mini_batch"])
    assert len(entries) >= 25
    assert {e.area for e in entries} == {"async_io", "sources", "watermarks", "key_groups", "mini_batch"}
    assert len({(e.adapter, e.area) for e in entries}) == len(entries)
    only = S.load(["tests.wrong_key_groups"], ["SplitOneByOne"])
    assert [(e.area, e.mutant.rule) for e in only] == [("key_groups", "KG-17"), ("async_io", "AIO-49")]


def test_usage_errors() -> None:
    with pytest.raises(S.UsageError, match="no MUTANTS"):
        S.load(["tests.wrong_area"])
    with pytest.raises(S.UsageError, match="no mutant named Nope"):
        S.load(["tests.wrong_sources"], ["NoValve,Nope"])


# --------------------------------------------------------------------------
# One real run
# --------------------------------------------------------------------------


def test_a_real_run_catches_one_mutant_and_reports_the_one_that_escapes(tmp_path: Path) -> None:
    """tests/strength_mutants.py: SizeCountsKeys (caught, MB-10) and Conforms (breaks nothing)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONFORMANCE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out_json = tmp_path / "strength.json"

    def corpus() -> list[Path]:
        return sorted((REPO / "conformance" / "corpus").rglob("*"))
    before = corpus()
    proc = subprocess.run([sys.executable, "-m", "conformance", "strength", "tests.strength_mutants",
                           "--no-shrink", "--json", str(out_json)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "mini_batch SizeCountsKeys: caught by test_processing_time_bundles after " in out, out
    assert "mini_batch Conforms: ESCAPED" in out, out
    assert "mini_batch  MB-10  1/2" in out, out
    assert "catch rate: 1/2 mutants caught (50%)" in out, out
    data = json.loads(out_json.read_text())
    caught = data["mutants"][0]
    assert (caught["status"], caught["by"]) == ("caught", "test_processing_time_bundles")
    assert caught["rule_verdict"] == "failed"
    assert caught["found_after"] > 0 and caught["steps"] > 0 and not caught["shrunk"]
    assert data["mutants"][1]["status"] == "escaped" and data["mutants"][1]["passed"] > 0
    assert corpus() == before  # its counterexamples went to a corpus of its own
