"""The Python client: everything a program needs to talk to a sqltopic server, using only
the public protocol (`proto/`) and the error classes (`errors`).

* `connection` — `connect()` and `Connection` (SQL, fast Arrow writes), and the one
  place where a failed call becomes its `sqltopic.Error` subclass.
* `config` — consumer config keys, TDengine aliases, validation.
* `message` — `Message`, `Block`, `TopicPartition`, and building a message from a poll.
* `consumer` — `Consumer` on threads; `aio` — the same on asyncio (`sqltopic.aio`).
* `state`, `effects`, `offsets`, `group`, `core` — the consumer's sans-IO core that both
  front ends drive: it decides which calls to make; they make them.
"""

from __future__ import annotations

from sqltopic.client.connection import Connection, Result, connect

__all__ = ["Connection", "Result", "connect"]
