"""The consumer config of docs/client.md: every key, alias and default, and a ConfigError that
names the key, the value and what is allowed for every bad value; the TLS keys' PEM files
read and checked when a consumer is made."""

from __future__ import annotations

import asyncio
from dataclasses import fields
from pathlib import Path

import pytest
import trustme

from sqltopic import aio
from sqltopic.client.config import (
    KEYS,
    ConsumerConfig,
    config_keys,
    consumer_transport,
    parse_config,
)
from sqltopic.client.consumer import Consumer
from sqltopic.client.state import topic_names
from sqltopic.errors import ConfigError

GROUP = {"group.id": "g1"}

DEFAULTS = {
    "server": "127.0.0.1:6030",
    "user": "root",
    "password": "taosdata",
    "client_id": "",
    "group_type": "vgroup",
    "auto_offset_reset": "latest",
    "enable_auto_commit": True,
    "auto_commit_interval_ms": 5000,
    "session_timeout_ms": 12000,
    "max_poll_interval_ms": 300000,
    "heartbeat_interval_ms": 3000,
    "fetch_max_wait_ms": 60_000,
    "min_poll_rows": 4096,
    "max_poll_rows": None,
    "msg_with_table_name": True,
    "security_protocol": "plaintext",
    "ssl_ca_location": None,
    "ssl_certificate_location": None,
    "ssl_key_location": None,
    "ack_timeout_ms": 0,
    "max_deliveries": 0,
    "dead_letter_table": "",
    "share_acquire_mode": None,
    "group_key": "",
}

# key, value given, field, value parsed
GOOD = [
    ("server", "10.0.0.5:6041", "server", "10.0.0.5:6041"),
    ("server", "[::1]:6030", "server", "[::1]:6030"),
    ("user", "alice", "user", "alice"),
    ("password", "s3cret", "password", "s3cret"),
    ("td.connect.user", "bob", "user", "bob"),
    ("td.connect.pass", "pw", "password", "pw"),
    ("td.connect.ip", "db.example", "server", "db.example:6030"),
    ("td.connect.port", "6041", "server", "127.0.0.1:6041"),
    ("td.connect.port", 7000, "server", "127.0.0.1:7000"),
    ("group.id", "x" * 192, "group_id", "x" * 192),
    ("group.id", 7, "group_id", "7"),
    ("client.id", "c1", "client_id", "c1"),
    ("client.id", 1, "client_id", "1"),
    ("group.type", "exclusive", "group_type", "exclusive"),
    ("group.type", " Vgroup ", "group_type", "vgroup"),
    ("auto.offset.reset", "earliest", "auto_offset_reset", "earliest"),
    ("auto.offset.reset", "LATEST", "auto_offset_reset", "latest"),
    ("auto.offset.reset", "none", "auto_offset_reset", "none"),
    ("enable.auto.commit", "false", "enable_auto_commit", False),
    ("enable.auto.commit", "TRUE", "enable_auto_commit", True),
    ("enable.auto.commit", "0", "enable_auto_commit", False),
    ("enable.auto.commit", 1, "enable_auto_commit", True),
    ("enable.auto.commit", False, "enable_auto_commit", False),
    ("auto.commit.interval.ms", "1000", "auto_commit_interval_ms", 1000),
    ("auto.commit.interval.ms", 0, "auto_commit_interval_ms", 0),
    ("session.timeout.ms", "6000", "session_timeout_ms", 6000),
    ("session.timeout.ms", 1_800_000, "session_timeout_ms", 1_800_000),
    ("max.poll.interval.ms", "1000", "max_poll_interval_ms", 1000),
    ("heartbeat.interval.ms", "1000", "heartbeat_interval_ms", 1000),
    ("heartbeat.interval.ms", 11_999, "heartbeat_interval_ms", 11_999),
    ("fetch.max.wait.ms", "0", "fetch_max_wait_ms", 0),
    ("fetch.max.wait.ms", " 250 ", "fetch_max_wait_ms", 250),
    ("min.poll.rows", "1", "min_poll_rows", 1),
    ("max.poll.rows", "100", "max_poll_rows", 100),
    ("msg.with.table.name", "false", "msg_with_table_name", False),
    ("msg.with.table.name", True, "msg_with_table_name", True),
    ("security.protocol", "SSL", "security_protocol", "ssl"),
    ("security.protocol", "plaintext", "security_protocol", "plaintext"),
    ("security.protocol", " PlainText ", "security_protocol", "plaintext"),
    ("ssl.ca.location", "/etc/sqltopic/ca.pem", "ssl_ca_location", "/etc/sqltopic/ca.pem"),
    ("ssl.certificate.location", "c.pem", "ssl_certificate_location", "c.pem"),
    ("ssl.key.location", "k.pem", "ssl_key_location", "k.pem"),
    ("group.type", "shared", "group_type", "shared"),
    ("ack.timeout.ms", "5000", "ack_timeout_ms", 5000),
    ("max.deliveries", 3, "max_deliveries", 3),
    ("dead.letter.table", "power.dlq", "dead_letter_table", "power.dlq"),
    ("share.acquire.mode", "record_limit", "share_acquire_mode", "record_limit"),
    ("group.key", "location", "group_key", "location"),
    ("share.acquire.mode", " Batch_Optimized", "share_acquire_mode", "batch_optimized"),
]
# What a key of GOOD needs beside it to be valid: the ssl.* keys need TLS on, and the
# client certificate and its key come together.
NEEDS: dict[str, dict[str, object]] = {
    "ssl.ca.location": {"security.protocol": "ssl"},
    "ssl.certificate.location": {"security.protocol": "ssl", "ssl.key.location": "k.pem"},
    "ssl.key.location": {"security.protocol": "ssl", "ssl.certificate.location": "c.pem"},
    "ack.timeout.ms": {"group.type": "shared"},
    "max.deliveries": {"group.type": "shared"},
    "dead.letter.table": {"group.type": "shared"},
    "share.acquire.mode": {"group.type": "key_shared"},
    "group.key": {"group.type": "key_shared"},
}

