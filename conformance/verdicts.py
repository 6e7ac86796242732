"""Per-rule verdicts: what a conformance run showed, rule by rule.  Names no area.

Every property and every spec example names the rules it checks (`@pytest.mark.rule`).  After a
run, each rule of the areas run (and of the schedule vocabulary) gets one verdict:

* `passed`: a property naming it passed through the adapter, with how many schedules those
  properties ran;
* `suite only`: the properties naming it passed but never call the adapter (they check the suite's
  own validation: malformed schedules refused by the reference), counted apart from `passed`;
* `failed`: a property failed on it (the failure report names it), with a one-line reproducer;
* `expected failure`: it failed and the adapter lists it as an expected failure, with the reason;
* `stale`: the adapter lists it as an expected failure, but it passed;
* `unsupported`: every property naming it needs a capability the adapter lacks (the reason); corpus
  cases naming it count only when they fail on it (a case names all the rules of the property that
  found it);
* `untested`: the spec marks it Untested and no property names it (the spec's reason);
* `inconclusive`: a property naming it stopped on another rule's failure (its search for a
  counterexample of this rule ended there), with the schedules it had checked then and those of
  the properties naming it that passed;
* `not run`: no property naming it ran (deselected, or the run stopped early).

Levels matter: a failing SHOULD or MAY rule, or an expected failure, fails the run only with
`--strict` (and a stale expected failure too).  The same verdicts are written as JSON by
`--conformance-report PATH` (`report_json`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flink_semantics.spec.area import area_of_rule
from flink_semantics.spec.rules import Rule

PASSED, FAILED, XFAIL, STALE = "passed", "failed", "expected failure", "stale"
UNSUPPORTED, UNTESTED, INCONCLUSIVE, NOT_RUN = "unsupported", "untested", "inconclusive", "not run"
SUITE_ONLY = "suite only"
VOCABULARY = "schedules"  # the `area` of the rules of spec/schedules.md


@dataclass
class ItemResult:
    """What one property (or one case of a parametrized one) showed."""

    nodeid: str
    rules: list[str]
    outcome: str  # PASSED, FAILED, UNSUPPORTED or XFAIL (a failure the level or the adapter excuses)
    schedules: int = 0
    blamed: list[str] = field(default_factory=list)  # a failure: the rules its report shows broken
    reproducer: str | None = None
    reason: str | None = None  # unsupported: the adapter's reason
    found_after: int | None = None  # a failure: schedules the property checked when it met the first one
    counterexample_steps: int | None = None  # a divergence: the steps of the reported schedule
    replay: bool = False  # a corpus case: it names the rules of the property that found it
    adapter: bool = True  # False: the property checks the suite's own validation, not the adapter
    possible: list[str] = field(default_factory=list)  # a failure: rules it may break too, not singled out


@dataclass
class Verdict:
    id: str
    area: str
    level: str
    verdict: str
    schedules: int = 0
    reason: str | None = None
    reproducer: str | None = None


def rule_area(rule_id: str) -> str:
    return area_of_rule(rule_id) or VOCABULARY


def _number(rule_id: str) -> tuple[str, int]:
    prefix, _, n = rule_id.rpartition("-")
    return prefix, int(n) if n.isdigit() else 0


def verdicts(rules: Mapping[str, Rule], results: Iterable[ItemResult], areas: Sequence[str],
             expected_failures: Mapping[str, str]) -> list[Verdict]:
    """One verdict per rule of `areas` and of the vocabulary, in area and rule order."""
    by_rule: dict[str, list[ItemResult]] = {}
    for result in results:
        for rule_id in result.rules:
            by_rule.setdefault(rule_id, []).append(result)
    chosen = [r for r in rules.values() if rule_area(r.id) in (*areas, VOCABULARY)]
    chosen.sort(key=lambda r: (r.file != "schedules.md", r.file, _number(r.id)))
    out = []
    for rule in chosen:
        # By node ID: the reason and the reproducer shown are the same in whatever order the properties
        # ran and reported (xdist).
        items = sorted(by_rule.get(rule.id, []), key=lambda i: i.nodeid)
        v = Verdict(rule.id, rule_area(rule.id), rule.level, NOT_RUN)
        failed = [i for i in items if i.outcome in (FAILED, XFAIL) and rule.id in i.blamed]
        passed = [i for i in items if i.outcome == PASSED]
        unsupported = [i for i in items if i.outcome == UNSUPPORTED]
        own = [i for i in items if not i.replay]
        if not failed and own and all(i.outcome == UNSUPPORTED for i in own):
            # A corpus case names every rule of the property that found it: passing it, or failing
            # it on other rules, shows nothing of a rule whose own properties the adapter cannot run.
            items, passed, unsupported = own, [], own
        # A property that stopped on another rule's failure (not a corpus case, which names every
        # rule of the property that found it) showed this rule only on the schedules before it.
        stopped = [i for i in items if i.outcome in (FAILED, XFAIL) and rule.id not in i.blamed
                   and not i.replay]
        suite_only = [i for i in passed if not i.adapter]
        passed = [i for i in passed if i.adapter]
        if failed:
            v.verdict, v.reproducer = FAILED, failed[0].reproducer
            v.reason = f"{len(failed)} of {len(items)} properties naming it failed on it"
        elif any(rule.id in i.possible for i in stopped):
            first = next(i for i in stopped if rule.id in i.possible)
            name = first.nodeid.rsplit("::", 1)[-1]
            v.verdict, v.schedules = INCONCLUSIVE, sum(i.schedules for i in passed)
            v.reason = (f"{name} failed on {', '.join(first.blamed)}; its counterexample may break this "
                        "rule too, but the difference does not single it out")
        elif stopped:
            first = stopped[0]
            seen = first.found_after if first.found_after is not None else first.schedules
            others = sum(i.schedules for i in passed)
            v.verdict, v.schedules = INCONCLUSIVE, seen + others
            name, on = first.nodeid.rsplit("::", 1)[-1], ", ".join(first.blamed) or "an error"
            v.reason = (f"{name} stopped on {on} after {seen} schedules"
                        + (f"; {others} schedules of its other properties passed" if passed else ""))
        elif passed:
            v.verdict, v.schedules = PASSED, sum(i.schedules for i in passed)
        elif unsupported and len(unsupported) + len(suite_only) == len(items):
            # the adapter could run none of its properties (a suite-only check beside them says
            # nothing of the adapter)
            v.verdict, v.reason = UNSUPPORTED, unsupported[0].reason
        elif suite_only:
            v.verdict, v.schedules = SUITE_ONLY, sum(i.schedules for i in suite_only)
            v.reason = "checked by the suite without the adapter (the reference refuses malformed schedules)"
        elif not items and rule.untested:
            v.verdict, v.reason = UNTESTED, rule.untested
        if rule.id in expected_failures:
            # A listed rule whose properties stopped only on the adapter's other expected failures
            # (an example that needs what the adapter cannot do) fails as expected, for the listed reason;
            # one stopped on a failure that is not expected stays inconclusive.
            on_known = bool(stopped) and all(i.outcome == XFAIL for i in stopped)
            if v.verdict == FAILED or (v.verdict == INCONCLUSIVE and on_known):
                v.verdict, v.reason = XFAIL, expected_failures[rule.id]
            elif v.verdict == PASSED:
                v.verdict = STALE
                v.reason = stale_reason(expected_failures[rule.id])
        out.append(v)
    return out


_STALE = ("listed as an expected failure (", "), but it passed")


def stale_reason(listed: str) -> str:
    """A stale rule's reason, holding the reason it was listed with (`listed_reason` reads it back)."""
    return f"{_STALE[0]}{listed}{_STALE[1]}"


