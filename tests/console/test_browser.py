"""The console in a real browser: headless Chromium (Debian's package, which `make
test` installs) loads the page against a live server with a lagging group, logged in by
the URL's `#token=`; the DOM it built shows the group, its lag in rows and time and a
chart line per vgroup, a topic's SQL only as text; the screenshot shows the line of the
vgroup behind rising and the other flat."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sqltopic.client import connect
from tests.console.png import read_png
from tests.console.support import (
    BEHIND,
    LAGGING_GROUP,
    call,
    console_server,
    lagging_group,
    login,
    wait_for,
)
from tests.live_server import ServerProcess

# Chromium under Debian's name; `make test` installs it (Makefile: browser).
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
# Starting the browser, loading the page and drawing it takes a few seconds.
BROWSER_DEADLINE_S = 120.0
# How long the page may run in the browser's virtual time (its first refresh is at once).
VIRTUAL_TIME_MS = 5000
# console.js's PALETTE: vgroup 1's line, vgroup 2's line.
LINE_COLOURS = {1: (0x09, 0x69, 0xDA), 2: (0xCF, 0x22, 0x2E)}
PROBE = "<img src=x onerror=alert(1)>"  # in a topic's SQL: must stay text

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="chromium is not installed (make test installs it: needs root)"
)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, int]]:
    """A server with a lagging group whose lag history has a few samples: the server,
    the console's URL, and the vgroup behind."""
    with (
        console_server(tmp_path_factory.mktemp("browser") / "data") as (server, url),
        lagging_group(server.address),
    ):
        with connect(server.address) as conn:
            conn.execute(
                f"CREATE TOPIC probe AS SELECT * FROM power.meters WHERE location = '{PROBE}'"
            )
        token = login(url)

        def history() -> int | None:
            """The vgroup behind, once each vgroup has three samples and it a lag."""
            lag = call(url + "api/overview", token=token).json["lag"]
            series = [s for s in lag["series"] if s["group"] == LAGGING_GROUP]
            if len(series) < 2 or min(len(s["lag_ms"]) for s in series) < 3:
                return None
            behind = [s["vgroup"] for s in series if s["lag_ms"][-1] > s["lag_ms"][0] > 0]
            return behind[0] if behind else None

        yield server, url, wait_for("a lag history with the group behind", history)


def _chromium(url: str, profile: Path, *what: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    return subprocess.run(
        [
            BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
            "--window-size=1280,1400", f"--virtual-time-budget={VIRTUAL_TIME_MS}", *what, url,
        ],
        capture_output=True, text=True, timeout=BROWSER_DEADLINE_S, check=False,
    )  # fmt: skip


def _tags(dom: str, tag: str, **attrs: str) -> list[dict[str, Any]]:
    """The attributes of every `tag` element whose attributes include `attrs`."""
    found = []
    for match in re.finditer(rf"<{tag}\b([^>]*)>", dom):
        pairs = dict(re.findall(r'([\w-]+)="([^"]*)"', match.group(1)))
        if all(pairs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
            found.append(pairs)
    return found


def test_the_page_shows_the_lagging_group(
    page: tuple[ServerProcess, str, int], tmp_path: Path
) -> None:
    _, url, behind = page
    done = _chromium(f"{url}#token={login(url)}", tmp_path / "profile", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert 'data-loaded="1"' in dom, dom[:2000]
    (card,) = _tags(dom, "div", data_group=LAGGING_GROUP)
    assert card["class"] == "group behind"
    assert card["data-topic"] == "overvoltage"
    assert int(card["data-lag-ms"]) > 0
    lines = {int(p["data-vgroup"]): int(p["data-points"]) for p in _tags(dom, "path")
             if p.get("class") == "lag-line"}  # fmt: skip
    assert set(lines) == {1, 2}
    assert min(lines.values()) >= 3
    # the vgroup table: lag rows BEHIND on the vgroup behind, its lag in time shown
    row = re.search(rf"<tr><td class=\"num\">{behind}</td>(.*?)</tr>", dom)
    assert row is not None, dom
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1))
    assert cells[2] == str(BEHIND)  # consumer, offset, lag rows
    assert re.fullmatch(r"\d+(\.\d)? (ms|s)|\d+ min \d+ s", cells[3]), cells
    assert "group lagging" in dom
    # a topic's SQL is text: its markup is escaped, no element was made of it
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom
    assert "<img" not in dom
    assert 'id="login" hidden' in dom  # the token logged it in: no login form shown


def test_the_screenshot_shows_the_lag_rising(
    page: tuple[ServerProcess, str, int], tmp_path: Path
) -> None:
    """The line of the vgroup behind climbs across many pixel rows; the caught-up
    vgroup's line (and its legend swatch) stays on a few."""
    _, url, behind = page
    shot = tmp_path / "console.png"
    done = _chromium(f"{url}#token={login(url)}", tmp_path / "profile", f"--screenshot={shot}")
    assert done.returncode == 0, done.stderr[-2000:]
    image = read_png(shot.read_bytes())
    assert (image.width, image.height) == (1280, 1400)
    other = 3 - behind

    def rows_with(colour: tuple[int, int, int]) -> set[int]:
        return {y for y, row in enumerate(image.rows) if _has(row, bytes(colour), image.channels)}

    rising, flat = rows_with(LINE_COLOURS[behind]), rows_with(LINE_COLOURS[other])
    assert len(rising) >= 20, sorted(rising)
    assert 1 <= len(flat) <= 12, sorted(flat)


def _has(row: bytes, pixel: bytes, channels: int) -> bool:
    at = row.find(pixel)
    while at >= 0:
        if at % channels == 0:
            return True
        at = row.find(pixel, at + 1)
    return False
