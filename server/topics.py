"""CREATE TOPIC, DROP TOPIC and DROP CONSUMER GROUP on the catalog."""

from __future__ import annotations

from sqltopic.errors import AlreadyExistsError, SchemaInUseError, TopicNotFound
from sqltopic.server.coordinator import Member
from sqltopic.server.result import Result, Session
from sqltopic.server.state import State
from sqltopic.sql import statements as st
from sqltopic.sql.topic import compile_topic


def create_topic(state: State, session: Session, stmt: st.CreateTopic) -> Result:
    if stmt.name in state.catalog.topics:
        if stmt.if_not_exists:
            return Result()
        raise AlreadyExistsError(f"topic {stmt.name} already exists; use IF NOT EXISTS")
    topic = compile_topic(
        stmt, state.catalog, current_db=session.db, owner=session.user, now_us=state.now_us()
    )
    state.catalog.topics[topic.name] = topic
    state.commit([("topic", "", topic.name)])
    return Result()


def drop_topic(state: State, session: Session, stmt: st.DropTopic) -> Result:
    if stmt.name not in state.catalog.topics:
        if stmt.if_exists:
            return Result()
        raise TopicNotFound(f"topic {stmt.name} does not exist")
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
        raise TopicNotFound(f"topic {stmt.topic} does not exist")
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
        state.vnode(vgroup).offsets.forget(topic, group)
