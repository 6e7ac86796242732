"""The built-in file source's enumerator and reader (api.py's `Flip27Source` runs them).

* `FileEnumerator`: every file of the directory is a split, its id the file's name, its position
  a byte offset (0 when discovered).  Each planning round lists the directory and takes in the
  files it has not seen, oldest first (by modification time, then name; SRC-42).  Like Spark's own
  file source it skips names starting with `.` or `_` (a file being written is written under such a
  name and renamed when complete) and reads a file once: a file is a finished split when read to the
  size it had when planned (SRC-33).  The names seen are in its snapshot, compressed.
* `JsonLinesReader`: a file's byte range [start, end) as JSON lines, parsed with `pyarrow.json`
  to the source's schema on the executors; `plan` ends a range at a line end, so a budget
  (`max_bytes_per_batch`) cuts a file between lines.  A line that is not JSON or does not fit the
  schema fails the read, naming the file and the line (never a silent drop).
"""

from __future__ import annotations

import base64
import io
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark.sources.flip27 import FifoEnumerator, Planned, Split, SplitReader

CHUNK = 8 << 20  # bytes parsed at a time: a range is read in chunks cut at line ends
SCAN = 64 << 10  # bytes read at a time looking for a line end


def _pack(names: list[str]) -> str:
    return base64.b64encode(zlib.compress("\n".join(names).encode(), 6)).decode("ascii")


def _unpack(text: str) -> list[str]:
    return zlib.decompress(base64.b64decode(text)).decode().split("\n") if text else []


def listed(directory: str) -> list[os.DirEntry[str]]:
    """The directory's data files: regular files whose names start with neither `.` nor `_`."""
    with os.scandir(directory) as entries:
        return [e for e in entries if e.is_file() and not e.name.startswith((".", "_"))]


class FileEnumerator(FifoEnumerator):
    """The files of `directory` as splits, first in first out (module docstring)."""

    def __init__(self, directory: str, snapshot: Any = None):
        super().__init__(snapshot)
        self.directory = directory
        self.known = set(_unpack((snapshot or {}).get("known", "")))

    def discover(self) -> None:
        """SRC-42: the files not seen before become splits from byte 0, oldest first."""
        try:
            entries = listed(self.directory)
        except FileNotFoundError:
            return  # not there yet: no files
        new = sorted((e for e in entries if e.name not in self.known),
                     key=lambda e: (e.stat().st_mtime_ns, e.name))
        self.known.update(e.name for e in new)
        self.add_splits([Split(e.name, 0) for e in new])

    def snapshot(self) -> Any:
        return {**super().snapshot(), "known": _pack(sorted(self.known))}


def line_end_after(fh: Any, at: int, size: int) -> int:
    """The position just after the first line end at or after byte `at` (`size` when none)."""
    fh.seek(at)
    while at < size:
        block = fh.read(min(SCAN, size - at))
        if not block:
            break
        i = block.find(b"\n")
        if i >= 0:
            return at + i + 1
        at += len(block)
    return size


class JsonLinesReader(SplitReader):
    """JSON lines of `directory`'s files, to `schema` (a StructType) with pyarrow (module docstring)."""

    def __init__(self, directory: str, schema: Any):
        self.directory = directory
        self.schema = schema
        self._arrow: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrow": None}

    def path(self, split: Split) -> Path:
        return Path(self.directory) / split.id

    def plan(self, split: Split, start: Any, budget: int | None) -> Planned:
        """Up to the file's size now, or the first line end after `budget` bytes; finished at the
        file's end.  A file gone since it was discovered is an error naming it."""
        path = self.path(split)
        try:
            size = path.stat().st_size
            if budget is None or size - start <= budget:
                end = size
            else:
                with open(path, "rb") as fh:
                    end = line_end_after(fh, start + budget - 1, size)  # at least one line
        except FileNotFoundError as e:
            raise FileNotFoundError(f"flip27: file {str(path)!r} (a split) was removed before it was "
                                    "read") from e
        return Planned(end, end - start, finished=end >= size)

    def arrow_schema(self) -> Any:
        if self._arrow is None:
            from pyspark.sql.pandas.types import to_arrow_schema

            self._arrow = to_arrow_schema(self.schema, timezone="UTC")
        return self._arrow

    def read(self, split: Split, start: Any, end: Any) -> Iterator[Any]:
        """SRC-39: the range's lines in order, as record batches of the schema."""
        path = self.path(split)
        with open(path, "rb") as fh:
            at = start
            while at < end:
                hi = end if end - at <= CHUNK else line_end_after(fh, at + CHUNK - 1, end)
                fh.seek(at)
                data = fh.read(hi - at)
                yield from self.parse(path, at, data)
                at = hi

    def parse(self, path: Path, at: int, data: bytes) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.json as pj

        if not data.strip():
            return
        schema = self.arrow_schema()
        try:
            table = pj.read_json(io.BytesIO(data),
                                 read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1),
                                 parse_options=pj.ParseOptions(explicit_schema=schema,
                                                               unexpected_field_behavior="ignore"))
            table = table.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise ValueError(f"flip27: {self.where(path, at, data)}: not a JSON object of the schema "
                             f"{self.schema.simpleString()}: {e}") from e
        yield from table.to_batches()

    @staticmethod
    def where(path: Path, at: int, data: bytes) -> str:
        """The file and line of the first line in `data` (read from byte `at`) that json cannot
        parse; the byte range when every line parses (then a value does not fit its column)."""
        with open(path, "rb") as fh:
            before = fh.read(at).count(b"\n")
        for no, line in enumerate(data.split(b"\n"), start=before + 1):
            if line.strip():
                try:
                    value = json.loads(line)
                except ValueError:
                    return f"{path} line {no}"
                if not isinstance(value, dict):
                    return f"{path} line {no}"
        return f"{path} bytes {at}..{at + len(data)}"
