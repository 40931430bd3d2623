"""GRESO paper setup: Qwen2.5-Math-1.5B on DAPO-Math-17k (train batch 256,
rollout batch 384, prompt/response 1536/2560 tokens). Variants: greso (default) | ds | vanilla | aero.

  python -m greso_jax.train --config experiments/qwen2_5_math_1_5b.py:greso \
    --config.model.path=/models/Qwen2.5-Math-1.5B \
    --config.data.path=/data/dapo_math17k_cleaned/train.parquet --config.eval.data_dir=/data \
    --workdir runs/qwen2_5_math_1_5b_greso
"""

from greso_jax.config.paper_setups import paper_config


def get_config(variant: str = "greso"):
    return paper_config(
        variant, preset="qwen2.5-math-1.5b", train_batch_size=256, rollout_batch_size=384,
        max_prompt_length=1536, max_response_length=2560, micro_batch_size=32)
