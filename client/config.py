"""The consumer's configuration: the dict of docs/client.md (TDengine/Kafka keys, string values)
parsed and checked into a frozen `ConsumerConfig`.

Every key is known here with its default, its type and its allowed values, so a typo or
a bad value fails at `Consumer(config)` with a `ConfigError` that names the key, the value
and what is allowed, rather than as odd behaviour later. TLS takes Kafka's keys
(`security.protocol`, `ssl.*.location`); `consumer_transport` reads their PEM files.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, cast

from sqltopic.client.tls import CONSUMER_NAMES, TlsFiles, Transport, load_transport
from sqltopic.errors import ConfigError

OffsetResetName = Literal["earliest", "latest", "none"]
SecurityProtocol = Literal["plaintext", "ssl"]
GroupType = Literal["vgroup", "exclusive", "broadcast", "shared", "key_shared"]
# Kafka's share.acquire.mode: whole WAL entries per lease, or at most max.poll.rows rows.
AcquireMode = Literal["batch_optimized", "record_limit"]
GROUP_TYPES: tuple[GroupType, ...] = ("vgroup", "exclusive", "broadcast", "shared", "key_shared")
# Group types whose consumers acknowledge rows instead of committing offsets.
SHARING_TYPES: frozenset[GroupType] = frozenset({"shared", "key_shared"})

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6030
# How long a vnode holds a poll that found nothing (fetch.max.wait.ms): a held poll costs
# the server nothing while it waits (docs/architecture.md, "The shared pass") and answers
# as soon as rows arrive, so the wait only bounds how often an idle consumer polls again:
# a minute makes 1,000 idle consumers a few dozen calls a second.
DEFAULT_FETCH_MAX_WAIT_MS = 60_000
# TDengine's limits: a group id is part of the subscription key `group:topic`.
GROUP_ID_MAX = 192
CLIENT_ID_MAX = 255
# Millisecond and row settings travel as int32 in the protocol.
INT32_MAX = 2**31 - 1
SESSION_TIMEOUT_RANGE = (6_000, 1_800_000)
MIN_MAX_POLL_INTERVAL_MS = 1_000
MIN_HEARTBEAT_INTERVAL_MS = 1_000
# ack.timeout.ms and max.deliveries: the server's ranges (server/mnode/share_settings.py).
ACK_TIMEOUT_RANGE_MS = (1_000, 3_600_000)
MAX_MAX_DELIVERIES = 1_000_000
# difflib ratio above which an unknown key is named as a likely typo of a known one.
TYPO_SIMILARITY = 0.85


@dataclass(frozen=True)
class ConsumerConfig:
    """A checked consumer configuration; field names are the keys with `_` for `.`."""

    group_id: str
    server: str = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
    user: str = "root"
    password: str = "taosdata"
    client_id: str = ""
    auto_offset_reset: OffsetResetName = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    session_timeout_ms: int = 12_000
    max_poll_interval_ms: int = 300_000
    heartbeat_interval_ms: int = 3_000
    fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS
    min_poll_rows: int = 4_096
    max_poll_rows: int | None = None  # None: no limit
    msg_with_table_name: bool = True
    security_protocol: SecurityProtocol = "plaintext"
    group_type: GroupType = "vgroup"
    ssl_ca_location: str | None = None  # None: gRPC's default roots
    ssl_certificate_location: str | None = None  # mutual TLS, with ssl.key.location
    ssl_key_location: str | None = None
    # a shared group's settings (its first member fixes them; 0 / "": the server's default)
    ack_timeout_ms: int = 0
    max_deliveries: int = 0
    dead_letter_table: str = ""
    group_key: str = ""  # key_shared: "" is the table
    share_acquire_mode: AcquireMode | None = None  # None: batch_optimized


# --- value parsers: each takes (key, raw value) and returns the typed value -----------


def _bad(key: str, value: object, allowed: str) -> ConfigError:
    return ConfigError(f"{key}: {value!r} is not {allowed}")


def _text(key: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _bad(key, value, "a string")
    return str(value)


def _int_in(low: int, high: int) -> Callable[[str, object], int]:
    def parse(key: str, value: object) -> int:
        number = _integer(key, value)
        if not low <= number <= high:
            raise ConfigError(f"{key}: {number} is out of range {low}..{high}")
        return number

    return parse


def _integer(key: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value.strip())
    raise _bad(key, value, "an integer (a number or a string of digits)")


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text in {"true", "1"}:
        return True
    if text in {"false", "0"}:
        return False
    raise _bad(key, value, "a boolean: true or false (any case), 1 or 0")


def _one_of(*values: str) -> Callable[[str, object], str]:
    """A parser of one of `values` (any case, spaces around ignored)."""

    def parse(key: str, value: object) -> str:
        text = value.strip().lower() if isinstance(value, str) else None
        if text in values:
            return text
        raise _bad(key, value, f"one of {', '.join(values)}")

    return parse


def _protocol(key: str, value: object) -> SecurityProtocol:
    # Kafka's spelling is upper case (PLAINTEXT, SSL); its SASL variants are not offered
    text = value.strip().lower() if isinstance(value, str) else None
    if text in ("plaintext", "ssl"):
        return cast("SecurityProtocol", text)
    raise _bad(key, value, "one of plaintext, ssl (any case)")


def _pem_path(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(key, value, "the path of a PEM file")
    return value


def _group_id(key: str, value: object) -> str:
    text = _text(key, value)
    if not 1 <= len(text) <= GROUP_ID_MAX:
        raise _bad(key, value, f"1..{GROUP_ID_MAX} characters long")
    if ":" in text:
        raise _bad(key, value, "allowed: a group id may not contain ':'")
    return text


def _client_id(key: str, value: object) -> str:
    text = _text(key, value)
    if len(text) > CLIENT_ID_MAX:
        raise _bad(key, value, f"at most {CLIENT_ID_MAX} characters long")
    return text


def _server(key: str, value: object) -> str:
    text = _text(key, value).strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise _bad(key, value, "an address host:port, e.g. 127.0.0.1:6030")
    _int_in(1, 65_535)(f"{key} port", port)
    return text


def _host(key: str, value: object) -> str:
    text = _text(key, value).strip()
    if not text or ":" in text.strip("[]"):
        raise _bad(key, value, "a host name or IPv4 address (the port is td.connect.port)")
    return text


# The keys of docs/client.md, each with the field it sets and its parser.
KEYS: dict[str, tuple[str, Callable[[str, object], object]]] = {
    "server": ("server", _server),
    "user": ("user", _text),
    "password": ("password", _text),
    "group.id": ("group_id", _group_id),
    "client.id": ("client_id", _client_id),
    "group.type": ("group_type", _one_of(*GROUP_TYPES)),
    "auto.offset.reset": ("auto_offset_reset", _one_of("earliest", "latest", "none")),
    "enable.auto.commit": ("enable_auto_commit", _bool),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", _int_in(0, INT32_MAX)),
    "session.timeout.ms": ("session_timeout_ms", _int_in(*SESSION_TIMEOUT_RANGE)),
    "max.poll.interval.ms": ("max_poll_interval_ms", _int_in(MIN_MAX_POLL_INTERVAL_MS, INT32_MAX)),
    "heartbeat.interval.ms": (
        "heartbeat_interval_ms",
        _int_in(MIN_HEARTBEAT_INTERVAL_MS, INT32_MAX),
    ),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _int_in(0, INT32_MAX)),
    "min.poll.rows": ("min_poll_rows", _int_in(1, INT32_MAX)),
    "max.poll.rows": ("max_poll_rows", _int_in(1, INT32_MAX)),
    "msg.with.table.name": ("msg_with_table_name", _bool),
    "security.protocol": ("security_protocol", _protocol),
    "ssl.ca.location": ("ssl_ca_location", _pem_path),
    "ssl.certificate.location": ("ssl_certificate_location", _pem_path),
    "ssl.key.location": ("ssl_key_location", _pem_path),
    "ack.timeout.ms": ("ack_timeout_ms", _int_in(*ACK_TIMEOUT_RANGE_MS)),
    "max.deliveries": ("max_deliveries", _int_in(0, MAX_MAX_DELIVERIES)),
    "dead.letter.table": ("dead_letter_table", _text),
    "group.key": ("group_key", _text),
    "share.acquire.mode": ("share_acquire_mode", _one_of("batch_optimized", "record_limit")),
}
# The keys of a shared group's settings, with their fields: other groups refuse them.
SHARE_KEYS = {
    "ack.timeout.ms": "ack_timeout_ms",
    "max.deliveries": "max_deliveries",
    "dead.letter.table": "dead_letter_table",
    "group.key": "group_key",
}
# Keys that only consumers of shared groups take: the group's settings and their own.
SHARING_ONLY_KEYS = SHARE_KEYS | {"share.acquire.mode": "share_acquire_mode"}
# The keys that only TLS (security.protocol ssl) uses, with their fields.
SSL_KEYS = {
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
}
# TDengine's connection keys: each sets the same field as the key it stands for.
ALIASES: dict[str, str] = {"td.connect.user": "user", "td.connect.pass": "password"}
HOST_KEY = "td.connect.ip"
PORT_KEY = "td.connect.port"


def parse_config(config: Mapping[str, object]) -> ConsumerConfig:
    """`config` checked: unknown keys, bad values and missing `group.id` raise ConfigError."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"consumer config: {config!r} is not a dict of key -> value")
    values: dict[str, object] = {}
    given: dict[str, str] = {}  # field -> the key that set it
    for key, value in config.items():
        if key in (HOST_KEY, PORT_KEY):
            continue
        name = ALIASES.get(key, key)
        if name not in KEYS:
            raise _unknown(key, value)
        field, parse = KEYS[name]
        if field in given:
            raise ConfigError(f"{key}: {value!r} repeats {given[field]}; give one of them")
        given[field] = key
        values[field] = parse(key, value)
    server = _aliased_server(config)
    if server is not None:
        if "server" in values:
            raise ConfigError(f"{HOST_KEY}: {server!r} repeats server; give one of them")
        values["server"] = server
    if "group_id" not in values:
        raise ConfigError("group.id: missing; every consumer needs a group id (1..192 chars)")
    return _checked(ConsumerConfig(**values))  # type: ignore[arg-type]


