"""The rare states each area's generator coverage names (conformance/areas/<area>.py, `COVERAGE` and
`coverage`; conformance/coverage.py): per area, a hand-written schedule for each state that reaches
it, and one that reaches none, checked through `flink_semantics.conformance.coverage.reached`; every name that
`coverage` gives has a floor.  The schedules are valid (the reference runs them), since `coverage`
gives nothing for a malformed one.
"""

from __future__ import annotations

from typing import Any

import pytest
from flink_semantics.conformance import coverage
from flink_semantics.conformance.areas import async_io, hooks, key_groups, mini_batch, sources, watermarks
from flink_semantics.spec.area import areas
from flink_semantics.spec.schedule import Schedule, schedule_from_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flink_semantics import reference


def schedule(area: str, config: dict[str, Any], *steps: dict[str, Any]) -> Schedule:
    """A valid schedule from its JSON form (the reference runs it without refusing a step)."""
    s = schedule_from_dict({"area": area, "config": config, "steps": list(steps)})
    reference.run(s)
    return s


def op(op_: str, /, **fields: Any) -> dict[str, Any]:
    """A step in its JSON form: its op and its fields."""
    return {"op": op_, **fields}


# --------------------------------------------------------------------------
# async I/O
# --------------------------------------------------------------------------

_TWO_RECORDS = (op("record", value=1), op("record", value=2))
_RETRY = {"strategy": "fixed_delay", "max_attempts": 2, "delay": 10, "if_empty": True}

ASYNC_IO = {
    async_io.COMPLETED_BEHIND_HEAD: schedule(
        "async_io", {"mode": "ordered", "capacity": 5},
        *_TWO_RECORDS, op("complete", record=1, result=[5]), op("checkpoint", id=1)),
    async_io.SMALLER_RESTORE: schedule(
        "async_io", {"mode": "ordered", "capacity": 5},
        *_TWO_RECORDS, op("checkpoint", id=1), op("crash"), op("restore", checkpoint=1, capacity=1)),
    async_io.AT_DEADLINE: schedule(
        "async_io", {"capacity": 5, "timeout": 10, "on_timeout": "ignore"},
        op("record", value=1), op("advance", ms=10), op("complete", record=0, result=[1])),
    async_io.END_DURING_BACKOFF: schedule(
        "async_io", {"capacity": 5, "timeout": 100, "retry": _RETRY},
        op("record", value=1), op("complete", record=0, result=[]), op("end")),
    async_io.RESTORED_COMPLETED: schedule(
        "async_io", {"mode": "unordered", "capacity": 5},
        op("record", value=1), op("watermark", timestamp=1), op("record", value=2),
        op("complete", record=1, result=[5]), op("checkpoint", id=1), op("crash"),
        op("restore", checkpoint=1)),
    # r1 arrives at 0 behind r0, is admitted at 5 when r0 completes, and times out at 15 (AIO-59).
    async_io.WAITED_TIMEOUT: schedule(
        "async_io", {"capacity": 1, "timeout": 10, "on_timeout": "ignore"},
        *_TWO_RECORDS, op("advance", ms=5), op("complete", record=0, result=[1]), op("advance", ms=10)),
    async_io.STORED_IN_BACKOFF: schedule(
        "async_io", {"capacity": 5, "timeout": 100, "retry": _RETRY},
        op("record", value=1), op("complete", record=0, result=[]), op("checkpoint", id=1)),
    async_io.ERROR_AFTER_TIMEOUT: schedule(
        "async_io", {"capacity": 5, "timeout": 10, "on_timeout": "ignore"},
        op("record", value=1), op("advance", ms=10), op("error", record=0, message="late")),
}
ASYNC_IO_NONE = schedule(
    "async_io", {"mode": "ordered", "capacity": 5, "timeout": 10},
    *_TWO_RECORDS, op("complete", record=0, result=[1]), op("checkpoint", id=1), op("advance", ms=5),
    op("complete", record=1, result=[2]), op("end"))

# --------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------

_R0 = (op("register", reader=0), op("request", reader=0))

