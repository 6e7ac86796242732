"""The key groups area on Structured Streaming (adapters/pyspark/key_groups/stream.py): keyed and
operator state held by a real streaming query (`transformWithStateInPandas` on RocksDB), read back
with Spark's state data source, redistributed by key-group range and restored into a query at the
new parallelism.

1. Whole traces against the reference model, on hand-picked schedules (rescales up, down, to 1 and
   to the maximum parallelism; lost updates; refusals; the three operator-state modes; null keys;
   both hash profiles) and on a few drawn ones.  A routed key's subtask in the trace is the
   partition Spark ran its update in, a restored key's subtask the state partition that holds it:
   where Spark really keeps the state, not a computed number.
2. The keyed state after a sequence of rescales, read with the state data source, equals the
   reference model's key by key (chispa DataFrame comparison), and every key is in the state
   partition of its key group's subtask.

A schedule costs seconds (a query per job, a micro-batch per checkpoint): few schedules here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance.areas.key_groups import Features, schedules
from flink_semantics.conformance.examples import notation
from flink_semantics.reference import expected_trace
from flink_semantics.reference.key_groups import Model
from flink_semantics.spec.areas.key_groups import CheckpointStep
from flink_semantics.spec.schedule import Schedule
from hypothesis import HealthCheck, given, settings

pytestmark = pytest.mark.spark

KG = notation("key_groups")

CASES = {
    "spec example: restore 2 -> 3": (
        {"parallelism": 2}, 'update 7\nupdate "a" 5\nadd_state t0 offsets 1\ncheckpoint\nrestore 3'),
    "spark profile, three modes, 3 -> 5 -> 1": (
        {"parallelism": 3, "hash": "spark"},
        'update null 2\nupdate "é"\nadd_state t0 s 1\nadd_state t1 s 2\nadd_state t2 u 3 union\n'
        'add_state t1 b 4 broadcast\ncheckpoint\nrestore 5\nupdate 9L\ncheckpoint\nrestore 1'),
    "refusals, lost updates, restore to the maximum": (
        {"parallelism": 2, "max_parallelism": 4},
        'update 7\nupdate "\U0001F600"\ncheckpoint\nupdate 7\nrestore 5\nrestore 5 max=8\nrestore 4\n'
        'update 7\nupdate null\nupdate -1L\ncheckpoint\nrestore 1\nupdate 7'),
}


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="test-kg-stream-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def rendered(events: Any) -> list[str]:
    return [KG.render(e) for e in events]


def through_the_stream(spark: Any, schedule: Schedule, root: Path) -> Any:
    from flink_semantics.adapters.pyspark.key_groups.stream import StreamRun

    run = StreamRun(spark, schedule, root)
    run.run()
    return run


@pytest.mark.parametrize("name", list(CASES))
def test_schedule_through_structured_streaming(name: str, spark: Any, workdir: Path) -> None:
    """The whole trace of a hand-picked schedule equals the reference model's."""
    config, steps = CASES[name]
    s = KG.schedule(config, steps)
    assert rendered(through_the_stream(spark, s, workdir).events) == rendered(expected_trace(s).events)


def rescaled(s: Schedule) -> bool:
    """A checkpoint, then a restore the reference performs at another parallelism."""
    checkpoints = [i for i, step in enumerate(s.steps) if isinstance(step, CheckpointStep)]
    first = min(checkpoints, default=len(s.steps))
    return any(e.event == "restored" and e.step > first and e.parallelism != s.config.parallelism
               for e in expected_trace(s).events)


# A drawn schedule is a query per restore (about 18 s): one in the default run, more in `tox -e thorough`.
@settings(max_examples=1 if os.environ.get("CONFORMANCE_PROFILE", "default") == "default" else 8,
          deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(schedule=schedules(Features(spark_hash=True, operator_state=True, rescale=True, refusals=True,
                                   lone_surrogates=False, max_steps=14)).filter(rescaled))
def test_drawn_schedules_through_structured_streaming(schedule: Schedule, spark: Any) -> None:
    """Drawn schedules of every feature that restore from a checkpoint at another parallelism: the
    same traces as the reference model."""
    root = Path(tempfile.mkdtemp(prefix="test-kg-stream-"))
    try:
        observed = rendered(through_the_stream(spark, schedule, root).events)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert observed == rendered(expected_trace(schedule).events), schedule.to_json()


def test_unpaired_surrogates_are_refused_with_sparks_reason(workdir: Path) -> None:
    """KG-34: a Spark string is UTF-8, so a key with an unpaired surrogate would become "?" in the
    query (UTF8String.fromString): the streaming face refuses it up front, saying so, before any
    query starts; an escaped pair (the character 😀) is a key like any other."""
    from flink_semantics.adapters.pyspark.key_groups.stream import UNSUPPORTED, StreamRun

    bad = KG.schedule({"parallelism": 2, "hash": "spark"}, 'update "?"\nupdate "a\\ud800"')
    with pytest.raises(ValueError, match="needs key_groups.lone_surrogates: Spark's StringType holds UTF-8"):
        StreamRun(None, bad, workdir)
    assert "UTF8String.fromString" in UNSUPPORTED["key_groups.lone_surrogates"]
    StreamRun(None, KG.schedule({"parallelism": 2}, 'update "\\ud83d\\ude00"'), workdir)


def test_state_after_rescales_key_by_key(spark: Any, workdir: Path) -> None:
    """Many keys, restored 4 -> 7 -> 2 -> 16 (the maximum) -> 3: the last query's keyed state, read
    with the state data source, equals the reference model's key by key, and each key lives in the
    state partition of its key group's subtask (KG-3, KG-13)."""
    from chispa import assert_df_equality
    from flink_semantics.adapters.pyspark.key_groups.stream import keyed_state

    keys = [f"update {k}" for k in range(40)] + [f'update "k{k}" {k % 5 + 1}' for k in range(40)]
    keys += [f"update {k}L" for k in (2**40, -(2**40), 2**63 - 1)]
    steps = "\n".join(keys + ["checkpoint", "restore 7"] + keys[::3] + ["checkpoint", "restore 2"]
                      + keys[::5] + ["checkpoint", "restore 16", "restore 3", "update 0"])
    s = KG.schedule({"parallelism": 4, "max_parallelism": 16}, steps)
    run = through_the_stream(spark, s, workdir)
    job = run.stopped[-1]
    observed = keyed_state(spark, job.location, job.batches - 1)

    model = Model(s.config)
    for i, step in enumerate(s.steps):
        model.apply(i, step)
    rows = [(t, kg, type_, None if key is None else str(key), value)
            for t, groups in enumerate(model.keyed) for kg, items in groups.items()
            for (type_, key), value in items.items()]
    assert len(rows) == 83 and model.parallelism == 3
    schema = "partition int, key_group int, type string, key string, value long"
    expected = spark.createDataFrame(rows, schema)
    assert_df_equality(observed, expected, ignore_row_order=True, ignore_nullable=True)
