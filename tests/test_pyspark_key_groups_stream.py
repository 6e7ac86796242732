"""Key groups on Structured Streaming: the public API (adapters/pyspark/key_groups/api.py) and the
schedules run through it (adapters/pyspark/key_groups/stream.py, `run_many`).

1. Refused configurations: ValueError naming the parameter and the rule, before any job runs (no
   Spark session is given).
2. Hand-picked schedules (rescales up, down, to 1 and to the maximum parallelism; lost updates;
   refusals; the three operator-state modes; null keys; both hash profiles; a rejected
   configuration) in one `run_many` call: the reference model's traces.  A routed key's subtask is
   the partition Spark ran its update in, a restored key's the state partition that holds it.
3. The API on a user's own stream: a count per key restarted 4 -> 7 -> 2 -> 16 subtasks with
   `rescale_state`; the last query's keyed state, read with the state data source, equals the
   reference model's key by key, each key in the state partition of its key group's subtask.

The drawn schedules run through `--adapter pyspark-stream` (conformance/test_key_groups.py).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.conformance.examples import notation
from flink_semantics.reference import expected_trace
from flink_semantics.reference.key_groups import Model
from flink_semantics.spec.areas.key_groups import CheckpointStep, KeyGroupsConfig, RestoreStep, UpdateStep
from flink_semantics.spec.schedule import Schedule

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
    "split names rotating, same parallelism, no checkpoint": (
        {"parallelism": 2, "max_parallelism": 10},
        'restore 3\nadd_state t0 a 1\nadd_state t1 a 2\nadd_state t2 a 3\nadd_state t0 b 4\n'
        'add_state t1 b 5\nupdate 3\ncheckpoint\nrestore 3\nrestore 2\nupdate 3'),
}


def rendered(events: Any) -> list[str]:
    return [KG.render(e) for e in events]


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="test-kg-stream-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------
# 1. Refusals on the driver
# --------------------------------------------------------------------------


def test_bad_configuration_is_refused_before_any_job() -> None:
    """KG-8, KG-15, KG-16 and the profile: ValueError naming the parameter and the rule (no session:
    nothing could have run)."""
    from flink_semantics.adapters.pyspark.key_groups import api
    from flink_semantics.adapters.pyspark.key_groups.stream import SumProcessor

    def keyed(**kw: Any) -> None:
        api.keyed_process(None, key="k", processor=SumProcessor(), **kw)

    with pytest.raises(ValueError, match="^parallelism: KG-8"):
        keyed(parallelism=0)
    with pytest.raises(ValueError, match="^max_parallelism: KG-8"):
        keyed(parallelism=5, max_parallelism=4)
    with pytest.raises(ValueError, match="^max_parallelism: KG-8"):
        keyed(parallelism=1, max_parallelism=32769)
    with pytest.raises(ValueError, match="^hash: "):
        keyed(parallelism=2, hash="md5")
    with pytest.raises(ValueError, match="^processor: "):
        api.keyed_process(None, key="k", processor=object(), parallelism=2)  # type: ignore[arg-type]

    def rescale(**kw: Any) -> None:
        api.rescale_state(None, "/nowhere", parallelism=2, max_parallelism=128, batch_id=0, **kw)

    with pytest.raises(ValueError, match="^new_parallelism: KG-15: parallelism above the checkpoint's max"):
        rescale(new_parallelism=129)
    with pytest.raises(ValueError, match="^new_max_parallelism: KG-16: max parallelism changed"):
        rescale(new_parallelism=3, new_max_parallelism=256)
    with pytest.raises(ValueError, match="^new_parallelism: KG-8: parallelism out of bounds"):
        rescale(new_parallelism=0)
    rescale_without_checkpoint = api.rescale_refusal(200, None, None)
    assert rescale_without_checkpoint is None  # a new job: any parallelism in bounds (KG-9)


def test_unpaired_surrogates_are_unsupported_with_sparks_reason(workdir: Path) -> None:
    """KG-34: a Spark string is UTF-8, so a key with an unpaired surrogate would become "?" in the
    query (UTF8String.fromString): run_many refuses it up front with that reason, no query started."""
    from flink_semantics.adapters.pyspark.key_groups.stream import STREAM_UNSUPPORTED, run_many

    bad = KG.schedule({"parallelism": 2, "hash": "spark"}, 'update "?"\nupdate "a\\ud800"')
    with pytest.raises(ValueError, match="needs key_groups.lone_surrogates: Spark's StringType holds UTF-8"):
        run_many(None, [bad], workdir)
    assert "UTF8String.fromString" in STREAM_UNSUPPORTED["key_groups.lone_surrogates"]


# --------------------------------------------------------------------------
# 2. Schedules through run_many
# --------------------------------------------------------------------------


@pytest.mark.spark
def test_schedules_through_the_api_in_shared_queries(spark: Any, workdir: Path) -> None:
    """Hand-picked schedules and a rejected configuration in one run_many call (schedules at the same
    parallelism share a query): the reference model's traces."""
    from flink_semantics.adapters.pyspark.key_groups.stream import run_many

    schedules = [KG.schedule(*CASES[name]) for name in CASES]
    schedules.append(Schedule("key_groups", KeyGroupsConfig(5, 4), (UpdateStep(1),)))
    traces = run_many(spark, schedules, workdir)
    for s, t in zip(schedules, traces):
        assert rendered(t.events) == rendered(expected_trace(s).events), s.to_json()


