"""The embedded engine: a data directory, its catalog and vnodes, and SQL over them.

`Engine(data_dir)` opens (or creates) the directory, takes its lock, loads the catalog,
opens every vnode's WAL and replays DDL events the catalog has not applied yet. The
server puts a network in front of exactly this object.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from sqltopic.errors import (
    Error,
    NotFoundError,
    ServerUnavailable,
    SqlError,
    UnsupportedStatement,
    VgroupUnavailable,
)
from sqltopic.server.common.limits import Limits
from sqltopic.server.common.result import Result, Session
from sqltopic.server.common.rwlock import RWLock, WouldBlock
from sqltopic.server.core import (
    arrow_check,
    ddl,
    ddl_alter,
    dnodes,
    history,
    privileges,
    query,
    show,
    topics,
    users,
    writes,
)
from sqltopic.server.core.placement import (
    HeartbeatView,
    Routes,
    heartbeat_view,
    placed_on,
    routes,
    vgroup_source,
)
from sqltopic.server.core.query import open_select
from sqltopic.server.core.query_run import QueryRun
from sqltopic.server.core.remote_vnode import DnodeReads
from sqltopic.server.core.replica import Replica
from sqltopic.server.core.state import Forward, Role, State
from sqltopic.server.core.topic_reader import (
    READ_BYTES,
    TopicItem,
    Waiting,
    read_topic,
    read_topics,
    waiting_of,
)
from sqltopic.server.core.tracked_reader import TrackedBlock, read_rows, read_tracked
from sqltopic.server.core.users import check_subscribe, lookup, may_subscribe
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.mnode.dnode_registry import DnodeRegistry
from sqltopic.server.vnode.share_window import Run
from sqltopic.server.vnode.vnode import Vnode, close_all, open_vnodes
from sqltopic.sql import statements as st
from sqltopic.sql.catalog_store import CATALOG_FILE, CatalogStore
from sqltopic.sql.change_log import Change
from sqltopic.sql.events import apply
from sqltopic.sql.insert import Insert
from sqltopic.sql.model import Catalog, Database, User, no_topic
from sqltopic.sql.parse import parse
from sqltopic.sql.topic.params import topic_of
from sqltopic.wal import EntryType, Scheduler, WalEntry
from sqltopic.wal.fsutil import DirectoryLock
from sqltopic.wal.options import Clock, wall_clock_us
from sqltopic.wal.stats import WalStats

log = logging.getLogger("sqltopic.server")

Handler = Callable[[State, Session, Any], Result]
# A ready dnode applies a change within a round trip of its held heartbeat; one that takes
# longer is struggling, and the statement returns without it (it catches up later).
DNODE_APPLY_WAIT_S = 5.0
# Builds the engine's consumer coordinator (the mnode's) from its topic -> vgroups
# lookup; the engine owns what it builds and closes its store with it.
CoordinatorFactory = Callable[[Callable[[str], list[int]]], Coordinator]
# A dnode's request to its mnode to create the missing child tables a write through a
# super table names (its tbname and tag columns), as the session's user: the catalog
# change that made them, to wait for.
TableMaker = Callable[[Session, str, pa.Table], int]
# A new data directory is its owner's alone: it holds password hashes and every row.
DATA_DIR_MODE = 0o700

# Statements that change the catalog run alone; queries and SHOW share the lock.
_DDL: dict[type[st.Statement], Handler] = {
    st.CreateDatabase: ddl.create_database,
    st.AlterDatabase: ddl.alter_database,
    st.DropDatabase: ddl.drop_database,
    st.CreateStable: ddl.create_stable,
    st.CreateTable: ddl.create_table,
    st.CreateTables: ddl.create_tables,
    st.AlterStable: ddl_alter.alter_stable,
    st.SetTag: ddl.set_tag,
    st.DropTable: ddl.drop_table,
    st.CreateTopic: topics.create_topic,
    st.DropTopic: topics.drop_topic,
    st.DropConsumerGroup: topics.drop_consumer_group,
    st.CreateUser: users.create_user,
    st.AlterUser: users.alter_user,
    st.DropUser: users.drop_user,
    st.Grant: users.grant,
    st.GrantRights: privileges.grant,
    st.CreateDnode: dnodes.create_dnode,
    st.DropDnode: dnodes.drop_dnode,
}
_READS: dict[type[st.Statement], Handler] = {
    st.Use: ddl.use,
    st.Show: show.show,
    st.Describe: show.describe,
    st.Select: query.select,
}


class Engine:
    """SQL, fast writes and topic reads over one data directory. Thread-safe."""

    def __init__(
        self, data_dir: str | os.PathLike[str], *, clock: Clock = wall_clock_us,
        background: bool = True, limits: Limits | None = None,
        coordination: CoordinatorFactory | None = None, role: Role = "all-in-one",
        registry: DnodeRegistry | None = None, hosted: dict[int, Vnode] | None = None,
        make_tables: TableMaker | None = None, forward: Forward | None = None,
        reads: DnodeReads | None = None,
    ) -> None:  # fmt: skip
        """`role` mnode needs the `registry` of its dnodes' heartbeats (SHOW DNODES); a
        dnode's engine serves the vnodes its process opened (`hosted`, a dict the
        process changes under `lock` as the placement changes) and holds the data
        directory's lock already; its writes that create child tables ask the mnode
        through `make_tables`. An mnode's INSERTs send the rows of vgroups on dnodes
        through `forward`; its SELECTs read vgroups on dnodes through `reads`."""
        if (role == "mnode") != (registry is not None):
            raise ValueError("an mnode engine, and only one, takes the dnodes' registry")
        if (role == "dnode") != (hosted is not None and make_tables is not None):
            raise ValueError("a dnode engine, and only one, takes its hosted vnodes and maker")
        path = Path(data_dir)
        path.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
        self._lock = None if role == "dnode" else DirectoryLock(path, "data directory")
        # every vnode's WAL background work, on a few threads however many vgroups
        scheduler = Scheduler() if background else None
        try:
            self._state = _open_state(path, clock, scheduler, limits or Limits(), hosted)
        except BaseException:
            if scheduler is not None:
                scheduler.close()
            if self._lock is not None:
                self._lock.release()
            raise
        self._replica = Replica(self._state) if role == "dnode" else None
        self._state.serving = role != "dnode"
        self._state.forward = forward
        self._state.reads = reads
        self._make_tables = make_tables
        self.session = Session()
        self._state.role = role
        self._state.registry = registry
        self._state.since_us = self._state.now_us()
        if coordination is not None:
            try:  # SHOW CONSUMERS and DROP TOPIC see the groups
                self._state.coordinator = coordination(lambda t: self.topic_vgroups(t)[1])
            except BaseException:
                self.close()
                raise

    @property
    def state(self) -> State:
        """The engine's state, for its own statement handlers and the engine's tests;
        services use the methods below."""
        return self._state

    @property
    def coordinator(self) -> Coordinator | None:
        """The consumer coordinator built at construction; None in the embedded engine."""
        return self._state.coordinator

    @property
    def lock(self) -> RWLock:
        """The catalog's lock: statements that change it hold it alone; reads share it
        (services use it to run short reads on the event loop: `here_or_worker`)."""
        return self._state.lock

    @property
    def limits(self) -> Limits:
        return self._state.limits

    @property
    def catalog(self) -> Catalog:
        """The catalog as it is now, to read (a failed commit replaces the object:
        read it once per use)."""
        return self._state.catalog

    @property
    def generation(self) -> int:
        """Raised by every catalog change: what was derived from the catalog at another
        generation may be out of date."""
        return self._state.generation

    def now_us(self) -> int:
        return self._state.now_us()

    def cluster_id(self) -> str:
        """The cluster's id (an mnode's catalog makes it at its first use)."""
        with self._state.lock.exclusive():
            return self._state.store.cluster_id()

    def placed_on(self, dnode: int) -> list[tuple[Database, int]]:
        """The vgroups a cluster's dnode is to host, with their databases."""
        return placed_on(self._state.catalog, dnode)

    def heartbeat_view(
        self, endpoint: str, after: int, limit: int, max_bytes: int
    ) -> HeartbeatView:
        """A cluster's mnode: what a dnode's heartbeat is answered from, read at one
        moment (server/core/placement.py)."""
        with self._state.lock.shared():
            return heartbeat_view(self._state, endpoint, after, limit, max_bytes)

    def routes(self, user: str) -> Routes:
        """Where the vgroups `user` may see are served (server/core/placement.py)."""
        with self._state.lock.shared():
            return routes(self._state, user)

    def history_vnode(self, user: str, topic: str, database: str, vgroup: int) -> Vnode:
        """The vnode of `vgroup` once `user` may read its raw history (SUBSCRIBE on
        `topic`, or READ on all of `database`: server/core/history.py)."""
        with self._state.lock.shared():
            return history.history_vnode(self._state, user, topic, database, vgroup)

    def catalog_rows(
        self, user: str, topic: str, database: str, table: str
    ) -> list[tuple[str, str, str]]:
        """The catalog objects a reader of `topic` (or `database.table`) needs."""
        with self._state.lock.shared():
            return history.catalog_rows(self._state, user, topic, database, table)

    def vgroup_source(self, vgroup: int) -> tuple[str, int, int]:
        """Where `vgroup` is served ("" here, else its dnode's endpoint) and its first
        retained and next versions (a dnode's as its last heartbeat reported them)."""
        with self._state.lock.shared():
            return vgroup_source(self._state, vgroup)

    def dnode_joined(self, dnode_id: int, instance: str) -> None:
        """A cluster's mnode: tie dnode `dnode_id` to the data directory it first joined
        with (a catalog change), unless it is tied already."""
        with self._state.lock.exclusive():
            dnode = self._state.catalog.dnodes.get(dnode_id)
            if dnode is None or dnode.instance:
                return
            self._state.catalog.dnodes[dnode_id] = replace(dnode, instance=instance)
            self._state.commit([("dnode", "", str(dnode_id))])

    def last_change(self) -> int:
        """A cluster's mnode: its last logged catalog change."""
        with self._state.lock.shared():
            return self._state.store.log.last()

    def trim_changes(self, applied_by_all: int) -> int:
        """A cluster's mnode: drop the logged changes every admitted dnode applied."""
        with self._state.lock.exclusive():
            return self._state.store.log.trim(applied_by_all)

    def apply_changes(self, changes: list[Change]) -> int:
        """A dnode: apply its mnode's catalog changes after the last one applied, in
        order (server/core/replica.py); how many were."""
        return self._dnode_replica().apply(changes)

    def wait_change(self, seq: int, timeout_s: float) -> bool:
        """A dnode: whether its mnode's catalog change `seq` is applied here within
        `timeout_s`."""
        return self._dnode_replica().wait(seq, timeout_s)

    def hosted(self, vgroup: int) -> Vnode:
        """A dnode's vnode of `vgroup`: VgroupUnavailable for one not hosted here, or
        before the dnode caught up."""
        with self._state.lock.shared():
            return self._state.vnode(vgroup)

    def append_rows(self, vgroup: int, bodies: list[bytes]) -> int:
        """A dnode: append data entries its mnode built (an INSERT it ran) to `vgroup`'s
        WAL in one append; the last version. VgroupUnavailable for a vgroup not hosted
        here, or before the dnode caught up."""
        entries = [WalEntry(EntryType.DATA, body) for body in bodies]
        with self._state.lock.shared():
            return self._state.vnode(vgroup).wal.append(entries)[-1]

    @property
    def applied_change(self) -> int:
        """A dnode: the last catalog change of its mnode applied here."""
        return self._dnode_replica().applied

    def _dnode_replica(self) -> Replica:
        if self._replica is None:
            raise TypeError("only a dnode's engine follows an mnode's catalog")
        return self._replica

    @property
    def serving(self) -> bool:
        """False for a dnode until it caught up with its mnode's catalog once: until
        then its vgroups answer VgroupUnavailable."""
        return self._state.serving

    def serve(self) -> None:
        """A dnode caught up with its mnode's catalog: serve its vgroups."""
        self._state.serving = True

    def wal_stats(self) -> list[tuple[str, int, WalStats]]:
        """(database, vgroup, its WAL's counts) of every vnode open here (/metrics)."""
        with self._state.lock.shared():
            return [(n.db, v, n.wal.stats) for v, n in sorted(self._state.vnodes.items())]

    def listening(self, endpoint: str) -> None:
        """The address clients reach this server at, once bound (SHOW DNODES)."""
        self._state.endpoint = endpoint

    def users(self) -> Callable[[str], User | None]:
        """A user's record as the catalog holds it at each call (logins)."""
        return lookup(self._state)

    def check_subscribe(self, user: str, topic: str, *, hide: bool = True) -> None:
        """TopicNotFound or NoPermission unless `user` may consume `topic`
        (server/core/users.py)."""
        check_subscribe(self._state, user, topic, hide=hide)

    def may_subscribe(self, user: str, topic: str) -> bool:
        return may_subscribe(self._state, user, topic)

    def open_select(self, session: Session, stmt: st.Select, run: QueryRun) -> None:
        """Start a SELECT in `run`, its rows read a batch at a time (server/core/query.py)."""
        open_select(self._state, session, stmt, run)

    def read_tracked(
        self, topic: str, vgroup: int, from_version: int, max_rows: int, max_bytes: int,
        inline_bytes: int | None = None, end_version: int | None = None,
    ) -> tuple[list[TrackedBlock], int]:  # fmt: skip
        """A read of `topic` with row ids (server/core/tracked_reader.py): a shared
        group's, or Vnode.ReadTopic's (up to `end_version`); the caller holds `lock`
        shared."""
        return read_tracked(
            self._state, topic, vgroup, from_version, max_rows, max_bytes, inline_bytes,
            end_version,
        )  # fmt: skip

    def read_rows(
        self, topic: str, vgroup: int, runs: Iterable[Run]
    ) -> tuple[list[TrackedBlock], list[Run]]:
        """Rows of `runs` read again, and the runs the topic no longer delivers; the
        caller holds `lock` shared."""
        return read_rows(self._state, topic, vgroup, runs)

    def execute(self, sql: str, session: Session | None = None) -> Result:
        """Run every statement in `sql` in order; returns the last one's result."""
        session = session or self.session
        result = Result()
        for stmt in self.statements(sql):
            result = self.run(stmt, session)
        return result

    def statements(self, sql: str) -> list[st.Statement]:
        """The statements of `sql`, parsed; TooLarge over the limits' max_sql_bytes."""
        self._state.limits.check_sql(sql)
        return parse(sql)

    def run(self, stmt: st.Statement, session: Session | None = None) -> Result:
        """Run one parsed statement. On a cluster's mnode, a statement that changed the
        catalog returns once the ready dnodes applied the change (or after
        `DNODE_APPLY_WAIT_S`): what it created is then there for writes to a dnode."""
        session = session or self.session
        state = self._state
        state.logged.seq = 0
        try:
            result = self._dispatch(stmt, session)
        except SqlError as err:
            raise err.at(stmt.sql, stmt.pos.line, stmt.pos.column) from None
        self._wait_dnodes(state.logged.seq)  # the last change it logged, on this thread
        return result

    def _wait_dnodes(self, seq: int) -> None:
        registry = self._state.registry
        if registry is not None and seq and not self.lock.no_wait:
            behind = registry.wait_applied(seq, DNODE_APPLY_WAIT_S)
            if behind:
                log.warning("dnodes %s have not applied catalog change %d yet (they will "
                            "before they serve it)", behind, seq)  # fmt: skip

    def create_children(self, session: Session, target: str, table: pa.Table) -> int:
        """A cluster's mnode: create the missing child tables a dnode's write through
        super table `target` names (`table`: its tbname and tag columns), as `session`'s
        user; the catalog change the dnode waits for (the last one when nothing was
        missing any more), once the ready dnodes applied it."""
        state = self._state
        state.logged.seq = 0
        writes.create_children(state, session, target, table)
        seq = state.logged.seq or self.last_change()
        self._wait_dnodes(seq)
        return seq

    def _dispatch(self, stmt: st.Statement, session: Session) -> Result:
        state = self._state
        if isinstance(stmt, Insert):
            try:
                return writes.insert(state, session, stmt)
            except writes.TablesToCreate:
                raise UnsupportedStatement(
                    "this INSERT creates child tables, which the cluster's mnode keeps: "
                    "run it on the mnode, or create the tables there first"
                ) from None
        handler = _DDL.get(type(stmt))
        if handler is not None:
            if state.role == "dnode":
                raise UnsupportedStatement(
                    f"{type(stmt).__name__} changes the catalog, which the cluster's mnode "
                    "keeps: run it on the mnode (a dnode serves writes and reads of its "
                    "vgroups)"
                )
            with state.lock.exclusive():
                return handler(state, session, stmt)
        handler = _READS.get(type(stmt))
        if handler is None:
            raise UnsupportedStatement(f"{type(stmt).__name__} statements are not supported")
        with state.lock.shared():
            return handler(state, session, stmt)

    def write(
        self, target: str, data: pa.Table | pa.RecordBatch, session: Session | None = None,
        *, validated: bool = False,
    ) -> int:  # fmt: skip
        """Fast path: append Arrow rows to `[db.]table`, or to `[db.]stable` with a `tbname`
        column (and tag columns to create missing child tables). Returns rows written.
        The data is validated in full first (server/core/arrow_check.py), unless the caller
        did that already (`validated`: the Write call decodes with `arrow_check.decode`)."""
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        if not validated:
            arrow_check.check_table(table)
        session = session or self.session
        try:
            return writes.write_arrow(self._state, session, target, table)
        except writes.TablesToCreate:
            if self._make_tables is None or self._replica is None:
                raise
        # A dnode: the mnode creates the missing child tables (a catalog change like
        # any DDL); once that change is applied here, the write finds them.
        with self._state.lock.shared():
            naming = writes.naming_columns(self._state, session, target, table)
        seq = self._make_tables(session, target, naming)
        if not self._replica.wait(seq, DNODE_APPLY_WAIT_S):
            raise ServerUnavailable(
                f"the mnode created the child tables of this write (catalog change {seq}) "
                f"but this dnode has not applied the change within {DNODE_APPLY_WAIT_S:g} s; "
                "retry the write"
            )
        return writes.write_arrow(self._state, session, target, table)

    def write_group(
        self, target: str, tables: list[pa.Table], session: Session | None = None
    ) -> list[int | Error]:
        """Writes of one session to `target` that arrived together (validated, as
        `write(..., validated=True)` takes them): appended as one when every one passes
        (group commit: writes.write_arrow_group), else one by one. Per write, in order,
        its rows or the error `write` would have raised for it; after one refused as
        VgroupUnavailable, the others are refused too (a Writes stream's order). Within
        the lock's no-wait mode (the event loop) only the group is tried: writing one by
        one raises WouldBlock before any, so that a worker, doing it all again, writes
        none twice."""
        session = session or self.session
        try:
            return list(writes.write_arrow_group(self._state, session, target, tables))
        except (writes.GroupRefused, writes.TablesToCreate):
            pass  # nothing was written
        except VgroupUnavailable:
            if len(tables) == 1:
                raise
            # refused before anything was written (State.write_entries checks every
            # vgroup first): one by one, the writes before the one naming the vgroup
            # are written, it is refused, and so are those after it
        if self._state.lock.no_wait:
            raise WouldBlock
        done: list[int | Error] = []
        refused = writes.Refused()
        for table in tables:
            if refused.first is not None:  # a stream's rule: nothing after it
                done.append(refused.later())
                continue
            try:
                done.append(self.write(target, table, session, validated=True))
            except Error as exc:
                done.append(exc)
            refused.note(done[-1:])
        return done

    def read_topic(
        self, topic: str, vgroup: int, from_version: int, max_rows: int,
        max_bytes: int = READ_BYTES,
    ) -> tuple[list[TopicItem], int]:  # fmt: skip
        """Evaluate `topic` over vgroup's WAL from `from_version`; returns the blocks and
        meta events found and the next version to read."""
        with self._state.lock.shared():
            return read_topic(self._state, topic, vgroup, from_version, max_rows, max_bytes)

    def read_topics(
        self, waiting: Waiting | Collection[str], vgroup: int, from_version: int,
        max_bytes: int = READ_BYTES,
    ) -> tuple[dict[str, list[TopicItem]], int]:  # fmt: skip
        """The shared pass (topic_reader.read_topics): what `read_topic` answers for each
        subscription waiting (by topic, or a list of names) from `from_version`, the
        entries read and decoded once. A topic dropped meanwhile is left out."""
        if not isinstance(waiting, Mapping):
            waiting = waiting_of(waiting)
        with self._state.lock.shared():
            return read_topics(self._state, waiting, vgroup, from_version, max_bytes)

    def topic_vgroups(self, topic: str) -> tuple[str, list[int]]:
        """The database of `topic` and its vgroups; TopicNotFound when there is none."""
        with self._state.lock.shared():
            db = self._topic_db(topic)
            return db, list(self._state.catalog.database(db).vgroups)

    def _topic_db(self, topic: str) -> str:
        found = self._state.catalog.topics.get(topic_of(topic))
        if found is None:
            raise no_topic(topic_of(topic))
        return found.db

    def vnode_of(self, topic: str, vgroup: int) -> Vnode:
        """The vnode of one vgroup of `topic`; TopicNotFound / NotFoundError otherwise."""
        with self._state.lock.shared():
            db = self._topic_db(topic)
            vgroups = self._state.catalog.database(db).vgroups
            if vgroup not in vgroups:
                raise NotFoundError(f"vgroup {vgroup} is not a vgroup of topic {topic} "
                                    f"(database {db} has vgroups {list(vgroups)})")  # fmt: skip
            return self._state.vnode(vgroup)

    def close(self) -> None:
        state = self._state
        try:
            with state.lock.exclusive():
                # No DDL event lies beyond these versions, so the next start replays
                # nothing, except in vgroups whose events the catalog failed to commit.
                checked = {
                    v: n.wal.last_version
                    for v, n in state.vnodes.items()
                    if v not in state.unapplied
                }
                try:
                    if state.role != "dnode":  # a dnode's process closes what it opened
                        close_all(state.vnodes.values())
                        state.store.commit(state.catalog, [], checked)
                finally:
                    state.store.close()
        finally:
            if state.coordinator is not None:
                state.coordinator.close_store()
            if state.scheduler is not None:
                state.scheduler.close()
            if self._lock is not None:
                self._lock.release()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_state(
    path: Path, clock: Clock, scheduler: Scheduler | None, limits: Limits,
    hosted: dict[int, Vnode] | None,
) -> State:  # fmt: skip
    store = CatalogStore(path / CATALOG_FILE)
    vnodes: dict[int, Vnode] = {}
    try:
        catalog, applied = store.load()
        if hosted is not None:  # a dnode: its replica appended every event it applied
            return State(path, catalog, store, hosted, clock, scheduler, limits=limits,
                         role="dnode")  # fmt: skip
        vnodes = open_vnodes(path, catalog.databases.values(), clock=clock, scheduler=scheduler)
        state = State(path, catalog, store, vnodes, clock, scheduler, limits=limits)
        _replay(state, applied)
    except BaseException:
        close_all(vnodes.values())
        store.close()
        raise
    return state


def _replay(state: State, applied: dict[int, int]) -> None:
    """Apply DDL events that reached a WAL but not the catalog (a crash in between)."""
    for vgroup, vnode in state.vnodes.items():
        reader = vnode.reader()
        # retention may have deleted versions past the last applied one: they held no
        # event the catalog lacks (an unapplied event's segment would be deleted only
        # after it, and the catalog would then no longer need it anyway)
        start = max(applied.get(vgroup, 0) + 1, reader.first_version)
        keys: list[Any] = []
        for records in reader.batches(start):
            for rec in records:
                if rec.entry_type is EntryType.META:
                    keys += apply(state.catalog, rec.json())
        if vnode.wal.last_version >= start:
            state.store.commit(state.catalog, dict.fromkeys(keys), {vgroup: vnode.wal.last_version})
