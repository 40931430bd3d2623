"""Per-level outcome profile of a warm-started arithmetic policy: for each level, the chance that
a group of G responses is all correct, all wrong or mixed, and how likely an all-correct (all-wrong)
group is to repeat at the prompt's next rollout under the same policy.

It is what a task's level mix is chosen from (experiments/arith_headline.py): a group's outcome
depends on the level, so the mix sets the zero-variance share RL meets and its consistency.
Each prompt gets --samples responses (n >= 2G); from its k correct ones, C(k, G) / C(n, G) is an
unbiased estimate of p^G, and C(k, 2G) / C(n, 2G) of p^2G (two groups in a row all correct), so
the repeat chance E[p^2G] / E[p^G] carries no small-sample bias.

  python experiments/bench/level_profile.py --config experiments/arith_tiny.py:vanilla --workdir /tmp/prof

With --run_dir and --step it profiles that step's checkpoint of an RL run (the run's own config)
instead of the warm start: which levels RL moved, and how far; with --heldout, on the held-out
rows, so the two together say whether RL's gain on its prompts carries over to unseen ones.
"""

from __future__ import annotations

import collections
import math
import os
import sys

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from greso_jax.run.run_dir import saved_step
from greso_jax.run.scoring import EvalSettings, sample_and_grade
from greso_jax.config import validate
from greso_jax.data import arith
from greso_jax.run.build import rows_from_config
from greso_jax.parallel.sharding import mesh_from_config
from greso_jax.run.build import build_policy, build_tokenizer, load_policy
from greso_jax.rewards.pool import GradingPool

_CONFIG = config_flags.DEFINE_config_file("config", None, "experiment config (its warm start is used)")
_WORKDIR = flags.DEFINE_string("workdir", None, "where the warm start is cached")
_PER_LEVEL = flags.DEFINE_integer("per_level", 64, "training prompts sampled per level")
_SAMPLES = flags.DEFINE_integer("samples", 32, "responses per prompt (at least twice the group size)")
_RUN_DIR = flags.DEFINE_string("run_dir", "", "an RL run's workdir: profile its checkpoint at --step, not the warm start")
_STEP = flags.DEFINE_integer("step", None, "the checkpointed step of --run_dir to profile (default: its latest)")
_HELDOUT = flags.DEFINE_bool("heldout", False, "profile the held-out rows instead of the training prompts: what "
                             "RL moved on prompts it never trained on (generalisation, not memory)")


def power_estimates(hits: np.ndarray, samples: int, power: int) -> np.ndarray:
    """Unbiased per-prompt estimates of p^power from `hits` successes in `samples` draws [P]."""
    return np.array([math.comb(int(k), power) / math.comb(samples, power) for k in hits])


def level_outcomes(correct_pn: np.ndarray, group_size: int) -> dict[str, float]:
    """The chances that a group of `group_size` is all correct / all wrong / mixed, and that an
    all-correct (all-wrong) group is followed by another, averaged over prompts [P, n]."""
    n = correct_pn.shape[1]
    if n < 2 * group_size:
        raise ValueError(f"--samples: need at least 2 x group size = {2 * group_size}, got {n}")
    hits = correct_pn.sum(axis=1)
    right_g, right_2g = (power_estimates(hits, n, k).mean() for k in (group_size, 2 * group_size))
    wrong_g, wrong_2g = (power_estimates(n - hits, n, k).mean() for k in (group_size, 2 * group_size))
    return {"accuracy": correct_pn.mean(), "all_correct": right_g, "all_wrong": wrong_g,
            "mixed": 1.0 - right_g - wrong_g,
            "repeat_correct": right_2g / right_g if right_g else float("nan"),
            "repeat_wrong": wrong_2g / wrong_g if wrong_g else float("nan")}


def main(argv):
    del argv
    c = validate(_CONFIG.value)
    if not (_WORKDIR.value or _RUN_DIR.value):
        raise app.UsageError("--workdir (the warm start's cache) or --run_dir (an RL run) is required")
    tokenizer = build_tokenizer(c)
    train_rows, eval_sets = rows_from_config(c)
    if _HELDOUT.value and "synthetic" not in eval_sets:
        raise app.UsageError("--heldout: the config has no arithmetic held-out pool (eval.benchmarks 'synthetic')")
    mesh = mesh_from_config(c.mesh)
    if _RUN_DIR.value:
        run_dir = os.path.abspath(_RUN_DIR.value)
        saved = saved_step(run_dir, _STEP.value, log=print)  # the newest intact step, or the one asked for
        if saved is None:
            raise app.UsageError(f"--run_dir: {run_dir} has no finished checkpoint")
        model = load_policy(c, mesh, workdir=run_dir, step=saved.step)
    else:
        model = build_policy(c, tokenizer, train_rows, os.path.abspath(_WORKDIR.value), mesh, log=print)
    by_level = collections.defaultdict(list)
    for row in eval_sets["synthetic"] if _HELDOUT.value else train_rows:
        if len(by_level[row.difficulty]) < _PER_LEVEL.value:
            by_level[row.difficulty].append(row)
    pool = GradingPool(num_workers=1, timeout_s=c.data.grading_timeout_s, shaping=c.data.reward_shaping)
    G = c.rl.group_size
    print(f"{'level':>5} {'shape':>9} {'prompts':>7} {'accuracy':>8} {'all_correct':>11} {'all_wrong':>9} "
          f"{'mixed':>6} {'repeat_correct':>14} {'repeat_wrong':>12}")
    try:
        for level in sorted(by_level):
            rows = by_level[level]
            settings = EvalSettings(template=c.data.prompt_template, num_samples=_SAMPLES.value,
                                    temperature=c.sampling.temperature, top_p=c.sampling.top_p,
                                    max_new_tokens=c.sampling.max_new_tokens,
                                    max_prompt_length=c.data.max_prompt_length, seed=c.seed + 17,
                                    prompt_buckets=tuple(c.sampling.prompt_length_buckets))
            correct = sample_and_grade(model, tokenizer, rows, settings, pool=pool)
            o = level_outcomes(correct, G)
            print(f"{level:>5} {arith.LEVELS[level].pattern:>9} {len(rows):>7} {o['accuracy']:>8.3f} "
                  f"{o['all_correct']:>11.3f} {o['all_wrong']:>9.3f} {o['mixed']:>6.3f} "
                  f"{o['repeat_correct']:>14.3f} {o['repeat_wrong']:>12.3f}")
    finally:
        pool.close()
    sys.stdout.flush()
    jax.effects_barrier()


if __name__ == "__main__":
    flags.mark_flags_as_required(["config"])
    app.run(main)
