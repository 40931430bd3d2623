"""What the train and evaluate CLIs share: user errors as one line and exit status 2 (a traceback only with --verbose)."""

from __future__ import annotations

import errno
import logging
import os
import re
import sys
import threading
import traceback
import warnings

from absl import app, flags
from absl import logging as absl_logging

from greso_jax.parallel import preemption

_VERBOSE = flags.DEFINE_bool("verbose", False, "Print the traceback of an error, not just its one-line message.")

USAGE_ERROR = 2
_DISK_ERRNOS = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
# What else the file system refuses (a read-only mount: root's writes fail there too); the message names the path.
_REFUSED_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _user_errors() -> tuple[type[BaseException], ...]:
    from greso_jax.run.checkpoint import CheckpointError
    from greso_jax.data.sources import DataError
    from greso_jax.models.safetensors_io import SafetensorsError
    from greso_jax.models.weights import ModelFolderError
    from greso_jax.core.specs import ConfigError  # run_dir.RunDirError is one

    return (ConfigError, CheckpointError, DataError, ModelFolderError, SafetensorsError, FileNotFoundError,
            FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


def _is_user_error(error: BaseException, extra: tuple[type[BaseException], ...]) -> bool:
    if isinstance(error, (*_user_errors(), *extra)):
        return True
    # a full disk, a read-only mount: the message names the file (OSError's own, or the writer's)
    return isinstance(error, OSError) and error.errno in _DISK_ERRNOS | _REFUSED_ERRNOS


def _fail(message: str, verbose: bool) -> None:
    if verbose:
        traceback.print_exc()
    else:
        # Orbax's async writers leave failed asyncio tasks and unawaited coroutines behind; asyncio and
        # the warnings module report them when they are collected, which can be after our line, at
        # interpreter exit. The main thread reports that failure here, so the error line stays the last.
        logging.getLogger("asyncio").disabled = True
        warnings.simplefilter("ignore")
        # Writers that retry at exit (tensorboardX flushes again in an atexit hook on a full disk)
        # would print "Exception ignored" tracebacks after our line: the failure is reported here.
        sys.unraisablehook = lambda unraisable: None
    print(f"error: {message}", file=sys.stderr)
    sys.exit(USAGE_ERROR)


def _chain(error: BaseException) -> list[BaseException]:
    """The error and its causes, outermost first."""
    chain = [error]
    while chain[-1].__cause__ is not None or (chain[-1].__context__ is not None and not chain[-1].__suppress_context__):
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    return chain


def _flag_error(error: Exception, argv: list[str]) -> str:
    """One line for a failed --config / --config.<field> flag: the file that could not be loaded, or the
    override naming a field the config lacks (with ml_collections' "did you mean")."""
    chain = _chain(error)
    root, texts = chain[-1], " ".join(one_line(e) for e in chain)
    if isinstance(root, (KeyError, AttributeError)):
        key = one_line(root).strip("'\"")
        hint = re.search(r'Did you mean "(\w+)" instead of', texts)
        for arg in argv:
            name = arg.split("=", 1)[0]
            if name.startswith("--config.") and key in name.split("."):
                field = name[len("--config."):]
                parts = field.split(".")
                i = parts.index(key)  # the misspelt part: the field's name, or a section above it
                suggestion = ".".join(parts[:i] + [hint.group(1)] + parts[i + 1:]) if hint else ""
                return f"{name}: no such config field {field}" + (f"; did you mean {suggestion}?" if hint else "")
    if isinstance(root, SyntaxError):
        return f"--config: {root.filename}:{root.lineno}: {root.msg}"
    # ml_collections reports a config file it could not find as "Attempted [<how>]: <path> <reason>"
    loading = re.search(r"Attempted \[[^\]]*\]:\s*(\S+)\s+(.*)$", one_line(root))
    if loading:
        return f"--config: cannot load {loading.group(1)}: {loading.group(2)}"
    location = _user_code_location(root)
    # A bad value: absl's message names the flag. An experiment's get_config that raised while the
    # flag was parsed (a variant after ":") reaches here wrapped in a flag error too: its own frame
    # names the file, and absl's message would hold the whole traceback.
    if isinstance(error, flags.Error) and not location:
        return one_line(error)
    return f"--config: {location}{type(root).__name__}: {one_line(root)}"


def _user_code_location(error: BaseException) -> str:
    """"<file>:<line>: " of the innermost frame outside this package and the libraries (the
    experiment file that raised), or "" when there is none."""

    package = os.path.dirname(os.path.abspath(__file__))
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        path = os.path.abspath(frame.filename)
        if not path.startswith(package) and "site-packages" not in path and not frame.filename.startswith("<"):
            return f"{frame.filename}:{frame.lineno}: "
    return ""


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with every failure (a bad value, a config file that cannot be loaded, an
    unknown config field) reported in one line with exit status 2."""
    try:
        remaining = flags.FLAGS(argv)
        config = flags.FLAGS["config"].value if "config" in flags.FLAGS else None
        if config is not None:
            config.keys()  # ml_collections defers a config file's load failure to the first access
        return remaining
    except Exception as e:  # noqa: BLE001 -- the experiment file is user code: anything may fail in it
        _fail(_flag_error(e, argv), "--verbose" in argv)


class _WithoutTracebacks(logging.Filter):
    """Keeps a log record's message but drops its traceback: background threads (orbax's writers,
    asyncio) log the failure the main thread then reports in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def _quiet_background_errors() -> None:
    """Errors raised outside the main thread (tensorstore's writer threads calling into an asyncio loop
    orbax already closed after a failed write, a full disk) print one line each, once, instead of a
    traceback; the main thread reports the failure itself. Main-thread errors keep their tracebacks."""
    seen: set[str] = set()

    def say_once(exc_type, exc_value) -> None:
        line = f"warning: background thread: {exc_type.__name__}: {one_line(exc_value) if exc_value else ''}"
        if line not in seen:
            seen.add(line)
            sys.stderr.write(line + "\n")  # one write: other threads log to stderr meanwhile

    default_excepthook, default_unraisable = sys.excepthook, sys.unraisablehook

    def excepthook(exc_type, exc_value, tb):
        if threading.current_thread() is threading.main_thread():
            default_excepthook(exc_type, exc_value, tb)
        else:  # C++ threads report a failed Python callback through sys.excepthook (PyErr_Print)
            say_once(exc_type, exc_value)

    def unraisablehook(unraisable):
        if threading.current_thread() is threading.main_thread():
            default_unraisable(unraisable)
        else:
            say_once(unraisable.exc_type, unraisable.exc_value)

    sys.excepthook, sys.unraisablehook = excepthook, unraisablehook
    threading.excepthook = lambda args: say_once(args.exc_type, args.exc_value)


