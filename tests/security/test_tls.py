"""TLS and mutual TLS against real server processes, with certificates made at run time
(tests/security/certs.py): SQL, Arrow writes and consumers over TLS; every handshake
failure gives a TlsHandshakeError that says what to check; a server refuses plain text
off loopback unless allowed; a bad PEM file stops the server with one clear line; the
CLI's --tls-* options."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
from cryptography.hazmat.primitives import serialization
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import (  # type: ignore[import-untyped]
    reflection_pb2,
    reflection_pb2_grpc,
)

from sqltopic import aio
from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.client.tls import TlsHandshakeError
from sqltopic.errors import ConfigError, ServerUnavailable
from tests.cli.support import clean_env, run_cli
from tests.client.support import METERS, SELECT, TOPIC, config, drain, drain_async, rows_of
from tests.live_server import POWER, ServerProcess, free_port
from tests.security.certs import Pki, make_pki

# Starting Python and importing the server's options takes a second or two; a refused
# start never gets as far as the engine.
REFUSAL_DEADLINE_S = 60.0
PUBLIC_PASSWORD = "public-pw-123"  # not the default: a non-loopback server refuses that


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@contextlib.contextmanager
def _started(data: Path, extra: tuple[str, ...]) -> Iterator[tuple[ServerProcess, str]]:
    """A server process started with `extra` options, and its ready line."""
    proc = ServerProcess(data, extra=extra)
    try:
        yield proc, proc.wait_ready()
    finally:
        proc.kill()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    """A TLS server with `power`, the example rows and topic `overvoltage`."""
    with _started(tmp_path_factory.mktemp("tls") / "data", pki.server_args()) as (proc, line):
        assert line.rstrip().endswith(", TLS")
        with connect(proc.address, tls_ca=pki.ca) as conn:
            conn.execute(POWER + METERS + ";" + TOPIC)
        yield proc


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    """A mutual-TLS server (client certificates of `pki.ca`) with the same data."""
    extra = pki.server_args(mutual=True)
    with _started(tmp_path_factory.mktemp("mtls") / "data", extra) as (proc, line):
        assert line.rstrip().endswith(", mutual TLS")
        with connect(proc.address, tls_ca=pki.ca, **_client_cert(pki)) as conn:
            conn.execute(POWER + METERS + ";" + TOPIC)
        yield proc


def _client_cert(pki: Pki) -> dict[str, Any]:
    return {"tls_cert": pki.client_cert, "tls_key": pki.client_key}


def _ssl(pki: Pki, **files: Path) -> dict[str, str]:
    """The consumer's TLS keys: Kafka's spelling (upper case protocol), the CA of `pki`
    unless `files` says otherwise."""
    keys = {"ssl.ca.location": str(pki.ca)} | {
        f"ssl.{name}.location": str(path) for name, path in files.items()
    }
    return {"security.protocol": "SSL"} | keys


def _expected(conn: Connection) -> Counter[tuple[Any, ...]]:
    """The rows topic `overvoltage` delivers: its SELECT's."""
    return Counter(conn.execute(SELECT).rows)


# --- working over TLS ------------------------------------------------------------------


def test_sql_and_arrow_writes_over_tls(tls_server: ServerProcess, pki: Pki) -> None:
    with connect(tls_server.address, tls_ca=pki.ca) as conn:
        conn.execute("CREATE DATABASE tlsw; CREATE TABLE tlsw.t (ts TIMESTAMP, v INT)")
        data = pa.table({
            "ts": pa.array([1_600_000_000_000 + i for i in range(3)], pa.timestamp("ms")),
            "v": pa.array([1, 2, 3], pa.int32()),
        })  # fmt: skip
        assert conn.write("tlsw.t", data) == 3
        assert conn.execute("SELECT sum(v) FROM tlsw.t").rows == [(6,)]
        assert conn.execute("SELECT count(*) FROM power.meters").rows == [(8,)]


