"""The Spark session of the conformance runners (`adapter.py`, `streaming.py`, the fault run, the
`spark-native` adapter, the project's own tests and benchmarks): one per process.

* `SPARK_REMOTE` set (`sc://host:port`, or `local[N]` for an embedded Connect server): Spark
  Connect.  A `local[N]` remote gets task retries (`local[N,F]`) so that injected task failures are
  retried.
* `CONFORMANCE_SPARK_MASTER`: an explicit master for classic mode (default `local[2,F]`).
* `CONFORMANCE_SPARK_MAX_FAILURES`: F, the task attempts Spark allows (default 8).  A conformance
  task fails once per round of crash steps or task failures of its schedules; when it runs out of
  attempts, the adapter resumes the rest in a new job.

Unlike `session.get_spark()`, what a user's code calls, this session is the runners' own: its
Python workers run this interpreter and are forked from a daemon that has imported the runtime
(daemon.py), its UI is off, two shuffle partitions, and Spark's log is quiet (injected task
failures are expected).  A Spark started here listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark.session import (
    LOOPBACK_CONF,
    _check_java,
    _check_pyspark,
    connect_session,
)
from flink_semantics.spec.adapter import AdapterError

REPO_ROOT = str(Path(__file__).resolve().parents[2])
DEFAULT_MAX_FAILURES = 8

_session: Any = None


def max_task_failures() -> int:
    return int(os.environ.get("CONFORMANCE_SPARK_MAX_FAILURES", DEFAULT_MAX_FAILURES))


def _prepare_environment() -> None:
    # Workers must run this interpreter (pitfall P1) and import adapters/spec (P2).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if REPO_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, *paths])


def _with_failures(master: str) -> str:
    """local[N] -> local[N,F]: plain local mode never retries a failed task."""
    m = re.fullmatch(r"local(\[(\d+|\*)\])?", master)
    if not m:
        return master
    return f"local[{m.group(2) or 1},{max_task_failures()}]"


RUNNER_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A failed task is run again at once: no waiting for a more local slot (there is none).
    "spark.locality.wait": "0s",
    # Workers are forked from a daemon that has already imported the runtime (daemon.py).
    "spark.python.daemon.module": "flink_semantics.adapters.pyspark.daemon",
    # Injected task failures are expected: keep their stack traces out of the test output.
    "spark.log.level": "FATAL",
}


def runner_spark() -> Any:
    """The process's shared SparkSession of the runners (created on first use)."""
    global _session
    if _session is not None:
        return _session
    _check_pyspark()
    remote = os.environ.get("SPARK_REMOTE")
    if not remote or remote.startswith("local"):
        _check_java()
    _prepare_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("flink-semantics-pyspark")
    local = not remote or remote.startswith("local")
    local = local and os.environ.get("CONFORMANCE_SPARK_MASTER", "local").startswith("local")
    for k, v in {**RUNNER_CONF, **(LOOPBACK_CONF if local else {})}.items():
        builder = builder.config(k, v)
    try:
        if remote and remote.startswith("sc://"):
            spark = connect_session(remote)
        elif remote:  # an embedded Connect server in this process
            with warnings.catch_warnings():
                # The server takes the static confs (UI off); the client then warns that it
                # cannot set them again.
                warnings.simplefilter("ignore", UserWarning)
                spark = builder.remote(_with_failures(remote)).getOrCreate()
        else:
            master = os.environ.get("CONFORMANCE_SPARK_MASTER", "local[2]")
            spark = (builder.master(_with_failures(master))
                     .config("spark.task.maxFailures", str(max_task_failures())).getOrCreate())
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AdapterError(f"pyspark adapter: could not start Spark: {msg}") from None
    _session = spark
    return spark
