"""Benchmark scoring: pass@1, avg@k and unbiased pass@k of k sampled, graded responses per problem.

`sample_and_grade` is the code the trainer's in-training evaluation, the warm start's accuracy
band and the evaluate CLI run; `EvalSettings` is everything that decides what it samples, built
from a config in one place (`run.build.eval_settings`) so that the three cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

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


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """How `sample_and_grade` samples: every field changes the responses, hence the numbers."""

    template: str  # the prompt template (data.prompt_template)
    num_samples: int  # responses per problem, K
    temperature: float  # 0: greedy
    top_p: float
    max_new_tokens: int
    max_prompt_length: int  # longer prompts are graded wrong: counted, not dropped, so benchmarks keep their size
    seed: int
    prompt_buckets: tuple[int, ...] | None = None  # None: generate's defaults
    row_buckets: tuple[int, ...] | None = None
    schedule: Mapping | None = None  # `build.decode_schedule`: how rows and cache are scheduled (None: defaults)
    batch_prompts: int = 128  # problems per sampler call; each call's key is folded in from its first problem


def sample_and_grade(model, tokenizer, rows: Sequence, settings: EvalSettings, *, pool, mesh=None) -> np.ndarray:
    """Samples `settings.num_samples` responses per row and grades them with `pool`; returns correct
    bool [P, K] (all False for a prompt longer than settings.max_prompt_length)."""
    s = settings
    prompts = [tokenizer.encode(format_prompt(row, s.template, tokenizer)) for row in rows]
    correct = np.zeros((len(rows), s.num_samples), bool)
    key = jax.random.PRNGKey(s.seed)
    for start in range(0, len(rows), s.batch_prompts):
        chunk = [i for i in range(start, min(start + s.batch_prompts, len(rows)))
                 if len(prompts[i]) <= s.max_prompt_length]
        if not chunk:
            continue
        out = generate(model, [prompts[i] for i in chunk], num_samples=s.num_samples, max_new_tokens=s.max_new_tokens,
                       rng=jax.random.fold_in(key, start), temperature=s.temperature, top_p=s.top_p,
                       eos_ids=tokenizer.eos_ids, pad_id=tokenizer.pad_id, prompt_buckets=s.prompt_buckets,
                       row_buckets=s.row_buckets, mesh=mesh, **(s.schedule or {}))
        texts = [tokenizer.decode(out.tokens[r, :out.lengths[r]]) for r in range(len(chunk) * s.num_samples)]
        golds = [rows[i].ground_truth for i in chunk for _ in range(s.num_samples)]
        sources = [rows[i].data_source for i in chunk for _ in range(s.num_samples)]
        result = pool.score(texts, golds, sources)
        correct[chunk] = np.asarray(result.correct, bool).reshape(len(chunk), s.num_samples)
    return correct
