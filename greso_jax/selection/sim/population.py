"""The simulator's world: prompts with a drifting latent success rate, Bernoulli responses, a prompt stream.

Each prompt i has a latent success probability p_i(t) = sigmoid(l0_i + (l1_i − l0_i) · ramp_i(t)),
ramp_i(t) = clip((t − t0_i) / w_i, 0, 1), t the training step, T the horizon (steps). Classes
(fractions of the prompts, logits drawn per prompt):
  solved      25%  l0 = l1 ~ N(4.5, 1)                         (p ≈ 0.99: all-correct groups)
  never       20%  l0 = l1 ~ N(−5, 1)                          (p ≈ 0.01: all-incorrect groups)
  learnable   35%  l0 ~ N(−1, 1.5), l1 = l0 + U(1, 4), t0 = 0, w ~ T·U(0.5, 1.5)
  late        10%  l0 ~ N(−5, 1), l1 ~ N(0.5, 1), t0 ~ T·U(0.2, 0.7), w ~ T·U(0.1, 0.3)
  regressing  10%  l0 ~ N(3, 1), l1 ~ N(0, 1), t0 ~ T·U(0, 0.6), w ~ T·U(0.1, 0.3)
Levels (`level`, what `--levels` gives the strategies that take them) are observable features, never
the class: as an arithmetic pool's difficulty, a prompt's level is one of NUM_LEVELS quantile bins of a
noisy reading of its starting logit (l0 + N(0, LEVEL_NOISE)), so the rate varies within a level and
classes share levels (never and late start alike; a level knows nothing of a later drift).
Responses are Bernoulli(p_i(t)) with reward = correct, drawn by counter-based draws keyed by
(seed, step, prompt, response index within the step), so the oracle can know a group's outcome
before it is rolled out (exactly, except when one pull takes the same prompt twice across an
epoch boundary: the second copy is foreseen as if it were the first, and a wrong guess only
costs the responses the driver then filters). Prompts stream in seeded per-epoch shuffles,
filtered lazily by the selector's `should_keep`, as the Grain pipeline does.
"""

from __future__ import annotations

import numpy as np

from greso_jax.selection import counter_rng
from greso_jax.selection.base import OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED
from greso_jax.selection.counter_rng import Stream
from greso_jax.selection.groups import PulledPrompts, ScoredPass

CLASS_FRACTIONS = {"solved": 0.25, "never": 0.20, "learnable": 0.35, "late": 0.10, "regressing": 0.10}
NUM_LEVELS = 5  # observable difficulty levels
LEVEL_NOISE = 1.5  # std, in logits, of the reading of a prompt's starting logit its level bins


class LatentPopulation:
    """Per-prompt latent success probability as a function of the training step (module docstring)."""

    def __init__(self, num_prompts: int, horizon: int, seed: int, fractions: dict[str, float] | None = None):
        rng = np.random.default_rng([seed, Stream.SIM_POPULATION])
        fractions = CLASS_FRACTIONS if fractions is None else fractions
        if set(fractions) != set(CLASS_FRACTIONS) or abs(sum(fractions.values()) - 1) > 1e-6:
            raise ValueError(f"population fractions: need {sorted(CLASS_FRACTIONS)} summing to 1, got {fractions}")
        counts = np.floor(np.array([fractions[k] for k in CLASS_FRACTIONS]) * num_prompts).astype(int)
        counts[2] += num_prompts - counts.sum()  # rounding remainder goes to "learnable"
        kind = rng.permutation(np.repeat(np.arange(len(counts)), counts))
        self.kind = kind  # the latent class index per prompt (CLASS_FRACTIONS order): never shown to a strategy
        n, T = num_prompts, float(horizon)
        self.start, self.end = np.zeros(n), np.zeros(n)
        self.t0, self.width = np.zeros(n), np.ones(n)
        draws = {
            0: lambda m: (rng.normal(4.5, 1, m),) * 2 + (np.zeros(m), np.ones(m)),
            1: lambda m: (rng.normal(-5, 1, m),) * 2 + (np.zeros(m), np.ones(m)),
            2: lambda m: _learnable(rng, m, T),
            3: lambda m: (rng.normal(-5, 1, m), rng.normal(0.5, 1, m), T * rng.uniform(0.2, 0.7, m),
                          T * rng.uniform(0.1, 0.3, m)),
            4: lambda m: (rng.normal(3, 1, m), rng.normal(0, 1, m), T * rng.uniform(0, 0.6, m),
                          T * rng.uniform(0.1, 0.3, m)),
        }
        for k, draw in draws.items():
            rows = np.flatnonzero(kind == k)
            self.start[rows], self.end[rows], self.t0[rows], self.width[rows] = draw(rows.size)
        reading = self.start + np.random.default_rng([seed, Stream.SIM_LEVELS]).normal(0, LEVEL_NOISE, n)
        edges = np.quantile(reading, np.linspace(0, 1, NUM_LEVELS + 1)[1:-1])
        self.level = np.searchsorted(edges, reading).astype(np.int64)  # observable level per prompt, 0 hardest

    def success(self, prompt_ids: np.ndarray, step: int) -> np.ndarray:
        """p_i(step), float64 [N]."""
        ramp = np.clip((step - self.t0[prompt_ids]) / self.width[prompt_ids], 0.0, 1.0)
        logit = self.start[prompt_ids] + (self.end[prompt_ids] - self.start[prompt_ids]) * ramp
        return 1.0 / (1.0 + np.exp(-logit))


