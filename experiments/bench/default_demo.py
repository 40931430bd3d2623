"""Runs the embedded default (experiments/arith_tiny.py) for several strategies and prints what it demonstrates.

Each strategy runs as its own `python -m greso_jax.train` subprocess in WORKDIR_ROOT/<strategy>;
the first run's warm start is copied to the others (same settings, so the cache key matches)
unless --fresh_warmstart is given. Per run the table reports held-out accuracy before/after,
the zero-variance group kinds seen, GRESO's skips, rollouts generated and the wall-time split.

  python experiments/bench/default_demo.py --variant quick --strategies greso,ds,vanilla,aero \
      --workdir_root /tmp/demo
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from greso_jax.run.records import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def summarize_run(records: list[dict], wall_s: float) -> dict:
    """Metrics records of one run -> one table row."""
    evals = [r for r in records if "eval/accuracy" in r]
    steps = [r for r in records if r["step"] > 0]

    def column(name):
        return np.asarray([r.get(name, 0.0) for r in steps], np.float64)

    before, after = evals[0]["eval/accuracy"], evals[-1]["eval/accuracy"]
    return {
        "acc_before": round(100 * before, 1),
        "acc_after": round(100 * after, 1),
        "gain_pts": round(100 * (after - before), 1),
        "steps": len(steps),
        "steps_easy>0": int(np.sum(column("selection/easy_ratio") > 0)),
        "steps_hard>0": int(np.sum(column("selection/hard_ratio") > 0)),
        "easy_ratio": round(float(np.mean(column("selection/easy_ratio"))), 3),
        "hard_ratio": round(float(np.mean(column("selection/hard_ratio"))), 3),
        "skipped_easy": int(np.sum(column("selection/skipped_easy"))),
        "skipped_hard": int(np.sum(column("selection/skipped_hard"))),
        "rollouts": int(steps[-1].get("rollout/num_responses", 0)) if steps else 0,
        "s_rollout": round(float(np.sum(column("time/rollout"))), 1),
        "s_update": round(float(np.sum(column("time/update"))), 1),
        "s_eval": round(float(sum(r.get("time/eval", 0.0) for r in evals)), 1),
        "wall_s": round(wall_s, 1),
    }


def run_one(config: str, workdir: str, overrides: list[str]) -> float:
    command = [sys.executable, "-m", "greso_jax.train", "--config", config, "--workdir", workdir,
               "--config.train.quiet=True", *overrides]
    start = time.perf_counter()
    with open(os.path.join(workdir, "train.log"), "w") as log:
        proc = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode:
        raise SystemExit(f"{config} failed (exit {proc.returncode}); see {workdir}/train.log")
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="", help="extra variant options, e.g. 'quick'")
    parser.add_argument("--strategies", default="greso,ds,vanilla,aero")
    parser.add_argument("--workdir_root", required=True)
    parser.add_argument("--fresh_warmstart", action="store_true", help="every run trains its own warm start")
    parser.add_argument("overrides", nargs="*", help="--config.field=value pairs passed to every run")
    args = parser.parse_args(argv)
    rows, shared_warmstart = [], None
    for strategy in [s.strip() for s in args.strategies.split(",") if s.strip()]:
        options = ",".join(o for o in (strategy, args.variant) if o)
        workdir = os.path.join(args.workdir_root, strategy)
        if os.path.exists(workdir):
            shutil.rmtree(workdir)
        os.makedirs(workdir)
        if shared_warmstart and not args.fresh_warmstart:
            shutil.copytree(shared_warmstart, os.path.join(workdir, "warmstart"))
        wall = run_one(f"experiments/arith_tiny.py:{options}", workdir, args.overrides)
        shared_warmstart = shared_warmstart or os.path.join(workdir, "warmstart")
        row = {"strategy": strategy, **summarize_run(read_metrics(workdir), wall)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    keys = list(rows[0])
    widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in keys]
    print(" | ".join(k.ljust(w) for k, w in zip(keys, widths)))
    for r in rows:
        print(" | ".join(str(r[k]).ljust(w) for k, w in zip(keys, widths)))


if __name__ == "__main__":
    main()
