"""Watermarks on Flink itself: unsupported.

Per-split watermark generation and idleness happen inside Java FLIP-27 source readers, whose
splits a Python program cannot assign step by step.  PyFlink 2.3.0's `WatermarkStrategy` offers
Flink's own generators only (`for_monotonous_timestamps`, `for_bounded_out_of_orderness`,
`no_watermarks`, `with_idleness`; pyflink/common/watermark_strategy.py): no Python generator, so
no punctuated one; they emit periodically on the wall clock (`pipeline.auto-watermark-interval`)
and measure idleness on it, which a schedule's `tick` cannot move.  The valve of combined inputs
(WM-17..WM-21) sees its channels in the order Flink's threads deliver them, not a schedule's.
"""

from __future__ import annotations

CAPABILITIES: dict[str, str | None] = {
    "watermarks": "PyFlink 2.3.0's WatermarkStrategy has Flink's periodic generators only (no Python or "
                  "punctuated one): they emit and measure idleness on the wall clock, which a `tick` "
                  "cannot move; per-split generation happens inside Java FLIP-27 readers whose splits "
                  "Python cannot assign; a valve's channels arrive in the order of Flink's threads",
}
