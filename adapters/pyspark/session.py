"""One shared SparkSession per process, classic local mode by default, Spark Connect on request.

* `SPARK_REMOTE` set (`sc://host:port`, or `local[N]` for an embedded Connect
  server): Spark Connect.  A `local[N]` remote gets task retries (`local[N,F]`)
  so that injected task failures are retried.
* `CONFORMANCE_SPARK_MASTER`: an explicit master for classic mode (default
  `local[2,F]`).
* `CONFORMANCE_SPARK_MAX_FAILURES`: F, the task attempts Spark allows
  (default 8).  A conformance task fails once per round of crash steps or task
  failures of its schedules; when it runs out of attempts, the adapter resumes
  the rest in a new job.

No SparkContext or RDD API is used, so the same code runs under Connect.  A Spark
started here (a local master, an embedded Connect server) listens on 127.0.0.1 only.
Missing Java or pyspark raise AdapterError with a one-line message before any JVM
is started (check_prerequisites, called by the adapter's constructor).
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flink_semantics.adapters import check_java
from flink_semantics.spec.adapter import AdapterError

REPO_ROOT = str(Path(__file__).resolve().parents[2])
DEFAULT_MAX_FAILURES = 8

_session: Any = None


def max_task_failures() -> int:
    return int(os.environ.get("CONFORMANCE_SPARK_MAX_FAILURES", DEFAULT_MAX_FAILURES))


def _check_pyspark() -> None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as e:
        raise AdapterError(f"pyspark adapter: {e.name} is not installed (the spark extra: pip install "
                           "'flink-semantics[spark]', or '.[spark]' in a clone)") from None


def _check_java() -> None:
    check_java("pyspark")


def check_prerequisites() -> None:
    """Raise AdapterError (one line) when pyspark, or Java for a Spark started here, is missing."""
    _check_pyspark()
    remote = os.environ.get("SPARK_REMOTE")
    if not remote or remote.startswith("local"):
        _check_java()


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


_CONF = {
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
# A Spark started here (local master, embedded Connect server) listens on loopback only.
_LOOPBACK_CONF = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.connect.grpc.binding.address": "127.0.0.1",
}


def is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_session(url: str) -> Any:
    """A Spark Connect client session for `sc://host:port` (usable next to a classic session)."""
    _check_pyspark()
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    return ConnectSession.builder.remote(url).getOrCreate()


def get_spark() -> Any:
    """The process's shared SparkSession (created on first use)."""
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
    for k, v in {**_CONF, **(_LOOPBACK_CONF if local else {})}.items():
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


def stop_spark() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None


# --------------------------------------------------------------------------
# What every streaming face needs
# --------------------------------------------------------------------------


@contextmanager
def query_conf(spark: Any, values: dict[str, str]) -> Iterator[None]:
    """Session configuration for the query being started (a query keeps what it started with)."""
    old = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def struct(ddl: str) -> Any:
    """A StructType from `name type, ...` (int, long, string, boolean): parsing DDL strings needs a
    classic session, which a Spark Connect client, or its server's Python worker, may not have."""
    from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

    types = {"int": IntegerType(), "long": LongType(), "string": StringType(), "boolean": BooleanType()}
    return StructType([StructField(name, types[t]) for name, t in (f.split() for f in ddl.split(", "))])
