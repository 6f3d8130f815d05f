"""The `sqltopic_wal` Spark data source: a database's WAL as a DataFrame.

    import sqltopic.spark_jobs as sj
    sj.register(spark)
    df = (spark.read.format("sqltopic_wal")
          .option("path", "/var/lib/sqltopic")       # the server's data directory
          .option("database", "power")
          .option("table", "meters")                 # a super, child or normal table
          .load())

Options: `path`, `database`, `table` (required); `columns` (comma-separated: deliver
only these, e.g. `ts,voltage,tbname,_version`); `starts` and `ends`, JSON objects of
vgroup -> version (`{"3": 1200}`): read versions [start, end) of each vgroup, by default
from the first retained version to the end of the WAL when the read is planned; `vgroups`
(comma-separated ids: only these); `pieceBytes` (the most bytes of WAL one task reads);
`strict` (`true`: fail instead of moving a start or end that lies outside the WAL);
`pushdown` (`true`: take Spark's filters on `_vgroup` and `_version` as bounds too;
needs `spark.sql.python.filterPushdown.enabled` true, which `session.start_session`
sets).

Columns: see `spec`. Planning (`partitions()`) opens every vnode's WAL read-only and
lists one partition per piece of a segment (`pieces`), so a read scales with executors;
every executor must see the data directory (the same machine, or a shared filesystem).
Other filters are not pushed: the WAL has no index to skip rows by value.

Through the server instead of the files (a cluster, or a data directory the executors
cannot see): `server` (host:port of the server or the cluster's mnode) and `topic` (read
with READ on its database and SUBSCRIBE on it; `database` and `table` default to the
topic's) instead of `path`,
with `user` and `password` (default root / taosdata) and, for TLS, `tls` (`true`),
`tlsCa`, `tlsCert`, `tlsKey` (PEM paths every executor can read). Each task then
streams its piece from the node hosting the vgroup (spark_jobs/remote.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sqltopic.client.tls import TlsFiles
from sqltopic.errors import ConfigError
from sqltopic.spark_jobs import remote, types
from sqltopic.spark_jobs.pieces import PIECE_BYTES, Piece, list_pieces
from sqltopic.spark_jobs.pushdown import Pushed
from sqltopic.spark_jobs.remote import Remote
from sqltopic.spark_jobs.spec import Spec, build_spec, load_catalog
from sqltopic.sql.topic.params import topic_of

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import Filter
    from pyspark.sql.types import StructType

NAME = "sqltopic_wal"
# A read through the server logs in as this user unless the options say otherwise (the
# client's own defaults: TDengine's).
DEFAULT_USER = "root"
DEFAULT_PASSWORD = "taosdata"


class PiecePartition(InputPartition):
    """One task's piece (picklable)."""

    def __init__(self, piece: Piece) -> None:
        super().__init__(piece)
        self.piece = piece


class WalSource(DataSource):
    """`spark.read.format("sqltopic_wal")`: see the module docstring for the options."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._spec: Spec | None = None

    @classmethod
    def name(cls) -> str:
        return NAME

    def spec(self) -> Spec:
        if self._spec is None and self.options.get("server"):
            self._spec = _remote_spec(self.options)
        if self._spec is None:
            data_dir = Path(_required(self.options, "path"))
            database = _required(self.options, "database").lower()
            table = _required(self.options, "table").lower()
            columns = tuple(c for c in self.options.get("columns", "").split(",") if c.strip())
            catalog = load_catalog(data_dir)
            prefilter = self.options.get("prefilter") or None
            self._spec = build_spec(data_dir, catalog, database, table, columns, prefilter)
        return self._spec

    def schema(self) -> str:
        return types.ddl(self.spec().arrow)

    def reader(self, schema: StructType) -> WalSourceReader:
        bounds = _bounds(self.options)
        if self.options.get("pushdown", "false").lower() == "true":
            return PushdownReader(self.spec(), bounds)
        return WalSourceReader(self.spec(), bounds)


class WalSourceReader(DataSourceReader):
    def __init__(self, spec: Spec, bounds: Bounds) -> None:
        self.spec = spec
        self.bounds = bounds
        self.pushed = Pushed()

    def partitions(self) -> Sequence[InputPartition]:
        b, pushed = self.bounds, self.pushed
        chosen = [v for v in self.spec.vgroups if not b.vgroups or v in b.vgroups]
        vgroups = tuple(v for v in chosen if pushed.keeps_vgroup(v))
        within = (pushed.low, pushed.high)
        if self.spec.remote is not None:
            pieces = remote.pieces(self.spec.remote, vgroups, b.starts, b.ends,
                                   strict=b.strict, within=within)  # fmt: skip
        else:
            pieces = list_pieces(Path(self.spec.data_dir), vgroups, b.starts, b.ends,
                                 b.piece_bytes, strict=b.strict, within=within)  # fmt: skip
        # Spark needs at least one partition; an empty piece reads nothing
        return [PiecePartition(p) for p in pieces] or [PiecePartition(_EMPTY)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from sqltopic.spark_jobs.read import read_piece  # noqa: PLC0415 - in the worker

        piece: Piece = partition.piece  # type: ignore[attr-defined]
        if piece.entries == 0:
            return iter(())
        return read_piece(self.spec, piece)


class PushdownReader(WalSourceReader):
    """The reader with Spark filter pushdown (option `pushdown` true): conditions on
    `_vgroup` and `_version` bound the pieces read (`pushdown.py`). Spark calls
    `pushFilters` only with `spark.sql.python.filterPushdown.enabled` true, and fails
    every read of a reader that has it otherwise: hence a reader of its own."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return [f for f in filters if not self.pushed.take(f)]


