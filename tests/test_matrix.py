"""The rules x adapters matrix (conformance/matrix.py), on synthetic reports: every kind of cell with
its reason, the failed cell's reproducer, an adapter that did not run an area; the HTML page is
well-formed XML with its filters; --check compares verdicts, levels, reasons and the presence of
reproducers but not schedule counts nor reproducer texts (a run on another machine, with another
hypothesis, may draw other schedules); --write round-trips; every error is one line and exit 2."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance.cli import main
from flink_semantics.conformance.matrix import END, START, build, comparable, html_page, load_report, markdown

REPO = Path(__file__).resolve().parent.parent

REPRODUCER = ("python -m flink_semantics.conformance check --adapter wrong "
              "--json '{\"area\": \"async_io\", \"steps\": []}'")


def rule(rule_id: str, area: str, verdict: str, schedules: int = 0, reason: str | None = None,
         reproducer: str | None = None, level: str = "MUST") -> dict[str, Any]:
    return {"id": rule_id, "area": area, "level": level, "verdict": verdict, "schedules": schedules,
            "reason": reason, "reproducer": reproducer}


def every_kind() -> dict[str, Any]:
    """One adapter's report with every verdict, over the vocabulary and two areas."""
    return {"adapter": "everything", "areas": ["async_io", "watermarks"], "rules": [
        rule("SCH-1", "schedules", "passed", 444),
        rule("AIO-1", "async_io", "passed", 512),
        rule("AIO-2", "async_io", "failed", reason="1 of 2 properties naming it failed on it",
             reproducer=REPRODUCER),
        rule("AIO-3", "async_io", "expected failure", reason="our retries <cannot> be stalled & so on",
             reproducer="pytest 'conformance/test_spec_examples.py::test_spec_example[AIO-3.1]'"),
        rule("AIO-4", "async_io", "stale", reason="listed as an expected failure (x), but it passed"),
        rule("AIO-5", "async_io", "unsupported", reason="async_io.status: not declared"),
        rule("AIO-10", "async_io", "untested", reason="threading is outside the vocabulary | `a|b`"),
        rule("AIO-12", "async_io", "inconclusive", reason="its properties failed on AIO-2 first",
             level="SHOULD"),
        rule("AIO-13", "async_io", "not run"),
        rule("WM-1", "watermarks", "passed", 7),
    ], "properties": []}


def one_area() -> dict[str, Any]:
    """An adapter that ran one area only (like spark-native's --areas watermarks)."""
    return {"adapter": "narrow", "areas": ["watermarks"], "rules": [
        rule("SCH-1", "schedules", "not run"),
        rule("WM-1", "watermarks", "expected failure", reason="no per-split watermark",
             reproducer="pytest 'x[WM-1.1]' --adapter narrow"),
    ]}


def write(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return str(path)


@pytest.fixture
def reports(tmp_path: Path) -> list[str]:
    return [write(tmp_path / "everything.json", every_kind()), write(tmp_path / "narrow.json", one_area())]


def cells(md: str, rule_id: str) -> list[str]:
    """A rule's row of the Markdown, its cells after rule, level and title."""
    (line,) = [line for line in md.splitlines() if line.startswith(f"| {rule_id} |")]
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]][3:]


def note_of(md: str, rule_id: str, adapter: str) -> str:
    """The note under an area's table that gives a rule's reason for an adapter: a line
    `- **ID**, **ID** (`adapter`, `adapter`): note`."""
    (note,) = [m[3] for m in re.finditer(r"^- (.*?) \((.*?)\): (.*)$", md, re.M)
               if f"**{rule_id}**" in m[1].split(", ") and f"`{adapter}`" in m[2].split(", ")]
    return note


def area_block(md: str, title: str) -> str:
    return re.search(rf"<details>\n<summary><b>{title}</b>.*?</details>", md, re.S)[0]  # type: ignore[index]


# --------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------


