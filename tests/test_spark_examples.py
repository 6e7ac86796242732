"""The Spark user's examples (examples/spark/<area>.py, one per area) run as printed.

Each example is what the README's Spark section shows: a user's own small streaming DataFrame
through the area's public API, with its own assertions on the result.  They run in this process, as
`python examples/spark/<area>.py` runs them, on the tests' shared Spark session (an example's
`SparkSession.builder.getOrCreate()` finds it; its `spark.stop()` is held off until the session
ends), so that the five cost no Spark start-ups of their own.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
from flink_semantics.spec.area import areas

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "spark"


def test_every_area_has_an_example() -> None:
    """The README's Spark section starts from one API per area, each with its example."""
    assert sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")) == sorted(areas())


@pytest.mark.parametrize("area", sorted(areas()))
def test_example_runs_as_printed(area: str, spark: Any, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The example runs to its end (its own asserts hold) and prints what it shows."""
    from pyspark.sql import SparkSession

    path = EXAMPLES / f"{area}.py"
    if not path.exists():
        pytest.fail(f"{path} is missing")
    monkeypatch.setattr(SparkSession, "stop", lambda self: None)
    monkeypatch.chdir(tmp_path)
    before = dict(spark.conf.getAll)
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:  # what the example set in its session does not reach the tests after it
        for key, value in dict(spark.conf.getAll).items():
            if key not in before:
                spark.conf.unset(key)
            elif before[key] != value:
                spark.conf.set(key, before[key])
    out = capsys.readouterr().out
    assert out.strip(), f"{path.name} printed nothing"
    assert list(tmp_path.iterdir()) == [], f"{path.name} left files behind in its working directory"
