"""The fault runs' task failures (adapters/pyspark/chaos.py): real Spark task failures, each task
failing at most once, counted on the driver; unarmed, nothing fails."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.adapters.pyspark import chaos


def _run(spark: Any, root: Path) -> list[int]:
    def tasks(root: str, batches: Iterator[Any]) -> Iterator[Any]:  # pickled by value: tests/ is not
        from flink_semantics.adapters.pyspark.chaos import task_point  # importable in Spark's workers

        for b in batches:
            task_point(root, "test")
            yield b

    df = spark.range(0, 40, 1, 4)
    return sorted(r.id for r in df.mapInArrow(functools.partial(tasks, str(root)), "id long").collect())


@pytest.mark.spark
def test_every_chosen_task_fails_once_and_spark_runs_it_again(spark: Any, tmp_path: Path) -> None:
    """Share 1: each of the 4 tasks fails in its first attempt; the job's result is whole."""
    chaos.arm(tmp_path, 1.0)
    assert _run(spark, tmp_path) == list(range(40))
    assert chaos.injected(tmp_path) == 4


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


def test_half_read_passes_every_row_and_armed_names_the_directory(tmp_path: Path) -> None:
    """Outside a Spark task the fault point never fails: half_read yields the rows unchanged, in
    order; `armed` is the directory's path once armed, None before."""
    assert chaos.armed(tmp_path) is None
    chaos.arm(tmp_path, 1.0)
    assert chaos.armed(tmp_path) == str(tmp_path)
    assert list(chaos.half_read([1, 2, 3, 4, 5], str(tmp_path), "test")) == [1, 2, 3, 4, 5]
    assert list(chaos.half_read([], str(tmp_path), "test")) == []
