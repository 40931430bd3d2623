"""Hugging Face folders <-> greso_jax models: `from_pretrained`, `save_pretrained`, mesh placement.

Loading builds the model abstractly, then creates each parameter directly with its target
sharding from a memory-mapped tensor (`jax.make_array_from_callback` reads only the slice
each local device holds), so no device ever holds a full copy it does not need.
"""

from __future__ import annotations

import json
import math
import os
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from greso_jax.models import safetensors_io
from greso_jax.models.presets import ModelConfig
from greso_jax.models.qwen2 import Qwen2, abstract_model
from greso_jax.parallel.sharding import named_sharding
from greso_jax.parallel import multihost

class ModelFolderError(ValueError):
    """A Hugging Face folder that cannot be loaded as the model it describes; the message names the
    folder or file and, where one is at fault, the tensor."""


_LAYER_NAMES = {
    ("attn", "q_kernel"): ("self_attn.q_proj.weight", True),
    ("attn", "k_kernel"): ("self_attn.k_proj.weight", True),
    ("attn", "v_kernel"): ("self_attn.v_proj.weight", True),
    ("attn", "o_kernel"): ("self_attn.o_proj.weight", True),
    ("attn", "q_bias"): ("self_attn.q_proj.bias", False),
    ("attn", "k_bias"): ("self_attn.k_proj.bias", False),
    ("attn", "v_bias"): ("self_attn.v_proj.bias", False),
    ("mlp", "gate_kernel"): ("mlp.gate_proj.weight", True),
    ("mlp", "up_kernel"): ("mlp.up_proj.weight", True),
    ("mlp", "down_kernel"): ("mlp.down_proj.weight", True),
    ("input_norm", "weight"): ("input_layernorm.weight", False),
    ("post_attention_norm", "weight"): ("post_attention_layernorm.weight", False),
}
_TOP_NAMES = {
    ("embed",): ("model.embed_tokens.weight", False),
    ("final_norm", "weight"): ("model.norm.weight", False),
    ("lm_head",): ("lm_head.weight", True),
}


def hf_name(path: tuple) -> tuple[str, bool]:
    """Our parameter path -> (Hugging Face tensor name, whether HF stores it transposed)."""
    path = tuple(p.key if hasattr(p, "key") else p for p in path)
    if path in _TOP_NAMES:
        return _TOP_NAMES[path]
    if path[0] == "layers" and path[2:] in _LAYER_NAMES:
        name, transposed = _LAYER_NAMES[path[2:]]
        return f"model.layers.{path[1]}.{name}", transposed
    raise KeyError(f"no Hugging Face name for parameter {'/'.join(map(str, path))}")


def _tensor_files(path: str) -> list[str]:
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelFolderError(f"{index}: not a safetensors index with a weight_map ({e})") from None
        return [os.path.join(path, name) for name in files]
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        return [single]
    raise FileNotFoundError(f"{path}: no model.safetensors or model.safetensors.index.json")


