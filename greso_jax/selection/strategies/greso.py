"""GRESO: skip prompts before rollout from their easy / hard streaks, with self-tuning p_easy / p_hard.

Semantics and the choices behind them: docs/design.md, "GRESO".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from greso_jax.core.specs import BOOL, FLOAT, INT, ConfigError, Spec, field
from greso_jax.selection.base import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_NONE, check_prompt_ids,
                                      level_indices)
from greso_jax.selection.counter_rng import Stream
from greso_jax.selection.groups import Group
from greso_jax.selection.pass_sizing import sizing_field
from greso_jax.selection.registry import register_strategy, register_variant
from greso_jax.selection.settings import Ablation, StrategySettings
from greso_jax.selection.strategies.dynamic_sampling import FilteringSelector

KEEP_FLOOR = 0.01  # every prompt keeps at least this chance of being re-explored
# The measured floor's prior: one group's worth of evidence at the paper's floor, so a cell with no rollouts
# yet keeps its streak prompts at KEEP_FLOOR and a few mixed groups raise it.
_FLOOR_PRIOR_GROUPS = 1.0
_UNIT = Spec(FLOAT, 0, 1)


@dataclasses.dataclass(frozen=True)
class GresoSettings(StrategySettings):
    """`selection.greso.*`: GRESO's skip rule and its self-tuning."""

    p_easy: float = field(0.5, _UNIT, "initial keep base for prompts on an all-correct streak (kept w.p. "
                          "max(p_easy ** streak, 0.01))")
    p_hard: float = field(0.5, _UNIT, "initial keep base for prompts on an all-incorrect streak")
    delta_p: float = field(0.01, _UNIT, "step by which p_easy / p_hard move after each training step (the "
                           "exploration step size, GRESO's ablation knob)")
    target_zero_variance: float = field(0.25, _UNIT, "zero-variance ratio the adaptation aims at: 1/3 of it "
                                        "easy, 2/3 hard")
    p_min: float = field(0.05, _UNIT, "lower clamp of p_easy / p_hard")
    p_max: float = field(0.95, _UNIT, "upper clamp of p_easy / p_hard")
    easy_patience: int = field(1, Spec(INT, 1), "all-correct rollouts in a row before a prompt may be skipped as "
                               "easy; from then on it is kept w.p. max(p_easy ** (z - easy_patience + 1), 0.01) "
                               "(1: the paper's rule)")
    hard_patience: int = field(1, Spec(INT, 1), "the same for all-incorrect streaks and p_hard (1: the paper's rule)")
    adapt_from_epoch: int = field(1, Spec(INT, 0), "first epoch of the prompt stream whose steps adapt p_easy / "
                                  "p_hard (1: the reference, which waits until prompts have histories; 0: from "
                                  "the first step)")
    explore_when_short: bool = field(False, Spec(BOOL), "a step whose batch came out short of train_batch_size "
                                     "usable groups raises p_easy and p_hard by delta_p instead of following the "
                                     "targets (ours; False: the paper's rule)")
    skip_easy: bool = field(True, Spec(BOOL), "skip prompts on an all-correct streak (False: such prompts are always "
                            "kept; ours, to measure what the easy skips cost)")
    skip_hard: bool = field(True, Spec(BOOL), "skip prompts on an all-incorrect streak (False: always kept)")
    rest_steps: int = field(0, Spec(INT, 0), "a prompt rolled out fewer than rest_steps training steps ago is "
                            "skipped, whatever its streak (ours; 0: the paper's rule). Under deep skipping the "
                            "pipeline re-reads the pool every few steps and GRESO re-rolls each mixed prompt at "
                            "every reading; a rest spaces a prompt's rollouts as Dynamic Sampling's epochs do")
    revisit_steps: int = field(0, Spec(INT, 0), "a prompt on a streak of z rollouts whose last rollout is at least "
                               "revisit_steps * z training steps old is kept for sure: the policy has moved since "
                               "its streak was seen (ours; 0: the paper's rule, whose only re-exploration is the "
                               "0.01 floor per reading)")
    measured_floor: bool = field(False, Spec(BOOL), "a prompt on a streak is kept at least at the rate at which "
                                 "the streak prompts of its data level and side (all correct / all incorrect) "
                                 "that were rolled out lately came back mixed, instead of 0.01 (ours; False: the "
                                 "paper's rule). The level tells the frontier (a three-digit sum failed once, "
                                 "mixed again 30% of the time) from what stays zero-variance (a product never "
                                 "taught: 0.1%); without levels it is one rate per side")
    floor_memory: float = field(0.98, Spec(FLOAT, 0, 1, low_open=True), "weight the measured floor's counts keep "
                                "at each training step (0.98: a half-life of ~35 steps)")
    pass_sizing: str = sizing_field("adaptive")  # the paper's: DS's adaptive follow-ups

    def check_relations(self, prefix: str) -> None:
        if not (self.skip_easy or self.skip_hard):
            raise ConfigError(f"{prefix}.skip_easy / {prefix}.skip_hard: both False skips nothing; use "
                              "dynamic_sampling for that")
        if self.p_min > self.p_max:
            raise ConfigError(f"{prefix}.p_min: {self.p_min} is above {prefix}.p_max {self.p_max}")
        for name in ("p_easy", "p_hard"):
            value = getattr(self, name)
            if not self.p_min <= value <= self.p_max:
                raise ConfigError(f"{prefix}.{name}: {value} is outside [p_min, p_max] = "
                                  f"[{self.p_min}, {self.p_max}]")


