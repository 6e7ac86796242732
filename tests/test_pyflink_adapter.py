"""The pyflink adapter: one-line errors without apache-flink or Java (in every environment), and,
where apache-flink is installed, key groups and two-phase mini-batch on real Flink jobs."""

from __future__ import annotations

import sys
import types

import pytest
from flink_semantics.conformance.registry import load_adapter
from flink_semantics.spec.adapter import AdapterError
from flink_semantics.spec.schedule import Schedule, required_capabilities, schedule_from_dict


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
             "type": "string"}, {"op": "update", "key": 7, "type": "long"}, {"op": "update", "key": 7},
             {"op": "update", "key": "\ud83d\ude00", "type": "string"},  # KG-34: a pair as two code points
             {"op": "update", "key": "\U0001F600", "type": "string"}]  # is its character: one key
    pyflink, flink = (schedule_from_dict({"area": "key_groups", "config": {
        "parallelism": 2, "max_parallelism": 128, "hash": h}, "steps": steps}) for h in ("pyflink", "flink"))
    a, b = key_groups.run_batch([pyflink, flink])
    got = [(e.hash, e.key_group, e.subtask, e.value) for e in a.events]
    assert got == [(963226257, 17, 0, 1), (1168509563, 123, 1, 1), (336975172, 68, 1, 1),
                   (963226257, 17, 0, 1), (963226257, 17, 0, 2),
                   (1918831379, 19, 0, 1), (1918831379, 19, 0, 2)]  # Row.of("😀"): 62 + 1772899
    first = b.events[0]
    assert (first.hash, first.key_group) == (1343918321, 113)  # KG-1's key group, subtask 1 by KG-3
    assert first.subtask == 0  # but the record went where Row.of(7) sends it


def test_unpaired_surrogates_are_unsupported_with_pyflinks_reason() -> None:
    """KG-34, C11: the adapter declares string keys with unpaired surrogates unsupported, naming
    PyFlink's coder, and would refuse such a schedule (the suite draws none) instead of failing a job."""
    from flink_semantics.adapters.pyflink import key_groups

    reason = key_groups.CAPABILITIES["key_groups.lone_surrogates"]
    assert reason is not None and "CharCoderImpl" in reason and "UnicodeEncodeError" in reason
    s = schedule_from_dict({"area": "key_groups", "steps": [
        {"op": "update", "key": "\U0001F600", "type": "string"},
        {"op": "update", "key": "a\udfff", "type": "string"}]})
    assert key_groups._unsupported(s) == "step 1 (update) needs key_groups.lone_surrogates"
    assert required_capabilities(s) == {"key_groups", "key_groups.lone_surrogates"}


@pytest.mark.pyflink
def test_pyflinks_string_coder_refuses_unpaired_surrogates() -> None:
    """C11 on PyFlink 2.3.0 itself: the coder of a STRING key (key_by's key_type) encodes strict
    UTF-8, so it raises on "\\ud800" before Java sees the key, and writes 😀 as its 4 bytes."""
    pytest.importorskip("pyflink", reason="apache-flink is not installed (tox -e conformance-pyflink)")
    from pyflink.fn_execution import coder_impl_fast, coder_impl_slow, stream_fast, stream_slow

    out = stream_slow.OutputStream()
    coder_impl_slow.CharCoderImpl().encode_to_stream("\U0001F600", out)
    assert out.get() == b"\x00\x00\x00\x04\xf0\x9f\x98\x80"  # length-prefixed UTF-8
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        coder_impl_slow.CharCoderImpl().encode_to_stream("\ud800", stream_slow.OutputStream())
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):  # the Cython coder a job uses
        coder_impl_fast.CharCoderImpl().encode_to_stream("\ud800", stream_fast.OutputStream())


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


def _mini_batch(config: dict[str, object], rows: list[tuple[int, str, int]]) -> Schedule:
    steps = [{"op": "row", "key": k, "kind": kind, "value": v} for k, kind, v in rows]
    config = {"enabled": True, "allow_latency": 10, **config}
    return schedule_from_dict({"area": "mini_batch", "config": config, "steps": steps})


