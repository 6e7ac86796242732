"""Deliberately wrong adapters of the sources area, to show that the suite catches them
(tests/test_wrong_sources.py).

Each runs the reference model with one rule broken (a subclass of `reference.sources.Model`); they
are test doubles, so unlike real adapters they may import `reference`.  Schedules of other areas go
to the reference unchanged.
"""

from __future__ import annotations

from flink_semantics.conformance.strength import Mutant
from flink_semantics.reference.sources import COMPLETED, Model
from flink_semantics.spec.areas.sources import RegisterStep

from tests.wrong_area import WrongArea


class WrongSources(WrongArea):
    """Runs sources schedules on `model` (a broken Model), the rest on the reference."""

    area = "sources"
    model = Model


class _ReturnsRestoredSplits(Model):
    def take_back(self, r, restored):  # type: ignore[no-untyped-def]
        back = super().take_back(r, None)  # every tracked split, whatever the restore point ...
        # ... and the splits of its restored state
        return back + [split for split, _ in self.restored_state(r) if split not in back]


class ReturnsRestoredSplits(WrongSources):
    """A reset returns every split of the failed reader, those in its restored state too (breaks SRC-21,
    SRC-22)."""

    model = _ReturnsRestoredSplits


class _ForgetsBucketOnAbort(Model):
    def abort(self, s):  # type: ignore[no-untyped-def]
        self.tracker.pop(s.id, None)
        super().abort(s)


class ForgetsBucketOnAbort(WrongSources):
    """An aborted checkpoint drops the assignments tracked under it (breaks SRC-18)."""

    model = _ForgetsBucketOnAbort


class _ReturnedOnlyOnAddReader(Model):
    def __init__(self, config):  # type: ignore[no-untyped-def]
        super().__init__(config)
        self.kept: dict[int, list[int]] = {}

    def fail(self, s):  # type: ignore[no-untyped-def]
        before = list(self.queue)
        super().fail(s)
        self.queue = before  # the returned splits wait for their reader's addReader
        for e in self.out:
            if e.event == "splits_back":
                self.kept.setdefault(e.reader, []).extend(e.splits)

    def register(self, r):  # type: ignore[no-untyped-def]
        super().register(r)
        for split in self.kept.pop(r, []):  # handed out in addReader only
            self.queue.insert(0, split)
            self.assign(r)


class ReturnedOnlyOnAddReader(WrongSources):
    """Returned splits are handed out only when their reader registers again (breaks SRC-24)."""

    model = _ReturnedOnlyOnAddReader


class _EndsBeforeNoMoreSplits(Model):
    def maybe_end(self, r):  # type: ignore[no-untyped-def]
        reader = self.readers[r]
        if not reader.splits and not reader.ended and any(e.event == "split_finished" and e.reader == r
                                                          for e in self.out):
            reader.ended = True
            self.emit("end_of_input", reader=r)
        else:
            super().maybe_end(r)


class EndsBeforeNoMoreSplits(WrongSources):
    """A reader that finished its last split reports END_OF_INPUT without waiting for NoMoreSplits
    (breaks SRC-32)."""

    model = _EndsBeforeNoMoreSplits


class _RestoresRegistry(Model):
    def global_failover(self, cause, parallelism=None):  # type: ignore[no-untyped-def]
        registered = {r for r, reader in enumerate(self.readers) if reader.registered}
        super().global_failover(cause, parallelism)
        for r in registered:
            if r < self.parallelism:
                self.readers[r].registered = True

    def register(self, r):  # type: ignore[no-untyped-def]
        self.readers[r].registered = False
        super().register(r)

    def running(self, r, s):  # type: ignore[no-untyped-def]
        if not isinstance(s, RegisterStep):
            super().running(r, s)


class RestoresRegistry(WrongSources):
    """A global failover keeps the reader registry, so a push to a reader that has not registered
    again succeeds (breaks SRC-5, SRC-4)."""

    model = _RestoresRegistry


class _NoValve(Model):
    def send(self, r, kind, split=None):  # type: ignore[no-untyped-def]
        self.deliver(r, kind, split)


class NoValve(WrongSources):
    """Events reach the readers at once, even between a coordinator checkpoint and the readers'
    snapshots (breaks SRC-13)."""

    model = _NoValve


class _RoundRobinRescale(Model):
    def redistribute(self, cp):  # type: ignore[no-untyped-def]
        if cp.parallelism == self.parallelism:
            return super().redistribute(cp)
        union = [p for r in range(cp.parallelism) for p in cp.readers.get(r, [])]
        return [union[r::self.parallelism] for r in range(self.parallelism)]


class RoundRobinRescale(WrongSources):
    """A rescale deals the splits round-robin instead of in contiguous parts (breaks SRC-31)."""

    model = _RoundRobinRescale


