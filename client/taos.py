"""`sqltopic.taos`: a drop-in for taospy's subscription API (`taos.tmq`), so that a
consumer written for TDengine's Python connector runs on sqltopic with only its import
changed: `from sqltopic.taos import Consumer`.

* `Consumer`, `Message`, `MessageBlock`, `TopicPartition`, `TmqError` (also a
  `sqltopic.Error`): taospy's names, arguments, return types and errors
  (taos_consumer.py, taos_message.py, taos_errors.py).
* the `td.connect.*` and TMQ config keys of TDengine's docs, mapped onto sqltopic's
  (taos_config.py; the table is in docs/client.md).
* `connect()`: the few `taos.connect()` calls those examples make for their SQL
  (taos_connection.py).
"""

from __future__ import annotations

from sqltopic.client.taos_connection import TaosConnection, TaosResult, connect
from sqltopic.client.taos_consumer import Consumer
from sqltopic.client.taos_errors import TmqError
from sqltopic.client.taos_message import Message, MessageBlock, TaosField, TopicPartition

__all__ = [
    "Consumer",
    "Message",
    "MessageBlock",
    "TaosConnection",
    "TaosField",
    "TaosResult",
    "TmqError",
    "TopicPartition",
    "connect",
]