_EMPTY = Piece(vgroup=0, segment=0, start=0, end=0, entries=0, bytes=0)


class Bounds:
    """The version bounds a read was given."""

    def __init__(self, starts: dict[int, int], ends: dict[int, int], vgroups: tuple[int, ...],
                 piece_bytes: int, strict: bool) -> None:  # fmt: skip
        self.starts = starts
        self.ends = ends
        self.vgroups = vgroups
        self.piece_bytes = piece_bytes
        self.strict = strict


def _bounds(options: Any) -> Bounds:
    vgroups = tuple(_int(v, "vgroups") for v in options.get("vgroups", "").split(",") if v.strip())
    piece_bytes = _int(options.get("pieceBytes", str(PIECE_BYTES)), "pieceBytes")
    if piece_bytes < 1:
        raise ConfigError(f"option pieceBytes must be at least 1, got {piece_bytes}")
    strict = options.get("strict", "false").lower() == "true"
    return Bounds(_versions(options, "starts"), _versions(options, "ends"), vgroups, piece_bytes,
                  strict)  # fmt: skip


def _versions(options: Any, key: str) -> dict[int, int]:
    raw = options.get(key)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict):
            raise ValueError("not a JSON object")
        return {_int(str(v), key): _int(str(n), key) for v, n in parsed.items()}
    except ValueError as exc:
        raise ConfigError(f"option {key} must be a JSON object of vgroup -> version, e.g. "
                          f'{{"1": 1200}}; got {raw!r} ({exc})') from None  # fmt: skip


def _int(text: str, key: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ConfigError(f"option {key}: {text!r} is not an integer") from None


def remote_of(options: Any, source: str = NAME) -> Remote:
    """How a read through the server reaches it, from a source's options: `server`,
    `topic`, `user`, `password` and the TLS files (the `sqltopic` streaming source's
    too)."""
    files = TlsFiles(
        options.get("tls", "false").lower() == "true", options.get("tlsCa") or None,
        options.get("tlsCert") or None, options.get("tlsKey") or None,
    )  # fmt: skip
    return Remote(
        _required(options, "server", source), options.get("user") or DEFAULT_USER,
        options.get("password") or DEFAULT_PASSWORD,
        _required(options, "topic", source).lower(), files,
    )  # fmt: skip


def _remote_spec(options: Any) -> Spec:
    """The spec of a read through the server: the catalog objects and the vgroups'
    nodes asked of it."""
    base = remote_of(options)
    catalog = remote.catalog(base)
    topic = catalog.topic(topic_of(base.topic))
    database = (options.get("database") or topic.db).lower()
    table = (options.get("table") or topic.target or "").lower()
    columns = tuple(c for c in options.get("columns", "").split(",") if c.strip())
    prefilter = options.get("prefilter") or None
    return build_spec(Path(), catalog, database, table, columns, prefilter,
                      base.located(database))  # fmt: skip


def _required(options: Any, key: str, source: str = NAME) -> str:
    value = options.get(key)
    if not value:
        raise ConfigError(f"the {source} source needs option {key!r}: .option({key!r}, ...)")
    return str(value)


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("sqltopic_wal")` available in `spark`."""
    spark.dataSource.register(WalSource)
