"""Task failures injected into the streaming pipelines, while a micro-batch is in flight.

The `pyspark-stream` adapter's fault runs (issue 31): with `CONFORMANCE_STREAM_TASK_FAILURES` set
to a share between 0 and 1, that share of the Spark tasks of every streaming query it starts fail
at points of the area's code where the task has done part of its work (a source partition partly
read, a stateful processor after one of its state updates); Spark's scheduler runs the task again
(`local[N,F]`).  A task fails in at most its first `depth` attempts (`arm`), attempt a at the
(a+1)-th fault point it meets: each retry gets further through its partition before it fails, and
a task with fewer points than that fails fewer times.  The schedules' traces must not change: a
retried task re-reads its partition from the same offsets and its state store version from the
last commit (what a failed attempt wrote is never committed), which is Spark's exactly-once.

How it is wired: the adapter `arm`s the directory of a `run_many` call (a small JSON file that the
Python workers read: they do not share the driver's memory), and each area calls `task_point(root,
where)` in its tasks (`partly_read` in its source readers).  Each injected failure leaves a marker
file named after the task attempt, so that the driver counts them (`injected`).  Unarmed,
`task_point` reads nothing but one `stat`, and never fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

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


def arm(root: Path, share: float, seed: int = 0, depth: int = 1) -> None:
    """Make the tasks of the queries run under `root` fail with that share (0: disarm), each in at
    most its first `depth` attempts (keep it below `spark.task.maxFailures`, or the query fails)."""
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth: the attempts of a task that may fail, at least 1, not {depth!r}")
    if share > 0:
        (root / CONFIG).write_text(json.dumps({"share": share, "seed": seed, "depth": depth}))
        (root / MARKERS).mkdir(exist_ok=True)


def armed(root: Path) -> str | None:
    """`root` as the string the areas' tasks take (a data source option, a processor's field) when
    the run is armed; None otherwise, so that an unarmed run passes nothing to its tasks."""
    return str(root) if (root / CONFIG).exists() else None


def partly_read(rows: Sequence[T], root: str | None, where: str) -> Iterator[T]:
    """A source partition's rows, with a `task_point` after each of the run's `depth` equal parts
    but the last (one point half-way at depth 1; at depth 3, a quarter, half and three quarters
    read), at distinct places only: an empty partition has none, one row one, before it."""
    cuts: list[int] = []
    if rows and root and (Path(root) / CONFIG).exists():
        parts = _settings(root)["depth"] + 1
        cuts = sorted({len(rows) * i // parts for i in range(1, parts)})
    done = 0
    for cut in cuts:
        yield from rows[done:cut]
        task_point(root or "", where)
        done = cut
    yield from rows[done:]


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


_SETTINGS: dict[str, dict[str, Any]] = {}  # this worker process's armed runs (root -> its config)
_MET = [-1, 0]  # [task attempt id, fault points it met] in this worker process


def _settings(root: str | Path) -> dict[str, Any]:
    key = str(root)
    if key not in _SETTINGS:
        settings = json.loads((Path(root) / CONFIG).read_text())
        _SETTINGS[key] = {"share": float(settings["share"]), "seed": int(settings["seed"]),
                          "depth": int(settings.get("depth", 1))}
    return _SETTINGS[key]


def task_point(root: str | Path, where: str) -> None:
    """In a Spark task: fail this attempt if the run is armed, the attempt is one of the task's
    first `depth` and chosen (by stage, partition and attempt), and this is the attempt's
    (attempt + 1)-th fault point (counted in this worker process); so a retry always gets further,
    and the attempt after the last failing one gets through.  Call it where the task has done part
    of its work."""
    config = Path(root) / CONFIG
    if not config.exists():
        return
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return
    settings = _settings(root)
    attempt = ctx.attemptNumber()
    if attempt >= settings["depth"]:
        return
    if _MET[0] != ctx.taskAttemptId():
        _MET[:] = [ctx.taskAttemptId(), 0]
    _MET[1] += 1
    key = f"{ctx.stageId()}:{ctx.partitionId()}:{attempt}"
    if _MET[1] != attempt + 1 or not _chosen(settings["seed"], key, settings["share"]):
        return
    # One marker per failed attempt (two Python workers of one task may both fail it).
    (Path(root) / MARKERS / f"attempt-{ctx.taskAttemptId()}").write_text(f"{where} {key}")
    raise InjectedTaskFailure(f"injected task failure at {where} (stage {ctx.stageId()}, "
                              f"partition {ctx.partitionId()}, attempt {attempt}); Spark runs the "
                              f"task again")
