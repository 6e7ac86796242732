"""A timer service on a clock the caller moves: the processing time of the engines' operators.

The engines (`<area>/engine.py`) take a timer service; in a user's query its clock is the
micro-batch's or the rows' time, in conformance mode the schedule's virtual time.  Due timers fire
in (deadline, registration) order, each at its own deadline (spec/schedules.md, items 1 and 5).
Standard library only: the public APIs import it, the conformance runners too.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

# --------------------------------------------------------------------------


class VirtualClock:
    def __init__(self, now: int = 0):
        self.now = now  # ms; runs on across crashes and restores (execution model 1)


class _Timer:
    __slots__ = ("deadline", "seq", "callback", "cancelled")

    def __init__(self, deadline: float, seq: int, callback: Callable[[], None]):
        self.deadline = deadline
        self.seq = seq
        self.callback = callback
        self.cancelled = False

    def __lt__(self, other: _Timer) -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)


class VirtualTimers:
    """The timer service of one incarnation on the shared virtual clock."""

    def __init__(self, clock: VirtualClock):
        self.clock = clock
        self._heap: list[_Timer] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.clock.now

    def register(self, deadline: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(deadline, next(self._seq), callback)
        heapq.heappush(self._heap, timer)
        return timer

    def cancel(self, handle: _Timer) -> None:
        handle.cancelled = True

    def deadlines(self) -> list[int]:
        """The pending timers' deadlines, in firing order (to save them across micro-batches)."""
        return [int(t.deadline) for t in sorted(self._heap) if not t.cancelled]

    def retime(self, deadlines: list[int]) -> None:
        """Move the pending timers (registered afresh, in firing order) to saved `deadlines`."""
        pending = [t for t in sorted(self._heap) if not t.cancelled]
        if len(pending) != len(deadlines):
            raise RuntimeError(f"{len(pending)} timers pending for {len(deadlines)} saved deadlines")
        for timer, deadline in zip(pending, deadlines):
            timer.deadline = deadline
        self._heap = pending
        heapq.heapify(self._heap)

    def advance(self, ms: int, alive: Callable[[], bool]) -> None:
        """Execution model 5: fire due timers one by one at their deadlines, then set the new time."""
        target = self.clock.now + ms
        while alive() and self._heap and self._heap[0].deadline <= target:
            timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self.clock.now = int(timer.deadline)
            timer.callback()
        self.clock.now = target
