"""GRESO selector against hand-computed histories, an independent reference of the reference rules, and resumes."""


import numpy as np
import pytest

from greso_jax.selection import GresoSelector


def groups(*kinds, size=4):
    """bool [N, size] correctness rows: 'e' all correct, 'h' all incorrect, 'm' mixed."""
    rows = {"e": [True] * size, "h": [False] * size, "m": [True] + [False] * (size - 1)}
    return np.array([rows[k] for k in kinds], dtype=bool)


def test_streaks_follow_hand_computed_history():
    s = GresoSelector(3)
    history = []
    for kind in "eehmhh":
        s.observe([0], groups(kind))
        history.append((int(s.z_easy[0]), int(s.z_hard[0])))
    assert history == [(1, 0), (2, 0), (0, 1), (0, 0), (0, 1), (0, 2)]
    assert s.z_easy[1] == s.z_hard[1] == 0  # untouched prompts stay at zero


def test_keep_probabilities_hand_computed_with_floor_and_unseen():
    s = GresoSelector(6, p_easy=0.6, p_hard=0.3, p_min=0.05, p_max=0.95)
    s.observe([0, 1, 2, 3], groups("e", "e", "h", "h"))
    s.observe([1, 2, 3], groups("e", "h", "h"))
    s.observe([3], groups("h"))
    s.observe([3], groups("h"))
    s.observe([4], groups("m"))
    # prompt: z_easy, z_hard = 0: (1,0)  1: (2,0)  2: (0,2)  3: (0,4)  4: mixed  5: never seen
    expected = [0.6, 0.36, 0.09, 0.01, 1.0, 1.0]  # 0.3**4 = 0.0081 -> floor 0.01
    np.testing.assert_allclose(s.keep_probabilities([0, 1, 2, 3, 4, 5]), expected, rtol=1e-12)
    np.testing.assert_allclose(s.keep_probabilities([3, 0]), [0.01, 0.6], rtol=1e-12)


def test_mixed_group_resets_both_streaks_and_opposite_outcome_switches():
    s = GresoSelector(2)
    s.observe([0, 1], groups("e", "h"))
    s.observe([0, 1], groups("e", "h"))
    s.observe([0, 1], groups("h", "e"))
    assert (s.z_easy.tolist(), s.z_hard.tolist()) == ([0, 1], [1, 0])
    s.observe([0, 1], groups("m", "m"))
    assert (s.z_easy.tolist(), s.z_hard.tolist()) == ([0, 0], [0, 0])
    np.testing.assert_array_equal(s.keep_probabilities([0, 1]), [1.0, 1.0])


def test_repeated_prompt_in_one_call_applies_in_order():
    s = GresoSelector(1)
    s.observe([0, 0, 0], groups("h", "e", "e"))
    assert (int(s.z_easy[0]), int(s.z_hard[0])) == (2, 0)


def test_adaptation_both_directions_and_ge_boundary():
    s = GresoSelector(24, delta_p=0.01, target_zero_variance=0.25, adapt_from_epoch=0)  # easy 1/12, hard 1/6
    s.begin_step(0)
    s.observe(np.arange(12), groups(*("e" + "h" + "m" * 10)))  # easy 1/12 >= 1/12, hard 1/12 < 1/6
    s.end_step()
    assert (s.p_easy, s.p_hard) == (0.5 - 0.01, 0.5 + 0.01)
    s.begin_step(1)
    s.observe(np.arange(12, 24), groups(*("hh" + "m" * 10)))  # easy 0 < 1/12, hard 2/12 >= 1/6
    s.end_step()
    assert (s.p_easy, s.p_hard) == (0.5 - 0.01 + 0.01, 0.5 + 0.01 - 0.01)


