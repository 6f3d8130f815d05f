"""A second evaluator for the simplest query topics: pyarrow compute instead of DuckDB.

DuckDB costs ~1 ms per query however few its rows, and a consumer that keeps up with
its producers reads one or a few new rows per poll: that fixed cost is then the whole
cost of a message. pyarrow's compute functions take microseconds. This module runs a
compiled topic (`Topic.select_sql`) with pyarrow when it is made only of

* output columns that are plain column references (`"col" AS "name"`), and
* a WHERE of comparisons (=, <>, <, <=, >, >=, BETWEEN, IN over literals) between columns
  and numeric, string or boolean literals, IS [NOT] NULL, boolean columns, and AND, OR,
  NOT, parentheses,

over integer, floating-point, string and boolean columns. Its results equal DuckDB's
(tests/sql/test_arrow_eval.py checks them against DuckDB on generated data): three-valued
logic, NULL rows dropped by the filter, comparisons in the type DuckDB uses (an integer
literal meets a FLOAT column as a FLOAT). Where pyarrow would differ, it does not run:
`run` answers None when a compared float column holds NaN (DuckDB orders NaN above every
number, IEEE does not) or a type is not one it knows, and the caller uses DuckDB.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

Family = Literal["int", "float", "string", "bool"]

# sqlglot comparison nodes → pyarrow compute functions
_COMPARE: dict[type[exp.Expr], str] = {
    exp.EQ: "equal", exp.NEQ: "not_equal", exp.GT: "greater", exp.GTE: "greater_equal",
    exp.LT: "less", exp.LTE: "less_equal",
}  # fmt: skip


class Unsupported(Exception):
    """The topic (or this batch) uses something this evaluator does not do exactly."""


@dataclass(frozen=True)
class Col:
    name: str


@dataclass(frozen=True)
class Lit:
    value: int | float | str | bool
    family: Family


@dataclass(frozen=True)
class Cmp:
    op: str
    left: Col | Lit
    right: Col | Lit


@dataclass(frozen=True)
class Logic:
    op: Literal["and", "or", "not", "is_null", "truth"]
    args: tuple[Cond, ...] | tuple[Col]


Cond = Cmp | Logic


@dataclass(frozen=True)
class ArrowPlan:
    """A topic's SELECT as pyarrow work: `outputs` as (name, column), and a condition."""

    outputs: tuple[tuple[str, str], ...]
    where: Cond | None

    @property
    def reads(self) -> set[str]:
        """The columns the condition reads."""
        return set() if self.where is None else _names(self.where)

    def filter(self, batch: pa.Table) -> pa.Table | None:
        """The rows of `batch` the topic's condition keeps, every column (dictionary
        columns it reads decoded), or None when it cannot tell them exactly."""
        if self.where is None:
            return batch
        try:
            batch = _decoded(batch, self.reads)
            member = _membership(self.where, batch)
            return batch.filter(member if member is not None else _expr(self.where, batch))
        except Unsupported:
            return None

    def run(self, batch: pa.Table) -> pa.Table | None:
        """The topic's rows of `batch`, or None when they must come from DuckDB."""
        data = self.filter(batch)
        return None if data is None else self.project(data)

    def project(self, data: pa.Table) -> pa.Table:
        """The output columns of rows `filter` kept."""
        names = [name for name, _ in self.outputs]
        return pa.Table.from_arrays([data.column(col) for _, col in self.outputs], names=names)


def arrow_plan(select_sql: str) -> ArrowPlan | None:
    """The plan of a compiled topic's SQL, or None when it is not in this evaluator's reach."""
    tree = sqlglot.parse_one(select_sql, dialect="duckdb")
    clauses = {k for k, v in tree.args.items() if v is not None}
    if not isinstance(tree, exp.Select) or clauses - {"expressions", "from_", "where"}:
        return None
    try:
        outputs = tuple(_output(item) for item in tree.expressions)
        where = tree.args.get("where")
        return ArrowPlan(outputs, None if where is None else _cond(where.this))
    except Unsupported:
        return None


def _output(item: exp.Expr) -> tuple[str, str]:
    if isinstance(item, exp.Alias) and isinstance(item.this, exp.Column) and not item.this.table:
        return item.alias, item.this.name
    raise Unsupported(item.sql())


