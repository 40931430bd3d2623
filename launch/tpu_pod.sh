#!/usr/bin/env bash
# The same training command on every worker of a TPU VM pod slice.
#   launch/tpu_pod.sh TPU_NAME ZONE --config experiments/qwen2_5_math_7b.py:greso --workdir gs://bucket/runs/7b \
#       --config.model.path=/models/Qwen2.5-Math-7B --config.data.data_dir=/data --config.eval.data_dir=/data
# On TPU VMs jax.distributed.initialize() discovers the workers itself; the repo and the model
# folder must exist at the same path on every worker (e.g. cloned by a startup script).
set -euo pipefail
if [ $# -lt 2 ]; then echo "usage: $0 TPU_NAME ZONE [greso_jax.train flags...]" >&2; exit 2; fi
tpu=$1; zone=$2; shift 2
repo=${REPO_DIR:-\$HOME/greso_jax}
printf -v args ' %q' "$@"
gcloud compute tpus tpu-vm ssh "$tpu" --zone="$zone" --worker=all \
  --command="cd $repo && . .venv/bin/activate && python -m greso_jax.train$args"
