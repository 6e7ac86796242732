"""Flink's semantics on Apache Spark, through PySpark, and the conformance adapter.

* `session.py`: one shared SparkSession per process (classic local mode, or Spark Connect);
* `runtime.py`: conformance mode shared by every area (virtual time, the durable store, a
  schedule's run across real task failures) and the `pyspark-local` adapter;
* `adapter.py`: `PySparkAdapter`, a batch of schedules in one Spark job;
* one module or package per area, named after it (`adapters/pyspark/<area>`): the area's
  implementation for users, and its conformance run (`CAPABILITIES`, `Run`).

pyspark itself is imported only when a Spark session is needed.
"""

from flink_semantics.adapters.pyspark.adapter import PySparkAdapter

__all__ = ["PySparkAdapter"]