SOURCES = {
    sources.FAIL_AFTER_ABORT: schedule(  # SRC-18's example
        "sources", {"readers": 1, "splits": [1, 1]},
        *_R0, op("checkpoint", id=1), op("barrier", id=1), op("abort", id=1), op("fail", task=0)),
    sources.REASSIGNED: schedule(
        "sources", {"readers": 1, "splits": [1]}, *_R0, op("fail", task=0), *_R0),
    sources.REGION_PENDING: schedule(
        "sources", {"readers": 1, "splits": [1], "tasks": 1, "pipelined": [[0, 1]]},
        *_R0, op("checkpoint", id=1), op("fail", task=1)),
    sources.SILENT_CONFIRMED: schedule(
        "sources", {"readers": 1, "splits": [2]},
        *_R0, op("poll", reader=0, records=1), op("checkpoint", id=1), op("barrier", id=1),
        op("complete", id=1, notify=False), op("fail", task=0)),
    sources.RESCALED_STATE: schedule(
        "sources", {"readers": 2, "splits": [2, 2]},
        *_R0, op("register", reader=1), op("request", reader=1), op("checkpoint", id=1), op("barrier", id=1),
        op("complete", id=1), op("rescale", readers=1)),
    sources.LATE_NOTIFIED: schedule(
        "sources", {"readers": 1, "splits": [2]},
        *_R0, op("poll", reader=0, records=1), op("checkpoint", id=1), op("barrier", id=1),
        op("complete", id=1, notify=False), op("checkpoint", id=2), op("complete", id=1)),
    sources.PUSH_BEFORE_REGISTER: schedule(  # SRC-5's example
        "sources", {"readers": 1, "splits": [2]},
        op("register", reader=0), op("checkpoint", id=1), op("barrier", id=1), op("complete", id=1),
        op("fail_enumerator"), op("assign", reader=0)),
    sources.NO_MORE_AGAIN: schedule(  # SRC-25's example
        "sources", {"readers": 1, "splits": []}, *_R0, op("fail", task=0), *_R0),
}
SOURCES_NONE = schedule(
    "sources", {"readers": 1, "splits": [1, 1]},
    *_R0, op("checkpoint", id=1), op("barrier", id=1), op("complete", id=1), op("fail", task=0),
    op("register", reader=0), op("end"))

# --------------------------------------------------------------------------
# Watermarks
# --------------------------------------------------------------------------

_TWO_READERS = (op("add_split", reader=0, split=0), op("add_split", reader=1, split=1))
_AHEAD = (*_TWO_READERS, op("record", split=0, ts=10), op("record", split=1, ts=100), op("tick", ms=10),
          op("align"))
_ALIGNED = {"readers": 2, "interval": 10, "max_drift": 5, "alignment_buffer": 0}
_THREE_READERS = (*_TWO_READERS, op("add_split", reader=2, split=2))
_THREE_IDLE = {"readers": 3, "interval": 10, "idleness": 5}
_TICK = op("tick", ms=10)

