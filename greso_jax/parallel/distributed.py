"""Multi-host initialisation: explicit flags, SLURM, TPU VMs, or single process (the default)."""

from __future__ import annotations

import os

from absl import flags

_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-host).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Total number of processes (multi-host).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (multi-host).")


def initialize_from_flags() -> None:
    """Calls jax.distributed.initialize when flags or the environment describe several processes."""
    import jax

    if _COORDINATOR.value:
        jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                                   process_id=_PROCESS_ID.value)
    elif int(os.environ.get("SLURM_NTASKS", "1")) > 1 or os.environ.get("TPU_WORKER_HOSTNAMES"):
        jax.distributed.initialize()  # jax's cluster auto-detection reads SLURM / TPU metadata
