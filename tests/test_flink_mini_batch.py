"""The mini_batch area on the Java engine (adapters/flink/, MiniBatchEngine): Flink 2.3.0's mini-batch
assigners, bundle operators with CountBundleTrigger and group aggregate functions (one-phase,
local-global, per row), joined by ChainingOutput and a StatusWatermarkValve in a real
OneInputStreamTask, the aggregation's state in Flink's heap keyed backend (checkpoints are its
snapshots, restores its restore); MB-2 asked of Flink's planner.

Schedules give the reference model's traces (compared with the outputs of one bundle in any key
order, MB-9); the configurations the planner refuses are refused with its messages; C1 of
spec/mini-batch.md: two-phase schedules run as keys of one HashMap bucket, where Flink's order is the
spec's; with the schedule's own keys the local aggregation's HashMap order shows as a different bundle
for one of two keys, with the same final results.

Marked `pyflink`; skipped, with the reason, without a JDK or without the apache-flink 2.3.0 jars.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flink_semantics.adapters import flink
from flink_semantics.reference import expected_trace
from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import Schedule, schedule_from_dict, trace_from_dict

from tests.flink_engine import converse

pytestmark = pytest.mark.pyflink


def example(config: str, steps: list[str], validate: bool = True) -> Schedule:
    n = get_area("mini_batch").notation
    return schedule_from_dict({"area": "mini_batch", "config": n.parse_config(config),
                               "steps": [n.parse_step(s) for s in steps]}, validate=validate)


def traces(engine: list[str], schedules: list[Schedule]) -> list[Any]:
    lines, status = converse(engine, [{"type": "run", "id": 1, "schedules": [s.to_dict() for s in schedules]},
                                      {"type": "close"}])
    assert status == 0 and lines[1]["type"] == "traces", lines[1]
    return [trace_from_dict(t, "mini_batch") for t in lines[1]["traces"]]


def in_key_order(events: list[Any]) -> list[dict[str, Any]]:
    """The events as dicts, each run of outputs between two markers of a step sorted by key (stable:
    each key's own rows keep their order), as MB-9 allows."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for e in (e.to_dict() for e in events):
        if e["event"] == "out" and (not run or run[0]["step"] == e["step"]):
            run.append(e)
            continue
        out += sorted(run, key=lambda r: r["key"])
        run = [e] if e["event"] == "out" else []
        if e["event"] != "out":
            out.append(e)
    return out + sorted(run, key=lambda r: r["key"])


def test_hello_supports_every_feature(engine: list[str]) -> None:
    """Every mini_batch capability is supported; the expected failures are the file's (none)."""
    lines, status = converse(engine, [{"type": "close"}])
    assert status == 0
    caps = {k: v for k, v in lines[0]["capabilities"].items() if k.startswith("mini_batch")}
    features = ("rowtime", "two_phase", "checkpoint", "status", "config_validation", "processing_time",
                "watermarks")
    assert caps == {k: None for k in ("mini_batch", *(f"mini_batch.{f}" for f in features))}
    listed = json.loads((flink.EXPECTED_FAILURES / "mini_batch.json").read_text(encoding="utf-8"))
    assert {k: v for k, v in lines[0]["expected_failures"].items() if k.startswith("MB-")} == listed == {}


SCHEDULES = [
    # processing time: batches at 10 and 20; a crash stops the timers, a restore opens a new assigner
    example("enabled=true allow_latency=10 size=100", ["row k1 +I 1", "advance 9", "advance 1", "row k2 +I 2",
                                                        "row k1 -U 1", "row k1 +U 5", "advance 15",
                                                        "row k2 +I 3"]),
    example("enabled=true allow_latency=7 size=100", ["advance 5", "crash", "restore none", "advance 7",
                                                       "row k1 +I 1", "advance 3", "advance 5"]),
    # the size trigger, reset by a watermark; leading retractions of a key without state; delete
    example("enabled=true allow_latency=10 size=3 update_before=true",
            ["row k1 +I 1", "row k1 +I 2", "advance 10", "row k1 +I 3", "row k2 -D 4", "row k3 +I 5",
             "row k1 -D 1", "row k1 -D 2", "row k1 -D 3"]),
    # row time: held until the interval's end; idle drops nothing at the aggregation; end flushes
    example("enabled=true allow_latency=10 size=100 assigner=rowtime",
            ["row k1 +I 1", "watermark 5", "watermark 9", "row k1 +I 2", "watermark 25", "status idle",
             "status active", "watermark 29", "row k2 +I 7", "end"]),
    # ttl: an unchanged key is updated; SUM wraps around
    example("enabled=true allow_latency=100 size=2 ttl=true update_before=true",
            ["row k1 +I 3", "row k2 +I 1", "row k1 -U 3", "row k1 +U 3",
             "row k-3 +I 9223372036854775807", "row k-3 +I 1"]),
    # per row, with the valve passing increasing watermarks only, and checkpoints and restores
    example("enabled=false update_before=true",
            ["row k1 +I 3", "watermark 10", "checkpoint 1", "row k1 -U 3", "row k1 +U 5", "watermark 10",
             "checkpoint 2", "row k2 -D 1", "crash", "restore 1", "watermark 5", "row k1 +I 4", "crash",
             "restore 2", "row k1 +I 6", "end"]),
    # a bundle finished before the checkpoint barrier; a restore from an older checkpoint
    example("enabled=true allow_latency=100 size=100",
            ["row k1 +I 4", "checkpoint 1", "row k1 +I 6", "checkpoint 2", "row k1 +I 7", "crash",
             "restore 1", "row k1 +I 1", "end"]),
    # two phase with one key a bundle: the local HashMap's order cannot show (C1)
    example("enabled=true allow_latency=10 size=2 two_phase=true update_before=true",
            ["row k1 +I 5", "row k1 +I 6", "checkpoint 1", "row k1 -U 5", "row k1 +U 8", "advance 10",
             "row k2 +I 1", "end"]),
]


def test_traces_are_the_reference_models(engine: list[str]) -> None:
    """Flink's operators give the reference's traces (outputs of a bundle in any key order, MB-9)."""
    got = traces(engine, SCHEDULES)
    for schedule, trace in zip(SCHEDULES, got, strict=True):
        want = expected_trace(schedule)
        assert in_key_order(trace.events) == in_key_order(want.events), schedule.to_dict()


def test_planner_refuses_a_latency_or_size_not_positive(engine: list[str]) -> None:
    """MB-2: Flink's planner refuses the configuration with its own messages; mini-batch off ignores both."""
    refused_latency = example("enabled=true allow_latency=0 size=10", ["row k1 +I 5"], validate=False)
    refused_size = example("enabled=true allow_latency=100 size=0", ["row k1 +I 5"], validate=False)
    off = example("enabled=false size=0", ["row k1 +I 5"], validate=False)
    latency, size, ignored = traces(engine, [refused_latency, refused_size, off])
    assert [e.event for e in latency.events] == ["rejected"]
    assert "MiniBatch Latency must be greater than 0 ms" in latency.events[0].reason
    assert [e.event for e in size.events] == ["rejected"]
    assert "must be > 0" in size.events[0].reason
    assert ignored == expected_trace(off)


C1_SCHEDULE = example("enabled=true allow_latency=100 size=2 two_phase=true",
                      ["row k1 +I 1", "row k1 +I 2", "row k2 +I 3", "row k3 +I 4", "end"])


def test_two_phase_runs_keys_of_one_bucket(engine: list[str]) -> None:
    """C1: two-phase schedules run as stand-in keys of one HashMap bucket, where Flink's local bundle
    sends its keys in first-arrival order: spec example MB-25.1 gives the reference's trace, step by
    step (the global bundle finished at step 3 holds key 2, key 3 waits for the end)."""
    (trace,) = traces(engine, [C1_SCHEDULE])
    assert in_key_order(trace.events) == in_key_order(expected_trace(C1_SCHEDULE).events)


def test_own_keys_show_the_local_hashmap_order(engine: list[str]) -> None:
    """C1 with the schedule's own keys (the engine's own-keys switch): the local finish at step 3 sends
    keys 2 and 3; the global bundle (size 2, holding key 1) finishes at the first of them in the local
    HashMap's order, by bucket of the key's BinaryRowData hash, so exactly one of keys 2 and 3 comes at
    step 3 and the other at the end; every key's result is the reference's."""
    own_keys = [engine[0], "-Dflinksemantics.mini_batch.own_keys=true", *engine[1:]]
    schedule = C1_SCHEDULE
    (trace,) = traces(own_keys, [schedule])
    outs = [e for e in trace.events if e.event == "out"]
    at_3 = {e.key for e in outs if e.step == 3}
    at_4 = {e.key for e in outs if e.step == 4}
    assert 1 in at_3 and len(at_3 & {2, 3}) == 1 and at_4 == {2, 3} - at_3
    want = {e.key: e.to_dict() | {"step": 0} for e in expected_trace(schedule).events if e.event == "out"}
    assert {e.key: e.to_dict() | {"step": 0} for e in outs} == want
