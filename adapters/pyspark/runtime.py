"""Conformance mode, area-neutral: virtual time, a durable store, and a schedule's run across failures.

Each area has a module `adapters/pyspark/<area>/conformance.py` that declares the capabilities it
supports (`CAPABILITIES`, opt-in: spec/adapter.py) and runs one schedule of its area
(`Run(schedule, store)`, a `ScheduleRun`).  This module finds it by the schedule's area and gives
it what every area needs:

* `VirtualTimers` (timers.py): processing time changes only on the steps that advance it; due timers fire in
  (deadline, registration) order, each at its own deadline (spec/schedules.md, items 1 and 5);
* `ScheduleStore`: a directory on storage that outlives the task (a local disk, or on a cluster a
  file system every executor reaches) holding the events of every incarnation that ended, each
  run of them written with the marker that ends it, and the checkpoint snapshots.  Nothing is
  written for a schedule until it takes a checkpoint or an incarnation ends, so most schedules
  never touch the disk;
* `ScheduleRun`: runs the steps; when an incarnation ends (a crash step, a task failure) it writes
  an `ended` marker and raises `InjectedFailure` out of the Spark task.  Spark runs the task again;
  the new run finds the marker, keeps the events emitted before it, and goes on with the step
  after it (normally a restore, which reads the snapshot back from the store).

No Spark here: the unit tests and the `pyspark-local` adapter run this module directly.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark.timers import VirtualClock
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.area import areas, get_area
from flink_semantics.spec.schedule import Event, Schedule, Step, Trace, make_trace, rejected


class InjectedFailure(RuntimeError):
    """A crash step or a task failure: raised so that the Spark task really fails."""


# --------------------------------------------------------------------------
# The durable store of one schedule
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Progress:
    events: list[Event]
    resume_step: int = 0  # the first step still to run
    clock: int = 0


class ScheduleStore:
    """`<dir>/sink.jsonl` (events and the markers of ended incarnations), `<dir>/ckpt-<id>.json`, and
    any other state an area keeps across task failures (`<dir>/<name>.json`).

    The directory is made on the first write.  A schedule that completes is not recorded: if its
    task is run again, it runs again from its last marker, and gives the same trace.
    """

    def __init__(self, path: str | Path, area: str):
        self.path = Path(path)
        self._sink = self.path / "sink.jsonl"
        self._kinds = get_area(area).event_kinds

    def load(self) -> Progress:
        """What earlier attempts left: the events up to the last marker, and where to go on."""
        progress = Progress([])
        pending: list[Event] = []
        if not self._sink.exists():
            return progress
        for line in self._sink.read_text().splitlines():
            rec = json.loads(line)
            if "event" in rec:
                pending.append(self._kinds[rec["event"]["event"]].from_dict(rec["event"]))
            elif "ended" in rec:
                progress.events += pending
                pending = []
                progress.resume_step, progress.clock = rec["ended"] + 1, rec["clock"]
        if pending:  # events after the last marker: an attempt that died unexpectedly; dropped
            self._rewrite(progress)
        return progress

    def _rewrite(self, progress: Progress) -> None:
        lines = [json.dumps({"event": e.to_dict()}) for e in progress.events]
        if progress.resume_step:
            lines.append(json.dumps({"ended": progress.resume_step - 1, "clock": progress.clock}))
        tmp = self.path / "sink.jsonl.tmp"
        tmp.write_text("".join(line + "\n" for line in lines))
        os.replace(tmp, self._sink)

    def mark_ended(self, events: list[Event], step: int, clock: int) -> None:
        """The incarnation ended at `step`: append its events and the marker in one write (closed,
        so the task's next attempt reads it; only events followed by a marker count)."""
        lines = [json.dumps({"event": e.to_dict()}) for e in events]
        lines.append(json.dumps({"ended": step, "clock": clock}))
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self._sink, "a") as fh:
            fh.write("".join(line + "\n" for line in lines))

    def write_checkpoint(self, id: int, payload: Any) -> None:
        """A checkpoint's snapshot (any JSON value), stored before the checkpoint counts."""
        self.write_json(f"ckpt-{id}", payload)

    def read_checkpoint(self, id: int) -> Any:
        return self.read_json(f"ckpt-{id}")

    def write_json(self, name: str, payload: Any) -> None:
        """`<dir>/<name>.json`, replaced atomically: state that outlives the task (a checkpoint, or
        what the tasks that did not fail hold when one does)."""
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f"{name}.json.tmp"
        tmp.write_text(json.dumps(payload))
        os.replace(tmp, self.path / f"{name}.json")

    def read_json(self, name: str) -> Any:
        return json.loads((self.path / f"{name}.json").read_text())


