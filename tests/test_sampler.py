"""The JIT group sampler against transformers and against the model's own full forward pass."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from conftest import make_hf_checkpoint
from greso_jax.models import PRESETS, from_pretrained, init_model
from greso_jax.parallel import multihost
from greso_jax.sampling import compile_count, generate, generate_in_chunks, lower_generate
from greso_jax.sampling.compaction import segment_rows
from greso_jax.sampling.refill import admission_order
from greso_jax.sampling.shapes import DEFAULT_ROW_BUCKETS, Plan, bucket_at_least

VOCAB = 97
PROMPT_LENGTHS = [3, 17, 9, 1, 12, 5, 20, 7, 14]


@pytest.fixture(autouse=True)
def full_precision_matmuls():
    """The 1e-4 log-prob and token-for-token comparisons need float32 matmuls. XLA:CPU computes them
    so anyway; XLA:GPU's default lets float32 matmuls run in TF32 (an H200 measured 1.6e-4 here)."""
    with jax.default_matmul_precision("highest"):
        yield


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen2")
    torch_model = make_hf_checkpoint(path, vocab=VOCAB, tied=False)
    return torch_model, from_pretrained(str(path))


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    return [rng.integers(1, VOCAB, n).tolist() for n in PROMPT_LENGTHS]


def _hf_greedy(torch_model, prompt, max_new_tokens, eos_id=None):
    import torch

    with torch.no_grad():
        out = torch_model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                   do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos_id,
                                   pad_token_id=0)
    return out[0, len(prompt):].tolist()


def _full_forward_logprobs(model, prompts, responses, temperature):
    """log_softmax(logits / T) of one right-padded forward pass over each prompt + response, at the
    response tokens: a list of float arrays [len(response)]."""
    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    ids = np.zeros((len(prompts), width), np.int32)
    mask = np.zeros((len(prompts), width), np.int32)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, :len(p) + len(r)] = list(p) + list(r)
        mask[i, :len(p) + len(r)] = 1
    logp = np.asarray(jax.nn.log_softmax(model(jnp.asarray(ids), jnp.asarray(mask)) / (temperature or 1.0), axis=-1))
    return [logp[i, len(p) - 1 + np.arange(len(r)), r] for i, (p, r) in enumerate(zip(prompts, responses))]


