"""`python -m flink_semantics.conformance`: every subcommand turns bad arguments, missing files and
malformed JSON into one line on stderr and a nonzero exit status, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from flink_semantics.conformance.__main__ import main

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
    return {"missing": str(tmp_path / "missing.json"), "bad": str(bad), "list": str(listed),
            "dir": str(tmp_path), "good": str(good)}


CASES = [
    # (subcommand and arguments, a part of the one line, exit status)
    (["replay", "{missing}"], "No such file or directory", 2),
    (["replay", "{dir}"], "Is a directory", 2),
    (["replay", "{bad}"], "not JSON", 2),
    (["replay", "{list}"], "a schedule must be a JSON object", 2),
    (["replay", "{good}", "--adapter", "no_such_adapter"], "adapter 'no_such_adapter'", 3),
    (["replay", "{good}", "--adapter", "tests.wrong_adapters:Crashes"],
     "is broken: run_batch raised RuntimeError: operator bug", 3),
    (["replay", "{good}", "--no-such-option"], "unrecognized arguments: --no-such-option", 2),
    (["check", "{missing}"], "No such file or directory", 2),
    (["check", "{bad}"], "not JSON", 2),
    (["check", "--json", "{{}}"], "unknown area", 2),
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
