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

import gc
import os
import shlex
import signal
import sys
import threading

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


class Terminated(KeyboardInterrupt):
    """SIGTERM in a CLI without a safe point to stop at (evaluate, export): it stops at once, as
    Ctrl-C does (the same cleanup runs), and exits 143."""


def _inside_gc_callback(frame) -> bool:
    """Whether `frame` (where a signal interrupted Python) runs inside a garbage-collector callback
    (gc.callbacks, e.g. jax's): an exception raised there is swallowed, printed as "Exception ignored"."""
    codes = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def _raise_at_once(signum, frame) -> None:
    """Terminated (SIGTERM) or KeyboardInterrupt (SIGINT) in the main thread; inside a gc callback the
    signal is sent again shortly instead, so that it lands where it can stop the CLI."""
    if _inside_gc_callback(frame):
        threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum)).start()
        return
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


REDELIVER_S = 0.01


def stop_at_once_on_sigterm() -> None:
    """SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread: without it a scheduler's
    SIGTERM ends evaluate or export with no message and no cleanup (a partial --out folder). SIGINT
    raises KeyboardInterrupt as Python's own handler does, replacing core.startup's for the imports;
    neither is lost inside a gc callback (`_raise_at_once`)."""
    signal.signal(signal.SIGTERM, _raise_at_once)
    signal.signal(signal.SIGINT, _raise_at_once)


def ignore_sigterm_from_now() -> None:
    """For a CLI whose work is done: a SIGTERM arriving while the interpreter shuts down would
    otherwise raise inside atexit callbacks (jax's clean-up), printing tracebacks after the output."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def interrupted_exit_code(error: KeyboardInterrupt) -> int:
    return EXIT_CODES[signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT]


def interrupted_line(error: KeyboardInterrupt, what: str) -> str:
    """The one line of a CLI stopped at once by SIGTERM or Ctrl-C; `what` says what it left."""
    return f"stopped by {'SIGTERM' if isinstance(error, Terminated) else 'SIGINT (Ctrl-C)'}: {what}"


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
    args, coordinator = _without_port(sys.argv[1:])
    command = shlex.join(["python", "-m", "greso_jax.train", *args])
    if coordinator:  # the old port may be taken by now (or still held by a process being torn down)
        command += (" (on every process, each with its own --process_id; FREE_PORT: a port free on "
                    f"{coordinator}, not the one this run used)")
    return Stopped(f"stopped by {name} after step {step} ({saved}, in {workdir}); resume with: {command}",
                   EXIT_CODES[signum])


def _without_port(args: list[str]) -> tuple[list[str], str]:
    """`args` with --coordinator_address's port replaced by FREE_PORT, and that address's host (""
    when the flag is not given)."""
    out, host, i = [], "", 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--coordinator_address"):
            value = arg.partition("=")[2] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            i += 1 if "=" in arg else 2
            host = value.rpartition(":")[0] or value
            out.append(f"--coordinator_address={host}:FREE_PORT")
            continue
        out.append(arg)
        i += 1
    return out, host