def offsets_group_of(config: ConsumerConfig) -> str:
    """The group a consumer polls and commits as: its group.id, or in a broadcast group
    its own lane `group:client` (the server names the same in its Subscribe answer)."""
    if config.group_type == "broadcast":
        return f"{config.group_id}:{config.client_id}"
    return config.group_id


def _aliased_server(config: Mapping[str, object]) -> str | None:
    """`td.connect.ip` + `td.connect.port` as one `server` address (either may default)."""
    if HOST_KEY not in config and PORT_KEY not in config:
        return None
    host = _host(HOST_KEY, config[HOST_KEY]) if HOST_KEY in config else DEFAULT_HOST
    port = _int_in(1, 65_535)(PORT_KEY, config.get(PORT_KEY, DEFAULT_PORT))
    return f"{host}:{port}"


def _checked(config: ConsumerConfig) -> ConsumerConfig:
    """Checks that involve two keys."""
    if config.heartbeat_interval_ms >= config.session_timeout_ms:
        raise ConfigError(
            f"heartbeat.interval.ms: {config.heartbeat_interval_ms} is out of range "
            f"{MIN_HEARTBEAT_INTERVAL_MS}..{config.session_timeout_ms - 1} "
            f"(below session.timeout.ms {config.session_timeout_ms})"
        )
    if config.group_type == "broadcast" and not config.client_id:
        raise ConfigError(
            "client.id: required with group.type broadcast (each consumer's offsets are "
            "kept under it); give every consumer of the group its own, kept across restarts"
        )
    if config.group_type not in SHARING_TYPES:
        for key, field in SHARING_ONLY_KEYS.items():
            if getattr(config, field):
                raise ConfigError(
                    f"{key}: a setting of shared groups; this consumer's group.type is "
                    f"{config.group_type} (set group.type shared, or drop {key})"
                )
    if config.group_key and config.group_type == "shared":
        raise ConfigError(
            "group.key: a setting of key_shared groups; this consumer's group.type is shared "
            "(set group.type key_shared, or drop group.key)"
        )
    _check_ssl(config)
    return config


