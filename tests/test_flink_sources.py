"""The sources area on the Java engine (adapters/flink/java/.../Sources*.java): Flink 2.3.0's
OperatorCoordinatorHolder around the SourceCoordinator that SourceCoordinatorProvider builds
decides registration (SRC-4, SRC-5), requests and NoMoreSplits (SRC-6, SRC-9, SRC-25), the
assignment tracker (SRC-7, SRC-11, SRC-17, SRC-18, SRC-21, SRC-22), the gateways' valve (SRC-13),
checkpoint failure (SRC-19) and global failover (SRC-27, SRC-28); each reader attempt is Flink's
SourceOperator (SRC-2, SRC-8, SRC-9, SRC-15, SRC-32) in a SourceOperatorStreamTask; rescales go through
StateAssignmentOperation (SRC-31) and job graphs through RestartPipelinedRegionFailoverStrategy
(SRC-35..SRC-37); the sinks are Flink's TwoPhaseCommitSinkFunction (SRC-17, SRC-20, SRC-29, SRC-38);
the enumerator, the reader (C1, C2) and the sinks' external system are the project's.  Expected
traces come from the spec's examples and from the reference model (`expected_trace`), never from the
engine.

Marked `pyflink`; skipped, with the reason, without a JDK or without the apache-flink 2.3.0 jars.
"""

from __future__ import annotations

from typing import Any

import pytest
from flink_semantics.conformance.checker import compare
from flink_semantics.conformance.examples import load_examples
from flink_semantics.reference import expected_trace
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.area import get_area
from flink_semantics.spec.areas.sources import required_capabilities
from flink_semantics.spec.schedule import Schedule, schedule_from_dict, trace_from_dict

from tests.flink_engine import converse

pytestmark = pytest.mark.pyflink

AREA = get_area("sources")


def example(config: str, steps: list[str]) -> Schedule:
    """A schedule in the spec's notation (spec/sources.md)."""
    n = AREA.notation
    return schedule_from_dict({"area": "sources", "config": n.parse_config(config),
                               "steps": [n.parse_step(s) for s in steps]})


def traces(engine: list[str], schedules: list[Schedule]) -> list[Any]:
    lines, status = converse(engine, [{"type": "run", "id": 1, "schedules": [s.to_dict() for s in schedules]},
                                      {"type": "close"}])
    assert status == 0 and lines[1]["type"] == "traces", lines[1]
    return [trace_from_dict(t, "sources") for t in lines[1]["traces"]]


def test_hello(engine: list[str]) -> None:
    """The sources engine supports every capability of the area."""
    lines, status = converse(engine, [{"type": "close"}])
    caps = lines[0]["capabilities"]
    assert status == 0
    assert caps["sources"] is None and caps["sources.checkpoint"] is None
    assert caps["sources.unbounded"] is None
    assert caps["sources.reader_failover"] is None and caps["sources.global_failover"] is None
    assert caps["sources.rescale"] is None and caps["sources.region_failover"] is None


def test_examples(engine: list[str]) -> None:
    """Every example of spec/sources.md gives the spec's trace."""
    examples = [e for e in load_examples() if e.area == "sources" and e.refusal is None]
    assert len(examples) > 35 and any("sources.region_failover" in required_capabilities(e.schedule)
                                      for e in examples)
    got = traces(engine, [e.schedule for e in examples])
    assert {e.id: t for e, t in zip(examples, got, strict=True)} == {e.id: e.trace for e in examples}


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
    # SRC-13 (the holder's gateways): both readers' events wait behind checkpoint 1; after the readers'
    # snapshots each reader's acknowledgement releases its own, reader by reader (C3).
    example("readers=2 splits=[1, 1, 1]",
            ["register r0", "register r1", "checkpoint 1", "request r1", "request r0", "request r1",
             "barrier 1", "request r0", "poll r1 2"]),
    # SRC-13, SRC-18: an abort before the barrier is a failed trigger: the gateways reopen.
    example("readers=1 splits=[1, 1]",
            ["register r0", "checkpoint 1", "request r0", "abort 1", "request r0", "checkpoint 2",
             "barrier 2", "complete 2", "fail 0"]),
    # SRC-19, SRC-13: a failed enumerator snapshot holds nothing back; SRC-20: a reader failing while a
    # checkpoint awaits its barrier loses its held events, the other reader gets its own.
    example("readers=2 splits=[1, 1, 1]",
            ["register r0", "register r1", "checkpoint 1 fails", "request r0", "checkpoint 2", "request r0",
             "request r1", "fail 0", "register r0", "request r0", "end"]),
    # SRC-6, SRC-9, SRC-25: NoMoreSplits drops later requests, until the attempt is reset.
    example("readers=1 splits=[]",
            ["register r0", "request r0", "request r0", "fail 0", "register r0", "request r0", "request r0"]),
    # SRC-5, SRC-28, SRC-29: after a global failover the registry is empty again; restoring to
    # checkpoint 1 (completed without notification) commits it.
    example("readers=2 splits=[2, 1]",
            ["register r0", "register r1", "request r0", "poll r0 1", "checkpoint 1", "barrier 1",
             "complete 1 silent", "fail_enumerator", "assign r1", "register r0", "register r1", "end"]),
    # SRC-17 after a global failover: the late notification reaches a new OperatorCoordinatorHolder whose
    # gateways never saw checkpoint 1; Flink 2.3.0 throws in openGatewayAndUnmarkCheckpoint, which the
    # JobManager's main thread logs, so the coordinator is not notified: nothing it tracks is under id 1.
    example("readers=1 splits=[2, 1]",
            ["register r0", "request r0", "poll r0 1", "checkpoint 1", "barrier 1", "complete 1 silent",
             "fail_enumerator", "register r0", "request r0", "complete 1", "fail 0", "end"]),
]


