"""The reference adapter: runs schedules on the reference model (the only adapter that imports it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flink_semantics.adapters import version
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.area import all_capabilities
from flink_semantics.spec.schedule import Schedule, Trace

from flink_semantics import reference


class ReferenceAdapter:
    name = "reference"
    completion_order = SCRIPTED
    version = version("flink-semantics", "the suite's reference model")

    def capabilities(self) -> Mapping[str, str | None]:
        return {name: None for name in all_capabilities()}  # the oracle supports every area by definition

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        return [reference.expected_trace(s) for s in schedules]

    def close(self) -> None:
        pass
