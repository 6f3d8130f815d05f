"""`sqltopic.taos`: taospy's subscription API (`taos.tmq`) over sqltopic, for programs
written for TDengine's Python connector. It lives in `sqltopic.client.taos`; this
module is its public name."""

from __future__ import annotations

from sqltopic.client.taos import *  # noqa: F403