def test_health_and_reflection_answer_over_tls(tls_server: ServerProcess, pki: Pki) -> None:
    credentials = grpc.ssl_channel_credentials(pki.ca.read_bytes())
    with grpc.secure_channel(tls_server.address, credentials) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (reply,) = reflection.ServerReflectionInfo(iter([request]), timeout=30)
    names = {s.name for s in reply.list_services_response.service}
    assert "sqltopic.v1.Sql" in names
    assert "grpc.health.v1.Health" in names


def test_a_consumer_with_kafkas_ssl_keys_consumes(tls_server: ServerProcess, pki: Pki) -> None:
    with connect(tls_server.address, tls_ca=pki.ca) as conn:
        expected = _expected(conn)
    settings = config(tls_server.address, "tls-sync") | _ssl(pki)
    with Consumer(settings) as consumer:
        consumer.subscribe(["overvoltage"])
        assert rows_of(drain(consumer)) == expected


def test_the_asyncio_client_over_tls(tls_server: ServerProcess, pki: Pki) -> None:
    async def scenario() -> None:
        async with await aio.connect(tls_server.address, tls_ca=pki.ca) as conn:
            expected = Counter((await conn.execute(SELECT)).rows)
        settings = config(tls_server.address, "tls-aio") | _ssl(pki)
        async with aio.Consumer(settings) as consumer:
            await consumer.subscribe(["overvoltage"])
            assert rows_of(await drain_async(consumer)) == expected

    asyncio.run(scenario())


# --- handshake failures ----------------------------------------------------------------


def test_a_plain_text_client_of_a_tls_server_is_told_to_use_tls(
    tls_server: ServerProcess,
) -> None:
    with pytest.raises(TlsHandshakeError) as info:
        connect(tls_server.address)
    assert isinstance(info.value, ServerUnavailable)  # what a program may already catch
    assert str(info.value).startswith(
        "the server closed the connection during set-up: it most likely requires TLS, and "
        "this client speaks plain text; connect with TLS (tls_ca naming the CA"
    )
    with pytest.raises(TlsHandshakeError, match=r"requires TLS.*\(ssl\.ca\.location naming"):
        Consumer(config(tls_server.address, "plain"))
    with pytest.raises(TlsHandshakeError, match=r"requires TLS.*tls=True for the default"):
        asyncio.run(aio.connect(tls_server.address))


def test_a_tls_client_of_a_plain_text_server_is_told_it_does_not_speak_tls(
    server: ServerProcess, pki: Pki
) -> None:
    expected = r"^TLS handshake failed: the server answered in plain text, so it does not"
    with pytest.raises(TlsHandshakeError, match=expected) as info:
        connect(server.address, tls_ca=pki.ca)
    assert "connect without TLS (no tls=True, tls_ca, tls_cert, tls_key)" in str(info.value)
    assert "WRONG_VERSION_NUMBER" in str(info.value)  # gRPC's own words follow
    with pytest.raises(TlsHandshakeError, match=r"no security\.protocol=ssl, ssl\.ca\.location"):
        Consumer(config(server.address, "g") | _ssl(pki))


def test_a_server_certificate_from_another_ca_is_not_trusted(
    tls_server: ServerProcess, pki: Pki
) -> None:
    untrusted = (
        r"^TLS handshake failed: this client does not trust the server's certificate "
        r"\(unable to get local issuer certificate\); give {} the CA that signed"
    )
    with pytest.raises(TlsHandshakeError, match=untrusted.format("tls_ca")):
        connect(tls_server.address, tls_ca=pki.other_ca)
    with pytest.raises(TlsHandshakeError, match=untrusted.format("tls_ca")):
        connect(tls_server.address, tls=True)  # gRPC's default roots know no test CA
    with pytest.raises(TlsHandshakeError, match=untrusted.format(r"ssl\.ca\.location")):
        Consumer(config(tls_server.address, "g") | _ssl(pki, ca=pki.other_ca))

    async def aio_consumer() -> None:
        settings = config(tls_server.address, "g") | _ssl(pki, ca=pki.other_ca)
        async with aio.Consumer(settings):
            pass

    with pytest.raises(TlsHandshakeError, match=untrusted.format(r"ssl\.ca\.location")):
        asyncio.run(aio_consumer())