@pytest.mark.pyflink
def test_two_phase_on_flink_agrees_with_the_reference() -> None:
    """MB-25, MB-26 on real Flink jobs: local bundles that fill the global one in the middle (C1),
    keys retracted to a count of zero and back (MB-23), -U asked for or not, state retention, sizes 1
    and 100 (nothing emitted before the end); the traces equal the reference model's, keys of a
    bundle in any order (C2)."""
    pytest.importorskip("pyflink", reason="apache-flink is not installed (tox -e conformance-pyflink)")
    from flink_semantics.adapters.pyflink import mini_batch
    from flink_semantics.conformance.checker import compare
    from flink_semantics.reference import expected_trace

    two = {"two_phase": True}
    schedules = [
        _mini_batch({**two, "size": 3}, [(0, "+I", 5), (3, "+I", 3), (0, "+I", 0), (0, "+U", 0), (4, "+I", 7),
                                         (2, "+I", 1), (2, "+I", 4), (4, "-U", 7), (4, "+U", 2)]),
        _mini_batch({**two, "size": 2, "update_before": True}, [
            (1, "+I", 0), (0, "+I", 0), (0, "+U", 0), (3, "+I", 0), (0, "-U", 0), (0, "-D", 0), (4, "+I", 5),
            (3, "-D", 0), (3, "+I", 1), (1, "+U", 2), (0, "+I", 9), (2, "+I", 3)]),
        _mini_batch({**two, "size": 4, "ttl": True}, [
            (3, "+I", 9), (2, "+I", 2), (2, "+I", 5), (0, "+I", 9), (1, "+I", 0), (0, "-U", 9), (0, "+U", 9),
            (3, "+U", 0)]),
        _mini_batch({**two, "size": 1, "update_before": True}, [(2, "+I", 1), (2, "+U", 1), (2, "-D", 1),
                                                                (2, "+I", 4)]),
        _mini_batch({**two, "size": 100}, [(0, "+I", 1), (1, "+I", 2), (0, "-D", 1)]),
    ]
    traces = mini_batch.run_batch(schedules)
    for s, trace in zip(schedules, traces):
        assert compare(s, expected_trace(s), trace, "scripted") is None, s.to_json()
    assert sum(e.event == "out" for t in traces for e in t.events) >= 12


@pytest.mark.pyflink
def test_two_phase_on_flink_sends_local_keys_in_hash_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """C1 is a real choice: run on the schedule's own keys, Flink's local aggregation sends a bundle's
    keys in HashMap order (by bucket: keys 3, 2, 0, 4 are in buckets 1, 4, 13, 13 of Flink's
    BinaryRowData hash), not first arrival: at step 5 the global bundle (size 3, holding k0 and k3 from
    the first local bundle) fills up with k2, sent before k0, so k0's second accumulator waits."""
    pytest.importorskip("pyflink", reason="apache-flink is not installed (tox -e conformance-pyflink)")
    from flink_semantics.adapters.pyflink import mini_batch
    from flink_semantics.reference import expected_trace

    s = _mini_batch({"two_phase": True, "size": 3}, [(0, "+I", 5), (3, "+I", 3), (0, "+I", 0), (0, "+U", 0),
                                                    (4, "+I", 7), (2, "+I", 1)])
    assert [mini_batch._spread(k) & 0xF for k in (3, 2, 0, 4)] == [1, 4, 13, 13]
    outputs = lambda trace: [(e.step, e.key, e.count, e.sum) for e in trace.events]  # noqa: E731
    assert outputs(expected_trace(s)) == [(5, 0, 3, 5), (5, 3, 1, 3)]
    assert outputs(mini_batch.run_batch([s])[0]) == [(5, 0, 3, 5), (5, 3, 1, 3)]  # the stand-ins: C1's order
    monkeypatch.setattr(mini_batch, "_stand_ins", lambda schedule: {k: k for k in (0, 2, 3, 4)})
    assert outputs(mini_batch.run_batch([s])[0]) == [(5, 3, 1, 3), (5, 2, 1, 1), (5, 0, 2, 5)]
