"""The PySpark implementation of the async I/O operator and its conformance adapter.

* `async_map(df, fn, ...)`: the user API, a real async wait operator over a DataFrame
  (adapters/pyspark/async_io.py);
* `PySparkAdapter`: runs batches of schedules in Spark jobs for the conformance suite
  (adapters/pyspark/adapter.py).

Both drive the same operator core (adapters/pyspark/core.py).  pyspark itself is
imported only when a Spark session is needed.
"""

from adapters.pyspark.adapter import PySparkAdapter

__all__ = ["PySparkAdapter"]
