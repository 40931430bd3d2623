"""Selection simulator: every strategy through the real step driver on ~20k prompts with drifting latent success.

Each prompt i has a latent success probability p_i(t) = sigmoid(l0_i + (l1_i − l0_i) · ramp_i(t)),
ramp_i(t) = clip((t − t0_i) / w_i, 0, 1), t the training step, T = --steps. Classes
(fractions of the prompts, logits drawn per prompt):
  solved      25%  l0 = l1 ~ N(4.5, 1)                         (p ≈ 0.99: all-correct groups)
  never       20%  l0 = l1 ~ N(−5, 1)                          (p ≈ 0.01: all-incorrect groups)
  learnable   35%  l0 ~ N(−1, 1.5), l1 = l0 + U(1, 4), t0 = 0, w ~ T·U(0.5, 1.5)
  late        10%  l0 ~ N(−5, 1), l1 ~ N(0.5, 1), t0 ~ T·U(0.2, 0.7), w ~ T·U(0.1, 0.3)
  regressing  10%  l0 ~ N(3, 1), l1 ~ N(0, 1), t0 ~ T·U(0, 0.6), w ~ T·U(0.1, 0.3)
Responses are Bernoulli(p_i(t)) with reward = correct, drawn by counter-based draws keyed
by (seed, step, prompt, response index within the step), so the oracle can know a group's
outcome before it is rolled out (exactly, except when one pull takes the same prompt twice
across an epoch boundary: the second copy is foreseen as if it were the first, and a wrong
guess only costs the responses the driver then filters). Prompts stream in seeded
per-epoch shuffles, filtered lazily by the selector's `should_keep`, as the Grain pipeline does.
Every registered strategy (training ones and the simulation-only oracle) runs through
`greso_jax.selection.run_selection_step`, the trainer's code path.

  python experiments/bench/selection_sim.py            # full tables (~20k prompts, 200 steps)
  python experiments/bench/selection_sim.py --quick    # a smaller run
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import time

import numpy as np

from greso_jax.selection import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED, STRATEGIES, PassConfig,
                                 PulledPrompts, ScoredPass, default_settings, make_selector, run_selection_step)
from greso_jax.selection import counter_rng

CLASS_FRACTIONS = {"solved": 0.25, "never": 0.20, "learnable": 0.35, "late": 0.10, "regressing": 0.10}
_ROLLOUT_STREAM = 101  # counter_rng stream of the simulated responses


@dataclasses.dataclass(frozen=True)
class SimSettings:
    num_prompts: int = 20_000
    steps: int = 200
    train_batch_size: int = 128
    group_size: int = 8
    rollout_batch_size: int = 192  # 1.5 x train_batch_size: the first pass over-provisions for filtering
    min_pass_size: int = 32
    max_passes: int = 10
    seed: int = 0
    once_per_step: bool = False  # selection.once_per_step: a prompt at most once per step


class LatentPopulation:
    """Per-prompt latent success probability as a function of the training step (module docstring)."""

    def __init__(self, num_prompts: int, horizon: int, seed: int, fractions: dict[str, float] | None = None):
        rng = np.random.default_rng([seed, 7])
        fractions = CLASS_FRACTIONS if fractions is None else fractions
        if set(fractions) != set(CLASS_FRACTIONS) or abs(sum(fractions.values()) - 1) > 1e-6:
            raise ValueError(f"population fractions: need {sorted(CLASS_FRACTIONS)} summing to 1, got {fractions}")
        counts = np.floor(np.array([fractions[k] for k in CLASS_FRACTIONS]) * num_prompts).astype(int)
        counts[2] += num_prompts - counts.sum()  # rounding remainder goes to "learnable"
        kind = rng.permutation(np.repeat(np.arange(len(counts)), counts))
        self.kind = kind  # the class index per prompt (CLASS_FRACTIONS order): the prompts' level with --levels
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
        key = counter_rng.scalar_key(self.seed, _ROLLOUT_STREAM, self.step)
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
                raise ValueError(f"oracle asked about step {step} while the simulator is at step {self.step}")
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
        return np.random.default_rng([self.seed, 11, epoch]).permutation(self.num_prompts)

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


def run_strategy(strategy: str, settings: SimSettings, fractions: dict[str, float] | None = None,
                 levels: bool = False, **strategy_overrides) -> dict[str, float]:
    """Runs `settings.steps` steps of one strategy; returns totals over the run.

    fractions: the population's class fractions (None: CLASS_FRACTIONS; see `calibrated_fractions`).
    levels: prompts carry their class as a data level (as the arithmetic pools carry difficulty),
    for strategies that use levels. strategy_overrides: fields of the strategy's own section (e.g.
    delta_p=0.02 for GRESO).
    """
    population = LatentPopulation(settings.num_prompts, settings.steps, settings.seed, fractions)
    rollouts = BernoulliRollouts(population, settings.seed)
    cls = STRATEGIES.get(strategy)
    # What only the simulator knows, for the bounds that need it: the next outcomes, the true rates.
    foresight = {"outcome": rollouts.outcome(settings.group_size),
                 "success": lambda step, ids: population.success(ids, step)}
    wanted = inspect.signature(cls.__init__).parameters
    extras = {k: v for k, v in foresight.items() if k in wanted} if cls.simulation_only else {}
    if levels and cls.uses_prompt_levels:
        extras["prompt_levels"] = population.kind
    selector = make_selector(
        strategy, num_prompts=settings.num_prompts, group_size=settings.group_size, seed=settings.seed,
        passes=PassConfig(rollout_batch_size=settings.rollout_batch_size, min_pass_size=settings.min_pass_size,
                          max_passes=settings.max_passes, once_per_step=settings.once_per_step),
        settings={**default_settings(strategy), **strategy_overrides}, **extras)
    stream = PromptStream(settings.num_prompts, settings.seed, selector.should_keep)
    foresee = rollouts.outcome(settings.group_size)
    skipped_this_step: list[np.ndarray] = []
    # A strategy that predicts each group's zero-variance chance: its predictions beside the outcomes,
    # for rolled-out groups (observed) and skipped ones (foreseen), taken when each decision was made.
    predict = getattr(selector, "zero_variance_chances", None)
    predicted: list[np.ndarray] = []
    zero_variance: list[np.ndarray] = []
    skipped_predicted: list[np.ndarray] = []

    def pull(n: int) -> PulledPrompts:
        pulled = stream(n)
        skipped_this_step.append(pulled.skipped_ids)
        if predict is not None:
            skipped_predicted.append(predict(pulled.skipped_ids))
        return pulled

    def rollout(prompt_ids, payloads, num_samples: int) -> ScoredPass:
        chances = predict(prompt_ids) if predict is not None else None
        scored = rollouts(prompt_ids, payloads, num_samples)
        if chances is not None and num_samples == settings.group_size:
            predicted.append(chances)
            zero_variance.append(scored.correct.all(axis=1) | ~scored.correct.any(axis=1))
        return scored

    effective = full = passes = batch = surplus = repeated = 0.0
    skipped = skipped_zero_variance = skipped_informative = rolled_informative = 0
    p_at_epoch_1 = None  # (p_easy, p_hard) the first step of epoch 1 starts from
    for step in range(settings.steps):
        rollouts.begin_step(step)
        epoch = stream.next_epoch
        if epoch >= 1 and p_at_epoch_1 is None:
            p_at_epoch_1 = (getattr(selector, "p_easy", 1.0), getattr(selector, "p_hard", 1.0))
        skipped_this_step.clear()
        skipped_predicted.clear()
        metrics = run_selection_step(selector, step, pull_prompts=pull, rollout=rollout,
                                     train_batch_size=settings.train_batch_size, epoch=epoch).metrics
        # What the skipped prompts' groups would have been (the simulator knows): skip precision, coverage.
        ids = np.concatenate(skipped_this_step) if skipped_this_step else np.zeros(0, np.int64)
        codes = foresee(step, ids) if ids.size else np.zeros(0, np.int64)
        if predict is not None and ids.size:
            predicted.append(np.concatenate(skipped_predicted))
            zero_variance.append(codes != OUTCOME_MIXED)
        skipped += ids.size
        skipped_zero_variance += int(np.count_nonzero(codes != OUTCOME_MIXED))
        skipped_informative += int(np.count_nonzero(codes == OUTCOME_MIXED))
        rolled_informative += selector.step_groups - selector.step_easy - selector.step_hard
        effective += metrics["selection/effective_prompts"]
        batch += metrics["selection/batch_groups"]
        full += metrics["selection/full_batch"]
        passes += metrics["selection/passes"]
        surplus += metrics["selection/surplus_groups"]
        repeated += metrics["selection/repeated_groups"]
    responses = metrics["rollout/num_responses"]
    p_at_epoch_1 = p_at_epoch_1 or (float("nan"), float("nan"))
    return {"responses": responses, "effective_prompts": effective,
            "responses_per_effective": responses / max(effective, 1.0),
            "full_batch_fraction": full / settings.steps, "mean_passes": passes / settings.steps,
            "mean_effective_batch": effective / settings.steps, "mean_batch": batch / settings.steps,
            "surplus_groups": surplus, "repeated_groups": repeated, "epochs": stream.next_epoch,
            # Of the prompts skipped, the share whose group would have been zero-variance (the oracle: 1).
            "skip_precision": skipped_zero_variance / skipped if skipped else float("nan"),
            # Of the informative groups met (rolled out, or skipped but foreseen), the share trained on.
            "coverage": effective / max(rolled_informative + skipped_informative, 1),
            "p_easy_epoch_1": p_at_epoch_1[0], "p_hard_epoch_1": p_at_epoch_1[1],
            "p_easy": metrics["selection/p_easy"], "p_hard": metrics["selection/p_hard"],
            "calibration": calibration_bins(np.concatenate(predicted), np.concatenate(zero_variance))
            if predicted else []}


def calibration_bins(predicted: np.ndarray, zero_variance: np.ndarray, bins: int = 10) -> list[dict[str, float]]:
    """Predicted zero-variance chance against the outcome, in `bins` equal-width bins of the
    prediction: per non-empty bin, its range, the number of groups, the mean prediction and the
    share that was zero-variance (a calibrated predictor has the two equal)."""
    predicted, zero_variance = np.asarray(predicted, np.float64), np.asarray(zero_variance, bool)
    index = np.minimum((predicted * bins).astype(np.int64), bins - 1)
    rows = []
    for b in range(bins):
        mine = index == b
        if mine.any():
            rows.append({"low": b / bins, "high": (b + 1) / bins, "groups": int(mine.sum()),
                         "predicted": float(predicted[mine].mean()), "observed": float(zero_variance[mine].mean())})
    return rows


def greso_efficiency(ds_responses: float, greso_responses: float, oracle_responses: float) -> float:
    """(DS − GRESO) / (DS − oracle): the share of DS's avoidable waste that GRESO avoids."""
    return (ds_responses - greso_responses) / (ds_responses - oracle_responses)


