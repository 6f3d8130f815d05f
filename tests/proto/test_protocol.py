"""The protocol as published: services and methods, documentation, and the chunked Arrow
payload of a poll surviving a round trip through the wire format."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.proto.test_generated import PROTO_DIR, PROTO_PATH

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "protocol.md"
MiB = 1 << 20
# A response frame's limit (gRPC's default receive limit) and the chunk payload that
# leaves room for the frame's other fields.
FRAME_LIMIT = 4 * MiB
CHUNK = 4 * MiB - 64 * 1024

# service -> method -> (client streams, server streams)
METHODS: dict[str, dict[str, tuple[bool, bool]]] = {
    "Session": {"Login": (False, False), "Logout": (False, False)},
    "Sql": {
        "Execute": (False, True),
        "Run": (False, False),
        "Write": (True, False),
        "Writes": (True, True),
    },
    "Mnode": {
        "Subscribe": (False, False),
        "Heartbeat": (False, False),
        "Heartbeats": (False, False),
        "GetAssignment": (False, False),
        "Routes": (False, False),
        "ReadCatalog": (False, True),
        "Unsubscribe": (False, False),
        "CloseConsumer": (False, False),
        "Close": (False, False),  # CloseConsumer's deprecated first name, still served
    },
    "Vnode": {
        "Poll": (False, True),
        "Fetch": (False, False),
        "Consume": (True, True),
        "Commit": (False, False),
        "Acknowledge": (False, False),
        "Committed": (False, False),
        "OffsetRange": (False, False),
        "OffsetsForTimes": (False, False),
        "ReadEntries": (False, True),
        "ReadTopic": (False, True),
    },
    "Cluster": {"DnodeHeartbeat": (False, False), "CreateTables": (False, False)},
    "Dnode": {
        "Append": (False, False),
        "Entries": (False, False),
        "Offsets": (False, False),
        "Lags": (False, False),
    },
}


def test_package_and_file_name() -> None:
    assert pb.DESCRIPTOR.package == "sqltopic.v1"
    assert pb.DESCRIPTOR.name == PROTO_PATH


def test_every_service_and_method_exists_with_its_streaming_shape() -> None:
    services = pb.DESCRIPTOR.services_by_name
    assert set(services) == set(METHODS)
    for name, methods in METHODS.items():
        found = services[name].methods_by_name
        assert set(found) == set(methods), name
        for method, (client_streams, server_streams) in methods.items():
            m = found[method]
            assert (m.client_streaming, m.server_streaming) == (client_streams, server_streams)


def test_generated_stubs_have_a_stub_servicer_and_registration_per_service() -> None:
    grpc_module = importlib.import_module("sqltopic.proto.sqltopic.v1.sqltopic_pb2_grpc")
    for name in METHODS:
        for attr in (f"{name}Stub", f"{name}Servicer", f"add_{name}Servicer_to_server"):
            assert hasattr(grpc_module, attr), attr


# --- documentation -------------------------------------------------------------------


def _described(tmp_path: Path) -> descriptor_pb2.FileDescriptorProto:
    """The .proto's descriptor with its comments (source info)."""
    src = tmp_path / "src"
    (src / PROTO_PATH).parent.mkdir(parents=True)
    (src / PROTO_PATH).write_bytes((PROTO_DIR / "sqltopic.proto").read_bytes())
    out = tmp_path / "set.pb"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", "--include_source_info",
         f"--descriptor_set_out={out}", str(src / PROTO_PATH)],
        check=True, capture_output=True,
    )  # fmt: skip
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return files.file[0]


