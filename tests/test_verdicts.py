"""Per-rule verdicts (conformance/verdicts.py) from hand-made property results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flink_semantics.conformance import verdicts as V
from flink_semantics.spec.rules import Rule

RULES = {r.id: r for r in (
    Rule("SCH-1", "t", "MUST", "x", "schedules.md"),
    Rule("AIO-1", "t", "MUST", "x", "async-io.md"),
    Rule("AIO-2", "t", "MUST", "x", "async-io.md"),
    Rule("AIO-3", "t", "SHOULD", "x", "async-io.md"),
    Rule("AIO-4", "t", "MUST", "x", "async-io.md", untested="no step for it"),
    Rule("AIO-5", "t", "MAY", "x", "async-io.md"),
    Rule("AIO-6", "t", "MUST", "x", "async-io.md"),
)}


def by_id(results: list[V.ItemResult], expected: dict[str, str] | None = None) -> dict[str, V.Verdict]:
    return {v.id: v for v in V.verdicts(RULES, results, ["async_io"], expected or {})}


def test_each_verdict() -> None:
    results = [
        V.ItemResult("p1", ["SCH-1", "AIO-1", "AIO-2"], V.PASSED, schedules=40),
        V.ItemResult("p2", ["AIO-1", "AIO-3"], V.FAILED, 3, blamed=["AIO-3"], reproducer="python -m x"),
        V.ItemResult("p3", ["AIO-2"], V.PASSED, schedules=2),
        V.ItemResult("p4", ["AIO-5"], V.UNSUPPORTED, reason="async_io.status: not declared"),
    ]
    v = by_id(results)
    assert (v["SCH-1"].verdict, v["SCH-1"].area, v["SCH-1"].schedules) == (V.PASSED, "schedules", 40)
    # p2 stopped on AIO-3 after 3 schedules: AIO-1 was shown on those and on p1's 40, not searched in full
    assert (v["AIO-1"].verdict, v["AIO-1"].schedules) == (V.INCONCLUSIVE, 43)
    assert v["AIO-1"].reason == ("p2 stopped on AIO-3 after 3 schedules; 40 schedules of its other "
                                 "properties passed")
    assert v["AIO-2"].schedules == 42
    assert (v["AIO-3"].verdict, v["AIO-3"].reproducer) == (V.FAILED, "python -m x")
    assert (v["AIO-4"].verdict, v["AIO-4"].reason) == (V.UNTESTED, "no step for it")
    assert (v["AIO-5"].verdict, v["AIO-5"].reason) == (V.UNSUPPORTED, "async_io.status: not declared")
    assert v["AIO-6"].verdict == V.NOT_RUN
    assert list(v) == ["SCH-1", "AIO-1", "AIO-2", "AIO-3", "AIO-4", "AIO-5", "AIO-6"]


def test_a_rule_checked_only_without_the_adapter_is_suite_only() -> None:
    """A property checking the suite's own validation (the adapter never called) passes its rules as
    `suite only`, apart from `passed`; with an adapter property beside it, the rule is `passed` on
    the adapter's schedules alone."""
    suite = V.ItemResult("malformed", ["SCH-1", "AIO-1"], V.PASSED, schedules=30, adapter=False)
    v = by_id([suite, V.ItemResult("p", ["AIO-1"], V.PASSED, schedules=7)])
    assert (v["SCH-1"].verdict, v["SCH-1"].schedules) == (V.SUITE_ONLY, 30)
    assert "without the adapter" in (v["SCH-1"].reason or "")
    assert (v["AIO-1"].verdict, v["AIO-1"].schedules) == (V.PASSED, 7)
    v = by_id([suite, V.ItemResult("p", ["AIO-1"], V.UNSUPPORTED, reason="no timers")])
    assert (v["AIO-1"].verdict, v["AIO-1"].reason) == (V.UNSUPPORTED, "no timers")


