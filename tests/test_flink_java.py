"""The Java engine on Flink 2.3.0's own classes (adapters/flink/): its protocol and its key groups
engine, against the reference model and the spec's examples.

`Main` (adapters/flink/java/org/flinksemantics/engine/Main.java) is compiled with `javac` against
the apache-flink 2.3.0 jars and driven by piping JSON lines to it (docs/process-protocol.md): its
hello, traces of key groups schedules whose expected traces come from the reference model, the
refused configurations, errors, and the same trace for the same schedule.  `FlinkAdapter` runs
the same engine behind adapters/process.py.

Marked `pyflink`: `tox -e conformance-pyflink` runs it.  The tests that run Java are skipped, with
the reason, without a JDK (`javac`, `java`) or without the jars ($FLINK_LIB, else `pyflink/lib` of
the interpreter's apache-flink or of the tox env `conformance-pyflink`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.adapters import flink
from flink_semantics.conformance.checker import compare
from flink_semantics.conformance.examples import load_examples
from flink_semantics.reference import expected_trace
from flink_semantics.spec.adapter import SCRIPTED, AdapterError
from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import Schedule, schedule_from_dict, trace_from_dict

from tests.flink_engine import converse
from tests.hang import HANG_GUARD_S

pytestmark = pytest.mark.pyflink

AREA = get_area("key_groups")


def example(config: str, steps: list[str], validate: bool = True) -> Schedule:
    """A schedule in the spec's notation (validate=False: a configuration KG-8 rejects)."""
    n = AREA.notation
    return schedule_from_dict({"area": "key_groups", "config": n.parse_config(config),
                               "steps": [n.parse_step(s) for s in steps]}, validate)


def traces(engine: list[str], schedules: list[Schedule], area: str = "key_groups") -> list[Any]:
    """Main's traces of the schedules (one run message), as Trace objects."""
    lines, status = converse(engine, [{"type": "run", "id": 7, "schedules": [s.to_dict() for s in schedules]},
                                      {"type": "close"}])
    assert status == 0
    assert lines[1]["type"] == "traces" and lines[1]["id"] == 7, lines[1]
    return [trace_from_dict(t, area) for t in lines[1]["traces"]]


def test_hello(engine: list[str]) -> None:
    """The hello names Flink's version, the engines' capabilities and expected failures (each area's
    file under adapters/flink/expected-failures), and every area's completion order; close ends
    Main with status 0."""
    lines, status = converse(engine, [{"type": "close"}])
    assert status == 0 and len(lines) == 1
    hello = lines[0]
    assert hello["type"] == "hello" and hello["protocol"] == 1
    assert hello["engine"] == {"name": "flink", "version": "Apache Flink 2.3.0 (Java classes)"}
    caps = hello["capabilities"]
    assert caps["key_groups"] is None and caps["key_groups.rescale"] is None
    assert "Spark" in caps["key_groups.spark_hash"]
    assert caps["watermarks"] is None and caps["watermarks.alignment"] is None
    assert caps["sources"] is None and caps["mini_batch"] is None and caps["async_io"] is None
    areas = ("async_io", "sources", "watermarks", "key_groups", "mini_batch")
    assert hello["completion_order"] == dict.fromkeys(areas, "scripted")
    on_disk = {}
    for area in areas:
        on_disk.update(json.loads((flink.EXPECTED_FAILURES / f"{area}.json").read_text(encoding="utf-8")))
    assert hello["expected_failures"] == on_disk


# Schedules of the spec's examples, and ones the examples do not show (surrogates, a pyflink null
# key, a scale down then up, broadcast copies that differ); the expected traces are the reference's.
SCHEDULES = [
    example("parallelism=2 max_parallelism=10", [  # KG-13
        "update 21", "update 7", "update 0", "update 3", "update 19", "update 10", "checkpoint",
        "restore 3"]),
    example("parallelism=3 max_parallelism=10", [  # KG-13, down, an update lost
        "update 21", "update 0", "update 3 2", "update 19", "update 10", "checkpoint", "update 0",
        "restore 2", "update 0"]),
    example("parallelism=2", ["update null", "update 7", "update 7L", 'update "\\ud800"',
                              'update "\\ud83d\\ude00"', 'update "😀"', "checkpoint", "restore 1"]),
    example("hash=pyflink parallelism=2", ["update null", "update 7", 'update "abc"', "checkpoint",
                                           "restore 5"]),
    example("parallelism=2", ["checkpoint", "restore 3 max=256", "restore 129", "restore 0", "restore 3",
                              "update 7"]),  # KG-16, KG-15, KG-8, then the default adopted
    example("parallelism=2", ["add_state t0 a 1", "add_state t0 a 2", "add_state t1 a 3", "add_state t1 a 4",
                              "add_state t0 b 5", "add_state t0 b 6", "add_state t1 b 7", "add_state t1 b 8",
                              "add_state t0 s 9 union", "add_state t1 r 10 broadcast", "checkpoint",
                              "restore 3"]),  # KG-17..KG-21
    example("parallelism=2", ["add_state t0 offsets 5", "add_state t0 offsets 1",
                              "add_state t3 rules 2 broadcast", "checkpoint", "restore 2"]),  # KG-20
    example("parallelism=100", ["update 7", "update 4", "checkpoint", "restore 30000"]),  # KG-9, KG-10
]


def test_traces_are_the_references(engine: list[str]) -> None:
    """Flink's classes give the reference model's trace on each schedule, in one run message."""
    got = traces(engine, SCHEDULES)
    for schedule, trace in zip(SCHEDULES, got, strict=True):
        assert trace == expected_trace(schedule), schedule