class _RestartsEverything(Model):
    def fail(self, s):  # type: ignore[no-untyped-def]
        if not self.config.has_graph:
            return super().fail(s)
        config = self.config
        n = config.readers + config.tasks
        everything = tuple((u, v) for v in range(n) for u in range(v))
        self.config = type(config)(readers=config.readers, splits=config.splits, bounded=config.bounded,
                                   tasks=config.tasks, pipelined=everything)
        try:
            super().fail(s)
        finally:
            self.config = config


class RestartsEverything(WrongSources):
    """Any task failure in a job graph restarts every task (breaks SRC-36)."""

    model = _RestartsEverything


class _UncommittedOnFailure(Model):
    def fail(self, s):  # type: ignore[no-untyped-def]
        kept = {r: list(self.readers[r].pending) for r in range(self.parallelism)}
        super().fail(s)
        for r, records in kept.items():  # the failed attempt's output is kept and committed later
            if records and not self.readers[r].registered:
                self.readers[r].pending = records


class KeepsUncommittedOutput(WrongSources):
    """A failed reader's sink keeps the records it emitted after the restore point (breaks SRC-20: its
    sink must discard them; SRC-38, the invariant derived from it, follows)."""

    model = _UncommittedOnFailure


class _DropsLateNotification(Model):
    def complete(self, s):  # type: ignore[no-untyped-def]
        cp = self.checkpoints.get(s.id)
        if cp is not None and cp.state == COMPLETED:
            return  # "not pending any more": neither the tracker nor the sinks hear of it
        super().complete(s)


class DropsLateNotification(WrongSources):
    """A notification of a checkpoint that completed earlier without notification is dropped, as if
    completion and notification were one event: the sinks do not commit what they staged before its
    barrier (breaks SRC-17)."""

    model = _DropsLateNotification


class _PrunesUpToLatestCheckpoint(Model):
    def notify_complete(self, n):  # type: ignore[no-untyped-def]
        super().notify_complete(n)
        latest = max(self.checkpoints)  # as if the notification were for the latest checkpoint taken
        self.tracker = {k: v for k, v in self.tracker.items() if k > latest}


class PrunesUpToLatestCheckpoint(WrongSources):
    """The tracker takes a notification for the latest checkpoint taken: a late one drops the buckets
    of later checkpoints too, whose splits a reader failure then does not give back (breaks SRC-17)."""

    model = _PrunesUpToLatestCheckpoint


class _KeepsNoMoreSplitsFlag(Model):
    def fail(self, s):  # type: ignore[no-untyped-def]
        flagged = set(self.no_more)
        super().fail(s)
        self.no_more |= flagged  # the failed attempt's flag stays: its new attempt's requests are dropped

    def end(self, s):  # type: ignore[no-untyped-def]
        # `end` as the reference runs it: with the stale flags its rounds would never end
        self.no_more = {r for r in self.no_more if self.readers[r].no_more}
        super().end(s)


class KeepsNoMoreSplitsFlag(WrongSources):
    """A reset does not clear the reader's NoMoreSplits flag (SRC-21 says it must), so the new
    attempt's requests are dropped as if it had been told (SRC-6) and it never gets NoMoreSplits
    (breaks SRC-25).  Only the combination shows it: NoMoreSplits, then the reader's failure, then a
    request of its new attempt (conformance/areas/sources.py: NO_MORE_AGAIN)."""

    model = _KeepsNoMoreSplitsFlag


__all__ = ["DropsLateNotification", "EndsBeforeNoMoreSplits", "ForgetsBucketOnAbort", "KeepsNoMoreSplitsFlag",
           "KeepsUncommittedOutput", "NoValve", "PrunesUpToLatestCheckpoint", "RestartsEverything",
           "RestoresRegistry", "ReturnedOnlyOnAddReader", "ReturnsRestoredSplits", "RoundRobinRescale"]


# The registry (`strength`, tests/test_wrong_sources.py): the property that must
# catch each mutant, and a rule its failure report must name.
MUTANTS = [
    Mutant("ReturnsRestoredSplits", "test_reader_failover", "SRC-22"),
    Mutant("ForgetsBucketOnAbort", "test_reader_failover", "SRC-18"),
    Mutant("ReturnedOnlyOnAddReader", "test_reader_failover", "SRC-24"),
    Mutant("EndsBeforeNoMoreSplits", "test_assignment_and_reading", "SRC-32"),
    Mutant("RestoresRegistry", "test_global_failover", "SRC-5"),
    Mutant("NoValve", "test_checkpoints", "SRC-13"),
    Mutant("RoundRobinRescale", "test_rescale", "SRC-31"),
    Mutant("RestartsEverything", "test_region_failover", "SRC-36"),
    Mutant("KeepsUncommittedOutput", "test_reader_failover", "SRC-20"),
    Mutant("DropsLateNotification", "test_checkpoints", "SRC-17"),
    Mutant("PrunesUpToLatestCheckpoint", "test_reader_failover", "SRC-17"),
    Mutant("KeepsNoMoreSplitsFlag", "test_reader_failover", "SRC-25"),
]
