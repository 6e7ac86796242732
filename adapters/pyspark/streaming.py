"""`pyspark-stream`: the suite through the PySpark APIs a Spark user calls, on Structured Streaming.

The `pyspark` adapter runs each area's engine inside a Spark task; this one runs the schedules
through the product: each area's public API (`adapters/pyspark/<area>/api.py`, and the Python
data source API and stateful processors it builds on) in real streaming queries, where Spark's own
machinery carries the semantics: state in the state store, a `checkpoint` a committed micro-batch,
a `crash` or `restore` a query stopped and started again from Spark's checkpoint (or state read
back with Spark's state data source), a reader's failure a real task failure.

Many schedules run in one query (each schedule its own grouping keys and partitions, all of them
advancing in the same micro-batches), so that a batch of hundreds of schedules costs a few queries,
not hundreds.  Each area's module `adapters/pyspark/<area>/stream.py` provides:

* `run_many(spark, schedules, root) -> list[Trace]`: the traces of a batch of that area's
  schedules, in order (a refused configuration gives its `rejected` trace); `root` is a directory
  of its own, removed after the call;
* `STREAM_UNSUPPORTED`: capability -> the reason this face cannot run it (Spark's reason), or None
  for one this face runs although the task-mode engine refuses it (key groups' pyflink hash);

and `adapters/pyspark/<area>/stream-expected-failures.json` names the rules Spark's model cannot
follow, each with Spark's reason (the suite reports them as expected failures, and a listed rule
that passes as stale).  An area whose module has no `run_many` yet is unsupported, with that
reason, never skipped silently.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from flink_semantics.adapters import version
from flink_semantics.adapters.pyspark import chaos
from flink_semantics.adapters.pyspark.runtime import capabilities as engine_capabilities
from flink_semantics.adapters.pyspark.runtime import scratch_dir
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.area import areas
from flink_semantics.spec.schedule import Schedule, Trace

NOT_YET = "not yet through Structured Streaming (adapters/pyspark/{area}/stream.py has no run_many)"
EXAMPLES_ENV = "CONFORMANCE_STREAM_EXAMPLES"
EXAMPLES = 36
# The fault runs (chaos.py): a chosen task fails in up to this many of its attempts, each at a later
# fault point (below spark.task.maxFailures, which lets a task fail that many times less one).
FAULT_DEPTH = 3
# A fault run cuts an area's schedules into run_many calls of at most the area's stream module's
# FAULT_CALL_SIZE (where it has one), so that they meet more queries, tasks to fail and restarts: a
# call's tasks and restarts grow with its micro-batches and rounds, hardly with its schedules
# (docs/running-the-suite.md, "Fault runs").


@cache
def stream_module(area: str) -> Any:
    """`adapters/pyspark/<area>/stream.py`, or None where the area has none."""
    name = f"flink_semantics.adapters.pyspark.{area}.stream"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        return None


def examples_from_env() -> int:
    """The examples a property (before the profile's multiplier): $CONFORMANCE_STREAM_EXAMPLES,
    else EXAMPLES; a usage error if it is not a positive integer."""
    text = os.environ.get(EXAMPLES_ENV, "").strip()
    if not text:
        return EXAMPLES
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{EXAMPLES_ENV}={text!r}: give the examples a property, a positive integer")
    return int(text)


def fault_depth() -> int:
    """FAULT_DEPTH, kept below the session's `spark.task.maxFailures` (a task failing that many
    times would fail its query)."""
    from flink_semantics.adapters.pyspark.runner_session import max_task_failures

    return max(1, min(FAULT_DEPTH, max_task_failures() - 1))


def _calls(area: str, indices: list[int], armed: bool) -> list[list[int]]:
    """The run_many calls of an area's schedules: one, or in a fault run its FAULT_CALL_SIZE's."""
    size = getattr(stream_module(area), "FAULT_CALL_SIZE", None) if armed else None
    if not size:
        return [indices]
    return [indices[i:i + size] for i in range(0, len(indices), size)]


def _runs(area: str) -> bool:
    module = stream_module(area)
    return module is not None and hasattr(module, "run_many")


def expected_failures() -> dict[str, str]:
    """Every area's `stream-expected-failures.json`: rule -> Spark's reason."""
    out: dict[str, str] = {}
    for area in areas():
        path = Path(__file__).parent / area / "stream-expected-failures.json"
        if path.exists():
            out.update(json.loads(path.read_text()))
    return out


class PySparkStreamAdapter:
    name = "pyspark-stream"
    version = version("pyspark", "PySpark") + ", Structured Streaming"
    completion_order = SCRIPTED
    expected_failures = expected_failures()
    # Budget hints (spec/adapter.py).  The suite gathers the batches of a property's examples into
    # calls of up to `batch_size` schedules, each a few queries.  A call costs a few seconds per
    # query and about one per micro-batch, nearly whatever the number of schedules in it (issue
    # 31's measurements: 60 mini-batch schedules 5.3 s, 240 of them 7.5 s), and a property's
    # examples make one call: so 36 examples a property (about 150 to 250 distinct schedules a
    # call, 1,800 to 2,800 per area) triple the rate of 12.  Shrinking would run a query per
    # candidate: a failure is reported as drawn (replay it with `--adapter pyspark` or
    # `pyspark-local` to shrink it).  $CONFORMANCE_STREAM_EXAMPLES sets another budget (the fault
    # runs', tox.ini).
    batch_size = 1000
    examples = examples_from_env()  # the thorough profile: ten times as many
    shrink = False

    def __init__(self, spark: Any = None, store_dir: str | None = None):
        if spark is None:
            from flink_semantics.adapters.pyspark.session import check_prerequisites

            check_prerequisites()
        self.spark = spark
        self._owns_root = store_dir is None
        self.root = Path(store_dir) if store_dir else scratch_dir("pyspark-stream-")
        # The fault runs (chaos.py): the share of tasks failed mid-micro-batch, and the failures
        # injected so far, per area.
        self.task_failure_share = chaos.share_from_env()
        self.injected: dict[str, int] = defaultdict(int)
        self.restarts: dict[str, int] = defaultdict(int)
        self.calls = 0

    def _session(self) -> Any:
        if self.spark is None:
            from flink_semantics.adapters.pyspark.runner_session import runner_spark

            self.spark = runner_spark()
        return self.spark

    def prepare(self) -> None:
        self._session()

    def capabilities(self) -> Mapping[str, str | None]:
        out = dict(engine_capabilities())
        for area in areas():
            if not _runs(area):
                out[area] = NOT_YET.format(area=area)
                continue
            out.update(stream_module(area).STREAM_UNSUPPORTED)
        return out

    def run_batch(self, schedules: Sequence[Schedule]) -> list[Trace]:
        by_area: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(schedules):
            by_area[s.area].append(i)
        traces: dict[int, Trace] = {}
        for area, indices in by_area.items():
            for call in _calls(area, indices, self.task_failure_share > 0):
                traces.update(zip(call, self._run_many(area, [schedules[i] for i in call])))
        return [traces[i] for i in range(len(schedules))]

    def _run_many(self, area: str, schedules: list[Schedule]) -> list[Trace]:
        """One run_many call in a directory of its own, armed in a fault run (chaos.py)."""
        root = self.root / f"{area}-{uuid.uuid4().hex}"
        root.mkdir(parents=True)
        self.calls += 1
        if self.task_failure_share:
            chaos.arm(root, self.task_failure_share, seed=self.calls, depth=fault_depth())
        try:
            got = stream_module(area).run_many(self._session(), schedules, root)
        finally:
            self.injected[area] += chaos.injected(root)
            self.restarts[area] += chaos.restarts(root)
            shutil.rmtree(root, ignore_errors=True)
        if len(got) != len(schedules):
            raise RuntimeError(f"{area}.stream.run_many returned {len(got)} traces "
                               f"for {len(schedules)} schedules")
        return got

    def summary(self) -> list[str]:
        """What the suite prints at the end (spec/adapter.py): the task failures injected."""
        if not self.task_failure_share:
            return []

        def per_area(counts: Mapping[str, int]) -> str:
            return ", ".join(f"{area} {n}" for area, n in sorted(counts.items()))

        return [f"task failures injected mid-micro-batch ({chaos.ENV}={self.task_failure_share}, up to "
                f"{fault_depth()} a task): "
                f"{sum(self.injected.values())} ({per_area(self.injected)}); queries stopped and "
                f"restarted from their checkpoints: {sum(self.restarts.values())} "
                f"({per_area(self.restarts)}); every trace is still compared with the reference's"]

    def close(self) -> None:
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)
