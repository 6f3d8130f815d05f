"""Property tests: what is appended reads back exactly; damage is never read as data."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqltopic.errors import WalCorruptionError
from sqltopic.wal import EntryType, Wal, WalEntry, WalOptions, WalRecord, open_readonly
from sqltopic.wal.record import HEADER_SIZE
from tests.wal.wal_child import payload

CHILD = Path(__file__).with_name("wal_child.py")

# --- appends, rolls and reopens ---------------------------------------------------------

entry_st = st.tuples(
    st.sampled_from([EntryType.DATA, EntryType.META, EntryType.CONTROL]),
    st.binary(min_size=0, max_size=700),
    st.integers(min_value=0, max_value=3),  # version gap before this entry
)
op_st = st.one_of(
    st.tuples(st.just("append"), st.lists(entry_st, min_size=1, max_size=5)),
    st.tuples(st.just("roll"), st.none()),
    st.tuples(st.just("reopen"), st.none()),
)


@dataclass(frozen=True)
class Model:
    version: int
    entry_type: EntryType
    body: bytes


def _apply(wal: Wal, entries: list[tuple[EntryType, bytes, int]], model: list[Model]) -> None:
    nxt = wal.next_version
    batch = []
    for etype, body, gap in entries:
        version = nxt + gap
        batch.append(WalEntry(etype, body, version if gap else None))
        model.append(Model(version, etype, body))
        nxt = version + 1
    assert wal.append(batch) == [m.version for m in model[-len(entries) :]]


def _as_model(records: list[WalRecord]) -> list[Model]:
    return [Model(r.version, r.entry_type, bytes(r.body)) for r in records]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(op_st, min_size=1, max_size=25),
    segment_kb=st.sampled_from([1, 2, 64]),
    level=st.sampled_from([1, 2]),
    starts=st.lists(st.integers(min_value=0, max_value=200), max_size=5),
)
def test_appends_read_back_exactly(
    ops: list[tuple[str, object]], segment_kb: int, level: int, starts: list[int]
) -> None:
    opts = WalOptions(level=1 if level == 1 else 2, segment_size_kb=segment_kb)
    with tempfile.TemporaryDirectory() as tmp:
        wal = Wal.open(tmp, opts, background=False)
        model: list[Model] = []
        try:
            for op, arg in ops:
                if op == "append":
                    _apply(wal, arg, model)  # type: ignore[arg-type]
                elif op == "roll":
                    wal.roll()
                else:
                    wal.close()
                    wal = Wal.open(tmp, opts, background=False)
            reader = wal.reader()
            every = [r for batch in reader.batches(0, max_entries=7) for r in batch]
            assert _as_model(every) == model
            for start in starts:
                got = _as_model(reader.read(start, max_entries=1000))
                assert got == [m for m in model if m.version >= start]
            expected_next = model[-1].version + 1 if model else 1
            assert wal.next_version == expected_next
        finally:
            wal.close()


# --- damage -------------------------------------------------------------------------------

TEMPLATE_ENTRIES = 120  # ~3 KiB entries on average: several segments of 64 KiB
TEMPLATE_SEGMENT_KB = 64


@dataclass(frozen=True)
class Layout:
    """Where every record of the template WAL lies: file -> [Span]."""

    directory: Path
    records: dict[str, list[Span]]
    last_log: str


@dataclass(frozen=True)
class Span:
    version: int
    start: int
    data_end: int  # header and body end here; zero padding follows up to `end`
    end: int


@pytest.fixture(scope="module")
def template() -> Iterator[Layout]:
    """A WAL left behind by a writer that crashed (no clean close), made once."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "wal"
        subprocess.run(
            [
                sys.executable,
                str(CHILD),
                str(directory),
                "1",
                "exit",
                str(TEMPLATE_ENTRIES),
                str(TEMPLATE_SEGMENT_KB),
            ],
            check=True,
            timeout=120,
        )
        yield Layout(
            directory, _records_by_file(directory), sorted(directory.glob("*.log"))[-1].name
        )


