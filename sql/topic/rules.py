"""TDengine's rules for what a topic may contain, as data, and the expression rules that
refuse the first node of a SELECT list or WHERE that breaks one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlglot import exp

from sqltopic.errors import InvalidTopicQuery, SqlError, TopicNotStateless
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.functions import FUNCTIONS, Duration
from sqltopic.sql.topic.text import Text, func_name
from sqltopic.sql.types import MAX_STRING_LENGTH

# TDengine's longest table name: the declared length of a `tbname` output column.
TBNAME_LENGTH = 192
# A computed string's length is unknown at creation; declaring the longest VARCHAR means
# that no delivered value ever exceeds its declared type.
UNKNOWN_STRING_LENGTH = MAX_STRING_LENGTH

# TDengine's aggregate, selection and time-series functions, by name: sqlglot knows few of
# them as aggregates, and each needs state across rows, which a topic does not keep.
STATEFUL_FUNCTIONS = frozenset({
    "apercentile", "avg", "bottom", "count", "csum", "derivative", "diff", "elapsed",
    "first", "forecast", "group_key", "histogram", "hyperloglog", "interp", "irate", "last",
    "last_row", "leastsquares", "mavg", "max", "min", "mode", "percentile", "sample",
    "spread", "statecount", "stateduration", "stddev", "stddev_pop", "sum", "tail", "top",
    "twa", "unique", "var_pop", "variance", "_group_key", "_irowts", "_isfilled",
    "_wduration", "_wend", "_wstart",
})  # fmt: skip

# TDengine window clauses: sqlglot reads `FROM meters INTERVAL(10s)` as a table alias.
WINDOW_CLAUSES = frozenset({"interval", "session", "state_window", "event_window", "count_window"})

# The scalar functions a topic may call, by the name as written: TDengine's, with its
# meaning (`sql/functions`), less those refused everywhere or in topics.
TOPIC_REFUSED = frozenset({"rand"})
SCALAR_FUNCTIONS = frozenset(
    name for name, spec in FUNCTIONS.items() if not spec.refused and name not in TOPIC_REFUSED
)

# Expression nodes (besides the functions above) a topic's SELECT list and WHERE may use.
PLAIN_NODES: tuple[type[exp.Expr], ...] = (
    exp.Column, exp.Identifier, exp.Star, exp.Literal, exp.Null, exp.Boolean, exp.Paren,
    exp.Neg, exp.Not, exp.And, exp.Or, exp.Xor, exp.Add, exp.Sub, exp.Mul, exp.Div,
    exp.IntDiv, exp.Mod, exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot,
    exp.BitwiseLeftShift, exp.BitwiseRightShift, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT,
    exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is, exp.In, exp.Between, exp.Like,
    exp.ILike, exp.Escape, exp.DPipe, exp.DataType, exp.DataTypeParam, Duration,
    exp.RegexpLike,  # MATCH / NMATCH: POSIX-style regular expression search
)  # fmt: skip

# SELECT clauses a topic refuses: argument -> (the clause as written, why, what to do).
CLAUSES: dict[str, tuple[str, str]] = {
    "with_": ("WITH", "a topic reads its one table directly; write the SELECT without a CTE"),
    "distinct": ("DISTINCT", "a topic delivers every matching row as it is written"),
    "joins": ("JOIN", "a topic reads exactly one table; create one topic per table, "
              "or one topic on their super table"),
    "laterals": ("LATERAL", "a topic reads exactly one table"),
    "group": ("GROUP BY", "grouping needs state across rows, and a topic evaluates each "
              "row on its own; query the groups with SELECT instead"),
    "having": ("HAVING", "it filters groups, and a topic has none; use WHERE"),
    "windows": ("WINDOW", "window functions need state across rows"),
    "qualify": ("QUALIFY", "it filters window results, and a topic has none; use WHERE"),
    "order": ("ORDER BY", "a topic delivers rows in WAL order"),
    "limit": ("LIMIT", "a topic is unbounded: it delivers every matching row as it is written"),
    "offset": ("OFFSET", "a topic delivers every matching row as it is written"),
}  # fmt: skip
SELECT_PARTS = frozenset({"expressions", "from_", "where"})
TABLE_PARTS = frozenset({"this", "db", "alias"})

SUBQUERY = (
    "subqueries are not allowed in a topic: a topic evaluates each row of its one table on "
    "its own; write the condition without a subquery"
)

# --- expression rules ---------------------------------------------------------------------

_Rule = Callable[[exp.Expr, Text], str | None]


def _subquery_rule(node: exp.Expr, text: Text) -> str | None:
    return SUBQUERY if isinstance(node, (exp.Query, exp.Subquery)) else None


def _stateful_rule(node: exp.Expr, text: Text) -> str | None:
    why = (
        "is not allowed in a topic: it needs state across rows, and a topic evaluates each "
        "row on its own; query it with SELECT instead"
    )
    if isinstance(node, exp.Window):
        return f"window function {node.sql(dialect=TDengine)} {why}"
    if isinstance(node, exp.Func) and not isinstance(node, PLAIN_NODES):
        name = func_name(node, text)
        if isinstance(node, exp.AggFunc) or name in STATEFUL_FUNCTIONS:
            return f"aggregate function {name.upper()} {why}"
    return None


def _supported_rule(node: exp.Expr, text: Text) -> str | None:
    if isinstance(node, PLAIN_NODES):
        return None
    if isinstance(node, exp.Func):
        name = func_name(node, text)
        if name in SCALAR_FUNCTIONS:
            return None
        spec = FUNCTIONS.get(name)
        if spec is not None and spec.refused:
            return f"function {name.upper()} is not supported: {spec.refused}"
        if spec is not None:
            return f"function {name.upper()} is not allowed in a topic: " + _TOPIC_WHY[name]
        return f"function {name.upper()} is not supported in a topic; use one of " + ", ".join(
            sorted(SCALAR_FUNCTIONS)
        )
    return f"{node.sql(dialect=TDengine)} is not supported in a topic"


_TOPIC_WHY = {
    "rand": "a topic's rows must be a function of the rows written, and a random number is "
    "not; compute it in the consumer",
}


# Checked in order: the first rule any node breaks decides the error (TDengine's order).
_RULES: tuple[tuple[_Rule, type[SqlError]], ...] = (
    (_subquery_rule, InvalidTopicQuery),
    (_stateful_rule, TopicNotStateless),
    (_supported_rule, InvalidTopicQuery),
)


def check_parts(parts: Sequence[exp.Expr], text: Text) -> None:
    """Refuse the first (leftmost) node of `parts` that breaks a rule."""
    nodes = [node for part in parts for node in part.walk()]
    for rule, cls in _RULES:
        broken = [(text.offset(n), n, m) for n in nodes if (m := rule(n, text)) is not None]
        if broken:
            offset, _node, message = min(broken, key=lambda b: -1 if b[0] is None else b[0])
            raise text.error(cls, message, offset)