def _elements(fd: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(name, source path) of every message, field, oneof, enum, value, service, method."""
    # field numbers of FileDescriptorProto / DescriptorProto / ... in descriptor.proto
    for i, msg in enumerate(fd.message_type):
        path = (4, i)
        yield msg.name, path
        for j, field in enumerate(msg.field):
            yield f"{msg.name}.{field.name}", (*path, 2, j)
        for j, oneof in enumerate(msg.oneof_decl):
            if not oneof.name.startswith("_"):  # proto3 `optional` makes synthetic ones
                yield f"{msg.name}.{oneof.name}", (*path, 8, j)
    for i, enum in enumerate(fd.enum_type):
        yield enum.name, (5, i)
        for j, value in enumerate(enum.value):
            yield value.name, (5, i, 2, j)
    for i, service in enumerate(fd.service):
        yield service.name, (6, i)
        for j, method in enumerate(service.method):
            yield f"{service.name}.{method.name}", (6, i, 2, j)


def test_every_element_of_the_proto_has_a_comment(tmp_path: Path) -> None:
    fd = _described(tmp_path)
    comments = {tuple(loc.path): loc.leading_comments for loc in fd.source_code_info.location}
    missing = [name for name, path in _elements(fd) if not comments.get(path, "").strip()]
    assert not missing, f"undocumented in sqltopic.proto: {missing}"


def _doc_sections() -> dict[str, str]:
    """docs/protocol.md split at headings: the heading's first `Name` -> section text."""
    sections: dict[str, str] = {}
    for part in re.split(r"^#+ ", DOCS.read_text(), flags=re.MULTILINE)[1:]:
        title, _, body = part.partition("\n")
        name = re.search(r"`([A-Za-z_.]+)`", title)
        if name:
            sections[name.group(1)] = body
    return sections


def test_docs_have_a_table_with_every_field_of_every_message() -> None:
    sections = _doc_sections()
    missing: list[str] = []
    for msg in pb.DESCRIPTOR.message_types_by_name.values():
        body = sections.get(msg.name)
        if body is None:
            missing.append(msg.name)
            continue
        missing += [f"{msg.name}.{f.name}" for f in msg.fields if f"| `{f.name}` |" not in body]
    for enum in pb.DESCRIPTOR.enum_types_by_name.values():
        body = sections.get(enum.name, "")
        missing += [v.name for v in enum.values if f"`{v.name}`" not in body]
    for service in pb.DESCRIPTOR.services_by_name.values():
        body = sections.get(service.name, "")
        missing += [f"{service.name}.{m.name}" for m in service.methods if m.name not in body]
    assert not missing, f"not documented in docs/protocol.md: {missing}"


# --- a poll's Arrow payload, chunked and reassembled --------------------------------


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=65536)
    return bytes(sink.getvalue().to_pybytes())


def poll_frames(
    offset: int, end_offset: int, blocks: list[tuple[str | None, pa.Table]], chunk: int
) -> list[pb.PollResponse]:
    """A data message as a server sends it: the message, then block parts, at most
    `chunk` payload bytes per frame."""
    first = pb.PollResponse(
        data=pb.DataMessage(
            offset=offset,
            end_offset=end_offset,
            block_count=len(blocks),
            row_count=sum(t.num_rows for _, t in blocks),
        )
    )
    frames, frame, room = [first], first, chunk
    for index, (table_name, table) in enumerate(blocks):
        payload, start = _ipc(table), 0
        while start < len(payload) or start == 0:
            if room == 0:
                frame = pb.PollResponse()
                frames.append(frame)
                room = chunk
            piece = payload[start : start + room]
            part = frame.blocks.add(block=index, arrow_ipc=piece)
            if start == 0 and table_name is not None:
                part.table_name = table_name
            start += len(piece)
            room -= len(piece)
            if not payload:
                break
    return frames


def reassemble(
    frames: list[pb.PollResponse],
) -> tuple[pb.DataMessage, list[tuple[str | None, pa.Table]]]:
    """What a client does: the message from the first frame, each block's stream from
    its parts in order."""
    assert frames[0].WhichOneof("message") == "data"
    streams: dict[int, bytearray] = {}
    names: dict[int, str | None] = {}
    for frame in frames:
        for part in frame.blocks:
            if part.block not in streams:
                streams[part.block] = bytearray()
                names[part.block] = part.table_name if part.HasField("table_name") else None
            streams[part.block] += part.arrow_ipc
    blocks = [(names[i], pa.ipc.open_stream(bytes(streams[i])).read_all()) for i in sorted(streams)]
    return frames[0].data, blocks