def test_traces_are_the_references(engine: list[str]) -> None:
    """Hand-written schedules on the coordinator's decisions give the reference model's traces."""
    expected = [expected_trace(s) for s in SCHEDULES]
    events = [e.event for t in expected for e in t.events]
    assert {"splits_back", "global_failover", "checkpoint_failed", "no_more_splits", "aborted"} <= set(events)
    assert traces(engine, SCHEDULES) == expected


def rescaled_down(checkpoints: int) -> Schedule:
    """Two readers with a split each, `checkpoints` checkpoints, then one reader restores both."""
    steps = ["register r0", "register r1", "request r0", "request r1"]
    steps += [f"{kind} {c}" for c in range(1, checkpoints + 1) for kind in ("checkpoint", "barrier")]
    steps += [f"complete {checkpoints}", "rescale 1", "register r0"]
    return example("readers=2 splits=[1, 1, 1]", steps)


def test_rescale_restores_every_split_in_flinks_order(engine: list[str]) -> None:
    """SRC-31 on StateAssignmentOperation and RoundRobinOperatorStateRepartitioner: a reader restored from
    two readers' states gets both splits at their positions; their order is the merge map's (by the
    state handles' names), an order SRC-31 leaves free (one per new reader and restore point), which
    the checker accepts."""
    schedules = [rescaled_down(n) for n in range(1, 6)]
    got = traces(engine, schedules)
    for schedule, trace in zip(schedules, got, strict=True):
        want = expected_trace(schedule)
        assert trace.events[:-1] == want.events[:-1]
        last, expected_last = trace.events[-1], want.events[-1]
        assert last.event == expected_last.event == "registered"
        assert sorted(last.data[1]) == sorted(expected_last.data[1]) == [(0, 0), (1, 0)]
    assert any(t.events[-1] != expected_trace(s).events[-1] for s, t in zip(schedules, got, strict=True))
    for schedule, trace in zip(schedules, got, strict=True):
        assert compare(schedule, expected_trace(schedule), trace, SCRIPTED) is None, schedule


GRAPHS = [
    # SRC-35: a cycle of blocking edges between regions merges them; SRC-36: a lost blocking input
    # restarts its producer's region; SRC-37: the readers among the restarted tasks are reset in order.
    example("readers=2 splits=[1, 1] tasks=2 pipelined=[0>3] blocking=[0>2, 2>3]",
            ["register r0", "register r1", "request r0", "request r1", "fail 2", "fail 1", "register r0",
             "register r1", "end"]),
    example("readers=1 splits=[2] tasks=2 blocking=[0>1, 1>2]",
            ["register r0", "request r0", "poll r0 1", "checkpoint 1", "barrier 1", "complete 1", "fail 2",
             "fail 2 lost=[1]", "fail 1 lost=[0]", "register r0", "end"]),
]


def test_region_failover_is_flinks(engine: list[str]) -> None:
    """Job graphs: the restarted tasks are RestartPipelinedRegionFailoverStrategy's, on the regions
    SchedulingPipelinedRegionComputeUtil computes; the traces are the reference model's."""
    expected = [expected_trace(s) for s in GRAPHS]
    assert sum(e.event == "reset" for t in expected for e in t.events) >= 4
    assert traces(engine, GRAPHS) == expected