def _cond(node: exp.Expr) -> Cond:
    if isinstance(node, exp.Paren):
        return _cond(node.this)
    if isinstance(node, (exp.And, exp.Or)):
        op: Literal["and", "or"] = "and" if isinstance(node, exp.And) else "or"
        return Logic(op, (_cond(node.left), _cond(node.right)))
    if isinstance(node, exp.Not):
        return Logic("not", (_cond(node.this),))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return Logic("is_null", (_operand_col(node.this),))
    if isinstance(node, exp.Column) and not node.table:
        return Logic("truth", (Col(node.name),))
    if isinstance(node, exp.Binary) and type(node) in _COMPARE:
        return _cmp(_COMPARE[type(node)], _operand(node.left), _operand(node.right))
    if isinstance(node, exp.Between):
        value = _operand(node.this)
        if not isinstance(value, Col):
            raise Unsupported(node.sql())
        low = Cmp("greater_equal", value, _operand(node.args["low"]))
        return Logic("and", (low, Cmp("less_equal", value, _operand(node.args["high"]))))
    if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
        value = _operand(node.this)
        return _any(tuple(_cmp("equal", value, _operand(e)) for e in node.expressions))
    raise Unsupported(node.sql())


def _cmp(op: str, left: Col | Lit, right: Col | Lit) -> Cmp:
    if not isinstance(left, Col) and not isinstance(right, Col):
        raise Unsupported(f"{op} of two literals")
    return Cmp(op, left, right)


def _any(conds: tuple[Cond, ...]) -> Cond:
    """x IN (a, b, c) is x = a OR x = b OR x = c (NULL, not false, when x is NULL)."""
    return conds[0] if len(conds) == 1 else Logic("or", (conds[0], _any(conds[1:])))


def _operand_col(node: exp.Expr) -> Col:
    if isinstance(node, exp.Column) and not node.table:
        return Col(node.name)
    raise Unsupported(node.sql())


def _operand(node: exp.Expr) -> Col | Lit:
    if isinstance(node, exp.Column) and not node.table:
        return Col(node.name)
    if isinstance(node, exp.Boolean):
        return Lit(bool(node.this), "bool")
    if isinstance(node, exp.Literal) and node.is_string:
        return Lit(node.this, "string")
    if isinstance(node, exp.Literal) and node.is_int:
        return _int(int(node.this), node)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        if node.this.is_int:
            return _int(-int(node.this.this), node)
        if not node.this.is_string:
            return Lit(-float(node.this.this), "float")
    if isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.DOUBLE:
        inner = node.this
        negative = isinstance(inner, exp.Neg)
        lit = inner.this if negative else inner
        if isinstance(lit, exp.Literal) and not lit.is_string:  # a decimal (translate.py)
            value = float(lit.this)
            return Lit(-value if negative else value, "float")
    raise Unsupported(node.sql())


def _int(value: int, node: exp.Expr) -> Lit:
    if not -(2**63) <= value < 2**63:
        raise Unsupported(node.sql())  # DuckDB reads it as HUGEINT
    return Lit(value, "int")


# --- evaluation over one batch -----------------------------------------------------------


def _names(cond: Cond | Col | Lit) -> set[str]:
    """The columns a condition reads."""
    if isinstance(cond, Col):
        return {cond.name}
    if isinstance(cond, Lit):
        return set()
    if isinstance(cond, Cmp):
        return _names(cond.left) | _names(cond.right)
    return set().union(*(_names(arg) for arg in cond.args))


def _decoded(batch: pa.Table, names: set[str]) -> pa.Table:
    """Dictionary columns (tags) the condition reads, as plain ones: the comparison
    kernels want values (the outputs keep theirs; the caller casts them)."""
    for i, field in enumerate(batch.schema):
        if field.name in names and pa.types.is_dictionary(field.type):
            plain = pc.cast(batch.column(i), field.type.value_type)
            batch = batch.set_column(i, pa.field(field.name, plain.type), plain)
    return batch


def _membership(where: Cond, batch: pa.Table) -> pa.ChunkedArray | None:
    """A whole condition `x IN (literals)` (or `x = literal`), x a string or integer
    column and the literals of its family, as one eager `is_in` mask: a device-set topic
    costs a fraction of an Expression filter. Its mask is false where SQL's is NULL (x
    NULL), which a filter treats alike: hence only for the whole condition. None for any
    other condition."""
    found = _in_list(where)
    if found is None:
        return None
    col, literals = found
    family = _family(batch, col.name)
    if family not in ("string", "int") or any(lit.family != family for lit in literals):
        return None
    column = batch.column(col.name)
    if family == "int" and column.type != pa.int64():
        column = column.cast(pa.int64())  # DuckDB compares integers as BIGINT: exact
    try:
        values = pa.array([lit.value for lit in literals], column.type)
    except (OverflowError, pa.ArrowInvalid):
        return None  # a literal out of the column type's range: the general path
    return pc.is_in(column, value_set=values)