def run(main, *, user_errors: tuple[type[BaseException], ...] = ()) -> None:
    """app.run(main) where a user error (a bad config, data, checkpoint or model folder, a workdir in
    use, a full disk; plus `user_errors`) prints one line and exits with status 2."""
    def guarded(argv):
        preemption.stop_at_once_on_sigterm()  # train's main replaces it with preemption.install
        if not _VERBOSE.value:
            absl_logging.get_absl_handler().addFilter(_WithoutTracebacks())
            _quiet_background_errors()
        try:
            main(argv)
            preemption.ignore_sigterm_from_now()  # done: exiting, and raising in atexit hooks prints tracebacks
        except preemption.Stopped as e:  # by a signal, at a safe point: where it stopped, how to resume
            print(one_line(e), file=sys.stderr)
            sys.exit(e.exit_code)
        except KeyboardInterrupt as e:  # a CLI without a safe point to stop at (evaluate)
            print(preemption.interrupted_line(e, "nothing was written"), file=sys.stderr)
            # The finally blocks have run (grading workers stopped). Interpreter shutdown while XLA's
            # threads still run the abandoned computation can segfault (exit -11 seen on CPU): skip it.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(preemption.interrupted_exit_code(e))
        except Exception as e:  # noqa: BLE001 -- re-raised unless it is a user error
            if not _is_user_error(e, user_errors):
                raise
            _fail(one_line(e), _VERBOSE.value)

    app.run(guarded, flags_parser=parse_flags)
