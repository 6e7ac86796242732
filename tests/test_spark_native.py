"""Tests of the `spark-native` adapter (adapters/spark_native): Spark's own watermark, measured.

The expected traces are worked out by hand from Spark's documented watermark (pyspark-notes
section 3; Spark's WatermarkTracker): per `withWatermark` operator `max(event time) - delay`, kept
when higher; the global watermark the minimum over the operators, an operator that has seen no
data counting as 0 (here: none, see OFFSET in the adapter), never going down, restored from the
offset log when a query restarts while the per-operator map starts empty.  With delay = bound + 1
ms, `max - delay` is Flink's `max ts - D - 1`.  Each schedule is one streaming query: all of them
run in one `run_batch`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flink_semantics.conformance.examples import notation
from flink_semantics.spec.schedule import Trace

pytestmark = pytest.mark.spark
WM = notation("watermarks")

# name -> (configuration, steps, the trace Spark's watermark gives, by hand; spec notation)
CASES = {
    # Two streams under the min policy: the global watermark is the lower stream's, and rises when
    # it does.  Record steps run a micro-batch each; the watermark a batch computes is used (and
    # shown) by the no-data batch Spark runs right after it, in the same step.
    "min over streams": (
        {"readers": 2, "bound": 2},
        "add r0 s0\nadd r1 s1\nrecord s0 20\nrecord s1 12\ntick 10\nrecord s1 30",
        "@2 record s0 20\n@2 watermark r0 17\n@3 record s1 12\n@3 watermark r1 9\n@3 output 9\n"
        "@5 record s1 30\n@5 watermark r1 27\n@5 output 17"),
    # One watermark per stream over all its splits: the maximum (Flink: the minimum over splits,
    # WM-6), and a new split holds nothing back (Flink: WM-10).  No periodic emission: ticks do
    # nothing.
    "maximum over a stream's splits": (
        {"readers": 1, "bound": 0},
        "add r0 s0\nrecord s0 20\nadd r0 s1\nrecord s1 5\ntick 200\nrecord s0 30",
        "@1 record s0 20\n@1 watermark r0 19\n@1 output 19\n@3 record s1 5\n"
        "@5 record s0 30\n@5 watermark r0 29\n@5 output 29"),
    # A stream that never has data holds the global watermark at none, whatever idleness says
    # (Spark has none); at the end nothing moves (no MAX).
    "a silent stream holds everything back": (
        {"readers": 2, "bound": 0, "idleness": 10},
        "add r0 s0\nadd r1 s1\nrecord s0 20\ntick 50\nrecord s0 40\nend",
        "@2 record s0 20\n@2 watermark r0 19\n@4 record s0 40\n@4 watermark r0 39\n"
        "@5 split_finished s0\n@5 split_finished s1"),
    # A restart keeps the global watermark (the offset log has it) while the per-operator map
    # starts empty: the stream without new data counts as none again, so the global stays at 9
    # until both streams pass it (Flink: everything starts again at MIN, WM-16).
    "a restart keeps the global watermark": (
        {"readers": 2, "bound": 0},
        "add r0 s0\nadd r1 s1\nrecord s0 10\nrecord s1 12\nfailover\nrecord s0 30\nrecord s1 40",
        "@2 record s0 10\n@2 watermark r0 9\n@3 record s1 12\n@3 watermark r1 11\n@3 output 9\n"
        "@4 restarted\n@5 record s0 30\n@5 watermark r0 29\n@6 record s1 40\n@6 watermark r1 39\n"
        "@6 output 29"),
}


@pytest.fixture(scope="module")
def traces() -> Iterator[dict[str, Trace]]:
    from flink_semantics.adapters.spark_native import SparkNativeAdapter

    adapter = SparkNativeAdapter()
    try:
        got = adapter.run_batch([WM.schedule(config, steps) for config, steps, _ in CASES.values()])
        yield dict(zip(CASES, got))
    finally:
        adapter.close()
    assert not list(adapter.root.parent.glob(adapter.root.name)), "the adapter left its directory"


@pytest.mark.parametrize("case", list(CASES))
def test_spark_watermark(traces: dict[str, Trace], case: str) -> None:
    """Spark's own watermark on a schedule is what Spark's documented rules give."""
    want = WM.trace(CASES[case][2])
    assert [str(e) for e in traces[case].events] == [str(e) for e in want.events]


def test_alignment_is_declared_unsupported_with_a_reason() -> None:
    from flink_semantics.adapters.spark_native import SparkNativeAdapter

    caps = SparkNativeAdapter.capabilities(SparkNativeAdapter.__new__(SparkNativeAdapter))
    assert caps["watermarks.alignment"] and "alignment" in caps["watermarks.alignment"]
    assert "async_io" not in caps and "sources" not in caps  # areas Spark-native does not cover