def _meters(rows: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array(range(start, start + rows), pa.timestamp("ms")),
            "current": pa.array([float(i % 17) for i in range(rows)], pa.float32()),
            "voltage": pa.array([200 + i % 40 for i in range(rows)], pa.int32()),
            "location": pa.array([f"California.City{i % 9}" for i in range(rows)]),
        }
    )


def _wire(frames: list[pb.PollResponse]) -> list[pb.PollResponse]:
    return [pb.PollResponse.FromString(f.SerializeToString()) for f in frames]


def test_poll_data_message_round_trips_with_arrow_blocks() -> None:
    blocks: list[tuple[str | None, pa.Table]] = [("d1001", _meters(100)), ("d1002", _meters(3, 7))]
    frames = _wire(poll_frames(10, 25, blocks, chunk=CHUNK))
    assert len(frames) == 1
    data, got = reassemble(frames)
    assert (data.offset, data.end_offset, data.block_count, data.row_count) == (10, 25, 2, 103)
    assert [(n, t.equals(b[1])) for (n, t), b in zip(got, blocks, strict=True)] == [
        ("d1001", True),
        ("d1002", True),
    ]


def test_a_block_without_table_name_keeps_it_absent() -> None:
    frames = _wire(poll_frames(1, 2, [(None, _meters(5))], chunk=CHUNK))
    _, [(name, table)] = reassemble(frames)
    assert name is None
    assert table.num_rows == 5


@pytest.mark.parametrize("chunk", [1000, 4096])
def test_blocks_cut_at_arbitrary_bytes_reassemble(chunk: int) -> None:
    blocks: list[tuple[str | None, pa.Table]] = [("t1", _meters(500)), ("t2", _meters(800))]
    frames = _wire(poll_frames(1, 2, blocks, chunk=chunk))
    assert len(frames) > 10
    _, got = reassemble(frames)
    assert all(t.equals(b[1]) for (_, t), b in zip(got, blocks, strict=True))


def test_a_large_message_is_cut_into_frames_under_the_default_grpc_limit() -> None:
    big = _meters(400_000)  # ~12 MiB of Arrow IPC
    frames = poll_frames(1, 2, [("d1001", big)], chunk=CHUNK)
    assert len(frames) >= 3
    assert max(f.ByteSize() for f in frames) <= FRAME_LIMIT
    _, [(_, table)] = reassemble(_wire(frames))
    assert table.equals(big)


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        (pb.PollResponse(meta=pb.MetaMessage(offset=4, end_offset=6, version=5,
                                             event_json='{"type": "drop"}')), "meta"),
        (pb.PollResponse(data_lost=pb.DataLostMessage(offset=1, end_offset=90)), "data_lost"),
        (pb.PollResponse(empty=pb.EmptyMessage(offset=7, end_offset=9)), "empty"),
    ],
)  # fmt: skip
def test_other_message_kinds_round_trip(frame: pb.PollResponse, kind: str) -> None:
    [back] = _wire([frame])
    assert back.WhichOneof("message") == kind
    assert back == frame


def test_absent_optional_fields_are_distinguishable() -> None:
    req = pb.PollRequest.FromString(pb.PollRequest(topic="t", vgroup=2).SerializeToString())
    assert not req.HasField("position")
    assert not req.HasField("with_table_name")
    req.position = 0
    assert pb.PollRequest.FromString(req.SerializeToString()).HasField("position")
    off = pb.CommittedOffset(topic="t", vgroup=2)
    assert not pb.CommittedOffset.FromString(off.SerializeToString()).HasField("offset")