@register_strategy("greso")
class GresoSelector(FilteringSelector):
    """Per-prompt easy / hard streaks (one dense signed int32 array, 4 bytes per prompt) and the GRESO skip rule.

    A prompt whose last z consecutive rollouts were all correct is kept with probability
    max(p_easy ** z, 0.01); all incorrect, max(p_hard ** z, 0.01); otherwise (mixed last
    rollout, or never rolled out) 1; `skip_easy` / `skip_hard` False keep one side's streaks for
    sure; with `easy_patience` / `hard_patience` k > 1 a streak shorter than k keeps the prompt and
    the exponent counts from the k-th (z - k + 1). After each step whose stream epoch is at least
    `adapt_from_epoch`, p_easy / p_hard move by `delta_p` toward the easy / hard zero-variance
    targets target_zero_variance/3 and 2·target/3 (the reference adapts from the second epoch:
    before it no prompt has a history, nothing can be skipped, and adapting would only wind p
    down to its clamp). Decisions are counter-based draws keyed by (seed, step, occurrence
    epoch, prompt id). Passes are sized by `pass_sizing` (adaptive, as Dynamic Sampling's), whose filtering GRESO
    keeps for the groups it could not predict. Its prediction is a score, the streak's length.
    Ours, off by default: `rest_steps` skips a prompt rolled out fewer than that many steps ago,
    `revisit_steps` keeps for sure a prompt whose streak of z is revisit_steps · z steps old, and
    `measured_floor` keeps a streak prompt at least at its (data level, side) cell's recent rate of
    mixed groups among the cell's rolled-out streak prompts (counts decayed by `floor_memory` a step;
    the rates are fixed at the start of a step, as p_easy / p_hard are).
    """

    Settings = GresoSettings
    knobs = ("p_easy", "p_hard")
    ablation = Ablation("delta_p", (0.0025, 0.005, 0.01, 0.02, 0.05), label="Δp")
    prediction_is_chance = False

    extras = ("prompt_levels",)

    def __init__(self, num_prompts: int, *, prompt_levels=None, **common):
        """prompt_levels: the data's level per prompt (int [num_prompts], -1 none; None: no levels), read only
        by the measured floor."""
        super().__init__(num_prompts, **common)
        # The adapted keep bases: state, starting from the settings.
        self.p_easy = float(self.settings.p_easy)
        self.p_hard = float(self.settings.p_hard)
        # One signed streak per prompt (4 bytes): +z = z all-correct rollouts in a row, -z = z all-incorrect,
        # 0 = last rollout mixed or never rolled out. The two streaks are exclusive, so one array holds both.
        self.streak = np.zeros(self.num_prompts, dtype=np.int32)
        self.batch_short = False  # this step's batch had fewer usable groups than asked (set by finish_step)
        # The step of each prompt's last rollout (-1: never), kept only for a rest or a revisit.
        self.last_rollout_step = np.full(self.num_prompts if self._dated else 0, -1, dtype=np.int32)
        self._keep_table_cache: tuple[tuple[float, float], np.ndarray, int, int] | None = None
        # The measured floor: per (level index, side 0 = all correct / 1 = all incorrect), the decayed count of
        # mixed groups and of groups among rolled-out streak prompts, float64 [L, 2, 2]; kept only when on.
        floor = self.settings.measured_floor
        self.level_index = level_indices(prompt_levels if floor else None, self.num_prompts, "greso")
        self.flip_counts = np.zeros((int(self.level_index.max()) + 1 if floor else 0, 2, 2))
        self.floors = self._measured_floors()  # [L, 2], fixed for a step

    @property
    def z_easy(self) -> np.ndarray:
        """Easy streak per prompt, int32 [num_prompts]."""
        return np.maximum(self.streak, 0)

    @property
    def z_hard(self) -> np.ndarray:
        """Hard streak per prompt, int32 [num_prompts]."""
        return np.maximum(-self.streak, 0)

    @property
    def easy_target(self) -> float:
        return self.settings.target_zero_variance / 3.0

    @property
    def hard_target(self) -> float:
        return 2.0 * self.settings.target_zero_variance / 3.0

    def keep_probabilities(self, prompt_ids) -> np.ndarray:
        """Keep probability per prompt, float64 [N]."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "greso.keep_probabilities")
        table, longest_hard, longest_easy = self._keep_table()
        raw = self.streak[ids]
        streak = np.clip(_past_patience(raw, self.settings.easy_patience, self.settings.hard_patience),
                         -longest_hard, longest_easy)
        keep = table[streak + longest_hard]
        if self.settings.measured_floor:
            floor = self.floors[self.level_index[ids], (raw < 0).astype(np.int64)]
            keep = np.where(streak != 0, np.maximum(keep, floor), keep)
        if not self._dated:
            return keep
        last = self.last_rollout_step[ids]
        age = np.where(last >= 0, self.step - last, -1)
        if self.settings.revisit_steps:
            stale = age >= self.settings.revisit_steps * np.abs(raw).astype(np.int64)
            keep = np.where((raw != 0) & stale, 1.0, keep)
        return np.where((age >= 0) & (age < self.settings.rest_steps), 0.0, keep)

    @property
    def _dated(self) -> bool:
        """Whether the rule reads each prompt's last rollout step (a rest or a revisit)."""
        return bool(self.settings.rest_steps or self.settings.revisit_steps)

    def _keep_table(self) -> tuple[np.ndarray, int, int]:
        """Keep probability for every streak value from -longest_hard to +longest_easy.

        Beyond `longest` the probability no longer changes (it has reached the 0.01 floor, or
        p == 1), so clipping the streak to it is exact and a lookup replaces 10^6 powers. A side that
        does not skip (`skip_easy` / `skip_hard` False) is the table of p == 1: kept for sure.
        """
        if self._keep_table_cache is not None and self._keep_table_cache[0] == (self.p_easy, self.p_hard):
            return self._keep_table_cache[1:]
        easy = _streak_keep_probabilities(self.p_easy if self.settings.skip_easy else 1.0)
        hard = _streak_keep_probabilities(self.p_hard if self.settings.skip_hard else 1.0)
        table = np.concatenate([hard[:0:-1], easy])
        self._keep_table_cache = ((self.p_easy, self.p_hard), table, hard.size - 1, easy.size - 1)
        return table, hard.size - 1, easy.size - 1

    def _measured_floors(self) -> np.ndarray:
        """Keep floor per (level index, side), float64 [L, 2]: the cell's rate of mixed groups, its counts
        pulled toward KEEP_FLOOR by one group's worth of prior, never below KEEP_FLOOR."""
        mixed, groups = self.flip_counts[..., 0], self.flip_counts[..., 1]
        rate = (mixed + KEEP_FLOOR * _FLOOR_PRIOR_GROUPS) / (groups + _FLOOR_PRIOR_GROUPS)
        return np.clip(rate, KEEP_FLOOR, 1.0)

    def begin_step(self, step: int, *, epoch: int = 0) -> None:
        super().begin_step(step, epoch=epoch)
        if self.settings.measured_floor:
            self.floors = self._measured_floors()

    def should_keep(self, prompt_ids, epochs=None) -> np.ndarray:
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "greso.should_keep")
        return self.occurrence_uniforms(ids, epochs, Stream.GRESO_KEEP) < self.keep_probabilities(ids)

    def predicted_zero_variance(self, prompt_ids) -> np.ndarray:
        """The streak's length as the keep rule counts it, float64 [N]: the longer a prompt has been all
        correct or all incorrect, the likelier its next group is too (the order the rule skips in at
        p_easy = p_hard). The rule's own view: counted from the patience on (a streak shorter than its
        patience scores 0, as a mixed prompt), and 0 on a side that does not skip."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "greso.predicted_zero_variance")
        s = self.settings
        streak = _past_patience(self.streak[ids], s.easy_patience, s.hard_patience)
        streak = np.where(streak > 0, streak * s.skip_easy, -streak * s.skip_hard)
        return streak.astype(np.float64)

    def _skip_kinds(self, ids: np.ndarray) -> np.ndarray:
        streak = self.streak[ids]
        return np.where(streak > 0, OUTCOME_ALL_CORRECT, np.where(streak < 0, OUTCOME_ALL_INCORRECT, OUTCOME_NONE))

    def _update_history(self, ids, num_correct, num_samples, easy, hard) -> None:
        if self._dated:
            self.last_rollout_step[ids] = self.step
        if np.unique(ids).size == ids.size:
            self._count_flips(ids, self.streak[ids], ~(easy | hard))
            self.streak[ids] = _next_streak(self.streak[ids], easy, hard)
            return
        for row, prompt in enumerate(ids):  # a prompt repeated in one call: apply in rollout order
            self._count_flips(ids[row:row + 1], self.streak[prompt:prompt + 1], ~(easy | hard)[row:row + 1])
            self.streak[prompt] = _next_streak(self.streak[prompt:prompt + 1], easy[row:row + 1],
                                               hard[row:row + 1])[0]

    def _count_flips(self, ids: np.ndarray, streak: np.ndarray, mixed: np.ndarray) -> None:
        """Adds the groups of prompts that were on a streak (signed, before this rollout) to their cells."""
        if not self.settings.measured_floor:
            return
        on_streak = streak != 0
        cells = (self.level_index[ids[on_streak]], (streak[on_streak] < 0).astype(np.int64))
        np.add.at(self.flip_counts[..., 0], cells, mixed[on_streak])
        np.add.at(self.flip_counts[..., 1], cells, 1.0)

    def finish_step(self, groups: list[Group], train_batch_size: int) -> list[Group]:
        batch = super().finish_step(groups, train_batch_size)
        self.batch_short = len(batch) < train_batch_size
        return batch

    def _adapt(self) -> None:
        s = self.settings
        self.flip_counts *= s.floor_memory
        short, self.batch_short = self.batch_short, False
        if self.step_groups == 0 or self.epoch < s.adapt_from_epoch:
            return
        if short and s.explore_when_short:
            # The targets assume a pool deep enough that skipping only saves rollouts. On a pool the step
            # cycles through, a skipper at its floor runs out of kept prompts before the batch fills
            # (its passes re-read the pool and meet the same fixed decisions): the skipping then costs
            # training signal, so it eases until the batch fills again.
            self.p_easy = self._clamp(self.p_easy + s.delta_p)
            self.p_hard = self._clamp(self.p_hard + s.delta_p)
            return
        easy_ratio = self.step_easy / self.step_groups
        hard_ratio = self.step_hard / self.step_groups
        self.p_easy = self._clamp(self.p_easy - s.delta_p if easy_ratio >= self.easy_target
                                  else self.p_easy + s.delta_p)
        self.p_hard = self._clamp(self.p_hard - s.delta_p if hard_ratio >= self.hard_target
                                  else self.p_hard + s.delta_p)

    def _clamp(self, p: float) -> float:
        return float(min(max(p, self.settings.p_min), self.settings.p_max))

    def _history_state(self) -> dict[str, Any]:
        state = {"p_easy": self.p_easy, "p_hard": self.p_hard, "streak": self.streak.copy()}
        if self._dated:
            state["last_rollout_step"] = self.last_rollout_step.copy()
        if self.settings.measured_floor:
            state["flip_counts"] = self.flip_counts.copy()
        return state

    def _load_history_state(self, state: dict[str, Any]) -> None:
        self.streak = self._loaded_prompt_array(state, "streak", np.int32, integer=True)
        self.p_easy = float(state["p_easy"])
        self.p_hard = float(state["p_hard"])
        if self._dated:
            self.last_rollout_step = self._loaded_prompt_array(state, "last_rollout_step", np.int32, integer=True)
        if self.settings.measured_floor:
            counts = np.asarray(state["flip_counts"], np.float64)
            if counts.shape != self.flip_counts.shape or not np.all(np.isfinite(counts)) or np.any(counts < 0) or \
                    np.any(counts[..., 0] > counts[..., 1]):
                raise ValueError(f"greso.load_state_dict: flip_counts must be finite counts [{self.flip_counts.shape}] "
                                 f"with mixed <= groups, got {counts.shape}")
            self.flip_counts = counts.copy()
            self.floors = self._measured_floors()


def _past_patience(streak: np.ndarray, easy_patience: int, hard_patience: int) -> np.ndarray:
    """Signed streaks [N] counted from the patience on: +z becomes +max(z - easy_patience + 1, 0), -z
    likewise with hard_patience, so a streak shorter than its patience keeps the prompt for sure."""
    easy = np.maximum(streak - (easy_patience - 1), 0)
    hard = np.minimum(streak + (hard_patience - 1), 0)
    return np.where(streak > 0, easy, hard).astype(np.int32)


def _next_streak(streak: np.ndarray, easy: np.ndarray, hard: np.ndarray) -> np.ndarray:
    """Signed streaks after one rollout each: all-correct extends +, all-incorrect extends -, mixed resets."""
    grown_easy = np.maximum(streak, 0) + 1
    grown_hard = np.minimum(streak, 0) - 1
    return np.where(easy, grown_easy, np.where(hard, grown_hard, 0)).astype(np.int32)


def _streak_keep_probabilities(p: float, max_streak: int = 1 << 20) -> np.ndarray:
    """max(p ** z, 0.01) for z = 0 .. the first z where it stops changing, float64."""
    if p >= 1.0:
        return np.ones(2)
    if p <= KEEP_FLOOR:
        return np.array([1.0, KEEP_FLOOR])
    longest = min(int(np.ceil(np.log(KEEP_FLOOR) / np.log(p))) + 1, max_streak)
    return np.maximum(np.power(p, np.arange(longest + 1, dtype=np.float64)), KEEP_FLOOR)


# Ours, for the per-step learning diagnosis: a prompt solved once may still be at the frontier (one
# all-correct group of 8 is common at a success rate of 0.8), so easy skips wait for three in a row.
register_variant("greso_patient", "greso", easy_patience=3)
# Ours, for a pool the step cycles through: skipping eases whenever the batch came out short.
register_variant("greso_fill", "greso", explore_when_short=True)
# Ours, for the per-step learning diagnosis: GRESO's gap split into what its easy and its hard skips cost.
register_variant("greso_hard_only", "greso", skip_easy=False)
register_variant("greso_easy_only", "greso", skip_hard=False)
# Ours, for the learning seeds of the `long` task: under deep skipping GRESO re-read the pool every ~2 steps and
# trained its mixed prompts every ~5 (Dynamic Sampling: every ~44). A prompt rests after each rollout for about
# ds_fixed's epoch there (~31 steps), so the batch spreads over as many prompts as DS's.
register_variant("greso_rested", "greso", rest_steps=32)
# Ours, for the same seeds: of the level-2 prompts ds_fixed trained on late in seed 5, GRESO had last seen 58% all
# incorrect, a median 103 steps before. A streak of z expires after 50 z steps without a rollout, and prompts rest.
register_variant("greso_spaced", "greso", rest_steps=16, revisit_steps=50)
# Ours, for the same seeds: late in seed 5 ds_fixed found 30% of its level-2 and 43% of its level-3 prompts last
# seen all incorrect mixed again (products never taught: 0.1%), and 50% of those last seen all correct; GRESO
# skips them all at one rate. A rest, and a floor per data level and side measured from the rolled-out streaks.
register_variant("greso_frontier", "greso", rest_steps=32, measured_floor=True)
