"""The regression corpus: saved schedules with the traces they gave before a change.

`tests/corpus/<area>.jsonl.gz` holds one JSON object a line: the property whose strategy drew the
schedule, the schedule, and its trace.  The reference must give exactly the saved trace; the
PySpark operator must give it up to the freedom of spec/schedules.md item 7 (the checker's
comparison).  The async I/O corpus was drawn by the suite's strategies and traced by the reference
model before the framework was made area-neutral (issue 6); the PySpark operator without Spark
gave the same traces.  The sources corpus was drawn by the sources properties' strategies and
traced by the reference model when the area landed (`python -m tests.make_sources_corpus`); the
PySpark implementation without Spark gave the same traces.  A change that alters any of them
changes behaviour, which such a change must not do.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from flink_semantics.adapters.pyspark.runtime import LocalScriptedAdapter
from flink_semantics.adapters.reference import ReferenceAdapter
from flink_semantics.conformance.checker import compare_scripted
from flink_semantics.spec.schedule import schedule_from_dict, trace_from_dict

CORPUS = sorted((Path(__file__).parent / "corpus").glob("*.jsonl.gz"))


def _load(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.mark.parametrize("adapter", [ReferenceAdapter, LocalScriptedAdapter], ids=lambda a: a.name)
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name.split(".")[0])
def test_corpus_traces_are_unchanged(path: Path, adapter: type) -> None:
    rows = _load(path)
    assert len(rows) >= 1000, f"{path.name}: the corpus is unexpectedly small ({len(rows)})"
    schedules = [schedule_from_dict(r["schedule"], validate=False) for r in rows]
    runner = adapter()
    try:
        traces = runner.run_batch(schedules)
    finally:
        runner.close()
    exact = adapter is ReferenceAdapter
    changed = []
    for r, s, got in zip(rows, schedules, traces):
        saved = trace_from_dict({"events": r["trace"]}, s.area)
        if (got != saved) if exact else (compare_scripted(s, saved, got) is not None):
            changed.append((r, got))
    if changed:
        row, got = changed[0]
        pytest.fail(f"{len(changed)} of {len(rows)} saved traces changed; the first "
                    f"(drawn for {row['property']}):\n{json.dumps(row['schedule'])}\n"
                    f"saved:    {row['trace']}\nobserved: {got.to_dict()['events']}")