WATERMARKS = {
    watermarks.ALL_IDLE: schedule(
        "watermarks", {"readers": 2, "interval": 10, "idleness": 10},
        *_TWO_READERS, op("record", split=0, ts=5), op("record", split=1, ts=5), op("tick", ms=50)),
    watermarks.BACK_BELOW: schedule(
        "watermarks", {"readers": 2, "interval": 10, "idleness": 10},
        *_TWO_READERS, op("record", split=0, ts=10), op("record", split=1, ts=10), op("tick", ms=10),
        op("record", split=1, ts=50), op("tick", ms=10), op("record", split=1, ts=60), op("tick", ms=10),
        op("record", split=1, ts=70), op("tick", ms=10), op("record", split=0, ts=20), op("tick", ms=10)),
    watermarks.BLOCKED: schedule("watermarks", _ALIGNED, *_AHEAD),
    watermarks.PAUSED: schedule(
        "watermarks", {**_ALIGNED, "readers": 1},
        op("add_split", reader=0, split=0), op("add_split", reader=0, split=1), op("record", split=0, ts=10),
        op("record", split=1, ts=100), op("tick", ms=10), op("align")),
    watermarks.END_IDLE: schedule(
        "watermarks", {"interval": 10, "idleness": 10},
        op("add_split", reader=0, split=0), op("record", split=0, ts=5), op("tick", ms=50), op("end")),
    watermarks.RESTART_ALIGNED: schedule("watermarks", _ALIGNED, *_AHEAD, op("failover")),
    watermarks.FLUSH_BELOW: schedule(  # WM-19's second example (D1)
        "watermarks", _THREE_IDLE,
        *_THREE_READERS, op("record", split=0, ts=11), op("record", split=1, ts=6),
        op("record", split=2, ts=31), _TICK, op("record", split=0, ts=11), _TICK,
        op("record", split=0, ts=11), _TICK, op("record", split=1, ts=8), _TICK,
        op("record", split=1, ts=8), _TICK, op("tick", ms=20)),
    watermarks.BACK_ALONE: schedule(  # WM-20's second example (D1)
        "watermarks", _THREE_IDLE,
        *_THREE_READERS, op("record", split=1, ts=10), op("record", split=0, ts=16), _TICK,
        op("record", split=0, ts=16), op("record", split=1, ts=10), _TICK, op("record", split=1, ts=10),
        _TICK, op("record", split=1, ts=10), _TICK, op("record", split=2, ts=5), _TICK,
        op("record", split=2, ts=5), _TICK, op("record", split=0, ts=26), _TICK),
    # r1 (99) is blocked at 14 while r0 falls silent and goes idle.
    watermarks.IDLE_HELD: schedule("watermarks", {**_ALIGNED, "idleness": 10}, *_AHEAD, op("tick", ms=50)),
    # s2 (99) goes idle while s0 keeps r0 at 9; the round's allowed maximum is 14.
    watermarks.IDLE_ABOVE: schedule(
        "watermarks", {**_ALIGNED, "idleness": 10},
        *_TWO_READERS, op("add_split", reader=0, split=2), op("record", split=0, ts=10),
        op("record", split=1, ts=10), op("record", split=2, ts=100), _TICK,
        *[o for _ in range(3) for o in (op("record", split=0, ts=10), op("record", split=1, ts=10), _TICK)],
        op("align")),
    # r0 at 14, r1 at 9, the drift 5: r0 is at the allowed maximum.
    watermarks.AT_ALLOWED: schedule(
        "watermarks", _ALIGNED,
        *_TWO_READERS, op("record", split=0, ts=15), op("record", split=1, ts=10), _TICK, op("align")),
    watermarks.IDLE_ADVANCES: schedule(  # WM-19's first example
        "watermarks", {"readers": 2, "interval": 10, "idleness": 15},
        *_TWO_READERS, op("record", split=0, ts=30), op("record", split=1, ts=10), _TICK,
        op("record", split=0, ts=40), op("tick", ms=30)),
    watermarks.OUT_OF_ORDER: schedule(
        "watermarks", {},
        op("add_split", reader=0, split=0), op("add_split", reader=0, split=1), op("record", split=0, ts=10),
        op("record", split=1, ts=10), op("record", split=0, ts=5)),
}
WATERMARKS_NONE = schedule(
    "watermarks", {"readers": 2, "interval": 10, "idleness": 10, "max_drift": 50, "alignment_buffer": 0},
    *_TWO_READERS, op("record", split=0, ts=10), op("record", split=1, ts=12), op("tick", ms=10), op("align"),
    op("failover"), op("end"))

# --------------------------------------------------------------------------
# Key groups
# --------------------------------------------------------------------------

_KEYS = tuple(op("update", key=k) for k in range(8))

