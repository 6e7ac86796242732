"""The suite catches every deliberately wrong adapter of the key groups area
(tests/wrong_key_groups.py), in the property that checks the broken rule, and names that rule."""

from __future__ import annotations

import re

import pytest
from flink_semantics.conformance.checker import compare
from flink_semantics.reference.key_groups import Model
from flink_semantics.spec.adapter import SCRIPTED
from flink_semantics.spec.areas.key_groups import AddStateStep, CheckpointStep, KeyGroupsConfig, RestoreStep
from flink_semantics.spec.schedule import Schedule, Step, Trace

from tests import wrong_key_groups
from tests.test_suite_failures import REPO, reproducer, suite_runner
from tests.wrong_key_groups import MUTANTS

pytest_plugins = ["pytester"]


@pytest.fixture
def run_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    return suite_runner(pytester, monkeypatch, str(REPO / "conformance" / "test_key_groups.py"))


# (wrong adapter, the property that must catch it, a rule its report must name): wrong_key_groups.MUTANTS
CASES = [(m.name, m.prop, m.rule) for m in MUTANTS if m.area in (None, "key_groups")]


@pytest.mark.parametrize(("adapter", "prop", "rule"), CASES, ids=[c[0] for c in CASES])
def test_wrong_key_groups_adapter_is_caught(run_suite, adapter: str, prop: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    # Unshrunk (as the async I/O mutants in test_suite_failures): this checks the catch and the rule
    # named; shrinking is tested there and measured by `strength` (docs/running-the-suite.md). No
    # corpus: nothing replayed, nor saved and drawn (tests/test_corpus_coverage_progress.py does that).
    result = run_suite("--adapter", f"tests.wrong_key_groups:{adapter}", "--areas", "key_groups", "-k", prop,
                       "--conformance-shrink", "no", "--corpus", "none")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert f"adapter '{adapter}' does not conform" in out, out
    # The rules the divergence shows broken, not "(may concern too, ...)" nor "(the property checks
    # ...)" after them.
    rules = re.search(r"^rules: (.*?)(?: \(may concern too, not singled out: [^)]*\))?"
                      r"(?: \(the property checks .*\))?$", out, re.M)
    assert rules and rule in rules[1].split(", "), (rule, rules and rules[0], out[-3000:])
    want = f"python -m flink_semantics.conformance check --adapter tests.wrong_key_groups:{adapter} "
    assert reproducer(out).startswith(want)


def test_in_flight_elements_dealt_one_by_one_are_caught(pytester: pytest.Pytester,  # type: ignore[no-untyped-def]
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The async operator's stored elements on rescale (AIO-49, checked in the async I/O suite with
    this area's schedules): split state dealt one element at a time is caught, AIO-49 named."""
    run = suite_runner(pytester, monkeypatch, str(REPO / "conformance" / "test_async_io.py"))
    result = run("--adapter", "tests.wrong_key_groups:SplitOneByOne", "--areas", "async_io",
                 "-k", "in_flight")
    out = result.stdout.str()
    assert result.ret == 1, out
    rules = re.search(r"^rules: (.*?)(?: \(the property checks .*\))?$", out, re.M)
    assert rules and "AIO-49" in rules[1].split(", "), out[-3000:]
    assert re.search(r"^AIO-49 +MUST +failed", out, re.M), out[-3000:]


# ---- KG-17's freedom (C3): the order of a restored list's blocks.  Schedules that restore a list
# from several old subtasks and rescale it again, where the order the blocks are held in shows.


def _steps_of(parallelism: int, adds: list[tuple[int, str, int]], *restores: int) -> Schedule:
    steps: list[Step] = [AddStateStep(t, name, x, "split") for t, name, x in adds]
    for p in restores:
        steps += [CheckpointStep(), RestoreStep(p, None)]
    return Schedule("key_groups", KeyGroupsConfig(parallelism), tuple(steps))


# t0 restored with the blocks [1], [2, 3], [4] (spec/key-groups.md, KG-17's example), then rescaled
BLOCKS = _steps_of(3, [(0, "offsets", 1), (1, "offsets", 2), (1, "offsets", 3), (2, "offsets", 4)], 1, 2)
# two names, each t0 restored with three blocks, then rescaled back
TWO_NAMES = _steps_of(3, [(0, "a", 1), (1, "a", 2), (2, "a", 3), (0, "b", 4), (1, "b", 5), (2, "b", 6)], 1, 3)
# one subtask's list of three, to two subtasks
THREE_TO_TWO = _steps_of(1, [(0, "a", 1), (0, "a", 2), (0, "a", 3)], 2)


def _trace(model: type[Model], s: Schedule) -> Trace:
    m = model(s.config)
    return Trace(tuple(e for i, step in enumerate(s.steps) for e in m.apply(i, step)))


def _verdict(model: type[Model], s: Schedule) -> tuple[str, ...] | None:
    mismatch = compare(s, _trace(Model, s), _trace(model, s), SCRIPTED)
    return None if mismatch is None else mismatch.rules


@pytest.mark.parametrize("s", [BLOCKS, TWO_NAMES], ids=["blocks", "two_names"])
def test_another_legal_block_order_is_accepted(s: Schedule) -> None:
    """A subtask may hold its restored blocks in another order than old subtask order (KG-17, C3):
    the reference's trace differs at the second rescale, and the checker accepts the adapter's."""
    assert _trace(wrong_key_groups._OtherBlockOrder, s) != _trace(Model, s)
    assert _verdict(wrong_key_groups._OtherBlockOrder, s) is None


@pytest.mark.parametrize(("model", "s"), [
    (wrong_key_groups._ReversedInsideBlocks, BLOCKS),  # 1, 3, 2, 4: [1, 3] and [2, 4]
    (wrong_key_groups._BlockOrderPerName, TWO_NAMES),  # a held 3, 2, 1 and b 4, 5, 6 on one subtask
    (wrong_key_groups._ExtrasLast, THREE_TO_TWO),  # [1] and [2, 3]
], ids=["inside_a_block", "an_order_per_name", "extras_last"])
def test_an_order_no_block_order_gives_is_caught_as_kg17(model: type[Model], s: Schedule) -> None:
    assert _verdict(model, s) == ("KG-17",)


def test_the_block_order_freedom_keeps_kg21_for_a_wrong_rotation() -> None:
    """Another legal block order and no rotation across names: the rotation is still blamed."""
    s = _steps_of(2, [(0, "a", 1), (1, "a", 2), (1, "a", 3), (0, "b", 4), (1, "b", 5)], 1, 2)
    assert _verdict(wrong_key_groups._NoRotation, s) == ("KG-21",)


def test_a_legal_block_order_passes_the_rescaling_property(run_suite) -> None:  # type: ignore[no-untyped-def]
    result = run_suite("--adapter", "tests.wrong_key_groups:OtherBlockOrder", "--areas", "key_groups",
                       "-k", "test_operator_state_on_rescale")
    assert result.ret == 0, result.stdout.str()[-3000:]
