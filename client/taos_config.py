"""taospy's consumer config mapped onto sqltopic's (see `sqltopic.taos`).

taospy passes every key to TDengine's `tmq_conf_set`; here each one is either the
sqltopic key of the same meaning, a key accepted because its TDengine default is all
sqltopic does (a clear TmqError for any other value), or ignored where TDengine
ignores it too. Keys of sqltopic's own config (`server`, `max.poll.rows`, `ssl.*`, …)
pass through, so every value is checked by `parse_config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqltopic.client.config import ConsumerConfig, parse_config
from sqltopic.client.taos_errors import TmqError, tmq_error
from sqltopic.errors import Error

# Keys whose only value sqltopic supports is TDengine's default: key -> (accepted
# values, why another value cannot be honoured).
DEFAULT_ONLY: dict[str, tuple[frozenset[str], str]] = {
    "experimental.snapshot.enable": (
        frozenset({"false", "0"}),
        "sqltopic reads the WAL only, with no TSDB snapshot; set it to false or leave it out",
    ),
    "enable.replay": (
        frozenset({"false", "0"}),
        "sqltopic does not replay rows at their original pace; leave it out",
    ),
    "msg.consume.excluded": (frozenset({"0", "false"}), "there is no taosX to exclude"),
    "msg.consume.rawdata": (frozenset({"0", "false"}), "raw blocks are for taosX only"),
    "msg.enable.batchmeta": (frozenset({"0", "false"}), "meta events come one a message"),
}
# Keys TDengine or taospy accept with no effect here: td.connect.db (TDengine ignores
# it too), heartbeats (always in the background), the snapshot batch size (no snapshot).
IGNORED = frozenset(
    {
        "td.connect.db",
        "enable.heartbeat.background",
        "experimental.snapshot.batch.size",
    }
)
# taos-ws-py's transport key: ws = plain text, wss = TLS (sqltopic's security.protocol).
WS_SCHEME = "td.connect.websocket.scheme"
SCHEMES = {"ws": "plaintext", "wss": "ssl"}
# taospy's own key (not TDengine's): strings of BINARY/VARCHAR columns as bytes when false.
DECODE_BINARY = "decode_binary"


@dataclass(frozen=True)
class TmqSettings:
    config: ConsumerConfig
    decode_binary: bool = True


def tmq_settings(configs: Mapping[str, object]) -> TmqSettings:
    """taospy's consumer dict as sqltopic's config; a bad key or value is a TmqError
    (also a ConfigError) that names it."""
    if not isinstance(configs, Mapping):
        raise TmqError(f"consumer config: {configs!r} is not a dict of key -> value")
    if "group.id" not in configs:
        raise TmqError("missing group.id in consumer config setting")
    values: dict[str, object] = {}
    decode_binary = True
    for key, value in configs.items():
        if key == DECODE_BINARY:
            text = str(value).strip().lower()
            decode_binary = text == "true" if isinstance(value, str) else bool(value)
        elif not _special(key, value, values):
            values[key] = value
    try:
        return TmqSettings(parse_config(values), decode_binary)
    except Error as err:
        raise tmq_error(err) from None


def _special(key: str, value: object, values: dict[str, object]) -> bool:
    """Handle a TDengine key that is not one of sqltopic's; False for any other key."""
    text = str(value).strip().lower()
    if key in IGNORED:
        return True
    if key in DEFAULT_ONLY:
        accepted, why = DEFAULT_ONLY[key]
        if text not in accepted:
            raise TmqError(f"{key}: {value!r} is not supported: {why}")
        return True
    if key == WS_SCHEME:
        if text not in SCHEMES:
            raise TmqError(f"{key}: {value!r} is not one of ws, wss")
        if SCHEMES[text] != "plaintext":
            values["security.protocol"] = SCHEMES[text]
        return True
    if key == "td.connect.token":
        raise TmqError(
            f"{key}: token login is not supported; give td.connect.user and td.connect.pass"
        )
    return False
