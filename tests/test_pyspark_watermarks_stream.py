"""The watermarks area on Structured Streaming (adapters/pyspark/watermarks/stream.py): schedules run
through the real pipeline (the readers in a Python streaming source, the valve per downstream task
in `applyInPandasWithState` after a shuffle), compared with the reference model's trace.

What a downstream task saw is compared, as sequences of values (a micro-batch groups steps, so step
indices do not carry over): the records routed to it (by split) and every `output_watermark` /
`output_status` of the valve, interleaved as in the reference's trace.  Also the records of all
tasks in reading order, the valve's outputs, and the number of micro-batches (more than one, so
the readers' and the valve's state crossed batch boundaries).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from conformance.examples import notation
from reference import expected_trace
from spec.schedule import Schedule

WM = notation("watermarks")

# name -> (config, steps, downstream tasks, ticks per batch, micro-batches)
CASES: dict[str, tuple[dict[str, Any], str, int, int, int]] = {
    # Two readers, punctuated, all in one batch: the valve merges the channels in round order (C3):
    # r0 9, r1 19 -> 9; r0 29 -> 19; r1 39 -> 29; MAX, MAX -> 39, MAX.  Channel by channel (r0's rows,
    # then r1's) would give 19, 29: the output 9 would be lost.
    "two-readers-punctuated": ({"readers": 2, "punctuated": True, "interval": 0}, """
        add r0 s0
        add r1 s1
        record s0 10
        record s1 20
        record s0 30
        record s1 40
        end
    """, 2, 1, 1),
    # A reader with two splits (WM-4, WM-6, WM-9), bound 5.  t=10: r0 min(4, 24) = 4, r1 44: output 4.
    # t=20: s0 saw 20: r0 min(14, 24) = 14.  s0 finishes (nothing emitted); t=30: r0 min over s1 = 34,
    # output min(34, 44) = 34.  End: MAX from r0 (output 44), from r1 (output MAX).  Four batches.
    "reader-with-two-splits": ({"readers": 2, "bound": 5, "interval": 10}, """
        add r0 s0
        add r0 s1
        add r1 s2
        record s0 10
        record s1 30
        record s2 50
        tick 10
        record s0 20
        tick 10
        finish s0
        record s1 40
        tick 10
        end
    """, 2, 1, 4),
    # WM-19, WM-20 (spec/watermarks.md): r1's channel goes idle and leaves the minimum (output 39),
    # then both idle, r1 back (ACTIVE, 19 unaligned below 39), then 44; end: MAX.  Two ticks a batch.
    "idleness-leaves-the-minimum": ({"readers": 2, "interval": 10, "idleness": 15}, """
        add r0 s0
        add r1 s1
        record s0 30
        record s1 10
        tick 10
        record s0 40
        tick 30
        record s1 20
        tick 10
        record s1 45
        tick 10
        end
    """, 2, 2, 3),
    # WM-15 with D2, one downstream task.  t=10: r0 sends 4, r1's channel (MIN) holds the valve back.
    # r1 has no split; its main output's timer starts at 10 and at t=30 it is idle (20 > 15, WM-12):
    # its channel leaves the minimum, output 4.  r0's split (timer started at 20) is idle at t=40, and
    # so is r0: the valve's last channel goes idle, the max 4 is not above 4: IDLE.  End: r0 ACTIVE
    # (valve ACTIVE) and MAX (output MAX), r1 ACTIVE and MAX.
    "end-of-input-gives-max": ({"readers": 2, "interval": 10, "idleness": 15}, """
        add r0 s0
        record s0 5
        tick 10
        tick 40
        end
    """, 1, 1, 3),
}

OUTPUTS = ("output_watermark", "output_status")


def schedule(name: str) -> Schedule:
    config, steps, *_ = CASES[name]
    return WM.schedule(config, steps)


def task_views(s: Schedule, downstream: int) -> list[list[tuple[Any, ...]]]:
    """The reference's trace as each downstream task sees it: its records (split mod tasks) and
    every valve output, in trace order."""
    views: list[list[tuple[Any, ...]]] = [[] for _ in range(downstream)]
    for e in expected_trace(s):
        if e.event == "record":
            views[e.split % downstream].append((e.event, *e.data))
        elif e.event in OUTPUTS:
            for view in views:
                view.append((e.event, *e.data))
    return views


@pytest.mark.spark
@pytest.mark.parametrize("name", list(CASES))
def test_schedule_through_structured_streaming(name: str, spark: Any) -> None:
    from adapters.pyspark.watermarks.stream import run_schedule

    _, _, downstream, ticks, batches = CASES[name]
    s = schedule(name)
    trace = expected_trace(s)
    result = run_schedule(spark, s, downstream=downstream, ticks_per_batch=ticks)
    assert result.tasks == task_views(s, downstream)
    assert result.records == [(e.event, *e.data) for e in trace if e.event == "record"]
    assert result.outputs() == [(e.event, *e.data) for e in trace if e.event in OUTPUTS]
    assert result.batches == batches


# --------------------------------------------------------------------------
# Without Spark: the same pieces called in-process, and what is not supported
# --------------------------------------------------------------------------


class _State:
    """GroupState's part that `valve_task` uses."""

    def __init__(self) -> None:
        self.value: tuple[str, int] | None = None

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple[str, int]:
        assert self.value is not None
        return self.value

    def update(self, value: tuple[str, int]) -> None:
        self.value = value


