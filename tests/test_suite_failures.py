"""The conformance suite catches wrong adapters and reports them usefully (run in a subprocess)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance.isolate import well_formed
from flink_semantics.conformance.plugin import Conformance
from flink_semantics.spec.area import areas
from flink_semantics.spec.schedule import parse_schedule, schedule_from_dict

from tests.hang import HANG_GUARD_S
from tests.wrong_adapters import MUTANTS, NotTraces, RaisesOnThirdCompletion, WrongCount

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
SUITE = str(REPO / "conformance" / "test_async_io.py")
# Load the plugin explicitly unless it is installed as a pytest11 entry point (loading both is an error).
INSTALLED = any(e.value == "flink_semantics.conformance.plugin" for e in entry_points(group="pytest11"))
PLUGIN = () if INSTALLED else ("-p", "flink_semantics.conformance.plugin")


def suite_runner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, suite: str):  # type: ignore[no-untyped-def]
    """Runs a conformance suite file in a subprocess, with the given options, from a clean environment."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("CONFORMANCE_ADAPTER", raising=False)
    monkeypatch.delenv("CONFORMANCE_PROFILE", raising=False)
    # Counterexamples of these runs go to a corpus of their own, not the repository's.
    monkeypatch.setenv("CONFORMANCE_CORPUS", str(pytester.path / "corpus"))

    def run(*args: str) -> pytest.RunResult:
        return pytester.runpytest_subprocess(suite, "-p", "no:cacheprovider", *args, timeout=HANG_GUARD_S)

    return run


@pytest.fixture
def run_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    return suite_runner(pytester, monkeypatch, SUITE)


def reproducer(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("reproduce: ")]
    assert lines, output
    return lines[0].removeprefix("reproduce: ")


