"""config.replicate: replicates of one seed start from one policy, are evaluated with the same keys, and
differ only in what RL draws (data order, rollouts, selector); replicate 0 is the seed's own run."""

import numpy as np

from greso_jax.config import get_config, rl_seed
from greso_jax.run.records import read_group_trace, read_metrics
from greso_jax.run.trainer import Trainer

import trainer_config


def test_replicate_zero_is_the_seed_and_others_are_distinct_streams():
    config = get_config()
    seeds = {}
    for seed in (0, 1, 2):
        for replicate in (0, 1, 2):
            config.seed, config.replicate = seed, replicate
            seeds[seed, replicate] = rl_seed(config)
            assert rl_seed(config) == seeds[seed, replicate]  # a function of (seed, replicate) alone
            assert 0 <= seeds[seed, replicate] < 2 ** 31
    assert [seeds[s, 0] for s in (0, 1, 2)] == [0, 1, 2]
    assert len(set(seeds.values())) == len(seeds)


def test_a_config_saved_without_the_field_reads_as_replicate_zero():
    config = get_config()
    del config["replicate"]
    config.seed = 5
    assert rl_seed(config) == 5


def _run(workdir, warm_policy, replicate):
    config = trainer_config.get_config(f"dynamic_sampling,{warm_policy}")
    config.logging.group_trace = True
    config.eval.every_steps = 1
    config.train.num_steps = 2
    config.replicate = replicate
    Trainer(config, str(workdir), log=lambda *a: None).run()
    return read_metrics(str(workdir)), read_group_trace(str(workdir))


def test_replicates_share_the_start_and_evaluation_but_draw_their_own_rollouts(tmp_path, warm_policy):
    own, own_trace = _run(tmp_path / "r0", warm_policy, 0)
    other, other_trace = _run(tmp_path / "r1", warm_policy, 1)
    again, again_trace = _run(tmp_path / "r1_again", warm_policy, 1)
    # the same policy at step 0, sampled with the same evaluation keys
    assert own[0]["eval/accuracy"] == other[0]["eval/accuracy"]
    assert own[0]["eval/synthetic/pass@1"] == other[0]["eval/synthetic/pass@1"]
    # RL's draws differ: the prompts pulled (data order) and what their groups scored
    drawn = lambda trace: [(line["prompt_ids"], line["num_correct"]) for line in trace]  # noqa: E731
    assert drawn(own_trace) != drawn(other_trace)
    # and a replicate is reproducible from its config
    assert drawn(other_trace) == drawn(again_trace)
    losses = lambda records: [r.get("actor/loss") for r in records[1:]]  # noqa: E731
    np.testing.assert_array_equal(losses(other), losses(again))