# extra config, the ConfigError message (exactly)
BAD = [
    (
        {"session.timeout.ms": "100"},
        "session.timeout.ms: 100 is out of range 6000..1800000",
    ),
    (
        {"session.timeout.ms": 1_800_001},
        "session.timeout.ms: 1800001 is out of range 6000..1800000",
    ),
    (
        {"max.poll.interval.ms": 999},
        "max.poll.interval.ms: 999 is out of range 1000..2147483647",
    ),
    (
        {"heartbeat.interval.ms": 999},
        "heartbeat.interval.ms: 999 is out of range 1000..2147483647",
    ),
    (
        {"heartbeat.interval.ms": 12000},
        "heartbeat.interval.ms: 12000 is out of range 1000..11999 (below session.timeout.ms 12000)",
    ),
    (
        {"session.timeout.ms": 6000, "heartbeat.interval.ms": 6000},
        "heartbeat.interval.ms: 6000 is out of range 1000..5999 (below session.timeout.ms 6000)",
    ),
    (
        {"auto.commit.interval.ms": -1},
        "auto.commit.interval.ms: -1 is out of range 0..2147483647",
    ),
    (
        {"fetch.max.wait.ms": "2147483648"},
        "fetch.max.wait.ms: 2147483648 is out of range 0..2147483647",
    ),
    ({"min.poll.rows": 0}, "min.poll.rows: 0 is out of range 1..2147483647"),
    ({"max.poll.rows": "0"}, "max.poll.rows: 0 is out of range 1..2147483647"),
    (
        {"min.poll.rows": "lots"},
        "min.poll.rows: 'lots' is not an integer (a number or a string of digits)",
    ),
    (
        {"min.poll.rows": True},
        "min.poll.rows: True is not an integer (a number or a string of digits)",
    ),
    (
        {"min.poll.rows": 1.5},
        "min.poll.rows: 1.5 is not an integer (a number or a string of digits)",
    ),
    (
        {"enable.auto.commit": "yes"},
        "enable.auto.commit: 'yes' is not a boolean: true or false (any case), 1 or 0",
    ),
    (
        {"msg.with.table.name": 2},
        "msg.with.table.name: 2 is not a boolean: true or false (any case), 1 or 0",
    ),
    (
        {"auto.offset.reset": "smallest"},
        "auto.offset.reset: 'smallest' is not one of earliest, latest, none",
    ),
    ({"user": None}, "user: None is not a string"),
    ({"password": True}, "password: True is not a string"),
    ({"client.id": "c" * 256}, f"client.id: {'c' * 256!r} is not at most 255 characters long"),
    (
        {"group.type": "shard"},
        "group.type: 'shard' is not one of vgroup, exclusive, broadcast, shared, key_shared",
    ),
    (
        {"group.type": 3},
        "group.type: 3 is not one of vgroup, exclusive, broadcast, shared, key_shared",
    ),
    (
        {"group.type": "shared", "ack.timeout.ms": 999},
        "ack.timeout.ms: 999 is out of range 1000..3600000",
    ),
    (
        {"group.type": "shared", "max.deliveries": -1},
        "max.deliveries: -1 is out of range 0..1000000",
    ),
    (
        {"group.type": "shared", "share.acquire.mode": "strict"},
        "share.acquire.mode: 'strict' is not one of batch_optimized, record_limit",
    ),
    (
        {"group.type": "broadcast", "client.id": "b1", "share.acquire.mode": "record_limit"},
        "share.acquire.mode: a setting of shared groups; this consumer's group.type is "
        "broadcast (set group.type shared, or drop share.acquire.mode)",
    ),
    (
        {"group.type": "shared", "group.key": "location"},
        "group.key: a setting of key_shared groups; this consumer's group.type is shared "
        "(set group.type key_shared, or drop group.key)",
    ),
    (
        {"ack.timeout.ms": 5000},
        "ack.timeout.ms: a setting of shared groups; this consumer's group.type is vgroup "
        "(set group.type shared, or drop ack.timeout.ms)",
    ),
    (
        {"group.type": "broadcast"},
        "client.id: required with group.type broadcast (each consumer's offsets are kept under "
        "it); give every consumer of the group its own, kept across restarts",
    ),
    (
        {"server": "localhost"},
        "server: 'localhost' is not an address host:port, e.g. 127.0.0.1:6030",
    ),
    (
        {"server": ":6030"},
        "server: ':6030' is not an address host:port, e.g. 127.0.0.1:6030",
    ),
    ({"server": "h:70000"}, "server port: 70000 is out of range 1..65535"),
    (
        {"server": "h:x"},
        "server port: 'x' is not an integer (a number or a string of digits)",
    ),
    ({"td.connect.port": 0}, "td.connect.port: 0 is out of range 1..65535"),
    (
        {"td.connect.ip": "h:1"},
        "td.connect.ip: 'h:1' is not a host name or IPv4 address (the port is td.connect.port)",
    ),
    (
        {"server": "h:1", "td.connect.ip": "h"},
        "td.connect.ip: 'h:6030' repeats server; give one of them",
    ),
    (
        {"user": "a", "td.connect.user": "b"},
        "td.connect.user: 'b' repeats user; give one of them",
    ),
    (
        {"group.idd": "g"},
        "group.idd: unknown consumer config key (value 'g'); did you mean 'group.id'?",
    ),
    (
        {"Group.Id": "g"},
        "Group.Id: unknown consumer config key (value 'g'); did you mean 'group.id'?",
    ),
    (
        {"security.protocol": "sasl_ssl"},
        "security.protocol: 'sasl_ssl' is not one of plaintext, ssl (any case)",
    ),
    ({"security.protocol": 1}, "security.protocol: 1 is not one of plaintext, ssl (any case)"),
    (
        {"ssl.ca.location": "ca.pem"},
        "ssl.ca.location: 'ca.pem' is given while security.protocol is plaintext; set "
        "security.protocol to ssl, or leave ssl.ca.location out",
    ),
    (
        {"security.protocol": "PLAINTEXT", "ssl.key.location": "k.pem"},
        "ssl.key.location: 'k.pem' is given while security.protocol is plaintext; set "
        "security.protocol to ssl, or leave ssl.key.location out",
    ),
    (
        {"security.protocol": "ssl", "ssl.certificate.location": "c.pem"},
        "ssl.certificate.location: 'c.pem' is given without ssl.key.location; mutual TLS "
        "needs both the client's certificate and its private key (PEM files)",
    ),
    (
        {"security.protocol": "ssl", "ssl.key.location": "k.pem"},
        "ssl.key.location: 'k.pem' is given without ssl.certificate.location; mutual TLS "
        "needs both the client's certificate and its private key (PEM files)",
    ),
    (
        {"security.protocol": "ssl", "ssl.ca.location": " "},
        "ssl.ca.location: ' ' is not the path of a PEM file",
    ),
    (
        {"security.protocol": "ssl", "ssl.ca.location": 5},
        "ssl.ca.location: 5 is not the path of a PEM file",
    ),
    (
        {"ssl.ca.location.path": "ca.pem"},
        "ssl.ca.location.path: unknown consumer config key (value 'ca.pem'); did you mean "
        "'ssl.ca.location'?",
    ),
]


