"""The reference model: a deterministic, single-threaded executable reading of spec/*.md.

Standard library only; imports `spec` and nothing else of this project.
"""

from __future__ import annotations

from reference import async_io
from reference.async_io import AsyncIoModel
from spec.schedule import Schedule, ScheduleError, Trace

__all__ = ["AsyncIoModel", "model_for", "run"]


def run(schedule: Schedule) -> Trace:
    """Run a schedule on the model of its area (raises ScheduleError for a malformed schedule)."""
    if schedule.area == "async_io":
        return async_io.run(schedule)
    raise ScheduleError(None, "SCH-1", f"no reference model for area {schedule.area!r}")


def model_for(schedule: Schedule) -> AsyncIoModel:
    """A fresh model for the schedule's area and configuration (the configuration must be valid)."""
    if schedule.area == "async_io":
        return AsyncIoModel(schedule.config)
    raise ScheduleError(None, "SCH-1", f"no reference model for area {schedule.area!r}")
