"""bench/side_by_side_mini_batch.py runs (`--quick`) and prints both sides and their ratios.

It checks what the benchmark printed, never a speed: a slow machine does not fail it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parent.parent


def test_the_quick_run_prints_every_side_and_the_ratios() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "bench/side_by_side_mini_batch.py", "--quick"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for side in ("naive groupBy().agg() (update)", "changelog_aggregate, mini-batch off",
                 "changelog_aggregate, mini-batch on", "changelog_aggregate, two-phase"):
        assert re.search(rf"{re.escape(side)}.* [\d,]+ rows in .* rows/s", out), (side, out)
    assert len(re.findall(r"/ naive = [\d.]+", out)) == 3, out
    assert len(re.findall(r"Flink's state accesses [\d,]+ = [\d.]+ a row", out)) == 3, out
    assert re.search(r"mini-batch on / off = [\d.]+", out), out
    assert "load before" in out and "load after" in out, out