def test_defaults_need_only_a_group_id() -> None:
    config = parse_config(GROUP)
    assert config.group_id == "g1"
    assert {f: getattr(config, f) for f in DEFAULTS} == DEFAULTS


def test_every_field_has_a_key_and_a_default_check() -> None:
    assert {f for f, _ in KEYS.values()} == {f.name for f in fields(ConsumerConfig)}
    assert set(DEFAULTS) | {"group_id"} == {f.name for f in fields(ConsumerConfig)}
    assert {key for key, *_ in GOOD} == set(config_keys())


@pytest.mark.parametrize(("key", "value", "field", "parsed"), GOOD, ids=lambda v: str(v)[:20])
def test_each_key_and_alias_sets_its_field(
    key: str, value: object, field: str, parsed: object
) -> None:
    config = parse_config({**GROUP, **NEEDS.get(key, {}), key: value})
    assert getattr(config, field) == parsed


def test_ip_and_port_aliases_make_one_server() -> None:
    config = parse_config({**GROUP, "td.connect.ip": "10.1.2.3", "td.connect.port": 6041})
    assert config.server == "10.1.2.3:6041"


@pytest.mark.parametrize(("extra", "message"), BAD, ids=lambda v: str(v)[:40])
def test_each_bad_value_names_key_value_and_what_is_allowed(
    extra: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**GROUP, **extra})
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ("", "group.id: '' is not 1..192 characters long"),
        ("g" * 193, f"group.id: {'g' * 193!r} is not 1..192 characters long"),
        ("a:b", "group.id: 'a:b' is not allowed: a group id may not contain ':'"),
        (None, "group.id: None is not a string"),
    ],
)
def test_bad_group_ids(group: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"group.id": group})
    assert str(info.value) == message


