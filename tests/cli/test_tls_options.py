"""The client commands' TLS options (`--tls`, `--tls-ca`, `--tls-cert`, `--tls-key`, and
their SQLTOPIC_TLS_* defaults): what they load, the consumer keys they become, and the
option a bad file is named by. Against servers: tests/security/test_tls.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import trustme

from sqltopic.cli.connect import ServerOptions, options_parser
from sqltopic.cli.consume import Settings
from sqltopic.client.config import consumer_transport, parse_config
from sqltopic.errors import ConfigError

TLS_ENV = ("SQLTOPIC_TLS_CA", "SQLTOPIC_TLS_CERT", "SQLTOPIC_TLS_KEY")


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, str]:
    ca = trustme.CA()
    client = ca.issue_cert("client@test")
    files = {
        "ca": ca.cert_pem.bytes(),
        "cert": client.cert_chain_pems[0].bytes(),
        "key": client.private_key_pem.bytes(),
    }
    for name, data in files.items():
        (tmp_path / f"{name}.pem").write_bytes(data)
    return {name: str(tmp_path / f"{name}.pem") for name in files}


@pytest.fixture(autouse=True)
def no_tls_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's shell may set these; each test sets what it needs."""
    for name in TLS_ENV:
        monkeypatch.delenv(name, raising=False)


def _parse(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(parents=[options_parser()])
    return parser.parse_args(list(args))


def test_without_tls_options_the_command_speaks_plain_text() -> None:
    options = ServerOptions.of(_parse())
    assert not options.transport.secure
    assert options.consumer_config() == {
        "server": "127.0.0.1:6030",
        "user": "root",
        "password": "taosdata",
    }


def test_tls_alone_trusts_the_default_roots() -> None:
    options = ServerOptions.of(_parse("--tls"))
    assert (options.transport.secure, options.transport.ca) == (True, None)
    assert options.consumer_config()["security.protocol"] == "ssl"
    assert "ssl.ca.location" not in options.consumer_config()


def test_the_files_load_and_become_the_consumers_ssl_keys(pem: dict[str, str]) -> None:
    args = _parse("--tls-ca", pem["ca"], "--tls-cert", pem["cert"], "--tls-key", pem["key"])
    options = ServerOptions.of(args)
    assert options.transport.ca == Path(pem["ca"]).read_bytes()
    assert options.transport.cert == Path(pem["cert"]).read_bytes()
    settings = Settings.of(_parse_consume(args))
    config = settings.config(options)
    assert {k: v for k, v in config.items() if k.startswith(("ssl.", "security."))} == {
        "security.protocol": "ssl",
        "ssl.ca.location": pem["ca"],
        "ssl.certificate.location": pem["cert"],
        "ssl.key.location": pem["key"],
    }
    # what the consume command hands the consumer is a valid config with the same files
    mine, theirs = options.transport, consumer_transport(parse_config(config))
    assert (theirs.secure, theirs.ca, theirs.cert, theirs.key) == (
        mine.secure, mine.ca, mine.cert, mine.key,
    )  # fmt: skip


def _parse_consume(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with what `sqltopic consume TOPIC` adds (defaults)."""
    extra: dict[str, object] = {"topic": "t", "group": "g", "start": "earliest"}
    extra |= {"format": "csv", "max_rows": None, "timeout": None, "commit": None, "params": []}
    extra |= {"group_type": "vgroup", "client_id": None, "group_key": None}
    return argparse.Namespace(**vars(args), **extra)


def test_the_environment_gives_the_defaults(
    pem: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, role in zip(TLS_ENV, ("ca", "cert", "key"), strict=True):
        monkeypatch.setenv(name, pem[role])
    options = ServerOptions.of(_parse())
    assert options.transport.secure
    assert options.transport.key == Path(pem["key"]).read_bytes()
    monkeypatch.setenv("SQLTOPIC_TLS_CA", "/from/the/environment.pem")
    with pytest.raises(ConfigError, match=r"^--tls-ca /from/the/environment\.pem: cannot read"):
        ServerOptions.of(_parse("--tls-cert", pem["cert"], "--tls-key", pem["key"]))
    options = ServerOptions.of(_parse("--tls-ca", pem["ca"]))  # an option beats the variable
    assert options.transport.ca == Path(pem["ca"]).read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--tls-cert", "{cert}"),
            "--tls-cert: {cert} is given without --tls-key; mutual TLS needs both the "
            "client's certificate and its private key (PEM files)",
        ),
        (
            ("--tls-key", "{key}"),
            "--tls-key: {key} is given without --tls-cert; mutual TLS needs both the "
            "client's certificate and its private key (PEM files)",
        ),
        (
            ("--tls-ca", "{key}"),
            "--tls-ca {key}: not a PEM CA certificate (no '-----BEGIN CERTIFICATE-----' line)",
        ),
        (
            ("--tls-cert", "{cert}", "--tls-key", "{ca}"),
            "--tls-key {ca}: not a PEM private key (no '-----BEGIN ... PRIVATE KEY-----' line)",
        ),
    ],
)
def test_a_bad_file_is_named_by_its_option(
    pem: dict[str, str], args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        ServerOptions.of(_parse(*(a.format(**pem) for a in args)))
    assert str(info.value) == message.format(**pem)
