"""A CLI's first lines: while the heavy libraries (JAX, orbax, Grain) import, a Ctrl-C or a
scheduler's SIGTERM ends the process with one line instead of an import-time traceback. Nothing
has been written by then; the CLI's own handling (parallel.preemption) takes over once it starts."""

from __future__ import annotations

import os
import signal
import sys


def stop_quietly_until_started(program: str) -> None:
    """SIGINT / SIGTERM: one line naming `program`, exit 130 / 143, until the CLI installs its own."""

    def stop(signum, frame):
        what = "interrupted" if signum == signal.SIGINT else "terminated"
        sys.stderr.write(f"{program}: {what} while starting; nothing was written\n")
        os._exit(128 + signum)  # mid-import: no clean-up to run, and raising would print the traceback

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
