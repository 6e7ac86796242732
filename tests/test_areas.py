"""Areas are the unit of the design: discovered, complete in every part, and unknown to the shared core.

A toy area, registered by hand, shows that a second area plugs in without touching shared code and
that steps of one area are refused in a schedule of another, with the step and the rule named.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from flink_semantics.spec.area import Area, Notation, areas, get_area, register, unregister
from flink_semantics.spec.rules import load_rules
from flink_semantics.spec.schedule import (
    CHECKPOINT,
    CRASH,
    END,
    INPUT,
    OUTPUT,
    RESTORE,
    EventKind,
    Schedule,
    ScheduleError,
    Step,
    schedule_from_dict,
    validate_schedule,
)

from flink_semantics import reference

ROOT = Path(__file__).resolve().parent.parent

# The shared core: every module of these parts that belongs to no area.
SHARED = [ROOT / p for p in (
    "spec/__init__.py", "spec/schedule.py", "spec/area.py", "spec/adapter.py", "spec/rules.py",
    "spec/areas/__init__.py",
    "reference/__init__.py", "adapters/__init__.py", "adapters/reference.py",
    "adapters/pyspark/__init__.py", "adapters/pyspark/adapter.py", "adapters/pyspark/runtime.py",
    "adapters/pyspark/session.py", "adapters/pyspark/runner_session.py", "adapters/pyspark/timers.py",
    "adapters/pyspark/daemon.py", "adapters/pyspark/streaming.py",
    "adapters/pyspark/chaos.py", "adapters/spark_native/__init__.py",
    "adapters/pyflink/__init__.py", "adapters/pyflink/session.py", "adapters/process.py",
    "adapters/process_server.py", "adapters/flink/__init__.py",
    "conformance/__init__.py",
    "conformance/__main__.py", "conformance/cli.py", "conformance/rules.py",
    "conformance/areas/__init__.py", "conformance/checker.py", "conformance/conftest.py",
    "conformance/examples.py", "conformance/isolate.py", "conformance/plugin.py", "conformance/registry.py",
    "conformance/strategies.py", "conformance/test_spec_examples.py", "conformance/verdicts.py",
    "conformance/draw.py", "conformance/matrix.py", "conformance/strength.py", "conformance/corpus.py",
    "conformance/reverdict.py",
    "conformance/progress.py", "conformance/coverage.py", "conformance/test_corpus.py",
    "conformance/test_coverage.py", "conformance/entry.py",
)]


def _owned(part: str, own: set[str]) -> bool:
    """A path part named after an area: `<area>`, `test_<area>.py`, or `<area>_<job>.py` (an area's
    module split in two, such as conformance/areas/key_groups_blame.py)."""
    stem = part.removeprefix("test_").removesuffix(".py")
    return stem in own or (part.endswith(".py") and any(stem.startswith(f"{a}_") for a in own))


def test_every_module_of_the_shared_core_is_listed() -> None:
    """SHARED names every module outside the areas' own files, so the next test sees them all."""
    own = {f"{a}" for a in areas()}
    found = set()
    for part in ("spec", "reference", "adapters", "conformance"):
        for path in (ROOT / part).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if not any(_owned(p, own) for p in rel.parts):
                found.add(path)
    assert found == set(SHARED)


def area_words(area: Area) -> list[re.Pattern[str]]:
    """What names an area: its name, its rule IDs, its types, its step kinds as JSON strings (but for
    the execution model's own words, the step roles of spec/schedules.md)."""
    types = [area.config_type.__name__, *(t.__name__ for t in area.steps)]
    ops = [t.op for t in area.steps if t.op not in (INPUT, CHECKPOINT, END, CRASH, RESTORE)]
    return [re.compile(rf"\b{re.escape(area.name)}\b"), re.compile(rf"\b{area.rule_prefix}-\d+"),
            *(re.compile(rf"\b{t}\b") for t in types),
            *(re.compile(rf"[\"']{re.escape(op)}[\"']") for op in ops)]


@pytest.mark.parametrize("name", list(areas()))
def test_the_shared_core_names_no_area(name: str) -> None:
    area = get_area(name)
    hits = [f"{path.relative_to(ROOT)}:{no}: {line.strip()}"
            for path in SHARED for no, line in enumerate(path.read_text().splitlines(), 1)
            for word in area_words(area) if word.search(line) and not _protocol_word(path, word.pattern)]
    assert hits == []


def _protocol_word(path: Path, pattern: str) -> bool:
    """The process protocol's own message type "error" (docs/process-protocol.md), which is also an
    async I/O step's name: in the protocol's two modules it is the protocol's word, not the area's."""
    return path.name in ("process.py", "process_server.py") and "error" in pattern


