"""The sources area through the harness's Structured Streaming source (adapters/pyspark/sources/
scripted.py, stream.py) into the public sink (api.py's IdempotentSink): the spec's own examples as
jobs of one streaming query, with real task failures and query restarts, against the traces
written in spec/sources.md; and the harness source's checks of bad input.

The drawn schedules go through the same path in the conformance run (`--adapter pyspark-stream
--areas sources`); these tests keep to a few seconds of Spark.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="test-sources-stream-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _spec_examples() -> list[Any]:
    from flink_semantics.conformance.examples import load_examples

    return [e for e in load_examples() if e.schedule.area == "sources" and e.refusal is None]


@pytest.mark.spark
def test_spec_examples_through_one_streaming_query(spark: Any, workdir: Path) -> None:
    """Every executable example of spec/sources.md, each a scripted job of one Flip27Source query
    into IdempotentSink: the trace written in the spec, with the `fail` steps real task failures and
    the global failovers (fail_enumerator, assign to an unregistered reader, rescale) real query
    failures and restarts from the checkpoint."""
    from flink_semantics.adapters.pyspark.sources.stream import job_of, run_query, traces_of

    examples = _spec_examples()
    rows, restarts = run_query(spark, [job_of(e.schedule) for e in examples], workdir)
    got = traces_of(rows, len(examples))
    wrong = [f"{e.id}: {[str(x) for x in g]}" for e, g in zip(examples, got) if g != e.trace]
    assert not wrong, "\n".join(wrong)
    injected = sorted(p.name.split("-")[0] for p in (workdir / "injected").iterdir())
    global_failovers = max(sum(s.op in ("fail_enumerator", "rescale") for s in e.schedule.steps)
                           for e in examples)
    assert restarts >= global_failovers >= 1 and injected.count("query") == restarts
    assert injected.count("reader") >= 1  # a `fail` step: a real task failure, retried by Spark


@pytest.mark.spark
def test_every_task_failing_keeps_the_traces(spark: Any, workdir: Path) -> None:
    """The fault runs (chaos.py, share 1, depth 3) through run_many: every read task's first attempt
    fails with its partition half read (its one fault point), Spark runs it again; the traces are
    still the ones written in the spec and the ones of an unarmed run, and each global failover is
    counted as a query restart."""
    from flink_semantics.adapters.pyspark import chaos
    from flink_semantics.adapters.pyspark.sources.stream import run_many

    examples = [e for e in _spec_examples()
                if any(s.op in ("fail", "fail_enumerator", "rescale") for s in e.schedule.steps)][:6]
    assert len(examples) >= 3
    unarmed, armed = workdir / "unarmed", workdir / "armed"
    unarmed.mkdir()
    armed.mkdir()
    chaos.arm(armed, 1.0, depth=3)
    got = run_many(spark, [e.schedule for e in examples], armed)
    assert chaos.injected(armed) > 0
    assert chaos.restarts(armed) >= 1  # a fail_enumerator or rescale among them: a query restart
    assert got == [e.trace for e in examples]
    assert got == run_many(spark, [e.schedule for e in examples], unarmed)
    assert chaos.injected(unarmed) == 0


def test_layout_puts_a_runs_failovers_in_its_last_batch() -> None:
    """A job's batch ends after a step failing a task or the query; run i of the query holds every
    job's segment i, the segments ending with a query failure in the run's last batches."""
    pytest.importorskip("pyspark")
    from flink_semantics.adapters.pyspark.sources.scripted import QUERY, TASK, layout

    a = [None, None, TASK, None, QUERY, None]  # batches of 3 and 2 steps, a query failure, 1 step
    b = [None, QUERY, QUERY]  # a query failure in each of two runs
    c = [None]
    assert layout([a, b, c]) == [{0: 3, 1: 2, 2: 1}, {1: 2, 2: 1}, {0: 1}]
    assert layout([[], c]) == [{}, {0: 1}]


def test_traces_refuse_an_event_committed_twice() -> None:
    """A row of a job's step in two committed batches is an error (SRC-38), not a row to drop."""
    from flink_semantics.adapters.pyspark.sources.stream import traces_of

    event = {"step": 0, "event": "registered", "reader": 0, "splits": []}
    row = {"job": 0, "step": 0, "seq": 0, "event": json.dumps(event)}
    assert [str(e) for e in traces_of([row], 1)[0]] == ["@0 registered reader=0 splits=[]"]
    with pytest.raises(RuntimeError, match="committed twice"):
        traces_of([row, dict(row)], 1)


@pytest.mark.parametrize("kwargs, match", [
    ({"splits": [1, -1]}, r"splits\[1\].*SRC-40"),
    ({"splits": [["a", 2]]}, r"splits\[0\].*SRC-40"),
    ({"splits": [1], "readers": 0}, r"readers.*SRC-41"),
    ({"splits": [1], "records_per_poll": 0}, r"records_per_poll.*SRC-39"),
])
def test_options_refuse_bad_input(kwargs: dict[str, Any], match: str) -> None:
    """Bad input to the harness's source: a ValueError naming the parameter and the rule, before any query."""
    pytest.importorskip("pyspark")
    from flink_semantics.adapters.pyspark.sources.scripted import scripted_options

    with pytest.raises(ValueError, match=match):
        scripted_options(**kwargs)


def test_options_of_inline_splits() -> None:
    """The harness source's options of one job of inline splits, as JSON."""
    pytest.importorskip("pyspark")
    from flink_semantics.adapters.pyspark.sources.scripted import scripted_options

    options = scripted_options([["a", "b"], 2], readers=2, records_per_poll=3)
    assert json.loads(options["jobs"]) == [{"splits": [["a", "b"], 2], "readers": 2}]
    assert options["records_per_poll"] == "3"
