"""The example engine (examples/mini_batch_engine.py) with one deliberate bug, which the suite catches.

The bug: MIN and MAX without retraction (MB-30).  The accumulator remembers the least and the
greatest value ever accumulated, so retracting the minimum does not give the next one.  The suite
fails naming MB-30 among the rules of the divergence, with a one-line reproducer:

    pytest conformance --adapter examples.mini_batch_engine_broken:make_adapter --areas mini_batch
"""

from __future__ import annotations

from examples.mini_batch_engine import Acc, MiniBatchEngine


class MinMaxWithoutRetraction(Acc):
    """BUG (MB-30): MIN and MAX follow the values accumulated and ignore the ones retracted."""

    def __init__(self) -> None:
        super().__init__()
        self.least: int | None = None
        self.greatest: int | None = None

    def add(self, v: int) -> None:
        super().add(v)
        self.least = v if self.least is None else min(self.least, v)
        self.greatest = v if self.greatest is None else max(self.greatest, v)

    def result(self) -> tuple[int, int, int, int]:
        count, total, _, _ = super().result()
        assert self.least is not None and self.greatest is not None  # a key with a count holds a value
        return count, total, self.least, self.greatest


def make_adapter() -> MiniBatchEngine:
    engine = MiniBatchEngine(new_acc=MinMaxWithoutRetraction)
    engine.name = "mini-batch-example-broken"
    return engine