def run_in_process(s: Schedule, downstream: int, ticks: int, seed: int) -> list[list[tuple[Any, ...]]]:
    """The pipeline's functions without Spark: offsets through JSON as Spark stores them, every
    partition read, rows routed and handed to each task's valve in a shuffled order."""
    import pandas as pd
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from adapters.pyspark.watermarks.stream import SOURCE_SCHEMA, WatermarkStreamReader, valve_task

    columns = [f.split()[0] for f in SOURCE_SCHEMA.split(", ")]
    rng = random.Random(seed)
    source = WatermarkStreamReader({"schedule": s.to_json(), "ticks_per_batch": str(ticks)})
    start = json.loads(json.dumps(source.initialOffset()))
    states = [_State() for _ in range(downstream)]
    views: list[list[tuple[Any, ...]]] = [[] for _ in range(downstream)]
    while (end := json.loads(json.dumps(source.latestOffset(start, ReadMaxRows(ticks))))) != start:
        rows = [row for p in source.partitions(start, end) for row in source.read(p)]
        for target in range(downstream):
            mine = [r for r in rows if r[0] != "R" or r[4] % downstream == target]
            rng.shuffle(mine)
            if mine:
                frames = iter([pd.DataFrame(mine, columns=columns)])
                for out in valve_task(s.config.readers, (target,), frames, states[target]):
                    for o in out.itertuples(index=False):
                        views[target].append(("record", o.split, o.ts) if o.kind == "record" else
                                             (o.kind, o.value) if o.kind == "output_watermark" else
                                             (o.kind, bool(o.idle)))
        start = end
    return views


@pytest.mark.parametrize("name", list(CASES))
def test_schedule_in_process_at_every_batch_size(name: str) -> None:
    s = schedule(name)
    for downstream in (1, 2, 3):
        for ticks in (1, 2, 100):
            assert run_in_process(s, downstream, ticks, seed=ticks) == task_views(s, downstream), \
                (downstream, ticks)


def test_alignment_and_failover_are_refused_naming_the_step() -> None:
    from adapters.pyspark.watermarks.stream import UnsupportedStep, check_supported

    aligned = WM.schedule({"max_drift": 5}, "add r0 s0\nrecord s0 3\nalign")
    with pytest.raises(UnsupportedStep, match=r"step 2 \(align\)"):
        check_supported(aligned)
    with pytest.raises(NotImplementedError, match=r"step 1 \(failover\)"):
        check_supported(WM.schedule({}, "add r0 s0\nfailover"))
    check_supported(WM.schedule({"max_drift": 5}, "add r0 s0\nrecord s0 3\nend"))  # no align step: runs