def test_adaptation_counts_every_pass_of_the_step_and_empty_step_keeps_p():
    s = GresoSelector(8, delta_p=0.05, target_zero_variance=0.3, adapt_from_epoch=0)  # easy 0.1, hard 0.2
    s.begin_step(0)
    s.observe([0, 1, 2, 3, 4], groups("m", "m", "m", "m", "m"))
    s.observe([5], groups("e"))  # over the step: easy 1/6 >= 0.1, hard 0 < 0.2
    s.end_step()
    assert (s.p_easy, s.p_hard) == (0.45, 0.55)
    s.begin_step(1)
    metrics = s.end_step()
    assert (s.p_easy, s.p_hard) == (0.45, 0.55)
    assert metrics["selection/greso/p_easy"] == 0.45 and metrics["selection/kept"] == 0


def test_clamps_at_p_min_and_p_max():
    s = GresoSelector(4, p_easy=0.06, p_hard=0.94, delta_p=0.05, p_min=0.05, p_max=0.95, adapt_from_epoch=0)
    for step in range(3):
        s.begin_step(step)
        s.observe([0, 1, 2, 3], groups("e", "e", "m", "m"))  # always above the easy target, no hard
        s.end_step()
        assert (s.p_easy, s.p_hard) == (0.05, 0.95)


def test_skipped_prompts_record_nothing_and_are_counted_by_kind():
    s = GresoSelector(4)
    s.observe([0, 1, 2], groups("e", "h", "m"))
    before = s.streak.copy()
    s.begin_step(1)
    s.record_skipped([0, 1, 2, 0])
    np.testing.assert_array_equal(s.streak, before)
    metrics = s.end_step()
    assert (metrics["selection/skipped_easy"], metrics["selection/skipped_hard"]) == (2, 1)


def reference_greso(scripted_steps, p_easy, p_hard, delta_p, target, p_min, p_max, probe_ids):
    """The GRESO rules (docs/design.md, "GRESO") written the way the authors' code keeps them: a dict of outcome lists per prompt."""
    history: dict[int, list[str]] = {}
    trajectory, keep_probs = [], []
    for step in scripted_steps:
        n = easy = hard = 0
        for prompt_ids, correct in step:
            for prompt, row in zip(prompt_ids, correct):
                kind = "easy" if row.all() else "hard" if not row.any() else "mixed"
                history.setdefault(int(prompt), []).append(kind)
                n, easy, hard = n + 1, easy + (kind == "easy"), hard + (kind == "hard")
        if n:
            p_easy = min(max(p_easy - delta_p if easy / n >= target / 3 else p_easy + delta_p, p_min), p_max)
            p_hard = min(max(p_hard - delta_p if hard / n >= 2 * target / 3 else p_hard + delta_p, p_min), p_max)
        trajectory.append((p_easy, p_hard))
        probs = []
        for prompt in probe_ids:
            outcomes = history.get(int(prompt), [])
            last = outcomes[-1] if outcomes else "mixed"
            streak = 0
            for kind in reversed(outcomes):
                if kind != last:
                    break
                streak += 1
            p = {"easy": p_easy, "hard": p_hard}.get(last)
            probs.append(1.0 if p is None else max(p ** streak, 0.01))
        keep_probs.append(probs)
    return trajectory, keep_probs


def test_scripted_sequence_matches_reference_rules():
    rng = np.random.default_rng(5)
    num_prompts, settings = 40, dict(p_easy=0.5, p_hard=0.5, delta_p=0.02, target=0.4, p_min=0.1, p_max=0.9)
    success = rng.choice([0.0, 0.05, 0.5, 0.95, 1.0], size=num_prompts)
    scripted = []
    for step in range(60):
        passes = []
        for _ in range(rng.integers(0, 3)):  # 0 passes: a step that rolled out nothing
            ids = rng.choice(num_prompts, size=rng.integers(1, 12), replace=False)
            passes.append((ids, rng.random((ids.size, 4)) < success[ids, None]))
        scripted.append(passes)
    probe = np.arange(num_prompts)
    expected_traj, expected_keep = reference_greso(scripted, probe_ids=probe, **settings)
    s = GresoSelector(num_prompts, p_easy=0.5, p_hard=0.5, delta_p=0.02, target_zero_variance=0.4, p_min=0.1,
                      p_max=0.9, adapt_from_epoch=0)
    hit_floor = False
    for step, passes in enumerate(scripted):
        s.begin_step(step)
        for ids, correct in passes:
            s.observe(ids, correct)
        s.end_step()
        assert (s.p_easy, s.p_hard) == pytest.approx(expected_traj[step], abs=1e-12), f"step {step}"
        np.testing.assert_allclose(s.keep_probabilities(probe), expected_keep[step], rtol=1e-9)
        hit_floor |= bool(np.any(s.keep_probabilities(probe) == 0.01))
    moved = {round(p, 6) for traj in expected_traj for p in traj}
    assert len(moved) > 5 and hit_floor  # the script exercises adaptation and the floor


