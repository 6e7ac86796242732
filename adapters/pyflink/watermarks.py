"""Watermarks on Flink itself: not built yet.

Per-split watermark generation and idleness happen inside Java FLIP-27 sources, which PyFlink
cannot script; a watermark strategy on a Python stream has one generator and no splits.  The
valve of combined inputs (WM-17..WM-21) could be observed with a two-input Python function and
is the next part to build.
"""

from __future__ import annotations

CAPABILITIES: dict[str, str | None] = {
    "watermarks": "not built yet: per-split watermark generation happens inside Java FLIP-27 sources, which "
                  "PyFlink cannot script; a watermark strategy on a Python stream has one generator, no "
                  "splits",
}
