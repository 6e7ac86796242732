"""Write the sources regression corpus, tests/corpus/sources.jsonl.gz (tests/test_regression_corpus.py).

    python -m tests.make_sources_corpus

Draws schedules with the strategies of the sources properties (conformance/test_sources.py), the
same each time (a fixed seed), traces them with the reference model, and saves one JSON object a
line: the property, the schedule, the trace.  Run it once when the area lands; afterwards a changed
corpus is a changed behaviour, to be explained in the commit that changes it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from flink_semantics.conformance.areas.sources import schedules
from flink_semantics.conformance.test_sources import FEATURES
from flink_semantics.reference import expected_trace
from flink_semantics.spec.schedule import Schedule

PER_PROPERTY = 200
PATH = Path(__file__).parent / "corpus" / "sources.jsonl.gz"


def main() -> None:
    rows = []
    for name, features in FEATURES.items():
        for schedule in _draw(schedules(features), PER_PROPERTY):
            rows.append({"property": name, "schedule": schedule.to_dict(),
                         "trace": expected_trace(schedule).to_dict()["events"]})
    with gzip.open(PATH, "wt", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    print(f"{PATH}: {len(rows)} schedules")


def _draw(strategy: Any, n: int) -> list[Schedule]:
    """`n` different examples of the strategy, the same ones each time (derandomized)."""
    from hypothesis import HealthCheck, given, settings

    found: dict[str, Schedule] = {}

    @settings(max_examples=4 * n, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def take(example: Schedule) -> None:
        if len(found) < n:
            found.setdefault(example.to_json(), example)

    take()
    return list(found.values())


if __name__ == "__main__":
    main()
