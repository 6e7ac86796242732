"""FLIP-27 sources for Spark Structured Streaming (the Python data source API), and an exactly-once sink.

The public API a Spark user calls:

    from flink_semantics.adapters.pyspark.sources.api import Flip27Source, IdempotentSink, flip27_options

    spark.dataSource.register(Flip27Source)
    df = (spark.readStream.format("flip27").options(**flip27_options("/data/in", readers=2))
          .schema("id long, name string").load())           # every JSON-lines file of /data/in
    q = (df.writeStream.foreachBatch(IdempotentSink("/data/out"))
         .option("checkpointLocation", "/data/ckpt").start())
    ...
    IdempotentSink.read(spark, "/data/out", "/data/ckpt")    # the committed micro-batches' rows

* `Flip27Source` (format `flip27`) is the built-in file source: each file of the directory
  `path` is a split (its position a byte offset), new files are discovered as new splits while the
  query runs, and the readers read them on the executors as JSON lines to the schema given with
  `.schema(...)` (files.py).  Options (`flip27_options` builds and checks them): `path`
  (required), `format` (`json`, the default), `readers` (the parallelism, default 2: fixed for a
  checkpoint's life, reader r is Spark partition r), `max_bytes_per_batch` (what each reader reads
  per micro-batch at most, cut at a line end; default: all there is).  Files must appear complete
  (write them under a name starting with `.` or `_`, then rename them), as for Spark's file source.
* Your own source: subclass `SplitSource` with a `SplitEnumerator` and a `SplitReader` of yours
  (flip27.py, which also says how FLIP-27 maps onto Spark's micro-batches and what Spark's model
  changes).  The enumerator's state and the readers' positions are in Spark's offset log: each
  micro-batch's offset is a checkpoint.
* `IdempotentSink`, for `foreachBatch`: batch N's rows are written by the executors to
  `<directory>/batch=N` (parquet), replacing what an earlier run of batch N wrote; the batches
  in the checkpoint's commit log are the committed output, each row exactly once across failures
  and restarts (SRC-38).

`read_files(spark, path, schema, ...)` is the same in one call (it registers the source and loads it).

Bad or missing options are a ValueError naming the option: from `flip27_options` and `read_files`
at once, before any query starts.  Options given one by one to `format("flip27")` are checked when
Spark creates the source: at `load()` without a schema (the source's `schema()` says a schema is
needed); with one, Spark creates a Python data source only once the query runs, so the query fails
at its start with the ValueError's message in its StreamingQueryException (Spark 4.3 calls no
Python code of the source in `load()` when it is given a schema).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flink_semantics.adapters.pyspark.sources.files import FileEnumerator, JsonLinesReader
from flink_semantics.adapters.pyspark.sources.flip27 import (
    DEFAULT_READERS,
    FifoEnumerator,
    Planned,
    Split,
    SplitEnumerator,
    SplitReader,
    SplitSource,
    positive_int_option,
)

__all__ = ["FORMAT", "FifoEnumerator", "Flip27Source", "IdempotentSink", "Planned", "Split",
           "SplitEnumerator", "SplitReader", "SplitSource", "flip27_options", "read_files"]

FORMAT = "flip27"
FORMATS = ("json",)


def flip27_options(path: str | Path, format: str = "json", readers: int = DEFAULT_READERS,
                   max_bytes_per_batch: int | None = None) -> dict[str, str]:
    """The options of `format("flip27")` (the module's docstring), checked: a ValueError naming
    the parameter on bad input."""
    options = {"path": str(path), "format": format, "readers": str(readers)}
    for name, value in (("readers", readers), ("max_bytes_per_batch", max_bytes_per_batch)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"option {name!r} must be an int, not {value!r}")
    if max_bytes_per_batch is not None:
        options["max_bytes_per_batch"] = str(max_bytes_per_batch)
    check_file_options(options)
    return options


def check_file_options(options: Mapping[str, str]) -> None:
    """A ValueError naming the first bad or missing option of the file source."""
    path = options.get("path")
    if not path:
        raise ValueError("option 'path' is missing: the directory whose files flip27 reads "
                         "(spark.readStream.format('flip27').option('path', dir))")
    fmt = options.get("format", "json")
    if fmt not in FORMATS:
        raise ValueError(f"option 'format' must be one of {', '.join(FORMATS)}, not {fmt!r}")
    positive_int_option(options, "readers", DEFAULT_READERS)
    positive_int_option(options, "max_bytes_per_batch", None)
    if Path(path).exists() and not Path(path).is_dir():
        raise ValueError(f"option 'path' must be a directory, not the file {path!r}")


def read_files(spark: Any, path: str | Path, schema: Any, format: str = "json",
               readers: int = DEFAULT_READERS, max_bytes_per_batch: int | None = None) -> Any:
    """The streaming DataFrame of the files of `path` (the file source, its options as
    `flip27_options`'s), `schema` a DDL string or StructType: registers `Flip27Source` in the
    session (format `flip27`) and loads it.  A ValueError naming the parameter on bad input, here,
    before any query."""
    options = flip27_options(path, format, readers, max_bytes_per_batch)
    if not schema:
        raise ValueError("schema is missing: the file source reads to a given schema "
                         "(e.g. 'id long, name string')")
    spark.dataSource.register(Flip27Source)
    return spark.readStream.format(FORMAT).options(**options).schema(schema).load()


class Flip27Source(SplitSource):
    """The file source, `spark.readStream.format("flip27").option("path", dir).schema(...).load()`:
    each file of `dir` a split, discovered while the query runs, read as JSON lines on the
    executors (the module's docstring; files.py).  Follows SRC-6, SRC-8, SRC-12, SRC-15, SRC-16,
    SRC-17, SRC-33, SRC-38, SRC-39, SRC-42 (flip27.py maps each to Spark)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def check_options(self) -> None:
        check_file_options(self.options)

    def schema(self) -> str:
        raise ValueError("flip27 needs the schema of its records: spark.readStream.format('flip27')"
                         ".schema('id long, name string') (the file source does not infer one)")

    def budget(self) -> int | None:
        return positive_int_option(self.options, "max_bytes_per_batch", None)

    def create_enumerator(self, snapshot: Any) -> SplitEnumerator:
        return FileEnumerator(self.options["path"], snapshot)

    def create_reader(self, schema: Any) -> SplitReader:
        return JsonLinesReader(self.options["path"], schema)


# --------------------------------------------------------------------------
# The sink
# --------------------------------------------------------------------------


class IdempotentSink:
    """`foreachBatch(IdempotentSink(directory))`: batch N's rows go to `<directory>/batch=N` as
    parquet, written by the executors (`mode("overwrite")`: a replayed batch replaces its earlier
    output, SRC-38); only the batches the checkpoint's commit log confirms count
    (`IdempotentSink.read`, `committed_batches`).  A batch is in the commit log only after this
    call returned, so a batch whose write was cut short is run again and written whole.

    `after_write(batch_id)`: called after the batch is written and before Spark commits it (a hook
    for the caller, e.g. to fail the query there in a drill); default none."""

    def __init__(self, directory: str | Path, after_write: Callable[[int], None] | None = None):
        self.dir = str(directory)
        self.after_write = after_write

    def __call__(self, df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(batch_path(self.dir, batch_id))
        if self.after_write is not None:
            self.after_write(batch_id)

    @staticmethod
    def read(spark: Any, directory: str | Path, checkpoint: str | Path) -> Any:
        """The committed output as a DataFrame, with the column `batch`; None when no batch
        committed yet."""
        batches = committed_batches(directory, checkpoint)
        if not batches:
            return None
        return spark.read.option("basePath", str(directory)).parquet(
            *(batch_path(directory, n) for n in batches))


def batch_path(directory: str | Path, batch_id: int) -> str:
    return str(Path(directory) / f"batch={batch_id}")


def last_committed(checkpoint: str | Path) -> int:
    """The last batch in the checkpoint's commit log, -1 when none (batches commit in order;
    Spark purges the log's oldest entries)."""
    commits = Path(checkpoint) / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []
    return max(done, default=-1)


def committed_batches(directory: str | Path, checkpoint: str | Path) -> list[int]:
    """The batch ids the sink wrote that the checkpoint's commit log confirms, in order."""
    last, out = last_committed(checkpoint), Path(directory)
    found = [p.name[len("batch="):] for p in out.glob("batch=*")] if out.exists() else []
    return sorted(int(n) for n in found if n.isdigit() and int(n) <= last)