def test_every_kind_of_cell_says_its_verdict_and_reason(reports: list[str]) -> None:
    md = markdown(build([load_report(p) for p in reports]))
    block = area_block(md, "async I/O")
    assert cells(block, "AIO-1") == ["✓ 512", "—"]
    assert cells(md, "SCH-1")[0] == "✓ 444"
    expected = {"AIO-3": ("expected failure", "our retries &lt;cannot&gt; be stalled &amp; so on"),
                "AIO-4": ("stale", "listed as an expected failure (x), but it passed"),
                "AIO-5": ("unsupported", "async_io.status: not declared"),
                "AIO-10": ("untested", "threading is outside the vocabulary | `a|b`"),
                "AIO-12": ("inconclusive", "its properties failed on AIO-2 first"),
                "AIO-13": ("not run", "no property naming it ran")}
    for rule_id, (verdict, reason) in expected.items():
        assert cells(block, rule_id)[0] == verdict, rule_id
        assert note_of(block, rule_id, "everything").startswith(reason), rule_id
    assert "| AIO-12 | SHOULD |" in block
    assert "Reproduce: `pytest 'conformance/test_spec_examples.py::test_spec_example[AIO-3.1]'`" in \
        note_of(block, "AIO-3", "everything")


def test_a_failed_cell_points_at_its_reproducer(reports: list[str]) -> None:
    md = markdown(build([load_report(p) for p in reports]))
    block = area_block(md, "async I/O")
    assert cells(block, "AIO-2")[0] == "✗"
    assert note_of(block, "AIO-2", "everything") == \
        f"1 of 2 properties naming it failed on it. Reproduce: `{REPRODUCER}`"


def test_an_adapter_that_did_not_run_an_area_has_dashes_and_says_why(reports: list[str]) -> None:
    md = markdown(build([load_report(p) for p in reports]))
    block = area_block(md, "async I/O")
    assert all(cells(block, r)[1] == "—" for r in ("AIO-1", "AIO-2", "AIO-13"))
    assert "—: area not run by `narrow`." in block
    assert "narrow: area not run</summary>" in block
    wm = area_block(md, "watermarks")
    assert cells(wm, "WM-1") == ["✓ 7", "expected failure"]
    assert note_of(wm, "WM-1", "narrow") == \
        "no per-split watermark. Reproduce: `pytest 'x[WM-1.1]' --adapter narrow`"
    assert "—" not in wm.split("</summary>")[1]
    assert cells(md, "SCH-1") == ["✓ 444", "not run"]
    # The summary: the adapter's own rules, and the area's rules it did not run, counted apart.
    summary = md.split("<details>")[0]
    assert ("| adapter | rules | passed | failed | expected failure | stale | unsupported | untested "
            "| inconclusive | not run | area not run |") in summary
    assert "| `narrow` | 2 | 0 | 0 | 1 | 0 | 0 | 0 | 0 | 1 | 8 |" in summary
    assert "| `everything` | 10 | 3 | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 0 |" in summary


def test_a_rule_missing_from_a_report_of_its_area_is_not_a_dash(tmp_path: Path) -> None:
    newer = every_kind()
    older = copy.deepcopy(newer)
    older["adapter"] = "older"
    older["rules"] = [r for r in older["rules"] if r["id"] != "AIO-13"]
    md = markdown(build([load_report(write(tmp_path / "a.json", newer)),
                         load_report(write(tmp_path / "b.json", older))]))
    block = area_block(md, "async I/O")
    assert cells(block, "AIO-13") == ["not run", "not in report"]
    assert "lists no verdict" in note_of(block, "AIO-13", "older")


def test_columns_follow_the_order_given_and_areas_the_vocabulary_first(reports: list[str]) -> None:
    md = markdown(build([load_report(p) for p in reversed(reports)]))
    assert "| rule | level | title | `narrow` | `everything` |" in md
    titles = re.findall(r"<summary><b>(.*?)</b>", md)
    assert titles == ["the schedule vocabulary", "async I/O", "watermarks"]
    assert "(<code>spec/async-io.md</code>, 8 rules)" in md


# --------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------


