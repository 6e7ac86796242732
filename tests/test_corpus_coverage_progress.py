"""The corpus of counterexamples (conformance/corpus.py and conformance/test_corpus.py), the
generator coverage floors (conformance/coverage.py, conformance/test_coverage.py) and the progress
line (conformance/progress.py)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from flink_semantics.adapters.reference import ReferenceAdapter
from flink_semantics.conformance import corpus
from flink_semantics.conformance.coverage import Tally
from flink_semantics.conformance.plugin import Conformance
from flink_semantics.conformance.progress import Progress, duration
from flink_semantics.reference import expected_trace
from flink_semantics.spec.schedule import Schedule, Trace, schedule_from_dict

from tests.hang import HANG_GUARD_S
from tests.test_suite_failures import REPO, suite_runner

pytest_plugins = ["pytester"]

SCHEDULE = {"area": "mini_batch", "config": {"enabled": True, "allow_latency": 10, "size": 3,
                                             "assigner": "proctime"},
            "steps": [{"op": "row", "key": 0, "kind": "+I", "value": 0}] * 3}
WRONG = "tests.wrong_mini_batch:SizeCountsKeys"  # its bundles hold three keys, not three rows


def test_a_case_is_saved_once_and_read_back(tmp_path: Path) -> None:
    schedule = schedule_from_dict(SCHEDULE)
    case = corpus.Case(schedule, expected_trace(schedule), None, "x", "test_p", ("MB-10",), 2)
    path, new = corpus.save(tmp_path, case)
    assert new and path.parent == tmp_path / "mini_batch" and path.suffix == ".json"
    assert corpus.save(tmp_path, case) == (path, False)  # the same schedule: not saved again
    back = corpus.load(path)
    assert (back.schedule, back.expected, back.rules, back.step, back.prop) == \
        (schedule, case.expected, ("MB-10",), 2, "test_p")
    assert [p for p, _ in corpus.cases(tmp_path, "mini_batch")] == [path]


def test_a_bad_corpus_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(corpus.CorpusError, match=re.escape(str(bad))):
        corpus.load(bad)
    bad.write_text('{"steps": []}', encoding="utf-8")
    with pytest.raises(corpus.CorpusError, match="not a corpus file"):
        corpus.load(bad)


def test_corpus_option_none_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFORMANCE_CORPUS", raising=False)
    assert corpus.directory("none") is None
    assert corpus.directory(None) == corpus.DEFAULT
    monkeypatch.setenv("CONFORMANCE_CORPUS", "/somewhere")
    assert corpus.directory(None) == Path("/somewhere")


def test_a_found_counterexample_is_saved_drawn_and_replayed_first(pytester: pytest.Pytester,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing run saves its shrunk counterexample (with the reference trace) and says where; the
    next run replays it before any property, against the wrong adapter (failing) and the reference."""
    run = suite_runner(pytester, monkeypatch, str(REPO / "conformance"))
    root = pytester.path / "corpus"
    first = run("--adapter", WRONG, "--areas", "mini_batch", "--conformance-shrink", "yes",
                "-k", "test_processing_time_bundles")
    out = first.stdout.str()
    assert first.ret == 1, out
    saved = re.search(r"^counterexample saved to (\S+\.json)$", out, re.M)
    assert saved, out
    path = Path(saved[1])
    assert path.parent == root / "mini_batch"
    data = json.loads(path.read_text(encoding="utf-8"))
    schedule = schedule_from_dict(data["schedule"])
    assert data["expected"] == expected_trace(schedule).to_dict()["events"]
    assert data["observed"] != data["expected"] and data["adapter"] == WRONG
    assert data["property"] == "test_processing_time_bundles" and "MB-10" in data["rules"]

    again = run("--adapter", WRONG, "--areas", "mini_batch", "-v", "-x")
    lines = [line for line in again.stdout.lines if "::" in line and ("PASSED" in line or "FAILED" in line)]
    assert lines and "test_corpus.py::test_corpus[mini_batch/" in lines[0], lines[:3]
    assert "FAILED" in lines[0]
    fine = run("--adapter", "reference", "--areas", "mini_batch", "-k", "test_corpus")
    assert fine.ret == 0 and "1 passed" in fine.stdout.str(), fine.stdout.str()


