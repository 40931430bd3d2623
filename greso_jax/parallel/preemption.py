"""Preemption: SIGTERM and SIGINT ask a run to stop at its next safe point instead of killing it.

SLURM, Kubernetes and TPU maintenance send SIGTERM some time before SIGKILL; a user sends SIGINT
(Ctrl-C). `install` (called by the train CLI, before anything is built) turns either into a
request: the first one only sets a flag, which the training loop reads after each finished step
(`stop_agreed`), so the step in flight completes, its checkpoint is written and verified, and the
records are closed. On several hosts the flag is OR-ed across hosts at every check: a signal that
reaches one host stops all of them after the same step (orbax saves are collective, so a host that
stopped alone would leave the others waiting). A second SIGINT exits at once (the user means it);
repeated SIGTERMs are ignored (launchers and schedulers often send one to each process and then
another to the group).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys

import numpy as np

from greso_jax.parallel import multihost

EXIT_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}  # 128 + the signal's number, as a shell reports it

_received: list[int] = []  # the signals received since `install`, in order
_installed: dict[int, object] = {}  # signal -> the handler it replaced


class Stopped(Exception):
    """A run stopped early by a signal at a safe point; `str(e)` is the one line to print and
    `exit_code` the status to exit with (143 for SIGTERM, 130 for SIGINT)."""

    def __init__(self, line: str, exit_code: int):
        super().__init__(line)
        self.exit_code = exit_code


def _handle(signum, frame) -> None:
    del frame
    if signum == signal.SIGINT and signal.SIGINT in _received:
        # os.write: a signal handler may run between any two bytecodes, also inside print's own lock.
        os.write(2, b"\nsecond interrupt: stopping now, without a checkpoint of the step in flight; "
                    b"a relaunch resumes from the newest checkpoint\n")
        os._exit(EXIT_CODES[signal.SIGINT])
    if not _received:
        name = signal.Signals(signum).name
        os.write(2, f"\n{name}: stopping after the step in flight (checkpointing it); "
                    f"press Ctrl-C again to stop at once\n".encode())
    _received.append(signum)


def install() -> None:
    """Makes SIGTERM and SIGINT stop requests for this process (main thread only)."""
    _received.clear()
    for signum in EXIT_CODES:
        if signum not in _installed:
            _installed[signum] = signal.signal(signum, _handle)


def uninstall() -> None:
    """Restores the handlers `install` replaced and forgets received signals."""
    for signum, previous in _installed.items():
        signal.signal(signum, previous)
    _installed.clear()
    _received.clear()


def requested_signal() -> int | None:
    """The first signal received on this host since `install` (None: none)."""
    return _received[0] if _received else None


def stop_agreed() -> int | None:
    """The signal that stops the run, agreed by every host: the first signal seen on the lowest
    host that received one (None: keep going). A collective on several hosts: every host must
    call it at the same point of every step."""
    local = requested_signal() or 0
    if not multihost.is_multihost():
        return local or None
    seen = multihost.allgather(np.asarray([local], np.int32))[:, 0]
    received = [int(s) for s in seen if s]
    return received[0] if received else None


def stopped(signum: int, step: int, saved_step: int | None, workdir: str) -> Stopped:
    """The Stopped error for a run stopped by `signum` after `step` with its newest checkpoint at
    `saved_step`: one line saying where it stopped and the command that resumes it."""
    name = signal.Signals(signum).name
    saved = (f"checkpoint of step {saved_step} written and verified" if saved_step == step else
             f"step {step} was not checkpointable; the newest checkpoint is step {saved_step}" if saved_step else
             "no checkpoint written")
    command = shlex.join(["python", "-m", "greso_jax.train", *sys.argv[1:]])
    return Stopped(f"stopped by {name} after step {step} ({saved}, in {workdir}); resume with: {command}",
                   EXIT_CODES[signum])
