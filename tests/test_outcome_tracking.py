"""Every strategy tracks each prompt's last outcome and counts zero-variance repeats (temporal consistency)."""

import numpy as np
import pytest

from greso_jax.selection import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED, OUTCOME_NONE, make_selector,
                                 training_strategies)


def _step(selector, step, ids, num_correct, group_size=4):
    selector.begin_step(step)
    selector.observe_counts(np.asarray(ids), np.asarray(num_correct), np.full(len(ids), group_size))
    return selector.end_step()


@pytest.mark.parametrize("strategy", ["vanilla", "dynamic_sampling", "greso", "aero"])
def test_repeats_are_counted_against_the_previous_rollout(strategy):
    selector = make_selector(strategy, num_prompts=6, group_size=4, seed=0)
    first = _step(selector, 1, [0, 1, 2, 3, 4], [4, 4, 0, 0, 2])  # nothing seen before: no revisits
    assert [first[f"zero_variance/{k}"] for k in ("revisited_easy", "repeated_easy", "revisited_hard",
                                                  "repeated_hard")] == [0, 0, 0, 0]
    np.testing.assert_array_equal(selector.last_outcomes([0, 2, 4, 5]),
                                  [OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED, OUTCOME_NONE])
    # 0 stays easy, 1 turns mixed, 2 stays hard, 3 turns easy (not a hard repeat), 4 was mixed: not counted.
    second = _step(selector, 2, [0, 1, 2, 3, 4], [4, 3, 0, 4, 0])
    assert second["zero_variance/revisited_easy"] == 2 and second["zero_variance/repeated_easy"] == 1
    assert second["zero_variance/revisited_hard"] == 2 and second["zero_variance/repeated_hard"] == 1


def test_a_prompt_twice_in_one_call_is_compared_with_its_own_earlier_group():
    selector = make_selector("vanilla", num_prompts=3, group_size=4, seed=0)
    metrics = _step(selector, 1, [1, 1, 1], [0, 0, 2])
    assert metrics["zero_variance/revisited_hard"] == 2 and metrics["zero_variance/repeated_hard"] == 1
    assert selector.last_outcomes([1])[0] == OUTCOME_MIXED


def test_outcomes_survive_a_state_round_trip_and_bad_state_is_refused():
    selector = make_selector("greso", num_prompts=4, group_size=4, seed=0)
    _step(selector, 1, [0, 1], [4, 0])
    restored = make_selector("greso", num_prompts=4, group_size=4, seed=0)
    restored.load_state_dict(selector.state_dict())
    np.testing.assert_array_equal(restored.last_outcome, selector.last_outcome)
    state = selector.state_dict()
    state["last_outcome"] = np.zeros(3, np.int8)
    with pytest.raises(ValueError, match="last_outcome must be integer \\[4\\]"):
        restored.load_state_dict(state)


@pytest.mark.parametrize("strategy", training_strategies())
def test_every_per_prompt_state_array_is_checked_on_load(strategy):
    """Each strategy's per-prompt arrays (last outcome, history) refuse a wrong length, a non-integer
    array where integers are kept and, for counts, a negative value; the error names the field."""
    signed = {"last_outcome", "streak"}  # outcome codes and signed streaks: negatives are valid
    state = make_selector(strategy, num_prompts=4, group_size=4, seed=0).state_dict()
    arrays = [name for name, value in state.items() if np.ndim(value) == 1 and np.size(value) == 4]
    assert "last_outcome" in arrays
    for name in arrays:
        dtype = state[name].dtype
        bad_values = [np.zeros(3, dtype)]
        if np.issubdtype(dtype, np.integer):
            bad_values.append(np.full(4, 0.5))
        if name not in signed:
            bad_values.append(np.full(4, -1, dtype))
        for bad in bad_values:
            with pytest.raises(ValueError, match=f"{strategy}.load_state_dict: {name} must be"):
                make_selector(strategy, num_prompts=4, group_size=4, seed=0).load_state_dict(dict(state, **{name: bad}))