def listed_reason(stale: str) -> str | None:
    """The reason a stale rule was listed with, read from its `stale_reason`; None if it holds none."""
    if not (stale.startswith(_STALE[0]) and stale.endswith(_STALE[1])):
        return None
    return stale[len(_STALE[0]):-len(_STALE[1])]


def excused(blamed: Sequence[str], rules: Mapping[str, Rule], expected_failures: Mapping[str, str],
            strict: bool) -> str | None:
    """Why a failure on these rules does not fail the run, or None if it does.

    Without --strict, a failure whose rules are all SHOULD or MAY rules, or expected failures of
    the adapter, is reported but excused; with --strict, nothing is.
    """
    if strict or not blamed:
        return None
    reasons = []
    for r in blamed:
        if r in expected_failures:
            reasons.append(f"{r} is an expected failure: {expected_failures[r]}")
        elif r in rules and rules[r].level != "MUST":
            reasons.append(f"{r} is a {rules[r].level} rule")
        else:
            return None
    return "; ".join(reasons) + " (fails the run only with --strict)"


def run_fails(vs: Iterable[Verdict], strict: bool) -> list[Verdict]:
    """The verdicts that fail the run: failed MUST rules, and with --strict every failed, expected
    failure or stale rule."""
    bad = []
    for v in vs:
        if v.verdict == FAILED and (strict or v.level == "MUST"):
            bad.append(v)
        elif strict and v.verdict in (XFAIL, STALE):
            bad.append(v)
    return bad


