"""Builds the pieces a run needs from its config: the tokenizer and the policy
(a Hugging Face folder, or a preset trained from scratch with a supervised warm start)."""

from __future__ import annotations

import os

import jax

from greso_jax.data import arith
from greso_jax.data.prompts import format_prompt
from greso_jax.models import PRESETS, CharTokenizer, HFTokenizer, from_pretrained, init_model, place_on_mesh
from greso_jax.warmstart import cached_warmstart


def build_tokenizer(config):
    if config.model.tokenizer == "hf":
        return HFTokenizer(config.model.path)
    vocab = PRESETS[config.model.preset].vocab_size if not config.model.path else None
    return CharTokenizer(arith.ARITH_ALPHABET, vocab_size=vocab)


def build_policy(config, tokenizer, train_rows, workdir: str, mesh, log=print):
    m = config.model
    if m.path:
        return from_pretrained(m.path, dtype=m.dtype, mesh=mesh, param_dtype=m.param_dtype, remat=m.remat)
    cfg = PRESETS[m.preset].replace(dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ValueError(f"model.preset: {m.preset} has vocab_size {cfg.vocab_size}, smaller than the "
                         f"tokenizer's {tokenizer.vocab_size}")
    model = init_model(cfg, seed=config.seed)
    t = config.train
    if t.warmstart_steps and config.data.source == "arith":
        pairs = [(tokenizer.encode(format_prompt(row, config.data.prompt_template, tokenizer)),
                  tokenizer.encode(arith.solution_text(row))) for row in train_rows]
        width = max(len(p) + len(s) + 1 for p, s in pairs)
        model = cached_warmstart(model, pairs, cache_dir=os.path.join(workdir, "warmstart"),
                                 eos_id=tokenizer.eos_ids[0], pad_id=tokenizer.pad_id, width=width,
                                 steps=t.warmstart_steps, batch_size=t.warmstart_batch_size,
                                 learning_rate=t.warmstart_learning_rate, seed=config.seed, log=log,
                                 write_cache=jax.process_index() == 0)
    return place_on_mesh(model, mesh)
