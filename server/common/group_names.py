"""Names of consumer groups: the rules for `group.id` and `client.id`, the group types,
and the offsets keys of broadcast consumers.

A `broadcast` group gives every consumer every row with offsets of its own, kept under
its `client.id`: each consumer is coordinated, polls and commits as the group's *lane*
`<group.id>:<client.id>`. A group id never holds ':' (TDengine's rule), so the first ':'
splits a lane back into its group and client, and no lane is ever another group's id.
Lanes are what vnodes store offsets under and what SHOW SUBSCRIPTIONS lists.
"""

from __future__ import annotations

from typing import Literal, get_args

from sqltopic.errors import ConfigError, excerpt

# group.id limits (TDengine: 192 characters; ':' separates group and topic in its keys).
MAX_GROUP_ID = 192
MAX_CLIENT_ID = 255
LANE_SEP = ":"

GroupType = Literal["vgroup", "exclusive", "broadcast", "shared", "key_shared"]
GROUP_TYPES: tuple[GroupType, ...] = get_args(GroupType)
DEFAULT_GROUP_TYPE: GroupType = "vgroup"
# The types whose consumers all read every vgroup, rows leased to them one by one
# (server/vnode/share_window.py), instead of each vgroup having one owner.
SHARING_TYPES: frozenset[GroupType] = frozenset({"shared", "key_shared"})


def shares(mode: GroupType) -> bool:
    """Whether a group of `mode` leases rows to all its consumers (no vgroup owners)."""
    return mode in SHARING_TYPES


def group_type(value: str) -> GroupType:
    """The group type `value` names ("" is the default); ConfigError otherwise."""
    if not value:
        return DEFAULT_GROUP_TYPE
    for known in GROUP_TYPES:
        if value == known:
            return known
    raise ConfigError(
        f"group.type: unknown value {excerpt(value)}; use one of {', '.join(GROUP_TYPES)}"
    )


def lane(group: str, client_id: str) -> str:
    """The offsets key of a broadcast consumer."""
    return f"{group}{LANE_SEP}{client_id}"


def group_of(key: str) -> str:
    """The group id of a group's key or lane."""
    return key.partition(LANE_SEP)[0]


def of_group(key: str, group: str) -> bool:
    """Whether `key` is `group` or one of its lanes."""
    return group_of(key) == group


def check_offsets_group(key: str) -> None:
    """ConfigError unless `key` names a group or a broadcast lane of one (what Poll,
    Commit and Committed carry as their group)."""
    group, sep, client_id = key.partition(LANE_SEP)
    check_group_id(group)
    if sep:
        check_client_id(client_id, required=True)


def check_group_id(group: str) -> None:
    """ConfigError unless `group` is a consumer group's name: 1..192 characters, no ':'
    (TDengine's key separator), no control characters."""
    if not group:
        raise ConfigError("group.id: required; give the consumer group's name")
    if LANE_SEP in group:
        raise ConfigError(f"group.id: {excerpt(group)} may not contain ':'")
    check_text("group.id", group, MAX_GROUP_ID)


def check_client_id(client_id: str, required: bool = False) -> None:
    if required and not client_id:
        raise ConfigError(
            "client.id: required by group.type broadcast (each consumer's offsets are kept "
            "under it); give every consumer of the group its own, kept across restarts"
        )
    check_text("client.id", client_id, MAX_CLIENT_ID)


def check_text(key: str, value: str, max_length: int) -> None:
    """ConfigError when a consumer's setting is longer than `max_length` characters or
    holds control characters (NUL, newlines: they would corrupt SHOW output and logs)."""
    if len(value) > max_length:
        raise ConfigError(
            f"{key}: {excerpt(value)} is {len(value)} characters long; the limit is {max_length}"
        )
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in value):
        raise ConfigError(f"{key}: {excerpt(value)} holds control characters; remove them")
