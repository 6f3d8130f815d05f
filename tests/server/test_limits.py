"""The limits' options (server/common/limits.py): sizes with units, positive numbers, every
option a field of Limits with the documented default, and bad values refused."""

from __future__ import annotations

import argparse

import pytest

from sqltopic.server.common import limits


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), ("1048576", 1 << 20), ("256MiB", 256 << 20), ("1g", 1 << 30), ("64 KB", 64 << 10)],
)
def test_sizes_take_units(text: str, value: int) -> None:
    assert limits.size(text) == value


@pytest.mark.parametrize("text", ["", "0", "-5", "1.5GiB", "12 parsecs", "MiB"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a size"):
        limits.size(text)


@pytest.mark.parametrize(("text", "says"), [("0", "at least 1"), ("x", "not a whole number")])
def test_counts_are_positive_whole_numbers(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        limits.positive(text)


def test_every_limit_has_its_option_and_default() -> None:
    parser = argparse.ArgumentParser()
    limits.add_arguments(parser)
    assert limits.Limits.of(parser.parse_args([])) == limits.Limits()
    args = parser.parse_args(["--max-write-bytes", "1MiB", "--max-streams-per-user", "3"])
    assert limits.Limits.of(args) == limits.Limits(max_write_bytes=1 << 20, max_streams_per_user=3)
    assert "(default 256MiB)" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--query-timeout-ms", "0"])
