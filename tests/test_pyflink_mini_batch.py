"""The pyflink adapter's mini-batch area on real Flink jobs: outputs tied to steps by the probe rows,
the configuration's refusals from Flink's planner."""

from __future__ import annotations

import pytest

pytest.importorskip("pyflink")

from flink_semantics.adapters.pyflink import mini_batch  # noqa: E402
from flink_semantics.spec.schedule import Schedule, schedule_from_dict  # noqa: E402

pytestmark = pytest.mark.pyflink


def _schedule(config: dict, steps: list[dict]) -> Schedule:
    return schedule_from_dict({"area": "mini_batch", "config": config, "steps": steps}, validate=False)


def _row(key: int, kind: str, value: int) -> dict:
    return {"op": "row", "key": key, "kind": kind, "value": value}


def _outs(trace) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted((e.step, e.key, e.change, e.count, e.sum, e.min, e.max) for e in trace.events)


def test_size_bundles_per_row_and_refusals_in_one_batch() -> None:
    on = {"enabled": True, "allow_latency": 100, "size": 2, "update_before": True}
    schedules = [
        # MB-10, MB-14: a bundle of two rows finished by the second; the rest at end of input
        _schedule(on, [_row(1, "+I", 1), _row(1, "+I", 2), _row(2, "+I", 3), {"op": "end"}]),
        # MB-23: a key counted down to zero in a later bundle
        _schedule(on, [_row(1, "+I", 3), _row(1, "+I", 4), _row(1, "-D", 3), _row(1, "-D", 4)]),
        # without end: what the bounded job emits after the last step is left out
        _schedule(on, [_row(1, "+I", 3)]),
        # MB-24: per row
        _schedule({"update_before": True}, [_row(1, "+I", 3), _row(1, "-U", 3), _row(1, "+U", 5)]),
        # MB-2: Flink's planner refuses it
        _schedule({"enabled": True, "allow_latency": 100, "size": 0}, [_row(1, "+I", 3)]),
    ]
    traces = mini_batch.run_batch(schedules)
    assert _outs(traces[0]) == [(1, 1, "+I", 2, 3, 1, 2), (3, 2, "+I", 1, 3, 3, 3)]
    assert _outs(traces[1]) == [(1, 1, "+I", 2, 7, 3, 4), (3, 1, "-D", 2, 7, 3, 4)]
    assert _outs(traces[2]) == []
    assert _outs(traces[3]) == [(0, 1, "+I", 1, 3, 3, 3), (1, 1, "-D", 1, 3, 3, 3), (2, 1, "+I", 1, 5, 5, 5)]
    assert traces[4].rejected


MAX, MIN = 2**63 - 1, -(2**63)


def test_sum_over_bigint_wraps_around_in_flink() -> None:
    """MB-30 on Flink itself (issue 29): SUM over BIGINT wraps around as a Java long, with mini-batch
    off, on, and in two phases (the local accumulator's sum wraps, the merge gives the same sum
    modulo 2^64); any long is a key, the probe key -80 and Long.MIN_VALUE among them (the adapter
    takes another probe).  The expected sums are worked out by hand (in the comments)."""
    on = {"enabled": True, "allow_latency": 100, "size": 2}
    schedules = [
        _schedule({"update_before": True}, [_row(-80, "+I", MAX), _row(-80, "+I", 1), _row(-80, "-U", 1),
                                            _row(MIN, "+I", MIN), _row(MIN, "+I", -1)]),
        _schedule(on, [_row(1, "+I", MAX), _row(1, "+I", 1), {"op": "end"}]),
        _schedule({**on, "two_phase": True}, [_row(-3, "+I", MAX), _row(-3, "+I", MAX), _row(-3, "+I", 2),
                                              {"op": "end"}]),
    ]
    traces = mini_batch.run_batch(schedules)
    assert _outs(traces[0]) == [
        (0, -80, "+I", 1, MAX, MAX, MAX),
        (1, -80, "+U", 2, MIN, 1, MAX),  # MAX + 1 = MIN
        (1, -80, "-U", 1, MAX, MAX, MAX),
        (2, -80, "+U", 1, MAX, MAX, MAX),  # MIN - 1 = MAX: the retraction takes the wrap back
        (2, -80, "-U", 2, MIN, 1, MAX),
        (3, MIN, "+I", 1, MIN, MIN, MIN),
        (4, MIN, "+U", 2, MAX, MIN, -1),  # MIN + -1 = MAX
        (4, MIN, "-U", 1, MIN, MIN, MIN),
    ]
    assert _outs(traces[1]) == [(1, 1, "+I", 2, MIN, 1, MAX)]  # one bundle of both rows: MAX + 1 = MIN
    # the local bundle of steps 0 and 1 sends MAX + MAX = 2^64 - 2, i.e. -2; merged with step 2's 2 at
    # end of input: 0 (2^64)
    assert _outs(traces[2]) == [(3, -3, "+I", 3, 0, 2, MAX)]
