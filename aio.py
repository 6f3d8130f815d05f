"""`sqltopic.aio`: the asyncio client (`connect`, `Connection`, `Consumer` as coroutines).
It lives in `sqltopic.client.aio`; this module is its public name."""

from __future__ import annotations

from sqltopic.client.aio import *  # noqa: F403
