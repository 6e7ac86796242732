"""The pyflink adapter's async I/O area on real Flink jobs (PyFlink's AsyncDataStream): traces compared
with the reference as a FREE adapter's are, the orders each mode must keep, and the refusals."""

from __future__ import annotations

import pytest

pytest.importorskip("pyflink")

from flink_semantics.adapters.pyflink import async_io  # noqa: E402
from flink_semantics.conformance.checker import compare  # noqa: E402
from flink_semantics.spec.adapter import FREE  # noqa: E402
from flink_semantics.spec.schedule import Schedule, Trace, schedule_from_dict  # noqa: E402

from flink_semantics import reference  # noqa: E402

pytestmark = pytest.mark.pyflink


def _schedule(config: dict, steps: list[dict]) -> Schedule:
    return schedule_from_dict({"area": "async_io", "config": config, "steps": steps}, validate=False)


def _record(value: int, timestamp: int | None = None) -> dict:
    return {"op": "record", "value": value, "timestamp": timestamp}


def _complete(record: int, result: list[int]) -> dict:
    return {"op": "complete", "record": record, "result": result}


END = {"op": "end"}


def _emits(trace: Trace) -> list[tuple[int, int, int | None]]:
    return [(e.record, e.value, e.timestamp) for e in trace.events if e.event == "emit"]


def test_ordered_unordered_results_and_refusals_in_one_batch() -> None:
    backwards = [_complete(2, [90, 91]), _complete(1, [80]), _complete(0, [70])]
    schedules = [
        # AIO-12: completed backwards, emitted in input order; timestamps kept, or none (AIO-18)
        _schedule({"mode": "ordered", "capacity": 3},
                  [_record(7, 100), _record(8), _record(9, 5), END, *backwards]),
        # AIO-14: emitted in completion order
        _schedule({"mode": "unordered", "capacity": 3},
                  [_record(7, 100), _record(8), _record(9, 5), END, *backwards]),
        # capacity 1 unordered: one call at a time, so input order; an empty result emits nothing (AIO-19)
        _schedule({"mode": "unordered", "capacity": 1},
                  [_record(7), _complete(0, []), _record(8, 3), END, _complete(1, [80, 81, 82])]),
        # same (mode, capacity) as the first: shares its pipeline
        _schedule({"mode": "ordered", "capacity": 3}, [_record(7, 1), _complete(0, []), END]),
        # AIO-3: PyFlink's own check refuses it, without a job
        _schedule({"capacity": 2, "retry": {"strategy": "fixed_delay", "max_attempts": 1, "delay": 10,
                                            "if_error": True}}, [_record(7)]),
    ]
    traces = async_io.run_batch(schedules)
    for s, t in zip(schedules, traces):
        assert compare(s, reference.expected_trace(s), t, FREE) is None, (s.to_json(), t.events)
    assert _emits(traces[0]) == [(0, 70, 100), (1, 80, None), (2, 90, 5), (2, 91, 5)]
    assert _emits(traces[1]) == [(2, 90, 5), (2, 91, 5), (1, 80, None), (0, 70, 100)]
    assert _emits(traces[2]) == [(1, 80, 3), (1, 81, 3), (1, 82, 3)]
    assert [e.event for e in traces[3].events] == ["invoke", "finished"]
    for s, t in zip(schedules[:4], traces):  # one call per record, observed; `finished` last
        records = sum(step.op == "record" for step in s.steps)
        assert sorted((e.record, e.attempt) for e in t.events if e.event == "invoke") == \
            [(r, 1) for r in range(records)]
        assert t.events[-1].event == "finished"
    assert traces[4].rejected
    assert "Timeout should be configured" in traces[4].events[0].reason


def test_capacity_zero_is_not_refused_and_hangs() -> None:
    """AIO-1, an expected failure: PyFlink accepts capacity 0 and its queue never admits the record."""
    s = _schedule({"capacity": 0}, [_record(7), END])
    [trace] = async_io.run_batch([s])
    assert trace.events == ()  # no call, no `finished`: the job was cancelled
    mismatch = compare(s, reference.expected_trace(s), trace, FREE)
    assert mismatch is not None and mismatch.rules == ("AIO-1",)
    assert "AIO-1" in async_io.EXPECTED_FAILURES


def test_unsupported_steps_are_refused_by_the_adapter() -> None:
    s = _schedule({}, [_record(7), {"op": "watermark", "timestamp": 5}, _complete(0, []), END])
    with pytest.raises(ValueError, match="async_io.watermarks"):
        async_io.run_batch([s])
