"""Watermark alignment (WM-22..WM-26, capability `watermarks.alignment`) on the Java engine
(adapters/flink/java/.../WatermarksAligned.java, WatermarksCoordinator.java, WatermarksSource.java).
Alignment is Flink 2.3.0's SourceOperator (its update-interval timer samples, checks and sends a
ReportedWatermarkEvent; a WatermarkAlignmentEvent blocks the reader or pauses its splits through
SourceReader.pauseOrResumeSplits) against Flink's SourceCoordinator (announceCombinedWatermark).
Expected traces are the spec's examples and the reference model's (`expected_trace`), never the
engine's.

Marked `pyflink`; skipped, with the reason, without a JDK or without the apache-flink 2.3.0 jars.
"""

from __future__ import annotations

from typing import Any

import pytest
from flink_semantics.conformance.examples import load_examples
from flink_semantics.reference import expected_trace
from flink_semantics.spec.area import get_area
from flink_semantics.spec.areas.watermarks import required_capabilities
from flink_semantics.spec.schedule import Schedule, schedule_from_dict, trace_from_dict

from tests.flink_engine import converse

pytestmark = pytest.mark.pyflink

AREA = get_area("watermarks")
CAPABILITY = "watermarks.alignment"


def example(config: str, steps: list[str]) -> Schedule:
    """A schedule in the spec's notation (spec/watermarks.md)."""
    n = AREA.notation
    return schedule_from_dict({"area": "watermarks", "config": n.parse_config(config),
                               "steps": [n.parse_step(s) for s in steps]})


def traces(engine: list[str], schedules: list[Schedule]) -> list[Any]:
    lines, status = converse(engine, [{"type": "run", "id": 1, "schedules": [s.to_dict() for s in schedules]},
                                      {"type": "close"}])
    assert status == 0, lines
    reply = lines[1]
    assert reply["type"] == "traces", reply
    return [trace_from_dict(t, "watermarks") for t in reply["traces"]]


def test_hello(engine: list[str]) -> None:
    """The engine supports alignment."""
    lines, status = converse(engine, [{"type": "close"}])
    assert status == 0
    assert CAPABILITY in lines[0]["capabilities"] and lines[0]["capabilities"][CAPABILITY] is None


def alignment_examples() -> list[Any]:
    examples = [e for e in load_examples() if e.area == "watermarks" and e.refusal is None
                and CAPABILITY in required_capabilities(e.schedule)]
    rules = {e.id.split(".")[0] for e in examples}
    assert rules >= {"WM-14", "WM-22", "WM-23", "WM-24", "WM-25", "WM-26"}, rules
    return examples


def test_alignment_examples(engine: list[str]) -> None:
    """Every alignment example of spec/watermarks.md gives the spec's trace."""
    examples = alignment_examples()
    got = traces(engine, [e.schedule for e in examples])
    assert {e.id: t for e, t in zip(examples, got, strict=True)} == {e.id: e.trace for e in examples}


SCHEDULES = [
    # WM-25 with the default buffer (3): the reader blocks only once its watermark of three rounds
    # ago is above the maximum; then the slow reader catches up and it goes on.
    example("readers=2 interval=10 max_drift=5",
            ["add r0 s0", "add r1 s1", "record s0 30", "record s1 10", "tick 10", "align", "align", "align",
             "record s0 31", "record s1 40", "tick 10", "align", "align", "align", "align", "end"]),
    # WM-26 with two splits on one reader: the fast split pauses, the reader reads the slow one.
    example("readers=2 interval=10 max_drift=5 alignment_buffer=0",
            ["add r0 s0", "add r0 s2", "add r1 s1", "record s0 30", "record s2 10", "record s1 12", "tick 10",
             "align", "record s0 35", "record s2 20", "tick 10", "align", "end"]),
    # WM-14, WM-23: idleness with alignment; an idle reader reports MAX; a failover starts over.
    example("readers=2 interval=10 idleness=15 max_drift=5 alignment_buffer=0",
            ["add r0 s0", "add r1 s1", "record s0 30", "record s1 10", "tick 10", "align", "tick 30", "align",
             "failover", "record s1 12", "tick 10", "align", "end"]),
]


def test_alignment_schedules(engine: list[str]) -> None:
    """Drawn-by-hand alignment schedules give the reference model's traces."""
    got = traces(engine, SCHEDULES)
    assert got == [expected_trace(s) for s in SCHEDULES]
