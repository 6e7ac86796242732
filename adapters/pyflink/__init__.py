"""`pyflink`: the conformance suite against Apache Flink itself, through PyFlink.

The spec describes Flink 2.3.0; this adapter runs the schedules as real Flink jobs on a local
mini-cluster (adapters/pyflink/session.py), so that every rule is anchored to the system it
describes.  One module per area, named after the area (`adapters/pyflink/<area>.py`, found by
discovery), each with

* `CAPABILITIES`: the area's capability and its features, None when supported, else the reason;
* `EXPECTED_FAILURES`: rule ID -> how Flink (or PyFlink) differs from the rule, found by running it;
* `COMPLETION_ORDER` (optional): FREE where the area's calls complete in Flink's own order, not the
  schedule's (SCRIPTED when absent);
* `run_batch(schedules) -> list[Trace]`: every schedule of the batch in as few Flink jobs as the
  area allows (a job costs seconds, a schedule a few milliseconds).

An area Flink cannot be driven in from Python has a module with just `CAPABILITIES`, the area
unsupported with the reason; an area without a module is "not declared".  This adapter never
imports `reference/`.  It needs the `pyflink` extra (apache-flink 2.3) and Java 17:
`tox -e conformance-pyflink`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from flink_semantics.adapters import area_module as find_area_module
from flink_semantics.adapters import version
from flink_semantics.spec.area import areas
from flink_semantics.spec.schedule import Schedule, Trace


@cache
def area_module(area: str) -> Any:
    """`adapters/pyflink/<area>.py`, or None when the area has none."""
    return find_area_module(__name__, area)


def capabilities() -> dict[str, str | None]:
    """Every area module's CAPABILITIES (its area's capability and its features)."""
    out: dict[str, str | None] = {}
    for name in areas():
        module = area_module(name)
        if module is not None:
            out.update(module.CAPABILITIES)
    return out


def expected_failures() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in areas():
        module = area_module(name)
        if module is not None:
            out.update(getattr(module, "EXPECTED_FAILURES", {}))
    return out


def completion_orders() -> dict[str, str]:
    """Each area module's COMPLETION_ORDER where it has one (FREE: Flink completes the calls in its own
    order); an area without one is SCRIPTED (spec/adapter.py)."""
    return {name: module.COMPLETION_ORDER for name in areas()
            if (module := area_module(name)) is not None and hasattr(module, "COMPLETION_ORDER")}


class PyFlinkAdapter:
    name = "pyflink"
    completion_order = completion_orders()
    version = version("apache-flink", "Apache Flink (PyFlink)")
    # Budget hints (spec/adapter.py): a Flink job costs seconds (its Python subtasks start an
    # embedded interpreter each) and a schedule milliseconds, so few examples, every batch of a
    # property in one job, and no shrinking (each step of it would be a job).
    examples = 4
    batch_size = 64
    shrink = False
    expected_failures = expected_failures()

    def __init__(self) -> None:
        from flink_semantics.adapters.pyflink.session import check_prerequisites

        check_prerequisites()

    def prepare(self) -> None:
        """Start Flink's JVM once, before the first batch."""
        from flink_semantics.adapters.pyflink.session import jvm

        jvm()

    def capabilities(self) -> Mapping[str, str | None]:
        return capabilities()

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        by_area: dict[str, list[int]] = {}
        for i, s in enumerate(schedules):
            by_area.setdefault(s.area, []).append(i)
        traces: dict[int, Trace] = {}
        for area, indices in by_area.items():
            for i, trace in zip(indices, area_module(area).run_batch([schedules[i] for i in indices])):
                traces[i] = trace
        return [traces[i] for i in range(len(schedules))]

    def close(self) -> None:
        pass
