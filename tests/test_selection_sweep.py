"""The simulator's one-knob sweep (experiments/bench/selection_sweep.py): its rows and its errors."""

import pytest

from experiments.bench import selection_sweep as sweeper
from greso_jax.selection import sim


def test_each_value_is_one_run_beside_ds_the_chosen_runs_and_the_oracle():
    settings = sim.SimSettings(num_prompts=400, steps=12, train_batch_size=16, rollout_batch_size=24,
                               min_pass_size=8, max_passes=6)
    rows = sweeper.sweep(settings, None, "posterior", "target_zero_variance", [0.3, 0.05], {"step_decay": 0.99},
                         levels=True, beside=("greso",))
    assert [r["name"] for r in rows] == ["dynamic_sampling", "greso", "oracle", "posterior target_zero_variance=0.3",
                                         "posterior target_zero_variance=0.05"]
    by_name = {r["name"]: r for r in rows}
    assert by_name["dynamic_sampling"]["efficiency"] == 0 and by_name["oracle"]["efficiency"] == 1
    direct = sim.run_strategy("posterior", settings, None, True, step_decay=0.99, target_zero_variance=0.05)
    assert by_name["posterior target_zero_variance=0.05"]["responses"] == direct["responses"]


@pytest.mark.parametrize("argv, message", [
    (["--sweep", "posterior:target_zero_variance"], "--sweep: expected STRATEGY:FIELD=V1"),
    (["--sweep", "posterior:target_zero_variance=low"], "--sweep: expected"),
    (["--sweep", "nosuch:x=1"], "--sweep: unknown strategy 'nosuch'"),
    (["--sweep", "posterior:decay=0.5", "--set", "greso:delta_p=0.1"], "--set: one value of a field of the swept"),
    (["--sweep", "posterior:decay=0.5", "--beside", "nosuch"], "--beside: unknown"),
])
def test_bad_settings_are_named(argv, message):
    with pytest.raises(SystemExit, match=message):
        sweeper.main(argv)
