"""bench/side_by_side_key_groups.py runs (`--quick`) and prints both sides and their ratios.

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
    done = subprocess.run([sys.executable, "bench/side_by_side_key_groups.py", "--quick"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for side in ("native groupBy().count()", "keyed_process", "plain transformWithStateInPandas"):
        assert re.search(rf"p=2 {re.escape(side)} +[\d,]+ rows in .* rows/s", out), (side, out)
    assert re.search(r"keyed_process / native = [\d.]+ .*keyed_process / plain = [\d.]+", out), out
    assert re.search(r"Spark repartition +[\d.]+ s", out), out
    assert re.search(r"rescale_state +[\d.]+ s", out), out
    assert re.search(r"ratio \(Spark / ours\) [\d.]+", out), out
    assert "load before" in out and "load after" in out, out
