"""The Arrow data of a client's write, decoded and fully validated before anything else
reads it: only the column types a table can take, every offset inside its buffer and
in order, every string valid UTF-8 (pyarrow's `validate(full=True)`).

Until it has passed, no other code may look at a value: a string offset pointing past
its buffer makes any read of that value (a cast, a comparison, `as_py`) read foreign
memory or crash the process, and once stored it would do so at every later read.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.errors import InvalidValueError, TooLarge, excerpt

# Columns one write may carry: a super table's 4096 columns and 128 tags, and tbname.
MAX_WRITE_COLUMNS = 4096 + 128 + 1
# Bytes a value of any fixed-width column type takes at most (BIGINT, DOUBLE, TIMESTAMP),
# and the offset a string takes beside its bytes.
_WIDEST_VALUE = 8


def decode(stream: bytes | bytearray, max_bytes: int) -> pa.Table:
    """The table an IPC stream (whose framing `ipc_check` passed) holds, validated, and
    at most `max_bytes` once decoded: a dictionary-encoded column repeats its values (one
    byte of index can stand for a 60 KB string) and a null-typed one declares rows
    without buffers, so a small payload could otherwise become gigabytes to store."""
    if not stream:
        return pa.table({})
    try:
        with pa.ipc.open_stream(pa.py_buffer(stream)) as reader:
            check_schema(reader.schema)
            batches, total = [], 0
            for batch in reader:
                batches.append(checked(batch))
                total += decoded_bytes(batch)
                if total > max_bytes:
                    raise TooLarge(
                        f"Write: the rows decode to more than {max_bytes} bytes (the server's "
                        "--max-write-bytes; dictionary-encoded and null columns count as "
                        "written out): send them in several writes; nothing was written"
                    )
            return pa.Table.from_batches(batches, schema=reader.schema)
    except pa.ArrowMemoryError:
        raise  # the error boundary answers TooLarge
    except (pa.ArrowException, OSError) as exc:  # pyarrow reports some IPC errors as OSError
        raise InvalidValueError(
            f"Write: the Arrow IPC stream is malformed: {_first(exc)}"
        ) from None


def decoded_bytes(batch: pa.RecordBatch) -> int:
    """An upper bound of the bytes `batch` takes once its columns are written out in the
    table's types (a validated batch: its buffers can be read)."""
    return sum(_column_bytes(column) for column in batch.columns)


def _column_bytes(column: pa.Array) -> int:
    rows = len(column)
    if pa.types.is_null(column.type):
        return rows * _WIDEST_VALUE  # converts to any column type: at most a BIGINT's 8
    if pa.types.is_dictionary(column.type):
        values = column.dictionary
        if not _variable(values.type):
            return rows * _width(values.type)
        lengths = pc.take(pc.binary_length(values), column.indices)
        return int(pc.sum(lengths).as_py() or 0) + rows * _WIDEST_VALUE
    return int(column.nbytes)


def _variable(type_: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_string(type_) or t.is_large_string(type_) or t.is_binary(type_)
        or t.is_large_binary(type_) or t.is_string_view(type_) or t.is_binary_view(type_)
    )  # fmt: skip


def _width(type_: pa.DataType) -> int:
    return max(int(type_.bit_width) // 8, 1)


def check_table(table: pa.Table) -> None:
    """InvalidValueError unless `table` passes what `decode` checks."""
    check_schema(table.schema)
    for batch in table.to_batches():
        checked(batch)


def check_schema(schema: pa.Schema) -> None:
    """InvalidValueError naming the first column whose type no table column can take."""
    if len(schema) > MAX_WRITE_COLUMNS:
        raise InvalidValueError(
            f"Write: {len(schema)} columns; a write carries at most {MAX_WRITE_COLUMNS}"
        )
    for i in range(len(schema)):
        try:
            field = schema.field(i)
            field.name  # noqa: B018  (names are bytes on the wire: decoding may fail)
        except UnicodeDecodeError:
            raise InvalidValueError(
                f"Write: the name of column {i + 1} is not valid UTF-8"
            ) from None
        if not _accepted(field.type):
            raise InvalidValueError(
                f"Write: column {excerpt(field.name)} has Arrow type {field.type}, which no "
                "table column takes: send booleans, integers, floats, decimals, timestamps, "
                "dates, strings or binaries (plain or dictionary-encoded)"
            )


def checked(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` once every column passed full validation (offsets, UTF-8, lengths)."""
    for i, column in enumerate(batch.columns):
        try:
            column.validate()  # the buffers' sizes first: full validation relies on them
            column.validate(full=True)
        except pa.ArrowInvalid as exc:
            name = excerpt(batch.schema.field(i).name)
            raise InvalidValueError(
                f"Write: column {name} holds invalid Arrow data ({_first(exc)}): the "
                "payload was damaged or built by hand; nothing was written"
            ) from None
    try:
        batch.validate()  # every column as long as the batch
    except pa.ArrowInvalid as exc:
        raise InvalidValueError(f"Write: invalid Arrow data: {_first(exc)}") from None
    return batch


def _accepted(type_: pa.DataType) -> bool:
    t = pa.types
    if t.is_dictionary(type_):
        return t.is_integer(type_.index_type) and _scalar(type_.value_type)
    return _scalar(type_)


def _scalar(type_: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_null(type_) or t.is_boolean(type_) or t.is_integer(type_)
        or t.is_floating(type_) or t.is_decimal(type_) or t.is_timestamp(type_)
        or t.is_date(type_) or t.is_string(type_) or t.is_large_string(type_)
        or t.is_binary(type_) or t.is_large_binary(type_) or t.is_fixed_size_binary(type_)
        or t.is_string_view(type_) or t.is_binary_view(type_)
    )  # fmt: skip


def _first(exc: Exception) -> str:
    """The first line of pyarrow's message, bounded: it can quote data."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "…"