KEY_GROUPS = {
    key_groups.NON_DIVIDING: schedule(
        "key_groups", {"parallelism": 2}, *_KEYS, op("checkpoint"), op("restore", parallelism=3)),
    key_groups.MOVED: schedule(
        "key_groups", {"parallelism": 2}, *_KEYS, op("checkpoint"), op("restore", parallelism=4)),
    key_groups.ROTATION: schedule(
        "key_groups", {"parallelism": 1},
        *(op("add_state", subtask=0, name="a", element=e) for e in range(3)),
        *(op("add_state", subtask=0, name="b", element=e) for e in range(2)),
        op("checkpoint"), op("restore", parallelism=2)),
    key_groups.BROADCAST_UP: schedule(
        "key_groups", {"parallelism": 1},
        op("add_state", subtask=0, name="c", element=1, mode="broadcast"), op("checkpoint"),
        op("restore", parallelism=2)),
    key_groups.REFUSED_GOES_ON: schedule(  # KG-15: above the checkpoint's maximum parallelism
        "key_groups", {"parallelism": 1, "max_parallelism": 4},
        op("update", key=1), op("checkpoint"), op("restore", parallelism=8), op("update", key=1)),
    key_groups.LONE_SURROGATE: schedule(  # KG-34: no restore needed
        "key_groups", {"parallelism": 2}, op("update", key="a\ud800", type="string")),
    key_groups.MAX_CHANGED_AND_ABOVE: schedule(  # KG-16's example of C7: 200 > 128, 256 is not 128
        "key_groups", {"parallelism": 2}, op("checkpoint"),
        op("restore", parallelism=200, max_parallelism=256)),
    key_groups.THREE_CAUSES: schedule(  # and 300 > 256 (KG-8)
        "key_groups", {"parallelism": 2}, op("checkpoint"),
        op("restore", parallelism=300, max_parallelism=256)),
}
KEY_GROUPS_NONE = schedule(  # a rescale, but without keyed state, of one split name
    "key_groups", {"parallelism": 2},
    op("add_state", subtask=0, name="a", element=1), op("add_state", subtask=1, name="a", element=2),
    op("checkpoint"), op("restore", parallelism=3), op("update", key=1), op("restore", parallelism=2))

# --------------------------------------------------------------------------
# Mini-batch
# --------------------------------------------------------------------------

_ON = {"enabled": True, "allow_latency": 10, "size": 100}

MINI_BATCH = {
    mini_batch.EMPTIED_BY_WATERMARK: schedule(
        "mini_batch", _ON,
        op("row", key=0, kind="+I", value=1), op("row", key=0, kind="-D", value=1), op("advance", ms=10)),
    mini_batch.CRASH_BUFFERED: schedule(
        "mini_batch", _ON, op("row", key=0, kind="+I", value=1), op("crash"), op("restore", checkpoint=None)),
    mini_batch.RETRACTION_ACROSS: schedule(
        "mini_batch", {**_ON, "size": 1, "two_phase": True},
        op("row", key=0, kind="+I", value=1), op("row", key=0, kind="-D", value=1)),
    mini_batch.OLDER_RESTORE: schedule(
        "mini_batch", _ON,
        op("checkpoint", id=1), op("row", key=0, kind="+I", value=1), op("checkpoint", id=2), op("crash"),
        op("restore", checkpoint=1)),
    mini_batch.SUM_WRAPS: schedule(
        "mini_batch", {},
        op("row", key=-1, kind="+I", value=2**63 - 1), op("row", key=-1, kind="+I", value=1)),
    mini_batch.UPDATE_SPLIT: schedule(  # size 1: the -U's bundle finishes before the +U comes
        "mini_batch", {**_ON, "size": 1},
        op("row", key=0, kind="+I", value=1), op("row", key=0, kind="-U", value=1),
        op("row", key=0, kind="+U", value=2)),
    mini_batch.GLOBAL_SIZE_AT_WATERMARK: schedule(  # k1's and k2's accumulators wait in the global
        # bundle (size 3); the watermark 10 flushes the local bundle [k3, k1]: k3 fills the global
        # bundle, so k1 changes there and again at the watermark
        "mini_batch", {**_ON, "size": 3, "two_phase": True},
        op("row", key=1, kind="+I", value=1), op("row", key=1, kind="+I", value=2),
        op("row", key=2, kind="+I", value=3), op("row", key=3, kind="+I", value=1),
        op("row", key=1, kind="+I", value=1), op("advance", ms=10)),
    # Refused (MB-2), so not run: the state is the refusal's two causes at once.
    mini_batch.BOTH_REFUSED: schedule_from_dict(
        {"area": "mini_batch", "config": {"enabled": True, "allow_latency": 0, "size": -1},
         "steps": [op("row", key=0, kind="+I", value=1)]}, validate=False),
}
MINI_BATCH_NONE = schedule(
    "mini_batch", _ON,
    op("row", key=0, kind="+I", value=1), op("row", key=0, kind="-D", value=1), op("checkpoint", id=1),
    op("row", key=1, kind="+I", value=2), op("advance", ms=10), op("crash"), op("restore", checkpoint=1),
    op("end"))

