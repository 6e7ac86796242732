"""Task failures injected into the streaming pipelines, while a micro-batch is in flight.

The `pyspark-stream` adapter's fault runs (issue 31): with `CONFORMANCE_STREAM_TASK_FAILURES` set
to a share between 0 and 1, that share of the Spark tasks of every streaming query it starts fail
in their first attempt, at a point of the area's code where the task has done part of its work (a
source partition half read, a stateful processor after some of its state updates); Spark's
scheduler runs the task again (`local[N,F]`).  The schedules' traces must not change: a retried
task re-reads its partition from the same offsets and its state store version from the last
commit (what the failed attempt wrote is never committed), which is Spark's exactly-once.

How it is wired: the adapter `arm`s the directory of a `run_many` call (a small JSON file that the
Python workers read: they do not share the driver's memory), and each area calls `task_point(root,
where)` in its tasks.  Each injected failure leaves a marker file, so that the driver counts them
(`injected`).  Unarmed, `task_point` reads nothing but one `stat`, and never fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ENV = "CONFORMANCE_STREAM_TASK_FAILURES"
CONFIG = "task-failures.json"
MARKERS = "task-failures"
RESTARTS = "query-restarts"


class InjectedTaskFailure(RuntimeError):
    """A Spark task failed on purpose (chaos.py); Spark's scheduler runs it again."""


def share_from_env() -> float:
    """The share of tasks to fail, from the environment (0 when unset); a usage error if malformed."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return 0.0
    try:
        share = float(text)
    except ValueError:
        raise ValueError(f"{ENV}={text!r}: give a share of tasks between 0 and 1") from None
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"{ENV}={text!r}: give a share of tasks between 0 and 1")
    return share


def arm(root: Path, share: float, seed: int = 0) -> None:
    """Make the tasks of the queries run under `root` fail with that share (0: disarm)."""
    if share > 0:
        (root / CONFIG).write_text(json.dumps({"share": share, "seed": seed}))
        (root / MARKERS).mkdir(exist_ok=True)


def armed(root: Path) -> str | None:
    """`root` as the string the areas' tasks take (a data source option, a processor's field) when
    the run is armed; None otherwise, so that an unarmed run passes nothing to its tasks."""
    return str(root) if (root / CONFIG).exists() else None


def half_read(rows: Sequence[T], root: str | None, where: str) -> Iterator[T]:
    """A source partition's rows, with `task_point` once half of them are out (the partition half
    read); an empty partition has no such point."""
    half = len(rows) // 2
    yield from rows[:half]
    if rows and root:
        task_point(root, where)
    yield from rows[half:]


def injected(root: Path) -> int:
    """How many task failures were injected under `root`."""
    markers = root / MARKERS
    return len(list(markers.iterdir())) if markers.exists() else 0


def query_restarted(root: str | Path, why: str) -> None:
    """On the driver: count a streaming query stopped and started again from its checkpoint (a
    schedule's `crash` or `restore`, or a failure the area injects), for the fault runs' summary."""
    restarts = Path(root) / RESTARTS
    restarts.mkdir(exist_ok=True)
    (restarts / f"{why.replace('/', '_')}-{uuid.uuid4().hex}").touch()


def restarts(root: Path) -> int:
    """How many query restarts were counted under `root`."""
    path = root / RESTARTS
    return len(list(path.iterdir())) if path.exists() else 0


def _chosen(seed: int, key: str, share: float) -> bool:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < share * 2**64


def task_point(root: str | Path, where: str) -> None:
    """In a Spark task: fail this attempt if the run is armed and the task is chosen.

    A task is chosen by its stage, partition and `where` (each at most once, in its first attempt),
    so that a retry always gets through.  Call it where the task has done part of its work."""
    config = Path(root) / CONFIG
    if not config.exists():
        return
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None or ctx.attemptNumber() > 0:
        return
    settings = json.loads(config.read_text())
    key = f"{where}:{ctx.stageId()}:{ctx.partitionId()}"
    if not _chosen(int(settings["seed"]), key, float(settings["share"])):
        return
    (Path(root) / MARKERS / f"{key.replace('/', '_')}-{uuid.uuid4().hex}").touch()
    raise InjectedTaskFailure(f"injected task failure at {where} (stage {ctx.stageId()}, "
                              f"partition {ctx.partitionId()}); Spark runs the task again")
