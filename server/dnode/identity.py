"""Who a dnode is, kept in its data directory (`dnode.json`) once its mnode first
answered: the cluster it joined, its dnode id and its endpoint. A restarted dnode comes
back as the same dnode; a data directory never joins a second cluster.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from sqltopic.errors import DataFileDamaged
from sqltopic.wal.fsutil import atomic_write

IDENTITY_FILE = "dnode.json"
INSTANCE_FILE = "instance"
_DAMAGED = (
    "the dnode's identity file is damaged; restore it from a backup of the data directory, "
    "or move the directory away and admit the dnode again (its vgroups are then lost)"
)


@dataclass(frozen=True)
class DnodeIdentity:
    cluster_id: str
    dnode_id: int
    endpoint: str


def load_identity(data: Path) -> DnodeIdentity | None:
    """The identity kept in `data`, or None before the dnode first joined."""
    path = data / IDENTITY_FILE
    try:
        raw = json.loads(path.read_text())
        return DnodeIdentity(str(raw["cluster_id"]), int(raw["dnode_id"]), str(raw["endpoint"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise DataFileDamaged(
            f"{path}: {_DAMAGED} ({type(exc).__name__})", path=str(path)
        ) from None


def instance_of(data: Path) -> str:
    """The id of this data directory as a dnode's, made at its first start: the mnode
    ties the dnode to it at its first heartbeat, and refuses another directory later."""
    path = data / INSTANCE_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        made = uuid.uuid4().hex
        atomic_write(path, made.encode())
        return made


def save_identity(data: Path, identity: DnodeIdentity) -> None:
    """Write the identity durably (atomic replace, synced)."""
    atomic_write(data / IDENTITY_FILE, json.dumps(asdict(identity)).encode())
