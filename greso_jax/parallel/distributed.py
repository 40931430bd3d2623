"""Multi-host initialisation: explicit flags, SLURM, TPU VMs, or single process (the default)."""

from __future__ import annotations

import os

from absl import flags

_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-host).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Total number of processes (multi-host).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (multi-host).")
_LOCAL_DEVICES = flags.DEFINE_string("local_device_ids", None,
                                     "Comma-separated local device ids this process uses (optional).")


def cluster_kind() -> str:
    """'flags', 'slurm', 'tpu' or 'single': where the process layout comes from."""
    if _COORDINATOR.value:
        return "flags"
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return "slurm"
    if os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("CLOUD_TPU_TASK_ID"):
        return "tpu"
    return "single"


def initialize_from_flags() -> str:
    """Calls jax.distributed.initialize when flags or the environment describe several
    processes; returns the cluster kind. CPU processes talk through gloo collectives."""
    import jax

    kind = cluster_kind()
    if kind == "single":
        return kind
    if os.environ.get("JAX_PLATFORMS", "").startswith("cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if kind == "flags":
        if _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
            raise ValueError("--coordinator_address needs --num_processes and --process_id")
        local = [int(i) for i in _LOCAL_DEVICES.value.split(",")] if _LOCAL_DEVICES.value else None
        jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                                   process_id=_PROCESS_ID.value, local_device_ids=local)
    else:  # jax's cluster auto-detection reads the SLURM variables / TPU metadata
        jax.distributed.initialize()
    return kind
