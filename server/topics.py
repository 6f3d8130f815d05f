"""CREATE TOPIC, DROP TOPIC and DROP CONSUMER GROUP on the catalog."""

from __future__ import annotations

from sqltopic.errors import AlreadyExistsError, TopicNotFound
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
    del state.catalog.topics[stmt.name]
    state.commit([("topic", "", stmt.name)])
    return Result()


def drop_consumer_group(state: State, session: Session, stmt: st.DropConsumerGroup) -> Result:
    """The embedded engine keeps no consumer groups (the server's mnode does): once the
    topic is known, there is nothing to remove."""
    if stmt.topic not in state.catalog.topics and not stmt.if_exists:
        raise TopicNotFound(f"topic {stmt.topic} does not exist")
    return Result()
