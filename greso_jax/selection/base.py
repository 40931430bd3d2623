"""The interface every selection strategy implements, with the per-step tallies they all share."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

ON_MAX_PASSES = ("train", "error")


@dataclasses.dataclass(frozen=True)
class PassConfig:
    """How DS / GRESO / oracle size their rollout passes within one step (DESIGN §1, adaptive pass size)."""

    rollout_batch_size: int = 96  # kept prompts in the first pass of a step; also the largest pass
    min_pass_size: int = 8
    max_passes: int = 8
    on_max_passes: str = "train"  # "train" on what was collected, or "error"

    def __post_init__(self):
        for name in ("rollout_batch_size", "min_pass_size", "max_passes"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"selection.{name}: must be an integer >= 1, got {value!r}")
        if self.min_pass_size > self.rollout_batch_size:
            raise ValueError(f"selection.min_pass_size: {self.min_pass_size} exceeds "
                             f"selection.rollout_batch_size {self.rollout_batch_size}")
        if self.on_max_passes not in ON_MAX_PASSES:
            raise ValueError(f"selection.on_max_passes: {self.on_max_passes!r} is not one of {ON_MAX_PASSES}")


def check_prompt_ids(prompt_ids, num_prompts: int, where: str) -> np.ndarray:
    """Returns prompt ids as int64 [N]; raises naming `where` if they are not integers in [0, num_prompts)."""
    ids = np.asarray(prompt_ids)
    if ids.ndim != 1:
        raise ValueError(f"{where}: prompt_ids must be 1-D, got shape {ids.shape}")
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{where}: prompt_ids must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64, copy=False)
    if ids.size and (ids.min() < 0 or ids.max() >= num_prompts):
        bad = ids[(ids < 0) | (ids >= num_prompts)][0]
        raise ValueError(f"{where}: prompt id {bad} is outside [0, num_prompts={num_prompts})")
    return ids


class Selector:
    """Base of every strategy: pre-rollout keep decisions, history updates, per-step metrics, state.

    The step driver (`selection.driver.run_selection_step`) calls, in order: `begin_step`,
    then per pass `record_skipped` / `observe` (or `observe_counts`) / `record_rollout`, and
    finally `end_step`. The data pipeline calls `should_keep` as its filter, lazily, while the
    driver pulls prompts for the current step.
    """

    strategy = "base"
    train_batch_size: int | None = None  # set by make_selector, for the trainer's convenience
    filters_zero_variance = True  # drop zero-variance groups and run more passes (DS / GRESO / oracle)
    staged_groups = False  # AERO: variable-size groups built in stages instead of passes

    def __init__(self, num_prompts: int, *, group_size: int = 8, pass_config: PassConfig | None = None,
                 seed: int = 0):
        if not isinstance(num_prompts, (int, np.integer)) or num_prompts < 1:
            raise ValueError(f"num_prompts: must be an integer >= 1, got {num_prompts!r}")
        if not isinstance(group_size, (int, np.integer)) or group_size < 1:
            raise ValueError(f"rl.group_size: must be an integer >= 1, got {group_size!r}")
        self.num_prompts = int(num_prompts)
        self.group_size = int(group_size)
        self.pass_config = pass_config if pass_config is not None else PassConfig()
        self.seed = int(seed)
        self.step = 0
        self.total_responses = 0
        self.total_tokens = 0
        self._reset_step_tallies()

    # -- the calls the driver and the pipeline make -----------------------------------------

    def first_pass_size(self, train_batch_size: int) -> int:
        """Kept prompts to pull in a step's first pass: rollout_batch_size, over-provisioned for filtering."""
        return self.pass_config.rollout_batch_size

    def should_keep(self, prompt_ids) -> np.ndarray:
        """Pre-rollout keep decision for the current step: bool [N]. The base keeps every prompt."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, f"{self.strategy}.should_keep")
        return np.ones(ids.shape, dtype=bool)

    def begin_step(self, step: int) -> None:
        self.step = int(step)
        self._reset_step_tallies()

    def record_skipped(self, prompt_ids) -> None:
        """Counts prompts the pipeline skipped this step (split into easy / hard by the strategy's history)."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, f"{self.strategy}.record_skipped")
        easy, hard = self._classify_skipped(ids)
        self.step_skipped_easy += int(easy)
        self.step_skipped_hard += int(hard)

    def observe(self, prompt_ids, correct) -> None:
        """Records rolled-out groups: `correct` bool [N, G], row i belongs to prompt_ids[i]."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, f"{self.strategy}.observe")
        correct = np.asarray(correct)
        if correct.ndim != 2 or correct.shape[0] != ids.shape[0] or correct.shape[1] < 1:
            raise ValueError(f"{self.strategy}.observe: correct must be [N={ids.shape[0]}, G>=1], "
                             f"got shape {correct.shape}")
        if correct.dtype != bool:
            raise ValueError(f"{self.strategy}.observe: correct must be bool, got dtype {correct.dtype}")
        num_samples = np.full(ids.shape, correct.shape[1], dtype=np.int64)
        self.observe_counts(ids, correct.sum(axis=1), num_samples)

    def observe_counts(self, prompt_ids, num_correct, num_samples) -> None:
        """Records rolled-out groups as counts: num_correct / num_samples int [N] (groups may differ in size)."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, f"{self.strategy}.observe_counts")
        num_correct = np.asarray(num_correct, dtype=np.int64)
        num_samples = np.asarray(num_samples, dtype=np.int64)
        if num_correct.shape != ids.shape or num_samples.shape != ids.shape:
            raise ValueError(f"{self.strategy}.observe_counts: num_correct {num_correct.shape} and num_samples "
                             f"{num_samples.shape} must match prompt_ids {ids.shape}")
        if np.any(num_samples < 1) or np.any(num_correct < 0) or np.any(num_correct > num_samples):
            raise ValueError(f"{self.strategy}.observe_counts: need 0 <= num_correct <= num_samples and "
                             f"num_samples >= 1")
        easy = num_correct == num_samples
        hard = num_correct == 0
        self.step_groups += int(ids.size)
        self.step_easy += int(easy.sum())
        self.step_hard += int(hard.sum())
        self._update_history(ids, num_correct, num_samples, easy, hard)

    def record_rollout(self, num_responses: int, num_tokens: int | None = None) -> None:
        """Adds generated responses (and their tokens, when known) to the cumulative counters."""
        self.total_responses += int(num_responses)
        if num_tokens is not None:
            self.total_tokens += int(num_tokens)

    def end_step(self) -> dict[str, float]:
        """Closes the step: adapts the strategy (GRESO's p), returns the selector's metrics."""
        self._adapt()
        groups = self.step_groups
        return {
            "selection/p_easy": float(self._p_easy_metric()),
            "selection/p_hard": float(self._p_hard_metric()),
            "selection/skipped_easy": float(self.step_skipped_easy),
            "selection/skipped_hard": float(self.step_skipped_hard),
            "selection/kept": float(groups),
            "selection/easy_ratio": self.step_easy / groups if groups else 0.0,
            "selection/hard_ratio": self.step_hard / groups if groups else 0.0,
            "rollout/num_responses": float(self.total_responses),
            "rollout/num_tokens": float(self.total_tokens),
        }

    # -- checkpointing -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Flat dict of Python scalars and NumPy arrays (orbax / JSON friendly)."""
        state = {name: int(getattr(self, name)) for name in self._SCALAR_STATE}
        state.update(self._history_state())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = set(self._SCALAR_STATE) | set(self._history_state())
        if set(state) != expected:
            missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
            raise ValueError(f"{self.strategy}.load_state_dict: keys differ (missing {missing}, unexpected {extra})")
        for name in ("num_prompts", "seed"):
            if int(state[name]) != getattr(self, name):
                raise ValueError(f"{self.strategy}.load_state_dict: {name} is {int(state[name])} in the state "
                                 f"but {getattr(self, name)} in this selector")
        for name in self._SCALAR_STATE:
            setattr(self, name, int(np.asarray(state[name])))
        self._load_history_state(state)

    _SCALAR_STATE = ("num_prompts", "seed", "step", "total_responses", "total_tokens", "step_groups",
                     "step_easy", "step_hard", "step_skipped_easy", "step_skipped_hard")

    # -- hooks for strategies ----------------------------------------------------------------

    def _reset_step_tallies(self) -> None:
        self.step_groups = self.step_easy = self.step_hard = 0
        self.step_skipped_easy = self.step_skipped_hard = 0

    def _classify_skipped(self, ids: np.ndarray) -> tuple[int, int]:
        """(easy, hard) counts among skipped ids; strategies that never skip see none."""
        return 0, 0

    def _update_history(self, ids, num_correct, num_samples, easy, hard) -> None:
        """Per-prompt history update after a rollout; the base keeps none."""

    def _adapt(self) -> None:
        """End-of-step adaptation; the base has none."""

    def _p_easy_metric(self) -> float:
        return 1.0  # a strategy that never skips keeps everything: p = 1

    def _p_hard_metric(self) -> float:
        return 1.0

    def _history_state(self) -> dict[str, Any]:
        return {}

    def _load_history_state(self, state: dict[str, Any]) -> None:
        """Restores what `_history_state` wrote; keys were checked by the caller."""
