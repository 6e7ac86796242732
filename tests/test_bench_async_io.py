"""bench/side_by_side_async_io.py runs: `--quick` prints both sides and their ratios.

Counts the rows of the printed table; never a speed (the machine may be busy).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("async_map ordered", "async_map unordered", "hand-written mapInPandas + Semaphore",
            "Arrow UDF, concurrency.level")


def test_quick_run_prints_every_variant_and_the_ratios(tmp_path: Path) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "side_by_side_async_io.py"), "--quick"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    table = [line for line in out.splitlines() if line.startswith("| ") and "rows/s" not in line]
    for name in VARIANTS:
        for mode in ("batch", "stream"):
            rows = [line for line in table if line.startswith(f"| {name} ") and f"| {mode} " in line]
            assert len(rows) == 1, (name, mode, out)
            cells = [c.strip() for c in rows[0].strip("|").split("|")]
            assert cells[3].endswith("%") and cells[4].endswith("x") and cells[5].endswith("x"), rows[0]
    assert "load average before" in out and "CPU µs/row" in out
