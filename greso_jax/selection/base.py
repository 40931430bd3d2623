"""The strategy interface: pre-rollout keep decisions, the step's pass shape, history, predictions,
per-step metrics, state.

A strategy is a `Selector` subclass registered by name (`selection.registry`). The step driver
(`selection.driver.run_selection_step`) knows no strategy: it asks the strategy for the first
pass, runs it, hands the new groups back (`after_pass`, which observes them and asks for the
next pass or ends the step's rollouts) and finally asks which groups to train on
(`finish_step`). The tools (simulator, predictor replay, reports) know no strategy either: they
read what a strategy declares (its settings, extras, knobs, ablation) and ask it what it
predicts (`predicted_zero_variance`). The defaults here are vanilla GRPO's shape: one pass of
train_batch_size prompts, every group kept. See docs/design.md, "Strategies".
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Sequence

import numpy as np

from greso_jax.core.specs import check_field
from greso_jax.selection import counter_rng
from greso_jax.selection.groups import Group, PassRequest
from greso_jax.selection.pass_sizing import MAX_PASS_FACTOR, RATE_MARGIN, make_sizer
from greso_jax.selection.settings import GROUP_SIZE_SPEC, Ablation, PassConfig, StrategySettings

# A group's outcome: mixed rewards, all correct, all incorrect; OUTCOME_NONE: a prompt never rolled out.
OUTCOME_MIXED, OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_NONE = 0, 1, 2, -1


class MaxPassesReached(RuntimeError):
    """selection.on_max_passes == "error" and a step hit selection.max_passes before filling its batch."""


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


def level_indices(prompt_levels, num_prompts: int, where: str) -> np.ndarray:
    """prompt_levels (int [num_prompts], -1 = no level; None: no levels) -> level index int64 [num_prompts]:
    0 for a prompt without a level, l + 1 for data level l. Raises naming `where` on a wrong shape or value."""
    if prompt_levels is None:
        return np.zeros(num_prompts, np.int64)
    levels = np.asarray(prompt_levels)
    if levels.shape != (num_prompts,) or not np.issubdtype(levels.dtype, np.integer) or (levels < -1).any():
        raise ValueError(f"{where}: prompt_levels must be integers >= -1 of shape [{num_prompts}], "
                         f"got {levels.dtype} {levels.shape}")
    return levels.astype(np.int64) + 1


class Selector:
    """Base of every strategy; on its own it is vanilla GRPO's step shape with no history.

    Per step the driver calls `begin_step`, then per pass `record_skipped` / `record_rollout`
    and `after_pass`, then `finish_step` and `end_step`. The data pipeline calls `should_keep`
    as its filter, lazily, while the driver pulls prompts for the current step.
    """

    strategy: ClassVar[str] = "base"  # the registered name (set by `register_strategy`)
    Settings: ClassVar[type[StrategySettings] | None] = None  # its config section `selection.<strategy>.*`
    simulation_only: ClassVar[bool] = False  # True: needs foresight only the simulator has (the oracle)
    # What the strategy takes besides its settings, by keyword; make_selector passes exactly these from
    # what a caller offers: "prompt_levels" (the data's level per prompt, -1 none), the simulator's
    # "outcome" (next group outcomes) and "success" (true success rates).
    extras: ClassVar[tuple[str, ...]] = ()
    # Attributes the strategy adapts, logged after each step as selection/<strategy>/<knob>; plots and
    # reports draw them.
    knobs: ClassVar[tuple[str, ...]] = ()
    ablation: ClassVar[Ablation | None] = None  # the setting its own study sweeps, if any
    # True: its passes extend groups with more responses (AERO's rescue), so a group is not one G-row lane.
    extends_groups: ClassVar[bool] = False
    # True: predicted_zero_variance is a chance in [0, 1] (calibration and Brier score apply); False: a score.
    prediction_is_chance: ClassVar[bool] = True
    # The pass sizer (`pass_sizing.SIZERS`) of a strategy whose settings have no `pass_sizing` field.
    default_pass_sizing: ClassVar[str] = "exact"

    def __init__(self, num_prompts: int, *, group_size: int = 8, pass_config: PassConfig | None = None,
                 seed: int = 0, settings: StrategySettings | None = None, checked: bool = False, **fields):
        """settings: the strategy's `Settings`, or its fields as keywords (`fields`; the rest take the
        dataclass defaults). checked: group_size, pass_config and settings were checked already for
        this group size (config.validate), so they are not checked again."""
        if not isinstance(num_prompts, (int, np.integer)) or num_prompts < 1:
            raise ValueError(f"num_prompts: must be an integer >= 1, got {num_prompts!r}")
        if not checked:
            check_field("rl.group_size", int(group_size) if isinstance(group_size, np.integer) else group_size,
                        GROUP_SIZE_SPEC)
        self.num_prompts = int(num_prompts)
        self.group_size = int(group_size)
        self.pass_config = pass_config if pass_config is not None else PassConfig()
        self.settings = self._settings_from(settings, fields)
        if not checked:
            self.pass_config.checked("selection")
            if self.settings is not None:
                self.settings.checked(f"selection.{self.strategy}", group_size=self.group_size)
        self.seed = int(seed)
        # Strategies whose settings carry pass_margin / max_pass_factor bound their rate-based passes by them.
        self.sizer = make_sizer(getattr(self.settings, "pass_sizing", self.default_pass_sizing), self.pass_config,
                                margin=getattr(self.settings, "pass_margin", RATE_MARGIN),
                                max_pass_factor=getattr(self.settings, "max_pass_factor", MAX_PASS_FACTOR))
        self.step = 0
        self.epoch = 0
        self.total_responses = 0
        self.total_tokens = 0
        # The last rollout's outcome per prompt (OUTCOME_*), kept by every strategy: it measures how
        # consistent zero variance is from one rollout of a prompt to its next (GRESO's premise).
        self.last_outcome = np.full(self.num_prompts, OUTCOME_NONE, dtype=np.int8)
        self._reset_step_tallies()

    @classmethod
    def _settings_from(cls, settings: StrategySettings | None, fields: dict) -> StrategySettings | None:
        """The strategy's settings: `settings` as given, or `Settings(**fields)`."""
        if cls.Settings is None:
            if settings is not None or fields:
                raise TypeError(f"{cls.strategy}: the strategy takes no settings, got {sorted(fields) or settings!r}")
            return None
        if settings is not None:
            if fields or not isinstance(settings, cls.Settings):
                raise TypeError(f"{cls.strategy}: settings must be one {cls.Settings.__name__} (without field "
                                f"keywords), got {settings!r} and {sorted(fields)}")
            return settings
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls.Settings)})
        if unknown:
            raise TypeError(f"{cls.strategy}: unknown setting(s) {unknown}; its settings are "
                            f"{[f.name for f in dataclasses.fields(cls.Settings)]}")
        return cls.Settings(**fields)

    def metric_name(self, name: str) -> str:
        """The name of one of this strategy's own metrics: selection/<strategy>/<name>."""
        return f"selection/{self.strategy}/{name}"

    # -- the step shape: what the driver asks ------------------------------------------------

    def first_pass(self, train_batch_size: int) -> PassRequest:
        """The step's first pass, sized by the strategy's sizer (the base's: exactly train_batch_size prompts)."""
        return PassRequest(num_samples=self.group_size, pull=self.sizer.first(self, train_batch_size))

    def after_pass(self, groups: list[Group], new: Sequence[int], *, passes: int,
                   train_batch_size: int) -> PassRequest | None:
        """Observes the pass's new groups (`groups[i] for i in new`) and returns the next pass, or None
        when the step's rollouts are done: once `train_batch_size` groups are usable, or at the pass cap."""
        fresh = [groups[i] for i in new]
        self.observe_groups(fresh)
        self.sizer.observe(fresh)
        remaining = train_batch_size - sum(self.usable(g) for g in groups)
        if remaining <= 0:
            return None
        if self._at_pass_cap(passes, rolled_out=len(groups)):
            if self.pass_config.on_max_passes == "error":
                raise MaxPassesReached(
                    f"selection.max_passes: step {self.step} ran {passes} passes and collected "
                    f"{train_batch_size - remaining} of {train_batch_size} usable groups")
            return None
        pull = self.follow_up_pass_size(remaining, fresh)
        if self.pass_config.pass_cap == "prompts":  # the last pass stops at the budget, not past it
            pull = min(pull, self.pass_config.max_passes * self.pass_config.rollout_batch_size - len(groups))
        return PassRequest(num_samples=self.group_size, pull=pull)

    def _at_pass_cap(self, passes: int, rolled_out: int) -> bool:
        """Whether the step's rollouts stop here: after max_passes passes, or (pass_cap "prompts") once
        max_passes x rollout_batch_size prompts are rolled out."""
        settings = self.pass_config
        if settings.pass_cap == "prompts":
            return rolled_out >= settings.max_passes * settings.rollout_batch_size
        return passes >= settings.max_passes

    def usable(self, group: Group) -> bool:
        """Whether a rolled-out group can enter the batch; the base trains on every group."""
        return True

    def follow_up_pass_size(self, remaining: int, last_pass: list[Group]) -> int:
        """Prompts to pull when `remaining` usable groups are still missing, by the strategy's sizer."""
        return self.sizer.follow_up(self, remaining, last_pass)

    def prompts_to_pull(self, wanted: float) -> float:
        """Expected kept prompts to pull for `wanted` informative groups, from the strategy's prediction;
        what the `predicted` sizer asks (only strategies whose settings offer it implement this)."""
        raise NotImplementedError(f"{self.strategy}: predicts no informative rate; pass_sizing 'predicted' "
                                  "is not among its choices")

    def finish_step(self, groups: list[Group], train_batch_size: int) -> list[Group]:
        """The groups to train on, at most train_batch_size, in rollout order (curated in place if needed)."""
        return [g for g in groups if self.usable(g)][:train_batch_size]

    def admission_order(self, prompt_ids) -> np.ndarray:
        """Stream rollouts: the order in which kept, waiting prompts enter free lanes, a permutation
        int64 [N] of range(N) (first enters first). The base keeps data order."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, f"{self.strategy}.admission_order")
        return np.arange(ids.size, dtype=np.int64)

    # -- keep decisions and history -----------------------------------------------------------

    def should_keep(self, prompt_ids, epochs=None) -> np.ndarray:
        """Pre-rollout keep decision for the current step: bool [N]. `epochs` int [N] is the stream epoch of
        each occurrence (None: the step's epoch), so that a prompt met twice in one step (in two epochs)
        gets a decision per occurrence. The base keeps every prompt."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, f"{self.strategy}.should_keep")
        return np.ones(ids.shape, dtype=bool)

    def occurrence_uniforms(self, ids: np.ndarray, epochs, stream: int) -> np.ndarray:
        """Uniforms in [0, 1), one per occurrence, keyed by (seed, stream, step) x (prompt id, the
        occurrence's stream epoch; `epochs` None: the step's epoch): resume, every host and any batch
        order draw the same. ids int64 [N] (checked); returns float64 [N]."""
        occurrence = np.full(ids.shape, self.epoch, np.int64) if epochs is None else np.asarray(epochs, np.int64)
        if occurrence.shape != ids.shape:
            raise ValueError(f"{self.strategy}: epochs shape {occurrence.shape} != prompt_ids shape {ids.shape}")
        return counter_rng.uniform(counter_rng.scalar_key(self.seed, stream, self.step), ids, occurrence)

    def begin_step(self, step: int, *, epoch: int = 0) -> None:
        """Opens a training step; `epoch` is the prompt stream's epoch when the step begins."""
        self.step = int(step)
        self.epoch = int(epoch)
        self._reset_step_tallies()

    def record_skipped(self, prompt_ids) -> None:
        """Counts prompts the pipeline skipped this step, split into easy / hard by `skip_kinds`."""
        kinds = self.skip_kinds(prompt_ids)
        self.step_skipped_easy += int(np.count_nonzero(kinds == OUTCOME_ALL_CORRECT))
        self.step_skipped_hard += int(np.count_nonzero(kinds == OUTCOME_ALL_INCORRECT))

    def skip_kinds(self, prompt_ids) -> np.ndarray:
        """What the strategy skips each prompt as, from its history now, int8 [N]: OUTCOME_ALL_CORRECT
        (easy: predicted all correct), OUTCOME_ALL_INCORRECT (hard), OUTCOME_NONE (no prediction: a
        strategy that never skips)."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, f"{self.strategy}.skip_kinds")
        return self._skip_kinds(ids).astype(np.int8)

    def predicted_zero_variance(self, prompt_ids) -> np.ndarray | None:
        """How likely each prompt's next group is zero-variance, from the strategy's history now: float64
        [N], higher is likelier (a chance when `prediction_is_chance`); None: the strategy makes no
        prediction (the base, and strategies that do not predict from history)."""
        check_prompt_ids(prompt_ids, self.num_prompts, f"{self.strategy}.predicted_zero_variance")
        return None

    def observe_groups(self, groups: list[Group]) -> None:
        """Records rolled-out groups (of any sizes) in the history."""
        if groups:
            self.observe_counts(np.array([g.prompt_id for g in groups], dtype=np.int64),
                                np.array([g.correct.sum() for g in groups], dtype=np.int64),
                                np.array([g.correct.size for g in groups], dtype=np.int64))

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
        self._track_outcomes(ids, easy, hard)
        self._update_history(ids, num_correct, num_samples, easy, hard)

    def _track_outcomes(self, ids, easy, hard) -> None:
        """Counts zero-variance repeats against each prompt's previous rollout, then records this one."""
        outcome = np.where(easy, OUTCOME_ALL_CORRECT, np.where(hard, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED))
        if np.unique(ids).size == ids.size:
            previous = self.last_outcome[ids]
        else:  # a prompt twice in one call: its second group follows its first
            previous = np.empty(ids.shape, np.int8)
            last = {}
            for row, prompt in enumerate(ids):
                previous[row] = last.get(prompt, self.last_outcome[prompt])
                last[prompt] = outcome[row]
            ids, outcome = np.array(list(last), np.int64), np.array(list(last.values()))
        was_easy, was_hard = previous == OUTCOME_ALL_CORRECT, previous == OUTCOME_ALL_INCORRECT
        self.step_revisited_easy += int(was_easy.sum())
        self.step_repeated_easy += int((was_easy & easy).sum())
        self.step_revisited_hard += int(was_hard.sum())
        self.step_repeated_hard += int((was_hard & hard).sum())
        self.last_outcome[ids] = outcome

    def record_rollout(self, num_responses: int, num_tokens: int | None = None) -> None:
        """Adds generated responses (and their tokens, when known) to the cumulative counters."""
        self.total_responses += int(num_responses)
        if num_tokens is not None:
            self.total_tokens += int(num_tokens)

    def end_step(self) -> dict[str, float]:
        """Closes the step: adapts the strategy (GRESO's p), returns the selector's metrics, its knobs
        (after adapting) among them."""
        self._adapt()
        groups = self.step_groups
        return {
            **{self.metric_name(knob): float(getattr(self, knob)) for knob in self.knobs},
            "selection/skipped_easy": float(self.step_skipped_easy),
            "selection/skipped_hard": float(self.step_skipped_hard),
            "selection/kept": float(groups),
            "selection/easy_ratio": self.step_easy / groups if groups else 0.0,
            "selection/hard_ratio": self.step_hard / groups if groups else 0.0,
            "rollout/num_responses": float(self.total_responses),
            "rollout/num_tokens": float(self.total_tokens),
            # P(zero variance again | zero variance at the prompt's previous rollout) = repeated / revisited.
            "zero_variance/revisited_easy": float(self.step_revisited_easy),
            "zero_variance/repeated_easy": float(self.step_repeated_easy),
            "zero_variance/revisited_hard": float(self.step_revisited_hard),
            "zero_variance/repeated_hard": float(self.step_repeated_hard),
        }

    def last_outcomes(self, prompt_ids) -> np.ndarray:
        """OUTCOME_* of each prompt's last rollout, int8 [N] (OUTCOME_NONE: never rolled out)."""
        return self.last_outcome[check_prompt_ids(prompt_ids, self.num_prompts, f"{self.strategy}.last_outcomes")]

    # -- checkpointing -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Flat dict of Python scalars and NumPy arrays (orbax / JSON friendly)."""
        state = {name: int(getattr(self, name)) for name in self._SCALAR_STATE}
        state["last_outcome"] = self.last_outcome.copy()
        state.update(self.sizer.state_dict())
        state.update(self._history_state())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = (set(self._SCALAR_STATE) | {"last_outcome"} | set(self.sizer.state_dict())
                    | set(self._history_state()))
        if set(state) != expected:
            missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
            raise ValueError(f"{self.strategy}.load_state_dict: keys differ (missing {missing}, unexpected {extra})")
        for name in ("num_prompts", "seed"):
            if int(state[name]) != getattr(self, name):
                raise ValueError(f"{self.strategy}.load_state_dict: {name} is {int(state[name])} in the state "
                                 f"but {getattr(self, name)} in this selector")
        for name in self._SCALAR_STATE:
            setattr(self, name, int(np.asarray(state[name])))
        self.last_outcome = self._loaded_prompt_array(state, "last_outcome", np.int8, integer=True)
        self.sizer.load_state_dict(state)
        self._load_history_state(state)

    def _loaded_prompt_array(self, state: dict[str, Any], name: str, dtype, *, integer: bool = False,
                             counts: bool = False) -> np.ndarray:
        """A copy of state[name] as `dtype` after checking it holds one value per prompt [num_prompts]
        (integers when `integer`; finite and non-negative when `counts`); the error names the field."""
        value = np.asarray(state[name])
        kind = "integer" if integer else "numeric"
        wrong = value.shape != (self.num_prompts,) or not np.issubdtype(value.dtype, np.integer if integer
                                                                         else np.number)
        if counts and not wrong:
            wrong = not np.all(np.isfinite(value)) or bool(np.any(value < 0))
            kind = f"finite, non-negative {kind}"
        if wrong:
            raise ValueError(f"{self.strategy}.load_state_dict: {name} must be {kind} [{self.num_prompts}], "
                             f"got {value.dtype} {value.shape}")
        return value.astype(dtype).copy()

    _SCALAR_STATE = ("num_prompts", "seed", "step", "total_responses", "total_tokens", "step_groups",
                     "step_easy", "step_hard", "step_skipped_easy", "step_skipped_hard", "step_revisited_easy",
                     "step_repeated_easy", "step_revisited_hard", "step_repeated_hard")

    # -- hooks for strategies ----------------------------------------------------------------

    def _reset_step_tallies(self) -> None:
        self.step_groups = self.step_easy = self.step_hard = 0
        self.step_skipped_easy = self.step_skipped_hard = 0
        self.step_revisited_easy = self.step_repeated_easy = 0
        self.step_revisited_hard = self.step_repeated_hard = 0

    def _skip_kinds(self, ids: np.ndarray) -> np.ndarray:
        """OUTCOME_* per id (see `skip_kinds`); strategies that never skip make no prediction."""
        return np.full(ids.size, OUTCOME_NONE, np.int8)

    def _update_history(self, ids, num_correct, num_samples, easy, hard) -> None:
        """Per-prompt history update after a rollout; the base keeps none."""

    def _adapt(self) -> None:
        """End-of-step adaptation; the base has none."""

    def _history_state(self) -> dict[str, Any]:
        return {}

    def _load_history_state(self, state: dict[str, Any]) -> None:
        """Restores what `_history_state` wrote; keys were checked by the caller."""
