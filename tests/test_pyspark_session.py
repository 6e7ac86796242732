"""`get_spark()`, the session a Spark user's code gets, changes nothing the user did not ask for.

It runs in a fresh interpreter (the tests' own shared session is the runners', runner_session.py):
the session it starts has no worker daemon of ours and Spark's own defaults, listens on loopback,
and the environment differs only by what PySpark itself sets when it starts a JVM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.spark

PROBE = """
import json, os
before = dict(os.environ)
from flink_semantics.adapters.pyspark.session import get_spark
spark = get_spark()
after = dict(os.environ)
conf = dict(spark.sparkContext.getConf().getAll())
print("PROBE " + json.dumps({
    "changed": sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)),
    "daemon": conf.get("spark.python.daemon.module"), "bind": conf.get("spark.driver.bindAddress"),
    "again": get_spark() is spark, "shuffle": spark.conf.get("spark.sql.shuffle.partitions"),
    "log": conf.get("spark.log.level")}))
spark.stop()
"""


def probe() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_REMOTE"))}
    run = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    [line] = [ln for ln in run.stdout.splitlines() if ln.startswith("PROBE ")]
    return json.loads(line.removeprefix("PROBE "))


def test_get_spark_starts_a_plain_session_on_loopback() -> None:
    """No worker daemon, no SQL or log setting, no PYTHONPATH or PYSPARK_* variable: only the
    variables PySpark's own launcher sets (SPARK_*) change; the driver binds to 127.0.0.1; a second
    call returns the same session."""
    seen = probe()
    assert seen["daemon"] is None and seen["log"] is None, seen
    assert seen["shuffle"] == "200", seen  # Spark's default, not the runners' 2
    assert seen["bind"] == "127.0.0.1", seen
    assert seen["again"] is True, seen
    assert [k for k in seen["changed"] if not k.startswith("SPARK_")] == [], seen
