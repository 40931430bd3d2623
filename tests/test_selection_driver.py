"""The one step driver over every strategy, with scripted prompts whose outcomes are known by hand."""

import math

import numpy as np
import pytest

from greso_jax.selection import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED, MaxPassesReached,
                                 PassConfig, PulledPrompts, ScoredPass, make_selector, run_selection_step)

PASS_FIELDS = ("rollout_batch_size", "min_pass_size", "max_passes", "on_max_passes", "once_per_step", "pass_cap")

STABLE_METRICS = ("selection/skipped_easy", "selection/skipped_hard",
                  "selection/kept", "selection/passes", "selection/easy_ratio", "selection/hard_ratio",
                  "selection/zero_variance_ratio", "selection/effective_prompts", "rollout/num_responses",
                  "rollout/num_tokens")


class ScriptedWorld:
    """Prompt i answers correctly on its k-th response of a step iff k is in pattern(i); ids stream in order."""

    def __init__(self, num_prompts, pattern):
        self.num_prompts, self.pattern = num_prompts, pattern
        self.position, self.selector, self.calls = 0, None, []
        self.drawn = {}

    def begin_step(self):
        self.drawn = {}

    def pull(self, n):
        kept, skipped = [], []
        while len(kept) < n and len(skipped) < 10 * self.num_prompts:
            prompt = self.position % self.num_prompts
            self.position += 1
            keep = self.selector.should_keep(np.array([prompt]))[0]
            (kept if keep else skipped).append(prompt)
        return PulledPrompts(np.array(kept, dtype=np.int64), [f"payload{p}" for p in kept],
                             np.array(skipped, dtype=np.int64))

    def rollout(self, prompt_ids, payloads, num_samples):
        correct = np.zeros((prompt_ids.size, num_samples), dtype=bool)
        for row, prompt in enumerate(prompt_ids):
            start = self.drawn.get(prompt, 0)
            self.drawn[prompt] = start + num_samples
            correct[row] = [start + k in self.pattern(prompt) for k in range(num_samples)]
        self.calls.append((prompt_ids.copy(), num_samples))
        handle = {"ids": prompt_ids.copy(), "payloads": list(payloads), "num_samples": num_samples}
        return ScoredPass(correct, correct.astype(np.float32), handle=handle, num_tokens=3 * correct.size)

    def outcome(self, group_size):
        def predict(step, prompt_ids):
            codes = []
            for prompt in prompt_ids:
                start = self.drawn.get(prompt, 0)
                hits = sum(start + k in self.pattern(prompt) for k in range(group_size))
                codes.append(OUTCOME_ALL_CORRECT if hits == group_size else
                             OUTCOME_ALL_INCORRECT if hits == 0 else OUTCOME_MIXED)
            return np.array(codes)
        return predict


def by_id_mod_4(prompt):
    """0: always correct, 1: never, 2 and 3: correct on the first response only (mixed)."""
    return {0: range(1000), 1: (), 2: (0,), 3: (0,)}[prompt % 4]


def build(strategy, world, *, train_batch_size, group_size=4, **selection):
    """`selection`: shared pass fields and the strategy's own settings, by field name."""
    passes = PassConfig(**{k: selection.pop(k) for k in PASS_FIELDS if k in selection})
    extras = {"outcome": world.outcome(group_size)} if strategy == "oracle" else {}
    selector = make_selector(strategy, num_prompts=world.num_prompts, group_size=group_size, seed=0,
                             passes=passes, settings=selection, **extras)
    world.selector = selector
    return selector


def step(selector, world, index, train_batch_size):
    world.begin_step()
    return run_selection_step(selector, index, pull_prompts=world.pull, rollout=world.rollout,
                              train_batch_size=train_batch_size)


def test_vanilla_one_pass_of_exactly_the_batch_keeping_zero_variance_groups():
    world = ScriptedWorld(100, by_id_mod_4)
    selector = build("vanilla", world, train_batch_size=6)
    result = step(selector, world, 0, 6)
    assert [g.prompt_id for g in result.groups] == [0, 1, 2, 3, 4, 5]
    m = result.metrics
    assert set(STABLE_METRICS) <= set(m)
    assert (m["selection/passes"], m["selection/kept"], m["selection/effective_prompts"]) == (1, 6, 2)
    assert m["selection/zero_variance_ratio"] == pytest.approx(4 / 6)  # ids 0, 4 all correct; 1, 5 none
    assert (m["rollout/num_responses"], m["rollout/num_tokens"]) == (24, 72)
    assert all(g.loss_mask.all() and math.isnan(g.baseline) for g in result.groups)


