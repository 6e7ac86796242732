"""Sources and failover on Flink itself: unsupported.

PyFlink defines no sources of its own: FLIP-27 sources, their split enumerators and readers are
Java classes, so the schedules' split assignment, reader registration, checkpoints of single
readers and region failover cannot be driven from Python.
"""

from __future__ import annotations

CAPABILITIES: dict[str, str | None] = {
    "sources": "PyFlink defines no sources of its own (FLIP-27 sources, their enumerators and readers are "
               "Java): the schedules' split assignment, reader failures and failover cannot be driven "
               "from Python",
}