def test_the_html_page_is_well_formed_with_filters_and_every_reason(reports: list[str]) -> None:
    page = html_page(build([load_report(p) for p in reports]))
    root = ET.fromstring(page.removeprefix("<!DOCTYPE html>\n"))  # well-formed XML
    assert not [e for e in root.iter() if e.tag in ("link", "img", "iframe")]
    assert not [e for e in root.iter() if e.attrib.get("src") or e.attrib.get("href")]
    by_id = {e.attrib["id"]: e for e in root.iter() if "id" in e.attrib}
    options = {f: [o.attrib["value"] for o in by_id[f].iter("option")]
               for f in ("f-area", "f-level", "f-verdict")}
    assert options["f-area"] == ["", "schedules", "async_io", "watermarks"]
    assert options["f-level"] == ["", "MUST", "SHOULD"]
    assert {"passed", "failed", "expected-failure", "stale", "unsupported", "untested", "inconclusive",
            "not-run", "area-not-run"} <= set(options["f-verdict"])
    rows = {tr[0].text: tr for tr in root.iter("tr") if "data-level" in tr.attrib}
    assert rows["AIO-12"].attrib["data-level"] == "SHOULD"
    assert rows["AIO-2"].attrib["data-verdicts"] == "failed area-not-run"
    text = "".join(root.itertext())
    for entry in every_kind()["rules"] + one_area()["rules"]:
        for key in ("reason", "reproducer"):
            if entry[key]:
                plain = entry[key].replace("`", "")  # code spans become <code>
                assert plain in text or entry[key] in text, (entry["id"], key)
    aio3 = rows["AIO-3"][3]
    assert "our retries <cannot> be stalled & so on" in aio3.attrib["title"]
    assert aio3.find("details/summary").text == "expected failure"  # type: ignore[union-attr]
    script = next(root.iter("script")).text or ""
    assert "f-area" in script and "f-level" in script and "f-verdict" in script


# --------------------------------------------------------------------------
# --write and --check
# --------------------------------------------------------------------------