def test_dynamic_sampling_filters_resizes_passes_and_truncates():
    world = ScriptedWorld(100, by_id_mod_4)
    selector = build("dynamic_sampling", world, train_batch_size=6, rollout_batch_size=8, min_pass_size=2)
    result = step(selector, world, 0, 6)
    # Pass 1: ids 0..7, variance in 2,3,6,7 -> 2 missing, zv = 4/8 -> ceil(2 / 0.5 * 1.25) = 5: ids 8..12.
    assert [(ids.tolist(), g) for ids, g in world.calls] == [(list(range(8)), 4), (list(range(8, 13)), 4)]
    assert [g.prompt_id for g in result.groups] == [2, 3, 6, 7, 10, 11]
    m = result.metrics
    assert (m["selection/passes"], m["selection/kept"], m["selection/effective_prompts"]) == (2, 13, 6)
    assert m["selection/zero_variance_ratio"] == pytest.approx(7 / 13)
    assert (m["selection/easy_ratio"], m["selection/hard_ratio"]) == pytest.approx((4 / 13, 3 / 13))
    assert result.full_batch and m["rollout/num_responses"] == 52
    for group in result.groups:  # every reference points at this prompt's rows in the handles
        for call, row, sample in group.response_refs:
            handle = result.handles[call]
            assert handle["ids"][row] == group.prompt_id and handle["payloads"][row] == f"payload{group.prompt_id}"
            assert sample < handle["num_samples"]
        assert group.correct.tolist() == [True, False, False, False] and group.loss_mask.all()


def test_max_passes_train_on_what_was_collected_or_raise():
    only_id_5_mixed = lambda prompt: (0,) if prompt == 5 else ()  # noqa: E731
    world = ScriptedWorld(40, only_id_5_mixed)
    selector = build("dynamic_sampling", world, train_batch_size=4, rollout_batch_size=4, min_pass_size=1,
                     max_passes=3)
    result = step(selector, world, 0, 4)
    assert [g.prompt_id for g in result.groups] == [5]
    assert result.metrics["selection/passes"] == 3 and not result.full_batch
    world = ScriptedWorld(40, only_id_5_mixed)
    selector = build("dynamic_sampling", world, train_batch_size=4, rollout_batch_size=4, min_pass_size=1,
                     max_passes=3, on_max_passes="error")
    with pytest.raises(MaxPassesReached, match="selection.max_passes"):
        step(selector, world, 0, 4)


def test_a_prompt_cap_gives_small_passes_the_budget_of_full_ones():
    # Prompts 0-5 are mixed, later ones only every 10th: adaptive DS sizes its follow-up passes from the
    # informative rate it has seen (high at first), so they are smaller than rollout_batch_size and three
    # of them roll out fewer prompts than three full passes would.
    def world():
        return ScriptedWorld(200, lambda prompt: (0,) if prompt < 6 or prompt % 10 == 0 else ())

    by_passes, by_prompts = world(), world()
    passes = step(build("dynamic_sampling", by_passes, train_batch_size=8, rollout_batch_size=8, min_pass_size=1,
                        max_passes=3), by_passes, 0, 8)
    assert passes.metrics["selection/passes"] == 3 and not passes.full_batch
    assert passes.metrics["selection/kept"] < 3 * 8
    prompts = step(build("dynamic_sampling", by_prompts, train_batch_size=8, rollout_batch_size=8, min_pass_size=1,
                         max_passes=3, pass_cap="prompts"), by_prompts, 0, 8)
    assert prompts.metrics["selection/passes"] > 3 and prompts.full_batch
    assert prompts.metrics["selection/kept"] <= 3 * 8  # within the budget of three full passes
    assert [ids.tolist() for ids, _ in by_prompts.calls[:3]] == [ids.tolist() for ids, _ in by_passes.calls]


