"""The async_io area on the Java engine (adapters/flink/, AsyncIoEngine): Flink 2.3.0's
AsyncWaitOperator, configured through AsyncDataStream, inside a real OneInputStreamTask over a proxy
Environment, timers fired one at a time, checkpoints through Flink's snapshotState and restores through
the task's TaskStateManager.

Schedules give the reference model's traces; the configurations Flink refuses are refused by Flink's
own preconditions; the two deviations of spec/async-io.md the engine meets (D3, D5) give the traces the
spec describes for Flink 2.3.0.

Marked `pyflink`; skipped, with the reason, without a JDK or without the apache-flink 2.3.0 jars.
"""

from __future__ import annotations

from typing import Any

import pytest
from flink_semantics.reference import expected_trace
from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import Schedule, schedule_from_dict, trace_from_dict

from tests.flink_engine import converse

pytestmark = pytest.mark.pyflink


def example(config: str, steps: list[str], validate: bool = True) -> Schedule:
    n = get_area("async_io").notation
    return schedule_from_dict({"area": "async_io", "config": n.parse_config(config),
                               "steps": [n.parse_step(s) for s in steps]}, validate=validate)


def traces(engine: list[str], schedules: list[Schedule]) -> list[Any]:
    lines, status = converse(engine, [{"type": "run", "id": 1, "schedules": [s.to_dict() for s in schedules]},
                                      {"type": "close"}])
    assert status == 0 and lines[1]["type"] == "traces", lines[1]
    return [trace_from_dict(t, "async_io") for t in lines[1]["traces"]]


def test_hello_supports_every_feature(engine: list[str]) -> None:
    """Every async_io capability is supported, checkpoints included."""
    lines, status = converse(engine, [{"type": "close"}])
    assert status == 0
    caps = lines[0]["capabilities"]
    assert {k: v for k, v in caps.items() if k.startswith("async_io")} == {
        k: None for k in ("async_io", "async_io.ordered", "async_io.unordered", "async_io.watermarks",
                          "async_io.timeout", "async_io.status", "async_io.config_validation",
                          "async_io.retry", "async_io.checkpoint")}


RETRY = "retry={fixed_delay, max_attempts 3, delay 10, if_empty}"
SCHEDULES = [
    example("capacity=3", ["record 1", "watermark 5", "record 2", "complete r1 [20]", "complete r0 [10]"]),
    example("mode=unordered", ["record 1", "watermark 5", "record 2", "record 3", "complete r2 [30]",
                               "complete r1 [20]", "complete r0 [10]", "end"]),
    example("capacity=1", ["record 1", "record 2", "complete r0 [10]", "error r1"]),
    # timers one at a time: r1 is admitted when r0's timeout frees the slot, and times out in the same step
    example("capacity=1 timeout=50 on_timeout=complete timeout_result=[-1]",
            ["record 1", "record 2", "advance 200"]),
    # a null result with retry is refused at the call; the call stays outstanding
    example("timeout=50 retry={fixed_delay, max_attempts 1, delay 10, if_error}",
            ["record 1", "complete r0 null", "complete r0 [10]"]),
    # end of input fires the pending retries in admission order
    example(f"capacity=3 timeout=1000 {RETRY}", ["record 1", "record 2", "complete r1 []", "complete r0 []",
                                                  "end", "complete r0 []", "complete r1 [20]"]),
    # zero backoff and max_attempts 0: Flink's builder refuses them, the spec (and the operator) take them
    example("timeout=10 retry={fixed_delay, max_attempts 1, delay 0, if_empty}",
            ["record 1", "complete r0 []"]),
    example("timeout=100 retry={fixed_delay, max_attempts 0, delay 10, if_empty}",
            ["record 1", "complete r0 []", "advance 10", "end"]),
    # checkpoint, crash, restore with a smaller capacity: Flink's open() replays more than fits
    example("capacity=3", ["record 1", "record 2", "record 3", "checkpoint 1", "crash",
                           "restore 1 capacity=1", "complete r0 [10]", "complete r1 [20]"]),
    example("mode=unordered", ["record 1", "watermark 5", "record 2", "record 3", "complete r2 [30]",
                               "checkpoint 1", "complete r0 [10]", "crash", "restore 1", "complete r0 [11]",
                               "complete r1 [21]"]),
    example("timeout=50", ["record 1", "advance 10", "checkpoint 1", "error r0", "restore 1", "advance 49",
                           "advance 1"]),
]


def test_traces_are_the_references(engine: list[str]) -> None:
    """Flink's AsyncWaitOperator gives the reference model's trace on each schedule."""
    for schedule, trace in zip(SCHEDULES, traces(engine, SCHEDULES), strict=True):
        assert trace == expected_trace(schedule), schedule


def test_refusals_are_flinks(engine: list[str]) -> None:
    """AIO-1, AIO-3: refused by Flink's own checks (their messages), before any event."""
    refused = [example("capacity=0", ["record 1"], validate=False),
               example("timeout=0 retry={fixed_delay, max_attempts 1, delay 10, if_error}", ["record 1"],
                       False),
               example("capacity=2", ["record 1", "checkpoint 1", "crash", "restore 1 capacity=0"], False)]
    got = traces(engine, refused)
    assert [t.events[0].data[0] for t in got] == [
        "The number of concurrent async operation should be greater than 0.",
        "Timeout should be configured when do async with retry.",
        "The capacity must be larger than 0."]
    assert all(t.rejected and len(t.events) == 1 for t in got)


def lines(trace: Any) -> list[tuple[Any, ...]]:
    return [(e.step, e.event, *e.data) for e in trace.events]


def test_deviations_are_the_ones_the_spec_names(engine: list[str]) -> None:
    """D3 (AIO-60) and D5 (AIO-33): the traces spec/async-io.md gives for Flink 2.3.0 under timers at
    their time; the reference's differ exactly there."""
    d3 = example("timeout=1000 retry={fixed_delay, max_attempts 3, delay 10, if_empty}",
                 ["record 7", "complete r0 []", "advance 10", "end", "complete r0 [70]"])
    d5 = example("timeout=100 on_timeout=ignore retry={fixed_delay, max_attempts 3, delay 10, if_empty}",
                 ["record 7", "advance 100", "complete r0 []", "end"])
    got3, got5 = traces(engine, [d3, d5])
    # "Flink 2.3.0 would also call the function for r0 (attempt 3) at step 3"
    assert lines(got3) == [(0, "invoke", 0, 1), (2, "invoke", 0, 2), (3, "invoke", 0, 3),
                           (4, "emit", 0, 70, None), (4, "finished")]
    assert lines(got3) != lines(expected_trace(d3))
    # the empty result at the deadline is retried (100 - 0 is not > 100); end of input calls attempt 2
    assert lines(got5) == [(0, "invoke", 0, 1), (1, "timeout", 0), (3, "invoke", 0, 2)]
    assert lines(got5) != lines(expected_trace(d5))