def run_steps(selector, steps, success, rng_seed=3):
    """Drives a selector through steps of keep decisions + observations; returns the decisions made."""
    decisions = []
    for step in steps:
        selector.begin_step(step)
        candidates = np.random.default_rng([rng_seed, step]).permutation(success.size)[:50]
        keep = selector.should_keep(candidates)
        decisions.append(keep.copy())
        ids = candidates[keep]
        outcome_rng = np.random.default_rng([rng_seed, step, 1])
        selector.observe(ids, outcome_rng.random((ids.size, 4)) < success[ids, None])
        selector.end_step()
    return decisions


def test_same_seed_same_decisions_and_independent_of_batch_order():
    success = np.random.default_rng(0).choice([0.0, 0.5, 1.0], size=200)
    a, b, c = GresoSelector(200, seed=7), GresoSelector(200, seed=7), GresoSelector(200, seed=8)
    da, db, dc = run_steps(a, range(20), success), run_steps(b, range(20), success), run_steps(c, range(20), success)
    assert all(np.array_equal(x, y) for x, y in zip(da, db))
    assert not all(np.array_equal(x, y) for x, y in zip(da, dc))
    ids = np.arange(200)
    keep = a.should_keep(ids)
    order = np.random.default_rng(1).permutation(200)
    np.testing.assert_array_equal(a.should_keep(ids[order]), keep[order])
    assert 0 < keep.sum() < 200  # the history built up skips some, not all


def test_state_saved_mid_run_continues_identically():
    success = np.random.default_rng(0).choice([0.0, 0.02, 0.5, 0.98, 1.0], size=300)
    original = GresoSelector(300, seed=3, delta_p=0.03)
    run_steps(original, range(15), success)
    state = {k: np.asarray(v) for k, v in original.state_dict().items()}  # as orbax hands it back
    restored = GresoSelector(300, seed=3, delta_p=0.03)
    restored.load_state_dict(state)
    after_original = run_steps(original, range(15, 30), success)
    after_restored = run_steps(restored, range(15, 30), success)
    assert all(np.array_equal(x, y) for x, y in zip(after_original, after_restored))
    assert (original.p_easy, original.p_hard) == (restored.p_easy, restored.p_hard)
    np.testing.assert_array_equal(original.streak, restored.streak)


def test_state_dict_is_small_and_checked_on_load():
    s = GresoSelector(1000)
    state = s.state_dict()
    assert sum(np.asarray(v).nbytes for v in state.values()) <= 16 * 1000 + 1024
    with pytest.raises(ValueError, match="num_prompts"):
        GresoSelector(999).load_state_dict(state)
    bad = dict(state)
    del bad["streak"]
    with pytest.raises(ValueError, match="missing"):
        GresoSelector(1000).load_state_dict(bad)


