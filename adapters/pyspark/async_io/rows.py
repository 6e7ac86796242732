"""Row mode of `async_map`: the function's arguments from the input row, its results as typed
columns next to the row's own columns, the error output.

The input row itself never goes through Python: the Arrow batches of the task are kept until every
row of theirs has left the operator, and the output takes its rows from them (`pyarrow.Table.take`).
Only the function's argument columns are converted to Python values, and only the results back.

Standard library at import time (pyarrow is imported inside the functions that need it): the module
runs inside Spark's Python workers and is imported by the driver.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

DESCRIBE_LIMIT = 300  # characters of a row's description in an error message


class InputRow:
    """A record's value in row mode: its row's number in the task and the function's arguments."""

    __slots__ = ("args", "index", "names")

    def __init__(self, index: int, args: tuple, names: Sequence[str] | None):
        self.index = index
        self.args = args
        self.names = names  # the argument columns; None: args is (the whole row as a dict,)

    def describe(self) -> str:
        """The row's identity in an error message: its argument columns and their values."""
        pairs = self.args[0].items() if self.names is None else zip(self.names, self.args)
        text = ", ".join(f"{k}={v!r}" for k, v in pairs)
        return text if len(text) <= DESCRIBE_LIMIT else text[:DESCRIBE_LIMIT] + "..."

    def __repr__(self) -> str:
        return f"row({self.describe()})"


def describe(value: Any) -> str:
    """A stream element in an error message: an input row's columns, or a value's repr."""
    return f"the row {value.describe()}" if isinstance(value, InputRow) else f"the stream element {value!r}"


def error_text(reason: str, error: BaseException | None) -> str:
    """`TypeName: message` of a failure (the user's own exception, or the operator's)."""
    if error is None:
        return "the async function returned None, not a list (AIO-20)" if reason == "null_result" else reason
    return f"{type(error).__name__}: {error}"


class Failed:
    """The result of a record that failed after its retries, in the error output."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def error_result(reason: str, error: BaseException | None) -> list:
    """OperatorConfig.error_result of async_map's error output: one output row, the error's text."""
    return [Failed(error_text(reason, error))]


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------

# An empty result with `outer=True`: one output row whose results are null.  A result of the
# function is always a tuple after `normalize`, so a None item is never one of its results.
OUTER_EMPTY: tuple[None] = (None,)


def outer_predicate(result: list, *, predicate: Callable[[list], bool]) -> bool:
    """A retry strategy's result predicate with `outer=True`: OUTER_EMPTY is the empty result."""
    return predicate([] if result == list(OUTER_EMPTY) else result)


def normalize(result: Any, names: Sequence[str], outer: bool = False) -> Any:
    """The function's list of results as tuples of column values (TypeError naming the shape).

    One result column: a result is the column's value.  Several: a tuple (or list, or Row) of one
    value per column, or a dict by column name (a missing name is null).  A non-list (None
    included) is left to the operator, which refuses it (AIO-20).  With `outer` no results is
    OUTER_EMPTY: one output row with null results.
    """
    if not isinstance(result, (list, tuple)):
        return result
    if outer and not result:
        return list(OUTER_EMPTY)
    if len(names) == 1:
        return [(r,) for r in result]
    return [_columns(r, names) for r in result]


def _columns(r: Any, names: Sequence[str]) -> tuple:
    if isinstance(r, dict):
        unknown = [k for k in r if k not in names]
        if unknown:
            raise TypeError(f"async_map: a result has the keys {unknown}, not result columns {list(names)}")
        return tuple(r.get(n) for n in names)
    if isinstance(r, (tuple, list)) and len(r) == len(names):
        return tuple(r)
    raise TypeError(f"async_map: a result must be a tuple of {len(names)} values ({', '.join(names)}) "
                    f"or a dict of them, not {r!r}")


async def call_row(row: InputRow, *, fn: Callable[..., Coroutine[Any, Any, Any]],
                   names: Sequence[str], outer: bool) -> Any:
    """The user's function on a row's arguments; its results as column tuples."""
    return normalize(await fn(*row.args), names, outer)


def row_timeout(row: InputRow, *, handler: Callable[..., Any], names: Sequence[str], outer: bool) -> Any:
    """A timeout handler of row mode: called with the row's arguments, as the function is."""
    return normalize(handler(*row.args), names, outer)


# --------------------------------------------------------------------------
# Input rows kept for the output
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RowSpec:
    """What a row-mode task needs: the argument columns (None: the whole row), the result columns
    and their Arrow types, the error column (None: failures fail the task), whether a row with no
    results comes out once with null results (`outer`)."""

    columns: tuple[str, ...] | None
    names: tuple[str, ...]
    types: tuple[Any, ...]
    error_col: str | None
    outer: bool = False