def calibrated_fractions(all_correct: float, all_incorrect: float) -> dict[str, float]:
    """Class fractions for a task whose measured groups are `all_correct` / `all_incorrect` shares:
    solved and never take those shares; learnable, late and regressing share the rest in their
    default proportions."""
    if min(all_correct, all_incorrect) < 0 or all_correct + all_incorrect > 1:
        raise ValueError(f"calibrated_fractions: shares {all_correct}, {all_incorrect} are not a split of 1")
    rest = {k: CLASS_FRACTIONS[k] for k in ("learnable", "late", "regressing")}
    scale = (1.0 - all_correct - all_incorrect) / sum(rest.values())
    return {"solved": all_correct, "never": all_incorrect, **{k: v * scale for k, v in rest.items()}}


def _learnable(rng, m: int, T: float):
    start = rng.normal(-1, 1.5, m)
    return start, start + rng.uniform(1, 4, m), np.zeros(m), T * rng.uniform(0.5, 1.5, m)


class BernoulliRollouts:
    """The simulated generator: correct ~ Bernoulli(p_i(step)), reward = correct; counter-based per response."""

    def __init__(self, population: LatentPopulation, seed: int):
        self.population, self.seed = population, seed
        self.step = 0
        self._drawn = np.zeros(population.start.size, dtype=np.int64)  # responses drawn per prompt this step

    def begin_step(self, step: int) -> None:
        self.step = step
        self._drawn[:] = 0

    def _draw(self, prompt_ids: np.ndarray, offsets: np.ndarray, num_samples: int) -> np.ndarray:
        key = counter_rng.scalar_key(self.seed, Stream.SIM_ROLLOUTS, self.step)
        sample = offsets[:, None] + np.arange(num_samples)[None, :]
        draws = counter_rng.uniform(key, prompt_ids[:, None], sample)
        return draws < self.population.success(prompt_ids, self.step)[:, None]

    def __call__(self, prompt_ids: np.ndarray, payloads: list, num_samples: int) -> ScoredPass:
        offsets = np.zeros(prompt_ids.size, dtype=np.int64)
        for row, prompt in enumerate(prompt_ids):  # a prompt may repeat across an epoch boundary
            offsets[row] = self._drawn[prompt]
            self._drawn[prompt] += num_samples
        correct = self._draw(prompt_ids, offsets, num_samples)
        return ScoredPass(correct=correct, rewards=correct.astype(np.float32), handle=None)

    def outcome(self, group_size: int):
        """The oracle's foresight: the outcome code of each prompt's next group of `group_size`."""
        def predict(step: int, prompt_ids: np.ndarray) -> np.ndarray:
            if step != self.step:
                raise ValueError(f"outcome: asked about step {step} while the simulator is at step {self.step}")
            num_correct = self._draw(prompt_ids, self._drawn[prompt_ids], group_size).sum(axis=1)
            return np.where(num_correct == group_size, OUTCOME_ALL_CORRECT,
                            np.where(num_correct == 0, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED))
        return predict


class PromptStream:
    """Seeded per-epoch shuffles of all prompt ids, filtered lazily by the selector's keep decisions."""

    def __init__(self, num_prompts: int, seed: int, should_keep, chunk: int = 256):
        self.num_prompts, self.seed, self.should_keep, self.chunk = num_prompts, seed, should_keep, chunk
        self.epoch, self.position = 0, 0
        self.order = self._shuffle(0)

    @property
    def next_epoch(self) -> int:
        """The epoch of the next prompt the stream will yield (the step's epoch, as the pipeline reports it)."""
        return self.epoch + (self.position == self.num_prompts)

    def _shuffle(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, Stream.SIM_SHUFFLE, epoch]).permutation(self.num_prompts)

    def __call__(self, n: int) -> PulledPrompts:
        kept, skipped, scanned = [], [], 0
        need = n
        while need > 0 and scanned < 10 * self.num_prompts:
            if self.position == self.num_prompts:
                self.epoch, self.position = self.epoch + 1, 0
                self.order = self._shuffle(self.epoch)
            candidates = self.order[self.position:self.position + max(need, self.chunk)]
            keep = self.should_keep(candidates, np.full(candidates.size, self.epoch))
            # Consume only up to the candidate that completes the request: the rest stay for the next pull.
            enough = np.flatnonzero(np.cumsum(keep) >= need)
            used = enough[0] + 1 if enough.size else candidates.size
            kept.append(candidates[:used][keep[:used]])
            skipped.append(candidates[:used][~keep[:used]])
            self.position += used
            scanned += used
            need -= int(keep[:used].sum())
        ids = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
        return PulledPrompts(prompt_ids=ids, payloads=[None] * ids.size,
                             skipped_ids=np.concatenate(skipped) if skipped else np.zeros(0, dtype=np.int64))
