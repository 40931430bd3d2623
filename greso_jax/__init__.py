"""greso_jax: selective-rollout RL with verifiable rewards (GRPO, DAPO-DS, GRESO, AERO) in JAX."""

__version__ = "0.1.0"