README = f"""# A project

Some text.

{START}
old matrix
{END}

More text, kept as it is.
"""


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["matrix", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_write_round_trips_and_keeps_the_rest(tmp_path: Path, reports: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    assert run_cli(capsys, *reports, "--write", str(readme))[0] == 0
    once = readme.read_text(encoding="utf-8")
    assert "old matrix" not in once
    assert once.startswith("# A project\n\nSome text.\n\n" + START + "\n<!-- generated")
    assert once.endswith(END + "\n\nMore text, kept as it is.\n")
    assert markdown(build([load_report(p) for p in reports])) in once
    assert run_cli(capsys, *reports, "--write", str(readme))[0] == 0
    assert readme.read_text(encoding="utf-8") == once
    status, out, err = run_cli(capsys, *reports, "--check", str(readme))
    assert (status, err) == (0, "") and "matches the 2 reports" in out


def checked(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any) -> tuple[int, str]:
    """--write from the synthetic reports, then --check against them changed by `change`."""
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    first, second = every_kind(), one_area()
    paths = [write(tmp_path / "1.json", first), write(tmp_path / "2.json", second)]
    assert run_cli(capsys, *paths, "--write", str(readme))[0] == 0
    change(first["rules"], second["rules"])
    paths = [write(tmp_path / "1.json", first), write(tmp_path / "2.json", second)]
    status, out, _ = run_cli(capsys, *paths, "--check", str(readme))
    return status, out


def by_id(rules: list[dict[str, Any]], rule_id: str) -> dict[str, Any]:
    return next(r for r in rules if r["id"] == rule_id)


def other_counts(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    for r in first + second:
        if r["verdict"] == "passed":
            r["schedules"] = r["schedules"] * 3 + 1


def other_reproducers(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    by_id(first, "AIO-2")["reproducer"] = \
        "python -m flink_semantics.conformance check --json '{\"steps\": [1, `2`]}'"
    by_id(second, "WM-1")["reproducer"] = "`x`"


@pytest.mark.parametrize("change", [other_counts, other_reproducers], ids=["counts", "reproducers"])
def test_check_ignores_schedule_counts_and_reproducer_texts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any) -> None:
    assert checked(tmp_path, capsys, change)[0] == 0


def verdict(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    by_id(first, "AIO-1").update(verdict="failed", schedules=0, reason="1 of 1", reproducer="x")


def reason(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    by_id(first, "AIO-5")["reason"] = "async_io.status: not declared either"


def level(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    by_id(first, "AIO-1")["level"] = "MAY"


def no_reproducer(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    by_id(second, "WM-1")["reproducer"] = None


@pytest.mark.parametrize("change", [verdict, reason, level, no_reproducer])
def test_check_fails_on_a_changed_verdict_reason_level_or_reproducer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any) -> None:
    status, out = checked(tmp_path, capsys, change)
    assert status == 1
    first, *diff = out.splitlines()
    assert "README.md: the conformance matrix differs from the reports" in first
    assert "--write" in first and "schedule counts" in first
    assert diff[0].startswith("---") and diff[1].startswith("+++")
    assert any(re.match(r"-(\| |- \*\*)", line) for line in diff)


def test_a_changed_verdict_changes_only_its_own_lines(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Notes are keyed by rule, not numbered: the diff is the adapter's summary row, its share
    row, the area's summary line, the rule's row and its new note."""
    status, out = checked(tmp_path, capsys, verdict)
    diff = out.splitlines()[3:]
    removed = [line for line in diff if line.startswith("-")]
    added = [line for line in diff if line.startswith("+")]
    assert status == 1 and len(removed) == 4 and len(added) == 5, out
    assert removed[1].startswith("-| `everything` | 3/8 (37%) |")
    assert added[1].startswith("+| `everything` | 2/8 (25%) |")
    assert removed[3].startswith("-| AIO-1 | MUST |") and added[3].startswith("+| AIO-1 | MUST |")
    assert added[4] == "+- **AIO-1** (`everything`): 1 of 1. Reproduce: `…`"


def test_rules_sharing_a_reason_share_a_note(tmp_path: Path) -> None:
    data = every_kind()
    for r in data["rules"]:
        if r["id"] in ("AIO-4", "AIO-5"):
            r.update(verdict="unsupported", reason="no such capability")
    md = markdown(build([load_report(write(tmp_path / "r.json", data))]))
    assert "- **AIO-4**, **AIO-5** (`everything`): no such capability" in md


def test_comparable_blanks_only_counts_of_passed_cells_and_reproducers() -> None:
    text = ("| AIO-1 | MUST | Capacity 100 | ✓ 512 | ✓ 3 | untested [2] |\n"
            "<summary>a: 58 passed, 2 untested</summary>\n"
            "1. 1 of 2 failed Reproduce: ``a `b` c``\n"
            "- **WM-9** (`x`): test_a stopped on WM-2, WM-3 after 1 schedules; 15 schedules of its other"
            " properties passed\n")
    assert comparable(text) == ("| AIO-1 | MUST | Capacity 100 | ✓ # | ✓ # | untested [2] |\n"
                                "<summary>a: 58 passed, 2 untested</summary>\n"
                                "1. 1 of 2 failed Reproduce: `…`\n"
                                "- **WM-9** (`x`): test_a stopped on WM-2, WM-3 after # schedules;"
                                " # schedules of its other properties passed")


def test_the_docs_hold_a_generated_matrix() -> None:
    """docs/matrix.md's matrix is written by --write (tox's tests environment checks it against
    fresh reports of the three adapters CI runs, and the committed reports: `python -m
    flink_semantics.conformance matrix ... --check docs/matrix.md`)."""
    text = (REPO / "docs" / "matrix.md").read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1
    body = text.split(START)[1].split(END)[0]
    assert body.startswith("\n<!-- generated by `python -m flink_semantics.conformance matrix`")
    for adapter in ("reference", "pyspark", "pyspark-stream", "pyflink", "flink", "spark-native"):
        assert f"| `{adapter}` |" in body


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def not_a_report(tmp_path: Path, reports: list[str]) -> list[str]:
    cases = {"list.json": "[1, 2]", "no-adapter.json": '{"areas": [], "rules": []}',
             "no-rules.json": '{"adapter": "a", "areas": []}',
             "bad-verdict.json": json.dumps({"adapter": "a", "areas": [],
                                             "rules": [rule("SCH-1", "schedules", "great")]}),
             "bad-count.json": json.dumps({"adapter": "a", "areas": [],
                                           "rules": [rule("SCH-1", "schedules", "passed", -1)]}),
             "bad-entry.json": '{"adapter": "a", "areas": [], "rules": [3]}'}
    return [write(tmp_path / name, text) for name, text in cases.items()]


def latin(path: Path) -> str:
    path.write_bytes(b"\xff\xfe{")
    return str(path)


ERRORS = {
    "missing file": lambda tmp, reps: [str(tmp / "nope.json")],
    "malformed JSON": lambda tmp, reps: [write(tmp / "bad.json", '{"adapter": ')],
    "not UTF-8": lambda tmp, reps: [latin(tmp / "latin.json")],
    "no report": lambda tmp, reps: [],
    "same adapter twice": lambda tmp, reps: [reps[0], reps[0]],
    "missing README": lambda tmp, reps: [*reps, "--check", str(tmp / "NOREADME.md")],
    "README without markers": lambda tmp, reps: [*reps, "--write", write(tmp / "R.md", "# R\n")],
    "markers out of order": lambda tmp, reps: [*reps, "--check", write(tmp / "R.md", f"{END}\n{START}\n")],
    "write and check": lambda tmp, reps: [*reps, "--check", "R.md", "--write", "R.md"],
    "unwritable output": lambda tmp, reps: [*reps, "--html", str(tmp / "no" / "dir" / "m.html")],
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_an_error_is_one_line_and_exit_2(tmp_path: Path, reports: list[str],
                                         capsys: pytest.CaptureFixture[str], case: str) -> None:
    status, out, err = run_cli(capsys, *ERRORS[case](tmp_path, reports))
    assert status == 2, (case, out, err)
    assert len(err.splitlines()) == 1 and err.startswith("conformance matrix: "), err
    assert "Traceback" not in err


def test_a_json_that_is_not_a_report_is_one_line_each(tmp_path: Path, reports: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for path in not_a_report(tmp_path, reports):
        status, _, err = run_cli(capsys, path)
        assert status == 2 and len(err.splitlines()) == 1, (path, err)
        assert f"{path}: not a conformance report: " in err


def test_the_command_line_end_to_end(tmp_path: Path, reports: list[str]) -> None:
    """Through `python -m flink_semantics.conformance`: Markdown on stdout, the HTML written; an error
    without a traceback."""
    page = tmp_path / "m.html"
    done = subprocess.run([sys.executable, "-m", "conformance", "matrix", *reports, "--html", str(page),
                           "--markdown", "-"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!-- generated") and page.read_text().startswith("<!DOCTYPE html>")
    done = subprocess.run([sys.executable, "-m", "conformance", "matrix", str(tmp_path / "none.json")],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert done.stderr == f"conformance matrix: {tmp_path / 'none.json'}: no such file\n"


def test_an_adapters_runs_of_different_areas_make_one_column(tmp_path: Path) -> None:
    """A slow engine run area by area: its reports merge into one column; the vocabulary's rule
    takes the verdict of the run that checked it, not the other run's `not run`."""
    first = {"adapter": "slow", "areas": ["async_io"], "rules": [
        rule("SCH-1", "schedules", "not run"), rule("AIO-1", "async_io", "passed", 3)]}
    second = {"adapter": "slow", "areas": ["watermarks"], "rules": [
        rule("SCH-1", "schedules", "passed", 5),
        rule("WM-1", "watermarks", "expected failure", reason="no per-split watermark", reproducer="x")]}
    md = markdown(build([load_report(write(tmp_path / "a.json", first)),
                         load_report(write(tmp_path / "w.json", second))]))
    assert "| rule | level | title | `slow` |" in md, md  # one column
    assert cells(md, "SCH-1") == ["✓ 5"]
    assert cells(md, "AIO-1") == ["✓ 3"] and cells(md, "WM-1") == ["expected failure"]


def test_the_share_per_area_counts_what_conforms_of_what_can_be_checked(reports: list[str],
                                                                         tmp_path: Path) -> None:
    """The table under the summary: passed and expected failures of the rules an adapter can be
    checked on; untested and suite-only rules are left out, every other verdict counts against; an
    area the adapter did not run is a dash.  Counted by hand from the synthetic reports."""
    md = markdown(build([load_report(p) for p in reports]))
    table = md.split("Percentages are rounded down.", 1)[1].split("<details>", 1)[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in table.splitlines() if line.startswith("| `")}
    # everything: async I/O AIO-1 passed, AIO-3 expected failure; AIO-2 failed, AIO-4 stale, AIO-5
    # unsupported, AIO-12 inconclusive, AIO-13 not run against; AIO-10 untested left out
    assert rows["`everything`"] == ["3/8 (37%)", "2/7 (28%)", "1/1 (100%)"], table
    assert rows["`narrow`"] == ["1/1 (100%)", "—", "1/1 (100%)"], table
    only = {"adapter": "checked", "areas": ["watermarks"], "rules": [
        rule("WM-1", "watermarks", "passed", 3), rule("WM-2", "watermarks", "suite only"),
        rule("WM-3", "watermarks", "unsupported", reason="no idleness")]}
    md = markdown(build([load_report(write(tmp_path / "c.json", only))]))
    assert "| `checked` | 1/2 (50%) | 1/2 (50%) |" in md, md
    page = html_page(build([load_report(write(tmp_path / "c.json", only))]))
    assert "<td>1/2 (50%)</td>" in page
