"""The sources engine of the Java engine (adapters/flink/java/.../SourcesEngine.java): Flink 2.3.0's
SplitAssignmentTracker keeps the split assignments (SRC-7, SRC-11, SRC-17, SRC-18, SRC-21, SRC-22),
inside the project's harness of enumerator, readers and sink.  Expected traces come from the spec's
examples and from the reference model (`expected_trace`).

Marked `pyflink`; the tests that run Java are skipped, with the reason, without a JDK or the jars.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from flink_semantics.adapters import flink
from flink_semantics.conformance.examples import load_examples
from flink_semantics.reference import expected_trace
from flink_semantics.spec.area import get_area
from flink_semantics.spec.areas.sources import required_capabilities
from flink_semantics.spec.schedule import Schedule, schedule_from_dict, trace_from_dict

from tests.hang import HANG_GUARD_S

pytestmark = pytest.mark.pyflink

AREA = get_area("sources")
UNSUPPORTED = {"sources.rescale", "sources.region_failover"}


def example(config: str, steps: list[str]) -> Schedule:
    """A schedule in the spec's notation (spec/sources.md)."""
    n = AREA.notation
    return schedule_from_dict({"area": "sources", "config": n.parse_config(config),
                               "steps": [n.parse_step(s) for s in steps]})


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command line of Main, compiled into a temporary directory."""
    lib = flink.flink_lib()
    if lib is None:
        pytest.skip("the apache-flink 2.3.0 jars are not here ($FLINK_LIB, or tox -e conformance-pyflink)")
    javac, java = flink.jdk_tool("javac"), flink.jdk_tool("java")
    if javac is None or java is None:
        pytest.skip("no JDK (javac, java) on JAVA_HOME or PATH")
    classes = tmp_path_factory.mktemp("flink-sources")
    flink.compile_engine(lib, javac, classes)
    return [java, "-cp", f"{lib}/*:{classes}", flink.MAIN, str(flink.EXPECTED_FAILURES)]


def converse(engine: list[str], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Main's lines (parsed) for the messages; Main exits 0."""
    done = subprocess.run(engine, input="".join(json.dumps(m) + "\n" for m in messages), capture_output=True,
                          text=True, encoding="utf-8", timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def traces(engine: list[str], schedules: list[Schedule]) -> list[Any]:
    lines = converse(engine, [{"type": "run", "id": 1, "schedules": [s.to_dict() for s in schedules]},
                              {"type": "close"}])
    assert lines[1]["type"] == "traces", lines[1]
    return [trace_from_dict(t, "sources") for t in lines[1]["traces"]]


def test_hello(engine: list[str]) -> None:
    """The sources engine's capabilities: rescale and region failover unsupported, naming Flink's class."""
    caps = converse(engine, [{"type": "close"}])[0]["capabilities"]
    assert caps["sources"] is None and caps["sources.checkpoint"] is None
    assert caps["sources.reader_failover"] is None and caps["sources.global_failover"] is None
    assert "RoundRobinOperatorStateRepartitioner" in caps["sources.rescale"]
    assert "RestartPipelinedRegionFailoverStrategy" in caps["sources.region_failover"]


def test_examples(engine: list[str]) -> None:
    """Every example of spec/sources.md that the engine supports gives the spec's trace."""
    examples = [e for e in load_examples() if e.area == "sources" and e.refusal is None
                and not required_capabilities(e.schedule) & UNSUPPORTED]
    assert len(examples) > 10
    got = traces(engine, [e.schedule for e in examples])
    assert {e.id: t for e, t in zip(examples, got)} == {e.id: e.trace for e in examples}


SCHEDULES = [
    # SRC-11, SRC-21, SRC-22: splits 0 (under checkpoint 1) and 2 (uncheckpointed) go back in that
    # order when reader 0 fails with no completed checkpoint.
    example("readers=2 splits=[1, 1, 1]",
            ["register r0", "register r1", "request r0", "request r1", "checkpoint 1", "barrier 1",
             "request r0", "fail 0", "register r0", "request r0", "end"]),
    # SRC-17: completing checkpoint 1 drops its assignments; only split 2 goes back.
    example("readers=1 splits=[2, 2, 2]",
            ["register r0", "request r0", "poll r0 1", "checkpoint 1", "barrier 1", "complete 1",
             "request r0", "checkpoint 2", "abort 2", "fail 0", "register r0", "end"]),
    # SRC-4, SRC-27, SRC-28: a push to an unregistered reader fails the job; the tracker starts empty.
    example("readers=2 splits=[1, 2] bounded=no",
            ["register r0", "assign r0", "assign r1", "discover 3", "register r0", "register r1",
             "request r1", "request r0", "poll r0 3", "fail_enumerator"]),
]


def test_traces_are_the_references(engine: list[str]) -> None:
    """Hand-written schedules on the tracker's bookkeeping give the reference model's traces."""
    events = [e.event for t in (expected_trace(s) for s in SCHEDULES) for e in t.events]
    assert "splits_back" in events and "global_failover" in events
    assert traces(engine, SCHEDULES) == [expected_trace(s) for s in SCHEDULES]


def test_unsupported_graph(engine: list[str]) -> None:
    """A job graph (region failover) is refused with an error naming Flink's class, not a trace."""
    graph = example("readers=1 splits=[1] tasks=1 pipelined=[0>1]", ["register r0", "end"])
    lines = converse(engine, [{"type": "run", "id": 2, "schedules": [graph.to_dict()]}, {"type": "close"}])
    assert lines[1]["type"] == "error" and "RestartPipelinedRegionFailoverStrategy" in lines[1]["message"]