# --------------------------------------------------------------------------
# Running a schedule
# --------------------------------------------------------------------------


class ScheduleRun:
    """Runs one schedule (or resumes it after an injected failure).  An area's `Run` derives from it.

    The area implements `start(resume_step)` (False: the configuration is refused, `rejected`),
    `apply(index, step)`, `alive` (the current incarnation is running) and `cause(index)` (why the
    incarnation ended, for the failure message); it records events with `record_event`.
    """

    def __init__(self, schedule: Schedule, store: ScheduleStore):
        self.schedule = schedule
        self.store = store
        self.events: list[Event] = []
        self._unwritten: list[Event] = []  # events since the last marker in the sink
        self.step = -1
        self.clock = VirtualClock()

    # ---- what an area implements -----------------------------------------

    def start(self, resume_step: int) -> bool:
        raise NotImplementedError

    def apply(self, index: int, step: Step) -> None:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        raise NotImplementedError

    def cause(self, index: int) -> str:
        return "the task failed"

    # ---- the run ---------------------------------------------------------

    def record_event(self, e: Event) -> None:
        self.events.append(e)
        self._unwritten.append(e)

    def _take_unwritten(self) -> list[Event]:
        out, self._unwritten = self._unwritten, []
        return out

    def reject(self, reason: str) -> None:
        """The configuration is refused: the trace is the one `rejected` event."""
        self.events = [rejected(reason)]

    def run(self) -> list[Event]:
        progress = self.store.load()
        self.events = progress.events
        self.clock.now = progress.clock
        if not self.start(progress.resume_step):
            return self.events
        for i in range(progress.resume_step, len(self.schedule.steps)):
            self.step = i
            was_alive = self.alive
            self.apply(i, self.schedule.steps[i])
            if was_alive and not self.alive:
                self.store.mark_ended(self._take_unwritten(), i, self.clock.now)
                raise InjectedFailure(f"step {i}: {self.cause(i)}; Spark retries the task")
        return self.events


@cache
def area_module(area: str) -> Any:
    """`adapters/pyspark/<area>/conformance.py`: the area's CAPABILITIES and its `Run` (the package
    itself holds the library a user imports, which imports no runner)."""
    get_area(area)
    return importlib.import_module(f"flink_semantics.adapters.pyspark.{area}.conformance")


def implemented_areas() -> list[str]:
    """The areas that have a module here."""
    found = []
    for name in areas():
        try:
            area_module(name)
        except ModuleNotFoundError as e:
            if e.name not in (f"flink_semantics.adapters.pyspark.{name}",
                              f"flink_semantics.adapters.pyspark.{name}.conformance"):
                raise
            continue
        found.append(name)
    return found


def capabilities() -> dict[str, str | None]:
    """What the PySpark implementation declares: each area it implements, and that area's own list."""
    out: dict[str, str | None] = {}
    for name in implemented_areas():
        out[name] = None
        out.update(area_module(name).CAPABILITIES)
    return out


def run_schedule(schedule: Schedule, store: ScheduleStore) -> list[Event]:
    run: ScheduleRun = area_module(schedule.area).Run(schedule, store)
    return run.run()


def run_with_retries(schedule: Schedule, path: str | Path, max_attempts: int = 1000) -> list[Event]:
    """Run a schedule in this process, re-running it after each injected failure as Spark would."""
    for _ in range(max_attempts):
        try:
            return run_schedule(schedule, ScheduleStore(path, schedule.area))
        except InjectedFailure:
            continue
    raise RuntimeError(f"schedule still failing after {max_attempts} attempts")


def scratch_dir(prefix: str) -> Path:
    """A new temporary directory for schedule stores: in memory (`/dev/shm`) where the machine has
    one, since a store's small files cost about a millisecond each on a disk and a tenth of that
    there.  Files there outlive the task and its worker process, as a store must; not the machine,
    which a store need not."""
    shm = Path("/dev/shm")
    memory = shm.is_dir() and os.access(shm, os.W_OK | os.X_OK)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=shm if memory else None))


class LocalScriptedAdapter:
    """The conformance-mode implementations without Spark (same runs and store, retries in-process).

    Fast and independent of the reference: the built-in adapter `pyspark-local`.
    """

    name = "pyspark-local"
    completion_order = SCRIPTED

    def __init__(self) -> None:
        self.root = scratch_dir("pyspark-local-")
        self._n = itertools.count()

    def capabilities(self) -> Mapping[str, str | None]:
        return capabilities()

    def run_batch(self, schedules: list[Schedule]) -> list[Trace]:
        return [make_trace(run_with_retries(s, self.root / str(next(self._n)))) for s in schedules]

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
