"""The adapter protocol: how the conformance suite talks to an implementation.

An adapter runs a *batch* of schedules and returns one trace per schedule, in
the same order, so that an engine such as Spark runs hundreds of schedules in
one job.  Adapters import `spec` and never `reference` (spec/schedules.md).

Capabilities are opt-in.  Each area (spec/area.py) has a capability named after it and one per
optional feature (`<area>.<feature>`); `flink_semantics.spec.schedule.required_capabilities`
says which a schedule exercises.  `capabilities()` maps each capability the adapter knows of to
None when it supports it, or to the reason it does not; a capability it does not name is
unsupported with the reason "not declared", so an adapter written today never claims a capability
added later.  The suite reports a property that needs an unsupported capability as unsupported,
with the reason, and never skips it silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from flink_semantics.spec.schedule import Schedule, Trace

NOT_DECLARED = "not declared"

# completion_order values
SCRIPTED = "scripted"  # calls complete exactly when the schedule says (exact comparison)
FREE = "free"  # the adapter cannot control completion order (partial-order comparison)


class AdapterError(RuntimeError):
    """The adapter could not run a batch (not a conformance failure)."""


DEFAULT_BATCH_SIZE = 12


@runtime_checkable
class Adapter(Protocol):
    """An implementation under test.

    Optional class attributes, read by the suite before the adapter is built:
    `batch_size`, how many schedules the adapter prefers per `run_batch` (default
    DEFAULT_BATCH_SIZE): while a property generates its examples, the suite gathers their batches
    into calls of about that many, for engines whose cost is per job rather than per schedule;
    `examples`, hypothesis examples per property in the default profile (the `thorough` profile
    runs ten times as many); `expected_failures`, rule ID -> reason, or the path of a JSON file
    holding that (relative to the adapter's module): rules the adapter is known to break;
    `concurrent_jobs` (default 1), how many `run_batch` calls of gathered batches may run at once,
    for engines whose jobs wait more than they compute (a Spark job waiting for a task retry);
    `shrink` (default True): False when a schedule costs so much that hypothesis should report a
    failing batch as drawn instead of shrinking it (the report then shows a larger schedule);
    `version`, a string naming what runs the schedules (say "MyEngine 1.4.2"), echoed in the
    report's header.

    `run_batch` is called from one thread at a time (from up to `concurrent_jobs` threads when the
    adapter declares more than one), not always the main thread.  An optional
    method `prepare()`, called once before the first batch, starts the engine (the suite reports
    how long it took, apart from the properties); it may raise AdapterError.  An optional method
    `summary()` returns lines the suite prints at the end of the run (for example the failures an
    engine injected into itself while it ran the schedules).
    """

    name: str
    # SCRIPTED or FREE, for every area; or a mapping area -> SCRIPTED or FREE for an engine that can
    # script completions in some areas and not in others (an area it does not name: SCRIPTED).
    completion_order: str | Mapping[str, str]

    def capabilities(self) -> Mapping[str, str | None]:
        """Capability -> None if supported, else the reason it is not; unnamed ones are not declared."""
        ...

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        """Run each schedule from a fresh operator; one trace per schedule, same order.

        A schedule whose configuration the implementation refuses (for example
        capacity 0) gives the trace `Trace((spec.schedule.rejected(reason),))`.
        """
        ...

    def close(self) -> None:
        ...


def completion_order(adapter: object, area: str) -> str:
    """The adapter's completion order in an area (SCRIPTED when it declares none)."""
    order = getattr(adapter, "completion_order", SCRIPTED)
    if isinstance(order, Mapping):
        return str(order.get(area, SCRIPTED))
    return str(order)


def completion_orders(adapter: object) -> list[str]:
    """Every completion order the adapter declares (to check that each is SCRIPTED or FREE)."""
    order = getattr(adapter, "completion_order", SCRIPTED)
    return [str(o) for o in order.values()] if isinstance(order, Mapping) else [str(order)]


def unsupported(capabilities: Mapping[str, str | None], capability: str) -> str | None:
    """None if the adapter supports the capability, else the reason (NOT_DECLARED if it names none)."""
    if capability not in capabilities:
        return NOT_DECLARED
    reason = capabilities[capability]
    return None if reason is None else str(reason)
