"""The partition of a parameterized topic's rows among its bindings.

A vnode evaluates a parameterized topic's shared form (sql/topic/params.py) once per
batch, whatever the number of its bindings; `Partitioner.split` then sends each row of
the result to every binding it matches. The work is pyarrow compute over whole columns,
never a Python loop per row or over all bindings:

1. each parameter column's distinct values in the batch (a vnode's tags and `tbname`
   are one dictionary constant per WAL entry: only those are hashed), each looked up
   among the bound values (a Python dict while there are few of them, else
   `pc.index_in`): a code per row, null where no binding has the value;
2. the candidate bindings of each row from the parameter with the fewest bindings per
   value (one `take`, or list arrays when values are shared), kept when they also bound
   the row's value of every other parameter (an equality per candidate for `=`, a set
   lookup of the distinct (binding, value) pairs for IN);
3. one stable sort by binding, one `take` of the rows, and a zero-copy slice per binding
   that receives rows (the only Python loop).

A bound value matches exactly where the topic with that value written as a literal
would: NULL never matches, a FLOAT column compares in DOUBLE (as a decimal literal
does), -0.0 equals 0.0, a TIMESTAMP compares in the database precision.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.sql.model import Param, Topic
from sqltopic.sql.topic.params import Binding, hidden_name

# Distinct values (or distinct candidate pairs) up to which a batch looks them up in a
# Python dict or set (~0.1 us each) rather than with pc.index_in / pc.is_in, which hash
# every bound value again on each call (~50 us per 1,000 of them).
PY_LOOKUP_MAX = 256
# A result whose parameter columns are one constant per chunk (a vnode's tags and
# tbname: one per run of a table's rows in a WAL entry), in at most RUN_CHUNKS_MAX
# chunks with at most RUN_CANDIDATES_MAX candidate bindings over them, is split in
# Python, chunk by chunk, into zero-copy slices: a look-up per chunk instead of a dozen
# compute kernels of ~5-10 us each, which cost more than the few rows of a live write.
RUN_CHUNKS_MAX = 64
RUN_CANDIDATES_MAX = 4096


@dataclass(frozen=True, slots=True)
class _Index:
    """One parameter over a set of bindings: its distinct bound values, and which
    bindings bound each."""

    param: Param
    values: pa.Array  # the distinct bound values, in the lookup type
    position: dict[Any, int]  # value -> its index in `values` (its code)
    bindings_of: pa.ListArray  # per code: the bindings that bound it, ascending
    of: tuple[tuple[int, ...], ...]  # the same, in Python
    owner: pa.Array | None  # per code: its one binding, when no two bindings share one
    single: pa.Array | None  # per binding: its one code (a `=` parameter)
    single_codes: tuple[int, ...] | None  # the same, in Python
    pair_set: frozenset[int]  # binding * len(values) + code, for every code bound
    pairs: pa.Array  # the same, as an array
    fanout: float  # bindings per value: the smallest goes first


class Partitioner:
    """The rows of one evaluation of a parameterized topic's shared form, split among
    its bindings. Build one per set of bindings (linear in them); `split` then costs
    work in the batch's rows and in the rows delivered, hardly in the bindings."""

    def __init__(
        self, topic: Topic, bindings: Sequence[Binding], schema: pa.Schema | None = None
    ) -> None:
        """`schema`: the output's (default `topic.output_schema`). ValueError for a
        topic without parameters or a binding of another topic."""
        if not topic.params:
            raise ValueError(f"topic {topic.name!r} has no parameters")
        names = tuple(p.name for p in topic.params)
        for binding in bindings:
            if binding.topic != topic.name or binding.names != names:
                raise ValueError(f"binding {binding.key} is not one of topic {topic.name!r}")
        self.topic = topic
        self.count = len(bindings)
        self.schema = schema if schema is not None else topic.output_schema
        self._outputs = len(topic.output)
        indexes = [_index(p, [b.values[i] for b in bindings]) for i, p in enumerate(topic.params)]
        self._indexes = sorted(indexes, key=lambda ix: ix.fanout)

    def split(self, result: pa.Table) -> dict[int, pa.Table]:
        """Binding index -> its rows of `result` (the shared form's output, as
        `topic.select_sql` gives it), in order, in the output schema; bindings without
        rows are left out."""
        if result.num_rows == 0 or self.count == 0:
            return {}
        by_runs = self._by_runs(result)
        if by_runs is not None:
            return by_runs
        codes = [self._codes(result, ix) for ix in self._indexes]
        found = _matches(self._indexes, codes)
        if found is None:
            return {}
        binding, row = found
        data = _plain(result.select(list(range(self._outputs))), self.schema).take(row)
        runs = pc.run_end_encode(binding)
        out: dict[int, pa.Table] = {}
        start = 0
        for index, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
            out[index] = data.slice(start, end - start)
            start = end
        return out

    def _by_runs(self, result: pa.Table) -> dict[int, pa.Table] | None:
        """The split of a result whose parameter columns are each one constant per chunk
        (dictionary chunks of one value, looked up as they are), chunked alike,
        in at most RUN_CHUNKS_MAX chunks: each chunk's values looked up once, and each
        binding's rows as slices of the result. None when the result is not like that
        (or has too many candidates): the vectorised split takes it."""
        lengths: list[int] | None = None
        codes: list[list[int | None]] = []
        for ix in self._indexes:
            name = hidden_name(ix.param.name)
            if name not in result.column_names:
                return None  # the vectorised split says what is wrong
            column = result.column(name)
            if not _looked_up_as_is(column.type, ix.param) or column.num_chunks > RUN_CHUNKS_MAX:
                return None
            chunks = column.chunks
            if any(len(c.dictionary) != 1 or c.null_count for c in chunks):
                return None
            sizes = [len(c) for c in chunks]
            if lengths is not None and sizes != lengths:
                return None
            lengths = sizes
            codes.append([ix.position.get(c.dictionary[0].as_py()) for c in chunks])
        assert lengths is not None
        segments = _segments(self._indexes, codes, lengths)
        if segments is None:
            return None
        data = result.select(list(range(self._outputs)))
        out: dict[int, pa.Table] = {}
        for binding in sorted(segments):
            parts = [data.slice(start, size) for start, size in segments[binding]]
            out[binding] = _plain(parts[0] if len(parts) == 1 else pa.concat_tables(parts),
                                  self.schema)  # fmt: skip
        return out

    def _codes(self, result: pa.Table, ix: _Index) -> pa.Array:
        """Per row, the code of its value among the bound ones (null: none, or NULL)."""
        name = hidden_name(ix.param.name)
        if name not in result.column_names:
            raise ValueError(
                f"the result has no column {name!r}: evaluate topic {self.topic.name!r}'s "
                "select_sql (its shared form)"
            )
        distinct, index = _distinct(_lookup(result.column(name), ix.param))
        if len(distinct) <= PY_LOOKUP_MAX:
            codes = pa.array([ix.position.get(v) for v in distinct.to_pylist()], pa.int32())
        else:
            codes = pc.index_in(distinct, value_set=ix.values)
        return codes.take(index)


