"""GRESO paper setup: DeepSeek-R1-Distill-Qwen-1.5B on DAPO-Math-17k (train batch 128,
rollout batch 192, prompt/response 2048/6144 tokens). Variants: greso (default) | ds | vanilla | aero.

  python -m greso_jax.train --config experiments/r1_distill_qwen_1_5b.py:greso \
    --config.model.path=/models/DeepSeek-R1-Distill-Qwen-1.5B \
    --config.data.path=/data/dapo_math17k_cleaned/train.parquet --config.eval.data_dir=/data \
    --workdir runs/r1_distill_qwen_1_5b_greso
"""

from greso_jax.config.paper_setups import paper_config


def get_config(variant: str = "greso"):
    return paper_config(
        variant, preset="deepseek-r1-distill-qwen-1.5b", train_batch_size=128, rollout_batch_size=192,
        max_prompt_length=2048, max_response_length=6144, micro_batch_size=16)