def test_capacity_off_by_one_is_reported_with_rule_schedule_and_reproducer(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "tests.wrong_adapters:CapacityOffByOne", "-k", "capacity_and_admission")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "adapter 'CapacityOffByOne' does not conform" in out
    # The second record's admission at a full queue breaks AIO-7; AIO-6 and AIO-9 are possible too.
    assert re.search(r"^rules: AIO-7 \(may concern too, not singled out: ", out, re.M), out
    # The shrunk schedule: capacity 1, two records; the second one's admission is the divergence.
    assert '"capacity": 1' in out
    assert re.search(r"^  >>\s+1: record value=0 timestamp=null$", out, re.M), out
    assert "first divergent step: 1 (record value=0 timestamp=null)" in out, out
    assert "expected (reference) against observed (CapacityOffByOne)" in out, out
    assert re.search(r"^\+   @1 invoke record=1 attempt=1$", out, re.M), out  # observed, not expected
    # The one-line reproducer reproduces the failure.
    command = reproducer(out)
    assert command.startswith("python -m flink_semantics.conformance check "
                              "--adapter tests.wrong_adapters:CapacityOffByOne --json ")
    args = shlex.split(command)
    proc = subprocess.run([sys.executable, *args[1:]], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "does not conform" in proc.stdout


def test_ordered_mode_reorder_is_reported(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "tests.wrong_adapters:OrderedAsUnordered", "-k", "test_ordered_mode")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "the property checks AIO-12" in out
    assert re.search(r"^  >>\s+\d+: complete ", out, re.M), out
    assert ("reproduce: python -m flink_semantics.conformance check "
            "--adapter tests.wrong_adapters:OrderedAsUnordered") in out


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_wrong_async_io_adapter_is_caught(run_suite, mutant) -> None:  # type: ignore[no-untyped-def]
    """Every async I/O mutant (tests/wrong_adapters.py: MUTANTS) fails its property, and its report
    names the rule, before "(the property checks ...)" (unshrunk: the tests above check shrunk reports)."""
    adapter = f"tests.wrong_adapters:{mutant.name}"
    result = run_suite("--adapter", adapter, "-k", mutant.prop, "--conformance-shrink", "no",
                       "--corpus", "none")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert f"adapter '{mutant.name}' does not conform" in out, out
    assert reproducer(out).startswith(f"python -m flink_semantics.conformance check --adapter {adapter} ")
    possible = r"(?: \(may concern too, not singled out: [^)]*\))?"
    rules = re.search(rf"^rules: (.*?){possible}(?: \(the property checks .*\))?$", out, re.M)
    assert rules and mutant.rule in rules[1].split(", "), (mutant.rule, rules and rules[0], out[-3000:])


def test_unknown_adapter_gives_one_line_and_nonzero_exit(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "no_such_adapter")
    assert result.ret != 0
    err = [line for line in result.stderr.lines if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("conformance: cannot load adapter 'no_such_adapter'")
    assert "pyspark, pyspark-local, pyspark-stream, reference" in err[0]


def test_adapter_load_error_gives_one_line_and_nonzero_exit(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "tests.wrong_adapters:broken")
    assert result.ret != 0
    err = [line for line in result.stderr.lines if line.strip()]
    assert err == ["conformance: cannot load adapter 'tests.wrong_adapters:broken': "
                   "Java not found (set JAVA_HOME)"]


def test_unsupported_properties_are_listed_with_reason(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "tests.wrong_adapters:NoTimeouts", "-k", "timeouts or retries")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "conformance: UNSUPPORTED" in out
    line = next(x for x in out.splitlines() if x.startswith("UNSUPPORTED") and "test_timeouts" in x)
    assert "AIO-26" in line and "async_io.timeout: this engine has no processing-time timers" in line


def test_hanging_adapter_is_reported_as_a_hang(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "tests.wrong_adapters:Hangs", "--conformance-deadline", "1",
                       "-k", "test_configuration")
    assert result.ret == 3
    assert "adapter 'Hangs' hung" in result.stdout.str() + result.stderr.str()


def test_adapter_error_from_run_batch_ends_the_session_in_one_line(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "tests.wrong_adapters:EngineDown")
    assert result.ret == 3
    err = [line for line in result.stderr.lines if line.strip()]
    assert err == ["conformance: adapter 'EngineDown' failed: could not start the engine: connection refused"]
    assert not re.search(r"\d+ (passed|failed)", result.stdout.str())  # no verdicts: the run stopped


def test_a_raising_run_batch_stops_the_run_at_its_first_call(run_suite, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The async I/O properties against an adapter whose run_batch raises: the run stops after its first few
    calls (counted, not timed), with the exception, the adapter and a reproducer of the first
    schedule, and exit code 3; no property is retried or shrunk on it."""
    calls = tmp_path / "calls"
    monkeypatch.setenv("CRASHES_CALLS", str(calls))
    result = run_suite("--adapter", "tests.wrong_adapters:CountedCrashes")
    assert result.ret == 3, result.stdout.str()
    sizes = [int(n) for n in calls.read_text().split()]
    # its first job, then the isolation: halving it down to one schedule, then that schedule's
    # steps dropped one by one (at most 60 calls in all)
    assert sizes[0] > 1 and 1 in sizes and len(sizes) <= 61, sizes
    err = result.stderr.str()
    assert "RuntimeError: operator bug: index out of range" in err  # the traceback, then the lines
    *_, line, last = [line for line in result.stderr.lines if line.strip()]
    assert line.startswith("conformance: adapter 'CountedCrashes' is broken: run_batch raised RuntimeError: "
                           "operator bug: index out of range in the unordered queue (a batch of "), line
    assert "the schedule that breaks it alone" in line and line.endswith("(--conformance-keep-going runs on)")
    assert last.startswith("reproduce: python -m flink_semantics.conformance check --adapter "
                           "tests.wrong_adapters:CountedCrashes --json '{\"area\": \"async_io\""), last
    assert not re.search(r"\d+ (passed|failed)", result.stdout.str())  # no verdicts: the run stopped


def test_the_reproducer_names_the_schedule_that_raises_and_runs_as_printed(  # type: ignore[no-untyped-def]
        run_suite, pytester: pytest.Pytester) -> None:
    """An adapter that raises only on schedules completing record 2: the run stops naming one such
    schedule, shrunk (no step it can do without: without any one of its steps the schedule is
    malformed or no longer breaks the adapter), and the printed command, run as printed, shows
    the same error."""
    name = "tests.wrong_adapters:RaisesOnThirdCompletion"
    result = run_suite("--adapter", name, "-k", "test_ordered_mode")
    assert result.ret == 3, result.stdout.str()
    last = [line for line in result.stderr.lines if line.strip()][-1]
    assert last.startswith("reproduce: "), result.stderr.str()
    command = shlex.split(last.removeprefix("reproduce: "))
    schedule = json.loads(command[command.index("--json") + 1])
    completes = [s["record"] for s in schedule["steps"] if s["op"] == "complete"]
    assert 2 in completes and sum(s["op"] == "record" for s in schedule["steps"]) == 3, schedule
    for i in range(len(schedule["steps"])):  # each step is needed (capacity 1 needs 0 and 1 completed)
        shorter = schedule_from_dict({**schedule, "steps": schedule["steps"][:i] + schedule["steps"][i + 1:]},
                                     validate=False)
        assert not (well_formed(shorter) and raises(RaisesOnThirdCompletion(), shorter)), (i, schedule)
    again = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True,
                           cwd=pytester.path, timeout=HANG_GUARD_S)
    assert again.returncode == 3, again.stderr
    assert "RuntimeError: operator bug: the third completion overflows the queue" in again.stderr


def raises(adapter: Any, schedule: Any) -> bool:
    try:
        adapter.run_batch([schedule])
    except RuntimeError:
        return True
    return False


@pytest.mark.parametrize("wrong", [WrongCount, NotTraces])
def test_a_run_batch_without_one_trace_per_schedule_stops_the_run(wrong: type) -> None:
    """A run_batch that returns one value too few, or values that are not traces, ends the session with
    exit code 3, a line naming the adapter and what it returned for the schedule that breaks it alone
    (shrunk to no step), and the reproducer (in-process; the session's end itself is checked with a
    raising adapter above)."""
    name = f"tests.wrong_adapters:{wrong.__name__}"
    suite = Conformance(wrong(), name, deadline=60)
    schedule = parse_schedule(json.dumps(
        {"area": "async_io", "config": {"mode": "ordered", "capacity": 1}, "steps": [{"op": "end"}]}))
    with pytest.raises(pytest.exit.Exception) as stopped:
        suite.run_batch([schedule, schedule])
    assert stopped.value.returncode == 3
    assert re.fullmatch(
        rf"conformance: adapter '{wrong.__name__}' is broken: run_batch returned \d value\(s\) for 1 "
        r"schedule\(s\); it must return one Trace per schedule \(a batch of 2; the schedule that breaks it "
        r"alone, shrunk from 1 step to 0, \d+ run_batch call\(s\) to find it\); the run stops "
        r"\(--conformance-keep-going runs on\)\n"
        rf"reproduce: python -m flink_semantics.conformance check --adapter {name} "
        r"--json '.*\"steps\": \[\]}'",
        stopped.value.msg), stopped.value.msg


def test_keep_going_fails_the_properties_with_the_traceback(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "tests.wrong_adapters:Crashes", "--conformance-keep-going",
                       "-k", "test_configuration")
    out = result.stdout.str()
    assert result.ret == 1, out  # a test failure, not the session-ending exit 3
    assert re.search(r"1 failed", out), out
    assert "RuntimeError: operator bug: index out of range" in out


def test_schedule_counts_are_summarised(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "reference", "-k", "test_ordered_mode or malformed")
    out = result.stdout.str()
    assert result.ret == 0, out
    counts = re.findall(r"test_ordered_mode \[AIO-12\]: (\d+) schedules", out)
    assert counts and int(counts[0]) >= 200, out


def test_free_adapter_passes_and_scripted_properties_are_unsupported(run_suite) -> None:  # type: ignore[no-untyped-def]
    """A FREE adapter: scripted properties are unsupported, and so are the rules a property names with
    `needs=["scripted"]` (AIO-21 of test_results), while its other rules pass (AIO-18, AIO-19)."""
    result = run_suite("--adapter", "tests.free_order_adapter:FreeOrderAdapter",
                       "-k", "test_results or capacity_and_admission or end_of_input")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert re.search(r"UNSUPPORTED .*test_capacity_and_admission.*scripted: the adapter completes "
                     r"async_io calls in its own order \(free\)", out), out
    assert re.search(r"UNSUPPORTED conformance/test_async_io.py::test_results: \[AIO-21\] adapter "
                     r"'free-order' lacks scripted: the adapter completes async_io calls", out), out
    assert re.search(r"^AIO-21 +MUST +unsupported +\[AIO-21\]", out, re.M), out
    assert re.search(r"^AIO-18 +MUST +passed", out, re.M), out
    assert re.search(r"^AIO-19 +MUST +passed", out, re.M), out
    assert re.search(r"test_results \[AIO-18, AIO-19\]: \d+ schedules", out), out  # AIO-21 is not claimed


def test_completion_order_per_area(run_suite) -> None:  # type: ignore[no-untyped-def]
    """An adapter FREE in async I/O only: async I/O's scripted properties are unsupported, its
    unordered output is checked as a partial order, and key groups stay scripted (they run)."""
    result = run_suite(str(REPO / "conformance" / "test_key_groups.py"), "-v",
                       "--adapter", "tests.free_order_adapter:FreeInAsyncIoOnly",
                       "-k", "unordered_mode or capacity_and_admission or test_flink_key_groups")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert re.search(r"UNSUPPORTED .*test_capacity_and_admission.*scripted: the adapter completes "
                     r"async_io calls in its own order \(free\)", out), out
    assert re.search(r"test_flink_key_groups PASSED", out), out
    assert re.search(r"test_unordered_mode PASSED", out), out


def test_the_header_names_adapter_version_profile_seed_areas_and_capabilities(  # type: ignore[no-untyped-def]
        run_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = tmp_path / "report.json"
    result = run_suite("--adapter", "tests.wrong_adapters:NoTimeouts", "--areas", "async_io",
                       "-k", "test_ordered_mode", "--conformance-report", str(report))
    out = result.stdout.str()
    assert result.ret == 0, out
    header = [line for line in out.splitlines() if line.startswith("conformance: ")]
    assert header[0] == ("conformance: adapter NoTimeouts (tests.wrong_adapters:NoTimeouts); "
                         "completion order scripted"), header
    assert header[1] == "conformance: profile default, derandomized: the same schedules every run", header
    assert header[2] == "conformance: areas async_io", header
    assert header[3].startswith("conformance: capabilities supported (") and "async_io.ordered" in header[3]
    assert header[4] == ("conformance: capabilities unsupported (2, the reasons in the summary): "
                         "async_io.timeout, async_io.retry"), header
    run = json.loads(report.read_text())["run"]
    assert run["profile"] == "default" and run["seed"] is None and run["completion_order"] == "scripted"
    assert run["capabilities"]["async_io.timeout"] == "this engine has no processing-time timers"

    monkeypatch.setenv("CONFORMANCE_PROFILE", "thorough")  # the header comes before the tests: collect only
    result = run_suite("--adapter", "reference", "--areas", "async_io", "--collect-only",
                       "--hypothesis-seed", "1234")
    assert "conformance: profile thorough, seed 1234 (the same schedules again: --hypothesis-seed 1234)" \
        in result.stdout.str(), result.stdout.str()


@pytest.mark.parametrize("suite", ["test_spec_examples.py", "test_corpus.py"])
def test_the_thorough_profile_runs_the_spec_examples_and_the_corpus(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, suite: str) -> None:
    """Under random seeds the suite seeds each @given property; the tests of fixed schedules (the
    spec's examples, the corpus) have no @given, and hypothesis refuses @seed on them."""
    run = suite_runner(pytester, monkeypatch, str(REPO / "conformance" / suite))
    monkeypatch.setenv("CONFORMANCE_PROFILE", "thorough")
    monkeypatch.setenv("CONFORMANCE_CORPUS", str(REPO / "conformance" / "corpus"))
    result = run("--adapter", "reference", "--areas", "async_io")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert re.search(r"\b[1-9]\d* passed", out) and "failed" not in out, out


def test_unknown_rule_id_in_a_marker_is_a_collection_error(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(test_x="""
        import pytest

        @pytest.mark.rule("AIO-12", "AIO-999")
        def test_p():
            pass
    """)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", timeout=HANG_GUARD_S)
    out = result.stdout.str()
    assert result.ret == 2, out  # interrupted by a collection error
    assert "unknown rule ID(s) AIO-999" in out and "ERROR collecting" in out


@pytest.mark.parametrize(("marker", "unknown"), [
    ('@pytest.mark.rule("AIO-12", needs=["async_io.watermark"])', "async_io.watermark"),
    ('@pytest.mark.needs("async_io.ordered", "scripted", "async_io.timeouts")', "async_io.timeouts"),
])
def test_unknown_capability_in_needs_is_a_collection_error(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           marker: str, unknown: str) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(test_x=f"""
        import pytest

        {marker}
        def test_p():
            pass
    """)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", timeout=HANG_GUARD_S)
    out = result.stdout.str()
    assert result.ret == 2, out  # interrupted by a collection error
    assert f"test_p: `needs` names unknown capabilities {unknown} (an area's CAPABILITIES" in out, out


# --------------------------------------------------------------------------
# Per-rule verdicts, the JSON report, expected failures, --strict, --areas, opt-in capabilities
# --------------------------------------------------------------------------


def verdict_lines(out: str) -> dict[str, str]:
    """rule ID -> its line of the verdict table."""
    return {m[1]: m[0] for m in re.finditer(r"^([A-Z]+-\d+) .*$", out, re.M)}


def test_verdict_table_and_json_report_name_the_failed_rules(run_suite, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = tmp_path / "report.json"
    result = run_suite("--adapter", "tests.wrong_adapters:CapacityOffByOne", "-k", "capacity_and_admission",
                       "--conformance-report", str(report))
    out = result.stdout.str()
    assert result.ret == 1, out
    lines = verdict_lines(out)
    failed = r"MUST\s+failed\s+reproduce: python -m flink_semantics.conformance check"
    assert re.search(failed, lines["AIO-7"]), out
    for rule in ("AIO-6", "AIO-9"):  # the difference may concern them, but does not single them out
        assert "inconclusive" in lines[rule], out
    assert "inconclusive" in lines["AIO-8"]  # its only property failed on AIO-7 first
    assert "untested" in lines["AIO-10"] and "not run" in lines["AIO-12"]  # deselected by -k
    data = json.loads(report.read_text())
    assert data["adapter"] == "tests.wrong_adapters:CapacityOffByOne" and data["areas"] == list(areas())
    rules = {r["id"]: r for r in data["rules"]}
    assert set(rules["AIO-7"]) == {"id", "area", "level", "verdict", "schedules", "reason", "reproducer"}
    assert rules["AIO-7"]["verdict"] == "failed" and rules["AIO-7"]["area"] == "async_io"
    assert rules["AIO-7"]["reproducer"].startswith("python -m flink_semantics.conformance check")
    assert rules["SCH-1"]["area"] == "schedules" and rules["AIO-10"]["verdict"] == "untested"


def test_expected_failures_pass_the_run_and_fail_it_with_strict(run_suite) -> None:  # type: ignore[no-untyped-def]
    args = ("--adapter", "tests.wrong_adapters:KnownCapacityBug", "-k", "capacity_and_admission")
    result = run_suite(*args)
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "1 xfailed" in out
    lines = verdict_lines(out)
    assert re.search(r"expected failure\s+admits one element too many", lines["AIO-7"]), out
    # The divergence on AIO-7 (AIO-6, AIO-9 possible) did not stop the property: its
    # other rule, AIO-8, was checked on all its schedules and passed, not left inconclusive.
    assert re.search(r"passed\s+\d+ schedules", lines["AIO-8"]), out
    strict = run_suite(*args, "--strict")
    assert strict.ret == 1, strict.stdout.str()


def test_stale_expected_failure_is_reported_and_fails_only_with_strict(run_suite) -> None:  # type: ignore[no-untyped-def]
    args = ("--adapter", "tests.wrong_adapters:StaleExpectedFailure", "-k", "test_ordered_mode")
    result = run_suite(*args)
    out = result.stdout.str()
    assert result.ret == 0, out
    assert re.search(r"stale\s+listed as an expected failure", verdict_lines(out)["AIO-12"]), out
    assert run_suite(*args, "--strict").ret == 1


def test_expected_failures_file_naming_an_unknown_rule_is_a_usage_error(run_suite, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "xfail.json"
    bad.write_text('{"AIO-999": "no such rule"}')
    result = run_suite("--adapter", "reference", "--expected-failures", str(bad))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "'AIO-999' is not a rule of spec/" in result.stderr.str()


def test_areas_option_selects_and_refuses_unknown_areas(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "reference", "--areas", "no_such_area")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--areas: unknown area(s) no_such_area; known: async_io" in result.stderr.str()
    assert run_suite("--adapter", "reference", "--areas", "async_io", "-k", "test_ordered_mode").ret == 0


def test_capabilities_not_declared_are_unsupported(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "tests.wrong_adapters:DeclaresLittle", "-k", "ordered or statuses")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert re.search(r"UNSUPPORTED .*test_unordered_mode.*async_io.unordered: not declared", out), out
    lines = verdict_lines(out)
    assert "passed" in lines["AIO-12"] and re.search(r"unsupported\s+.*not declared", lines["AIO-51"]), out


def test_examples_are_gathered_into_the_adapters_jobs(run_suite, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "batches.log"
    monkeypatch.setenv("BATCH_LOG", str(log))
    result = run_suite("--adapter", "tests.wrong_adapters:LogsItsBatches", "-k", "test_ordered_mode")
    out = result.stdout.str()
    assert result.ret == 0, out
    sizes = [int(n) for n in log.read_text().split()]
    total = int(re.search(r"throughput: (\d+) distinct schedules", out)[1])  # type: ignore[index]
    assert sum(sizes) == total and total >= 300, (sizes, total)
    # 100 examples of at most 12 schedules each, run in a few jobs of up to 200, none larger: each
    # job starts with at least a quarter of 200 gathered, but the last, which takes what is left.
    assert min(sizes[:-1]) >= 50 and max(sizes) <= 200, sizes


def test_the_summary_counts_traces_compared_and_the_events_lost_or_duplicated(  # type: ignore[no-untyped-def]
        run_suite, tmp_path: Path) -> None:
    """The fault runs' tally: a conforming adapter shows 0 different; one whose sink repeats the last
    event shows the failing trace with exactly one duplicated event and none lost."""
    report = tmp_path / "r.json"
    ok = run_suite("--adapter", "reference", "-k", "test_ordered_mode", "--conformance-report", str(report))
    assert ok.ret == 0, ok.stdout.str()
    counts = json.loads(report.read_text())["differences"]["async_io"]
    assert counts["compared"] >= 100 and counts["different"] == counts["lost"] == counts["duplicated"] == 0
    assert re.search(r"compared with the reference: async_io \d+ traces, 0 different, 0 events lost, "
                     r"0 duplicated", ok.stdout.str()), ok.stdout.str()
    bad = run_suite("--adapter", "tests.wrong_adapters:DuplicatesItsLastEvent", "-k", "test_ordered_mode",
                    "--conformance-report", str(report))
    assert bad.ret == 1, bad.stdout.str()
    counts = json.loads(report.read_text())["differences"]["async_io"]
    assert counts["different"] >= 1 and counts["lost"] == 0
    assert counts["duplicated"] == counts["different"], counts  # one extra event per differing trace


def test_an_adapter_may_run_two_gathered_jobs_at_once(run_suite, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`concurrent_jobs = 2`: jobs overlap, never more than two at a time, and every schedule is
    run once and checked."""
    log = tmp_path / "jobs.log"
    monkeypatch.setenv("BATCH_LOG", str(log))
    result = run_suite("--adapter", "tests.wrong_adapters:RunsTwoJobsAtOnce", "-k", "test_ordered_mode")
    out = result.stdout.str()
    assert result.ret == 0, out
    rows = (line.split() for line in log.read_text().splitlines())
    jobs = [(float(a), float(b), int(n)) for a, b, n in rows]
    total = int(re.search(r"throughput: (\d+) distinct schedules", out)[1])  # type: ignore[index]
    assert sum(n for _, _, n in jobs) == total and max(n for _, _, n in jobs) <= 40, jobs
    running = [sum(a <= t < b for a, b, _ in jobs) for t, _, _ in jobs]  # jobs running as each starts
    assert max(running) == 2, running


def test_a_difference_found_in_a_gathered_job_is_shrunk_on_replay(run_suite) -> None:  # type: ignore[no-untyped-def]
    """OrderedAsUnordered fails in a large gathered job; the replay shrinks it to one small schedule."""
    result = run_suite("--adapter", "tests.wrong_adapters:OrderedAsUnorderedInJobs",
                       "-k", "test_ordered_mode")
    out = result.stdout.str()
    assert result.ret == 1, out
    schedule = out.split("\nschedule:\n", 1)[1].split("\nfirst divergent step", 1)[0]  # the first report's
    steps = re.findall(r"^  (?:>>|  )\s+\d+: ", schedule, re.M)
    assert 1 <= len(steps) <= 6, out  # shrunk: a handful of steps, not a generated batch