def _check_ssl(config: ConsumerConfig) -> None:
    """ssl.* only with security.protocol ssl (a CA given to a plain-text consumer would
    be silently ignored), and the client certificate only with its key."""
    for name, field in SSL_KEYS.items():
        value = getattr(config, field)
        if value is not None and config.security_protocol != "ssl":
            raise ConfigError(
                f"{name}: {value!r} is given while security.protocol is plaintext; set "
                f"security.protocol to ssl, or leave {name} out"
            )
    cert, key = config.ssl_certificate_location, config.ssl_key_location
    if cert is not None and key is None:
        raise _half_pair("ssl.certificate.location", cert, "ssl.key.location")
    if key is not None and cert is None:
        raise _half_pair("ssl.key.location", key, "ssl.certificate.location")


def _half_pair(given: str, value: str, missing: str) -> ConfigError:
    return ConfigError(
        f"{given}: {value!r} is given without {missing}; mutual TLS needs both the "
        "client's certificate and its private key (PEM files)"
    )


def consumer_transport(config: ConsumerConfig) -> Transport:
    """The consumer's transport: plain text, or TLS with its `ssl.*` files read and
    checked (ConfigError names the key of an unreadable or malformed file)."""
    files = TlsFiles(
        config.security_protocol == "ssl",
        config.ssl_ca_location,
        config.ssl_certificate_location,
        config.ssl_key_location,
    )
    return load_transport(files, CONSUMER_NAMES)


def _unknown(key: object, value: object) -> ConfigError:
    known = sorted([*KEYS, *ALIASES, HOST_KEY, PORT_KEY])
    # close enough to be a typo or a case slip, not just another td.connect.* key
    close = difflib.get_close_matches(str(key).lower(), known, n=1, cutoff=TYPO_SIMILARITY)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return ConfigError(f"{key}: unknown consumer config key (value {value!r}){hint}")


def config_keys() -> list[str]:
    """Every accepted key, aliases included (for docs and tests)."""
    return [*KEYS, *ALIASES, HOST_KEY, PORT_KEY]
