"""The watermarks API on Structured Streaming (adapters/pyspark/watermarks/api.py): what the
`pyspark-stream` adapter run (`--adapter pyspark-stream --areas watermarks`, drawn schedules through
`flink_watermarks` in streaming queries) does not show.

* its refusals: ValueError naming the parameter and the rule, before any job runs;
* its two stages' functions cut at every row boundary (the state carried between micro-batches as
  JSON, as the state store keeps it), against the reference's trace, without Spark;
* one query on a user's own stream: auto-added splits, payloads passed through, two downstream
  tasks (records routed by split, everything else to both), the `current_watermark` column, with
  the values worked out by hand.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.adapters.pyspark import chaos
from flink_semantics.adapters.pyspark.watermarks.api import (
    MIN,
    WatermarkStrategy,
    flink_watermarks,
    source_task,
    valve_task,
)
from flink_semantics.adapters.pyspark.watermarks.engine import MAX
from flink_semantics.adapters.pyspark.watermarks.stream import (
    FEED_COLUMNS,
    log_row,
    run_many,
    strategy,
    to_event,
)
from flink_semantics.conformance.examples import notation
from flink_semantics.reference import expected_trace
from flink_semantics.spec.schedule import Schedule

from tests.test_pyspark_watermarks import CASES as D1

WM = notation("watermarks")


@pytest.mark.parametrize(("kwargs", "parameter", "rule"), [
    ({"idleness": 0}, "idleness", "WM-28"),
    ({"max_drift": -5}, "max_drift", "WM-28"),
    ({"bound": -1}, "bound", "WM-2"),
    ({"readers": 0}, "readers", "WM-17"),
    ({"interval": -10}, "interval", "WM-3"),
    ({"alignment_buffer": -1}, "alignment_buffer", "WM-25"),
    ({"punctuated": "yes"}, "punctuated", "WM-8"),
    ({"bound": True}, "bound", "WM-2"),
])
def test_an_invalid_strategy_is_refused(kwargs: dict[str, Any], parameter: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rf"^{parameter}: .*\({rule}\)$"):
        WatermarkStrategy(**kwargs)


# --------------------------------------------------------------------------
# The stages' functions, micro-batch by micro-batch, without Spark
# --------------------------------------------------------------------------


def _through_stages(s: Schedule, cut: int) -> list[Any]:
    """The schedule's rows through source_task and valve_task in two micro-batches cut before row
    `cut`, the state passed between them as the state store would."""
    import pandas as pd

    rows = [log_row("x", k, step) for k, step in enumerate(s.steps)]
    st = strategy(s)
    source_state = valve_state = None
    events = []
    for part in (rows[:cut], rows[cut:]):
        if not part:
            continue
        source_state, sent = source_task(st, "x", iter([pd.DataFrame(part, columns=FEED_COLUMNS)]),
                                         source_state)
        if sent is None:
            continue
        valve_state, out = valve_task(st.readers, "x", 0, iter([sent]), valve_state)
        if out is not None:
            events += [to_event(r) for r in out.to_dict("records")]
    return events


@pytest.mark.parametrize("name", sorted(D1))
def test_the_stages_carry_their_state_across_micro_batches(name: str) -> None:
    config, steps = D1[name][:2]
    s = WM.schedule(config, steps)
    expected = list(expected_trace(s).events)
    for cut in range(len(s.steps) + 1):
        assert _through_stages(s, cut) == expected, f"cut before row {cut}"


# --------------------------------------------------------------------------
# Through Spark
# --------------------------------------------------------------------------


@pytest.fixture
def stream_dir() -> Any:
    d = Path(tempfile.mkdtemp(prefix="wm-api-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _events(spark: Any, directory: Path, rows: list[dict[str, Any]]) -> Any:
    (directory / "in").mkdir()
    (directory / "in" / "0.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    schema = "seq long, op string, split int, ts long, ms long, value string"
    return spark.readStream.schema(schema).json(str(directory / "in"))


@pytest.mark.spark
def test_refusals_come_before_any_job(spark: Any, stream_dir: Path) -> None:
    events = _events(spark, stream_dir, [{"seq": 0, "split": 0, "ts": 1}])
    good = WatermarkStrategy()
    with pytest.raises(ValueError, match="^events: .*a streaming DataFrame"):
        flink_watermarks(spark.createDataFrame([(0, 0, 1)], "seq long, split int, ts long"), good)
    with pytest.raises(ValueError, match="^events: column 'seq' is missing"):
        flink_watermarks(events.drop("seq"), good)
    with pytest.raises(ValueError, match=r"^stream: .*\(WM-17\)"):
        flink_watermarks(events, {"a": good})
    with pytest.raises(ValueError, match=r"^downstream: .*\(WM-17\)"):
        flink_watermarks(events, good, downstream=0)
    with pytest.raises(ValueError, match="^strategy: "):
        flink_watermarks(events, {"bound": 5}.get("bound"))  # type: ignore[arg-type]
    assert not spark.streams.active


@pytest.mark.spark
def test_a_users_stream_through_the_api(spark: Any, stream_dir: Path) -> None:
    """readers=2 bound=5 interval=10, downstream 2.  s0 (auto-added to r0) 10, s1 (to r1) 30; t=10:
    r0 sends 4 (r1's channel is at MIN: no output), r1 24: output 4.  End: both splits finish; r0
    MAX (output min(MAX, 24) = 24), r1 MAX (output MAX).  Task 0 gets s0's record, task 1 s1's."""
    events = _events(spark, stream_dir, [
        {"seq": 0, "split": 0, "ts": 10, "value": "a"},
        {"seq": 1, "split": 1, "ts": 30, "value": "b"},
        {"seq": 2, "op": "tick", "ms": 10},
        {"seq": 3, "op": "end"},
    ])
    out = flink_watermarks(events, WatermarkStrategy(readers=2, bound=5, interval=10), downstream=2)
    name = "wm_api_test"
    query = (out.writeStream.format("memory").queryName(name).outputMode("append")
             .option("checkpointLocation", str(stream_dir / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    rows = spark.sql(f"select * from {name} order by target, idx").collect()
    got = [(r["target"], r["kind"], r["reader"], r["split"], r["watermark"], r["current_watermark"],
            r["value"]) for r in rows]
    shared = [("watermark", 0, -1, 4, MIN, None), ("watermark", 1, -1, 24, MIN, None),
              ("output_watermark", -1, -1, 4, 4, None),
              ("split_finished", -1, 0, 0, 4, None), ("split_finished", -1, 1, 0, 4, None),
              ("watermark", 0, -1, MAX, 4, None), ("output_watermark", -1, -1, 24, 24, None),
              ("watermark", 1, -1, MAX, 24, None), ("output_watermark", -1, -1, MAX, MAX, None)]
    assert got == [(0, "record", -1, 0, 0, MIN, "a"), *[(0, *e) for e in shared],
                   (1, "record", -1, 1, 0, MIN, "b"), *[(1, *e) for e in shared]]


# Failovers (query restarts) and injected task failures: the hand-written traces of
# tests/test_pyspark_watermarks.py, among them three schedules with one or two failovers.
FAULT_CASES = ["idleness-timeline", "alignment-buffer-3", "punctuated-blocked-then-failover",
               "failover-restarts-the-timer", "two-failovers-pending-finish"]


@pytest.mark.spark
def test_injected_task_failures_leave_the_traces_unchanged(spark: Any, tmp_path: Path) -> None:
    """Every stateful task fails in its first three attempts, each after one more group's state
    update (chaos.arm share 1, depth 3, as the fault runs): Spark runs it again from the committed
    state, and each trace is still the hand-written one, as unarmed; a
    failover is a query restart, counted."""
    schedules = [WM.schedule(*D1[name][:2]) for name in FAULT_CASES]
    expected = [WM.trace(D1[name][2]) for name in FAULT_CASES]
    (tmp_path / "plain").mkdir()
    (tmp_path / "armed").mkdir()
    plain = run_many(spark, schedules, tmp_path / "plain")
    chaos.arm(tmp_path / "armed", 1.0, depth=3)
    armed = run_many(spark, schedules, tmp_path / "armed")
    assert plain == expected
    assert armed == expected
    assert chaos.injected(tmp_path / "plain") == 0
    assert chaos.injected(tmp_path / "armed") > 0
    assert chaos.restarts(tmp_path / "armed") == 2  # the most failovers of one schedule