def test_a_server_certificate_for_another_host_is_refused(tmp_path: Path, pki: Pki) -> None:
    extra = ("--tls-cert", str(pki.elsewhere_cert), "--tls-key", str(pki.elsewhere_key))
    with _started(tmp_path / "data", extra) as (proc, _), pytest.raises(TlsHandshakeError) as info:
        connect(proc.address, tls_ca=pki.ca)
    assert str(info.value).startswith(
        "TLS handshake failed: the server's certificate does not name the host this client "
        "connects to; connect by a name or IP address listed in the certificate's "
        "subjectAltName, or issue the certificate for this one"
    )


# --- mutual TLS ------------------------------------------------------------------------


def test_mutual_tls_refuses_a_client_without_a_certificate(
    mtls_server: ServerProcess, pki: Pki
) -> None:
    needs = (
        r"^the server closed the connection during the TLS handshake: it most likely requires "
        r"a client certificate \(mutual TLS\); give {} and {}, signed by the CA of the "
        r"server's --tls-client-ca"
    )
    with pytest.raises(TlsHandshakeError, match=needs.format("tls_cert", "tls_key")):
        connect(mtls_server.address, tls_ca=pki.ca)
    keys = needs.format(r"ssl\.certificate\.location", r"ssl\.key\.location")
    with pytest.raises(TlsHandshakeError, match=keys):
        Consumer(config(mtls_server.address, "g") | _ssl(pki))


def test_mutual_tls_refuses_a_certificate_from_another_ca(
    mtls_server: ServerProcess, pki: Pki
) -> None:
    refused = (
        r"^the server closed the connection during the TLS handshake: it most likely "
        r"refused this client's certificate \({}\); give one signed by the CA of the "
        r"server's --tls-client-ca"
    )
    with pytest.raises(TlsHandshakeError, match=refused.format("tls_cert")):
        connect(
            mtls_server.address, tls_ca=pki.ca, tls_cert=pki.stranger_cert,
            tls_key=pki.stranger_key,
        )  # fmt: skip
    settings = _ssl(pki, certificate=pki.stranger_cert, key=pki.stranger_key)
    with pytest.raises(TlsHandshakeError, match=refused.format(r"ssl\.certificate\.location")):
        Consumer(config(mtls_server.address, "g") | settings)


def test_mutual_tls_with_a_good_certificate_works(mtls_server: ServerProcess, pki: Pki) -> None:
    with connect(mtls_server.address, tls_ca=pki.ca, **_client_cert(pki)) as conn:
        expected = _expected(conn)
    settings = _ssl(pki, certificate=pki.client_cert, key=pki.client_key)
    with Consumer(config(mtls_server.address, "mtls-sync") | settings) as consumer:
        consumer.subscribe(["overvoltage"])
        assert rows_of(drain(consumer)) == expected

    async def scenario() -> None:
        async with await aio.connect(mtls_server.address, tls_ca=pki.ca, **_client_cert(pki)):
            pass
        async with aio.Consumer(config(mtls_server.address, "mtls-aio") | settings) as consumer:
            await consumer.subscribe(["overvoltage"])
            assert rows_of(await drain_async(consumer)) == expected

    asyncio.run(scenario())


