"""Parameterized topics: `?` in a query topic's WHERE, bound by each subscriber.

This module owns the three lives of a topic parameter (docs/sql.md, "Parameterized
topics"):

* **Compilation.** A `?` may stand only in a top-level AND conjunct of the WHERE, as
  `col = ?`, `? = col` or `col IN (?)`, `col` a data column, a tag or `tbname` of the
  topic's table, each column at most once; anything else is refused with its position.
  The conjuncts are taken out of the WHERE and the columns become hidden outputs after
  the topic's own (`HIDDEN_PREFIX` + name): the *shared form*, which a vnode evaluates
  once per batch for every binding of the topic.
* **Binding.** `bind` checks a subscriber's values against the parameters (missing,
  extra, wrong type: `ConfigError` naming the parameter, its type and the value) and
  converts each to its column's type; a `Binding` has a canonical text key (compact
  JSON, names sorted, IN lists sorted and deduplicated) that `Binding.from_key` reads
  back, validated again.

The partition of the shared form's rows among bindings is `sql/topic/partition.py`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.tokenizer_core import TokenType

from sqltopic.errors import ConfigError, InvalidTopicQuery, excerpt, shorten
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.model import TBNAME, Param, ParamKind, ParamOp, Topic
from sqltopic.sql.topic.compare import epoch_of
from sqltopic.sql.topic.names import Scope, bind_columns
from sqltopic.sql.topic.probe import quoted
from sqltopic.sql.topic.scope import conjuncts
from sqltopic.sql.topic.text import Text
from sqltopic.sql.types import INTEGER_RANGES

# Hidden output columns of the shared form: one per parameter, named this + its name
# (output names may not start with "__", so none can clash).
HIDDEN_PREFIX = "__param_"
# Values one IN parameter binds at most: a subscriber's list is held in every vnode
# and in the key of its offsets; a thousand devices per subscriber is plenty.
MAX_IN_VALUES = 1_000
# Bytes of a binding's key at most: it is stored with every committed offset and sent
# with every subscription (1,000 table names of 60 bytes fit).
MAX_KEY_BYTES = 65_536

_FORMS = "col = ?, ? = col or col IN (?)"
_TIMESTAMP_INT = range(-(2**63), 2**63)


def hidden_name(name: str) -> str:
    """The hidden output column of parameter `name` in the shared form."""
    return HIDDEN_PREFIX + name


# --- compilation ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Written:
    """A parameter as written: its column reference, and `=` or `in`."""

    column: exp.Column
    op: ParamOp
    offset: int | None


def refuse_outside_where(select: exp.Select, text: Text) -> None:
    """A `?` in the SELECT list is refused (before any other rule names it)."""
    offsets = _offsets(select, text)
    for item in select.expressions:
        hole = next(item.find_all(exp.Placeholder), None)
        if hole is not None:
            raise text.error(
                InvalidTopicQuery,
                "parameter ? is in the SELECT list: a parameter may stand only in the WHERE, "
                f"as a condition ANDed at its top ({_FORMS}); compute the value in the "
                "consumer instead",
                offsets.get(id(hole), text.offset(item)),
            )


def refuse_in_condition(cond: exp.Expr, text: Text) -> None:
    """A `?` in a stable topic's or a privilege's tag condition is refused."""
    hole = next(cond.find_all(exp.Placeholder), None)
    if hole is not None:
        raise text.error(
            InvalidTopicQuery,
            "parameter ? is allowed only in a query topic's WHERE (CREATE TOPIC t AS SELECT "
            "... FROM stb WHERE tag = ?); this condition is fixed: write the value itself",
            _offsets(cond, text).get(id(hole)),
        )


def take_params(select: exp.Select, text: Text) -> list[Written]:
    """The parameters of the WHERE, in the order written, their conjuncts removed from
    it (in place); a `?` anywhere else is refused with its position."""
    where = select.args.get("where")
    if where is None or where.find(exp.Placeholder) is None:
        return []
    offsets = _offsets(select, text)
    kept: list[exp.Expr] = []
    found: list[Written] = []
    for conjunct in conjuncts(where.this):
        if conjunct.find(exp.Placeholder) is None:
            kept.append(conjunct)
        else:
            found.append(_written(conjunct, offsets, text))
    select.set("where", exp.Where(this=exp.and_(*kept, copy=False)) if kept else None)
    return found


def bind_params(
    written: list[Written], scope: Scope, text: Text
) -> tuple[tuple[Param, ...], set[str]]:
    """Each parameter's column bound (NotFoundError at an unknown one) and typed; the
    columns and tags they read. Refuses a second parameter on one column."""
    target, params, seen = scope.target, [], set[str]()
    for w in written:
        name = next(iter(bind_columns(w.column, scope, text)))
        if name in seen:
            raise text.error(
                InvalidTopicQuery,
                f"column {name!r} has two parameters: a column takes at most one; bind "
                f"several values to one with {name} IN (?)",
                w.offset,
            )
        seen.add(name)
        column = target.find(name)
        assert column is not None  # bind_columns found it
        kind: ParamKind = "tbname" if name == TBNAME else "tag" if target.is_tag(name) else "column"
        params.append(Param(name, kind, column.type, w.op, target.precision))
    return tuple(params), seen - {TBNAME}


def add_hidden(tree: exp.Select, params: tuple[Param, ...]) -> None:
    """The parameters' columns as hidden outputs after the topic's own (in place)."""
    hidden = [exp.alias_(quoted(p.name), hidden_name(p.name), quoted=True) for p in params]
    tree.set("expressions", [*tree.expressions, *hidden])


def _offsets(tree: exp.Expr, text: Text) -> dict[int, int]:
    """Where each `?` of `tree` was written (sqlglot keeps no position for them): the
    placeholders in source order matched with the statement's `?` tokens."""
    holes = [n for n in tree.walk(bfs=False) if isinstance(n, exp.Placeholder) and not n.this]
    tokens = [t.start for t in text.tokens if t.token_type == TokenType.PLACEHOLDER]
    if len(holes) != len(tokens):
        return {}
    return {id(hole): start for hole, start in zip(holes, tokens, strict=True)}


