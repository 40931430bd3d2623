"""The level profile's estimates (experiments/bench/level_profile.py): unbiased zero-variance and repeat chances."""

import collections
import os
import subprocess
import sys

import numpy as np
import pytest

import trainer_config
from experiments.bench import level_profile as profile
from greso_jax.run.build import rows_from_config
from greso_jax.run.trainer import Trainer


def test_estimates_match_the_true_chances_of_known_success_rates():
    rng = np.random.default_rng(0)
    p = np.repeat([0.97, 0.5, 0.03, 0.0], 2000)  # per prompt
    correct = rng.random((p.size, 32)) < p[:, None]
    o = profile.level_outcomes(correct, group_size=8)
    right, wrong = p ** 8, (1 - p) ** 8
    assert o["all_correct"] == pytest.approx(right.mean(), abs=0.01)
    assert o["all_wrong"] == pytest.approx(wrong.mean(), abs=0.01)
    assert o["mixed"] == pytest.approx(1 - right.mean() - wrong.mean(), abs=0.01)
    # Plugging the observed rate in would overstate repeats; the estimate of p^16 does not.
    assert o["repeat_correct"] == pytest.approx((p ** 16).mean() / right.mean(), abs=0.02)
    assert o["repeat_wrong"] == pytest.approx(((1 - p) ** 16).mean() / wrong.mean(), abs=0.02)


def test_certain_outcomes_and_too_few_samples():
    o = profile.level_outcomes(np.ones((5, 16), bool), group_size=8)
    assert (o["all_correct"], o["all_wrong"], o["repeat_correct"]) == (1.0, 0.0, 1.0)
    assert np.isnan(o["repeat_wrong"])
    with pytest.raises(ValueError, match="--samples: need at least 2 x group size = 16, got 12"):
        profile.level_outcomes(np.ones((5, 12), bool), group_size=8)


def profiled_prompts(stdout: str) -> dict[int, int]:
    """{level: prompts profiled} from the script's table."""
    rows = [line.split() for line in stdout.splitlines()]
    return {int(row[0]): int(row[2]) for row in rows if row and row[0].isdigit()}


@pytest.mark.slow  # a two-step RL run, then the script in a subprocess on its checkpoint
def test_run_dir_profiles_a_checkpointed_step_and_names_a_missing_one(tmp_path, warm_policy):
    config = trainer_config.get_config(f"vanilla,{warm_policy}")
    config.train.num_steps = 2
    Trainer(config, str(tmp_path / "run"), log=lambda *a: None).run()
    root = os.path.join(os.path.dirname(__file__), "..")
    script = os.path.join(root, "experiments", "bench", "level_profile.py")
    args = [sys.executable, script, f"--config={os.path.join(root, 'tests', 'trainer_config.py')}:vanilla,{warm_policy}",
            f"--run_dir={tmp_path / 'run'}", "--per_level=4", "--samples=8", "--config.rl.group_size=4"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)  # no --step: the latest, 2
    assert done.returncode == 0, done.stderr[-2000:]
    levels = sorted(profiled_prompts(done.stdout))
    assert levels and set(levels) <= set(range(8))
    heldout = subprocess.run(args + ["--step=2", "--heldout"], capture_output=True, text=True, timeout=300)
    assert heldout.returncode == 0, heldout.stderr[-2000:]
    pool = rows_from_config(config)[1]["synthetic"]
    expected = {level: min(4, n) for level, n in collections.Counter(row.difficulty for row in pool).items()}
    assert profiled_prompts(heldout.stdout) == expected  # the held-out pool's rows, not the training prompts'
    missing = subprocess.run(args + ["--step=7"], capture_output=True, text=True, timeout=300)
    assert missing.returncode != 0 and "7" in missing.stderr.splitlines()[-1]