def test_a_small_pool_cycled_within_a_step_repeats_prompts_unless_once_per_step():
    def run(**once):
        world = ScriptedWorld(8, lambda prompt: range(1000) if prompt % 2 else (0,))  # even ids mixed
        selector = build("dynamic_sampling", world, train_batch_size=6, rollout_batch_size=4, min_pass_size=4,
                         max_passes=4, **once)
        return step(selector, world, 0, 6), world

    result, world = run()
    rolled = np.concatenate([ids for ids, _ in world.calls])
    m = result.metrics
    assert m["selection/repeated_groups"] == rolled.size - np.unique(rolled).size > 0
    assert m["selection/repeats_dropped"] == 0
    assert m["selection/batch_prompts"] == len({g.prompt_id for g in result.groups})
    result, world = run(once_per_step=True)
    rolled = np.concatenate([ids for ids, _ in world.calls])
    assert np.unique(rolled).size == rolled.size == 8  # each prompt once, then the pool is spent
    m = result.metrics
    assert m["selection/repeated_groups"] == 0 and m["selection/repeats_dropped"] >= 8
    assert [g.prompt_id for g in result.groups] == [0, 2, 4, 6] and not result.full_batch


def test_greso_skips_streaky_prompts_on_the_next_epoch_and_counts_them():
    world = ScriptedWorld(16, by_id_mod_4)
    selector = build("greso", world, train_batch_size=4, rollout_batch_size=8, min_pass_size=2,
                     p_easy=0.05, p_hard=0.05, p_min=0.05)
    first = step(selector, world, 0, 4).metrics  # epoch 1: no history, nothing skipped
    assert first["selection/skipped_easy"] + first["selection/skipped_hard"] == 0
    later = [step(selector, world, i, 4).metrics for i in range(1, 6)]
    skipped = sum(m["selection/skipped_easy"] + m["selection/skipped_hard"] for m in later)
    rolled = sum(m["selection/kept"] for m in later)
    assert skipped > 0 and sum(m["selection/zero_variance_ratio"] * m["selection/kept"] for m in later) < rolled / 2


def test_oracle_rolls_out_only_groups_with_variance():
    world = ScriptedWorld(100, by_id_mod_4)
    selector = build("oracle", world, train_batch_size=6)
    m = step(selector, world, 0, 6).metrics
    assert (m["selection/passes"], m["selection/kept"], m["selection/zero_variance_ratio"]) == (1, 6, 0)
    assert (m["selection/skipped_easy"], m["selection/skipped_hard"]) == (3, 3)  # ids 0,4,8 and 1,5,9


def test_aero_stage_one_rescue_rounds_and_curation():
    patterns = {0: range(100), 1: (), 2: (6,), 3: (0, 1), 4: (0,)}  # easy, never, rescued, half, low
    world = ScriptedWorld(5, lambda p: patterns[p])
    selector = build("aero", world, train_batch_size=5, n_explore=4, n_extra=4, max_group_size=12)
    result = step(selector, world, 0, 5)
    assert [(ids.tolist(), g) for ids, g in world.calls] == [([0, 1, 2, 3, 4], 4), ([1, 2], 4), ([1], 4)]
    easy, never, rescued, half, low = result.groups
    assert never.response_refs.tolist() == [[c, r, s] for c, r in ((0, 1), (1, 0), (2, 0)) for s in range(4)]
    assert rescued.correct.tolist() == [False] * 6 + [True, False]
    assert rescued.loss_mask.all() and math.isnan(rescued.baseline)  # the rescue stratum: no rejection
    assert low.loss_mask.sum() == 2 and low.loss_mask[0]
    assert half.loss_mask.all() and math.isnan(half.baseline)
    assert easy.baseline == pytest.approx(5 / 6) and easy.scale == pytest.approx(math.sqrt(5 / 36))
    assert never.baseline == pytest.approx(1 / 14) and never.correct.size == 12
    m = result.metrics
    assert (m["selection/passes"], m["selection/effective_prompts"], m["selection/aero/posterior_groups"]) == (3, 3, 2)
    assert m["rollout/num_responses"] == 32 and m["selection/zero_variance_ratio"] == pytest.approx(2 / 5)


