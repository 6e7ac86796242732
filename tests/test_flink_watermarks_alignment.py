"""Watermark alignment (WM-22..WM-26, capability `watermarks.alignment`) on the Java engine
(adapters/flink/java/.../Watermarks*.java). In Flink 2.3.0 alignment is SourceOperator's (its
update-interval timer samples, checks and sends a ReportedWatermarkEvent; a WatermarkAlignmentEvent
pauses the reader or its splits through SourceReader.pauseOrResumeSplits) against SourceCoordinator's
announceCombinedWatermark. Expected traces are the spec's examples and the reference model's
(`expected_trace`), never the engine's.

While the engine declares the capability unsupported, the trace tests skip with its reason, and the
engine must refuse an alignment schedule rather than run it without alignment. Marked `pyflink`;
skipped, with the reason, without a JDK or without the apache-flink 2.3.0 jars.
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


def run(engine: list[str], schedules: list[Schedule]) -> dict[str, Any]:
    """Main's answer to one run of the schedules."""
    lines, status = converse(engine, [{"type": "run", "id": 1, "schedules": [s.to_dict() for s in schedules]},
                                      {"type": "close"}])
    assert status == 0, lines
    return lines[1]


def traces(engine: list[str], schedules: list[Schedule]) -> list[Any]:
    reply = run(engine, schedules)
    assert reply["type"] == "traces", reply
    return [trace_from_dict(t, "watermarks") for t in reply["traces"]]


def unsupported(engine: list[str]) -> str | None:
    """The engine's reason for leaving alignment out (None: supported)."""
    lines, status = converse(engine, [{"type": "close"}])
    assert status == 0
    return lines[0]["capabilities"][CAPABILITY]


def alignment_examples() -> list[Any]:
    examples = [e for e in load_examples() if e.area == "watermarks" and e.refusal is None
                and CAPABILITY in required_capabilities(e.schedule)]
    assert {e.id.split(".")[0] for e in examples} >= {"WM-14", "WM-22", "WM-23", "WM-24",
                                                                   "WM-25", "WM-26"}, [e.id for e in examples]
    return examples


def test_unsupported_alignment_is_refused(engine: list[str]) -> None:
    """While alignment is not driven, a schedule with `max_drift` gets an error naming the reason,
    never a trace computed without alignment."""
    reason = unsupported(engine)
    if reason is None:
        pytest.skip("the engine supports watermarks.alignment")
    assert "SourceOperator" in reason and "SourceCoordinator" in reason
    schedule = alignment_examples()[0].schedule
    reply = run(engine, [schedule])
    assert reply["type"] == "error" and "not driven yet" in reply["message"], reply


def test_alignment_examples(engine: list[str]) -> None:
    """Every alignment example of spec/watermarks.md gives the spec's trace."""
    reason = unsupported(engine)
    if reason is not None:
        pytest.skip(f"watermarks.alignment unsupported: {reason}")
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
    reason = unsupported(engine)
    if reason is not None:
        pytest.skip(f"watermarks.alignment unsupported: {reason}")
    got = traces(engine, SCHEDULES)
    assert got == [expected_trace(s) for s in SCHEDULES]
