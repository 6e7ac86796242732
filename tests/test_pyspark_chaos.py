"""The fault runs' task failures (adapters/pyspark/chaos.py): real Spark task failures, a task
failing in at most its first `depth` attempts, each at a later fault point, counted on the driver;
unarmed, nothing fails."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.adapters.pyspark import chaos


def _run(spark: Any, root: Path, points: int = 1) -> list[int]:
    """40 ids in 4 tasks, each meeting `points` fault points after it has yielded its rows."""
    def tasks(root: str, points: int, batches: Iterator[Any]) -> Iterator[Any]:  # pickled by value:
        from flink_semantics.adapters.pyspark.chaos import task_point  # tests/ is not importable in

        yield from batches  # Spark's workers
        for _ in range(points):
            task_point(root, "test")

    out = spark.range(0, 40, 1, 4).mapInArrow(functools.partial(tasks, str(root), points), "id long")
    return sorted(r.id for r in out.collect())


@pytest.mark.spark
def test_every_chosen_task_fails_once_and_spark_runs_it_again(spark: Any, tmp_path: Path) -> None:
    """Share 1: each of the 4 tasks fails in its first attempt; the job's result is whole."""
    chaos.arm(tmp_path, 1.0)
    assert _run(spark, tmp_path) == list(range(40))
    assert chaos.injected(tmp_path) == 4


@pytest.mark.spark
@pytest.mark.parametrize("points", [1, 2, 5])
def test_a_task_fails_in_its_first_depth_attempts_at_most_once_a_point(spark: Any, tmp_path: Path,
                                                                       points: int) -> None:
    """Depth 3: attempt a fails at its (a+1)-th point, so a task with p points fails min(p, 3) times
    (Spark runs it again each time, and the job's result is whole)."""
    chaos.arm(tmp_path, 1.0, depth=3)
    assert _run(spark, tmp_path, points) == list(range(40))
    assert chaos.injected(tmp_path) == 4 * min(points, 3)


@pytest.mark.spark
def test_unarmed_nothing_fails(spark: Any, tmp_path: Path) -> None:
    chaos.arm(tmp_path, 0.0)
    assert _run(spark, tmp_path) == list(range(40))
    assert chaos.injected(tmp_path) == 0


def test_share_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(chaos.ENV, "0.25")
    assert chaos.share_from_env() == 0.25
    for bad in ("lots", "1.5", "-0.1"):
        monkeypatch.setenv(chaos.ENV, bad)
        with pytest.raises(ValueError, match=chaos.ENV):
            chaos.share_from_env()
    monkeypatch.delenv(chaos.ENV)
    assert chaos.share_from_env() == 0.0


def test_the_choice_of_tasks_is_deterministic_and_near_the_share() -> None:
    keys = [f"read:{stage}:{p}" for stage in range(100) for p in range(10)]
    chosen = [chaos._chosen(3, k, 0.2) for k in keys]
    assert chosen == [chaos._chosen(3, k, 0.2) for k in keys]
    assert 150 <= sum(chosen) <= 250


def test_partly_read_passes_every_row_and_armed_names_the_directory(tmp_path: Path) -> None:
    """Outside a Spark task the fault points never fail: partly_read yields the rows unchanged, in
    order; `armed` is the directory's path once armed, None before."""
    assert chaos.armed(tmp_path) is None
    assert list(chaos.partly_read([1, 2, 3], str(tmp_path), "test")) == [1, 2, 3]  # not armed
    chaos.arm(tmp_path, 1.0, depth=3)
    assert chaos.armed(tmp_path) == str(tmp_path)
    assert list(chaos.partly_read([1, 2, 3, 4, 5], str(tmp_path), "test")) == [1, 2, 3, 4, 5]
    assert list(chaos.partly_read([], str(tmp_path), "test")) == []


def _points(monkeypatch: pytest.MonkeyPatch, rows: list[int], depth: int, tmp_path: Path) -> list[Any]:
    """What partly_read yields, with "P" where it calls task_point."""
    got: list[Any] = []
    tmp_path.mkdir()
    monkeypatch.setattr(chaos, "task_point", lambda root, where: got.append("P"))
    chaos.arm(tmp_path, 1.0, depth=depth)
    got += chaos.partly_read(rows, str(tmp_path), "test")
    return got


def test_partly_read_has_a_point_after_each_part(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Depth d: points after each of d + 1 equal parts but the last, at distinct places."""
    assert _points(monkeypatch, list(range(8)), 3, tmp_path / "a") == [0, 1, "P", 2, 3, "P", 4, 5, "P", 6, 7]
    assert _points(monkeypatch, list(range(4)), 1, tmp_path / "b") == [0, 1, "P", 2, 3]
    assert _points(monkeypatch, [0, 1], 3, tmp_path / "c") == ["P", 0, "P", 1]
    assert _points(monkeypatch, [0], 3, tmp_path / "d") == ["P", 0]


def test_depth_must_be_a_positive_int(tmp_path: Path) -> None:
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="depth"):
            chaos.arm(tmp_path, 1.0, depth=bad)  # type: ignore[arg-type]


def test_the_fault_runs_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """$CONFORMANCE_STREAM_EXAMPLES sets pyspark-stream's examples a property (a usage error when not
    a positive integer); the depth stays below spark.task.maxFailures."""
    from flink_semantics.adapters.pyspark import streaming

    monkeypatch.delenv(streaming.EXAMPLES_ENV, raising=False)
    assert streaming.examples_from_env() == streaming.EXAMPLES
    monkeypatch.setenv(streaming.EXAMPLES_ENV, "4")
    assert streaming.examples_from_env() == 4
    for bad in ("0", "-3", "many", "2.5"):
        monkeypatch.setenv(streaming.EXAMPLES_ENV, bad)
        with pytest.raises(ValueError, match=streaming.EXAMPLES_ENV):
            streaming.examples_from_env()
    monkeypatch.setattr(streaming, "FAULT_DEPTH", 3)
    monkeypatch.setenv("CONFORMANCE_SPARK_MAX_FAILURES", "8")
    assert streaming.fault_depth() == 3
    monkeypatch.setenv("CONFORMANCE_SPARK_MAX_FAILURES", "3")
    assert streaming.fault_depth() == 2


def test_a_fault_run_cuts_an_areas_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Armed, an area whose stream module has a FAULT_CALL_SIZE runs its schedules in calls of at
    most that many, in order; unarmed, or another area, in one call."""
    from flink_semantics.adapters.pyspark import streaming

    monkeypatch.setattr(streaming.stream_module("sources"), "FAULT_CALL_SIZE", 30)
    indices = list(range(5, 75))
    assert streaming._calls("sources", indices, True) == [indices[:30], indices[30:60], indices[60:]]
    assert streaming._calls("sources", indices, False) == [indices]
    assert streaming._calls("watermarks", indices, True) == [indices]