CASES = {"async_io": (ASYNC_IO, ASYNC_IO_NONE), "sources": (SOURCES, SOURCES_NONE),
         "watermarks": (WATERMARKS, WATERMARKS_NONE), "key_groups": (KEY_GROUPS, KEY_GROUPS_NONE),
         "mini_batch": (MINI_BATCH, MINI_BATCH_NONE)}


def test_every_area_names_states_and_a_case_for_each() -> None:
    assert set(CASES) == set(areas())
    for area, (reaching, _) in CASES.items():
        floors = coverage.floors(area)
        assert 3 <= len(floors) <= 16, area  # the rare states and their combinations (issue 32)
        assert all(0 < floor < 1 for floor in floors.values()), floors
        assert set(reaching) == set(floors), area


@pytest.mark.parametrize("area, state", [(a, s) for a, (reaching, _) in CASES.items() for s in reaching])
def test_a_schedule_reaches_its_state(area: str, state: str) -> None:
    assert state in coverage.reached(CASES[area][0][state])


@pytest.mark.parametrize("area", list(CASES))
def test_a_plain_schedule_reaches_none(area: str) -> None:
    assert coverage.reached(CASES[area][1]) == []


@pytest.mark.parametrize("area", list(CASES))
def test_a_malformed_schedule_reaches_none(area: str) -> None:
    """coverage() gives nothing for a schedule the model refuses (here: a step after its end, or a
    configuration the area rejects)."""
    reaching, _ = CASES[area]
    s = next(iter(reaching.values()))
    if area == "key_groups":
        bad = Schedule(area, type(s.config)(0), s.steps)  # KG-8: parallelism 0
    else:
        end = schedule_from_dict({"area": area, "config": {}, "steps": [{"op": "end"}]},
                                 validate=False).steps[0]
        bad = Schedule(area, s.config, (*s.steps, end, *s.steps))
    assert coverage.reached(bad) == []


# The features of the area's properties with the most parts on (conformance/test_<area>.py).
DRAWN = {
    "async_io": async_io.schedules(async_io.Features(checkpoints=True, errors=True, timeouts=True,
                                                     retries=True, statuses=True, nulls=True, max_steps=20)),
    "sources": sources.schedules(sources.Features(checkpoints=True, silent=True, reader_failures=True,
                                                  global_failures=True, rescale=True, max_steps=30)),
    "watermarks": watermarks.schedules(watermarks.Features(max_readers=3, idleness=True, punctuated=True,
                                                           failover=True, alignment=True, max_steps=30)),
    "key_groups": key_groups.schedules(key_groups.Features(operator_state=True, rescale=True, refusals=True)),
    "mini_batch": mini_batch.schedules(mini_batch.Features(rowtime=True, two_phase=True, checkpoints=True,
                                                           status=True, max_steps=40)),
}


@pytest.mark.parametrize("area", list(DRAWN))
def test_coverage_names_only_states_with_a_floor(area: str) -> None:
    """On drawn schedules, every state `coverage` gives is in COVERAGE (and is given once)."""
    names = set(hooks(area).COVERAGE)  # type: ignore[attr-defined]

    @settings(max_examples=40, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        s = data.draw(DRAWN[area])
        found = list(hooks(area).coverage(s))  # type: ignore[attr-defined]
        assert set(found) <= names and len(found) == len(set(found)), found

    check()
