"""FLIP-27 on Spark Structured Streaming: the interface a source implements, and the engine that runs it.

A source is three pieces, as in Flink (spec/sources.md):

* a `Split`: an id and a JSON-serializable position (where reading it goes on from);
* a `SplitEnumerator`, on the driver: it discovers splits while the query runs (`discover`, called
  at the start of each planning round, SRC-42), hands one to a reader that asks (`assign`, SRC-6),
  takes splits back (`add_splits_back`, SRC-21) and snapshots its state as JSON (`snapshot`, SRC-12).
  `FifoEnumerator` is one with a first-in-first-out queue of unassigned splits (spec C1);
* a `SplitReader`: `read(split, start, end)` runs on the executors and yields the records of a
  split between two positions, as Arrow record batches (or tuples); `plan(split, start, budget)`
  says, on the driver, how far the reader gets in this micro-batch (`Planned`: the position after
  the range, what it costs of the budget, whether the split is then finished, SRC-33).

`SplitSource` is the Spark Python data source that runs them: subclass it with `name()`,
`schema()`, `create_enumerator(snapshot)` and `create_reader(schema)`, register it
(`spark.dataSource.register`) and read it with `spark.readStream.format(name)`.  The built-in file
source (api.py, `Flip27Source`) is one.

How it maps onto Spark's micro-batches:

* **a planning round is one micro-batch** and runs on the driver (`latestOffset(start)`): the
  enumerator is restored from the offset `start`, discovers, and every reader in index order plans
  its owned splits in the order it got them (SRC-39) and, each time it has none left unfinished,
  asks for another (SRC-6) until its budget is spent or the enumerator has none: a reader reads
  several splits in one micro-batch.  A finished split leaves its reader (SRC-33).  The planning
  is per split range, never per record;
* **the offset JSON is the checkpoint**: Spark writes it to `<checkpoint>/offsets/<N>` before batch
  N runs.  It holds the enumerator's snapshot (SRC-12), every reader's owned, unfinished splits with
  their positions (SRC-15), and the ranges each reader reads in the batch, so that a replay of the
  batch reads the same records (each split in one place, SRC-16);
* **reader r is Spark partition r**: `partitions(start, end)` returns one partition per reader, in
  order, holding its ranges; the executors read them (`SplitReader.read`);
* **the notification** of checkpoint N is `commit(end)`, which Spark sends once batch N+1's offset
  is written (SRC-17): the enumerator restored from `end` gets `notify_checkpoint_complete(N)`.

What Spark's model changes:

* the position after a micro-batch's reads must be in the offset before the batch runs, so the
  reader's part that decides it (`plan`) runs on the driver; `read` must then read exactly the
  records between the two positions (Flink's reader reports its position after it read);
* a failed read task is run again by Spark with the same partition: the failed reader's splits
  come back to the same reader (partition), read again from the same start positions, never to
  another reader as Flink's `addSplitsBack` may (SRC-21);
* a failed query restarts from its checkpoint: Spark runs the last uncommitted batch again with its
  logged offsets (the same ranges, the same assignments), then plans on from it;
* a query restarted with fewer `readers` hands the splits of the readers that are gone back to the
  enumerator (`add_splits_back`, with their positions); more readers start with none (SRC-31
  redistributes reader states instead).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

JSON = Any  # what json.dumps writes and json.loads reads back equal
DEFAULT_READERS = 2


@dataclass(frozen=True)
class Split:
    """A split: `id` names it (unique within the source); `position` is where reading goes on from
    (JSON: a byte offset, a record number, a dict of them...)."""

    id: str
    position: JSON = None

    def to_json(self) -> list[Any]:
        return [self.id, self.position]

    @classmethod
    def from_json(cls, d: list[Any]) -> Split:
        return cls(d[0], d[1])


@dataclass(frozen=True)
class Planned:
    """What a reader reads of a split in one micro-batch, decided on the driver: up to the position
    `end` (equal to the start: nothing now), costing `cost` of the reader's budget (its unit: bytes,
    records...), after which the split is `finished` (SRC-33: it leaves the reader's state)."""

    end: JSON
    cost: int = 0
    finished: bool = False


class SplitEnumerator(ABC):
    """The driver-side enumerator.  It is restored from its last snapshot for every planning round
    (`SplitSource.create_enumerator(snapshot)`), so all it keeps must be in `snapshot()`."""

    def discover(self) -> None:  # noqa: B027 (optional: an enumerator of fixed splits has none)
        """SRC-42: take in the splits that appeared since the last round (called at the start of
        each planning round, so a split appearing while the query runs is read)."""

    @abstractmethod
    def assign(self, reader: int) -> Split | None:
        """SRC-6: reader `reader` asks for a split: one to assign to it, or None when there is none now."""

    @abstractmethod
    def add_splits_back(self, splits: list[Split], reader: int) -> None:
        """SRC-21: splits a reader gave back, each at the position it had reached."""

    @abstractmethod
    def snapshot(self) -> JSON:
        """SRC-12: the enumerator's state, as JSON; what `create_enumerator` restores from."""

    def notify_checkpoint_complete(self, batch: int) -> None:  # noqa: B027 (optional)
        """SRC-17: micro-batch `batch` committed (Spark says so once the next batch's offset is written)."""


class FifoEnumerator(SplitEnumerator):
    """Unassigned splits in a first-in-first-out queue (spec C1): a request gets the head, returned
    splits join the tail.  Subclasses discover by calling `add_splits`."""

    def __init__(self, snapshot: JSON = None):
        self.unassigned = [Split.from_json(s) for s in (snapshot or {}).get("unassigned", [])]

    def add_splits(self, splits: list[Split]) -> None:
        self.unassigned += splits

    def assign(self, reader: int) -> Split | None:
        return self.unassigned.pop(0) if self.unassigned else None

    def add_splits_back(self, splits: list[Split], reader: int) -> None:
        self.unassigned += splits

    def snapshot(self) -> JSON:
        return {"unassigned": [s.to_json() for s in self.unassigned]}


class SplitReader(ABC):
    """A split reader: `read` runs on the executors, `plan` on the driver (Spark needs the position
    after a batch's reads before the batch runs).  It is pickled to the executors."""

    @abstractmethod
    def plan(self, split: Split, start: JSON, budget: int | None) -> Planned:
        """How far the reader gets in `split` from position `start` in this micro-batch, spending at
        most `budget` (None: no limit; with a limit, at least some progress when there is data)."""

    @abstractmethod
    def read(self, split: Split, start: JSON, end: JSON) -> Iterator[Any]:
        """SRC-39: the split's records from `start` up to `end`, in order, as `pyarrow.RecordBatch`es
        of the source's schema (or tuples): exactly those, also when run again."""


# --------------------------------------------------------------------------
# The Spark data source
# --------------------------------------------------------------------------


def as_json(value: Any) -> Any:
    """`value` as Spark's offset log gives it back (tuples become lists); a TypeError naming what
    is not JSON."""
    try:
        return json.loads(json.dumps(value))
    except TypeError as e:
        raise TypeError(f"the source's offset must be JSON (the enumerator's snapshot, the positions): "
                        f"{e}") from e


def positive_int_option(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    """Option `name` as an int >= 1 (absent: `default`); a ValueError naming it otherwise."""
    text = options.get(name)
    if text is None:
        return default
    try:
        value = int(str(text))
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"option {name!r} must be an integer >= 1, not {text!r}")
    return value


class SplitSource(DataSource):
    """A FLIP-27 source as a Spark Python data source: subclass it with `name()`, `schema()`,
    `create_enumerator` and `create_reader` (and `budget`, `check_options` as needed).

    Option `readers`: the source's parallelism, how many readers (Spark partitions) every
    micro-batch has (default 2; a restart with another count: the module's docstring).  Options
    are checked (`check_options`, a ValueError naming the option) when Spark creates the source:
    at `load()` when no schema is given, else when the query starts (Spark 4.3 runs no Python code
    of a source given a schema before that)."""

    def __init__(self, options: dict[str, str]):
        # DataSource asks not to override __init__; Spark creates the source with its options and
        # calls nothing else of it before `schema()`, so the options are checked here, once
        super().__init__(options)
        self.check_options()

    def check_options(self) -> None:
        """A ValueError naming a bad or missing option."""
        self.readers()

    def readers(self) -> int:
        n = positive_int_option(self.options, "readers", DEFAULT_READERS)
        assert n is not None
        return n

    def budget(self) -> int | None:
        """What each reader may spend per micro-batch (the reader's unit), None for no limit."""
        return None

    @abstractmethod
    def create_enumerator(self, snapshot: JSON) -> SplitEnumerator:
        """The enumerator restored from `snapshot` (None: a new query's)."""

    @abstractmethod
    def create_reader(self, schema: Any) -> SplitReader:
        """The split reader for records of `schema` (a StructType)."""

    def streamReader(self, schema: Any) -> SplitStreamReader:
        return SplitStreamReader(self, schema)


@dataclass
class ReaderPartition(InputPartition):
    """Reader `reader`'s ranges in a micro-batch: [split id, start, end] in reading order."""

    reader: int
    ranges: list[list[Any]]


class SplitStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The engine: plans on the driver, reads on the executors (the module's docstring)."""

    def __init__(self, source: SplitSource, schema: Any):
        self.source = source
        self.schema = schema
        self.parallelism = source.readers()
        self.discovery = "always"  # "once", then "never", after prepareForTriggerAvailableNow
        self._reader: SplitReader | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_reader": None}

    def split_reader(self) -> SplitReader:
        if self._reader is None:
            self._reader = self.source.create_reader(self.schema)
        return self._reader

    def initialOffset(self) -> dict[str, Any]:
        return as_json({"batch": -1, "enumerator": self.source.create_enumerator(None).snapshot(),
                        "owned": [[] for _ in range(self.parallelism)],
                        "read": [[] for _ in range(self.parallelism)]})

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: the next planning round discovers the splits there are now, and no
        round after it discovers more; the query reads them to their ends and stops (a split that
        keeps growing is read as far as its reader's `plan` says)."""
        self.discovery = "once"

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        """One planning round: restore, discover, let every reader plan (the module's docstring).
        `start` itself when nothing changed (no batch)."""
        enumerator = self.source.create_enumerator(start["enumerator"])
        if self.discovery != "never":
            enumerator.discover()  # SRC-42
            if self.discovery == "once":
                self.discovery = "never"
        owned = [[Split.from_json(s) for s in splits] for splits in start["owned"]]
        for r in range(self.parallelism, len(owned)):  # fewer readers: theirs go back, with positions
            if owned[r]:
                enumerator.add_splits_back(owned[r], r)  # SRC-21
        owned = (owned + [[] for _ in range(self.parallelism)])[:self.parallelism]
        read = [self.plan_reader(enumerator, r, owned[r]) for r in range(self.parallelism)]
        offset = as_json({"batch": start["batch"] + 1, "enumerator": enumerator.snapshot(),
                          "owned": [[s.to_json() for s in splits] for splits in owned], "read": read})
        unchanged = all(offset[k] == start[k] for k in ("enumerator", "owned"))
        return start if unchanged and not any(read) else offset

    def plan_reader(self, enumerator: SplitEnumerator, r: int, owned: list[Split]) -> list[list[Any]]:
        """Reader r's ranges in this batch, [split id, start, end]; `owned` (its unfinished splits
        in the order it got them, SRC-15) is updated to their positions after the ranges."""
        reader, budget = self.split_reader(), self.source.budget()
        ranges: list[list[Any]] = []
        k = 0  # owned[:k] are planned and unfinished
        while budget is None or budget > 0:
            if k == len(owned):
                if owned:
                    break  # SRC-6: a reader asks for a split only when it has none unfinished
                split = self.assign(enumerator, r)
                if split is None:
                    break
                owned.append(split)  # SRC-8: read from the split's own position
            split = owned[k]
            try:
                planned = reader.plan(split, split.position, budget)
            except Exception as e:  # the reader's own exception, with where it happened
                e.add_note(f"flip27: reader {r} planning split {split.id!r} from {split.position!r}")
                raise
            if planned.end != split.position:
                ranges.append([split.id, split.position, planned.end])
                if budget is not None:
                    budget -= max(planned.cost, 1)
            if planned.finished:
                del owned[k]  # SRC-33: a finished split leaves the reader's state
            else:
                owned[k] = Split(split.id, planned.end)
                k += 1
        return ranges

    @staticmethod
    def assign(enumerator: SplitEnumerator, r: int) -> Split | None:
        split = enumerator.assign(r)
        if split is not None and not isinstance(split, Split):
            raise TypeError(f"{type(enumerator).__name__}.assign({r}) returned {split!r}, not a Split "
                            "or None")
        return split

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """Reader r is partition r; a replayed batch gets the same ranges (they are in its offset)."""
        return [ReaderPartition(r, ranges) for r, ranges in enumerate(end["read"])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """SRC-39: the partition's ranges in order, each read by the split reader."""
        assert isinstance(partition, ReaderPartition)
        reader = self.split_reader()
        for split_id, lo, hi in partition.ranges:
            try:
                yield from reader.read(Split(split_id, lo), lo, hi)
            except Exception as e:  # the reader's own exception, with where it happened
                e.add_note(f"flip27: reader {partition.reader} reading split {split_id!r} from {lo!r} "
                           f"to {hi!r}")
                raise

    def commit(self, end: dict[str, Any]) -> None:
        """SRC-17: checkpoint `end["batch"]` completed, one batch late."""
        self.source.create_enumerator(end["enumerator"]).notify_checkpoint_complete(end["batch"])
