"""A seconds-scale trainer config for tests (tiny-test model, tiny arithmetic pool)."""

from greso_jax.config import get_config as base_config


def get_config(strategy: str = "greso"):
    """`strategy` may carry a warm-started policy folder after a comma: "greso,/path/to/policy"
    (the folder comes from the `warm_policy` fixture; without it the policy is untrained)."""
    strategy, _, policy_path = (strategy or "greso").partition(",")
    c = base_config()
    c.seed = 3
    c.model.preset = "tiny-test"
    c.data.source = "arith"
    c.data.max_prompt_length = 16
    c.data.arith_num_train = 24
    c.data.arith_num_heldout = 8
    c.sampling.max_new_tokens = 6
    c.sampling.prompt_length_buckets = (16,)
    c.rl.group_size = 4
    c.rl.mini_batch_size = 4
    c.rl.micro_batch_size = 8
    c.train.num_steps = 3
    c.train.train_batch_size = 4
    c.train.warmstart_steps = 0
    c.train.quiet = True
    c.model.path = policy_path
    c.selection.strategy = strategy or "greso"
    c.selection.rollout_batch_size = 6
    c.selection.min_pass_size = 2
    c.selection.max_passes = 3
    c.selection.aero.n_explore = 2
    c.selection.aero.n_extra = 2
    c.selection.aero.max_group_size = 4
    c.checkpoint.every_steps = 1
    c.checkpoint.async_save = False
    c.eval.every_steps = 0
    c.eval.num_samples = 2
    return c
