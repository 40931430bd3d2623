"""GRESO paper setup: Qwen2.5-Math-1.5B on DAPO-Math-17k (train batch 256,
rollout batch 384, prompt/response 1536/2560 tokens). Variants: greso (default) | ds | vanilla | aero.

  python -m greso_jax.train --config experiments/qwen2_5_math_1_5b.py:greso \
    --config.model.path=/models/Qwen2.5-Math-1.5B \
    --config.data.path=/data/dapo_math17k_cleaned/train.parquet --config.eval.data_dir=/data \
    --workdir runs/qwen2_5_math_1_5b_greso
"""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "paper_common", os.path.join(os.path.dirname(os.path.abspath(__file__)), "paper_common.py"))
paper_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paper_common)  # experiments/ is not a package: configs are loaded by path


def get_config(variant: str = "greso"):
    return paper_common.paper_config(
        variant, preset="qwen2.5-math-1.5b", train_batch_size=256, rollout_batch_size=384,
        max_prompt_length=1536, max_response_length=2560, micro_batch_size=32)