def test_bad_input_names_the_problem():
    s = GresoSelector(10)
    with pytest.raises(ValueError, match="prompt id 10"):
        s.keep_probabilities([3, 10])
    with pytest.raises(ValueError, match=r"correct must be \[N=2"):
        s.observe([1, 2], np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match="bool"):
        s.observe([1, 2], np.ones((2, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="selection.greso.p_easy"):
        GresoSelector(10, p_easy=0.99)
    with pytest.raises(ValueError, match="selection.greso.p_min"):
        GresoSelector(10, p_min=0.6, p_max=0.4)


def test_keep_probabilities_for_a_million_ids_match_the_formula():
    """The streak lookup table equals max(p ** z, 0.01) computed directly, at 10^6 ids (its speed is a
    benchmark's concern, not a test's)."""
    n = 10 ** 6
    s = GresoSelector(n, p_easy=0.7, p_hard=0.4)
    rng = np.random.default_rng(0)
    s.streak[:] = rng.integers(-30, 30, n) * (rng.random(n) < 0.5)
    ids = rng.permutation(n)
    streak = s.streak[ids].astype(np.float64)
    expected = np.where(streak > 0, np.maximum(0.7 ** streak, 0.01),
                        np.where(streak < 0, np.maximum(0.4 ** -streak, 0.01), 1.0))
    np.testing.assert_allclose(s.keep_probabilities(ids), expected, rtol=1e-12)


def test_p_holds_through_epoch_zero_then_moves_by_delta_p_and_resumes_exactly():
    """A scripted 3-epoch stream: p stays at its initial values while the stream is in epoch 0 (no prompt
    has a history yet), then moves by exactly delta_p per step; a selector restored from a mid-run state
    makes identical keep decisions and p moves from then on."""
    num_prompts, per_step, delta_p = 40, 10, 0.03
    success = np.random.default_rng(5).choice([0.0, 0.3, 1.0], size=num_prompts)

    def run(selector, steps, trace):
        for step in steps:
            epoch = (step * per_step) // num_prompts
            order = np.random.default_rng([9, epoch]).permutation(num_prompts)
            start = (step * per_step) % num_prompts
            candidates = order[start:start + per_step]
            selector.begin_step(step, epoch=epoch)
            keep = selector.should_keep(candidates, np.full(candidates.size, epoch))
            ids = candidates[keep]
            outcomes = np.random.default_rng([9, step]).random((ids.size, 4)) < success[ids, None]
            before = (selector.p_easy, selector.p_hard)
            selector.observe(ids, outcomes)
            selector.end_step()
            trace.append((epoch, ids.size, before, (selector.p_easy, selector.p_hard), keep.tolist()))

    full = GresoSelector(num_prompts, delta_p=delta_p, seed=2)
    trace = []
    run(full, range(12), trace)  # 12 steps x 10 prompts = 3 epochs of 40
    for epoch, rolled_out, before, after, _ in trace:
        if epoch == 0:
            assert before == after == (0.5, 0.5)
        elif rolled_out:
            assert all(abs(abs(a - b) - delta_p) < 1e-12 for a, b in zip(after, before))
        else:  # a step that rolled out nothing (every candidate skipped) leaves p unchanged
            assert after == before
    assert sum(epoch > 0 and rolled_out > 0 for epoch, rolled_out, *_ in trace) >= 6
    resumed = GresoSelector(num_prompts, delta_p=delta_p, seed=2)
    partial = []
    run(resumed, range(5), partial)
    state = resumed.state_dict()
    restored = GresoSelector(num_prompts, delta_p=delta_p, seed=2)
    restored.load_state_dict(state)
    run(restored, range(5, 12), partial)
    assert partial == trace


def test_a_prompt_met_in_two_epochs_of_one_step_gets_a_decision_per_occurrence():
    s = GresoSelector(5000, p_easy=0.5, p_hard=0.5, seed=1)
    s.streak[:] = 1  # keep probability 0.5 for every prompt
    s.begin_step(7, epoch=3)
    ids = np.arange(5000)
    first, second = s.should_keep(ids, np.full(5000, 3)), s.should_keep(ids, np.full(5000, 4))
    assert 0.45 < first.mean() < 0.55 and 0.45 < second.mean() < 0.55
    assert 0.45 < np.mean(first != second) < 0.55  # independent draws disagree half of the time
    np.testing.assert_array_equal(first, s.should_keep(ids))  # default: the step's epoch


def test_patience_keeps_short_streaks_and_counts_the_exponent_from_the_patience():
    """easy_patience 3: streaks of 1 and 2 all-correct rollouts keep the prompt, the third is kept w.p.
    p_easy, the fourth p_easy ** 2; hard streaks keep the paper's rule (hard_patience 1)."""
    selector = GresoSelector(6, p_easy=0.5, p_hard=0.4, easy_patience=3, seed=0)
    selector.streak[:] = [0, 1, 2, 3, 4, -2]
    np.testing.assert_allclose(selector.keep_probabilities(np.arange(6)), [1, 1, 1, 0.5, 0.25, 0.16])
    paper = GresoSelector(6, p_easy=0.5, p_hard=0.4, seed=0)
    paper.streak[:] = selector.streak
    np.testing.assert_allclose(paper.keep_probabilities(np.arange(6)), [1, 0.5, 0.25, 0.125, 0.0625, 0.16])
    # The prediction ranks as the rule skips: streaks short of the patience score as a mixed prompt.
    np.testing.assert_array_equal(selector.predicted_zero_variance(np.arange(6)), [0, 0, 0, 1, 2, 2])
    np.testing.assert_array_equal(paper.predicted_zero_variance(np.arange(6)), [0, 1, 2, 3, 4, 2])
    with pytest.raises(Exception, match="easy_patience"):
        GresoSelector(6, easy_patience=0)


def _step_with_batch(selector, step, kinds, train_batch_size):
    """One step whose groups are `kinds` ('e', 'h', 'm'), closed as the drivers close it: finish_step, end_step."""
    from greso_jax.selection.groups import Group

    correct = groups(*kinds)
    selector.begin_step(step, epoch=1)
    selector.observe(np.arange(len(kinds)), correct)
    batch = selector.finish_step([Group.from_call(0, row, row, None, c, c.astype(np.float32))
                                  for row, c in enumerate(correct)], train_batch_size)
    selector.end_step()
    return batch


def test_explore_when_short_eases_skipping_after_a_short_batch_only():
    """A step over the easy and hard targets moves p down under the paper's rule; with explore_when_short
    a step whose batch came out short moves both up instead, and a full batch follows the paper's rule."""
    kinds = "eehhm"  # easy 2/5 >= 1/12, hard 2/5 >= 1/6: the targets say skip more
    paper, fill = GresoSelector(8, delta_p=0.05), GresoSelector(8, delta_p=0.05, explore_when_short=True)
    for selector in (paper, fill):
        assert len(_step_with_batch(selector, 0, kinds, train_batch_size=2)) == 1  # one mixed group of 2 asked
    assert (paper.p_easy, paper.p_hard) == pytest.approx((0.45, 0.45))
    assert (fill.p_easy, fill.p_hard) == pytest.approx((0.55, 0.55))
    assert len(_step_with_batch(fill, 1, kinds, train_batch_size=1)) == 1  # full: the paper's rule again
    assert (fill.p_easy, fill.p_hard) == pytest.approx((0.50, 0.50))
    early = GresoSelector(8, delta_p=0.05, explore_when_short=True, adapt_from_epoch=2)
    _step_with_batch(early, 0, kinds, train_batch_size=2)  # epoch 1 < adapt_from_epoch: no adaptation at all
    assert (early.p_easy, early.p_hard) == (0.5, 0.5)


def test_skip_easy_or_hard_off_keeps_that_side_for_sure():
    """skip_easy False keeps every all-correct streak (probability 1) and leaves the hard side to the
    paper's rule; skip_hard False the reverse; both False is refused, naming the fields."""
    streaks = [0, 1, 3, -1, -3]
    paper = GresoSelector(5, p_easy=0.5, p_hard=0.4, seed=0)
    hard_only = GresoSelector(5, p_easy=0.5, p_hard=0.4, skip_easy=False, seed=0)
    easy_only = GresoSelector(5, p_easy=0.5, p_hard=0.4, skip_hard=False, seed=0)
    for selector in (paper, hard_only, easy_only):
        selector.streak[:] = streaks
    np.testing.assert_allclose(paper.keep_probabilities(np.arange(5)), [1, 0.5, 0.125, 0.4, 0.064])
    np.testing.assert_allclose(hard_only.keep_probabilities(np.arange(5)), [1, 1, 1, 0.4, 0.064])
    np.testing.assert_allclose(easy_only.keep_probabilities(np.arange(5)), [1, 0.5, 0.125, 1, 1])
    # A side that does not skip predicts nothing there: its streaks score as a mixed prompt's.
    np.testing.assert_array_equal(hard_only.predicted_zero_variance(np.arange(5)), [0, 0, 0, 1, 3])
    np.testing.assert_array_equal(easy_only.predicted_zero_variance(np.arange(5)), [0, 1, 3, 0, 0])
    kept = hard_only.should_keep(np.repeat(np.arange(5), 200), epochs=np.arange(1000) // 5)
    assert kept.reshape(5, 200)[:3].all() and kept.reshape(5, 200)[4].mean() < 0.3
    with pytest.raises(Exception, match="skip_easy / .*skip_hard"):
        GresoSelector(5, skip_easy=False, skip_hard=False)


def test_rest_steps_skips_a_prompt_until_its_rest_is_over_and_resumes_exactly():
    """rest_steps 3: a prompt rolled out at step 4 keeps probability 0 through step 6 (a mixed one as much
    as a streak), and its own rule again from step 7; never-rolled prompts are not resting. The rest is
    part of the state (only then: the paper's rule keeps its checkpoint keys)."""
    rested = GresoSelector(4, p_easy=0.5, p_hard=0.4, rest_steps=3, seed=0)
    rested.begin_step(4, epoch=1)
    rested.observe([0, 1], groups("m", "h"))
    for step, expected in ((4, [0, 0, 1, 1]), (6, [0, 0, 1, 1]), (7, [1, 0.4, 1, 1])):
        rested.begin_step(step, epoch=1)
        np.testing.assert_allclose(rested.keep_probabilities(np.arange(4)), expected)
    rested.begin_step(5, epoch=1)
    assert not rested.should_keep(np.zeros(500, np.int64), epochs=np.arange(500)).any()
    state = {k: np.asarray(v) for k, v in rested.state_dict().items()}
    restored = GresoSelector(4, p_easy=0.5, p_hard=0.4, rest_steps=3, seed=0)
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.last_rollout_step, [4, 4, -1, -1])
    assert "last_rollout_step" not in GresoSelector(4).state_dict()
    with pytest.raises(ValueError, match="missing.*last_rollout_step"):
        restored.load_state_dict(GresoSelector(4, p_easy=0.5, p_hard=0.4, seed=0).state_dict())
    with pytest.raises(Exception, match="rest_steps"):
        GresoSelector(4, rest_steps=-1)


def test_revisit_steps_keeps_a_streak_once_it_is_revisit_steps_times_its_length_old():
    """revisit_steps 10: a hard streak of 1 seen at step 0 is kept for sure from step 10, an easy streak of 2
    from step 20 (a longer streak waits longer); a mixed prompt and an unseen one keep their probability 1,
    and a rest still wins right after a rollout."""
    selector = GresoSelector(4, p_easy=0.5, p_hard=0.4, revisit_steps=10, rest_steps=2, seed=0)
    selector.begin_step(0, epoch=1)
    selector.observe([0, 1, 2], groups("h", "e", "m"))
    selector.begin_step(1, epoch=1)
    selector.observe([1], groups("e"))  # prompt 1: easy streak of 2, last rolled out at step 1
    for step, expected in ((2, [0.4, 0, 1, 1]), (9, [0.4, 0.25, 1, 1]), (10, [1, 0.25, 1, 1]),
                           (20, [1, 0.25, 1, 1]), (21, [1, 1, 1, 1])):
        selector.begin_step(step, epoch=1)
        np.testing.assert_allclose(selector.keep_probabilities(np.arange(4)), expected, err_msg=f"step {step}")
    selector.observe([0], groups("h"))  # rolled out again at step 21: a streak of 2, resting, then waiting 20
    for step, expected in ((22, 0.0), (23, 0.16), (40, 0.16), (41, 1.0)):
        selector.begin_step(step, epoch=1)
        assert selector.keep_probabilities([0])[0] == pytest.approx(expected), step


def test_measured_floor_keeps_streaks_at_their_level_and_sides_recent_mixed_rate():
    """measured_floor: a streak prompt is kept at least at its (level, side) cell's decayed rate of mixed groups
    among rolled-out streak prompts, with one group of prior at 0.01; the rates hold for a whole step, decay by
    floor_memory at its end, and travel in the state (only then: the paper's rule keeps its checkpoint keys)."""
    settings = dict(p_easy=0.05, p_hard=0.05, delta_p=0.0, measured_floor=True, floor_memory=0.5, seed=0)
    levels = np.array([0, 0, 0, 1, 1, -1])
    selector = GresoSelector(6, prompt_levels=levels, **settings)
    selector.begin_step(0, epoch=1)
    selector.observe(np.arange(6), groups("h", "h", "h", "e", "e", "h"))  # no streak before: nothing counted
    selector.end_step()
    selector.begin_step(1, epoch=1)
    np.testing.assert_allclose(selector.keep_probabilities(np.arange(6)), [0.05] * 6)
    selector.observe([0, 1, 3], groups("m", "h", "e"))  # level 0 hard: 1 mixed of 2; level 1 easy: 0 of 1
    np.testing.assert_allclose(selector.keep_probabilities([2, 4]), [0.05, 0.05])  # fixed within the step
    selector.end_step()  # counts halve: level 0 hard 0.5 mixed of 1 group, level 1 easy 0 of 0.5
    selector.begin_step(2, epoch=1)
    hard_floor = (0.5 + 0.01) / (1 + 1)
    np.testing.assert_allclose(selector.keep_probabilities(np.arange(6)),
                               # mixed now; hard z=2 and z=1 at level 0; easy z=2 (cell floor under 0.01)
                               # and z=1 at level 1; the level-less prompt's cell has no evidence
                               [1.0, hard_floor, hard_floor, 0.01, 0.05, 0.05])
    restored = GresoSelector(6, prompt_levels=levels, **settings)
    restored.load_state_dict({k: np.asarray(v) for k, v in selector.state_dict().items()})
    restored.begin_step(2, epoch=1)
    np.testing.assert_allclose(restored.keep_probabilities(np.arange(6)), selector.keep_probabilities(np.arange(6)))
    assert "flip_counts" not in GresoSelector(6).state_dict()
    with pytest.raises(ValueError, match="missing.*flip_counts"):
        restored.load_state_dict(GresoSelector(6, p_easy=0.05, p_hard=0.05, delta_p=0.0, seed=0).state_dict())
    state = selector.state_dict()
    state["flip_counts"] = state["flip_counts"][..., ::-1]  # more mixed groups than groups
    with pytest.raises(ValueError, match="flip_counts"):
        restored.load_state_dict(state)
    with pytest.raises(Exception, match="floor_memory"):
        GresoSelector(6, measured_floor=True, floor_memory=0.0)
    with pytest.raises(ValueError, match="greso: prompt_levels"):
        GresoSelector(6, prompt_levels=np.zeros(5, np.int64), measured_floor=True)


def test_measured_floor_without_levels_is_one_rate_per_side():
    selector = GresoSelector(4, p_easy=0.05, p_hard=0.05, delta_p=0.0, measured_floor=True, floor_memory=1.0, seed=0)
    selector.begin_step(0, epoch=1)
    selector.observe(np.arange(4), groups("h", "h", "e", "e"))
    selector.end_step()
    selector.begin_step(1, epoch=1)
    selector.observe(np.arange(4), groups("m", "h", "m", "m"))  # hard: 1 of 2 mixed; easy: 2 of 2
    selector.end_step()
    selector.begin_step(2, epoch=1)
    assert selector.flip_counts.shape == (1, 2, 2)
    np.testing.assert_allclose(selector.floors, [[(2 + 0.01) / 3, (1 + 0.01) / 3]])
    np.testing.assert_allclose(selector.keep_probabilities([1]), [(1 + 0.01) / 3])  # hard z=2
