"""`python -m flink_semantics.conformance`: every subcommand turns bad arguments, missing files and
malformed JSON into one line on stderr and a nonzero exit status, never a traceback."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from flink_semantics.conformance.cli import main
from flink_semantics.spec.rules import load_rules

SCHEDULE = ('{"area": "async_io", "config": {"mode": "ordered", "capacity": 2}, "steps": '
            '[{"op": "record", "value": 1}, {"op": "end"}, {"op": "complete", "record": 0, "result": [1]}]}')


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    good = tmp_path / "good.json"
    good.write_text(SCHEDULE)
    empty = tmp_path / "empty.json"
    empty.write_text(" \n")
    return {"empty": str(empty), "missing": str(tmp_path / "missing.json"), "bad": str(bad),
            "list": str(listed), "dir": str(tmp_path), "good": str(good)}


CASES = [
    # (subcommand and arguments, a part of the one line, exit status)
    (["replay", "{missing}", "--adapter", "reference"], "No such file or directory", 2),
    (["replay", "{dir}", "--adapter", "reference"], "Is a directory", 2),
    (["replay", "{bad}", "--adapter", "reference"], "not JSON", 2),
    (["replay", "{list}", "--adapter", "reference"], "a schedule must be a JSON object", 2),
    (["replay", "{good}", "--adapter", "no_such_adapter"],
     "unknown adapter 'no_such_adapter': use a built-in name (flink, pyflink, pyspark, pyspark-local", 2),
    (["replay", "{good}", "--adapter", "tests.wrong_adapters:Crashes"],
     "is broken: run_batch raised RuntimeError: operator bug", 3),
    (["replay", "{good}", "--adapter", "reference", "--no-such-option"],
     "unrecognized arguments: --no-such-option", 2),
    (["replay", "{good}"], "the following arguments are required: --adapter", 2),
    (["check", "{good}"], "the following arguments are required: --adapter", 2),
    (["check", "--adapter", "reference"], "give a schedule file, '-' for standard input, or --json", 2),
    (["check", "{good}", "--json", "{{}}", "--adapter", "reference"], "or --json, not both", 2),
    (["check", "{empty}", "--adapter", "reference"], "empty.json is empty: no schedule", 2),
    (["check", "{missing}", "--adapter", "reference"], "No such file or directory", 2),
    (["check", "{bad}", "--adapter", "reference"], "not JSON", 2),
    (["check", "--json", "{{}}", "--adapter", "reference"], "unknown area", 2),
    (["check", "{good}", "--adapter", "tests.wrong_adapters:WrongCount"],
     "run_batch returned 0 value(s) for 1 schedule", 3),
    (["draw", "{missing}"], "No such file or directory", 2),
    (["draw", "{bad}"], "not JSON", 2),
    (["draw", "{list}"], "expected a JSON object", 2),
    (["matrix", "{missing}"], "no such file", 2),
    (["matrix", "{bad}"], "malformed JSON", 2),
    (["matrix", "{list}"], "not a conformance report", 2),
    (["matrix"], "give at least one report", 2),
    (["strength", "no.such.module"], "cannot import no.such.module", 2),
    (["strength", "tests.strength_mutants", "--no-such-option"], "unrecognized arguments", 2),
    (["rules"], "give rule IDs (SCH-2, or SCH- for all of them) or --area AREA", 2),
    (["rules", "SCH-999"], "unknown rule 'SCH-999' (known: SCH-1..", 2),
    (["rules", "XY-1"], "unknown rule 'XY-1' (known: AIO-, KG-,", 2),
    (["no-such-command"], "invalid choice: 'no-such-command'", 2),
    ([], "the following arguments are required: COMMAND", 2),
]


@pytest.mark.parametrize(("argv", "says", "status"), CASES, ids=[" ".join(c[0]) or "(none)" for c in CASES])
def test_one_line_and_a_nonzero_status(files: dict[str, str], capsys: pytest.CaptureFixture[str],
                                       argv: list[str], says: str, status: int) -> None:
    try:
        got = main([a.format(**files) for a in argv])
    except SystemExit as e:  # argparse's own exit, after our one-line error
        got = int(e.code or 0)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert got == status, err
    assert len(err) == 1 and says in err[0], err
    assert "Traceback" not in err[0]


def test_an_empty_standard_input_is_a_usage_error(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Standard input only with `-`, and an empty one is no schedule (not "configuration: SCH-2")."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["check", "-", "--adapter", "reference"]) == 2
    assert capsys.readouterr().err.strip() == ("python -m flink_semantics.conformance check: standard "
                                               "input is empty: no schedule (--help for the usage)")


def test_a_schedule_on_standard_input_conforms_with_one_event(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    one = ('{"area": "async_io", "config": {"mode": "ordered", "capacity": 2}, '
           '"steps": [{"op": "record", "value": 1}]}')
    monkeypatch.setattr("sys.stdin", io.StringIO(one))
    assert main(["check", "-", "--adapter", "reference"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == "conforms: adapter 'reference' gives the reference trace (1 event)"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert re.fullmatch(r"flink-semantics (\d+\.\d+\.\d+.*|unknown \(not installed\))\n",
                        capsys.readouterr().out)


@pytest.mark.parametrize("command", ["check", "replay", "rules", "draw", "matrix", "strength", "reverdict"])
def test_every_subcommand_says_what_it_does_its_arguments_and_an_example(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python -m flink_semantics.conformance {command}"), text
    assert "options:" in text and "\nexample" in text, text
    example = text.split("\nexample", 1)[1]
    assert f"python -m flink_semantics.conformance {command} " in example, example
    assert len(text.splitlines()) <= 50, text  # a screen, not the module's whole docstring


def test_rules_prints_a_rule_its_properties_and_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    """The rule's fields come from spec/, the properties from the suite's markers, the lines from
    reference/."""
    assert main(["rules", "SCH-2"]) == 0
    out = capsys.readouterr().out
    rule = load_rules()["SCH-2"]
    assert out.startswith(f"SCH-2 {rule.title} ({rule.level}, spec/{rule.file})\n"), out
    assert "  rule: " in out and "  checked by: " in out and "  reference: " in out, out
    first_words = " ".join(rule.text.split()[:6])
    assert first_words in " ".join(out.split()), (first_words, out)


def test_rules_lists_the_properties_that_name_a_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """Every property whose rule marker names the rule, read here from the suite file's text."""
    named, decorators = [], ""
    suite = Path(__file__).resolve().parent.parent / "conformance" / "test_async_io.py"
    for line in suite.read_text().splitlines():
        if line.startswith("def test_"):
            if "mark.rule(" in decorators and '"AIO-12"' in decorators:
                named.append(line.split("(")[0].removeprefix("def "))
            decorators = ""
        elif line.startswith(("@", " ", ")")):
            decorators += line
        else:
            decorators = ""
    assert named
    assert main(["rules", "AIO-12"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  checked by: "))
    for name in named:
        assert f"conformance/test_async_io.py::{name}" in line, (name, line)
