"""`python -m sqltopic.cli`: the same as the `sqltopic` command."""

from __future__ import annotations

import sys

from sqltopic.cli.main import main

sys.exit(main())
