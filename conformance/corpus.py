"""The corpus of counterexamples: every shrunk counterexample the suite finds, saved and replayed.

A failing property saves its counterexample as `<corpus>/<area>/<id>.json`, the id a hash of the
schedule, so that the same counterexample is saved once, with its timeline next to it
(`<id>.svg` and `<id>.png`, conformance/draw.py).  The file holds the schedule, the reference's
trace of it (`expected`), and what was found: the adapter, its trace (`observed`), the property,
the rules the report names and the first divergent step.  Every run replays the corpus of the
areas it runs first, against whatever adapter it runs (conformance/test_corpus.py): a
counterexample found once, against any adapter, guards every adapter from then on.

The corpus directory is `--corpus DIR` (default $CONFORMANCE_CORPUS): replayed, and where new
counterexamples are saved.  Without one the run replays `corpus/` beside this module (the one kept
in the repository and shipped in the package) and saves new counterexamples in pytest's cache
directory (`.pytest_cache/d/flink_semantics_corpus`), never inside the installed package; to add
them to the repository's corpus, run with `--corpus conformance/corpus`.  `--corpus none` neither
replays nor saves.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flink_semantics.spec.schedule import Schedule, ScheduleError, Trace, schedule_from_dict, trace_from_dict

DEFAULT = Path(__file__).resolve().parent / "corpus"
OFF = "none"


class CorpusError(ValueError):
    """A corpus file that cannot be read: its path and why."""


@dataclass(frozen=True)
class Case:
    """One saved counterexample."""

    schedule: Schedule
    expected: Trace  # the reference's trace when it was saved
    observed: Trace | None = None  # the adapter's trace that differed
    adapter: str | None = None
    prop: str | None = None  # the property that found it
    rules: tuple[str, ...] = ()
    step: int | None = None  # the first divergent step
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def area(self) -> str:
        return str(self.schedule.area)

    def to_dict(self) -> dict[str, Any]:
        return {"area": self.area, "schedule": self.schedule.to_dict(),
                "expected": self.expected.to_dict()["events"],
                "observed": None if self.observed is None else self.observed.to_dict()["events"],
                "adapter": self.adapter, "property": self.prop, "rules": list(self.rules),
                "step": self.step}


def directory(option: str | None) -> Path | None:
    """The corpus replayed: `--corpus DIR` or $CONFORMANCE_CORPUS, else the shipped one (None when
    it is `none`)."""
    value = option or os.environ.get("CONFORMANCE_CORPUS") or str(DEFAULT)
    return None if value == OFF else Path(value)


def save_directory(option: str | None, cache: Any = None) -> Path | None:
    """Where new counterexamples are saved: `--corpus DIR` or $CONFORMANCE_CORPUS, else pytest's
    cache directory (`cache`: the session's `config.cache`), never the shipped corpus inside the
    installed package; None with `--corpus none` or without a cache."""
    value = option or os.environ.get("CONFORMANCE_CORPUS")
    if value:
        return None if value == OFF else Path(value)
    if cache is None:
        return None
    return Path(cache.mkdir("flink_semantics_corpus"))


def case_id(schedule: Schedule) -> str:
    return hashlib.sha256(schedule.to_json().encode("utf-8")).hexdigest()[:16]


def path_of(root: Path, schedule: Schedule) -> Path:
    return root / str(schedule.area) / f"{case_id(schedule)}.json"


def save(root: Path, case: Case) -> tuple[Path, bool]:
    """Save a counterexample unless it is there already: (its path, whether it is new)."""
    path = path_of(root, case.schedule)
    if path.exists():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(case.to_dict(), indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)  # a reader never sees half a file
    return path, True


def case_from_dict(data: Any, where: str) -> Case:
    """A Case from a corpus file's JSON object; CorpusError names the file."""
    if not isinstance(data, dict) or not isinstance(data.get("schedule"), dict):
        raise CorpusError(f"{where}: not a corpus file (a JSON object with 'schedule' and 'expected')")
    try:
        schedule = schedule_from_dict(data["schedule"], validate=False)
        expected = trace_from_dict({"events": data.get("expected") or []}, schedule.area)
        observed = data.get("observed")
        seen = None if observed is None else trace_from_dict({"events": observed}, schedule.area)
    except (ScheduleError, KeyError, TypeError, ValueError) as e:
        raise CorpusError(f"{where}: {e}") from None
    return Case(schedule, expected, seen, data.get("adapter"), data.get("property"),
                tuple(data.get("rules") or ()), data.get("step"))


def load(path: Path) -> Case:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise CorpusError(f"{path}: {e}") from None
    return case_from_dict(data, str(path))


def cases(root: Path | None, area: str) -> list[tuple[Path, Case]]:
    """The saved counterexamples of an area, in file name order."""
    if root is None or not (root / area).is_dir():
        return []
    return [(p, load(p)) for p in sorted((root / area).glob("*.json"))]


def rules_of(found: Iterable[tuple[Path, Case]]) -> list[str]:
    out: list[str] = []
    for _, case in found:
        out += [r for r in case.rules if r not in out]
    return out
