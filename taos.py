"""`sqltopic.taos`: taospy's subscription API (`taos.tmq`), SQL API and errors over
sqltopic, for programs written for TDengine's Python connector. It lives in
`sqltopic.client.taos`; this module is its public name."""

from __future__ import annotations

from sqltopic.client import taos as _impl
from sqltopic.client import taos_errors as _errors
from sqltopic.client.taos import *  # noqa: F403

# taospy's ConnectionError, as `taos.ConnectionError`: not in `import *`, where it would
# hide the builtin of that name.
ConnectionError = _errors.ConnectionError
__all__ = list(_impl.__all__)