def table(vs: Sequence[Verdict], width: int = 90) -> list[str]:
    """The terminal table: rule, level, verdict, detail (a reason cut to `width`)."""
    lines = [f"{'rule':<9} {'level':<6} {'verdict':<16} detail"]
    for v in vs:
        if v.verdict in (PASSED, SUITE_ONLY):
            own = " (the suite's own check)" if v.verdict == SUITE_ONLY else ""
            detail = f"{v.schedules} schedules{own}"
        elif v.verdict == FAILED:
            detail = f"reproduce: {v.reproducer}" if v.reproducer else (v.reason or "")
        else:
            detail = v.reason or ""
            detail = detail if len(detail) <= width else detail[:width - 1] + "…"  # the JSON has it all
        lines.append(f"{v.id:<9} {v.level:<6} {v.verdict:<16} {detail}".rstrip())
    counts: dict[str, int] = {}
    for v in vs:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    lines.append(", ".join(f"{n} {k}" for k, n in counts.items()))
    return lines


def report_json(adapter: str, areas: Sequence[str], vs: Sequence[Verdict],
                results: Iterable[ItemResult] = (), run: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report (docs/running-the-suite.md, "The report"): {"adapter", "areas", "run", "rules": [...],
    "properties": [...]}: the run's header (adapter version, completion order, profile, seed,
    capabilities; empty under xdist's controller), a verdict per rule, and what each property (each
    case of a parametrized one) showed."""
    return {"adapter": adapter, "areas": list(areas), "run": dict(run or {}),
            "rules": [asdict(v) for v in vs], "properties": [asdict(r) for r in results]}


_RULE_ID = re.compile(r"^[A-Z]+-\d+$")


class ExpectedFailuresError(ValueError):
    pass


def load_expected_failures(source: Any, rules: Mapping[str, Rule]) -> dict[str, str]:
    """An adapter's expected failures: a mapping rule ID -> reason, or the path of a JSON file
    holding one.  Unknown rule IDs and empty reasons are errors (named)."""
    if source is None:
        return {}
    where = "the adapter's expected_failures"
    if isinstance(source, (str, Path)):
        where = str(source)
        try:
            source = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ExpectedFailuresError(f"{where}: not a JSON object rule ID -> reason: {e}") from None
    if not isinstance(source, Mapping):
        raise ExpectedFailuresError(f"{where}: must map rule IDs to reasons")
    out = {}
    for rule, reason in source.items():
        if not (isinstance(rule, str) and _RULE_ID.match(rule) and rule in rules):
            raise ExpectedFailuresError(f"{where}: {rule!r} is not a rule of spec/")
        if not (isinstance(reason, str) and reason.strip()):
            raise ExpectedFailuresError(f"{where}: {rule} needs a reason")
        out[rule] = reason.strip()
    return out
