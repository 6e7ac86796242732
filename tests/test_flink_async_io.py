"""The async_io area on the Java engine (adapters/flink/, AsyncIoEngine): Flink 2.3.0's
AsyncWaitOperator inside a real OneInputStreamTask over a proxy Environment (AsyncIoTask).

The hello declares checkpoints unsupported with its reason; schedules of the spec's examples give
the reference model's traces.

Marked `pyflink`; skipped, with the reason, without a JDK or without the apache-flink 2.3.0 jars.
"""

from __future__ import annotations

from typing import Any

import pytest
from flink_semantics.reference import expected_trace
from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import schedule_from_dict, trace_from_dict

from tests.flink_engine import converse

pytestmark = pytest.mark.pyflink


def test_hello_declares_checkpoints_unsupported(engine: list[str]) -> None:
    """Every async_io capability but checkpoint is supported; checkpoint names its reason."""
    lines, status = converse(engine, [{"type": "close"}])
    assert status == 0
    caps = lines[0]["capabilities"]
    assert caps["async_io"] is None and caps["async_io.ordered"] is None and caps["async_io.timeout"] is None
    assert "snapshotState" in caps["async_io.checkpoint"]


def example(config: str, steps: list[str]) -> Any:
    n = get_area("async_io").notation
    return schedule_from_dict({"area": "async_io", "config": n.parse_config(config),
                               "steps": [n.parse_step(s) for s in steps]})


SCHEDULES = [
    example("capacity=3", ["record 1", "watermark 5", "record 2", "complete r1 [20]", "complete r0 [10]"]),
    example("mode=unordered", ["record 1", "watermark 5", "record 2", "record 3", "complete r2 [30]",
                               "complete r1 [20]", "complete r0 [10]", "end"]),
    example("capacity=1", ["record 1", "record 2", "complete r0 [10]", "error r1"]),
]


def test_traces_are_the_references(engine: list[str]) -> None:
    """Flink's AsyncWaitOperator gives the reference model's trace on each schedule."""
    lines, status = converse(engine, [{"type": "run", "id": 1, "schedules": [s.to_dict() for s in SCHEDULES]},
                                      {"type": "close"}])
    assert status == 0 and lines[1]["type"] == "traces", lines[1]
    for schedule, trace in zip(SCHEDULES, lines[1]["traces"], strict=True):
        assert trace_from_dict(trace, "async_io") == expected_trace(schedule), schedule