def _written(conjunct: exp.Expr, offsets: dict[int, int], text: Text) -> Written:
    node = conjunct
    while isinstance(node, exp.Paren):
        node = node.this
    hole = next(node.find_all(exp.Placeholder))
    at = offsets.get(id(hole), text.offset(conjunct))
    if hole.this:
        raise text.error(
            InvalidTopicQuery,
            f"named parameter :{hole.name} is not supported: write ? (a parameter takes its "
            "column's name)",
            at,
        )
    form = _form(node, hole)
    if form is not None:
        return Written(form[0], form[1], at)
    raise text.error(InvalidTopicQuery, _why(node, hole), at)


def _form(node: exp.Expr, hole: exp.Placeholder) -> tuple[exp.Column, ParamOp] | None:
    """`col = ?`, `? = col` or `col IN (?)` as (column, op); None for any other form."""
    if isinstance(node, exp.EQ):
        sides = [node.this, node.expression]
        cols = [s for s in sides if isinstance(s, exp.Column)]
        if len(cols) == 1 and any(s is hole for s in sides):
            return cols[0], "="
    if isinstance(node, exp.In) and isinstance(node.this, exp.Column):
        items = node.expressions
        if len(items) == 1 and items[0] is hole and not node.args.get("query"):
            return node.this, "in"
    return None


def _why(node: exp.Expr, hole: exp.Placeholder) -> str:
    """Why a conjunct holding `?` is not one of the forms, and how to write it."""
    written = excerpt(node.sql(dialect=TDengine))
    if hole.parent is node and isinstance(node, exp.In):
        if hole is node.this or not isinstance(node.this, exp.Column):
            return f"parameter ? in {written} must be IN's list, compared with a column: {_FORMS}"
        return (
            f"parameter ? in {written} must be IN's only item, bound to a list: write "
            f"{node.this.sql(dialect=TDengine)} IN (?)"
        )
    if hole.parent is node and isinstance(node, exp.EQ):
        return (
            f"parameter ? in {written} must be compared with a column, a tag or tbname itself, "
            f"not with an expression or another ?: {_FORMS}"
        )
    if hole.parent is node and isinstance(node, (exp.Binary, exp.Between, exp.Predicate)):
        return (
            f"parameter ? in {written}: only = and IN take a parameter ({_FORMS}); write "
            "range and pattern conditions with their values, e.g. current > 10"
        )
    words: dict[type[exp.Expr], str] = {exp.Or: "an OR", exp.Not: "a NOT", exp.Xor: "an XOR"}
    inside = words.get(type(node), written)
    return (
        f"parameter ? is inside {inside}: a parameter may stand only in a condition of its "
        f"own, ANDed at the top of the WHERE ({_FORMS})"
    )


