"""Two mutants for the end-to-end run of `python -m flink_semantics.conformance strength` in
tests/test_strength.py: one the mini-batch suite catches, and one that breaks nothing, so it must escape."""

from __future__ import annotations

from flink_semantics.conformance.strength import Mutant
from flink_semantics.reference.mini_batch import Model

from tests.wrong_mini_batch import SizeCountsKeys, WrongMiniBatch


class Conforms(WrongMiniBatch):
    """Runs the reference model itself: no property can catch it."""

    model = Model


MUTANTS = [
    Mutant("SizeCountsKeys", "test_processing_time_bundles", "MB-10"),
    Mutant("Conforms", "test_processing_time_bundles", "MB-10"),
]

__all__ = ["Conforms", "SizeCountsKeys", "MUTANTS"]
