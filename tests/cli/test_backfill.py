"""`sqltopic backfill` refusing bad arguments (exit 2) and runs it must not start (one
line, exit 1): nothing is written and no offset changes. The job itself runs in
tests/spark/test_handoff.py (it needs the Spark session)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from sqltopic.cli.backfill import parse_upto
from sqltopic.client import Connection, admin
from sqltopic.client.consumer import Consumer
from tests.cli.support import clean_env, run_cli, run_on
from tests.live_server import ServerProcess, free_port

TOPIC = "CREATE TOPIC hot AS SELECT ts, voltage, tbname FROM power.meters WHERE voltage > 220"
ROWS = (
    "INSERT INTO d1 USING power.meters TAGS ('a', 1) VALUES (1700000000000, 1.0, 230, 0.1) "
    "d2 USING power.meters TAGS ('b', 2) VALUES (1700000000000, 1.0, 210, 0.1)"
)
VGROUPS = (1, 2)


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(TOPIC)
    live_power.execute(ROWS)
    return live_power


def _backfill(server: ServerProcess, out: Path, *args: str) -> tuple[int, str, str]:
    done = run_on(server, "backfill", *args, "--output", str(out), "--data", str(server.data))
    return done.returncode, done.stdout, done.stderr


def _one_line_error(code: int, stderr: str) -> str:
    assert code == 1, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("sqltopic: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["hot"], "--output"),
        (["hot", "--output", "x", "--upto", "1:abc"], "'1:abc' is not VGROUP:VERSION"),
        (["hot", "--output", "x", "--upto", "1:5,1:6"], "vgroup 1 is given twice"),
        (["hot", "--output", "x", "--upto", "0:5"], "'0:5' is not VGROUP:VERSION"),
        (["hot", "--output", "x", "--group", "g", "--offline"], "not allowed with"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], expected: str, tmp_path: Path) -> None:
    done = run_cli("backfill", *args)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert not (tmp_path / "x").exists()


def test_parse_upto() -> None:
    assert parse_upto("latest") is None
    assert parse_upto("1:1200, 2:1350") == {1: 1200, 2: 1350}
    with pytest.raises(argparse.ArgumentTypeError, match="'1' is not"):
        parse_upto("1")


def test_force_needs_a_group(tmp_path: Path) -> None:
    done = run_cli("backfill", "hot", "--output", str(tmp_path / "o"), "--force")
    assert "--force evicts a group's consumers: give it with --group G" in _one_line_error(
        done.returncode, done.stderr
    )


def test_unknown_topic(server: ServerProcess, hot: Connection, tmp_path: Path) -> None:
    code, _, err = _backfill(server, tmp_path / "o", "nope", "--group", "g")
    assert _one_line_error(code, err) == (
        f"sqltopic: topic 'nope' does not exist in data directory {server.data} (backfill "
        "reads the server's data directory: give it with --data)"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("topic", "engine", "expected"),
    [
        (
            "AS SELECT ts, voltage << 2 AS s FROM power.meters",
            "spark-sql",
            "<< has no exact Spark translation",
        ),
        ("AS STABLE power.meters", "live", "is a stable topic (AS STABLE)"),
    ],
)
def test_a_topic_spark_cannot_run(
    server: ServerProcess, hot: Connection, tmp_path: Path, topic: str, engine: str,
    expected: str,
) -> None:  # fmt: skip
    hot.execute(f"CREATE TOPIC bad {topic}")
    admin.commit_group(hot, "bad", "g", {1: 1, 2: 1})
    code, _, err = _backfill(server, tmp_path / "o", "bad", "--group", "g", "--engine", engine)
    line = _one_line_error(code, err)
    assert "topic 'bad'" in line
    assert expected in line
    assert not (tmp_path / "o").exists()
    assert admin.committed(hot, "bad", "g", VGROUPS) == {1: 1, 2: 1}


def test_missing_java_is_one_line_and_changes_nothing(
    server: ServerProcess, hot: Connection, tmp_path: Path
) -> None:
    admin.commit_group(hot, "hot", "g", {1: 1, 2: 1})
    done = run_cli(
        "backfill", "hot", "--output", str(tmp_path / "o"), "--group", "g",
        "--server", server.address, "--data", str(server.data),
        env=clean_env(JAVA_HOME=str(tmp_path / "no-java")),
    )  # fmt: skip
    line = _one_line_error(done.returncode, done.stderr)
    assert f"JAVA_HOME is {tmp_path / 'no-java'}" in line
    assert not (tmp_path / "o").exists()
    assert admin.committed(hot, "hot", "g", VGROUPS) == {1: 1, 2: 1}


def test_output_must_be_new_or_empty(
    server: ServerProcess, hot: Connection, tmp_path: Path
) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "old.parquet").write_bytes(b"x")
    code, _, err = _backfill(server, out, "hot")
    assert f"output directory {out} is not empty" in _one_line_error(code, err)
    assert [p.name for p in out.iterdir()] == ["old.parquet"]
    code, _, err = _backfill(server, out / "old.parquet", "hot")
    assert "is a file" in _one_line_error(code, err)


def test_a_busy_group_is_refused_and_keeps_its_offsets(
    server: ServerProcess, hot: Connection, tmp_path: Path
) -> None:
    admin.commit_group(hot, "hot", "g", {1: 1, 2: 1})
    config = {"server": server.address, "group.id": "g", "client.id": "busy-one",
              "enable.auto.commit": "false"}  # fmt: skip
    with Consumer(config) as consumer:
        consumer.subscribe(["hot"])
        code, _, err = _backfill(server, tmp_path / "o", "hot", "--group", "g")
        line = _one_line_error(code, err)
        assert "group g has 1 live consumer of topic hot" in line
        assert "busy-one" in line
        assert "--force" in line
    assert not (tmp_path / "o").exists()
    assert admin.committed(hot, "hot", "g", VGROUPS) == {1: 1, 2: 1}


def test_upto_past_the_snapshot_or_off_the_topic(
    server: ServerProcess, hot: Connection, tmp_path: Path
) -> None:
    ends = {v: r.end for v, r in admin.offset_ranges(hot, "hot", VGROUPS).items()}
    code, _, err = _backfill(server, tmp_path / "o", "hot", "--upto", f"1:{ends[1] + 1}")
    assert f"give at most 1:{ends[1]}" in _one_line_error(code, err)
    code, _, err = _backfill(server, tmp_path / "o", "hot", "--upto", "7:1")
    assert "--upto names vgroup 7; the topic's vgroups are 1, 2" in _one_line_error(code, err)
    assert not (tmp_path / "o").exists()


def test_a_data_directory_behind_the_server_is_refused(
    server: ServerProcess, hot: Connection, tmp_path: Path
) -> None:
    """--data must be the server's directory: a stale copy holds fewer versions."""
    stale = tmp_path / "stale"
    shutil.copytree(server.data, stale)
    hot.execute(ROWS.replace("1700000000000", "1700000000001"))
    done = run_on(server, "backfill", "hot", "--output", str(tmp_path / "o"), "--data", str(stale))
    line = _one_line_error(done.returncode, done.stderr)
    assert f"in {stale}: give the server's own data directory with --data" in line
    assert not (tmp_path / "o").exists()


def test_no_server_is_one_line(hot: Connection, server: ServerProcess, tmp_path: Path) -> None:
    done = run_cli(
        "backfill", "hot", "--output", str(tmp_path / "o"), "--data", str(server.data),
        "--server", f"127.0.0.1:{free_port()}", env=clean_env(),
    )  # fmt: skip
    assert "cannot reach the server" in _one_line_error(done.returncode, done.stderr)
    assert not (tmp_path / "o").exists()
