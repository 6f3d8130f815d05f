"""A key_shared group's keys (server/dnode/share_keys.py) and its group.key setting
(server/mnode/share_settings.py): the table by default, a tag, or a column of the topic's
rows; a name that is neither is refused with what there is."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqltopic.errors import ConfigError
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.tracked_reader import read_tracked
from sqltopic.server.dnode.share_keys import TABLE_KEY, KeySource, key_pieces, key_source
from sqltopic.server.mnode.share_settings import ShareSettings

ROWS = 6


def _one_entry(power: Engine) -> tuple[str, str, int]:
    """Two tables of one vgroup (tags location 'north' and 'south'), written together
    as one entry: rows 0-2 of the first, 3-5 of the second; their names and vgroup."""
    names = [f"t{k}" for k in range(12)]
    power.execute("; ".join(
        f"CREATE TABLE {n} USING meters TAGS ('{'north' if k % 2 else 'south'}', {k})"
        for k, n in enumerate(names)
    ))  # fmt: skip
    vgroup_of = {n: power.state.catalog.tables[("power", n)].vgroup for n in names}
    first, second = next(
        (a, b) for a in names for b in names
        if a < b and vgroup_of[a] == vgroup_of[b]
        and power.state.catalog.tables[("power", a)].tags["location"]
        != power.state.catalog.tables[("power", b)].tags["location"]
    )  # fmt: skip
    power.write(
        "power.meters",
        pa.table({
            "tbname": [first] * 3 + [second] * 3,
            "ts": pa.array(range(ROWS), pa.timestamp("ms")),
            "current": pa.array([1.0] * ROWS, pa.float32()),
            "voltage": pa.array([7, 7, 8, 8, 8, 7], pa.int32()),
            "phase": pa.array([0.5] * ROWS, pa.float32()),
        }),
    )  # fmt: skip
    return first, second, vgroup_of[first]


def test_a_rows_key_is_its_table_a_tag_or_a_column(power: Engine) -> None:
    first, second, vgroup = _one_entry(power)
    power.execute("CREATE TOPIC q AS SELECT ts, voltage FROM meters")
    catalog = power.state.catalog
    topic = catalog.topic("q")
    blocks, _ = read_tracked(power.state, "q", vgroup, 1, 10**9)
    (version,) = {v for b in blocks for v in b.id_lists[0]}
    location = {n: catalog.tables[("power", n)].tags["location"] for n in (first, second)}
    cases = [
        (None, TABLE_KEY, [(0, 3, first), (3, 6, second)]),
        ("location", KeySource("tag", "location"),
         [(0, 3, location[first]), (3, 6, location[second])]),
        ("voltage", KeySource("column", "voltage"), [(0, 2, "7"), (2, 5, "8"), (5, 6, "7")]),
    ]  # fmt: skip
    for key, source, pieces in cases:
        assert key_source(catalog, topic, key) == source
        cut = key_pieces(catalog, "power", source, blocks)
        assert list(cut(version, 0, ROWS)) == pieces, key
        assert next(iter(cut(version, 1, 4)))[0] == 1  # a run inside the entry: from its start


def test_a_key_tag_dropped_since_gives_its_rows_no_key(power: Engine) -> None:
    """After ALTER STABLE ... DROP TAG of a group's key the group goes on: the lease
    falls back to a tag no table has, and every row's key is the empty one."""
    _first, _second, vgroup = _one_entry(power)
    power.execute("CREATE TOPIC q AS SELECT ts, voltage FROM meters")
    power.execute("ALTER STABLE meters DROP TAG location")
    catalog = power.state.catalog
    with pytest.raises(ConfigError, match="neither a column"):
        key_source(catalog, catalog.topic("q"), "location")
    blocks, _ = read_tracked(power.state, "q", vgroup, 1, 10**9)
    (version,) = {v for b in blocks for v in b.id_lists[0]}
    cut = key_pieces(catalog, "power", KeySource("tag", "location"), blocks)
    assert list(cut(version, 0, ROWS)) == [(0, ROWS, "")]
    missing = key_pieces(catalog, "power", KeySource("column", "gone"), blocks)
    assert list(missing(version, 0, ROWS)) == [(0, ROWS, "")]


def test_a_group_key_naming_neither_column_nor_tag_is_refused(power: Engine) -> None:
    power.execute("CREATE TOPIC q AS SELECT ts, voltage FROM meters")
    power.execute("CREATE TOPIC everything AS DATABASE power")
    catalog = power.state.catalog
    with pytest.raises(ConfigError) as caught:
        key_source(catalog, catalog.topic("q"), "phase")  # a column, but not of q's rows
    assert str(caught.value) == (
        "group.key: 'phase' is neither a column of topic q's rows (ts, voltage) nor a tag of "
        "its super table (location, groupid); name one of them, or leave group.key unset to "
        "key rows by their table"
    )
    with pytest.raises(ConfigError, match=r"topic everything's rows \(none\)"):
        key_source(catalog, catalog.topic("everything"), "location")


@pytest.mark.parametrize(
    ("value", "stored"), [("", None), ("Location", "location"), (" groupid ", "groupid")]
)
def test_group_key_is_a_name_kept_in_lower_case(value: str, stored: str | None) -> None:
    settings = ShareSettings.of(0, 0, "", value)
    assert settings.group_key == stored
    assert ShareSettings.of_doc(settings.doc()) == settings


@pytest.mark.parametrize("value", ["1abc", "a b", "x;DROP", "k" * 193])
def test_a_group_key_that_is_no_name_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"group\.key: .* is not a name"):
        ShareSettings.of(0, 0, "", value)


def test_settings_stored_before_group_key_read_as_the_table() -> None:
    old = {"ack_timeout_ms": 5000, "max_deliveries": 0, "dead_letter_table": ""}
    assert ShareSettings.of_doc(old) == ShareSettings(5000)
    assert ShareSettings(5000).differences(ShareSettings(5000, group_key="location")) == [
        "group.key none (asked: location)"
    ]