def read_model_config(path: str, **overrides) -> ModelConfig:
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model folder not found: {path}")
    config_path = os.path.join(path, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{path}: no config.json")
    try:
        with open(config_path) as f:
            return ModelConfig.from_hf_config(json.load(f), **overrides)
    except KeyError as e:
        raise ModelFolderError(f"{config_path}: missing field {e}") from None
    except (ValueError, TypeError, AttributeError) as e:  # bad JSON, wrong types, unsupported model
        raise ModelFolderError(f"{config_path}: {e}") from None


def param_shardings(model: nnx.Module, mesh: Mesh) -> nnx.State:
    """A state of NamedShardings, one per parameter, from its logical axes."""
    state = nnx.state(model, nnx.Param)

    def sharding_of(variable):
        return named_sharding(variable.get_metadata()["logical_axes"], variable.value.shape, mesh)

    return jax.tree.map(sharding_of, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def _build(abstract: Qwen2, make_value: Callable[[tuple, nnx.Variable], jax.Array]) -> Qwen2:
    graphdef, state = nnx.split(abstract)
    flat = nnx.to_flat_state(state)
    values = [(path, var.replace(make_value(path, var))) for path, var in flat]
    return nnx.merge(graphdef, nnx.from_flat_state(values))


def from_pretrained(path: str, dtype: str = "float32", mesh: Mesh | None = None, *,
                    param_dtype: str | None = None, remat: bool = False) -> Qwen2:
    """Loads a local Hugging Face Qwen2 folder. `dtype` is the compute dtype; parameters are
    stored in `param_dtype` (default: `dtype`). With a mesh, each parameter is created
    directly with the sharding its logical axes ask for."""
    cfg = read_model_config(path, dtype=dtype, param_dtype=param_dtype or dtype, remat=remat)
    tensors: dict[str, np.ndarray] = {}
    for file in _tensor_files(path):
        tensors.update(safetensors_io.open_tensors(file))
    abstract = abstract_model(cfg)
    expected = {}
    for param_path, var in nnx.to_flat_state(nnx.state(abstract, nnx.Param)):
        expected[hf_name(param_path)[0]] = param_path
    missing = sorted(set(expected) - set(tensors))
    unexpected = set(tensors) - set(expected)
    if cfg.tie_embeddings:
        unexpected.discard("lm_head.weight")  # some tied checkpoints still store it
    unexpected = sorted(n for n in unexpected if not n.endswith("rotary_emb.inv_freq"))
    if missing:
        raise ModelFolderError(f"{path}: missing tensors: {', '.join(missing[:10])}"
                         + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else ""))
    if unexpected:
        raise ModelFolderError(f"{path}: unexpected tensors: {', '.join(unexpected[:10])}"
                         + (f" (+{len(unexpected) - 10} more)" if len(unexpected) > 10 else ""))
    target = jnp.dtype(cfg.param_dtype)

    def make_value(param_path, var):
        if not isinstance(var, nnx.Param):
            return var.value
        name, transposed = hf_name(param_path)
        source = tensors[name]
        source_shape = source.shape[::-1] if transposed else source.shape
        if tuple(source_shape) != tuple(var.value.shape):
            raise ModelFolderError(f"{path}: tensor {name} has shape {tuple(source.shape)}, expected "
                             f"{tuple(var.value.shape[::-1] if transposed else var.value.shape)}")

        def read(index):
            block = np.asarray(source[tuple(index[::-1])]).T if transposed else np.asarray(source[tuple(index)])
            if not np.all(np.isfinite(block)):  # a model that would evaluate to 0 and train on nothing
                raise ModelFolderError(f"{path}: tensor {name} holds non-finite values (NaN or inf)")
            return block.astype(target)

        if mesh is None:
            full = tuple(slice(None) for _ in var.value.shape)
            return jnp.asarray(read(full))
        sharding = named_sharding(var.get_metadata()["logical_axes"], var.value.shape, mesh)
        return jax.make_array_from_callback(var.value.shape, sharding, read)

    return _build(abstract, make_value)


def place_on_mesh(model: Qwen2, mesh: Mesh) -> Qwen2:
    """Reshards an existing model's parameters as their logical axes ask (in place)."""
    for _, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        sharding = named_sharding(var.get_metadata()["logical_axes"], var.value.shape, mesh)
        var.value = multihost.put(var.value, sharding)
    return model


def save_pretrained(model: Qwen2, path: str, *, dtype: str | None = None, max_shard_bytes: int = 4 * 2**30) -> None:
    """Writes config.json and safetensors (sharded with an index above `max_shard_bytes`)."""
    os.makedirs(path, exist_ok=True)
    cfg = model.cfg
    out_dtype = np.dtype(jnp.dtype(dtype or cfg.param_dtype))
    tensors = {}
    for param_path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        name, transposed = hf_name(param_path)
        value = np.asarray(jax.device_get(var.value)).astype(out_dtype)
        tensors[name] = value.T if transposed else value
    hf_config = cfg.to_hf_config() | {"torch_dtype": str(out_dtype)}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2)
    shards, current, size = [], {}, 0
    for name in sorted(tensors):
        if current and size + tensors[name].nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensors[name]
        size += tensors[name].nbytes
    shards.append(current)
    if len(shards) == 1:
        safetensors_io.write_file(os.path.join(path, "model.safetensors"), shards[0])
        return
    weight_map = {}
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        safetensors_io.write_file(os.path.join(path, file), shard)
        weight_map.update({name: file for name in shard})
    total = sum(math.prod(t.shape) * t.itemsize for t in tensors.values())
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)

