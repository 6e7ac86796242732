"""Progress of long runs: how much is done, per area, and when the run should end.

`Progress(total)` is told how much of `total` is done (`update(done, detail)`) and prints one line
at most every `every` seconds: the share done, the detail (for example the schedules validated per
area), the time so far and an estimate of the time left (linear in what is done).  The conformance
plugin uses it for the `thorough` profile and `--conformance-progress`; the benchmarks use it for
their runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def duration(seconds: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    def __init__(self, total: float, label: str = "progress", every: float = 10.0,
                 write: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.total = max(total, 1e-9)
        self.label = label
        self.every = every
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self.clock = clock
        self.started = clock()
        self.last = self.started

    def line(self, done: float, detail: str = "") -> str:
        elapsed = self.clock() - self.started
        share = min(max(done / self.total, 0.0), 1.0)
        eta = duration(elapsed * (1 - share) / share) if share > 0 else "unknown"
        detail = f"; {detail}" if detail else ""
        return f"{self.label}: {share:.0%} done{detail}; {duration(elapsed)} so far, ETA {eta}"

    def update(self, done: float, detail: str = "", force: bool = False) -> None:
        """Print the line if `every` seconds have passed since the last one (or `force`)."""
        now = self.clock()
        if force or now - self.last >= self.every:
            self.last = now
            self.write(self.line(done, detail))
