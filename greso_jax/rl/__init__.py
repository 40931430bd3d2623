"""GRPO learner: advantages, train batches, per-token log-probs, clipped losses with KL, sharded train step."""

from greso_jax.rl.advantages import compute_advantages
from greso_jax.rl.batch import AssembledBatch, TrainBatch, assemble_batch, make_train_batch
from greso_jax.rl.learner import Learner
from greso_jax.rl.logprobs import token_logprobs, token_logprobs_and_entropy
from greso_jax.rl.losses import LossConfig, aggregate, kl_penalty, policy_gradient_loss

__all__ = ["compute_advantages", "AssembledBatch", "TrainBatch", "assemble_batch", "make_train_batch", "Learner",
           "token_logprobs", "token_logprobs_and_entropy", "LossConfig", "aggregate", "kl_penalty",
           "policy_gradient_loss"]