def _check_logprobs(model, prompts, out, temperature):
    rows = range(out.tokens.shape[0])
    responses = [out.tokens[row, :out.lengths[row]] for row in rows]
    group = out.tokens.shape[0] // len(prompts)
    expected = _full_forward_logprobs(model, [prompts[row // group] for row in rows], responses, temperature)
    for row, response, want in zip(rows, responses, expected):
        np.testing.assert_allclose(out.logprobs[row, :len(response)], want, atol=1e-4, rtol=0)
        assert (out.logprobs[row, len(response):] == 0).all() and (out.tokens[row, len(response):] == 0).all()


def test_greedy_matches_transformers_with_eos(checkpoint, prompts):
    torch_model, model = checkpoint
    free_running = [_hf_greedy(torch_model, p, 32) for p in prompts]
    # An EOS id that some greedy continuations emit mid-way and others never emit.
    eos = next(t for row in free_running for t in row[5:20] if sum(t in r for r in free_running) < len(prompts))
    expected = [_hf_greedy(torch_model, p, 32, eos_id=eos) for p in prompts]

    out = generate(model, prompts, num_samples=2, max_new_tokens=32, rng=jax.random.key(0), temperature=0.0,
                   eos_ids=(eos,), pad_id=0)
    assert out.tokens.shape == (2 * len(prompts), 32) and out.tokens.dtype == np.int32
    for i, want in enumerate(expected):
        for row in (2 * i, 2 * i + 1):
            n = out.lengths[row]
            assert out.tokens[row, :n].tolist() == want, f"prompt {i}"
            assert out.truncated[row] == (eos not in want)
    assert out.truncated.any() and not out.truncated.all(), "the test needs rows with and without EOS"
    _check_logprobs(model, prompts, out, temperature=0.0)  # greedy: log softmax of the raw logits

    top1 = generate(model, prompts, num_samples=2, max_new_tokens=32, rng=jax.random.key(7), temperature=0.8,
                    top_k=1, eos_ids=(eos,))
    np.testing.assert_array_equal(top1.tokens, out.tokens)


SAMPLED_EOS = 40  # a token that some but not all sampled rows emit
SAMPLED = dict(num_samples=2, max_new_tokens=32, temperature=0.7, top_k=20, top_p=0.9, eos_ids=(SAMPLED_EOS,))


def test_logprobs_equal_full_forward_pass(checkpoint, prompts):
    _, model = checkpoint
    out = generate(model, prompts, rng=jax.random.key(1), **SAMPLED)
    _check_logprobs(model, prompts, out, temperature=0.7)
    for row in range(out.tokens.shape[0]):
        response = out.tokens[row, :out.lengths[row]]
        assert out.truncated[row] == (SAMPLED_EOS not in response) and SAMPLED_EOS not in response[:-1]
    assert out.truncated.any() and not out.truncated.all()


def _peaked_model(seed, scale):
    """tiny-test with a scaled output head, so its next-token distribution is far from uniform."""
    model = init_model(PRESETS["tiny-test"], seed=seed)
    model.lm_head[...] = model.lm_head[...] * scale
    return model


def _chi_square_p(observed_tokens, probs):
    counts = np.bincount(observed_tokens, minlength=len(probs)).astype(float)
    expected = probs * counts.sum()
    big = expected >= 5  # merge the rare tokens into one bin
    f_obs = np.append(counts[big], counts[~big].sum())
    f_exp = np.append(expected[big], expected[~big].sum())
    if f_exp[-1] < 5:
        f_obs, f_exp = np.append(f_obs[:-2], f_obs[-2:].sum()), np.append(f_exp[:-2], f_exp[-2:].sum())
    return stats.chisquare(f_obs, f_exp * f_obs.sum() / f_exp.sum()).pvalue, int(big.sum())


def test_sampling_frequencies_match_softmax():
    model = _peaked_model(seed=0, scale=20.0)
    prompt = [3, 14, 15, 9, 2]
    draws = 20000
    out = generate(model, [prompt], num_samples=draws, max_new_tokens=2, rng=jax.random.key(42), temperature=1.0)
    first_probs = np.asarray(jax.nn.softmax(model(jnp.asarray([prompt]))[0, -1]))
    p_value, bins = _chi_square_p(out.tokens[:, 0], first_probs)
    assert bins >= 5 and p_value > 1e-3, (p_value, bins)
    np.testing.assert_allclose(out.logprobs[:, 0], np.log(first_probs[out.tokens[:, 0]]), atol=1e-4)
    # The second token goes through the decode step: check it conditioned on the commonest first token.
    commonest = np.bincount(out.tokens[:, 0]).argmax()
    second = out.tokens[out.tokens[:, 0] == commonest, 1]
    second_probs = np.asarray(jax.nn.softmax(model(jnp.asarray([prompt + [commonest]]))[0, -1]))
    p_value, bins = _chi_square_p(second, second_probs)
    assert len(second) > 2000 and bins >= 3 and p_value > 1e-3, (p_value, bins)
    # A sampler ignoring the distribution (uniform draws) fails the same test.
    uniform = np.random.default_rng(0).integers(0, first_probs.size, draws)
    assert _chi_square_p(uniform, first_probs)[0] < 1e-6


def test_top_k_top_p_frequencies_match_truncated_softmax():
    model = _peaked_model(seed=1, scale=60.0)
    prompt = [7, 1, 8]
    temperature, top_k, top_p = 1.5, 6, 0.8
    out = generate(model, [prompt], num_samples=20000, max_new_tokens=1, rng=jax.random.key(3),
                   temperature=temperature, top_k=top_k, top_p=top_p)
    probs = np.asarray(jax.nn.softmax(model(jnp.asarray([prompt]))[0, -1] / temperature), np.float64)
    order = np.argsort(-probs)
    kept = order[:top_k]
    kept_probs = probs[kept] / probs[kept].sum()
    kept = kept[(np.cumsum(kept_probs) - kept_probs) < top_p]
    truncated = np.zeros_like(probs)
    truncated[kept] = probs[kept] / probs[kept].sum()
    assert 2 <= len(kept) < top_k, "the case should exercise both truncations"
    assert np.isin(out.tokens[:, 0], kept).all()
    assert _chi_square_p(out.tokens[:, 0], truncated)[0] > 1e-3
    np.testing.assert_allclose(out.logprobs[:, 0], np.log(probs[out.tokens[:, 0]]), atol=1e-4)


def test_prefill_runs_once_per_prompt_not_per_row():
    model = init_model(PRESETS["tiny-test"])
    cfg = model.cfg
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]] * 2
    n, group, tp, rows = 8, 6, 24, 48  # sizes chosen to collide with no weight dimension
    lowered = lower_generate(model, prompts, num_samples=group, max_new_tokens=8, rng=jax.random.key(0),
                             prompt_buckets=(tp,), row_buckets=(rows,))
    shapes = {tuple(int(d) for d in m.rstrip("x").split("x"))
              for m in re.findall(r"tensor<((?:\d+x)+)f32>", lowered.as_text())}
    assert (n, tp, cfg.hidden_size) in shapes and (n, tp, cfg.intermediate_size) in shapes  # prefill on N rows
    assert (rows, 1, cfg.intermediate_size) in shapes  # decode on N*G rows
    per_row_prompt = [s for s in shapes if s[:2] == (rows, tp) or s[:3] == (n, group, tp)]
    assert not per_row_prompt, f"prompt work or cache replicated per row: {per_row_prompt}"


def test_same_key_same_output_and_bounded_compiles(checkpoint, prompts):
    _, model = checkpoint
    a = generate(model, prompts, rng=jax.random.key(5), **SAMPLED)
    count = compile_count()
    b = generate(model, prompts, rng=jax.random.key(5), **SAMPLED)
    c = generate(model, prompts, rng=jax.random.key(6), **SAMPLED)
    for field in ("tokens", "logprobs", "lengths", "truncated"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert (a.tokens != c.tokens).mean() > 0.5
    assert (a.tokens[0::2] != a.tokens[1::2]).any(axis=1).all(), "the rows of a group must be independent draws"
    # Other prompts, prompt counts and sampling values inside the same buckets reuse the program.
    generate(model, prompts + [[1] * 30, [2], [3, 4]], rng=jax.random.key(8),
             **{**SAMPLED, "temperature": 0.6, "top_p": 0.5})
    generate(model, prompts[::-1] + [[2]], rng=jax.random.key(9), **SAMPLED)
    assert compile_count() == count


def test_row_bucket_changes_the_cache_not_the_samples(checkpoint, prompts):
    _, model = checkpoint
    cfg = model.cfg
    default = generate(model, prompts, rng=jax.random.key(11), **SAMPLED)  # 18 rows -> bucket 24
    small = generate(model, prompts, rng=jax.random.key(11), row_buckets=(18,), **SAMPLED)
    np.testing.assert_array_equal(small.tokens, default.tokens)
    np.testing.assert_allclose(small.logprobs, default.logprobs, atol=1e-5)
    assert (default.prompt_rows, default.rows, default.prompt_length) == (12, 24, 32)
    assert (small.prompt_rows, small.rows, small.prompt_length) == (9, 18, 32)
    per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4  # K and V, float32
    for out in (default, small):  # prompt cache [Np, Tp] + response cache [rows, max_new_tokens - 1]
        assert out.kv_cache_bytes == per_token * (out.prompt_rows * out.prompt_length + out.rows * 31)


def test_default_row_buckets_pad_a_call_by_less_than_half():
    # A call's decode time follows its bucket's rows: above 16 rows the bucket must stay under 1.5x
    # the rows (powers of two padded 17 rows to 32, and 24 prompts x 8 to 256 rows).
    for rows in range(17, DEFAULT_ROW_BUCKETS[-1] + 1):
        assert bucket_at_least(rows, DEFAULT_ROW_BUCKETS, "rows") < 1.5 * rows, rows
    model = init_model(PRESETS["tiny-test"])
    out = generate(model, [[1, 2, 3]] * 24, num_samples=8, max_new_tokens=2, rng=jax.random.key(0))
    assert (out.prompt_rows, out.rows) == (24, 192)


def test_placing_keeps_leaves_already_in_place():
    # The sampler places the parameters on every call: leaves already there must not be copied.
    device = jax.devices()[0]
    placed = jax.device_put(np.arange(4.0), device)
    sharding = jax.sharding.SingleDeviceSharding(device)
    tree = multihost.put_tree({"placed": placed, "host": np.ones(3, np.int32)}, sharding)
    assert tree["placed"] is placed
    assert isinstance(tree["host"], jax.Array) and tree["host"].sharding == sharding
    np.testing.assert_array_equal(tree["host"], np.ones(3, np.int32))


def test_generate_in_chunks_is_the_chunk_calls_concatenated():
    model = init_model(PRESETS["tiny-test"])
    prompts = [[1, 2], [3], [4, 5, 6], [7, 8], [9]]
    kwargs = dict(max_new_tokens=4, temperature=1.0, prompt_buckets=(8,), row_buckets=(8,))
    rng = jax.random.key(3)
    chunked = generate_in_chunks(model, prompts, num_samples=2, max_rows_per_call=5, rng=rng, **kwargs)
    parts = [generate(model, prompts[i:i + 2], num_samples=2, rng=jax.random.fold_in(rng, i // 2), **kwargs)
             for i in (0, 2, 4)]  # 5 rows per call -> 2 prompts of 2 samples
    for field in ("tokens", "logprobs", "lengths", "truncated"):
        np.testing.assert_array_equal(getattr(chunked, field), np.concatenate([getattr(p, field) for p in parts]))
    assert chunked.prompts == prompts and chunked.num_samples == 2
    assert parts[1].prompts == prompts[2:4] and parts[1].num_samples == 2
    whole = generate_in_chunks(model, prompts, num_samples=2, max_rows_per_call=0, rng=rng, **kwargs)
    one_call = generate(model, prompts, num_samples=2, rng=jax.random.fold_in(rng, 0), **kwargs)
    np.testing.assert_array_equal(whole.tokens, one_call.tokens)


def test_per_prompt_budgets_stop_rows_and_keep_the_rest_identical(checkpoint, prompts):
    _, model = checkpoint
    kwargs = dict(num_samples=2, rng=jax.random.key(21), temperature=0.7, eos_ids=(SAMPLED_EOS,))
    whole = generate(model, prompts, max_new_tokens=32, **kwargs)
    budgets = [32, 1, 5, 32, 12, 3, 32, 8, 20]
    count = compile_count()
    out = generate(model, prompts, max_new_tokens=budgets, max_new_tokens_cap=32, **kwargs)
    assert compile_count() == count, "a cap equal to the int path's max_new_tokens reuses its program"
    assert out.tokens.shape == whole.tokens.shape
    row_budgets = np.repeat(budgets, 2)
    assert (out.lengths <= row_budgets).all()
    for row, budget in enumerate(row_budgets):
        n = out.lengths[row]
        # A budget only cuts a row short: up to its end, the row is the int path's row.
        assert n == min(whole.lengths[row], budget)
        np.testing.assert_array_equal(out.tokens[row, :n], whole.tokens[row, :n])
        np.testing.assert_array_equal(out.logprobs[row, :n], whole.logprobs[row, :n])
        assert (out.tokens[row, n:] == 0).all() and (out.logprobs[row, n:] == 0).all()
        assert out.truncated[row] == (SAMPLED_EOS not in out.tokens[row, :n])
        if budget == 32:
            for field in ("tokens", "logprobs", "lengths", "truncated"):
                np.testing.assert_array_equal(getattr(out, field)[row], getattr(whole, field)[row])
    cut = (row_budgets < whole.lengths)
    assert cut.any() and out.truncated[cut].all(), "a row stopped by its budget before its EOS is truncated"
    # New budgets under the same cap: same program.
    generate(model, prompts, max_new_tokens=[7] * len(prompts), max_new_tokens_cap=32, **kwargs)
    assert compile_count() == count


def test_generate_in_chunks_splits_the_budgets():
    model = init_model(PRESETS["tiny-test"])
    prompts = [[1, 2], [3], [4, 5, 6], [7, 8], [9]]
    budgets = [2, 6, 1, 4, 3]
    kwargs = dict(temperature=1.0, prompt_buckets=(8,), row_buckets=(8,))
    rng = jax.random.key(4)
    chunked = generate_in_chunks(model, prompts, num_samples=2, max_rows_per_call=5, rng=rng,
                                 max_new_tokens=budgets, **kwargs)
    assert chunked.tokens.shape == (10, 6)  # the cap defaults to the largest budget over all calls
    parts = [generate(model, prompts[i:i + 2], num_samples=2, rng=jax.random.fold_in(rng, i // 2),
                      max_new_tokens=budgets[i:i + 2], max_new_tokens_cap=6, **kwargs) for i in (0, 2, 4)]
    for field in ("tokens", "logprobs", "lengths", "truncated"):
        np.testing.assert_array_equal(getattr(chunked, field), np.concatenate([getattr(p, field) for p in parts]))
    np.testing.assert_array_equal(chunked.lengths, np.repeat(budgets, 2))  # no EOS: every row spends its budget


def test_segment_rows_halve_down_to_the_floor_in_multiples_of_the_mesh():
    assert segment_rows(192, 8) == (96, 48, 24, 12)
    assert segment_rows(24, 3) == (12, 6, 3)
    assert segment_rows(24, 4, multiple=4) == (12, 8, 4)  # ceil(12 / 2) = 6 -> 8: splits over 4 devices
    assert segment_rows(8, 8) == () and segment_rows(192, 0) == ()
    assert segment_rows(192, 8, shrink=0.75) == (144, 108, 81, 61, 46, 35, 27, 21, 16, 12, 9)
    # 3/4 of 12 is 9, rounded up to the mesh multiple 12 again: the chain stops there.
    assert segment_rows(24, 4, multiple=4, shrink=0.75) == (20, 16, 12)


TAIL_BUDGETS = [32, 1, 5, 32, 12, 3, 32, 8, 20]  # 18 rows in a 24-row bucket: 16 live after step 1, 6 after 20


@pytest.mark.parametrize("temperature, shrink, cap", [(0.0, 0.5, 32), (0.0, 0.5, 48),
                                                      pytest.param(1.0, 0.5, 32, marks=pytest.mark.slow),
                                                      pytest.param(0.0, 0.75, 32, marks=pytest.mark.slow)])
def test_compaction_keeps_every_row(checkpoint, prompts, temperature, shrink, cap):
    """cap 32: one response chunk (31 slots); cap 48: two (24 + 23 slots), so segments start inside
    the first chunk and go on into the second."""
    _, model = checkpoint
    kwargs = dict(num_samples=2, max_new_tokens=TAIL_BUDGETS, max_new_tokens_cap=cap, rng=jax.random.key(31),
                  temperature=temperature)
    eos = _tail_eos(model, prompts, kwargs)
    plain = generate(model, prompts, eos_ids=(eos,), **kwargs)
    compacted = generate(model, prompts, eos_ids=(eos,), min_compact_rows=6, compact_shrink=shrink, **kwargs)
    row_budgets = np.repeat(TAIL_BUDGETS, 2)
    assert plain.rows == 24 and not plain.truncated.all()
    assert (plain.truncated & (plain.lengths < 32)).any(), "rows stopped by a budget below the cap"
    assert (~plain.truncated & (plain.lengths < row_budgets)).any(), "rows stopped by EOS"
    for field in ("tokens", "lengths", "truncated"):
        np.testing.assert_array_equal(getattr(compacted, field), getattr(plain, field))
    # Not bitwise: XLA:CPU rounds a float32 matmul's rows differently at other row counts (the
    # compacted segments run 12 and then 6 rows).
    np.testing.assert_allclose(compacted.logprobs, plain.logprobs, atol=1e-5, rtol=0)
    lowered = lower_generate(model, prompts, eos_ids=(eos,), min_compact_rows=6, compact_shrink=shrink,
                             **kwargs).as_text()
    cfg = model.cfg
    segments = segment_rows(24, 6, shrink=shrink)
    assert segments == ((12, 6) if shrink == 0.5 else (18, 14, 11, 9, 7, 6))
    chunks = (31,) if cap == 32 else (24, 23)
    for rows in segments:  # each segment's response chunks, one group of one per row
        for slots in chunks:
            assert f"tensor<{rows}x1x{cfg.num_kv_heads}x{slots}x{cfg.head_dim}xf32>" in lowered, (rows, slots)
    per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4
    assert compacted.kv_cache_bytes == plain.kv_cache_bytes + per_token * segments[0] * (cap - 1 + 32)


def _tail_eos(model, prompts, kwargs):
    """An EOS token that some rows emit before their budget runs out and others never emit."""
    probe = generate(model, prompts, eos_ids=(0,), **kwargs)
    return next(int(t) for t in probe.tokens[::2, 2:6].ravel() if 0 < (probe.tokens == t).any(1).sum() < 12)


@pytest.mark.parametrize("temperature", [0.0, pytest.param(1.0, marks=pytest.mark.slow)])
def test_refill_gives_the_plain_programs_rows(checkpoint, prompts, temperature):
    _, model = checkpoint
    kwargs = dict(num_samples=2, max_new_tokens=TAIL_BUDGETS, max_new_tokens_cap=32, rng=jax.random.key(31),
                  temperature=temperature)
    eos = _tail_eos(model, prompts, kwargs)
    plain = generate(model, prompts, eos_ids=(eos,), **kwargs)
    assert (~plain.truncated & (plain.lengths < np.repeat(TAIL_BUDGETS, 2))).any(), "rows stopped by EOS"
    cfg = model.cfg
    per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4
    # One lane: every prompt waits for the one before; four: lanes free out of order; four with the
    # drain compacted into 2 and then 1 lane (min_compact_rows 2 = one lane of G = 2).
    for lanes, compact, gathered in ((1, 0, 0), (4, 0, 0), (4, 2, 2)):
        refilled = generate(model, prompts, eos_ids=(eos,), live_prompts=lanes, min_compact_rows=compact, **kwargs)
        for field in ("tokens", "lengths", "truncated"):
            np.testing.assert_array_equal(getattr(refilled, field), getattr(plain, field))
        np.testing.assert_allclose(refilled.logprobs, plain.logprobs, atol=1e-5, rtol=0)
        assert refilled.rows == 2 * lanes and refilled.prompt_rows == plain.prompt_rows == 12
        assert refilled.kv_cache_bytes == per_token * (lanes + gathered) * (plain.prompt_length + 2 * 31)
    lowered = lower_generate(model, prompts, eos_ids=(eos,), live_prompts=4, min_compact_rows=2, **kwargs).as_text()
    for lanes in (4, 2, 1):  # the lanes' response cache, then the drain segments'
        assert f"tensor<{lanes}x2x{cfg.num_kv_heads}x31x{cfg.head_dim}xf32>" in lowered, lanes
    assert f"tensor<12x2x{cfg.num_kv_heads}x31x{cfg.head_dim}xf32>" not in lowered  # not the whole call's


def test_refill_serves_a_prompt_bucket_with_one_program(checkpoint, prompts):
    _, model = checkpoint
    kwargs = dict(num_samples=2, max_new_tokens=6, rng=jax.random.key(5), live_prompts=3)
    first = generate(model, prompts, **kwargs)  # 9 prompts: 18 rows in the 24-row bucket
    compiled = compile_count()
    more = generate(model, prompts + prompts[:3], **kwargs)  # 12 prompts, the same bucket: the number is traced
    assert compile_count() == compiled
    np.testing.assert_array_equal(more.tokens[:18], first.tokens)
    assert generate(model, prompts[:3], **kwargs).rows == bucket_at_least(6, DEFAULT_ROW_BUCKETS, "rows")  # no refill


@pytest.mark.slow
def test_refill_in_chunks(checkpoint, prompts):
    _, model = checkpoint
    kwargs = dict(num_samples=2, max_new_tokens=6, rng=jax.random.key(5), live_prompts=3)
    chunked = generate_in_chunks(model, prompts, max_rows_per_call=10, **kwargs)  # calls of 5 and 4 prompts
    parts = [generate(model, prompts[i:i + 5], **dict(kwargs, rng=jax.random.fold_in(kwargs["rng"], i // 5)))
             for i in (0, 5)]
    np.testing.assert_array_equal(chunked.tokens, np.concatenate([p.tokens for p in parts]))


@pytest.mark.parametrize("temperature", [0.0, pytest.param(1.0, marks=pytest.mark.slow)])
def test_response_chunks_give_the_one_chunk_programs_rows(checkpoint, prompts, temperature):
    _, model = checkpoint
    budgets = [64, 1, 5, 40, 12, 3, 64, 8, 20]
    kwargs = dict(num_samples=2, max_new_tokens=budgets, rng=jax.random.key(31), temperature=temperature)
    eos = _tail_eos(model, prompts, kwargs)
    whole = generate(model, prompts, eos_ids=(eos,), response_chunks=1, **kwargs)
    assert (~whole.truncated & (whole.lengths < np.repeat(budgets, 2))).any(), "rows stopped by EOS"
    # 63 response slots: 4 chunks asked, 3 given (none under 16 slots).
    chunked = generate(model, prompts, eos_ids=(eos,), response_chunks=4, **kwargs)
    for field in ("tokens", "lengths", "truncated"):
        np.testing.assert_array_equal(getattr(chunked, field), getattr(whole, field))
    np.testing.assert_allclose(chunked.logprobs, whole.logprobs, atol=1e-5, rtol=0)
    assert chunked.kv_cache_bytes == whole.kv_cache_bytes  # the chunks add up to the one cache
    _check_logprobs(model, prompts, chunked, temperature)
    cfg = model.cfg
    lowered = lower_generate(model, prompts, eos_ids=(eos,), response_chunks=4, **kwargs).as_text()
    assert f"tensor<12x2x{cfg.num_kv_heads}x21x{cfg.head_dim}xf32>" in lowered
    assert f"tensor<12x2x{cfg.num_kv_heads}x63x{cfg.head_dim}xf32>" not in lowered  # never the whole cache


def test_chunk_counts_that_run_the_same_chunks_share_a_program():
    model = init_model(PRESETS["tiny-test"])
    kwargs = dict(prompts=[[1, 2], [3]], num_samples=2, max_new_tokens=8, rng=jax.random.key(0), prompt_buckets=(32,))
    one = generate(model, response_chunks=1, **kwargs)
    compiled = compile_count()
    np.testing.assert_array_equal(generate(model, response_chunks=4, **kwargs).tokens, one.tokens)  # 7 slots: 1 chunk
    assert compile_count() == compiled


def test_response_chunks_are_near_equal_and_not_too_small():
    plan = functools.partial(Plan, prompt_rows=8, prompt_length=16, group=2)
    assert plan(max_new_tokens=128, chunks=4).response_chunks == (32, 32, 32, 31)
    assert plan(max_new_tokens=64, chunks=4).response_chunks == (21, 21, 21)
    assert plan(max_new_tokens=20, chunks=4).response_chunks == (19,)
    assert plan(max_new_tokens=1, chunks=4).response_chunks == (1,)
    assert plan(max_new_tokens=128, chunks=1).response_chunks == (127,)


@pytest.mark.parametrize("bad, message", [
    (dict(max_new_tokens=[4, 0]), r"max_new_tokens: budgets must be >= 1"),
    (dict(max_new_tokens=[4, 4, 4]), r"max_new_tokens: expected an int or 2 integer budgets"),
    (dict(max_new_tokens=[4.0, 2.0]), r"max_new_tokens: expected an int or 2 integer budgets"),
    (dict(max_new_tokens=[4, 9], max_new_tokens_cap=8), r"max_new_tokens: budget 9 \(prompt 1\) exceeds "
                                                        r"max_new_tokens_cap 8"),
    (dict(max_new_tokens=[4, 2], max_new_tokens_cap=0), "max_new_tokens_cap"),
])
def test_bad_budgets_name_the_argument(bad, message):
    model = init_model(PRESETS["tiny-test"])
    kwargs = dict(prompts=[[1, 2], [3]], num_samples=2, rng=jax.random.key(0), prompt_buckets=(32,))
    kwargs.update(bad)
    with pytest.raises(ValueError, match=message):
        generate(model, **kwargs)
    with pytest.raises(ValueError, match=message):
        generate_in_chunks(model, max_rows_per_call=2, **kwargs)


@pytest.mark.parametrize("bad, message", [
    (dict(prompts=[]), "prompts"),
    (dict(prompts=[[1], []]), r"prompts\[1\]: empty"),
    (dict(prompts=[[1, 64]]), r"prompts\[0\]: token id out of range"),
    (dict(num_samples=0), "num_samples"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_k=-2), "top_k"),
    (dict(eos_ids=(99,)), "eos_ids"),
    (dict(prompts=[[1] * 40]), "prompt length 40 exceeds"),
    (dict(row_buckets=(8, 4)), "row_buckets"),
    (dict(min_compact_rows=-1), "min_compact_rows"),
    (dict(compact_shrink=1.0), "compact_shrink"),
    (dict(live_prompts=-1), "live_prompts"),
    (dict(response_chunks=0), "response_chunks"),
])
def test_bad_arguments_name_the_field(bad, message):
    model = init_model(PRESETS["tiny-test"])
    kwargs = dict(prompts=[[1, 2]], num_samples=2, max_new_tokens=4, rng=jax.random.key(0), prompt_buckets=(32,))
    kwargs.update(bad)
    with pytest.raises(ValueError, match=message):
        generate(model, **kwargs)


def test_refill_admits_the_longest_budgets_first():
    budgets = jnp.asarray([3, 9, 3, 12, 9, 1, 7, 7], jnp.int32)
    # Six real prompts (two padding slots after them), longest first, ties in the call's order.
    np.testing.assert_array_equal(admission_order(budgets, jnp.int32(6)), [3, 1, 4, 0, 2, 5, 6, 7])
    np.testing.assert_array_equal(admission_order(jnp.full((5,), 4, jnp.int32), jnp.int32(5)), np.arange(5))
