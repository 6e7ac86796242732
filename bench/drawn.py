"""Schedules drawn as the suite draws them, for the benchmarks' `--stream` modes.

    from drawn import drawn            # bench/ is on sys.path when a benchmark runs as a script
    schedules = drawn(st.sampled_from(features).flatmap(schedules_of), 500)
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def drawn(strategy: st.SearchStrategy[Any], n: int) -> list[Any]:
    """Up to n distinct schedules of the strategy, the same ones every run (derandomized)."""
    out: dict[str, Any] = {}

    @settings(max_examples=n * 2, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(s: Any) -> None:
        out.setdefault(s.to_json(), s)

    collect()
    return list(out.values())[:n]