def _records_by_file(directory: Path) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    reader = open_readonly(directory)  # a writable open would rewrite the crashed state
    for seg in reader.state().segments:
        spans = []
        for i in range(len(seg.index)):
            header, _ = seg.record(i, seg.end_of(i))
            start = seg.index.offsets[i]
            data_end = start + HEADER_SIZE + header.body_len
            spans.append(Span(header.version, start, data_end, start + header.record_size))
        out[seg.log_path.name] = spans
    assert len(out) >= 3, "the template should span several segments"
    return out


damage_st = st.tuples(
    st.sampled_from(["flip", "truncate"]),
    st.sampled_from(["log", "idx", "meta"]),
    st.integers(min_value=0, max_value=10**9),  # which file, reduced modulo the count
    st.floats(min_value=0, max_value=1, exclude_max=True),  # where in it
    st.integers(min_value=1, max_value=255),  # the xor mask of a flip
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(damage=damage_st)
def test_damage_is_cut_at_the_tail_or_reported_never_read(
    template: Layout, damage: tuple[str, str, int, float, int]
) -> None:
    kind, what, pick, where, mask = damage
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "wal"
        shutil.copytree(template.directory, directory)
        (directory / "LOCK").unlink()
        target = _pick_file(directory, what, pick)
        pos = _damage(target, kind, where, mask)
        try:
            records = _read_everything(directory)
        except WalCorruptionError:
            _error_is_allowed(template, target, kind, pos)
            return
        _result_is_allowed(template, target, kind, pos, records)


def _pick_file(directory: Path, what: str, pick: int) -> Path:
    if what == "meta":
        return directory / "meta.json"
    files = sorted(directory.glob(f"*.{what}"))
    return files[pick % len(files)]


def _damage(path: Path, kind: str, where: float, mask: int) -> int:
    data = bytearray(path.read_bytes())
    pos = int(where * len(data))
    if kind == "flip":
        data[pos] ^= mask
    else:
        del data[pos:]
    path.write_bytes(bytes(data))
    return pos


def _read_everything(directory: Path) -> list[WalRecord]:
    with Wal.open(directory, background=False) as wal:
        records = [r for batch in wal.reader().batches(0, max_entries=50) for r in batch]
        for rec in records:  # the body must be exactly what the writer wrote
            assert rec.arrow().equals(payload(rec.version)), f"version {rec.version} altered"
        return records


def _all_versions(template: Layout) -> list[int]:
    return [span.version for name in sorted(template.records) for span in template.records[name]]


def _in_padding(template: Layout, name: str, pos: int) -> bool:
    """Whether byte `pos` of log `name` is record padding, which carries no data."""
    return any(s.data_end <= pos < s.end for s in template.records.get(name, []))


def _error_is_allowed(template: Layout, target: Path, kind: str, pos: int) -> None:
    name = target.name
    if name.endswith(".idx"):
        pytest.fail(f"damage to index {name} must be repaired, not reported")
    if name == template.last_log and kind == "truncate":
        pytest.fail("a truncated tail must be cut, not reported")
    # Everything else may be reported: meta.json, sealed segments, a bad record with
    # good ones after it.


def _result_is_allowed(
    template: Layout, target: Path, kind: str, pos: int, records: list[WalRecord]
) -> None:
    got = [r.version for r in records]
    everything = _all_versions(template)
    name = target.name
    if name == template.last_log:
        # The tail may be cut at the damaged record, and only there: every record that
        # lies wholly before the damage must still be read.
        kept = [s.version for s in template.records[name] if s.end <= pos]
        before = [v for v in everything if v < template.records[name][0].version]
        assert got[: len(before) + len(kept)] == before + kept
        assert got == everything[: len(got)]
        if kind == "flip" and not _in_padding(template, name, pos):
            assert len(got) <= len(before) + len(kept), "a damaged record was read"
            # only the last record can be a torn tail; damage before it must be reported
            assert pos >= template.records[name][-1].start, "mid-segment damage was cut"
        return
    if name.endswith(".log") and not (kind == "flip" and _in_padding(template, name, pos)):
        pytest.fail(f"damage at byte {pos} of sealed segment {name} went unnoticed")
    assert got == everything