# --- connect()'s arguments -------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"tls_cert": "c.pem"},
            "tls_cert: c.pem is given without tls_key; mutual TLS needs both the client's "
            "certificate and its private key (PEM files)",
        ),
        (
            {"tls_key": "k.pem"},
            "tls_key: k.pem is given without tls_cert; mutual TLS needs both the client's "
            "certificate and its private key (PEM files)",
        ),
        (
            {"tls_ca": "/no/such/ca.pem"},
            "tls_ca /no/such/ca.pem: cannot read the CA certificate file: No such file or "
            "directory",
        ),
        ({"tls_ca": 3}, "tls_ca: 3 is not the path of a PEM file"),
        ({"tls_ca": ""}, "tls_ca: '' is not the path of a PEM file"),
        ({"tls": "yes"}, "tls: 'yes' is not True or False"),
    ],
)
def test_bad_tls_arguments_fail_before_connecting(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        connect(f"127.0.0.1:{free_port()}", **arguments)
    assert str(info.value) == message
    with pytest.raises(ConfigError) as info:
        asyncio.run(aio.connect(f"127.0.0.1:{free_port()}", **arguments))
    assert str(info.value) == message


def test_pem_files_are_checked(pki: Pki, tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match=r"^tls_ca .*server-key\.pem: not a PEM CA cert"):
        connect(address, tls_ca=pki.server_key)
    with pytest.raises(ConfigError, match=r"^tls_key .*client\.pem: not a PEM private key"):
        connect(address, tls_cert=pki.client_cert, tls_key=pki.client_cert)
    with pytest.raises(
        ConfigError,
        match=r"^tls_key .*stranger-key\.pem: not the private key of the certificate in "
        r"tls_cert .*client\.pem \(\[X509: KEY_VALUES_MISMATCH\] key values mismatch\)",
    ):
        connect(address, tls_cert=pki.client_cert, tls_key=pki.stranger_key)
    with pytest.raises(ConfigError, match=r"^tls_key .*: the private key is encrypted"):
        connect(address, tls_cert=pki.client_cert, tls_key=_encrypted_key(pki, tmp_path))
    with pytest.raises(ConfigError, match=r"^tls_ca .*: cannot read the CA .*: Is a directory$"):
        connect(address, tls_ca=tmp_path)


def _encrypted_key(pki: Pki, directory: Path) -> Path:
    key = serialization.load_pem_private_key(pki.client_key.read_bytes(), None)
    path = directory / "encrypted-key.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    return path


# --- the server's options --------------------------------------------------------------


def _server_run(data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "sqltopic.server", "--data", str(data)]
    args += ["--port", str(free_port()), *extra]
    return subprocess.run(
        args, capture_output=True, text=True, timeout=REFUSAL_DEADLINE_S, check=False
    )


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_plain_text_off_loopback_is_refused_unless_allowed(tmp_path: Path, pki: Pki) -> None:
    public = ("--host", "0.0.0.0", "--root-password", PUBLIC_PASSWORD)
    line = _one_error_line(_server_run(tmp_path / "data", *public))
    assert line == (
        "sqltopic: refusing to listen on 0.0.0.0 without TLS (passwords and data would cross "
        "the network in plain text): give --tls-cert and --tls-key (docs/security.md), listen "
        "on 127.0.0.1, or give --allow-plaintext to accept plain text"
    )
    assert not (tmp_path / "data").exists()  # refused before touching the data directory
    with _started(tmp_path / "plain", (*public, "--allow-plaintext")) as (proc, line):
        assert "listening on 0.0.0.0:" in line
        with connect(proc.address, password=PUBLIC_PASSWORD) as conn:
            assert conn.execute("SHOW USERS").rows[0][0] == "root"
    # TLS needs no permission off loopback
    with _started(tmp_path / "tls", (*public, *pki.server_args())) as (proc, line):
        assert line.rstrip().endswith(", TLS")
        with connect(proc.address, password=PUBLIC_PASSWORD, tls_ca=pki.ca) as conn:
            assert conn.execute("SHOW USERS").rows[0][0] == "root"


def _bad_options(pki: Pki, tmp_path: Path) -> list[tuple[list[str], str]]:
    cert, key, ca = str(pki.server_cert), str(pki.server_key), str(pki.ca)
    missing = str(tmp_path / "missing.pem")
    return [
        (
            ["--tls-cert", missing, "--tls-key", key],
            f"--tls-cert {missing}: cannot read the certificate file: No such file or directory",
        ),
        (
            ["--tls-cert", cert, "--tls-key", missing],
            f"--tls-key {missing}: cannot read the private key file: No such file or directory",
        ),
        (
            ["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", str(tmp_path)],
            f"--tls-client-ca {tmp_path}: cannot read the CA certificate file: Is a directory",
        ),
        (
            ["--tls-cert", cert],
            f"--tls-cert {cert}: given without --tls-key; give the certificate's private key "
            "(PEM) with --tls-key",
        ),
        (
            ["--tls-key", key],
            f"--tls-key {key}: given without --tls-cert; give the server's certificate (PEM) "
            "with --tls-cert",
        ),
        (
            ["--tls-client-ca", ca],
            f"--tls-client-ca {ca}: mutual TLS needs the server's own certificate too; give "
            "--tls-cert and --tls-key",
        ),
        (
            ["--tls-cert", key, "--tls-key", key],
            f"--tls-cert {key}: not a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)",
        ),
        (
            ["--tls-cert", cert, "--tls-key", cert],
            f"--tls-key {cert}: not a PEM private key (no '-----BEGIN ... PRIVATE KEY-----' line)",
        ),
        (
            ["--tls-cert", cert, "--tls-key", str(pki.client_key)],
            f"--tls-key {pki.client_key}: not the private key of the certificate in "
            f"--tls-cert {cert} ([X509: KEY_VALUES_MISMATCH] key values mismatch); give the "
            "key the certificate was issued for",
        ),
    ]


def test_bad_pem_options_stop_the_server_with_one_line(pki: Pki, tmp_path: Path) -> None:
    for args, message in _bad_options(pki, tmp_path):
        line = _one_error_line(_server_run(tmp_path / "data", *args))
        assert line == f"sqltopic: {message}"
        assert not (tmp_path / "data").exists()
    encrypted = _encrypted_key(pki, tmp_path)
    line = _one_error_line(
        _server_run(tmp_path / "data", "--tls-cert", str(pki.client_cert), "--tls-key",
                    str(encrypted))
    )  # fmt: skip
    assert line.startswith(f"sqltopic: --tls-key {encrypted}: the private key is encrypted")


# --- the command line ------------------------------------------------------------------


def test_cli_sql_with_the_ca_works_and_without_it_says_why(
    tls_server: ServerProcess, pki: Pki
) -> None:
    sql = ("sql", "--server", tls_server.address, "-e", "SHOW DATABASES")
    done = run_cli(*sql, "--tls-ca", str(pki.ca))
    assert done.returncode == 0, done.stderr
    assert "power" in done.stdout
    done = run_cli(*sql, env=clean_env(SQLTOPIC_TLS_CA=str(pki.ca)))
    assert done.returncode == 0, done.stderr
    line = _one_error_line(run_cli(*sql))
    assert line.startswith(
        f"sqltopic: cannot connect to the server at {tls_server.address}: the server closed "
        "the connection during set-up: it most likely requires TLS, and this client speaks "
        "plain text; connect with TLS (--tls-ca naming the CA that signed the server's "
        "certificate, or --tls for the default roots)"
    )
    line = _one_error_line(run_cli(*sql, "--tls-ca", str(pki.other_ca)))
    assert "does not trust the server's certificate" in line
    assert "give --tls-ca the CA that signed" in line
    line = _one_error_line(run_cli(*sql, "--tls-ca", "/no/such.pem"))
    assert line == (
        "sqltopic: --tls-ca /no/such.pem: cannot read the CA certificate file: No such file "
        "or directory"
    )


def test_cli_consume_and_mutual_tls(mtls_server: ServerProcess, pki: Pki) -> None:
    consume = ("consume", "overvoltage", "--server", mtls_server.address, "--from", "earliest")
    mutual = ("--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert), "--tls-key")
    done = run_cli(*consume, "--format", "csv", "--max-rows", "5", *mutual, str(pki.client_key))
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip().splitlines()) == 1 + 5  # the header, then the rows
    line = _one_error_line(run_cli(*consume, "--max-rows", "1", "--tls-ca", str(pki.ca)))
    assert "it most likely requires a client certificate (mutual TLS); give --tls-cert and " in line
    line = _one_error_line(run_cli("sql", "--server", mtls_server.address, "--tls-ca",
                                   str(pki.ca), "-e", "SHOW DATABASES"))  # fmt: skip
    assert "give --tls-cert and --tls-key, signed by the CA of the server's --tls-client-ca" in line
