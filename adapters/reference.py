"""The reference adapter: runs schedules on the reference model (the only adapter that imports it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import reference
from adapters import version
from spec.adapter import SCRIPTED
from spec.area import all_capabilities
from spec.schedule import Schedule, Trace


class ReferenceAdapter:
    name = "reference"
    completion_order = SCRIPTED
    version = version("flink-semantics-conformance", "the suite's reference model")

    def capabilities(self) -> Mapping[str, str | None]:
        return {name: None for name in all_capabilities()}  # the oracle supports every area by definition

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        return [reference.expected_trace(s) for s in schedules]

    def close(self) -> None:
        pass
