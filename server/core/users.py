"""Users and the SUBSCRIBE right: CREATE/ALTER/DROP USER and GRANT/REVOKE SUBSCRIBE on
the catalog, and the check that subscribe, heartbeat and poll make.

Only root runs these statements. `root` is built in (its password is the server's
setting, server/mnode/auth.py) and cannot be altered, dropped, granted or revoked. A user may
consume a topic when it is root (or a superuser), created the topic, or was granted
SUBSCRIBE on it. Other SQL is open to every user: there are no database privileges yet.

The rights check reads `state.catalog` without the engine's lock: it runs on the event
loop at every heartbeat, and it only looks up two records, which DDL replaces whole
(never mutates), so a reader sees either the old record or the new one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sqltopic.errors import (
    AlreadyExistsError,
    InvalidValueError,
    NoPermission,
    NotFoundError,
)
from sqltopic.server.common.result import Result, Session
from sqltopic.server.core.privileges import Rights
from sqltopic.server.core.state import State
from sqltopic.server.mnode.auth import ROOT_USER
from sqltopic.server.mnode.coordinator import Member
from sqltopic.server.mnode.passwords import check_password, hash_password, new_salt
from sqltopic.sql import statements as st
from sqltopic.sql.model import Catalog, Topic, User, no_topic
from sqltopic.sql.names import check_name
from sqltopic.sql.topic.params import topic_of


def create_user(state: State, session: Session, stmt: st.CreateUser) -> Result:
    _require_root(session, "CREATE USER")
    name = stmt.name
    if name == ROOT_USER:
        raise AlreadyExistsError("user root already exists: it is the built-in superuser")
    if name in state.catalog.users:
        raise AlreadyExistsError(f"user {name} already exists; ALTER USER changes its password")
    check_name("user", name)
    check_password(name, stmt.password)
    salt = new_salt()
    user = User(name, hash_password(stmt.password, salt), salt, False, state.now_us())
    state.catalog.users[name] = user
    state.commit([_key(name)])
    return Result()


def alter_user(state: State, session: Session, stmt: st.AlterUser) -> Result:
    """A new password (and salt): the user's open sessions end (server/mnode/auth.py)."""
    _require_root(session, "ALTER USER")
    if stmt.name == ROOT_USER:
        raise NoPermission(
            "the password of root is the server's setting (--root-password or "
            "$SQLTOPIC_ROOT_PASSWORD): restart the server with the new one"
        )
    user = _user(state.catalog, stmt.name)
    check_password(user.name, stmt.password)
    salt = new_salt()
    changed = replace(user, password_hash=hash_password(stmt.password, salt), salt=salt)
    state.catalog.users[user.name] = changed
    state.commit([_key(user.name)])
    return Result()


def drop_user(state: State, session: Session, stmt: st.DropUser) -> Result:
    """The user's sessions end; topics it created stay (owned by nobody now: a later
    user of the same name does not inherit them, see `may_subscribe`)."""
    _require_root(session, "DROP USER")
    if stmt.name == ROOT_USER:
        raise NoPermission("user root cannot be dropped: it is the superuser")
    user = _user(state.catalog, stmt.name)
    del state.catalog.users[user.name]
    state.commit([_key(user.name)])
    return Result()


def grant(state: State, session: Session, stmt: st.Grant) -> Result:
    """GRANT or REVOKE SUBSCRIBE; granting twice or revoking what was not granted
    changes nothing. A revoke reaches a running consumer at its next heartbeat."""
    verb = "REVOKE" if stmt.revoke else "GRANT"
    _require_root(session, verb)
    topic = state.catalog.topic(stmt.topic)
    if stmt.user == ROOT_USER:
        raise InvalidValueError(
            f"{verb} SUBSCRIBE names root, the superuser: it may consume every topic"
        )
    user = _user(state.catalog, stmt.user)
    # grants of topics since dropped (or dropped and created again) go
    granted = {t: us for t, us in user.subscribe.items() if _current(state.catalog, t, us)}
    if stmt.revoke:
        granted.pop(topic.name, None)
    else:
        granted[topic.name] = topic.create_us
    state.catalog.users[user.name] = replace(user, subscribe=granted)
    state.commit([_key(user.name)])
    return Result()


def check_subscribe(state: State, user: str, topic: str, *, hide: bool = True) -> None:
    """TopicNotFound or NoPermission unless `user` may consume `topic`: TopicNotFound
    too, with `hide`, when it may not even read what the topic reads (names do not
    leak; a consumer already subscribed to it is told NoPermission)."""
    catalog = state.catalog  # read once: a failed commit replaces the whole catalog
    topic = topic_of(topic)  # a binding's rights are its topic's
    found = catalog.topic(topic)
    if not may_consume(catalog, user, found):
        if hide and not Rights(state, user).reads_topic_source(found):
            raise no_topic(topic)
        raise NoPermission(
            f"user {user} may not consume topic {topic}: only root, its creator "
            f"({found.owner}) and users granted SUBSCRIBE on it may (as root: GRANT "
            f"SUBSCRIBE ON {topic} TO {user})"
        )


def check_consumer_user(member: Member, user: str) -> None:
    """NoPermission unless `user` may act as consumer `member`: a consumer id belongs to
    the user who created it, and only that user (or root) may heartbeat, poll, commit,
    re-subscribe, unsubscribe or close it."""
    if user not in (member.user, ROOT_USER):
        raise NoPermission(
            f"consumer {member.id} belongs to user {member.user}, not {user}: act only on "
            "your own consumers (subscribe to get one)"
        )


def check_evict(member: Member, user: str) -> None:
    """NoPermission unless `user` may evict `member` with a standalone commit: root, or
    the member's own user (so a user evicts only groups whose every live member is its)."""
    if user not in (member.user, ROOT_USER):
        raise NoPermission(
            f"a commit with evict by user {user} would remove consumer {member.id} of user "
            f"{member.user} from group {member.group}: only root or the user of every live "
            "member may evict; close those consumers first"
        )


def may_subscribe(state: State, user: str, topic: str) -> bool:
    """Whether `user` may consume `topic` (False when there is no such topic)."""
    catalog = state.catalog
    found = catalog.topics.get(topic_of(topic))
    return found is not None and may_consume(catalog, user, found)


def may_consume(catalog: Catalog, user: str, topic: Topic) -> bool:
    if user == ROOT_USER:
        return True
    record = catalog.users.get(user)
    if record is None:
        return False
    if record.superuser:
        return True
    # the creator, unless the topic is older than the user: a dropped namesake made it
    if topic.owner == user and topic.create_us >= record.create_us:
        return True
    return record.subscribe.get(topic.name) == topic.create_us


def lookup(state: State) -> Callable[[str], User | None]:
    """A user's record as the catalog now holds it, for logins (server/mnode/auth.py); read
    through `state` at each call, since a failed commit replaces the catalog object."""

    def find(name: str) -> User | None:
        return state.catalog.users.get(name)

    return find


def _current(catalog: Catalog, topic: str, create_us: int) -> bool:
    found = catalog.topics.get(topic)
    return found is not None and found.create_us == create_us


def _require_root(session: Session, statement: str) -> None:
    if session.user != ROOT_USER:
        raise NoPermission(
            f"{statement} needs the superuser: user {session.user} may not run it; log in as root"
        )


def _user(catalog: Catalog, name: str) -> User:
    user = catalog.users.get(name)
    if user is None:
        raise NotFoundError(f"user {name} does not exist; SHOW USERS lists the users")
    return user


def _key(name: str) -> tuple[str, str, str]:
    return ("user", "", name)