# --- binding ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Binding:
    """A subscriber's values for a topic's parameters: `values[i]` the values of
    `Topic.params[i]` in its column's type (one for `=`, sorted and distinct for IN);
    `key` the canonical text that names the binding (for its groups and offsets)."""

    topic: str
    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    key: str

    def as_params(self) -> dict[str, Any]:
        """The values by parameter name, as `bind` takes them (a list for IN)."""
        return json.loads(self.key)  # type: ignore[no-any-return]

    @classmethod
    def from_key(cls, topic: Topic, key: str) -> Binding:
        """The binding a key names, validated again against the topic as it is now;
        ConfigError when it is not the canonical key of a valid binding."""
        if not isinstance(key, str) or len(key.encode()) > MAX_KEY_BYTES:
            raise ConfigError(
                f"binding key of topic {topic.name!r}: a string of at most {MAX_KEY_BYTES} "
                "bytes, as Binding.key gives it"
            )
        try:
            raw = json.loads(key)
        except (ValueError, RecursionError):  # not JSON, or nested past Python's stack
            raw = None
        if not isinstance(raw, dict):
            raise ConfigError(
                f"binding key {excerpt(key)} of topic {topic.name!r} is not a JSON object of "
                'parameter values, e.g. {"tbname":"d1"}'
            )
        binding = bind(topic, raw)
        if binding.key != key:
            raise ConfigError(
                f"binding key {excerpt(key)} of topic {topic.name!r} is not canonical; its "
                f"binding's key is {excerpt(binding.key)}"
            )
        return binding


def bind(topic: Topic, params: Mapping[str, object]) -> Binding:
    """`params` checked against the topic's parameters and converted to their columns'
    types. ConfigError for a missing, extra or duplicate name, or a value of the wrong
    type, naming the parameter, its type and the value."""
    if not isinstance(params, Mapping):
        raise ConfigError(
            f"the parameters of topic {topic.name!r} are a mapping of name to value, "
            f"not {type(params).__name__}"
        )
    given = _by_name(topic, params)
    names = [p.name for p in topic.params]
    extra = sorted(set(given) - set(names))
    if extra:
        has = f"its parameters are {_listed(topic)}" if names else "it has no parameters"
        raise ConfigError(f"topic {topic.name!r} has no parameter {excerpt(extra[0])}: {has}")
    missing = [p for p in topic.params if p.name not in given]
    if missing:
        raise ConfigError(
            f"topic {topic.name!r} needs a value for parameter {missing[0].name!r} "
            f"({_what(missing[0])}); its parameters are {_listed(topic)}"
        )
    values = tuple(_values(topic, p, given[p.name]) for p in topic.params)
    key = _key(topic.params, values)
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ConfigError(
            f"the binding of topic {topic.name!r} is {len(key.encode())} bytes as a key; at "
            f"most {MAX_KEY_BYTES}: bind fewer or shorter values"
        )
    return Binding(topic.name, tuple(names), values, key)


def _by_name(topic: Topic, params: Mapping[str, object]) -> dict[str, object]:
    """The values by lower-case name (names are case-insensitive, as columns are)."""
    given: dict[str, object] = {}
    for name, value in params.items():
        if not isinstance(name, str):
            raise ConfigError(
                f"parameter names of topic {topic.name!r} are strings, not {excerpt(repr(name))}"
            )
        if name.lower() in given:
            raise ConfigError(f"parameter {excerpt(name)} of topic {topic.name!r} is given twice")
        given[name.lower()] = value
    return given


def _listed(topic: Topic) -> str:
    return ", ".join(f"{p.name} ({_what(p)})" for p in topic.params)


def _what(p: Param) -> str:
    """`a tag of type INT, col = ?`: what a parameter compares, for messages."""
    kind = {"tag": "a tag", "tbname": "the table name", "column": "a column"}[p.kind]
    form = f"{p.name} = ?" if p.op == "=" else f"{p.name} IN (?)"
    return f"{kind} of type {p.type.sql()}, {form}"


def _key(params: tuple[Param, ...], values: tuple[tuple[Any, ...], ...]) -> str:
    body = {p.name: list(v) if p.op == "in" else v[0] for p, v in zip(params, values, strict=True)}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _values(topic: Topic, p: Param, raw: object) -> tuple[Any, ...]:
    many = isinstance(raw, (list, tuple, set, frozenset))
    if p.op == "=":
        if many:
            raise _wrong(topic, p, raw, f"one value ({p.name} = ? binds one; IN (?) binds lists)")
        return (_convert(topic, p, raw),)
    if not many:
        raise _wrong(topic, p, raw, f"a list of values (the topic has {p.name} IN (?))")
    assert isinstance(raw, (list, tuple, set, frozenset))
    if not 1 <= len(raw) <= MAX_IN_VALUES:
        raise _wrong(topic, p, raw, f"a list of 1 to {MAX_IN_VALUES} values")
    return tuple(sorted({_convert(topic, p, v) for v in raw}))


