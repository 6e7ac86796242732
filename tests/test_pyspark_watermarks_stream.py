"""The watermarks area on Structured Streaming (adapters/pyspark/watermarks/stream.py): schedules run
through the real pipeline (the readers in a Python streaming source, the valve per downstream task
in `applyInPandasWithState` after a shuffle), compared with the reference model's trace.

What a downstream task saw is compared, as sequences of values (a micro-batch groups steps, so step
indices do not carry over): the records routed to it (by split), every `output_watermark` /
`output_status` of the valve, and the alignment's events (`max_allowed`, `blocked` / `unblocked`,
`paused` / `resumed`) and `restarted`, which every task passes on, interleaved as in the reference's
trace.  Also the records of all tasks in reading order, the valve's outputs, the events, and the
number of micro-batches (more than one, so the readers', the coordinator's and the valve's state
crossed batch boundaries).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from flink_semantics.conformance.examples import notation
from flink_semantics.reference import expected_trace
from flink_semantics.spec.schedule import Schedule

from tests.test_pyspark_watermarks import CASES as D1

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
    # WM-25 (and WM-22, WM-23, WM-26) with alignment_buffer 2: a reader waits on its watermark of two
    # rounds back, a ring that crosses batches in the offset.  First align: r0's oldest sample is
    # still MIN, it reads on (s0 40); announced 9 + 5 = 14.  Second: its oldest is 29 > 14: r0 blocked,
    # s0 paused; reports 39, 19 announce 24, still below 29.  s0 50 is held into the next batch while r1
    # catches up (34); the third align announces 34 + 5 = 39, not below r0's oldest sample (39): r0
    # unblocked, s0 resumed, s0 50 read at once.
    "reader-alignment-blocks-a-reader": ({"readers": 2, "interval": 10, "max_drift": 5,
                                          "alignment_buffer": 2}, """
        add r0 s0
        add r1 s1
        record s0 30
        record s1 10
        tick 10
        align
        record s0 40
        record s1 20
        tick 10
        align
        record s0 50
        record s1 35
        tick 10
        align
        tick 10
        end
    """, 2, 1, 5),
    # WM-26 and WM-14: after the first align (9 + 20 = 29) only r0's s1 (39) is paused, the reader
    # not (its watermark is s0's 9): s1 50 is held while s0 and s2 go on.  Later raises above 29
    # pause s2, s0 and block both readers at the emission itself (s2 40 held).  s1 is paused from
    # t=10 to t=40: its idleness timer starts at 20 on its paused clock and never runs, so at the
    # second align (31 + 20 = 51) s1 is not idle and is resumed (an idle split would stay paused),
    # and s1 50 and s2 40 are read.
    "split-alignment-pauses-a-split": ({"readers": 2, "interval": 10, "idleness": 15, "max_drift": 20,
                                        "alignment_buffer": 0}, """
        add r0 s0
        add r0 s1
        add r1 s2
        record s0 10
        record s1 40
        record s2 12
        tick 10
        align
        record s1 50
        record s0 20
        record s2 22
        tick 10
        record s0 30
        record s2 32
        tick 10
        record s0 38
        record s2 40
        tick 10
        align
        tick 10
        end
    """, 3, 1, 6),
    # WM-16 after alignment: r0 (29) is blocked (19 + 5 = 24) with s0 40 held when the job fails.  The
    # second query restarts from the checkpoint with fresh readers (not blocked: s0 40 read at once,
    # no event), a fresh coordinator and fresh valves: r1's 11 is an output below the 19 of before the
    # failover, and the next align announces 11 + 5 = 16.  Batches: two before the failover, two after.
    "failover-after-alignment": ({"readers": 2, "interval": 10, "max_drift": 5, "alignment_buffer": 0}, """
        add r0 s0
        add r1 s1
        record s0 30
        record s1 20
        tick 10
        align
        record s0 40
        tick 10
        failover
        record s1 12
        tick 10
        align
        end
    """, 2, 1, 4),
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
    # D1's two schedules (WM-19's and WM-20's second examples), the same as task mode's
    # (tests/test_pyspark_watermarks.py, where their traces are worked out step by step): the flush
    # in three batches, the stall (seven ticks, two a batch) in four.
    "d1-flush": (*D1["d1-flush"][:2], 2, 2, 3),
    "d1-stall": (*D1["d1-stall"][:2], 2, 2, 4),
}

OUTPUTS = ("output_watermark", "output_status")
EVENTS = ("max_allowed", "blocked", "unblocked", "paused", "resumed", "restarted")
# The cases run through Spark too: each is a query (two with a failover) on the shared machine.
SPARK_CASES = ["two-readers-punctuated", "reader-with-two-splits", "idleness-leaves-the-minimum",
               "end-of-input-gives-max", "split-alignment-pauses-a-split", "failover-after-alignment",
               "d1-flush", "d1-stall"]


def schedule(name: str) -> Schedule:
    config, steps, *_ = CASES[name]
    return WM.schedule(config, steps)


def task_views(s: Schedule, downstream: int) -> list[list[tuple[Any, ...]]]:
    """The reference's trace as each downstream task sees it: its records (split mod tasks), every
    valve output and every event, in trace order."""
    views: list[list[tuple[Any, ...]]] = [[] for _ in range(downstream)]
    for e in expected_trace(s):
        if e.event == "record":
            views[e.split % downstream].append((e.event, *e.data))
        elif e.event in OUTPUTS + EVENTS:
            for view in views:
                view.append((e.event, *e.data))
    return views


@pytest.mark.spark
@pytest.mark.parametrize("name", SPARK_CASES)
def test_schedule_through_structured_streaming(name: str, spark: Any) -> None:
    from flink_semantics.adapters.pyspark.watermarks.stream import run_schedule

    _, _, downstream, ticks, batches = CASES[name]
    s = schedule(name)
    trace = expected_trace(s)
    result = run_schedule(spark, s, downstream=downstream, ticks_per_batch=ticks)
    assert result.tasks == task_views(s, downstream)
    assert result.records == [(e.event, *e.data) for e in trace if e.event == "record"]
    assert result.outputs() == [(e.event, *e.data) for e in trace if e.event in OUTPUTS]
    assert result.events() == [(e.event, *e.data) for e in trace if e.event in EVENTS]
    assert result.batches == batches


# --------------------------------------------------------------------------
# Without Spark: the same pieces called in-process, and what the offset carries
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


View = list[tuple[Any, ...]]


def run_in_process(s: Schedule, downstream: int, ticks: int, seed: int) -> tuple[list[View], int]:
    """The pipeline's functions without Spark: offsets through JSON as Spark stores them, every
    partition read, rows routed and handed to each task's valve in a shuffled order; after each
    failover a new source (the next query) from the last offset.  The task views and the batches."""
    import pandas as pd
    from flink_semantics.adapters.pyspark.watermarks.stream import (
        SOURCE_SCHEMA,
        WatermarkStreamReader,
        attempts,
        output_item,
        valve_task,
    )
    from pyspark.sql.streaming.datasource import ReadMaxRows

    columns = [f.split()[0] for f in SOURCE_SCHEMA.split(", ")]
    rng = random.Random(seed)
    states = [_State() for _ in range(downstream)]
    views: list[View] = [[] for _ in range(downstream)]
    batches = 0
    start: Any = None
    for attempt in range(attempts(s)):
        source = WatermarkStreamReader({"schedule": s.to_json(), "ticks_per_batch": str(ticks),
                                        "attempt": str(attempt)})
        if start is None:
            start = json.loads(json.dumps(source.initialOffset()))
        while (end := json.loads(json.dumps(source.latestOffset(start, ReadMaxRows(ticks))))) != start:
            batches += 1
            rows = [row for p in source.partitions(start, end) for row in source.read(p)]
            for target in range(downstream):
                mine = [r for r in rows if r[0] != "R" or r[4] % downstream == target]
                rng.shuffle(mine)
                if mine:
                    frames = iter([pd.DataFrame(mine, columns=columns)])
                    for out in valve_task(s.config.readers, (target,), frames, states[target]):
                        views[target] += [output_item(o.kind, o.split, o.ts, o.value, o.idle, o.reader)
                                          for o in out.itertuples(index=False)]
            start = end
    assert start["step"] == len(s.steps), "the queries ended before the schedule"
    return views, batches


@pytest.mark.parametrize("name", list(CASES))
def test_schedule_in_process_at_every_batch_size(name: str) -> None:
    s = schedule(name)
    _, _, _, case_ticks, case_batches = CASES[name]
    for downstream in (1, 2, 3):
        for ticks in sorted({1, 2, 100, case_ticks}):
            views, batches = run_in_process(s, downstream, ticks, seed=ticks)
            assert views == task_views(s, downstream), (downstream, ticks)
            if ticks == case_ticks:
                assert batches == case_batches, (downstream, ticks)


def test_the_offset_carries_the_alignment() -> None:
    """The reader case after its second align (the third batch): in the offset, r0 blocked with s0
    paused and s0 50 held, its ring of two samples and the announced 24, its main clock and s0's
    clock paused since t=20; the coordinator's reports."""
    from flink_semantics.adapters.pyspark.watermarks.stream import WatermarkStreamReader
    from pyspark.sql.streaming.datasource import ReadMaxRows

    source = WatermarkStreamReader({"schedule": schedule("reader-alignment-blocks-a-reader").to_json()})
    offset = source.initialOffset()
    for _ in range(3):
        offset = json.loads(json.dumps(source.latestOffset(offset, ReadMaxRows(1))))
    assert [a["op"] for a in offset["actions"]] == ["align", "announce", "record", "record", "emit"]
    assert offset["coordinator"] == {"0": 39, "1": 19}
    r0 = offset["readers"][0]
    assert r0["alignment"] == {"max_allowed": 24, "latest": [[29, 39], 39], "idle": False, "idle_splits": [],
                               "paused": [0], "blocked": True}
    assert r0["available"] == [[0, 50]]
    assert r0["main"]["clock"] == [1, 0, 20] and r0["splits"][0][1]["clock"] == [1, 0, 20]