def test_missing_group_id_unknown_keys_and_a_non_dict() -> None:
    with pytest.raises(ConfigError, match=r"^group.id: missing; every consumer needs a group"):
        parse_config({"client.id": "c1"})
    with pytest.raises(ConfigError, match=r"^td.connect.db: unknown consumer config key") as info:
        parse_config({**GROUP, "td.connect.db": "power"})
    assert "known keys: ack.timeout.ms, auto.commit.interval.ms, auto.offset.reset," in str(
        info.value
    )
    with pytest.raises(ConfigError, match=r"is not a dict of key -> value"):
        parse_config([("group.id", "g")])  # type: ignore[arg-type]


def test_the_config_is_frozen() -> None:
    config = parse_config(GROUP)
    with pytest.raises(AttributeError):
        config.group_id = "other"  # type: ignore[misc]


def test_topic_lists() -> None:
    assert topic_names(["a", " b ", "a"]) == ["a", "b"]
    assert topic_names(()) == []
    with pytest.raises(ConfigError, match=r"^subscribe: 'a' is not a list of topic names"):
        topic_names("a")
    with pytest.raises(ConfigError, match=r"^subscribe: '' in \['t', ''\] is not a topic name"):
        topic_names(["t", ""])
    with pytest.raises(ConfigError, match=r"^subscribe: 3 in \[3\] is not a topic name"):
        topic_names([3])  # type: ignore[list-item]


