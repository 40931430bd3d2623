"""Qwen2-family architecture description (`ModelConfig`), named presets, HF config.json mapping."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a Qwen2-family decoder (Llama-style when qkv_bias is False)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = True
    qkv_bias: bool = True
    max_position_embeddings: int = 4096
    dtype: str = "float32"  # compute dtype
    param_dtype: str = "float32"
    remat: bool = False

    def __post_init__(self):
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any], **overrides) -> "ModelConfig":
        """Reads a Hugging Face config.json dict of a Qwen2 (or Llama) model."""
        model_type = hf.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"unsupported model_type {model_type!r}: greso_jax loads "
                             f"{', '.join(SUPPORTED_MODEL_TYPES)}")
        rope_theta = hf.get("rope_theta")
        if rope_theta is None:  # newer transformers nest it under rope_parameters
            rope_theta = (hf.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        heads = hf["num_attention_heads"]
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads", heads),
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            rope_theta=float(rope_theta),
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2" or bool(hf.get("attention_bias", False)),
            max_position_embeddings=hf.get("max_position_embeddings", 4096),
            **overrides,
        )

    def to_hf_config(self) -> dict[str, Any]:
        """A config.json dict that transformers reads as Qwen2ForCausalLM."""
        return {
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "use_sliding_window": False,
            "attention_dropout": 0.0,
            "torch_dtype": self.param_dtype,
        }


SUPPORTED_MODEL_TYPES = ("qwen2",)

_QWEN_1_5B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
                  num_heads=12, num_kv_heads=2, rope_theta=10000.0, rms_norm_eps=1e-6)

PRESETS: dict[str, ModelConfig] = {
    "qwen2.5-math-1.5b": ModelConfig(**_QWEN_1_5B, tie_embeddings=True, max_position_embeddings=4096),
    "qwen2.5-math-7b": ModelConfig(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                                   num_layers=28, num_heads=28, num_kv_heads=4, rope_theta=10000.0,
                                   rms_norm_eps=1e-6, tie_embeddings=False, max_position_embeddings=4096),
    "deepseek-r1-distill-qwen-1.5b": ModelConfig(**_QWEN_1_5B, tie_embeddings=False,
                                                 max_position_embeddings=131072),
    # Qwen2.5-0.5B's shape: the GPU sampler benchmark.
    "qwen2.5-0.5b": ModelConfig(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
                                num_heads=14, num_kv_heads=2, rope_theta=1000000.0, tie_embeddings=True,
                                max_position_embeddings=32768),
    # ~100M parameters: the CPU train-step benchmark.
    "bench-100m": ModelConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_layers=10,
                              num_heads=12, num_kv_heads=4, tie_embeddings=True),
    # ~30M parameters: the CPU sampler benchmark.
    "bench-30m": ModelConfig(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_layers=8,
                             num_heads=8, num_kv_heads=2, tie_embeddings=True),
    # The embedded default's policy (character-level arithmetic, vocabulary padded to 32).
    "tiny": ModelConfig(vocab_size=32, hidden_size=128, intermediate_size=512, num_layers=2, num_heads=4,
                        num_kv_heads=2, tie_embeddings=True, max_position_embeddings=512),
    # The smallest useful shape, for unit tests.
    "tiny-test": ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                             num_kv_heads=2, tie_embeddings=False, max_position_embeddings=256),
}