def input_rows(batches: Iterator[Any], spec: RowSpec, kind_col: str | None, group_col: str | None,
               kept: KeptInput) -> Iterator[tuple[Any, tuple[str, None, InputRow, None]]]:
    """(group, (kind, ts, value, at)) rows of the task's batches, each batch kept for the output."""
    offset = 0
    for b in batches:
        n = b.num_rows
        kept.add(offset, b)
        if spec.columns is None:
            args: Sequence[tuple] = [(r,) for r in b.to_pylist()]
        elif spec.columns:
            args = list(zip(*(b.column(c).to_pylist() for c in spec.columns)))
        else:
            args = [()] * n
        kinds = b.column(kind_col).to_pylist() if kind_col else ["R"] * n
        groups = b.column(group_col).to_pylist() if group_col else [None] * n
        for i in range(n):
            kept.next = offset + i + 1  # the rows from here on are not in an operator yet
            yield groups[i], (kinds[i], None, InputRow(offset + i, args[i], spec.columns), None)
        offset += n


class KeptInput:
    """The task's input batches from the lowest row still in an operator on."""

    def __init__(self) -> None:
        self.batches: deque[tuple[int, Any]] = deque()
        self.next = 0  # the number of the next row to go into an operator

    def add(self, offset: int, batch: Any) -> None:
        if batch.num_rows:
            self.batches.append((offset, batch))

    def release(self, lowest: int) -> None:
        """Rows below `lowest` will never be output again."""
        while self.batches and self.batches[0][0] + self.batches[0][1].num_rows <= lowest:
            self.batches.popleft()

    def take(self, indices: list[int]) -> Any:
        import pyarrow as pa

        base = self.batches[0][0]
        table = pa.Table.from_batches([b for _, b in self.batches])
        return table.take(pa.array([i - base for i in indices], pa.int64()))


class IndexedOutput:
    """A group's output in row mode: (input row, column tuple | Failed | None) per output row.

    A W or S row comes out as its own input row with null results, in its place in the stream; the
    operator's watermark and status notifications carry no row, so the rows wait in FIFOs (a
    group's watermarks, and its statuses, leave in input order: AIO-12, AIO-13, AIO-51).
    """

    def __init__(self, group: Any, loop: Any, audit: bool) -> None:
        self.rows: list[tuple[InputRow, Any]] = []
        self.pending: dict[str, deque[InputRow]] = {"W": deque(), "S": deque()}

    def emit(self, record: Any, value: Any) -> None:
        self.rows.append((record.value, value))

    def control(self, kind: str, value: InputRow) -> None:
        self.pending[kind].append(value)

    def watermark(self, timestamp: int) -> None:
        self.rows.append((self.pending["W"].popleft(), None))

    def status(self, idle: bool) -> None:
        self.rows.append((self.pending["S"].popleft(), None))

    def invoked(self, record: Any, attempt: int) -> None:
        pass

    def timed_out(self, record: Any) -> None:
        pass

    def checkpoint(self, id: int, snapshot: list) -> None:
        pass

    def failed(self, record: Any, reason: str, error: BaseException | None) -> None:
        pass

    def finished(self) -> None:
        pass

    def take(self) -> list[tuple[InputRow, Any]]:
        out, self.rows = self.rows, []
        return out


def lowest_waiting(groups: Any, next_index: int) -> int:
    """The lowest row number still in a live operator (input buffer, channel, queue, a W or S row
    not yet out), or `next_index` (the next row to go in) when none is."""
    lowest = next_index
    for g in groups:
        op = g.op
        if not op.alive:
            continue
        if g.buffer:
            lowest = min(lowest, g.buffer[0][2].index)
        for pending in g.output.pending.values():
            if pending:
                lowest = min(lowest, pending[0].index)
        for el in list(op.channel) + [e.element for e in op.queue.values()]:
            value = getattr(el, "value", None)
            if isinstance(value, InputRow):
                lowest = min(lowest, value.index)
    return lowest


def output_table(chunk: list[tuple[InputRow, Any]], kept: KeptInput, spec: RowSpec) -> Any:
    """The output rows of a chunk: each input row as it came, then the result and error columns."""
    import pyarrow as pa

    taken = kept.take([row.index for row, _ in chunk])
    values = [v for _, v in chunk]
    arrays = list(taken.columns)
    fields = list(taken.schema)
    for j, (name, typ) in enumerate(zip(spec.names, spec.types)):
        column = [v[j] if isinstance(v, tuple) else None for v in values]
        arrays.append(_arrow_column(column, typ, name, chunk))
        fields.append(pa.field(name, typ))
    if spec.error_col is not None:
        arrays.append(pa.array([v.text if isinstance(v, Failed) else None for v in values], pa.string()))
        fields.append(pa.field(spec.error_col, pa.string()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields)).combine_chunks()


class ResultTypeError(TypeError):
    """A result value does not fit its declared column type."""


def _arrow_column(column: list, typ: Any, name: str, chunk: list[tuple[InputRow, Any]]) -> Any:
    import pyarrow as pa

    try:
        return pa.array(column, typ)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        for (row, _), value in zip(chunk, column):
            try:
                pa.array([value], typ)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
                raise ResultTypeError(f"async_map: the result column {name!r} ({typ}) of the row "
                                      f"{row.describe()}: cannot hold {value!r}: {type(e).__name__}: {e}"
                                      ) from e
        raise