# --------------------------------------------------------------------------
# 3. The API on a user's stream: state after rescales, key by key
# --------------------------------------------------------------------------

KEYS = [f"user-{k}" for k in range(40)] + ["", "é", "日本", "\U0001F600"]
PHASES = [(4, KEYS), (7, KEYS[::3]), (2, KEYS[::5]), (16, [])]  # parallelism, keys updated (value 1)


@pytest.mark.spark
def test_state_after_rescales_key_by_key(spark: Any, workdir: Path) -> None:
    """A count per key at parallelism 4, restarted at 7, 2 and 16 (maxP 16) with `rescale_state`:
    the last query's keyed state, read with the state data source, equals the reference model's key
    by key, each key in the state partition of its key group's subtask (KG-3, KG-12, KG-13)."""
    from flink_semantics.adapters.pyspark.key_groups import api

    class Count(api.KeyedProcessor):
        state_schema = "value long"
        output_schema = "key string, value long"

        def process(self, key: Any, row: Any, state: Any, ctx: Any) -> list[tuple[Any, ...]]:
            value = (state.get() or (0,))[0] + 1
            state.update((value,))
            return [(key, value)]

    initial, previous = None, None
    for n, (p, keys) in enumerate(PHASES):
        inp = workdir / f"in-{n}"
        inp.mkdir()
        (inp / "0.json").write_text("".join(json.dumps({"k": k}) + "\n" for k in keys))
        df = spark.readStream.schema("k string").json(str(inp))
        out = api.keyed_process(df, key="k", processor=Count(), parallelism=p, max_parallelism=16,
                                initial_state=initial)
        location = str(workdir / f"checkpoint-{n}")
        writer = (out.writeStream.format("noop").option("checkpointLocation", location)
                  .trigger(availableNow=True))
        api.start(writer, parallelism=p, spark=spark).awaitTermination()
        if n + 1 < len(PHASES):
            initial = api.rescale_state(spark, location, parallelism=p, max_parallelism=16,
                                        new_parallelism=PHASES[n + 1][0])
        previous = location
    observed = (spark.read.format("statestore").option("stateVarName", "keyed").load(previous)
                .selectExpr("partition_id AS partition", "user_map_key.key_group", "user_map_key.key",
                            "user_map_value.value"))

    model = Model(KeyGroupsConfig(4, 16))
    steps = [UpdateStep(k, "string") for k in KEYS] + [CheckpointStep()]
    for p, keys in PHASES[1:]:
        steps += [RestoreStep(p, None), *[UpdateStep(k, "string") for k in keys], CheckpointStep()]
    for i, step in enumerate(steps):
        model.apply(i, step)
    expected = sorted((t, kg, key, value) for t, groups in enumerate(model.keyed)
                      for kg, items in groups.items() for (_, key), value in items.items())
    assert model.parallelism == 16 and len(expected) == len(KEYS)
    got = sorted((r["partition"], r["key_group"], r["key"], r["value"]) for r in observed.collect())
    assert got == expected


# --------------------------------------------------------------------------
# 4. Task failures injected mid-micro-batch (adapters/pyspark/chaos.py)
# --------------------------------------------------------------------------

ONE_GROUP = ({"parallelism": 1, "max_parallelism": 1},  # one key group: every key in subtask 0, group 0
             "update 7 2\nupdate 7 3\nadd_state t0 s 4\ncheckpoint\nupdate 7 10\nrestore 1\nupdate 7 1")


def _fields(e: Any) -> tuple[Any, ...]:
    d = e.to_dict()
    return (d["event"], d["step"], d.get("subtask"), d.get("value"), d.get("elements"))


@pytest.mark.spark
def test_task_failures_change_no_trace(spark: Any, workdir: Path) -> None:
    """Every keyed task fails in its first three attempts, each after one more grouping key's first
    state update (chaos.arm(root, 1.0, depth=3), as the fault runs); Spark runs it again from the
    last committed state store version each time: the traces are those of an unarmed run, the
    reference's, and (one key group) the hand-written one: the update after the checkpoint lost, the
    sum 5 and the operator element restored."""
    from flink_semantics.adapters.pyspark import chaos
    from flink_semantics.adapters.pyspark.key_groups.stream import run_many

    schedules = [KG.schedule(*ONE_GROUP), KG.schedule(*CASES["spec example: restore 2 -> 3"])]
    unarmed = run_many(spark, schedules, workdir / "unarmed")
    armed_root = workdir / "armed"
    armed_root.mkdir()
    chaos.arm(armed_root, 1.0, depth=3)
    armed = run_many(spark, schedules, armed_root)
    assert chaos.injected(armed_root) > 0
    assert chaos.restarts(armed_root) == 1  # the restores' round: one query stopped, one started
    assert armed == unarmed
    for s, t in zip(schedules, armed):
        assert rendered(t.events) == rendered(expected_trace(s).events)
    assert [_fields(e) for e in armed[0].events] == [
        ("routed", 0, 0, 2, None), ("routed", 1, 0, 5, None), ("routed", 4, 0, 15, None),
        ("restored", 5, None, None, None), ("range", 5, 0, None, None), ("keyed", 5, 0, 5, None),
        ("operator", 5, 0, None, [4]), ("routed", 6, 0, 6, None)]