@pytest.mark.parametrize("name", list(areas()))
def test_an_area_has_its_module_in_every_part(name: str) -> None:
    area = get_area(name)
    assert (ROOT / "spec" / area.rules_file).exists()
    rules = [r for r in load_rules().values() if r.file == area.rules_file]
    assert rules and all(r.id.startswith(f"{area.rule_prefix}-") for r in rules)
    assert all(c.startswith(f"{name}.") for c in area.capabilities)
    for module in (f"flink_semantics.reference.{name}", f"flink_semantics.conformance.areas.{name}",
                   f"flink_semantics.adapters.pyspark.{name}"):
        importlib.import_module(module)
    assert (ROOT / "conformance" / f"test_{name}.py").exists()
    assert reference.model_class(name) is importlib.import_module(f"flink_semantics.reference.{name}").Model


# --------------------------------------------------------------------------
# A toy area
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ToyConfig:
    size: int = 1


@dataclass(frozen=True)
class PingStep(Step):
    op: ClassVar[str] = "ping"
    role: ClassVar[str | None] = INPUT
    n: int


@dataclass(frozen=True)
class StopStep(Step):
    op: ClassVar[str] = "stop"
    role: ClassVar[str | None] = END


def _no_notation(*args: Any) -> Any:
    raise NotImplementedError


TOY = Area(name="toy", title="toy", rules_file="toy.md", rule_prefix="TOY", config_type=ToyConfig,
           steps=(PingStep, StopStep), events=(EventKind("pong", ("n",), OUTPUT),),
           capabilities={"toy.loud": "pongs out loud"},
           notation=Notation(_no_notation, _no_notation, _no_notation, _no_notation),
           validate_config=lambda config: None)


@pytest.fixture
def toy() -> Iterator[Area]:
    register(TOY)
    try:
        yield TOY
    finally:
        unregister(TOY.name)


def test_a_registered_area_is_found(toy: Area) -> None:
    assert areas()["toy"] is toy
    s = schedule_from_dict({"area": "toy", "config": {"size": 3}, "steps": [{"op": "ping", "n": 1},
                                                                           {"op": "stop"}]})
    assert s.steps == (PingStep(1), StopStep()) and s.config == ToyConfig(3)
    assert toy.event(0, "pong", n=1).to_dict() == {"step": 0, "event": "pong", "n": 1}


@pytest.mark.parametrize("area, foreign", [("toy", {"op": "record", "value": 1}),
                                           ("async_io", {"op": "ping", "n": 1})])
def test_a_step_of_another_area_is_refused_with_step_and_rule(toy: Area, area: str, foreign: dict) -> None:
    own = {"toy": {"op": "ping", "n": 0}, "async_io": {"op": "record", "value": 0}}[area]
    with pytest.raises(ScheduleError) as err:
        schedule_from_dict({"area": area, "steps": [own, foreign]})
    assert (err.value.step, err.value.rule, err.value.op) == (1, "SCH-1", foreign["op"])
    assert str(err.value).startswith(f"step 1 ({foreign['op']}): SCH-1") and area in str(err.value)


def test_a_step_object_of_another_area_is_refused(toy: Area) -> None:
    from flink_semantics.spec.areas.async_io import RecordStep

    with pytest.raises(ScheduleError) as err:
        validate_schedule(Schedule("toy", ToyConfig(), (PingStep(1), RecordStep(5))))
    assert (err.value.step, err.value.rule) == (1, "SCH-1")


def test_the_shared_rules_hold_in_any_area(toy: Area) -> None:
    """SCH-2 from the annotations, SCH-6 from the roles: nothing the toy area wrote itself."""
    cases = [([{"op": "ping", "n": "one"}], 0, "SCH-2"), ([{"op": "ping"}], 0, "SCH-2"),
             ([{"op": "stop"}, {"op": "ping", "n": 1}], 1, "SCH-6")]
    for steps, step, rule in cases:
        with pytest.raises(ScheduleError) as err:
            schedule_from_dict({"area": "toy", "steps": steps})
        assert (err.value.step, err.value.rule) == (step, rule), steps


def test_an_area_without_a_reference_model_is_named(toy: Area) -> None:
    with pytest.raises(ScheduleError, match="no reference model for area 'toy'"):
        reference.run(Schedule("toy", ToyConfig(), ()))


def test_unknown_area_names_the_known_ones() -> None:
    with pytest.raises(ScheduleError) as err:
        schedule_from_dict({"area": "no_such_area", "steps": []})
    assert err.value.rule == "SCH-1" and "async_io" in str(err.value)
