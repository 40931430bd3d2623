"""CLI: python -m greso_jax.train --config experiments/<file>.py[:variant] --workdir DIR [--config.x=y] [--verbose]."""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports below: a signal meanwhile gives one line
    from greso_jax.core.startup import stop_quietly_until_started

    stop_quietly_until_started("train")

import os

from absl import flags, logging
from ml_collections import config_flags

from greso_jax.run import cli
from greso_jax.parallel import preemption
from greso_jax.parallel.distributed import initialize_from_flags  # defines the multi-host flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file (…/x.py[:variant]).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: checkpoints, metrics, plots. "
                               "Starting again with the same workdir resumes.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv) -> None:
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint file at INFO
    initialize_from_flags()
    # After initialize: jax.distributed installs its own SIGTERM notifier, which this replaces (the
    # hosts agree on the stop step through preemption.stop_agreed instead).
    preemption.install()  # SIGTERM / SIGINT: stop after the step in flight, checkpointed (exit 143 / 130)
    from greso_jax.run.run_dir import RunDirError
    from greso_jax.run.trainer import Trainer

    if os.path.exists(_WORKDIR.value) and not os.path.isdir(_WORKDIR.value):
        raise RunDirError(f"--workdir: {_WORKDIR.value} exists and is not a folder")
    _check_writable(_WORKDIR.value)
    Trainer(_CONFIG.value, _WORKDIR.value).run()


def _check_writable(workdir: str) -> None:
    """RunDirError naming the folder when `workdir` (or, not made yet, its nearest existing parent)
    takes no writes: a read-only mount refuses them to root as well, which chmod does not."""
    from greso_jax.run.run_dir import RunDirError

    folder = os.path.abspath(workdir)
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if os.path.isdir(folder) and not os.access(folder, os.W_OK):
        made = "" if folder == os.path.abspath(workdir) else f" (where {workdir} would be made)"
        raise RunDirError(f"--workdir: {folder}{made} does not take writes (a read-only file system or no "
                          "permission); use a writable --workdir")


def run() -> None:
    cli.run(main)  # user errors (config, data, checkpoints, model folder, workdir lock, full disk): one line, exit 2


if __name__ == "__main__":
    run()
