"""`spark-native`: Spark's own semantics, held to the spec where Spark has a counterpart.

The `pyspark` adapter implements Flink's semantics on Spark; this one runs the schedules through
what Spark itself offers, with nothing of Flink's added, to show rule by rule which of Flink's
rules Spark keeps.  One module per area that Spark has a counterpart for, named after the area
(`adapters/spark_native/<area>.py`, found by discovery): its `CAPABILITIES` and its `NativeRun`
(one schedule on a Spark session).  Where Spark differs, the rule is an expected failure with the
reason (`expected-failures.json`); the suite reports it as such, and a listed rule that passes as
stale.

A schedule costs seconds here (a streaming query of its own, a micro-batch or two per input step),
so the suite runs a small budget (`examples`), without shrinking a failure (`shrink`), and this
adapter runs two schedules at a time (`parallel`).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

from flink_semantics.adapters import area_module as find_area_module
from flink_semantics.adapters import version
from flink_semantics.adapters.pyspark.runtime import scratch_dir
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.area import areas
from flink_semantics.spec.schedule import Schedule, Trace


@cache
def area_module(area: str) -> Any:
    """`adapters/spark_native/<area>.py`, or None when Spark has no counterpart for the area."""
    return find_area_module(__name__, area)


class SparkNativeAdapter:
    name = "spark-native"
    version = version("pyspark", "PySpark")
    completion_order = SCRIPTED
    expected_failures = "expected-failures.json"
    # Budget hints (spec/adapter.py): few examples, no shrinking, and small jobs: most properties fail here
    # (expected failures), and a property stops at its first failing job (with jobs of 16 the valve property
    # ran 13 schedules of seconds each, with jobs of 4 one; the verdicts are the same, in half the time).
    examples = 3
    shrink = False
    batch_size = 4
    parallel = 2  # schedules (queries) at a time within a batch

    def __init__(self, spark: Any = None):
        if spark is None:
            from flink_semantics.adapters.pyspark.session import check_prerequisites

            check_prerequisites()
        self.spark = spark
        self._configured = False
        self.root = scratch_dir("spark-native-")

    def _session(self) -> Any:
        if self.spark is None:
            from flink_semantics.adapters.pyspark.runner_session import runner_spark

            self.spark = runner_spark()
        if not self._configured:
            # One state partition per query (the default 200 would run 200 tasks per batch), and
            # the min policy named although it is Spark's default.  A query keeps what it started
            # with (its offset log records both).
            self.spark.conf.set("spark.sql.shuffle.partitions", "1")
            self.spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", "min")
            self._configured = True
        return self.spark

    def prepare(self) -> None:
        self._session()

    def capabilities(self) -> Mapping[str, str | None]:
        out: dict[str, str | None] = {}
        for name in areas():
            module = area_module(name)
            if module is not None:
                out[name] = None
                out.update(module.CAPABILITIES)
        return out

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        spark = self._session()

        def one(s: Schedule) -> Trace:
            return Trace(tuple(area_module(s.area).NativeRun(spark, s, self.root).run()))

        with ThreadPoolExecutor(self.parallel) as pool:
            return list(pool.map(one, schedules))

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