def test_refused_configurations(engine: list[str]) -> None:
    """KG-8: a configuration out of bounds is rejected (the single rejected event, step -1), with
    the message of Flink's check."""
    refused = [example(config, ["update 7"], validate=False) for config in (
        "parallelism=0", "parallelism=5 max_parallelism=4", "parallelism=1 max_parallelism=32769",
        "parallelism=32769")]
    for schedule, trace in zip(refused, traces(engine, refused), strict=True):
        assert trace.rejected, schedule
        assert trace.events[0].step == -1 and trace.events[0].reason


def test_merged_lists_same_trace(engine: list[str]) -> None:
    """KG-17's freedom (C3), on Flink's classes: a scale down merges split lists in the order of
    their state handles' hash codes (RoundRobinOperatorStateRepartitioner's merge map), not in old
    subtask order, and a later rescale deals that order out, so the chunks hold other elements than
    the reference's, in the sizes KG-17 says; the checker accepts that block order.  The engine names
    its handles, so the trace is the same in every run and batch."""
    schedule = example("parallelism=4", [*(f"add_state t{i} a {i}" for i in range(4)), "checkpoint",
                                         "restore 1", "checkpoint", "restore 2"])
    first = traces(engine, [schedule, schedule])
    again = traces(engine, [schedule])
    assert first[0] == first[1] == again[0]
    flink, model = ([e.elements for e in t.events if e.event == "operator" and e.step == 7]
                    for t in (first[0], expected_trace(schedule)))
    assert model == [(0, 1), (2, 3)]
    assert flink != model
    assert sorted(flink[0] + flink[1]) == [0, 1, 2, 3] and [len(x) for x in flink] == [2, 2]
    assert compare(schedule, expected_trace(schedule), first[0], SCRIPTED) is None


def test_watermarks_examples(engine: list[str]) -> None:
    """The watermarks examples of the spec without alignment, on Flink's event-time logic of a source
    (per-split generators, multiplexer, idleness on the schedule's clock) and its valve: every trace is
    the spec's but those of D1 and D2, where Flink 2.3.0 does what the spec says it does: no flush of
    30 (WM-19), nothing on ACTIVE (WM-20), no MAX from a reader idle at the end (WM-15)."""
    examples = [e for e in load_examples() if e.area == "watermarks" and e.refusal is None
                and e.schedule.config.max_drift is None]
    got = dict(zip((e.id for e in examples), traces(engine, [e.schedule for e in examples], "watermarks")))
    deviations = {"WM-15.2", "WM-19.2", "WM-20.2"}
    assert len(examples) > 20 and deviations <= set(got)
    for e in examples:
        assert (got[e.id] == e.trace) == (e.id not in deviations), e.id
    outputs = {i: [(x.step, x.event, getattr(x, "value", None)) for x in got[i].events
                   if x.event.startswith("output")] for i in deviations}
    assert outputs["WM-19.2"][-1] == (15, "output_status", None)
    assert (15, "output_watermark", 30) not in outputs["WM-19.2"]
    assert [o for o in outputs["WM-20.2"] if o[0] == 18] == [(18, "output_watermark", 25)]
    assert [x.event for x in got["WM-15.2"].events] == ["status", "output_status"]


def test_errors(engine: list[str]) -> None:
    """A schedule of an area without an engine, a message of an unknown type and a line that is not
    JSON each give an error message; Main goes on and exits 0 at close."""
    unknown = {"area": "nope", "config": {}, "steps": []}  # no NopeEngine
    lines, status = converse(engine, [{"type": "run", "id": 1, "schedules": [unknown]},
                                      {"type": "nap", "id": 2},
                                      {"type": "run", "id": 3, "schedules": [SCHEDULES[0].to_dict()]},
                                      {"type": "close"}])
    assert status == 0
    assert [(m["type"], m.get("id")) for m in lines[1:]] == [("error", 1), ("error", 2), ("traces", 3)]
    assert "no engine for this area yet" in lines[1]["message"]
    done = subprocess.run(engine, input="not json\n", capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0
    assert [json.loads(line)["type"] for line in done.stdout.splitlines()] == ["hello", "error"]


def test_the_adapter(engine: list[str]) -> None:
    """FlinkAdapter compiles the engine into a temporary directory, runs it behind ProcessAdapter and
    removes the directory on close."""
    adapter = flink.FlinkAdapter()
    classes = adapter._classes
    try:
        assert adapter.run_batch(SCHEDULES[:2]) == [expected_trace(s) for s in SCHEDULES[:2]]
        assert adapter.capabilities()["key_groups.operator_state"] is None
        assert "AIO-33" in adapter.expected_failures  # D5 (adapters/flink/expected-failures/async_io.json)
        assert adapter.version == "flink Apache Flink 2.3.0 (Java classes)"
    finally:
        adapter.close()
    assert not classes.exists()


def test_clear_errors_without_prerequisites(monkeypatch: pytest.MonkeyPatch) -> None:
    """No jars, or no JDK: an AdapterError saying what is missing, before anything runs."""
    monkeypatch.setattr(flink, "flink_lib", lambda: None)
    with pytest.raises(AdapterError, match="no apache-flink 2.3.0 jars"):
        flink.FlinkAdapter()
    monkeypatch.setattr(flink, "flink_lib", lambda: Path("/nowhere"))
    monkeypatch.setattr(flink, "jdk_tool", lambda name: None)
    with pytest.raises(AdapterError, match="no JDK"):
        flink.FlinkAdapter()
