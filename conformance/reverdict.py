"""Recompute a conformance report's verdicts from the properties it records.

    python -m flink_semantics.conformance reverdict REPORT.json ... [--adapter NAME] [--write]

A report (`pytest conformance --conformance-report PATH`) records each property's outcome beside the
rules' verdicts.  This recomputes the verdicts from those outcomes with this version's verdict logic
(conformance/verdicts.py), the rules of spec/, and the expected failures the adapter named by
--adapter declares (else the ones the report itself lists): what a rerun of the same properties
would give, without running them again (the runs through Flink's classes or Spark's streaming
queries take up to an hour).  A property that failed is an expected failure when every rule it
blamed is a listed expected failure or not a MUST rule, as in a run without --strict.  Schedules are
not drawn again: when a changed list of expected failures would have let a property run on (or stop
it sooner), only a rerun tells.

It prints each changed verdict (`REPORT: RULE old -> new`) and a line per report.  Without --write it
exits 1 when a verdict changed and 0 when none did (a check, as for a committed report); --write
rewrites the reports that changed and exits 0.  A file that is not a report, or an adapter that
cannot be loaded, is a usage error: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from flink_semantics.conformance import verdicts as V
from flink_semantics.spec.rules import load_rules

EXAMPLE = """example (after a change of the verdict logic or of spark-native's expected failures):
  python -m flink_semantics.conformance reverdict docs/reports/pyspark-stream-*.json \
      --adapter pyspark-stream --write"""

_FIELDS = {f.name for f in fields(V.ItemResult)}


class ReverdictError(Exception):
    """A report or an adapter this command cannot use; the message is one line."""


def load(path: str) -> dict[str, Any]:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReverdictError(f"{path}: cannot read a JSON report: {e}") from None
    if not (isinstance(report, dict) and isinstance(report.get("rules"), list)
            and isinstance(report.get("properties"), list) and isinstance(report.get("areas"), list)):
        raise ReverdictError(f"{path}: not a conformance report (no rules, properties and areas)")
    missing = [p.get("nodeid", "?") for p in report["properties"] if "adapter" not in p]
    if missing:
        raise ReverdictError(f"{path}: property {missing[0]} does not say whether it calls the adapter "
                             "(a report older than that field): run it again")
    return report


def listed(report: dict[str, Any]) -> dict[str, str]:
    """The expected failures a report shows: its expected failures' and stale rules' reasons."""
    out = {}
    for r in report["rules"]:
        if r["verdict"] == V.XFAIL and r.get("reason"):
            out[r["id"]] = r["reason"]
        elif r["verdict"] == V.STALE and V.listed_reason(r.get("reason") or ""):
            out[r["id"]] = str(V.listed_reason(r["reason"]))
    return out


def adapter_expected_failures(spec: str) -> dict[str, str]:
    """What the adapter declares: read from its factory, else from the adapter built (a process
    adapter declares them in its hello: its engine is started, asked, and closed)."""
    from flink_semantics.conformance.registry import adapter_attribute, load_adapter, resolve

    try:
        resolve(spec)
        source = adapter_attribute(spec, "expected_failures")
        if source is None:
            adapter = load_adapter(spec)
            try:
                source = getattr(adapter, "expected_failures", None)
            finally:
                adapter.close()
        return V.load_expected_failures(source, load_rules())
    except Exception as e:  # an unknown name, an import error, an engine that does not start
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ReverdictError(f"--adapter {spec}: {why}") from None


Change = tuple[str, str, str]  # rule, old verdict, new verdict


def recompute(report: dict[str, Any], expected: dict[str, str]) -> tuple[dict[str, Any], list[Change]]:
    """The report with its verdicts recomputed, and the changes (rule, old, new)."""
    rules = load_rules()
    items = []
    for p in report["properties"]:
        item = V.ItemResult(**{k: v for k, v in p.items() if k in _FIELDS})
        if item.outcome in (V.FAILED, V.XFAIL) and item.blamed:
            item.outcome = V.XFAIL if V.excused(item.blamed, rules, expected, strict=False) else V.FAILED
        items.append(item)
    new = V.verdicts(rules, items, report["areas"], expected)
    before = {r["id"]: r["verdict"] for r in report["rules"]}
    changes = [(v.id, before.get(v.id, "absent"), v.verdict) for v in new if before.get(v.id) != v.verdict]
    out = dict(report, rules=[asdict(v) for v in new], properties=[asdict(i) for i in items])
    return out, changes


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="reports to recompute")
    parser.add_argument("--adapter", help="take the expected failures this adapter declares (a built-in "
                                          "name or module:factory); default: those the report lists")
    parser.add_argument("--write", action="store_true", help="rewrite the reports whose verdicts changed")


def run(args: argparse.Namespace) -> int:
    try:
        expected = adapter_expected_failures(args.adapter) if args.adapter else None
        loaded = [(path, load(path)) for path in args.reports]
    except ReverdictError as e:
        print(f"python -m flink_semantics.conformance reverdict: {e}", file=sys.stderr)
        return 2
    changed = False
    for path, report in loaded:
        new, changes = recompute(report, listed(report) if expected is None else expected)
        for rule, old, verdict in changes:
            print(f"{path}: {rule} {old} -> {verdict}")
        if changes and args.write:
            Path(path).write_text(json.dumps(new, indent=2), encoding="utf-8")  # as the plugin writes it
        print(f"{path}: {len(changes)} verdicts changed" + (", written" if changes and args.write else ""))
        changed = changed or bool(changes)
    return 1 if changed and not args.write else 0
