"""The side-by-side benchmarks of the five APIs (bench/side_by_side_<area>.py) run (`--quick`) and
print both sides.

Each runs as its own process (it builds its own Spark session, as a user's script would).  What is
checked is that the tables are there with this project's API, the alternative and a ratio on every
row; never a speed (the figures are in docs/benchmarks/)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parent.parent
GUARD = 900  # a hang guard only


def _run(script: str, cwd: Path = ROOT) -> str:
    """The benchmark's `--quick` output, run as a user runs it (its workers on this interpreter)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java: the benchmark starts a local Spark")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--quick"], cwd=cwd, env=env,
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


ASYNC_VARIANTS = ("async_map ordered", "async_map unordered", "hand-written mapInPandas + Semaphore",
                  "Arrow UDF, concurrency.level")


def test_async_io_side_by_side_prints_every_variant_and_the_ratios(tmp_path: Path) -> None:
    out = _run("side_by_side_async_io.py", cwd=tmp_path)
    table = [line for line in out.splitlines() if line.startswith("| ") and "rows/s" not in line]
    for name in ASYNC_VARIANTS:
        for mode in ("batch", "stream"):
            rows = [line for line in table if line.startswith(f"| {name} ") and f"| {mode} " in line]
            assert len(rows) == 1, (name, mode, out)
            cells = [c.strip() for c in rows[0].strip("|").split("|")]
            assert cells[3].endswith("%") and cells[4].endswith("x") and cells[5].endswith("x"), rows[0]
    assert "load average before" in out and "CPU µs/row" in out


def test_key_groups_side_by_side_prints_every_side_and_the_ratios() -> None:
    out = _run("side_by_side_key_groups.py")
    for side in ("native groupBy().count()", "keyed_process", "plain transformWithStateInPandas"):
        assert re.search(rf"p=2 {re.escape(side)} +[\d,]+ rows in .* rows/s", out), (side, out)
    assert re.search(r"keyed_process / native = [\d.]+ .*keyed_process / plain = [\d.]+", out), out
    assert re.search(r"Spark repartition +[\d.]+ s", out), out
    assert re.search(r"rescale_state +[\d.]+ s", out), out
    assert re.search(r"ratio \(Spark / ours\) [\d.]+", out), out
    assert "load before" in out and "load after" in out, out


def test_mini_batch_side_by_side_prints_every_side_and_the_ratios() -> None:
    out = _run("side_by_side_mini_batch.py")
    for side in ("naive groupBy().agg() (update)", "changelog_aggregate, mini-batch off",
                 "changelog_aggregate, mini-batch on", "changelog_aggregate, two-phase"):
        assert re.search(rf"{re.escape(side)}.* [\d,]+ rows in .* rows/s", out), (side, out)
    assert len(re.findall(r"/ naive = [\d.]+", out)) == 3, out
    assert len(re.findall(r"Flink's state accesses [\d,]+ = [\d.]+ a row", out)) == 3, out
    assert re.search(r"mini-batch on / off = [\d.]+", out), out
    assert "load before" in out and "load after" in out, out
