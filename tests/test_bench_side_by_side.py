"""The side-by-side benchmarks of the sources and watermarks APIs run (`--quick`) and print both sides.

Each runs as its own process (it builds its own Spark session, as a user's script would).  What is
checked is that the tables are there with this project's API, the alternative and a ratio on every
row; never a speed (the figures are in docs/benchmarks/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parent.parent
GUARD = 900  # a hang guard only


def _run(script: str) -> str:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java: the benchmark starts a local Spark")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=GUARD)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _rows(out: str, first: str) -> list[list[str]]:
    """The rows of the markdown table whose header starts with `first`."""
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_sources_side_by_side_prints_both_sources_into_both_sinks() -> None:
    out = _run("side_by_side_sources.py")
    rows = _rows(out, "source")
    assert {(r[0], r[1]) for r in rows} == {(s, k) for s in ("flip27", "spark-json")
                                            for k in ("parquet", "idempotent")}
    assert all(float(r[4]) > 0 for r in rows)  # the ratio column
    assert "load" in out and "latestOffset" in out and "addBatch" in out
    assert len(_rows(out, "files")) == 2  # the sweep, both sides on each row
    assert "Python parse alone" in out


def test_watermarks_side_by_side_prints_both_queries() -> None:
    out = _run("side_by_side_watermarks.py")
    rows = _rows(out, "query")
    assert [r[0] for r in rows] == ["event_time_windows", "event_time_windows parallel", "withWatermark"]
    assert all(float(r[3]) > 0 for r in rows)  # the ratio column
    assert "load" in out and "addBatch" in out and "Python alone" in out