def all_runs(settings: SimSettings, fractions: dict[str, float] | None = None,
             levels: bool = False) -> dict[str, dict[str, float]]:
    """Every registered strategy with its defaults; Dynamic Sampling once per pass sizing
    ("dynamic_sampling" is the adaptive default, "dynamic_sampling:fixed" the papers' baseline);
    with `levels`, strategies that use levels also run without them (as "<name>:no_levels")."""
    results = {name: run_strategy(name, settings, fractions, levels) for name in STRATEGIES}
    results["dynamic_sampling:fixed"] = run_strategy("dynamic_sampling", settings, fractions, pass_sizing="fixed")
    if levels:
        for name in STRATEGIES:
            if STRATEGIES.get(name).uses_prompt_levels:
                results[f"{name}:no_levels"] = run_strategy(name, settings, fractions)
    return results


DELTA_P_SWEEP = (0.0025, 0.005, 0.01, 0.02, 0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(SimSettings):
        flag = f"--{field.name.replace('_', '-')}"
        if field.type in (bool, "bool"):
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=int, default=field.default)
    parser.add_argument("--quick", action="store_true", help="5k prompts, 80 steps")
    parser.add_argument("--levels", action="store_true", help="prompts carry their class as a data level "
                        "(strategies that use levels also run without)")
    args = parser.parse_args()
    settings = SimSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SimSettings)})
    if args.quick:
        settings = dataclasses.replace(settings, num_prompts=5000, steps=80)
    started = time.perf_counter()
    results = all_runs(settings, levels=args.levels)
    print(f"settings: {settings}")
    print("\n| strategy | responses | effective prompts | responses / effective prompt | full-batch steps "
          "| mean passes | surplus groups | skip precision | coverage |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['responses']:.0f} | {r['effective_prompts']:.0f} | "
              f"{r['responses_per_effective']:.2f} | {r['full_batch_fraction']:.3f} | {r['mean_passes']:.2f} | "
              f"{r['surplus_groups']:.0f} | {r['skip_precision']:.3f} | {r['coverage']:.3f} |")
    oracle = results["oracle"]["responses"]
    for ds in ("dynamic_sampling", "dynamic_sampling:fixed"):
        for name in ("greso", "mopps", "posterior", "posterior:no_levels", "known_rate"):
            if name in results:
                mine = results[name]["responses"]
                print(f"vs {ds}: {name} efficiency (DS − {name}) / (DS − oracle) = "
                      f"{greso_efficiency(results[ds]['responses'], mine, oracle):.3f}; "
                      f"DS / {name} responses = {results[ds]['responses'] / mine:.2f}x")
    for name, r in results.items():
        if r["calibration"]:
            print(f"\n{name}: predicted zero-variance chance vs outcome (rolled-out groups observed, skipped "
                  "ones foreseen; at decision time)\n\n| predicted in | groups | mean predicted | zero-variance share |")
            print("|---|---:|---:|---:|")
            for row in r["calibration"]:
                print(f"| [{row['low']:.1f}, {row['high']:.1f}) | {row['groups']} | {row['predicted']:.3f} | "
                      f"{row['observed']:.3f} |")
    print(f"\n{results['greso']['epochs']} epochs of the prompt stream; p as epoch 1 begins and at the end:")
    print("\n| Δp | responses | mean effective batch | responses / effective prompt | p_easy, p_hard at epoch 1 "
          "| final p_easy | final p_hard |")
    print("|---:|---:|---:|---:|---|---:|---:|")
    for delta_p in DELTA_P_SWEEP:
        default = delta_p == default_settings("greso")["delta_p"]  # the GRESO row above already ran it
        r = results["greso"] if default else run_strategy("greso", settings, delta_p=delta_p)
        print(f"| {delta_p} | {r['responses']:.0f} | {r['mean_effective_batch']:.2f} | "
              f"{r['responses_per_effective']:.2f} | {r['p_easy_epoch_1']:.3f}, {r['p_hard_epoch_1']:.3f} | "
              f"{r['p_easy']:.3f} | {r['p_hard']:.3f} |")
    print(f"\nwall time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
