"""Logit parity of the Flax Qwen2 with transformers, and the safetensors round trip."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from conftest import make_hf_checkpoint
from greso_jax.models import from_pretrained, save_pretrained

CONFIGS = [
    dict(tied=True, heads=4, kv_heads=2, rope_theta=10000.0),
    dict(tied=False, heads=4, kv_heads=4, rope_theta=1000000.0),
    dict(tied=False, heads=8, kv_heads=2, hidden=64, rope_theta=500.0),
]


@pytest.fixture(autouse=True)
def full_precision_matmuls():
    """The 1e-4 logit parity needs float32 matmuls: XLA:GPU's default runs them in TF32 (torch's
    reference here runs on the CPU in float32); XLA:CPU is unchanged by this."""
    with jax.default_matmul_precision("highest"):
        yield


def _right_padded_batch(rng, vocab, lengths, width):
    ids = np.zeros((len(lengths), width), np.int64)
    mask = np.zeros((len(lengths), width), np.int64)
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(0, vocab, n)
        mask[i, :n] = 1
    return ids, mask


def _torch_logits(model, ids, mask):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.float().numpy()


@pytest.mark.parametrize("cfg", CONFIGS, ids=["tied-gqa", "untied-mha-theta1e6", "untied-gqa4-theta500"])
def test_logits_match_transformers(tmp_path, cfg):
    torch_model = make_hf_checkpoint(tmp_path, **cfg)
    model = from_pretrained(str(tmp_path))
    ids, mask = _right_padded_batch(np.random.default_rng(0), 97, [11, 7, 3, 11], 11)
    ours = np.asarray(model(jnp.asarray(ids, jnp.int32), jnp.asarray(mask, jnp.int32)))
    theirs = _torch_logits(torch_model, ids, mask)
    valid = mask.astype(bool)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    assert np.max(np.abs(ours[valid] - theirs[valid])) <= 1e-4


def test_save_pretrained_round_trips_through_transformers(tmp_path):
    from transformers import Qwen2ForCausalLM

    original = make_hf_checkpoint(tmp_path / "src", tied=False)
    model = from_pretrained(str(tmp_path / "src"))
    save_pretrained(model, str(tmp_path / "out"))
    reloaded = Qwen2ForCausalLM.from_pretrained(str(tmp_path / "out"), attn_implementation="eager").eval()
    ids, mask = _right_padded_batch(np.random.default_rng(1), 97, [9, 5], 9)
    assert np.array_equal(_torch_logits(reloaded, ids, mask), _torch_logits(original, ids, mask))
    again = from_pretrained(str(tmp_path / "out"))
    ids_j = jnp.asarray(ids, jnp.int32)
    assert np.array_equal(np.asarray(again(ids_j)), np.asarray(model(ids_j)))


def test_sharded_save_writes_an_index_and_loads_back(tmp_path):
    make_hf_checkpoint(tmp_path / "src", tied=True)
    model = from_pretrained(str(tmp_path / "src"))
    save_pretrained(model, str(tmp_path / "out"), max_shard_bytes=20_000)
    assert (tmp_path / "out" / "model.safetensors.index.json").exists()
    again = from_pretrained(str(tmp_path / "out"))
    ids = jnp.arange(12, dtype=jnp.int32).reshape(2, 6)
    assert np.array_equal(np.asarray(again(ids)), np.asarray(model(ids)))
