"""CREATE TOPIC, DROP TOPIC and DROP CONSUMER GROUP on the catalog."""

from __future__ import annotations

from sqlglot import exp

from sqltopic.errors import AlreadyExistsError, NoPermission, SchemaInUseError
from sqltopic.server.common.result import Result, Session
from sqltopic.server.core.privileges import Rights
from sqltopic.server.core.state import State
from sqltopic.server.core.topic_reader import prepare
from sqltopic.server.core.users import may_consume
from sqltopic.server.mnode.access import ALL
from sqltopic.server.mnode.coordinator import Member
from sqltopic.sql import statements as st
from sqltopic.sql.model import Topic, no_topic
from sqltopic.sql.names import check_name
from sqltopic.sql.topic import compile_topic


def create_topic(state: State, session: Session, stmt: st.CreateTopic) -> Result:
    """Needs READ on everything the topic reads: a whole table (a child table, or a
    super or normal table with no narrowing condition), or a whole database."""
    if stmt.name in state.catalog.topics:
        if stmt.if_not_exists:
            return Result()
        raise AlreadyExistsError(f"topic {stmt.name} already exists; use IF NOT EXISTS")
    check_name("topic", stmt.name)
    named = _database_named(stmt, session)
    if named in state.catalog.databases:  # (a missing one: compiling says where)
        state.db_of(session, named)  # NotFoundError before anything else when hidden
    topic = compile_topic(
        stmt, state.catalog, current_db=session.db, owner=session.user, now_us=state.now_us()
    )
    _check_read(state, session, topic)
    state.catalog.topics[topic.name] = topic
    state.commit([("topic", "", topic.name)])
    prepare(state, topic)
    return Result()


def _database_named(stmt: st.CreateTopic, session: Session) -> str | None:
    """The database a CREATE TOPIC reads, as written (or the session's)."""
    if stmt.kind == "database":
        return stmt.db
    if stmt.kind == "stable" and stmt.target is not None:
        return stmt.target.db or session.db
    table = stmt.query.find(exp.Table) if stmt.query is not None else None
    if table is None:
        return session.db
    return table.args["db"].name.lower() if table.args.get("db") else session.db


def _check_read(state: State, session: Session, topic: Topic) -> None:
    rights = Rights(state, session.user)
    db = state.catalog.database(topic.db)
    action = f"CREATE TOPIC {topic.name}"
    if topic.target is None:
        rights.require_whole("read", db, action)
        return
    child = state.catalog.tables.get((db.name, topic.target))
    rights.require("read", db, topic.target, action)
    whole = (
        rights.may("read", db, child)
        if child is not None
        else (rights.scope("read", db, topic.target) == ALL)
    )
    if not whole:
        raise NoPermission(
            f"{action} needs READ on all of {db.name}.{topic.target}; user {session.user}'s "
            "READ covers only the child tables its condition picks (a topic would deliver "
            "the others): create the topic over a child table, or ask for READ on all of it"
        )


def drop_topic(state: State, session: Session, stmt: st.DropTopic) -> Result:
    if stmt.name not in state.catalog.topics:
        if stmt.if_exists:
            return Result()
        raise no_topic(stmt.name)
    topic = state.catalog.topics[stmt.name]
    consumes = may_consume(state.catalog, session.user, topic)
    Rights(state, session.user).require_topic_owner(topic, "DROP TOPIC", consumes)
    live = state.coordinator.subscribers(stmt.name) if state.coordinator else []
    if live and not stmt.force:
        raise SchemaInUseError(
            f"topic {stmt.name} has {_consumers(live)}: unsubscribe or close them first, "
            f"or DROP TOPIC FORCE {stmt.name} (they then get TopicDropped)"
        )
    topic = state.catalog.topics.pop(stmt.name)
    state.commit([("topic", "", stmt.name)])
    _forget_offsets(state, topic.db, stmt.name, None)
    if state.coordinator is not None:
        state.coordinator.forget_topic(stmt.name)
    return Result()


def drop_consumer_group(state: State, session: Session, stmt: st.DropConsumerGroup) -> Result:
    """Removes the group's committed offsets on the topic's vnodes (and, with FORCE, its
    live consumers of the topic)."""
    topic = state.catalog.topics.get(stmt.topic)
    if topic is None:
        if stmt.if_exists:
            return Result()
        raise no_topic(stmt.topic)
    consumes = may_consume(state.catalog, session.user, topic)
    Rights(state, session.user).require_topic_owner(topic, "DROP CONSUMER GROUP", consumes)
    live = state.coordinator.subscribers(topic.name, stmt.group) if state.coordinator else []
    if live and not stmt.force:
        raise SchemaInUseError(
            f"consumer group {stmt.group} on topic {topic.name} has {_consumers(live)}: close "
            f"them first, or DROP CONSUMER GROUP FORCE {stmt.group} ON {topic.name} (they "
            "are removed from the group)"
        )
    if state.coordinator is not None:
        state.coordinator.remove(m.id for m in live)
        state.coordinator.forget_topic(topic.name, stmt.group)
    _forget_offsets(state, topic.db, topic.name, stmt.group)
    return Result()


def _consumers(members: list[Member]) -> str:
    ids = ", ".join(f"{m.id} (group {m.group})" for m in members)
    return f"{len(members)} live consumer{'s' if len(members) > 1 else ''}: {ids}"


def _forget_offsets(state: State, db: str, topic: str, group: str | None) -> None:
    """A dropped topic's (or group's) offsets must not resume a later namesake."""
    database = state.catalog.databases.get(db)
    for vgroup in database.vgroups if database is not None else ():
        if database is not None and database.dnode_of(vgroup) is not None:
            continue  # its dnode forgets them as it applies the change logged below
        state.vnode(vgroup).forget(topic, group)
    if database is not None and database.placement:
        state.commit([], log={"forget": [[db, topic, group]]})
