"""Unit: Ctrl-C and SIGTERM as a stop request read between calls; a second one exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sqltopic.cli.stop import FORCED_EXIT, stop_requests

# A safety net only: the child sends itself its signals and ends at once.
DEADLINE_S = 60.0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_is_a_request_and_the_handlers_come_back(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    with stop_requests() as stop:
        seen = [stop.requested]
        os.kill(os.getpid(), sig)  # handled in the main thread before kill returns
        seen.append(stop.requested)
    assert seen == [False, True]
    assert signal.getsignal(sig) is before


def test_a_second_signal_exits_at_once_with_130() -> None:
    child = (
        "import os, signal\n"
        "from sqltopic.cli.stop import stop_requests\n"
        "with stop_requests() as stop:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    print('requested', stop.requested, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    print('not reached', flush=True)\n"
    )
    args = [sys.executable, "-c", child]
    done = subprocess.run(args, check=False, capture_output=True, text=True, timeout=DEADLINE_S)
    assert (done.returncode, done.stdout, done.stderr) == (FORCED_EXIT, "requested True\n", "")
