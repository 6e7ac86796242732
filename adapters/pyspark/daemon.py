"""PySpark's worker daemon, with the conformance runtime imported before it forks any worker.

Spark forks a Python worker per task from this daemon (`spark.python.daemon.module`, set by
session.py).  A worker that ran a failing task exits, and every task failure the schedules ask
for would otherwise pay a new worker's imports (pandas, pyarrow, PySpark's worker, the runtime,
each area's implementation: about half a second on a 2-core machine).  Imported here once, they
are already in every forked worker.
"""

from __future__ import annotations

import pandas  # noqa: F401
import pyarrow  # noqa: F401
import pyspark.sql.pandas.serializers  # noqa: F401
import pyspark.worker  # noqa: F401
from pyspark import daemon

import adapters.pyspark.adapter  # noqa: F401
from adapters.pyspark.runtime import area_module, implemented_areas

if __name__ == "__main__":
    for name in implemented_areas():
        area_module(name)
    daemon.manager()
