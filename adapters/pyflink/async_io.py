"""Async I/O on Flink itself: not built yet.

PyFlink 2.3.0 has `AsyncDataStream.ordered_wait` / `unordered_wait`, but the Python async function
runs on asyncio in the Python worker, and when each call completes, relative to the records and
watermarks still arriving, is the worker's timing: a schedule's completions cannot be scripted
from Python, and the adapter completes calls in schedule order (SCRIPTED) for the other areas.
Running it needs the suite's FREE comparison for this area only, which the adapter protocol
(one `completion_order` per adapter) does not offer yet.
"""

from __future__ import annotations

CAPABILITIES: dict[str, str | None] = {
    "async_io": "not built yet: PyFlink's AsyncDataStream completes the Python async calls on asyncio in the "
                "Python worker, in an order the schedule cannot script; checking it needs FREE completion "
                "order for this area alone, while the adapter is SCRIPTED for the others",
}
