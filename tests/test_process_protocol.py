"""The process protocol (docs/process-protocol.md): adapters/process.py against engines that keep it
(the built-in adapters served by adapters/process_server.py) and engines that break it in one way
each (tests/process_engine.py); the suite run through it gives the verdicts of the adapter run
in-process."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from flink_semantics.adapters.process import ProcessAdapter, ProtocolError, parse_hello
from flink_semantics.adapters.process_server import hello_of
from flink_semantics.adapters.reference import ReferenceAdapter
from flink_semantics.conformance.registry import (
    adapter_attribute,
    budget_hints,
    load_adapter,
    process_command,
    resolve,
)
from flink_semantics.reference import expected_trace
from flink_semantics.spec.adapter import DEFAULT_BATCH_SIZE, AdapterError
from flink_semantics.spec.rules import load_rules
from flink_semantics.spec.schedule import parse_schedule

from tests.hang import HANG_GUARD_S

REPO = Path(__file__).resolve().parent.parent
ENGINE = [sys.executable, str(REPO / "tests" / "process_engine.py")]
SERVER = [sys.executable, "-m", "flink_semantics.adapters.process_server"]
INSTALLED = any(e.value == "flink_semantics.conformance.plugin" for e in entry_points(group="pytest11"))
PLUGIN = () if INSTALLED else ("-p", "flink_semantics.conformance.plugin")
SCHEDULES = [parse_schedule(text, validate=False) for text in (
    '{"area": "async_io", "config": {"mode": "ordered", "capacity": 2}, "steps": [{"op": "record", '
    '"value": 1}, {"op": "end"}, {"op": "complete", "record": 0, "result": [1]}]}',
    '{"area": "async_io", "config": {"capacity": 0}, "steps": []}',  # refused: a `rejected` trace
    '{"area": "key_groups", "config": {"max_parallelism": 128, "parallelism": 2}, "steps": '
    '[{"op": "update", "key": 7}, {"op": "update", "key": "\\ud800", "type": "string"}]}',
)]


def misbehaving(how: str, **guards: float) -> ProcessAdapter:
    return ProcessAdapter([*ENGINE, "misbehave", how], cwd=str(REPO), **guards)


def shell_line(argv: list[str]) -> str:
    return " ".join(json.dumps(a) for a in argv)  # quoted as shlex reads it back (no quotes inside)


def run_suite(tmp_path: Path, adapter: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The suite in a subprocess, from the repository root, with its corpus in tmp_path."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "0", "CONFORMANCE_CORPUS": str(tmp_path)}
    env.pop("CONFORMANCE_ADAPTER", None)
    env.pop("CONFORMANCE_PROFILE", None)
    return subprocess.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", *PLUGIN,
                           "-q", "--adapter", adapter, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)


# --------------------------------------------------------------------------
# An engine that keeps the protocol
# --------------------------------------------------------------------------


def test_served_reference_gives_the_reference_traces_and_exits_0_on_close() -> None:
    adapter = ProcessAdapter([*ENGINE, "serve", "reference"], cwd=str(REPO))
    adapter.prepare()
    assert (adapter.name, adapter.completion_order) == ("reference", "scripted")
    assert adapter.capabilities() == ReferenceAdapter().capabilities()
    assert adapter.expected_failures == {} and adapter.examples is None and adapter.batch_size is None
    traces = adapter.run_batch(SCHEDULES)
    assert traces == [expected_trace(s) for s in SCHEDULES]
    assert [e.event for e in traces[1]] == ["rejected"]
    assert adapter.run_batch(SCHEDULES[:1]) == traces[:1]  # the next run, the next id
    adapter.close()
    assert re.search(r": 2 batches, 4 schedules; hello after [0-9.]+ s; it exited with status 0$",
                     adapter.summary()[0]), adapter.summary()


def test_the_server_keeps_stdout_for_protocol_lines() -> None:
    """An adapter that prints (and a child process writing to file descriptor 1) does not break the
    protocol: the server sends fd 1 to stderr and keeps a copy of it for the protocol."""
    adapter = ProcessAdapter([*SERVER, "tests.process_engine:PrintingReference"], cwd=str(REPO),
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert adapter.run_batch(SCHEDULES) == [expected_trace(s) for s in SCHEDULES]
    finally:
        adapter.close()
    assert adapter.summary()[0].endswith("it exited with status 0"), adapter.summary()


def test_a_factory_the_server_cannot_build_is_an_error_instead_of_the_hello() -> None:
    adapter = ProcessAdapter([*SERVER, "no_such_module_33:Adapter"], cwd=str(REPO))
    why = ("engine 'python' could not start: cannot build no_such_module_33:Adapter: ModuleNotFoundError: "
           "No module named 'no_such_module_33'")
    with pytest.raises(AdapterError, match="^" + re.escape(why)):
        adapter.prepare()


def test_the_hello_of_a_python_adapter_round_trips() -> None:
    hello = parse_hello(json.dumps(hello_of(ReferenceAdapter(), examples=5, batch_size=30)))
    assert (hello.engine, hello.examples, hello.batch_size) == ("reference", 5, 30)
    assert dict(hello.capabilities) == dict(ReferenceAdapter().capabilities())


def test_class_members_are_none_before_the_hello() -> None:
    """The suite reads nothing from the class: everything comes from the hello."""
    assert ProcessAdapter.expected_failures is None and ProcessAdapter.examples is None
    assert ProcessAdapter.batch_size is None and ProcessAdapter.name is None


@pytest.mark.parametrize("kwargs, message", [
    (dict(command="python engine.py"), "command: a non-empty sequence"),
    (dict(command=[]), "command: a non-empty sequence"),
    (dict(command=["python", ""]), "command: a non-empty sequence"),
    (dict(command=["python"], close_guard_s=0), "close_guard_s: a hang guard must be > 0"),
])
def test_bad_arguments_are_value_errors_naming_the_parameter(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=re.escape(message)):
        ProcessAdapter(**kwargs)


# --------------------------------------------------------------------------
# Engines that break it: each error path gives its message
# --------------------------------------------------------------------------

AT_START = [
    ("exit-at-start", AdapterError,
     "engine 'python' closed its output and exited with status 3 before its hello; its stderr ends: "
     "engine: cannot find its configuration"),
    ("not-json", ProtocolError, "engine 'python': the engine's first line is not JSON: 'hello, suite'"),
    ("not-hello", ProtocolError, "bad hello: the engine's first line must be a hello object"),
    ("protocol-2", ProtocolError, "the engine speaks protocol 2; this suite speaks protocol 1 only"),
    ("bad-capability", ProtocolError, "capability 'key_groups.teleport' is not one of the suite's"),
    ("start-error", AdapterError, "engine 'python' could not start: no Java runtime found"),
]


@pytest.mark.parametrize("how, error, message", AT_START, ids=[c[0] for c in AT_START])
def test_an_engine_without_a_proper_hello_is_refused(how: str, error: type, message: str) -> None:
    adapter = misbehaving(how)
    with pytest.raises(error) as raised:
        adapter.prepare()
    assert str(raised.value).startswith(message) or message in str(raised.value).splitlines()[0], raised.value
    assert adapter._child is not None and adapter._child.proc.returncode is not None  # stopped
    with pytest.raises(AdapterError, match="closed"):
        adapter.run_batch(SCHEDULES)  # it is not started again
    adapter.close()


IN_RUN = [
    ("wrong-id", ProtocolError, "engine 'reference' answered run 1 with the id 2"),
    ("wrong-count", ProtocolError,
     "engine 'reference' answered run 1 of 3 schedule(s) with 2 traces: one trace per schedule, in order"),
    ("bad-trace", ProtocolError,
     "engine 'reference' answered run 1 with trace 0, not a async_io trace: unknown trace event "
     "'no_such_event'"),
    ("error", AdapterError,
     "engine 'reference' could not run batch 1: the batch could not run: no slots left"),
    ("exit-in-run", AdapterError,
     "engine 'reference' closed its output and exited with status 5 before its reply to run 1; "
     "its stderr ends: engine: out of memory"),
    ("noise", ProtocolError,
     "engine 'reference' answered run 1 with a line that is not a traces or error message: "
     "'INFO engine: running a batch'"),
]


@pytest.mark.parametrize("how, error, message", IN_RUN, ids=[c[0] for c in IN_RUN])
def test_a_broken_reply_is_an_adapter_error_with_its_message(how: str, error: type, message: str) -> None:
    adapter = misbehaving(how)
    adapter.prepare()
    with pytest.raises(error) as raised:
        adapter.run_batch(SCHEDULES)
    assert str(raised.value).splitlines()[0].startswith(message), raised.value
    adapter.close()
    assert adapter._child is not None and adapter._child.proc.returncode is not None


def test_the_stderr_tail_follows_the_first_line() -> None:
    adapter = misbehaving("exit-at-start")
    with pytest.raises(AdapterError) as raised:
        adapter.prepare()
    assert str(raised.value).splitlines()[1:] == ["  stderr: engine: cannot find its configuration"]


def test_an_engine_that_never_says_hello_is_killed_at_the_hang_guard() -> None:
    # The engine sleeps for an hour: the guard is what ends the wait, whatever the machine's speed.
    adapter = misbehaving("hang-hello", hello_guard_s=2)
    with pytest.raises(AdapterError, match=r"^engine 'python' hung: its hello did not come within the hang "
                                           r"guard of 2 s; killed"):
        adapter.prepare()
    assert adapter._child is not None and adapter._child.proc.returncode == -9


def test_an_engine_that_ignores_close_is_killed_at_the_hang_guard() -> None:
    adapter = misbehaving("hang-close", close_guard_s=1)
    assert adapter.run_batch(SCHEDULES[:1]) == [expected_trace(SCHEDULES[0])]
    adapter.close()
    assert adapter._child is not None and adapter._child.proc.returncode == -9
    assert adapter.summary()[0].endswith("it was killed")


# --------------------------------------------------------------------------
# Plugged in: --adapter process:<command line>
# --------------------------------------------------------------------------


def test_process_names_resolve_and_split_as_a_shell_would() -> None:
    assert process_command("process:java -cp 'a b.jar' Main") == ["java", "-cp", "a b.jar", "Main"]
    assert resolve("process:engine --fast") == "process:engine --fast"
    for bad, why in (("process:", "give the engine's command"), ("process:a 'b", "does not parse")):
        with pytest.raises(AdapterError, match=why):
            resolve(bad)


def test_a_subclass_declares_through_its_hello_once_loaded() -> None:
    """What the suite reads before building an adapter (registry.adapter_attribute, budget_hints):
    a subclass's class attributes at once, its hello's declarations once load_adapter started it."""
    spec = "tests.process_engine:ServedReference"
    assert adapter_attribute(spec, "shrink") is False
    assert adapter_attribute(spec, "examples") is None and budget_hints(spec) == (DEFAULT_BATCH_SIZE, None)
    adapter = load_adapter(spec)
    try:
        assert adapter.name == "reference"  # started by load_adapter: its hello is read
        assert adapter_attribute(spec, "examples") == 7 and budget_hints(spec) == (DEFAULT_BATCH_SIZE, 7)
        assert adapter_attribute(spec, "expected_failures") == {}
    finally:
        adapter.close()


def test_a_command_that_does_not_exist_is_one_clear_error() -> None:
    with pytest.raises(AdapterError, match=r"^cannot start the engine \['no-such-engine-33', '--serve'\]: "
                                           "No such file or directory$"):
        load_adapter("process:no-such-engine-33 --serve")


def test_the_suite_through_the_protocol_gives_the_in_process_verdicts(tmp_path: Path) -> None:
    """The reference served behind the protocol (declaring 5 examples a property in its hello) and the
    reference in-process on the same budget: the same verdict for every rule, on the same schedules."""
    served = "process:" + shell_line([*SERVER, "flink_semantics.adapters.reference:ReferenceAdapter",
                                      "--examples", "5"])
    reports = {}
    for name, adapter in (("served", served), ("in-process", "tests.process_engine:SmallReference")):
        report = tmp_path / f"{name}.json"
        result = run_suite(tmp_path / name, adapter, "--areas", "key_groups",
                           "--conformance-report", str(report))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        reports[name] = json.loads(report.read_text())
    verdicts = {name: {r["id"]: (r["verdict"], r["schedules"]) for r in report["rules"]}
                for name, report in reports.items()}
    assert verdicts["served"] == verdicts["in-process"]
    assert sum(v == "passed" for v, _ in verdicts["served"].values()) >= 25  # the area ran
    run = reports["served"]["run"]
    assert run["profile"] == f"default/{served}"  # the hello's examples sized the budget
    assert run["adapter_version"] == "reference " + ReferenceAdapter.version  # type: ignore[operator]


def test_a_wrong_engine_behind_the_protocol_fails_with_a_reproducer_through_it(tmp_path: Path) -> None:
    wrong = "tests.wrong_key_groups:HashModParallelism"
    served = "process:" + shell_line([*SERVER, wrong, "--examples", "5"])
    result = run_suite(tmp_path, served, "--areas", "key_groups", "-k", "test_flink_key_groups",
                       "--conformance-shrink", "no")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "adapter 'HashModParallelism' does not conform" in result.stdout
    assert re.search(r"^KG-6 +MUST +failed", result.stdout, re.M), result.stdout[-3000:]
    command = [line for line in result.stdout.splitlines() if line.startswith("reproduce: ")][0]
    assert command.startswith(f"reproduce: python -m flink_semantics.conformance check --adapter '{served}' ")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "0"}
    argv = [sys.executable, *shlex.split(command.removeprefix("reproduce: python"))]
    again = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert again.returncode == 1 and "adapter 'HashModParallelism' does not conform" in again.stdout, again


def test_the_suite_reports_an_engine_error_in_one_line_and_stops(tmp_path: Path) -> None:
    result = run_suite(tmp_path, "process:" + shell_line([*ENGINE, "misbehave", "error"]),
                       "--areas", "key_groups", "-x", "--conformance-shrink", "no")
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert ("conformance: adapter 'reference' failed: engine 'reference' could not run batch 1: the batch "
            "could not run: no slots left") in result.stderr


def test_an_engine_that_cannot_start_is_a_usage_error(tmp_path: Path) -> None:
    """Exit status 4 and one line, as for an adapter module that does not import (the other ways an
    engine cannot start give their lines above: AT_START)."""
    adapter = "process:" + shell_line([*ENGINE, "misbehave", "protocol-2"])
    result = run_suite(tmp_path, adapter, "--areas", "key_groups")
    assert result.returncode == 4, result.stdout[-3000:] + result.stderr[-3000:]
    first = [x for x in result.stderr.splitlines() if x.startswith("conformance: cannot load adapter")]
    assert first and "this suite speaks protocol 1 only" in first[0], result.stderr


def test_expected_failures_of_the_hello_are_checked_against_the_spec(tmp_path: Path) -> None:
    assert "KG-999" not in load_rules()
    result = run_suite(tmp_path, "process:" + shell_line([*ENGINE, "misbehave", "bad-expected-failure"]),
                       "--areas", "key_groups")
    assert result.returncode == 4, result.stdout[-3000:] + result.stderr[-3000:]
    assert "expected failures: the adapter's expected_failures: 'KG-999' is not a rule of spec/" in (
        result.stdout + result.stderr)


# --------------------------------------------------------------------------
# The document's own examples
# --------------------------------------------------------------------------


def test_check_runs_one_schedule_through_a_process_engine() -> None:
    served = "process:" + shell_line([*ENGINE, "serve", "reference"])
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "0"}
    command = [sys.executable, "-m", "flink_semantics.conformance", "check", "--adapter", served,
               "--json", SCHEDULES[2].to_json()]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("conforms: adapter 'reference' gives the reference trace (2 events)")


def javascript_sketch() -> str:
    """The Node.js engine of docs/process-protocol.md, as written there."""
    text = (REPO / "docs" / "process-protocol.md").read_text(encoding="utf-8")
    block = text.split("```javascript\n", 1)[1].split("```", 1)[0]
    return "\n".join(line.removeprefix("   ") for line in block.splitlines()) + "\n"


@pytest.mark.skipif(shutil.which("node") is None, reason="the document's sketch is JavaScript: needs node")
def test_the_documents_javascript_sketch_keeps_the_protocol(tmp_path: Path) -> None:
    engine = tmp_path / "engine.mjs"
    engine.write_text(javascript_sketch(), encoding="utf-8")
    adapter = ProcessAdapter(["node", str(engine)])
    adapter.prepare()
    assert (adapter.name, adapter.version) == ("js-sketch", "js-sketch 0.0.1")
    assert adapter.capabilities() == {"key_groups": "this sketch runs no schedules yet"}
    traces = adapter.run_batch(SCHEDULES)
    assert [t.events for t in traces] == [(), (), ()]
    adapter.close()
    assert adapter.summary()[0].endswith("it exited with status 0"), adapter.summary()
