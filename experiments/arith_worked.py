"""The papers'-regime task: worked arithmetic chains, where rollout dominates a training step.

Each response writes one running total per operation before the answer (data/arith.py levels
8-12, chains of 4 to 10 two-digit operands, each written as wide as the totals), so responses run from a few to 36 tokens and their
length grows with the level, as a worked solution does with the problem. A slip anywhere in a
chain carries into the answer, so accuracy falls with chain length: short chains are mastered
(all-correct groups), the longest stay out of reach (all-wrong), the ones between are where RL
moves the policy, and the frontier between them shifts as it learns.

It is built towards the GRESO paper's regime (issue 37): rollout most of a step, most groups
zero-variance late in training and again at the next epoch, an epoch of tens of steps and a run
of many epochs. Not there yet: after its 3,000 supervised steps the tiny policy solves 4-10% of
every taught level (two-digit sums included), far from the partial competence RL needs, so no
strategy has been compared on it; the warm starts tried and the per-level profile are in
experiments/results/2026-12-02-worked-regime.md, with what caps the rollout share on a CPU.

Variants as in arith_tiny (comma-separated): any registered training strategy, and `quick`.
`experiments/bench/compare_strategies.py --config experiments/arith_worked.py` runs every strategy.
"""

from experiments import arith_tiny

# Level (data/arith.py LEVELS) → weight. 0 a+b, 1 a-b: short and mastered in the warm start;
# 8-12: chains of 4, 5, 6, 8 and 10 operands; 7 two-digit a*b, never taught: all-wrong and short.
WORKED_LEVEL_WEIGHTS = (0.05, 0.05, 0, 0, 0, 0, 0, 0.1, 0.15, 0.15, 0.15, 0.15, 0.2)
WORKED_TAUGHT_LEVELS = (0, 1, 8, 9, 10, 11, 12)

# The longest prompt (ten operands written in 3 digits) is 40 characters; its response 9 totals of
# 3 digits, 8 separators and EOS: 36 tokens.
MAX_PROMPT_LENGTH = 40
MAX_NEW_TOKENS = 36
WARMSTART_STEPS = 3000
WARMSTART_PROBLEMS = 20000


def get_config(variant: str = "greso"):
    c = arith_tiny.get_config(variant)
    options = [v.strip() for v in (variant or "greso").split(",") if v.strip()]
    c.data.arith_level_weights = WORKED_LEVEL_WEIGHTS
    c.data.max_prompt_length = MAX_PROMPT_LENGTH
    c.data.arith_num_train = 3000
    c.sampling.max_new_tokens = MAX_NEW_TOKENS
    c.sampling.prompt_length_buckets = (MAX_PROMPT_LENGTH,)
    # Responses run from 4 to 36 tokens: the update computes each row's own length, not the budget's.
    c.rl.update_layout = "bucketed"

    c.train.train_batch_size = 32
    c.rl.mini_batch_size = 16  # two optimiser updates per step, as on the headline task
    c.rl.micro_batch_size = 128
    c.selection.rollout_batch_size = 48

    c.train.warmstart_levels = WORKED_TAUGHT_LEVELS
    # A fixed supervised budget, no accuracy band: the chains' validation accuracy climbs slowly
    # (0.04 after 1,600 steps), so a band high enough to matter would not be reached within hours.
    # Each seed's strategies still share its warm start, so the comparison stays paired.
    c.train.warmstart_steps = WARMSTART_STEPS
    # Supervised on problems of its own (none of RL's or the held-out ones), as a pretrained model
    # has not seen the RL prompts: 3,000 steps over RL's own 3,000 would memorise their answers.
    c.train.warmstart_num_problems = WARMSTART_PROBLEMS
    c.train.warmstart_accuracy_low, c.train.warmstart_accuracy_high = 0.0, 1.0
    c.train.num_steps = 240
    c.eval.every_steps = 20
    c.checkpoint.every_steps = 0
    if c.selection.strategy == "aero":
        c.rl.micro_batch_size = 32
    if "quick" in options:
        c.train.warmstart_steps = 250
        c.train.num_steps = 10
        c.train.train_batch_size = 16
        c.rl.mini_batch_size = 8
        c.rl.micro_batch_size = 64
        c.selection.rollout_batch_size = 24
        c.eval.every_steps = 0
    return c
