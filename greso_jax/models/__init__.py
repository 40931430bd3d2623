"""Qwen2-family policy models, Hugging Face weights and tokenizers."""

from greso_jax.models.presets import PRESETS, ModelConfig
from greso_jax.models.qwen2 import Qwen2, abstract_model, attend, count_parameters, init_model
from greso_jax.models.tokenizer import CharTokenizer, HFTokenizer
from greso_jax.models.weights import from_pretrained, param_shardings, place_on_mesh, save_pretrained

__all__ = ["PRESETS", "ModelConfig", "Qwen2", "abstract_model", "attend", "count_parameters", "init_model",
           "CharTokenizer", "HFTokenizer", "from_pretrained", "param_shardings", "place_on_mesh",
           "save_pretrained"]
