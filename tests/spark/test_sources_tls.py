"""Spark's sources through a mutual-TLS server (certificates made at run time,
tests/security/certs.py): the `sqltopic` stream and the `sqltopic_wal` source read with
the options `tlsCa`, `tlsCert` and `tlsKey`, in the driver and in every task; without a
client certificate the stream is refused when it is defined, with the TLS failure
named."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sqltopic.client import connect
from sqltopic.spark_jobs.stream import NAME
from tests.client.support import METERS, SELECT, TOPIC
from tests.live_server import POWER, ServerProcess
from tests.security.certs import Pki, make_pki

pytestmark = pytest.mark.spark

# A micro-batch of a few rows ends within this long (a cold Python worker included).
DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    """A mutual-TLS server with `power`, the example rows and topic `overvoltage`."""
    proc = ServerProcess(tmp_path_factory.mktemp("mtls") / "data", extra=pki.server_args(True))
    try:
        assert proc.wait_ready().rstrip().endswith(", mutual TLS")
        with connect(proc.address, tls_ca=pki.ca, tls_cert=pki.client_cert,
                     tls_key=pki.client_key) as conn:  # fmt: skip
            conn.execute(POWER + METERS + ";" + TOPIC)
        yield proc
    finally:
        proc.kill()


def _tls(pki: Pki) -> dict[str, str]:
    return {"tlsCa": str(pki.ca), "tlsCert": str(pki.client_cert), "tlsKey": str(pki.client_key)}


def _expected(server: ServerProcess, pki: Pki) -> Counter[tuple[Any, ...]]:
    with connect(server.address, tls_ca=pki.ca, tls_cert=pki.client_cert,
                 tls_key=pki.client_key) as conn:  # fmt: skip
        return Counter(tuple(_plain(v) for v in row) for row in conn.execute(SELECT).rows)


def _plain(value: Any) -> Any:
    """A timestamp as naive UTC (Spark's come back aware or in the session's zone)."""
    if hasattr(value, "tzinfo") and value.tzinfo is not None:
        return value.replace(tzinfo=None)
    return value


def test_the_stream_reads_over_mutual_tls(
    spark: SparkSession, mtls: ServerProcess, pki: Pki, tmp_path: Path
) -> None:
    rows = (
        spark.readStream.format(NAME).option("server", mtls.address)
        .option("topic", "overvoltage").option("startingOffsets", "earliest")
        .options(**_tls(pki)).load()
    )  # fmt: skip
    query = (
        rows.writeStream.format("parquet").option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    assert query.awaitTermination(int(DEADLINE_S)), "the query did not end"
    assert query.exception() is None
    expected = _expected(mtls, pki)
    names = list(spark.read.parquet(str(tmp_path / "out")).columns[: len(next(iter(expected)))])
    got = spark.read.parquet(str(tmp_path / "out")).select(*names).collect()
    assert Counter(tuple(_plain(v) for v in row) for row in got) == expected
    assert sum(expected.values()) > 0


def test_the_wal_source_reads_through_a_mutual_tls_server(
    spark: SparkSession, mtls: ServerProcess, pki: Pki
) -> None:
    frame = (
        spark.read.format("sqltopic_wal").option("server", mtls.address)
        .option("topic", "overvoltage").options(**_tls(pki)).load()
    )  # fmt: skip
    with connect(mtls.address, tls_ca=pki.ca, tls_cert=pki.client_cert,
                 tls_key=pki.client_key) as conn:  # fmt: skip
        total = conn.execute("SELECT COUNT(*) FROM power.meters").rows[0][0]
    assert frame.count() == total > 0


def test_without_a_client_certificate_the_stream_is_refused_naming_tls(
    spark: SparkSession, mtls: ServerProcess, pki: Pki
) -> None:
    with pytest.raises(Exception, match=r"(?i)tls|certificate|handshake") as refused:
        (
            spark.readStream.format(NAME).option("server", mtls.address)
            .option("topic", "overvoltage").option("tlsCa", str(pki.ca)).load()
        )  # fmt: skip
    assert "INTERNAL" not in str(refused.value)
