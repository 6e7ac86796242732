"""The example adapters of examples/ against the conformance suite, run as a user runs it (a
subprocess): the example engine conforms on every rule it supports and names its reasons for the
others; its broken variant fails naming MB-30, with a reproducer that runs as printed; the
README's complete adapter is examples/readme_adapter.py word for word, and conforms too."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from flink_semantics.spec.adapter import AdapterError
from flink_semantics.spec.schedule import parse_schedule

from examples.mini_batch_engine import CAPABILITIES, make_adapter
from tests.hang import HANG_GUARD_S
from tests.test_suite_failures import PLUGIN, REPO, reproducer, suite_runner

pytest_plugins = ["pytester"]

ENGINE = "examples.mini_batch_engine:make_adapter"
BROKEN = "examples.mini_batch_engine_broken:make_adapter"
README_ADAPTER = "examples.readme_adapter:make_adapter"
# Rules each example must pass (a subset: the verdicts of the others are checked by kind below).
ENGINE_PASSES = {"MB-1", "MB-2", "MB-4", "MB-5", "MB-8", "MB-9", "MB-10", "MB-11", "MB-12", "MB-14", "MB-16",
                 "MB-17", "MB-18", "MB-19", "MB-20", "MB-21", "MB-22", "MB-23", "MB-24", "MB-30"}
README_PASSES = {"MB-1", "MB-9", "MB-10", "MB-11", "MB-17", "MB-18", "MB-19", "MB-20", "MB-21", "MB-22",
                 "MB-23", "MB-24", "MB-30"}


@pytest.fixture
def run_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    return suite_runner(pytester, monkeypatch, str(REPO / "conformance"))


def verdicts(report: Path) -> dict[str, dict]:
    """The mini-batch rules' verdicts of a --conformance-report file: rule ID -> its entry."""
    return {r["id"]: r for r in json.loads(report.read_text())["rules"] if r["area"] == "mini_batch"}


def test_example_engine_conforms(run_suite, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The whole mini-batch area against examples/mini_batch_engine.py: exit 0, its rules passed, the
    others unsupported with the example's own reasons."""
    report = tmp_path / "report.json"
    result = run_suite(*PLUGIN, "--adapter", ENGINE, "--areas", "mini_batch",
                       "--conformance-report", str(report))
    out = result.stdout.str()
    assert result.ret == 0, out[-5000:]
    rules = verdicts(report)
    passed = {r for r, v in rules.items() if v["verdict"] == "passed"}
    assert ENGINE_PASSES <= passed, (sorted(ENGINE_PASSES - passed), out[-5000:])
    reasons = [reason for reason in CAPABILITIES.values() if reason is not None]
    for rule, v in rules.items():
        assert v["verdict"] in ("passed", "unsupported", "suite only"), (rule, v)
        if v["verdict"] == "unsupported":
            assert any(reason in v["reason"] for reason in reasons), (rule, v["reason"])
    assert {r for r, v in rules.items() if v["verdict"] == "unsupported"} >= {"MB-6", "MB-13", "MB-25"}
    assert "mini_batch.rowtime: this example has no row-time assigner" in out


def test_broken_engine_is_caught_naming_its_rule(run_suite, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """examples/mini_batch_engine_broken.py (MIN and MAX without retraction) against the property
    and the spec examples of MB-30: exit 1, MB-30 in the `rules:` line and failed in the verdict
    table, and a reproducer that exits 1 as printed (and 0 with the correct engine)."""
    report = tmp_path / "report.json"
    result = run_suite(*PLUGIN, "--adapter", BROKEN, "--areas", "mini_batch",
                       "-k", "test_per_row_changelog or MB-30", "--conformance-report", str(report))
    out = result.stdout.str()
    assert result.ret == 1, out[-5000:]
    assert "adapter 'mini-batch-example-broken' does not conform" in out, out[-5000:]
    line = re.search(r"^rules: (.*?)(?: \(the property checks .*\))?$", out, re.M)
    assert line and "MB-30" in line[1].split(", "), out[-5000:]
    table_row = r"^MB-30 +MUST +failed +reproduce: python -m flink_semantics\.conformance check "
    assert re.search(table_row, out, re.M), out[-5000:]
    assert verdicts(report)["MB-30"]["verdict"] == "failed"
    command = reproducer(out)
    assert command.startswith(f"python -m flink_semantics.conformance check --adapter {BROKEN} --json ")
    args = shlex.split(command)
    for adapter, status, says in ((BROKEN, 1, "does not conform"), (ENGINE, 0, "conforms")):
        args[args.index("--adapter") + 1] = adapter
        proc = subprocess.run([sys.executable, *args[1:]], cwd=REPO, capture_output=True, text=True,
                              timeout=HANG_GUARD_S)
        assert proc.returncode == status, proc.stdout + proc.stderr
        assert says in proc.stdout, proc.stdout


def test_readme_adapter_conforms(run_suite, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The README's complete adapter (examples/readme_adapter.py) against the mini-batch area: exit
    0, the rules of the area's core passed, the rest unsupported."""
    report = tmp_path / "report.json"
    result = run_suite(*PLUGIN, "--adapter", README_ADAPTER, "--areas", "mini_batch",
                       "--conformance-report", str(report))
    out = result.stdout.str()
    assert result.ret == 0, out[-5000:]
    rules = verdicts(report)
    passed = {r for r, v in rules.items() if v["verdict"] == "passed"}
    assert README_PASSES <= passed, (sorted(README_PASSES - passed), out[-5000:])
    assert all(v["verdict"] in ("passed", "unsupported", "suite only") for v in rules.values()), rules


def between(text: str, start: str, end: str, where: str) -> str:
    assert start in text and end in text, f"{where} has no {start} ... {end} markers"
    return text.split(start, 1)[1].split(end, 1)[0]


def test_readme_block_is_the_example_file() -> None:
    """README.md's complete adapter, the ```python block between <!-- example:start --> and
    <!-- example:end -->, is examples/readme_adapter.py between `# example:start` and `# example:end`."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = between(readme, "<!-- example:start -->", "<!-- example:end -->", "README.md")
    fenced = re.fullmatch(r"\s*```python\n(.*?)```\s*", block, re.S)
    assert fenced, "README.md: between the example markers there must be one ```python block, nothing else"
    source = (REPO / "examples" / "readme_adapter.py").read_text(encoding="utf-8")
    code = between(source, "# example:start\n", "# example:end", "examples/readme_adapter.py")
    assert fenced[1] == code, "README.md's example differs from examples/readme_adapter.py: copy the file's"


def test_example_engine_refuses_what_it_does_not_support() -> None:
    """A schedule needing a capability the example declares unsupported (given by hand: the suite
    sends none) is an AdapterError naming it, not a wrong trace."""
    schedule = parse_schedule(json.dumps({"area": "mini_batch", "config": {}, "steps": [
        {"op": "row", "key": 1, "kind": "+I", "value": 5}, {"op": "checkpoint", "id": 1}]}))
    with pytest.raises(AdapterError, match="mini_batch.checkpoint"):
        make_adapter().run_batch([schedule])
