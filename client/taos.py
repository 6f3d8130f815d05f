"""`sqltopic.taos`: a drop-in for taospy's subscription API (`taos.tmq`) and the SQL
calls of TDengine's Python examples, so that a program written for TDengine's Python
connector runs on sqltopic with only its import changed: `from sqltopic.taos import
Consumer`, `import sqltopic.taos as taos`.

* `Consumer`, `Message`, `MessageBlock`, `TopicPartition`: taospy's names, arguments,
  return types and errors (taos_consumer.py, taos_message.py).
* the `td.connect.*` and TMQ config keys of TDengine's docs, mapped onto sqltopic's
  (taos_config.py; the table is in docs/client.md).
* `connect()`, `TaosConnection`, `TaosResult`, `TaosCursor`: taospy's SQL API
  (taos_connection.py, taos_cursor.py), rows as taospy gives them (taos_rows.py).
* `Error` and taospy's subclasses, `TmqError` among them, each also a `sqltopic.Error`
  (taos_errors.py).
"""

from __future__ import annotations

from sqltopic.client.taos_connection import TaosConnection, TaosResult, connect
from sqltopic.client.taos_consumer import Consumer
from sqltopic.client.taos_cursor import TaosCursor
from sqltopic.client.taos_errors import (
    ConnectionError,  # noqa: F401 - public as taos.ConnectionError, not in `import *`
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    ResultError,
    TmqError,
)
from sqltopic.client.taos_message import Message, MessageBlock, TaosField, TopicPartition

# ConnectionError is left out of `import *`, which would hide the builtin of that name
# (taospy's package __all__ lists no error class); use it as taos.ConnectionError.
__all__ = [
    "Consumer",
    "DataError",
    "DatabaseError",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "Message",
    "MessageBlock",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "ResultError",
    "TaosConnection",
    "TaosCursor",
    "TaosField",
    "TaosResult",
    "TmqError",
    "TopicPartition",
    "connect",
]