def test_a_property_stopped_on_another_rule_leaves_its_rules_inconclusive() -> None:
    """KG-15 'passed, 2 schedules' after its property stopped on KG-16 (issue 32): inconclusive, with
    the schedules seen when it stopped; a corpus case failing on another rule does not count."""
    stopped = V.ItemResult("t::test_restore", ["AIO-1", "AIO-2"], V.FAILED, 80, blamed=["AIO-2"],
                           reproducer="r", found_after=12)
    v = by_id([stopped, V.ItemResult("t::test_example", ["AIO-1"], V.PASSED, schedules=2)])
    assert (v["AIO-1"].verdict, v["AIO-1"].schedules) == (V.INCONCLUSIVE, 14)
    assert v["AIO-1"].reason == ("test_restore stopped on AIO-2 after 12 schedules; 2 schedules of its "
                                 "other properties passed")
    assert v["AIO-2"].verdict == V.FAILED
    case = V.ItemResult("case", ["AIO-1", "AIO-2"], V.FAILED, 1, blamed=["AIO-2"], replay=True)
    v = by_id([case, V.ItemResult("t::p", ["AIO-1"], V.PASSED, schedules=50)])
    assert (v["AIO-1"].verdict, v["AIO-1"].schedules) == (V.PASSED, 50)


def test_inconclusive_expected_and_stale() -> None:
    results = [V.ItemResult("p", ["AIO-1", "AIO-2"], V.XFAIL, blamed=["AIO-1"], reproducer="r"),
               V.ItemResult("q", ["AIO-6"], V.PASSED, schedules=5)]
    v = by_id(results, {"AIO-1": "known bug", "AIO-6": "was broken"})
    assert (v["AIO-1"].verdict, v["AIO-1"].reason) == (V.XFAIL, "known bug")
    assert v["AIO-2"].verdict == V.INCONCLUSIVE and "AIO-1" in (v["AIO-2"].reason or "")
    assert v["AIO-6"].verdict == V.STALE


def test_corpus_cases_alone_do_not_pass_a_rule_whose_properties_are_unsupported() -> None:
    """A corpus case names every rule of the property that found it: passing it shows nothing of a
    rule whose own properties the adapter cannot run (the rule stays unsupported, with their reason)."""
    results = [V.ItemResult("case", ["AIO-1", "AIO-2"], V.PASSED, schedules=1, replay=True),
               V.ItemResult("p", ["AIO-1"], V.UNSUPPORTED, reason="async_io.timeout: not declared"),
               V.ItemResult("q", ["AIO-2"], V.PASSED, schedules=9)]
    v = by_id(results)
    assert (v["AIO-1"].verdict, v["AIO-1"].reason) == (V.UNSUPPORTED, "async_io.timeout: not declared")
    assert (v["AIO-2"].verdict, v["AIO-2"].schedules) == (V.PASSED, 10)  # its property ran: the case counts
    only_cases = by_id([V.ItemResult("case", ["AIO-6"], V.PASSED, schedules=1, replay=True)])
    assert only_cases["AIO-6"].verdict == V.PASSED  # no property of its own was unsupported
    other = by_id([V.ItemResult("case", ["AIO-1", "AIO-2"], V.XFAIL, blamed=["AIO-2"], replay=True),
                   V.ItemResult("p", ["AIO-1"], V.UNSUPPORTED, reason="no timers")])
    assert (other["AIO-1"].verdict, other["AIO-1"].reason) == (V.UNSUPPORTED, "no timers")  # not inconclusive
    on_it = by_id([V.ItemResult("case", ["AIO-1"], V.FAILED, blamed=["AIO-1"], reproducer="r", replay=True),
                   V.ItemResult("p", ["AIO-1"], V.UNSUPPORTED, reason="no timers")])
    assert on_it["AIO-1"].verdict == V.FAILED  # a case that fails on the rule still says so


def test_levels_and_strict() -> None:
    assert V.excused(["AIO-3"], RULES, {}, strict=False) is not None  # SHOULD
    assert V.excused(["AIO-5", "AIO-3"], RULES, {}, strict=False) is not None  # MAY and SHOULD
    assert V.excused(["AIO-3", "AIO-1"], RULES, {}, strict=False) is None  # a MUST rule among them
    assert V.excused(["AIO-1"], RULES, {"AIO-1": "known"}, strict=False) is not None
    assert V.excused(["AIO-3"], RULES, {}, strict=True) is None
    vs = [V.Verdict("AIO-3", "async_io", "SHOULD", V.FAILED), V.Verdict("AIO-6", "async_io", "MUST", V.STALE)]
    assert V.run_fails(vs, strict=False) == []
    assert [v.id for v in V.run_fails(vs, strict=True)] == ["AIO-3", "AIO-6"]
    assert V.run_fails([V.Verdict("AIO-1", "async_io", "MUST", V.FAILED)], strict=False)


