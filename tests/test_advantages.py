"""compute_advantages against a per-group loop written independently of the vectorised code."""

import jax.numpy as jnp
import numpy as np
import pytest

from greso_jax.rl.advantages import compute_advantages


def reference(rewards, mode, mask, baseline, scale, eps=1e-6):
    n, _ = rewards.shape
    out = np.zeros_like(rewards, dtype=np.float64)
    kept_all = rewards[mask].astype(np.float64)
    batch_std = np.std(kept_all, ddof=1) if kept_all.size > 1 else 0.0
    for i in range(n):
        kept = rewards[i][mask[i]].astype(np.float64)
        if kept.size == 0:
            continue
        mean = kept.mean() if np.isnan(baseline[i]) else baseline[i]
        if np.isnan(baseline[i]) and kept.max() == kept.min():
            continue  # no variance and no baseline: exactly 0
        if mode == "grpo" and not np.isnan(scale[i]):  # the scale replaces the group std, only in grpo
            div = scale[i] + eps
        elif mode == "grpo":
            div = (np.std(kept, ddof=1) if kept.size > 1 else 0.0) + eps
        elif mode == "batch_std":
            div = batch_std + eps
        else:
            div = 1.0
        for j in range(rewards.shape[1]):
            if mask[i, j]:
                out[i, j] = (rewards[i, j] - mean) / div
    return out


@pytest.mark.parametrize("mode", ["grpo", "drgrpo", "batch_std"])
@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_matches_reference_with_masks_and_overrides(mode, backend):
    rng = np.random.default_rng(3)
    n, g = 7, 6
    rewards = rng.integers(0, 2, (n, g)).astype(np.float32)
    rewards[1] = 1.0  # zero-variance group
    rewards[2] = rng.normal(size=g)
    mask = rng.random((n, g)) > 0.2
    mask[3] = False  # empty group
    mask[4] = [True] + [False] * (g - 1)  # lone response
    baseline = np.full(n, np.nan, np.float32)
    scale = np.full(n, np.nan, np.float32)
    baseline[1], scale[1] = 0.7, np.sqrt(0.7 * 0.3)  # AERO posterior on the all-correct group
    baseline[5] = 0.25
    scale[6] = 2.0
    args = (rewards, mask, baseline, scale) if backend == "numpy" else tuple(map(jnp.asarray, (rewards, mask,
                                                                                                baseline, scale)))
    got = compute_advantages(args[0], mode, response_mask=args[1], baseline=args[2], scale=args[3])
    assert isinstance(got, np.ndarray) == (backend == "numpy")
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), reference(rewards, mode, mask, baseline, scale), rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(got)[~mask] == 0)


def test_grpo_known_values_and_zero_variance():
    got = compute_advantages(np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]), "grpo")
    std = np.std([1, 0, 0, 1], ddof=1)
    np.testing.assert_allclose(got[0], np.array([0.5, -0.5, -0.5, 0.5]) / (std + 1e-6), rtol=1e-6)
    assert np.all(got[1] == 0.0)
    np.testing.assert_allclose(compute_advantages(np.array([[1.0, 0.0, 0.0, 0.0]]), "drgrpo"),
                               [[0.75, -0.25, -0.25, -0.25]])


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="mode 'ppo'"):
        compute_advantages(np.zeros((2, 3)), "ppo")
    with pytest.raises(ValueError, match=r"rewards must be \[N, G\]"):
        compute_advantages(np.zeros(3), "grpo")
    with pytest.raises(ValueError, match="response_mask shape"):
        compute_advantages(np.zeros((2, 3)), "grpo", response_mask=np.ones((2, 2), bool))
    with pytest.raises(ValueError, match="baseline must have shape"):
        compute_advantages(np.zeros((2, 3)), "grpo", baseline=np.zeros(3))


def test_constant_groups_get_exactly_zero_even_when_the_float32_mean_is_one_ulp_off():
    """All-0.1 groups (the format reward) of 7-16 responses: float32 mean and std come out an ulp off
    and (r - mean) / (std + 1e-6) used to give ±0.0074; partly masked groups alike."""
    for g in range(2, 17):
        rewards = np.full((1, g), 0.1, np.float32)
        for mode in ("grpo", "drgrpo", "batch_std"):
            assert np.all(compute_advantages(rewards, mode) == 0.0), (mode, g)
            if g in (7, 11, 16):  # the jax path compiles per shape: a few of the ulp-off sizes
                assert np.all(np.asarray(compute_advantages(jnp.asarray(rewards), mode)) == 0.0), (mode, g)
        mask = np.arange(g)[None] < max(1, g - 3)
        padded = np.where(mask, rewards, 1.0).astype(np.float32)
        assert np.all(compute_advantages(padded, "grpo", response_mask=mask) == 0.0)


def test_posterior_scale_applies_only_where_the_estimator_divides_by_the_group_std():
    rewards = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]], np.float32)
    baseline, scale = np.array([0.75, np.nan], np.float32), np.array([0.25, np.nan], np.float32)
    grpo = compute_advantages(rewards, "grpo", baseline=baseline, scale=scale)
    np.testing.assert_allclose(grpo[0], (1.0 - 0.75) / (0.25 + 1e-6), rtol=1e-6)
    drgrpo = compute_advantages(rewards, "drgrpo", baseline=baseline, scale=scale)
    np.testing.assert_allclose(drgrpo[0], 0.25, rtol=1e-6)  # one rule for every group: no division
    np.testing.assert_allclose(drgrpo[1], [0.5, -0.5, 0.5, -0.5], rtol=1e-6)
