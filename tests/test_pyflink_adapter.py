"""The pyflink adapter: one-line errors without apache-flink or Java (in every environment), and,
where apache-flink is installed, key groups on real Flink jobs."""

from __future__ import annotations

import sys
import types

import pytest
from flink_semantics.conformance.registry import load_adapter
from flink_semantics.spec.adapter import AdapterError
from flink_semantics.spec.schedule import schedule_from_dict


def test_without_apache_flink_the_adapter_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyflink", None)  # import pyflink raises ImportError
    with pytest.raises(AdapterError) as info:
        load_adapter("pyflink")
    message = str(info.value)
    assert "\n" not in message
    assert "apache-flink is not installed" in message and "conformance-pyflink" in message


def test_without_java_the_adapter_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "pyflink", types.ModuleType("pyflink"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    with pytest.raises(AdapterError) as info:
        load_adapter("pyflink")
    assert str(info.value) == "pyflink adapter: Java not found (install Java 17 or set JAVA_HOME)"


def test_the_adapter_declares_every_area() -> None:
    """Each area has a module with its capability: supported, or unsupported with a reason."""
    from flink_semantics.adapters.pyflink import PyFlinkAdapter, area_module, capabilities
    from flink_semantics.spec.area import all_capabilities, areas

    caps = capabilities()
    for name in areas():
        assert area_module(name) is not None, name
        assert name in caps, name
    unknown = set(caps) - set(all_capabilities())
    assert not unknown, unknown
    assert PyFlinkAdapter.expected_failures["KG-6"].startswith("PyFlink's key_by keys by Row.of(key)")


@pytest.mark.pyflink
def test_key_groups_on_flink_route_by_row_of_the_key() -> None:
    """KG-33 on a real Flink job: key 7 (int and long), null and "abc" at parallelism 2, max 128,
    land on the subtasks of Row.of(key)'s key groups (values from the spec's example); the flink
    profile puts the same keys on other subtasks than its own key groups say (KG-6)."""
    pytest.importorskip("pyflink", reason="apache-flink is not installed (tox -e conformance-pyflink)")
    from flink_semantics.adapters.pyflink import key_groups

    steps = [{"op": "update", "key": 7}, {"op": "update", "key": None}, {"op": "update", "key": "abc",
             "type": "string"}, {"op": "update", "key": 7, "type": "long"}, {"op": "update", "key": 7}]
    pyflink, flink = (schedule_from_dict({"area": "key_groups", "config": {
        "parallelism": 2, "max_parallelism": 128, "hash": h}, "steps": steps}) for h in ("pyflink", "flink"))
    a, b = key_groups.run_batch([pyflink, flink])
    got = [(e.hash, e.key_group, e.subtask, e.value) for e in a.events]
    assert got == [(963226257, 17, 0, 1), (1168509563, 123, 1, 1), (336975172, 68, 1, 1),
                   (963226257, 17, 0, 1), (963226257, 17, 0, 2)]
    first = b.events[0]
    assert (first.hash, first.key_group) == (1343918321, 113)  # KG-1's key group, subtask 1 by KG-3
    assert first.subtask == 0  # but the record went where Row.of(7) sends it


@pytest.mark.pyflink
def test_key_groups_restores_on_flink_agree_with_the_reference() -> None:
    """Restores on real savepoints, pyflink profile: each subtask's keyed state back at the same
    parallelism (KG-14), updates after the checkpoint lost, a restore without a checkpoint a job from
    nothing (the configured maximum parallelism gone: KG-16's default), restores in a row, rescaling
    up, down and to 1 (KG-13), refusals (KG-8, KG-15, KG-16, in C7's order) after which the job goes
    on; the traces equal the reference model's."""
    pytest.importorskip("pyflink", reason="apache-flink is not installed (tox -e conformance-pyflink)")
    from flink_semantics.adapters.pyflink import key_groups
    from flink_semantics.reference import expected_trace

    def u(key: int | str | None, value: int = 1, type_: str = "int") -> dict[str, object]:
        return {"op": "update", "key": key, "value": value, "type": type_}

    ckpt = {"op": "checkpoint"}

    def restore(p: int, m: int | None = None) -> dict[str, object]:
        return {"op": "restore", "parallelism": p, "max_parallelism": m}

    cases = [
        ({"parallelism": 2, "max_parallelism": 10}, [u(7), u(12), ckpt, u(7), u(2), restore(2), u(7)]),
        ({"parallelism": 3, "max_parallelism": 16}, [u(7), restore(3), u("a", 2, "string"), ckpt, restore(3),
                                                      u(7, 1, "long"), restore(3), u("a", 1, "string")]),
        ({"parallelism": 2, "max_parallelism": 10}, [u(7), u(None), restore(2), u(7), ckpt, u(3),
                                                      restore(2)]),
        ({"parallelism": 1}, [ckpt, restore(1), restore(1)]),
        # KG-13: up, down and to 1; KG-15, KG-16 and KG-8 refused (the job going on), C7's order
        ({"parallelism": 2, "max_parallelism": 10}, [u(7), u(12), u(3), u(4), ckpt, u(7), restore(3), u(7),
                                                      u(12), ckpt, restore(1), u(3)]),
        ({"parallelism": 2, "max_parallelism": 4}, [u(7), ckpt, u(7), restore(5), u(7)]),
        ({"parallelism": 2}, [ckpt, restore(3, 256), restore(3), restore(2, 16), u(5)]),
        ({"parallelism": 3, "max_parallelism": 16}, [u(7), restore(4), u("a", 2, "string"), ckpt, restore(2),
                                                      u(7, 1, "long"), restore(0), u("a", 1, "string"),
                                                      restore(8), u(9)]),
    ]
    schedules = [schedule_from_dict({"area": "key_groups", "config": {**c, "hash": "pyflink"}, "steps": s})
                 for c, s in cases]
    traces = key_groups.run_batch(schedules)
    assert traces == [expected_trace(s) for s in schedules]
    restored = [e for e in traces[2].events if e.event == "restored"]
    assert [e.max_parallelism for e in restored] == [128, 128]  # not 10: the first restore had no checkpoint
