"""Benchmark scoring: pass@1, avg@k and unbiased pass@k of k sampled, graded responses per problem.

`sample_and_grade` is the code both the trainer's in-training evaluation and the evaluate CLI run.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np

from greso_jax.data.prompts import format_prompt
from greso_jax.sampling import generate

# In-training evaluation samples with seed + EVAL_SEED_OFFSET, a stream no rollout key uses,
# so the `greso_jax.evaluate` CLI on a saved step reproduces the trainer's numbers exactly.
EVAL_SEED_OFFSET = 1_000_003


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k estimator 1 - C(n-c, k) / C(n, k) (Chen et al., 2021)."""
    if k > num_samples:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {num_samples}")
    if num_samples - num_correct < k:
        return 1.0
    return 1.0 - math.prod((num_samples - num_correct - i) / (num_samples - i) for i in range(k))


def summarize(correct_pk: np.ndarray, k: int | None = None) -> dict[str, float]:
    """correct_pk bool [P, K] -> avg@K (mean correctness), pass@1 (= avg@K, the unbiased
    pass@1 estimate), pass@k and the number of problems."""
    num_problems, num_samples = correct_pk.shape
    k = num_samples if k is None else k
    counts = correct_pk.sum(axis=1)
    return {
        f"avg@{num_samples}": float(correct_pk.mean()) if num_problems else 0.0,
        "pass@1": float(np.mean([pass_at_k(num_samples, int(c), 1) for c in counts])) if num_problems else 0.0,
        f"pass@{k}": float(np.mean([pass_at_k(num_samples, int(c), k) for c in counts])) if num_problems else 0.0,
        "num_problems": int(num_problems),
    }


def sample_and_grade(model, tokenizer, rows: Sequence, *, template: str, num_samples: int, temperature: float,
                     top_p: float, max_new_tokens: int, seed: int, pool, max_prompt_length: int,
                     prompt_buckets=None, row_buckets=None, schedule: dict | None = None, batch_prompts: int = 128,
                     mesh=None) -> np.ndarray:
    """Samples `num_samples` responses per row and grades them; returns correct bool [P, K].
    Prompts longer than max_prompt_length are graded as wrong (counted, not dropped, so that
    benchmarks keep their size). schedule: `from_config.decode_schedule` (None: generate's defaults)."""
    prompts = [tokenizer.encode(format_prompt(row, template, tokenizer)) for row in rows]
    correct = np.zeros((len(rows), num_samples), bool)
    key = jax.random.PRNGKey(seed)
    for start in range(0, len(rows), batch_prompts):
        chunk = [i for i in range(start, min(start + batch_prompts, len(rows))) if len(prompts[i]) <= max_prompt_length]
        if not chunk:
            continue
        out = generate(model, [prompts[i] for i in chunk], num_samples=num_samples, max_new_tokens=max_new_tokens,
                       rng=jax.random.fold_in(key, start), temperature=temperature, top_p=top_p,
                       eos_ids=tokenizer.eos_ids, pad_id=tokenizer.pad_id, prompt_buckets=prompt_buckets,
                       row_buckets=row_buckets, mesh=mesh, **(schedule or {}))
        texts = [tokenizer.decode(out.tokens[r, :out.lengths[r]]) for r in range(len(chunk) * num_samples)]
        golds = [rows[i].ground_truth for i in chunk for _ in range(num_samples)]
        sources = [rows[i].data_source for i in chunk for _ in range(num_samples)]
        result = pool.score(texts, golds, sources)
        correct[chunk] = np.asarray(result.correct, bool).reshape(len(chunk), num_samples)
    return correct
