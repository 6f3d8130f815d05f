"""`python -m sqltopic.server`: the same as `sqltopic server`."""

from __future__ import annotations

import sys

from sqltopic.server.main import main

sys.exit(main())
