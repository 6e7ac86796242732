"""The Spark session of a user of the APIs, and what every streaming API needs.

`get_spark()` is what a Spark engineer would write: the active session if there is one, untouched;
else `SparkSession.builder.getOrCreate()`, which honours `SPARK_REMOTE` (Spark Connect) and
`spark-submit`'s settings.  A local session that it starts itself listens on 127.0.0.1 only; it sets
nothing else: no worker daemon, no environment variable, no SQL setting.  The conformance runners
start their own session (`runner_session.py`: task retries, the worker daemon, the runners'
settings).

No SparkContext or RDD API is used, so the same code runs under Connect.  Missing Java or pyspark
raise AdapterError with a one-line message before any JVM is started (check_prerequisites).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flink_semantics.adapters import check_java
from flink_semantics.spec.adapter import AdapterError


def _check_pyspark() -> None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as e:
        raise AdapterError(f"pyspark adapter: {e.name} is not installed (the spark extra: pip install "
                           "'flink-semantics[spark]', or '.[spark]' in a clone)") from None


def _check_java() -> None:
    check_java("pyspark")


def starts_local_spark() -> bool:
    """Whether a session started here runs Spark in this process (no remote server, no cluster)."""
    remote = os.environ.get("SPARK_REMOTE")
    return not remote or remote.startswith("local")


def check_prerequisites() -> None:
    """Raise AdapterError (one line) when pyspark, or Java for a Spark started here, is missing."""
    _check_pyspark()
    if starts_local_spark():
        _check_java()


# A Spark started here (local master, embedded Connect server) listens on loopback only.
LOOPBACK_CONF = {
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
    """The active SparkSession, or a new one as `SparkSession.builder.getOrCreate()` makes it (on
    loopback when it runs Spark here).  Changes nothing of an existing session or the environment."""
    check_prerequisites()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName("flink-semantics")
    # Under spark-submit (a JVM already launched with its own settings) nothing is added.
    if starts_local_spark() and "PYSPARK_GATEWAY_PORT" not in os.environ:
        for key, value in LOOPBACK_CONF.items():
            builder = builder.config(key, value)
    return builder.getOrCreate()


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