def test_a_saved_case_the_reference_no_longer_gives_fails(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    schedule = schedule_from_dict(SCHEDULE)
    wrong = expected_trace(schedule).events[:-1]  # not what the reference gives
    from flink_semantics.spec.schedule import Trace
    corpus.save(pytester.path / "corpus", corpus.Case(schedule, Trace(wrong), rules=("MB-10",)))
    run = suite_runner(pytester, monkeypatch, str(REPO / "conformance" / "test_corpus.py"))
    result = run("--adapter", "reference", "--areas", "mini_batch")
    assert result.ret == 1
    assert "the reference's trace changed since it was saved" in result.stdout.str()


def test_the_coverage_test_fails_below_a_floor(pytester: pytest.Pytester,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With every floor raised to 100% (tests/raise_floors.py) the coverage test of the area fails and
    names the states; the run prints the coverage section."""
    run = suite_runner(pytester, monkeypatch, str(REPO / "conformance"))
    result = run("--adapter", "reference", "--areas", "key_groups", "-p", "tests.raise_floors",
                 "--corpus", "none")
    out = result.stdout.str()
    assert "generator coverage" in out, out[-3000:]
    assert result.ret == 1, out[-3000:]
    assert re.search(r"FAILED .*test_coverage.py::test_generator_coverage\[key_groups\]", out), out[-3000:]
    assert "floor 100.00%" in out
    # With the real floors the same test passes: CI's `pytest conformance --adapter reference` checks it.


def test_the_floors_are_checked_over_all_xdist_workers(pytester: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Under xdist no worker sees every schedule: the coverage test skips on the workers and the
    controller checks the floors over their merged tallies; with every floor at 100% the run fails and
    names the area and the states."""
    run = suite_runner(pytester, monkeypatch, str(REPO / "conformance"))
    result = run("--adapter", "reference", "--areas", "key_groups", "-p", "tests.raise_floors",
                 "--corpus", "none", "-n", "2")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    failed = "FAILED coverage floors of key_groups (checked over all xdist workers' schedules)"
    assert failed in out, out[-3000:]
    assert "floor 100.00%" in out, out[-3000:]
    assert not re.search(r"FAILED .*test_generator_coverage", out), out[-3000:]  # skipped on the workers


def test_tally_counts_distinct_schedules_and_names_shortfalls(monkeypatch: pytest.MonkeyPatch) -> None:
    from flink_semantics.conformance import coverage

    monkeypatch.setattr(coverage, "floors", lambda area: {"rare": 0.5, "common": 0.1})
    reached = {"a": ["rare", "common"], "b": ["common"], "c": []}
    monkeypatch.setattr(coverage, "reached", lambda s: reached[s.name])

    class S:
        def __init__(self, name: str):
            self.name, self.area = name, "x"

    tally = Tally()
    a, b, c = S("a"), S("b"), S("c")
    for s in (a, b, c, a):  # a twice: counted once
        tally.add(s)  # type: ignore[arg-type]
    assert tally.drawn["x"] == 3 and tally.states["x"] == {"rare": 1, "common": 2}
    assert tally.shortfalls("x") == ["'rare': 1 of 3 schedules (33.33%), floor 50.00%"]
    assert any("BELOW FLOOR" in line and "rare" in line for line in tally.lines(["x"]))
    assert [line for line in tally.lines(["x"], {"x": "why"}) if "rare" in line] == [
        "x: rare: 1 of 3 (33.3%; floor 50.0%)  below floor, not applied: why"]
    assert tally.lines(["y"]) == []  # an area that drew nothing has no lines
    other = Tally()
    other.merge(tally.to_json())
    assert other.drawn == tally.drawn and other.states == tally.states


def test_progress_line_and_eta() -> None:
    now = [0.0]
    lines: list[str] = []
    p = Progress(10, "run", every=5, write=lines.append, clock=lambda: now[0])
    now[0] = 2
    p.update(1)  # within `every`: nothing
    now[0] = 30
    p.update(3, "sources 120")
    assert lines == ["run: 30% done; sources 120; 30 s so far, ETA 1 min 10 s"]
    assert duration(3725) == "1 h 02 min"


def test_an_expected_failure_is_not_saved(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A divergence on the adapter's expected failures only is known: reported as an expected
    failure, not saved (the same runner saves a wrong adapter's counterexample, test above)."""
    run = suite_runner(pytester, monkeypatch, str(REPO / "conformance"))
    result = run("--adapter", "tests.wrong_mini_batch:SizeCountsKeysKnown", "--areas", "mini_batch",
                 "-k", "test_processing_time_bundles", "-rx")
    out = result.stdout.str()
    result.assert_outcomes(xfailed=1)
    assert "counterexample saved to" not in out
    assert not list((pytester.path / "corpus").rglob("*.json")), out


def test_a_long_batch_reports_while_it_runs() -> None:
    """While a run_batch runs, the suite calls on_wait at each wait slice with the batch's size and
    the time so far (the progress line's heartbeat: a streaming fault run's batch runs half an
    hour).  The adapter's batch waits until it was called, so no clock decides the outcome."""
    called = threading.Event()

    class WaitsForAHeartbeat(ReferenceAdapter):
        def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
            assert called.wait(HANG_GUARD_S), "no heartbeat while the batch ran"
            return super().run_batch(schedules)

    suite = Conformance(WaitsForAHeartbeat(), "waits", deadline=HANG_GUARD_S)
    suite.wait_slice = 0.01
    seen: list[tuple[int, float]] = []

    def on_wait(size: int, waited: float) -> None:
        seen.append((size, waited))
        called.set()

    suite.on_wait = on_wait
    schedule = schedule_from_dict({"area": "async_io", "config": {"mode": "ordered", "capacity": 1},
                                   "steps": [{"op": "end"}]})
    assert len(suite.run_batch([schedule, schedule])) == 2
    assert seen and all(size == 2 and waited > 0 for size, waited in seen), seen
