"""WAL options (TDengine's database WAL_* parameters) with their defaults and checks."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sqltopic.errors import ConfigError

WalLevel = Literal[1, 2]

Clock = Callable[[], int]  # microseconds since the epoch; injected by tests

# The first version of a new WAL. 0 stays free so that offset 0 always means "before
# everything", a safe earliest position for any consumer.
INITIAL_VERSION = 1

# TDengine's WAL_FSYNC_PERIOD range (ms): beyond 3 minutes an unsynced level-1 WAL
# risks too much data on an OS crash to be a sensible setting.
MAX_FSYNC_PERIOD_MS = 180_000

# TDengine's default is 0 (roll only at a vnode commit). sqltopic has no TSDB commit to
# roll at, so segments roll at 64 MiB: small enough that retention frees space in
# useful steps and recovery scans little, large enough that a busy vnode makes few files.
DEFAULT_SEGMENT_SIZE_KB = 64 * 1024

# A quiet vnode still rolls hourly, so WAL_RETENTION_PERIOD (default 1 h) can delete
# its data: retention only ever removes closed segments.
DEFAULT_ROLL_PERIOD_S = 3600


@dataclass(frozen=True, slots=True)
class WalOptions:
    """Per-WAL settings. Units follow TDengine: ms, s and KB as named."""

    level: WalLevel = 1
    fsync_period_ms: int = 3000
    retention_period_s: int = 3600
    retention_size_kb: int = 0
    segment_size_kb: int = DEFAULT_SEGMENT_SIZE_KB
    roll_period_s: int = DEFAULT_ROLL_PERIOD_S

    def __post_init__(self) -> None:
        _check("WAL_LEVEL", self.level, 1, 2)
        _check("WAL_FSYNC_PERIOD", self.fsync_period_ms, 0, MAX_FSYNC_PERIOD_MS)
        _check("WAL_RETENTION_PERIOD", self.retention_period_s, -1, 2**31 - 1)
        _check("WAL_RETENTION_SIZE", self.retention_size_kb, -1, 2**53)
        _check("WAL_SEGMENT_SIZE", self.segment_size_kb, 0, 2**31 - 1)
        _check("WAL_ROLL_PERIOD", self.roll_period_s, 0, 2**31 - 1)

    def replace(self, **changes: int) -> WalOptions:
        """A copy with some options changed (ALTER DATABASE), checked again."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @property
    def segment_size_bytes(self) -> int:
        """Roll threshold in bytes; 0 means no size-based roll."""
        return self.segment_size_kb * 1024

    @property
    def retention_size_bytes(self) -> int:
        """Size cap in bytes; 0 or -1 mean no cap (TDengine accepts both)."""
        return max(self.retention_size_kb, 0) * 1024


def _check(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} = {value} is out of range; use {low}..{high}")


def wall_clock_us() -> int:
    return time.time_ns() // 1000
