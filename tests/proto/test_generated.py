"""The committed stubs are what `make proto` generates from the committed .proto.

The test runs the Makefile's protoc command into a temporary directory and compares the
output byte for byte with the files in proto/sqltopic/v1/, so CI fails when someone edits
the .proto without regenerating (or edits a generated file by hand).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto" / "sqltopic" / "v1"
# The path protoc sees, below its -I root: it names the generated modules.
PROTO_PATH = "sqltopic/proto/sqltopic/v1/sqltopic.proto"
GENERATED = ("sqltopic_pb2.py", "sqltopic_pb2.pyi", "sqltopic_pb2_grpc.py", "sqltopic_pb2_grpc.pyi")


def generate(root: Path, out: Path) -> None:
    """Run protoc as `make proto` does, with `root` as -I root and `out` as output root."""
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{root}",
            f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
            f"--python_out={out}", f"--grpc_python_out={out}",
            f"--mypy_out={out}", f"--mypy_grpc_out={out}",
            str(root / PROTO_PATH),
        ],
        check=True, capture_output=True, cwd=root,
    )  # fmt: skip


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    (src / PROTO_PATH).parent.mkdir(parents=True)
    shutil.copy(PROTO_DIR / "sqltopic.proto", src / PROTO_PATH)
    out.mkdir()
    generate(src, out)
    fresh_dir = (out / PROTO_PATH).parent
    assert sorted(p.name for p in fresh_dir.iterdir()) == sorted(GENERATED)
    stale = [
        name
        for name in GENERATED
        if (fresh_dir / name).read_bytes() != (PROTO_DIR / name).read_bytes()
    ]
    assert not stale, f"generated files are stale, run `make proto`: {stale}"