def _matches(indexes: list[_Index], codes: list[pa.Array]) -> tuple[pa.Array, pa.Array] | None:
    """The (binding, row) pairs where every parameter matches, sorted by binding, then
    row; None when there are none."""
    valid = codes[0].is_valid()
    for more in codes[1:]:
        valid = pc.and_(valid, more.is_valid())
    at = pc.indices_nonzero(valid).cast(pa.int64())
    if len(at) == 0:
        return None
    # the bindings of the first (most selective) parameter's value are candidates ...
    first, code = indexes[0], codes[0].take(at)
    if first.owner is not None:
        binding, row = first.owner.take(code), at
    else:
        lists = first.bindings_of.take(code)
        binding, row = pc.list_flatten(lists), at.take(pc.list_parent_indices(lists))
    # ... kept when they bound the row's value of every other parameter too
    for ix, more in zip(indexes[1:], codes[1:], strict=True):
        keep = _bound(ix, binding, more.take(row))
        binding, row = binding.filter(keep), row.filter(keep)
    if len(binding) == 0:
        return None
    order = pc.sort_indices(binding)  # stable: each binding's rows stay in order
    return binding.take(order), row.take(order)


def _segments(
    indexes: list[_Index], codes: list[list[int | None]], lengths: list[int]
) -> dict[int, list[tuple[int, int]]] | None:
    """Per binding, its (start, size) runs of rows, merged where adjacent: chunk k of
    `lengths[k]` rows has code `codes[i][k]` of parameter `indexes[i]` (None: no binding
    has its value). None past RUN_CANDIDATES_MAX candidate bindings."""
    out: dict[int, list[tuple[int, int]]] = {}
    start = candidates = 0
    first, rest = indexes[0], indexes[1:]
    for k, size in enumerate(lengths):
        chunk = [per_param[k] for per_param in codes]
        if size and None not in chunk:
            found = first.of[cast(int, chunk[0])]
            candidates += len(found)
            if candidates > RUN_CANDIDATES_MAX:
                return None
            for binding in found:
                if all(_binds(ix, binding, cast(int, code))
                       for ix, code in zip(rest, chunk[1:], strict=True)):  # fmt: skip
                    runs = out.setdefault(binding, [])
                    if runs and sum(runs[-1]) == start:
                        runs[-1] = (runs[-1][0], runs[-1][1] + size)
                    else:
                        runs.append((start, size))
        start += size
    return out


def _binds(ix: _Index, binding: int, code: int) -> bool:
    """Did `binding` bind value `code` of this parameter?"""
    if ix.single_codes is not None:
        return ix.single_codes[binding] == code
    return binding * len(ix.values) + code in ix.pair_set