def _in_list(cond: Cond) -> tuple[Col, list[Lit]] | None:
    """(x, [a, b, ...]) when `cond` is x = a OR x = b OR ... over one column x."""
    if isinstance(cond, Cmp):
        if cond.op != "equal":
            return None
        pair = (cond.left, cond.right) if isinstance(cond.left, Col) else (cond.right, cond.left)
        col, lit = pair
        return (col, [lit]) if isinstance(col, Col) and isinstance(lit, Lit) else None
    if cond.op != "or":
        return None
    parts = [_in_list(arg) for arg in cond.args if not isinstance(arg, Col)]
    if len(parts) != 2 or parts[0] is None or parts[1] is None:
        return None
    if parts[0][0] != parts[1][0]:
        return None
    return parts[0][0], parts[0][1] + parts[1][1]


def _expr(cond: Cond, batch: pa.Table) -> pc.Expression:
    if isinstance(cond, Cmp):
        return _compare(cond, batch)
    if cond.op == "is_null":
        col = cond.args[0]
        assert isinstance(col, Col)
        _family(batch, col.name)
        return pc.field(col.name).is_null()
    if cond.op == "truth":
        col = cond.args[0]
        assert isinstance(col, Col)
        if _family(batch, col.name) != "bool":
            raise Unsupported(col.name)
        return pc.field(col.name)
    args = [_expr(c, batch) for c in cond.args if not isinstance(c, Col)]
    if cond.op == "not":
        return ~args[0]
    return args[0] & args[1] if cond.op == "and" else args[0] | args[1]  # Kleene logic


def _compare(cmp: Cmp, batch: pa.Table) -> pc.Expression:
    """A comparison in the type DuckDB compares in, both sides cast to it explicitly
    (pyarrow's implicit casts refuse an inexact BIGINT to DOUBLE; DuckDB rounds)."""
    target = _common(_side(cmp.left, batch), _side(cmp.right, batch))
    _no_nan(batch, cmp.left)
    _no_nan(batch, cmp.right)
    call: Callable[..., pc.Expression] = getattr(pc, cmp.op)
    return call(_typed(cmp.left, batch, target), _typed(cmp.right, batch, target))


Side = tuple[Family, pa.DataType | None]  # a literal has no type of its own yet


def _side(side: Col | Lit, batch: pa.Table) -> Side:
    if isinstance(side, Lit):
        return side.family, None
    return _family(batch, side.name), batch.schema.field(side.name).type


def _common(left: Side, right: Side) -> pa.DataType:
    families = {left[0], right[0]}
    if len(families) == 2 and families != {"int", "float"}:
        raise Unsupported(f"a comparison of {sorted(families)}")
    if families == {"int"}:
        return pa.int64()
    if families == {"string"}:
        return pa.string()
    if families == {"bool"}:
        return pa.bool_()
    if families == {"int", "float"}:
        if (left[1] is None) == (right[1] is None):
            raise Unsupported("INT and FLOAT columns")  # DuckDB may compare in FLOAT
        floating, integer = (left, right) if left[0] == "float" else (right, left)
        # an INTEGER literal meets a FLOAT column as FLOAT, an integer column a DOUBLE
        # literal as DOUBLE
        if integer[1] is None and floating[1] == pa.float32():
            return pa.float32()
        return pa.float64()
    if left[1] == right[1] == pa.float32():
        return pa.float32()
    return pa.float64()


def _typed(side: Col | Lit, batch: pa.Table, target: pa.DataType) -> pc.Expression:
    if isinstance(side, Col):
        field = pc.field(side.name)
        own = batch.schema.field(side.name).type
        return field if own == target else field.cast(target, safe=False)
    if side.family == "int" and pa.types.is_floating(target):
        # exact through float64 up to 2**53; beyond, float32 could round twice
        assert isinstance(side.value, int)
        if abs(side.value) > 2**53:
            raise Unsupported(f"{side.value} against {target}")
        return pc.scalar(pa.array([float(side.value)], pa.float64()).cast(target, safe=False)[0])
    return pc.scalar(pa.scalar(side.value, target))


def _no_nan(batch: pa.Table, side: Col | Lit) -> None:
    if not isinstance(side, Col) or not pa.types.is_floating(batch.schema.field(side.name).type):
        return
    if pc.any(pc.is_nan(batch.column(side.name))).as_py():
        raise Unsupported(f"NaN in {side.name}")


def _family(batch: pa.Table, name: str) -> Family:
    index = batch.schema.get_field_index(name)
    if index < 0:
        raise Unsupported(name)
    t = batch.schema.field(index).type
    if pa.types.is_integer(t) and t != pa.uint64():
        return "int"
    if pa.types.is_floating(t) and t != pa.float16():
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_boolean(t):
        return "bool"
    raise Unsupported(f"{name}: {t}")
