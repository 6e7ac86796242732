"""The sources and failover area on Spark: not built yet.

The plan (spec/sources.md, issue 7): a Structured Streaming source on PySpark's Python data source
API whose driver-side planner is the enumerator and whose offset JSON holds the enumerator's and the
tracker's state, partitions as readers, real task failures and query restarts.  Until it exists the
area is declared unsupported, with that reason, so the suite reports every sources property as
unsupported rather than skipping it.
"""

from __future__ import annotations

from adapters.pyspark.runtime import ScheduleRun

REASON = "not implemented on Spark yet: the Structured Streaming source of spec/sources.md is in progress"
CAPABILITIES: dict[str, str | None] = {"sources": REASON}


class Run(ScheduleRun):
    """Never run: the area is unsupported (CAPABILITIES)."""

    def start(self, resume_step: int) -> bool:
        raise NotImplementedError(REASON)