def test_cumulative_counters_and_state_continue_across_steps():
    world = ScriptedWorld(100, by_id_mod_4)
    selector = build("dynamic_sampling", world, train_batch_size=6, rollout_batch_size=8, min_pass_size=2)
    step(selector, world, 0, 6)
    restored = build("dynamic_sampling", ScriptedWorld(100, by_id_mod_4), train_batch_size=6,
                     rollout_batch_size=8, min_pass_size=2)
    restored.load_state_dict(selector.state_dict())
    world.selector = restored
    m = step(restored, world, 1, 6).metrics
    assert m["rollout/num_responses"] > 52 and m["rollout/num_tokens"] == 3 * m["rollout/num_responses"]


def test_bad_callbacks_and_oracle_misuse_are_named():
    world = ScriptedWorld(10, by_id_mod_4)
    selector = build("vanilla", world, train_batch_size=2)
    def bad(ids, payloads, g):
        return ScoredPass(np.ones((ids.size, g + 1), bool), np.ones((ids.size, g + 1)))

    with pytest.raises(ValueError, match="rollout: correct must be bool"):
        run_selection_step(selector, 0, pull_prompts=world.pull, rollout=bad, train_batch_size=2)
    short = lambda n: PulledPrompts(np.arange(n), [None])  # noqa: E731
    with pytest.raises(ValueError, match="payloads"):
        run_selection_step(selector, 0, pull_prompts=short, rollout=world.rollout, train_batch_size=2)
    with pytest.raises(ValueError, match="oracle"):
        make_selector("oracle", num_prompts=10, group_size=4, seed=0)


def test_empty_pull_ends_the_step_early():
    world = ScriptedWorld(10, by_id_mod_4)
    selector = build("dynamic_sampling", world, train_batch_size=4)
    result = run_selection_step(selector, 0, pull_prompts=lambda n: PulledPrompts(np.zeros(0, np.int64), []),
                                rollout=world.rollout, train_batch_size=4)
    assert result.groups == [] and result.metrics["selection/passes"] == 0 and not result.full_batch


def test_aero_rescue_adds_small_increments_until_the_first_success():
    """Default n_extra 2 of G=8 after a Stage I of 4: a prompt solved in the first round leaves the rounds, the
    unsolved go on to the budget; with n_extra 4 the same step is one round that completes every group."""
    patterns = {0: (0,), 1: (4,), 2: ()}  # solved in Stage I, solved at the first rescue response, never
    world = ScriptedWorld(3, lambda p: patterns[p])
    result = step(build("aero", world, train_batch_size=3, group_size=8), world, 0, 3)
    assert [(ids.tolist(), g) for ids, g in world.calls] == [([0, 1, 2], 4), ([1, 2], 2), ([2], 2)]
    assert [g.correct.size for g in result.groups] == [4, 6, 8]
    assert result.metrics["rollout/num_responses"] == 12 + 4 + 2
    world = ScriptedWorld(3, lambda p: patterns[p])
    step(build("aero", world, train_batch_size=3, group_size=8, n_extra=4), world, 0, 3)
    assert [(ids.tolist(), g) for ids, g in world.calls] == [([0, 1, 2], 4), ([1, 2], 4)]


def test_mopps_as_its_authors_run_it_is_one_unfiltered_pass_of_the_batch():
    """mopps_authors: one pass of train_batch_size kept prompts, zero-variance groups trained on, no follow-up;
    the DS-filtered mopps drops them and pulls again."""
    from greso_jax.selection import variant
    world = ScriptedWorld(100, by_id_mod_4)
    authors = build("mopps", world, train_batch_size=6, rollout_batch_size=9, min_pass_size=2,
                    **variant("mopps_authors").settings)
    result = step(authors, world, 0, 6)
    assert [g for _, g in world.calls] == [4] and world.calls[0][0].size == 6
    assert len(result.groups) == 6 and result.metrics["selection/passes"] == 1
    assert result.metrics["selection/effective_prompts"] == sum(g.has_variance for g in result.groups)
    world = ScriptedWorld(100, by_id_mod_4)
    filtered = step(build("mopps", world, train_batch_size=6, rollout_batch_size=9, min_pass_size=2), world, 0, 6)
    assert world.calls[0][0].size == 9 and all(g.has_variance for g in filtered.groups)
