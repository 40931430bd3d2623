#!/usr/bin/env bash
# N processes of greso_jax.train on this machine, talking over 127.0.0.1 (for testing the
# multi-host path). Usage:
#   DEVICES_PER_PROCESS=2 launch/local_multiprocess.sh 2 --config experiments/arith_tiny.py:quick --workdir runs/mh
# Process 0 prints to this terminal; process i>0 logs to $LOGDIR/process_i.log (default: the workdir's
# parent folder's .logs). If any process fails, the others are stopped.
set -euo pipefail
if [ $# -lt 1 ]; then echo "usage: $0 NUM_PROCESSES [greso_jax.train flags...]" >&2; exit 2; fi
num=$1; shift
port=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
logdir=${LOGDIR:-.logs}
mkdir -p "$logdir"
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
if [ -n "${DEVICES_PER_PROCESS:-}" ]; then
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=$DEVICES_PER_PROCESS"
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
for ((i = 0; i < num; i++)); do
  args=(-m greso_jax.train --coordinator_address="127.0.0.1:$port" --num_processes="$num" --process_id="$i" "$@")
  if [ "$i" -eq 0 ]; then
    python3 "${args[@]}" &
  else
    python3 "${args[@]}" >"$logdir/process_$i.log" 2>&1 &
  fi
  pids+=($!)
done
status=0
for ((i = 0; i < num; i++)); do
  if ! wait -n; then status=1; cleanup; fi
done
exit $status