def test_report_json_and_table() -> None:
    vs = V.verdicts(RULES, [V.ItemResult("p", ["AIO-1"], V.PASSED, schedules=7)], ["async_io"], {})
    data = json.loads(json.dumps(V.report_json("my-engine", ["async_io"], vs)))
    assert data["adapter"] == "my-engine" and data["areas"] == ["async_io"]
    assert data["rules"][1] == {"id": "AIO-1", "area": "async_io", "level": "MUST", "verdict": "passed",
                                "schedules": 7, "reason": None, "reproducer": None}
    lines = V.table(vs)
    assert lines[2].split() == ["AIO-1", "MUST", "passed", "7", "schedules"]
    assert lines[-1] == "5 not run, 1 passed, 1 untested"


def test_expected_failures_are_validated(tmp_path: Path) -> None:
    assert V.load_expected_failures({"AIO-1": " known "}, RULES) == {"AIO-1": "known"}
    f = tmp_path / "x.json"
    f.write_text('{"AIO-6": "a reason"}')
    assert V.load_expected_failures(str(f), RULES) == {"AIO-6": "a reason"}
    for bad, message in (({"AIO-99": "r"}, "not a rule"), ({"AIO-1": ""}, "needs a reason"),
                         (["AIO-1"], "must map"), (str(tmp_path / "missing.json"), "not a JSON object")):
        with pytest.raises(V.ExpectedFailuresError, match=message):
            V.load_expected_failures(bad, RULES)


def test_the_reason_and_reproducer_of_a_rule_do_not_depend_on_the_order_of_results() -> None:
    """Under xdist results arrive in any order: the reason and the reproducer shown are the first
    property's by node ID."""
    results = [V.ItemResult("conformance/test_b.py::p", ["AIO-5"], V.UNSUPPORTED, reason="second"),
               V.ItemResult("conformance/test_a.py::p", ["AIO-5"], V.UNSUPPORTED, reason="first")]
    assert by_id(results)["AIO-5"].reason == by_id(results[::-1])["AIO-5"].reason == "first"
    failures = [V.ItemResult("conformance/test_b.py::p", ["AIO-6"], V.FAILED, 1, ["AIO-6"], "b"),
                V.ItemResult("conformance/test_a.py::p", ["AIO-6"], V.FAILED, 1, ["AIO-6"], "a")]
    assert by_id(failures)["AIO-6"].reproducer == by_id(failures[::-1])["AIO-6"].reproducer == "a"


def test_a_rule_the_counterexample_may_break_but_does_not_single_out_is_inconclusive() -> None:
    """A failure shown to break AIO-2, which may concern AIO-1 too (the area cannot tell): AIO-2
    failed, AIO-1 inconclusive with that reason, never failed."""
    results = [V.ItemResult("t::p", ["AIO-1", "AIO-2"], V.FAILED, 30, blamed=["AIO-2"], reproducer="r",
                            found_after=4, possible=["AIO-1"])]
    v = by_id(results)
    assert v["AIO-2"].verdict == V.FAILED
    assert v["AIO-1"].verdict == V.INCONCLUSIVE
    assert v["AIO-1"].reason == ("p failed on AIO-2; its counterexample may break this rule too, but the "
                                 "difference does not single it out")


def test_a_listed_rule_stopped_on_other_expected_failures_is_an_expected_failure() -> None:
    """A rule the adapter lists, whose property stopped on another listed rule, fails as expected with
    its own reason; unlisted, or stopped on a failure that is not expected, it stays inconclusive."""
    results = [V.ItemResult("ex", ["AIO-2"], V.XFAIL, blamed=["AIO-1"], reproducer="r"),
               V.ItemResult("q", ["AIO-2"], V.PASSED, schedules=5)]
    v = by_id(results, {"AIO-1": "known", "AIO-2": "its example needs AIO-1"})
    assert (v["AIO-2"].verdict, v["AIO-2"].reason) == (V.XFAIL, "its example needs AIO-1")
    assert by_id(results, {"AIO-1": "known"})["AIO-2"].verdict == V.INCONCLUSIVE  # not listed
    failing = [V.ItemResult("ex", ["AIO-2"], V.FAILED, blamed=["AIO-1"], reproducer="r")]
    assert by_id(failing, {"AIO-2": "its example needs AIO-1"})["AIO-2"].verdict == V.INCONCLUSIVE
