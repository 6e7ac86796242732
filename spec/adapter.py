"""The adapter protocol: how the conformance suite talks to an implementation.

An adapter runs a *batch* of schedules and returns one trace per schedule, in
the same order, so that an engine such as Spark runs hundreds of schedules in
one job.  Adapters import `spec` and never `reference` (spec/schedules.md).

Capabilities name the optional features a schedule may exercise
(`spec.schedule.required_capabilities`).  `capabilities()` maps every name in
CAPABILITIES to None when the adapter supports it, or to the reason it does
not; the suite reports a property that needs an unsupported capability as
unsupported, with that reason, and never skips it silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from spec.schedule import Schedule, Trace

CAPABILITIES: dict[str, str] = {
    "async.ordered": "ordered output mode (AIO-12)",
    "async.unordered": "unordered output mode (AIO-13, AIO-14)",
    "async.timeout": "timeouts and the timeout handler (AIO-26..AIO-32)",
    "async.retry": "retry strategies (AIO-33..AIO-41)",
    "async.checkpoint": "checkpoint, crash and restore steps (AIO-44..AIO-48)",
    "async.status": "watermark status steps (AIO-51)",
    "async.config_validation": "refusing invalid configurations (AIO-1, AIO-3)",
}

# completion_order values
SCRIPTED = "scripted"  # calls complete exactly when the schedule says (exact comparison)
FREE = "free"  # the adapter cannot control completion order (partial-order comparison)


class AdapterError(RuntimeError):
    """The adapter could not run a batch (not a conformance failure)."""


DEFAULT_BATCH_SIZE = 12


@runtime_checkable
class Adapter(Protocol):
    """An implementation under test.

    Optional class attributes, read by the suite before the adapter is built, size the
    default budget for engines whose cost is per job rather than per schedule:
    `batch_size` (the largest batch one hypothesis example hands to `run_batch`; batches are
    drawn with 1..batch_size schedules, default DEFAULT_BATCH_SIZE) and `examples` (hypothesis
    examples per property in the default profile; the `thorough` profile runs ten times as many).
    """

    name: str
    completion_order: str  # SCRIPTED or FREE

    def capabilities(self) -> Mapping[str, str | None]:
        """Every name of CAPABILITIES -> None if supported, else the reason it is not."""
        ...

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        """Run each schedule from a fresh operator; one trace per schedule, same order.

        A schedule whose configuration the implementation refuses (for example
        capacity 0) gives the trace [Event(-1, "rejected", (reason,))].
        """
        ...

    def close(self) -> None:
        ...
