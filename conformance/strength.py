"""The suite's strength: run the deliberately wrong adapters (mutants) and see which the suite catches.

    python -m flink_semantics.conformance strength MODULE ... [-n JOBS]
                                   [--shrink catcher|all|no | --no-shrink]
                                   [--only NAME,...] [--profile NAME] [--timeout SECONDS]
                                   [--json OUT] [--markdown]

Each MODULE (importable, e.g. tests.wrong_sources) lists its mutants in `MUTANTS`: `Mutant(name,
prop, rule)` says that the adapter `MODULE:name` breaks `rule` and that the property `prop` must
catch it, its failure report naming `rule`.  A mutant's area is `Mutant.area`, else the adapter's
class attribute `area`.

For each mutant the command runs its area's whole suite (`test_<area>.py` of the installed
`conformance` package, every property of the area) in a subprocess, JOBS at a time (default 2),
with an empty corpus of its own (`--corpus`: what the generators find, nothing replayed, nothing
saved in the package's corpus) and `--conformance-report`, and reads the report: which properties
failed, the rules each report names, the schedules each property had checked when it met its first
failing one (`found_after`), and the steps of its counterexample.

Shrinking (--shrink): `catcher`, the default, runs the suite without shrinking, then the property
that caught the mutant once more, alone, with shrinking: the counterexample's size is the shrunk one
(schedules to the first failure do not depend on shrinking), and the mutant's line says when the
shrunk report no longer names the rule (or names it when the suite run's did not).  `all` shrinks
every failing property in the suite run itself: the same figures for the catcher at a much higher
cost, since most mutants fail several properties (one async I/O mutant took 10 minutes so on 2
cores, one of another area nearly 2).  `no` (--no-shrink) never shrinks: sizes are those of the failing
schedules as drawn.  With the default the 34 mutants of tests/wrong_*.py take about 13 minutes on 2
cores (docs/running-the-suite.md, "The suite's strength"); the shrinking runs are a few seconds to
a minute each.

Each mutant ends as one of (judged on the rules the suite run's reports name):
  caught               the expected property failed and its report names the rule;
  caught elsewhere     another property's report names the rule, the expected property's does not
                       (it lost its power, or the registry names the wrong property): counted as
                       caught, shown distinctly;
  wrong rule           properties failed, but no report names the rule: the verdicts would send
                       a developer to the wrong rule.  A weaker finding, shown distinctly; it fails;
  escaped              every property passed (or was unsupported): a bug in the suite;
  error                the run wrote no report (the adapter could not be loaded, hung, timed out).
The mutant's line also says when the verdict table (conformance/verdicts.py) does not give the
broken rule `failed`: a report may name a rule its property does not check, which the verdicts do
not count (the rule is then `passed` or `inconclusive` on the properties that check it).

A mutant is "caught" for the catch rate when any property failed (the first three).  Progress is
printed as mutants finish, then a table per area and one per rule (the rule each mutant breaks):
mutants caught of all, the property that caught each, the median schedules checked before the
first failing one, the median steps of the counterexample; and the catch rate.  --markdown prints the
tables as Markdown instead (for docs/running-the-suite.md); --json OUT writes everything, every
failing property of every mutant included.

Exit status: 0 when every mutant is caught with its rule named (caught, or caught elsewhere); 1 when
a mutant escapes, is caught on a wrong rule only, or its run fails; 2 for a usage error (a module
without MUTANTS, a name it does not define, an unknown area).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flink_semantics.conformance.verdicts import FAILED, UNSUPPORTED, XFAIL
from flink_semantics.spec.area import areas

SUITE_DIR = Path(__file__).resolve().parent  # the installed conformance package: test_<area>.py
SHRINK_MODES = ("catcher", "all", "no")

CAUGHT, ELSEWHERE, WRONG_RULE, ESCAPED = "caught", "caught elsewhere", "wrong rule", "escaped"
ERROR = "run failed"
STATUSES = (CAUGHT, ELSEWHERE, WRONG_RULE, ESCAPED, ERROR)
DETECTED = (CAUGHT, ELSEWHERE, WRONG_RULE)  # some property failed: counted in the catch rate
NAMED = (CAUGHT, ELSEWHERE)  # ... and a report names the broken rule: the exit status is 0


@dataclass(frozen=True)
class Mutant:
    """A deliberately wrong adapter: `name` in its module breaks `rule`; `prop` must catch it."""

    name: str
    prop: str  # the property (test function) that must fail
    rule: str  # a rule its failure report must name
    area: str | None = None  # the suite it is run against; default: the adapter's `area` attribute


@dataclass(frozen=True)
class Entry:
    """A mutant of a module, with the area it is run against."""

    module: str
    mutant: Mutant
    area: str

    @property
    def adapter(self) -> str:
        return f"{self.module}:{self.mutant.name}"


@dataclass
class Catch:
    """A property (or one case of a parametrized one) that failed on a mutant."""

    prop: str  # as in the node id: test_x, or test_x[case]
    outcome: str  # "failed", or "expected failure" (a SHOULD or MAY rule: fails only with --strict)
    blamed: list[str]
    found_after: int | None  # schedules it had checked when it met the first failing one
    steps: int | None  # steps of its counterexample
    shrunk: bool = False  # `steps` is the shrunk counterexample's (a shrinking run of its own)
    shrunk_blamed: list[str] | None = None  # the rules the shrunk report names, when shrunk on its own

    @property
    def base(self) -> str:
        return self.prop.split("[", 1)[0]


@dataclass
class Result:
    module: str
    name: str
    area: str
    prop: str
    rule: str
    status: str = ESCAPED
    by: str | None = None  # the property that caught it (see `primary`)
    found_after: int | None = None
    steps: int | None = None
    blamed: list[str] = field(default_factory=list)  # the rules the catching property's report names
    shrunk: bool = False
    shrunk_blamed: list[str] | None = None  # ... and its shrunk report, in a shrinking run of its own
    expected: str | None = None  # the expected property's outcome, and the rules it named if it failed
    rule_verdict: str | None = None  # the broken rule's verdict in the suite run
    failed_rules: list[str] = field(default_factory=list)  # every rule the verdict table gives 'failed'
    catches: list[Catch] = field(default_factory=list)
    passed: int = 0
    unsupported: int = 0
    seconds: float = 0.0
    shrink_seconds: float | None = None  # the shrinking run's time (with --shrink catcher)
    error: str | None = None
    shrink_error: str | None = None  # why the shrinking run gave no shrunk counterexample


class UsageError(Exception):
    pass


# --------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------


def load(modules: Sequence[str], only: Iterable[str] = ()) -> list[Entry]:
    """The mutants of these modules (`MUTANTS`), restricted to the names in `only` if any."""
    known = areas()
    entries = []
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise UsageError(f"cannot import {module_name}: {e}") from None
        mutants = getattr(module, "MUTANTS", None)
        if not isinstance(mutants, (list, tuple)) or not all(isinstance(m, Mutant) for m in mutants):
            raise UsageError(f"{module_name} has no MUTANTS list of "
                             "flink_semantics.conformance.strength.Mutant")
        for m in mutants:
            if not hasattr(module, m.name):
                raise UsageError(f"{module_name} lists mutant {m.name!r} but does not define it")
            area = m.area or getattr(getattr(module, m.name), "area", None)
            if area not in known:
                raise UsageError(f"{module_name}:{m.name}: area {area!r} is not one of {', '.join(known)} "
                                 "(set Mutant.area or the adapter's `area`)")
            entries.append(Entry(module_name, m, str(area)))
    wanted = {n for names in only for n in names.split(",") if n}
    if wanted:
        unknown = wanted - {e.mutant.name for e in entries} - {e.adapter for e in entries}
        if unknown:
            raise UsageError(f"--only: no mutant named {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e.mutant.name in wanted or e.adapter in wanted]
    return entries


# --------------------------------------------------------------------------
# Judging one report
# --------------------------------------------------------------------------


def catches(report: dict[str, Any]) -> list[Catch]:
    """The properties of a report that failed (failed, or failed on a SHOULD/MAY rule only)."""
    out = []
    for p in report.get("properties", []):
        if p.get("outcome") in (FAILED, XFAIL):
            out.append(Catch(str(p["nodeid"]).split("::")[-1], p["outcome"], list(p.get("blamed") or []),
                             p.get("found_after"), p.get("counterexample_steps")))
    return out


def primary(catches_: Sequence[Catch], prop: str, rule: str) -> Catch | None:
    """The catch a mutant is credited to: the expected property naming the rule; else the property
    naming the rule that failed soonest; else the property that failed soonest."""
    def soonest(cs: Sequence[Catch]) -> Catch:
        return min(cs, key=lambda c: c.found_after if c.found_after is not None else 1 << 62)
    for pool in ([c for c in catches_ if c.base == prop and rule in c.blamed],
                 [c for c in catches_ if rule in c.blamed], list(catches_)):
        if pool:
            return soonest(pool)
    return None


def judge(entry: Entry, report: dict[str, Any] | None, shrunk: dict[str, Any] | None = None,
          seconds: float = 0.0, error: str | None = None) -> Result:
    """A mutant's result from its suite run's report, and from the report of the catching property's
    shrinking run if there was one (its counterexample's size replaces the first's; the rules its
    report names are kept apart: the status is judged on the suite run's)."""
    m = entry.mutant
    result = Result(entry.module, m.name, entry.area, m.prop, m.rule, seconds=round(seconds, 1))
    if report is None:
        result.status, result.error = ERROR, error or "the run wrote no report"
        return result
    props = report.get("properties", [])
    result.passed = sum(p.get("outcome") == "passed" for p in props)
    result.unsupported = sum(p.get("outcome") == UNSUPPORTED for p in props)
    result.rule_verdict = next((r.get("verdict") for r in report.get("rules", []) if r.get("id") == m.rule),
                               None)
    result.failed_rules = sorted((str(r.get("id")) for r in report.get("rules", [])
                                  if r.get("verdict") in (FAILED, XFAIL)), key=_rule_order)
    result.catches = catches(report)
    if shrunk is not None:
        again = {c.prop: c for c in catches(shrunk)}
        for c in result.catches:
            if c.prop in again:
                c.steps, c.shrunk, c.shrunk_blamed = again[c.prop].steps, True, again[c.prop].blamed
    mine = [p for p in props if str(p.get("nodeid")).split("::")[-1].split("[", 1)[0] == m.prop]
    if mine:
        named = sorted({b for p in mine for b in p.get("blamed") or []}, key=_rule_order)
        outcomes = sorted({str(p.get("outcome")) for p in mine})
        result.expected = "/".join(outcomes) + (f" naming {', '.join(named)}" if named else "")
    best = primary(result.catches, m.prop, m.rule)
    if best is None:
        result.status = ESCAPED
        return result
    result.by, result.found_after, result.steps = best.prop, best.found_after, best.steps
    result.blamed = best.blamed
    result.shrunk, result.shrunk_blamed = best.shrunk, best.shrunk_blamed
    if best.base == m.prop and m.rule in best.blamed:
        result.status = CAUGHT
    elif m.rule in best.blamed:
        result.status = ELSEWHERE
    else:
        result.status = WRONG_RULE
    return result


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


def pytest_command(entry: Entry, report: Path, corpus: Path, shrink: bool, target: str | None = None,
                   profile: str | None = None) -> list[str]:
    """The suite run of one mutant: its area's whole suite, or one property of it (`target`)."""
    suite = str(SUITE_DIR / f"test_{entry.area}.py")
    command = [sys.executable, "-m", "pytest", f"{suite}::{target}" if target else suite,
               "--adapter", entry.adapter, "--areas", entry.area, "-p", "no:cacheprovider", "-q",
               "--conformance-report", str(report), "--conformance-shrink", "yes" if shrink else "no",
               # An empty corpus of the run's own: nothing replayed, so the generators find what is
               # measured, and nothing saved into the package's corpus.
               "--corpus", str(corpus)]
    if profile:
        command += ["--conformance-profile", profile]
    return command


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("CONFORMANCE_ADAPTER", "CONFORMANCE_PROFILE", "CONFORMANCE_CORPUS"):
        env.pop(name, None)
    return env


def _run(command: list[str], report: Path, timeout: float) -> tuple[dict[str, Any] | None, str | None]:
    """Run one suite; its report, or None and why not."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_environment())
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:g} s"
    try:
        return json.loads(report.read_text(encoding="utf-8")), None
    except (OSError, json.JSONDecodeError):
        tail = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()][-3:]
        return None, f"exit status {proc.returncode}, no report: " + " | ".join(tail)


def keep_counterexamples(found: Path, out: Path) -> None:
    """Copy the counterexamples a run saved (their JSON, not the pictures) into another corpus."""
    for path in sorted(found.glob("*/*.json")):
        target = out / path.parent.name / path.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def measure(entry: Entry, shrink: str, profile: str | None = None, timeout: float = 3600,
            corpus_out: Path | None = None) -> Result:
    """Run a mutant's area suite (then, with shrink `catcher`, its catching property with shrinking).
    With `corpus_out`, the (shrunk, when shrinking) counterexamples found are copied there."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="strength-") as tmp:
        work = Path(tmp)
        path = work / "report.json"
        report, error = _run(pytest_command(entry, path, work / "corpus", shrink == "all", profile=profile),
                             path, timeout)
        shrunk, shrink_error = None, None
        if report is not None and shrink == "catcher":
            best = primary(catches(report), entry.mutant.prop, entry.mutant.rule)
            if best is not None:
                again = work / "shrunk.json"
                shrink_started = time.monotonic()
                shrunk, shrink_error = _run(pytest_command(entry, again, work / "corpus-shrunk", True,
                                                           target=best.base, profile=profile), again, timeout)
                if shrunk is not None and best.prop not in {c.prop for c in catches(shrunk)}:
                    shrink_error = f"{best.prop} did not fail again when shrinking"
        result = judge(entry, report, shrunk, time.monotonic() - started, error)
        result.shrink_error = shrink_error
        if shrunk is not None:
            result.shrink_seconds = round(time.monotonic() - shrink_started, 1)
        if corpus_out is not None:
            keep_counterexamples(work / ("corpus-shrunk" if shrunk is not None else "corpus"), corpus_out)
        return result


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def _median(values: Iterable[int | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return statistics.median(vs) if vs else None


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def describe(r: Result) -> str:
    """One line: what became of a mutant."""
    head = f"{r.area} {r.name}: "
    if r.status == ERROR:
        return head + f"ERROR: {r.error}"
    if r.status == ESCAPED:
        return head + (f"ESCAPED: no property failed ({r.passed} passed, {r.unsupported} unsupported); "
                       f"it breaks {r.rule}, {r.prop} should catch it")
    plural = "" if r.steps == 1 else "s"
    timed = r.shrunk and r.shrink_seconds is not None
    shrink_time = f", shrunk in {_duration(r.shrink_seconds or 0)}" if timed else ""
    steps = (f" ({r.steps} step{plural}{'' if r.shrunk else ', unshrunk'}{shrink_time})"
             if r.steps is not None else "")
    after = f" after {r.found_after} schedules" if r.found_after is not None else ""
    others = len(r.catches) - 1
    also = f"; {others} other propert{'y' if others == 1 else 'ies'} failed too" if others > 0 else ""
    line = f"caught by {r.by}{after}{steps}{also}"
    if r.status == ELSEWHERE:
        line = f"caught elsewhere: by {r.by}, not by {r.prop} ({r.expected}){after}{steps}{also}"
    elif r.status == WRONG_RULE:
        named = sorted({b for c in r.catches for b in c.blamed}, key=_rule_order)
        line += (f"; WRONG RULE: no report names {r.rule} (they name {', '.join(named) or 'no rule'}; "
                 f"{r.prop}: {r.expected or 'not run'})")
    if r.shrunk_blamed is not None and (r.rule in r.blamed) != (r.rule in r.shrunk_blamed):
        line += (f"; shrunk, its report names {r.rule}" if r.rule in r.shrunk_blamed else
                 f"; shrunk, its report no longer names {r.rule} ({', '.join(r.shrunk_blamed) or 'no rule'})")
    if r.shrink_error:
        line += f"; not shrunk: {r.shrink_error}"
    if r.rule_verdict is not None and r.rule_verdict not in (FAILED, XFAIL):
        line += f"; the verdict table gives {r.rule} {r.rule_verdict!r}"
    blamed_too = [f for f in r.failed_rules if f != r.rule]
    if r.status in DETECTED and blamed_too:
        line += f"; blamed too: {', '.join(blamed_too)} (the verdict table fails rules the mutant follows)"
    return head + line


def exactly_blamed(r: Result) -> bool:
    """The verdict table fails the mutant's broken rule and no other (issue 32: blame the rule that
    broke, not every rule the failing property names)."""
    return r.failed_rules == [r.rule]


def _area_order(area: str) -> int:
    known = list(areas())
    return known.index(area) if area in known else len(known)


def _rule_order(rule: str) -> tuple[str, int]:
    prefix, _, n = rule.rpartition("-")
    return prefix, int(n) if n.isdigit() else 0


def summary(results: Sequence[Result]) -> dict[str, Any]:
    """Per area and per rule: mutants caught of all, who caught them, medians; and the totals."""
    def row(rs: Sequence[Result]) -> dict[str, Any]:
        detected = [r for r in rs if r.status in DETECTED]
        return {"mutants": len(rs), "caught": len(detected),
                "rule_named": sum(r.status in NAMED for r in rs),
                "verdict_failed": sum(r.rule_verdict in (FAILED, XFAIL) for r in rs),
                "exactly_blamed": sum(exactly_blamed(r) for r in rs),
                "median_schedules": _median(r.found_after for r in detected),
                "median_steps": _median(r.steps for r in detected),
                "by": [{"mutant": r.name, "outcome": r.status, "property": r.by} for r in rs],
                "not_caught": [r.name for r in rs if r.status not in NAMED]}
    by_area: dict[str, list[Result]] = {}
    by_rule: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        by_area.setdefault(r.area, []).append(r)
        by_rule.setdefault((r.area, r.rule), []).append(r)
    area_rows = [{"area": a, **row(rs)}
                 for a, rs in sorted(by_area.items(), key=lambda kv: _area_order(kv[0]))]
    rule_rows = [{"area": a, "rule": rule, **row(rs)}
                 for (a, rule), rs in sorted(by_rule.items(),
                                             key=lambda kv: (_area_order(kv[0][0]), _rule_order(kv[0][1])))]
    total = row(results)
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    rate = total["caught"] / total["mutants"] if results else 0.0
    return {"areas": area_rows, "rules": rule_rows, "total": total, "counts": counts, "catch_rate": rate}


def _mutant_cell(by: Sequence[dict[str, Any]]) -> str:
    parts = []
    for b in by:
        if b["outcome"] in (ESCAPED, ERROR):
            parts.append(f"{b['mutant']}: {b['outcome'].upper()}")
        else:
            mark = {ELSEWHERE: " (elsewhere)", WRONG_RULE: " (WRONG RULE)"}.get(b["outcome"], "")
            parts.append(f"{b['mutant']}: {b['property']}{mark}")
    return "; ".join(parts)


def rate_line(s: dict[str, Any]) -> str:
    t, c = s["total"], s["counts"]
    line = (f"catch rate: {t['caught']}/{t['mutants']} mutants caught ({100 * s['catch_rate']:.0f}%), "
            f"the broken rule named for {t['rule_named']} (its verdict 'failed' for {t['verdict_failed']}; "
            f"exactly it and no other rule failed for {t['exactly_blamed']}, "
            f"{100 * t['exactly_blamed'] / max(t['mutants'], 1):.0f}%); "
            f"{c[CAUGHT]} by the expected property, "
            f"{c[ELSEWHERE]} elsewhere, {c[WRONG_RULE]} on a wrong rule only, {c[ESCAPED]} escaped")
    return line + (f", {c[ERROR]} runs failed" if c[ERROR] else "")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return [line(header), line(["---"] * len(header)), *(line(r) for r in rows)]


def tables(s: dict[str, Any], markdown: bool = False) -> list[str]:
    """The per-area and per-rule tables, as text or as Markdown."""
    make: Callable[[Sequence[str], Sequence[Sequence[str]]], list[str]] = _md_table if markdown else _table
    area_header = ["area", "caught", "rule named", "median schedules", "median steps", "not caught"]
    area_rows = [[a["area"], f"{a['caught']}/{a['mutants']}", f"{a['rule_named']}/{a['mutants']}",
                  _fmt(a["median_schedules"]), _fmt(a["median_steps"]), ", ".join(a["not_caught"]) or "—"]
                 for a in s["areas"]]
    t = s["total"]
    area_rows.append(["all" if not markdown else "**all**", f"{t['caught']}/{t['mutants']}",
                      f"{t['rule_named']}/{t['mutants']}", _fmt(t["median_schedules"]),
                      _fmt(t["median_steps"]), ", ".join(t["not_caught"]) or "—"])
    rule_header = ["area", "rule", "caught", "median schedules", "median steps",
                   "mutant: the property that caught it"]
    rule_rows = [[r["area"], r["rule"], f"{r['caught']}/{r['mutants']}", _fmt(r["median_schedules"]),
                  _fmt(r["median_steps"]), _mutant_cell(r["by"])] for r in s["rules"]]
    return [*make(area_header, area_rows), "", *make(rule_header, rule_rows)]


def exit_status(results: Sequence[Result]) -> int:
    return 0 if all(r.status in NAMED for r in results) else 1


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------


EXAMPLE = """examples:
  python -m flink_semantics.conformance strength tests.wrong_key_groups --only FloorRanges
  python -m flink_semantics.conformance strength tests.wrong_sources tests.wrong_watermarks --json out.json"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("modules", nargs="+", metavar="MODULE", help="modules with a MUTANTS list")
    parser.add_argument("-n", "--jobs", type=int, default=2, help="suite runs at a time (default 2)")
    parser.add_argument("--shrink", choices=SHRINK_MODES, default="catcher",
                        help="catcher (default): shrink the catching property's counterexample in a second "
                             "run; all: shrink in the suite run (much slower); no: never")
    parser.add_argument("--no-shrink", dest="shrink", action="store_const", const="no",
                        help="the same as --shrink no")
    parser.add_argument("--only", action="append", default=[], metavar="NAME,...",
                        help="run only these mutants (names, or MODULE:NAME)")
    parser.add_argument("--profile", default=None,
                        help="the hypothesis profile (default: the suite's default)")
    parser.add_argument("--timeout", type=float, default=3600, metavar="SECONDS",
                        help="the longest one suite run may take (default 3600)")
    parser.add_argument("--corpus-out", metavar="DIR",
                        help="copy the counterexamples found (shrunk, when shrinking) into this corpus "
                             "(conformance/corpus keeps those of the repository's mutants)")
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="write every result as JSON")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")


def run(args: argparse.Namespace) -> int:
    try:
        entries = load(args.modules, args.only)
    except UsageError as e:
        print(f"conformance strength: {e}", file=sys.stderr)
        return 2
    if not entries:
        print("conformance strength: no mutants", file=sys.stderr)
        return 2
    jobs = max(1, int(args.jobs))
    print(f"{len(entries)} mutants of {len({e.area for e in entries})} areas, {jobs} at a time, "
          f"shrinking: {args.shrink}", flush=True)
    started = time.monotonic()
    results: dict[Entry, Result] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        corpus_out = Path(args.corpus_out) if getattr(args, "corpus_out", None) else None
        futures = {pool.submit(measure, e, args.shrink, args.profile, args.timeout, corpus_out): e
                   for e in entries}
        for future in as_completed(futures):
            result = future.result()
            results[futures[future]] = result
            done, elapsed = len(results), time.monotonic() - started
            left = len(entries) - done
            eta = f" — ETA {_duration(elapsed / done * left)}" if left else ""
            print(f"[{done}/{len(entries)}] {describe(result)}{eta}", flush=True)
    seconds = time.monotonic() - started
    ordered = [results[e] for e in entries]
    s = summary(ordered)
    print()
    for line in tables(s, markdown=args.markdown):
        print(line)
    print()
    print(f"{rate_line(s)}; {_duration(seconds)} with {jobs} jobs")
    if args.json_out:
        out = {"modules": list(args.modules), "shrink": args.shrink, "jobs": jobs, "profile": args.profile,
               "date": datetime.date.today().isoformat(), "seconds": round(seconds, 1), **s,
               "mutants": [asdict(r) for r in ordered]}
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
        print(f"written to {args.json_out}")
    return exit_status(ordered)