def _convert(topic: Topic, p: Param, value: object) -> Any:
    """One value in its column's Python type (the canonical form of the key)."""
    if value is None:
        raise _wrong(topic, p, value, "a value: NULL never equals anything")
    t = p.type
    if t.is_integer:
        return _to_int(topic, p, value)
    if t.is_float:
        return _to_float(topic, p, value)
    if t.is_string:
        return _to_str(topic, p, value)
    if t.name == "BOOL":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise _wrong(topic, p, value, "a boolean (True, False, 'true' or 'false')")
    return _to_timestamp(topic, p, value)


def _to_int(topic: Topic, p: Param, value: object) -> int:
    low, high = INTEGER_RANGES[p.type.name]
    expected = f"an integer in {low}..{high}"
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if number is None or not low <= number <= high:
        raise _wrong(topic, p, value, expected)
    return number


def _to_float(topic: Topic, p: Param, value: object) -> float:
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = None
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number):
        raise _wrong(topic, p, value, "a finite number")
    return number + 0.0  # -0.0 is 0.0, as in comparisons


def _to_str(topic: Topic, p: Param, value: object) -> str:
    if not isinstance(value, str):
        raise _wrong(topic, p, value, "a string")
    length = p.type.length or 0
    size = len(value) if p.type.name == "NCHAR" else len(value.encode())
    if size > length:
        unit = "characters" if p.type.name == "NCHAR" else "bytes"
        raise _wrong(topic, p, value, f"at most {length} {unit} long (no row holds a longer one)")
    # table names are stored lower-case (identifiers are case-insensitive)
    return value.lower() if p.kind == "tbname" else value


def _to_timestamp(topic: Topic, p: Param, value: object) -> int:
    expected = (
        f"a timestamp: an integer in the database precision ({p.precision}) or a date-time "
        "'YYYY-MM-DD HH:MM:SS[.fff][Z|+HH:MM]'"
    )
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        number = int(text) if text.lstrip("+-").isdigit() else epoch_of(text, p.precision)
    if number is None or number not in _TIMESTAMP_INT:
        raise _wrong(topic, p, value, expected)
    return number


def _wrong(topic: Topic, p: Param, value: object, expected: str) -> ConfigError:
    return ConfigError(
        f"parameter {p.name!r} of topic {topic.name!r} ({_what(p)}): "
        f"{shorten(repr(value))} is not {expected}"
    )


# --- subscriptions ----------------------------------------------------------------------

# Between a topic's name and a binding's key in a subscription's name (`t?{"tbname":"d1"}`):
# no topic name holds it, so the first one splits the two.
SUBSCRIPTION_SEP = "?"


def subscription_name(topic: str, key: str | None) -> str:
    """The name a subscription goes by in groups, assignments, polls and offsets: the
    topic's, or for a binding of a parameterized topic, the topic's and the binding's key."""
    return topic if key is None else f"{topic}{SUBSCRIPTION_SEP}{key}"


def split_subscription(name: str) -> tuple[str, str | None]:
    """(topic, binding key or None) of a subscription's name."""
    topic, sep, key = name.partition(SUBSCRIPTION_SEP)
    return (topic, key) if sep else (topic, None)


def topic_of(name: str) -> str:
    """The topic a subscription's name is about."""
    return name.partition(SUBSCRIPTION_SEP)[0]


def subscribed(topic: Topic, name: str) -> str:
    """The canonical subscription name of `name` (a topic name, or one with a binding of
    parameters as a JSON object after `?`, canonical or not). ConfigError for parameters
    of a topic that has none, a parameterized topic named without them, or a bad binding."""
    _, raw = split_subscription(name)
    if raw is None:
        if topic.params:
            raise ConfigError(
                f"topic {topic.name!r} has parameters ({_listed(topic)}): subscribe with their "
                'values, e.g. subscribe(["' + topic.name + '"], params={...})'
            )
        return topic.name
    try:
        values = json.loads(raw)
    except (ValueError, RecursionError):
        values = None
    if not isinstance(values, dict):
        raise ConfigError(
            f"the parameters after {SUBSCRIPTION_SEP!r} in {excerpt(name)} are not a JSON object "
            'of parameter values, e.g. t?{"tbname":"d1"}'
        )
    return subscription_name(topic.name, bind(topic, values).key)
