"""Per-level outcome profile of a warm-started arithmetic policy: for each level, the share of
training prompts whose G sampled responses are all correct, all wrong or mixed.

It is what a task's level mix is chosen from (experiments/arith_headline.py): a group's outcome
depends on the level, so the mix sets the zero-variance share RL meets.

  python experiments/bench/level_profile.py --config experiments/arith_tiny.py:vanilla --workdir /tmp/prof
"""

from __future__ import annotations

import collections
import os
import sys

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from greso_jax.benchmark_scoring import sample_and_grade
from greso_jax.configs import validate
from greso_jax.data import arith
from greso_jax.from_config import rows_from_config
from greso_jax.parallel.sharding import mesh_from_config
from greso_jax.policy import build_policy, build_tokenizer
from greso_jax.rewards.pool import GradingPool

_CONFIG = config_flags.DEFINE_config_file("config", None, "experiment config (its warm start is used)")
_WORKDIR = flags.DEFINE_string("workdir", None, "where the warm start is cached")
_PER_LEVEL = flags.DEFINE_integer("per_level", 64, "training prompts sampled per level")


def main(argv):
    del argv
    c = validate(_CONFIG.value)
    tokenizer = build_tokenizer(c)
    train_rows, _ = rows_from_config(c)
    mesh = mesh_from_config(c.mesh)
    model = build_policy(c, tokenizer, train_rows, os.path.abspath(_WORKDIR.value), mesh, log=print)
    by_level = collections.defaultdict(list)
    for row in train_rows:
        if len(by_level[row.difficulty]) < _PER_LEVEL.value:
            by_level[row.difficulty].append(row)
    pool = GradingPool(num_workers=1, timeout_s=c.data.grading_timeout_s, shaping=c.data.reward_shaping)
    G = c.rl.group_size
    print(f"{'level':>5} {'shape':>9} {'prompts':>7} {'accuracy':>8} {'all_correct':>11} {'all_wrong':>9} "
          f"{'mixed':>6}")
    try:
        for level in sorted(by_level):
            rows = by_level[level]
            correct = sample_and_grade(model, tokenizer, rows, template=c.data.prompt_template, num_samples=G,
                                       temperature=c.sampling.temperature, top_p=c.sampling.top_p,
                                       max_new_tokens=c.sampling.max_new_tokens, seed=c.seed + 17, pool=pool,
                                       max_prompt_length=c.data.max_prompt_length,
                                       prompt_buckets=tuple(c.sampling.prompt_length_buckets))
            hits = correct.sum(axis=1)
            print(f"{level:>5} {arith.LEVELS[level].pattern:>9} {len(rows):>7} {correct.mean():>8.3f} "
                  f"{np.mean(hits == G):>11.3f} {np.mean(hits == 0):>9.3f} {np.mean((hits > 0) & (hits < G)):>6.3f}")
    finally:
        pool.close()
    sys.stdout.flush()
    jax.effects_barrier()


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "workdir"])
    app.run(main)
