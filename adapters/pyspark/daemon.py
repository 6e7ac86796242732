"""PySpark's worker daemon, with the conformance runtime imported before it forks any worker.

Spark forks a Python worker per task from this daemon (`spark.python.daemon.module`, set by
session.py).  A worker that ran a failing task exits, and every task failure the schedules ask
for would otherwise pay a new worker's imports (pandas, pyarrow, PySpark's worker, the runtime,
each area's implementation: about half a second on a 2-core machine).  Imported here once, they
are already in every forked worker, and so are the schedule types' annotations, evaluated here
(about 10 ms per worker otherwise).
"""

from __future__ import annotations

import zipimport

import flink_semantics.adapters.pyspark.adapter  # noqa: F401
import pandas  # noqa: F401
import pyarrow  # noqa: F401
import pyspark.sql.pandas.serializers  # noqa: F401
import pyspark.worker  # noqa: F401
from flink_semantics.adapters.pyspark.runtime import area_module, implemented_areas
from flink_semantics.spec.area import get_area
from flink_semantics.spec.schedule import prepare_types
from pyspark import daemon


def _keep_zip_directories(self: zipimport.zipimporter) -> None:
    """A forked worker adds Spark's files directory to sys.path and calls
    importlib.invalidate_caches(), which makes every zipimporter read its archive's directory again
    (pyspark.zip and py4j's: thousands of entries, about 0.2 s per new worker, paid at every task
    failure).  Those archives do not change while Spark runs: their directories are kept."""


if __name__ == "__main__":
    for name in implemented_areas():
        area_module(name)
        area = get_area(name)
        for cls in (area.config_type, *area.steps):  # the annotations, evaluated once, not per worker
            prepare_types(cls)
    zipimport.zipimporter.invalidate_caches = _keep_zip_directories  # type: ignore[method-assign]
    daemon.manager()