def _bound(ix: _Index, binding: pa.Array, code: pa.Array) -> pa.Array:
    """Per candidate: did `binding` bind value `code` of this parameter?"""
    if ix.single is not None:
        return pc.equal(ix.single.take(binding), code)
    pair = pc.add(pc.multiply(binding, len(ix.values)), code.cast(pa.int64()))
    encoded = pc.dictionary_encode(pair)
    if len(encoded.dictionary) > PY_LOOKUP_MAX:
        return pc.is_in(pair, value_set=ix.pairs)
    found = [p in ix.pair_set for p in encoded.dictionary.to_pylist()]
    return pa.array(found, pa.bool_()).take(encoded.indices)


def _distinct(column: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """The distinct values of a column, and each row's index among them. A vnode's tags
    and tbname are dictionary chunks (one constant per WAL entry): their dictionaries
    are all the values there are, so only those are hashed, not the rows."""
    if not pa.types.is_dictionary(column.type):
        encoded = pc.dictionary_encode(column.combine_chunks())
        return encoded.dictionary, encoded.indices
    chunks = column.chunks
    encoded = pc.dictionary_encode(pa.concat_arrays([c.dictionary for c in chunks]))
    sizes = [len(c.dictionary) for c in chunks]
    chunk = _chunk_of_rows([len(c) for c in chunks])
    if all(size == 1 and c.null_count == 0 for size, c in zip(sizes, chunks, strict=True)):
        # constants: chunk k's rows are all value k
        return encoded.dictionary, encoded.indices.take(chunk)
    starts = pa.array(list(itertools.accumulate(sizes, initial=0))[:-1], pa.int64())
    rows = pc.add(
        pa.concat_arrays([c.indices for c in chunks]).cast(pa.int64()), starts.take(chunk)
    )
    return encoded.dictionary, encoded.indices.take(rows)


def _chunk_of_rows(lengths: list[int]) -> pa.Array:
    """Each row's chunk number, for chunks of `lengths` rows: the parents of a list
    array with those lengths (pyarrow has no cheaper vectorised repeat)."""
    offsets = pa.array(itertools.accumulate(lengths, initial=0), pa.int32())
    lists = pa.ListArray.from_arrays(offsets, pa.nulls(sum(lengths), pa.int8()))
    return pc.list_parent_indices(lists)


def _plain(data: pa.Table, schema: pa.Schema | None) -> pa.Table:
    """`data` in `schema`, or with dictionaries decoded: a take over chunks whose
    dictionaries differ (a tag per WAL entry) cannot unify dictionaries holding NULL."""
    if schema is not None:
        return data if data.schema.equals(schema) else data.cast(schema)
    fields = [
        pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f
        for f in data.schema
    ]
    return data.cast(pa.schema(fields))


def _index(param: Param, bound: list[tuple[Any, ...]]) -> _Index:
    """The index of one parameter over the bindings' values (`bound[b]`: binding b's)."""
    distinct = sorted({v for values in bound for v in values})
    position = {v: i for i, v in enumerate(distinct)}
    of: list[list[int]] = [[] for _ in distinct]
    pairs: list[int] = []
    for b, values in enumerate(bound):
        for v in values:
            of[position[v]].append(b)
            pairs.append(b * len(distinct) + position[v])
    owned = all(len(bindings) == 1 for bindings in of)
    single = [position[v[0]] for v in bound] if param.op == "=" else None
    return _Index(
        param=param,
        values=pa.array(distinct, _lookup_type(param)),
        position=position,
        bindings_of=pa.array(of, pa.list_(pa.int64())),
        of=tuple(tuple(bindings) for bindings in of),
        owner=pa.array([b[0] for b in of], pa.int64()) if owned else None,
        single=pa.array(single, pa.int32()) if single is not None else None,
        single_codes=tuple(single) if single is not None else None,
        pair_set=frozenset(pairs),
        pairs=pa.array(pairs, pa.int64()),
        fanout=len(pairs) / max(len(distinct), 1),
    )


def _lookup_type(p: Param) -> pa.DataType:
    """The type a parameter's column is compared in: a FLOAT in DOUBLE (as a decimal
    literal compares), a TIMESTAMP as its integer ticks."""
    if p.type.is_float:
        return pa.float64()
    if p.type.name == "TIMESTAMP":
        return pa.int64()
    return p.type.arrow(p.precision)


def _looked_up_as_is(kind: pa.DataType, p: Param) -> bool:
    """Whether a hidden column of type `kind` is looked up as it is: dictionaries of the
    lookup type, their values compared without a cast (not FLOAT: -0.0 must be 0.0)."""
    return (
        pa.types.is_dictionary(kind) and kind.value_type == _lookup_type(p) and not p.type.is_float
    )


def _lookup(column: pa.ChunkedArray, p: Param) -> pa.ChunkedArray:
    """A hidden column in its lookup type (dictionaries of that type kept: looking up
    only their values is cheaper)."""
    if _looked_up_as_is(column.type, p):
        return column
    target = _lookup_type(p)
    kind = column.type
    if p.type.name == "TIMESTAMP":
        return pc.cast(pc.cast(column, pa.timestamp(p.precision)), target)
    column = column if kind == target else pc.cast(column, target)
    return pc.add(column, 0.0) if p.type.is_float else column  # -0.0 is 0.0