# --- the TLS keys' files ---------------------------------------------------------------


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PEM files by role: ca, cert and key (a pair the CA signed), other_key."""
    directory = tmp_path_factory.mktemp("pem")
    ca = trustme.CA()
    mine, other = ca.issue_cert("client@test"), ca.issue_cert("other@test")
    files = {
        "ca": ca.cert_pem.bytes(),
        "cert": mine.cert_chain_pems[0].bytes(),
        "key": mine.private_key_pem.bytes(),
        "other_key": other.private_key_pem.bytes(),
    }
    for name, data in files.items():
        (directory / f"{name}.pem").write_bytes(data)
    return {name: str(directory / f"{name}.pem") for name in files}


def test_plaintext_reads_no_files() -> None:
    assert not consumer_transport(parse_config(GROUP)).secure


def test_ssl_reads_and_keeps_the_files(pem: dict[str, str]) -> None:
    system_roots = consumer_transport(parse_config({**GROUP, "security.protocol": "ssl"}))
    assert (system_roots.secure, system_roots.ca, system_roots.cert) == (True, None, None)
    mutual = consumer_transport(
        parse_config({
            **GROUP,
            "security.protocol": "SSL",
            "ssl.ca.location": pem["ca"],
            "ssl.certificate.location": pem["cert"],
            "ssl.key.location": pem["key"],
        })
    )  # fmt: skip
    assert mutual.secure
    assert mutual.ca == Path(pem["ca"]).read_bytes()
    assert mutual.cert == Path(pem["cert"]).read_bytes()
    assert mutual.key == Path(pem["key"]).read_bytes()


def _files_error(pem: dict[str, str], tmp_path: Path) -> list[tuple[dict[str, str], str]]:
    """Configs whose files cannot be used, and the start of their ConfigError."""
    missing = str(tmp_path / "missing.pem")
    return [
        (
            {"ssl.ca.location": missing},
            f"ssl.ca.location {missing}: cannot read the CA certificate file: No such file",
        ),
        (
            {"ssl.ca.location": pem["key"]},
            f"ssl.ca.location {pem['key']}: not a PEM CA certificate (no '-----BEGIN "
            "CERTIFICATE-----' line)",
        ),
        (
            {"ssl.certificate.location": missing, "ssl.key.location": pem["key"]},
            f"ssl.certificate.location {missing}: cannot read the certificate file",
        ),
        (
            {"ssl.certificate.location": pem["cert"], "ssl.key.location": pem["cert"]},
            f"ssl.key.location {pem['cert']}: not a PEM private key",
        ),
        (
            {"ssl.certificate.location": pem["cert"], "ssl.key.location": pem["other_key"]},
            f"ssl.key.location {pem['other_key']}: not the private key of the certificate "
            f"in ssl.certificate.location {pem['cert']}",
        ),
    ]


def test_unusable_files_name_their_key_when_a_consumer_is_made(
    pem: dict[str, str], tmp_path: Path
) -> None:
    for keys, message in _files_error(pem, tmp_path):
        config = {**GROUP, "security.protocol": "ssl", **keys}
        # no server is needed: the files are read before any connection
        with pytest.raises(ConfigError) as info:
            consumer_transport(parse_config(config))
        assert str(info.value).startswith(message), str(info.value)
        with pytest.raises(ConfigError) as info:
            Consumer(config)
        assert str(info.value).startswith(message), str(info.value)
        with pytest.raises(ConfigError) as info:
            aio.Consumer(config)
        assert str(info.value).startswith(message), str(info.value)


def test_the_asyncio_consumer_checks_files_in_its_constructor(tmp_path: Path) -> None:
    async def make() -> None:
        aio.Consumer({**GROUP, "security.protocol": "ssl", "ssl.ca.location": str(tmp_path)})

    with pytest.raises(ConfigError, match=r"^ssl\.ca\.location .*: cannot read .*Is a directory"):
        asyncio.run(make())
