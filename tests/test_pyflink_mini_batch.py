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
