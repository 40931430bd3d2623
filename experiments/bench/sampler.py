"""Sampler benchmark: greso_jax.sampling.generate vs transformers.generate vs Tunix's JAX sampler.

Same shape for all three ("bench-30m": 8 layers, hidden 512, MLP 1536, 8 heads, 2 KV heads,
vocab 4096, tied), N prompts x G samples x prompt length x new tokens at temperature 1 without
EOS, in one run (greso_jax also with other response-cache chunk counts, --response_chunks). Also
prints prefill time with and without prefix sharing, the KV-cache bytes, the fraction of the
machine's matmul peak that the decode reaches and its roofline fraction
(time bound max(FLOPs / matmul peak, bytes read / copy bandwidth) per decode step, both peaks
measured in the same run, over the measured decode time). On CPU, greso_jax is also timed with the
host split into --host_devices XLA devices (default: the most cores that divide --prompts) and the
prompts' groups data-parallel over them: a single device runs the attention's small batched
products on one thread (experiments/bench/decode_profile.py), a data mesh gives each core its own rows.

    python experiments/bench/sampler.py                       # CPU defaults: 16 x 8 x 64 x 128
    python experiments/bench/sampler.py --tunix_python=""     # without Tunix
    python experiments/bench/sampler.py --long_tail           # + per-prompt budgets, useful tokens/s

--long_tail draws one token budget per prompt from a log-normal with median 30% of --new_tokens,
clipped at --new_tokens so that 10% of prompts get the full length (stratified quantiles, shuffled
with a fixed seed), the shape of response lengths under EOS; it reports useful tokens/s (sum of
response lengths / time) next to the no-EOS tokens/s at the same shape, without and with live-row
compaction (--min_compact_rows, at each --compact_shrink segment ratio) and with refill
(--live_prompts lanes over --refill_factor times the prompts, so that as many rows are in flight as
in the plain call), alone and with its drain compacted (the same --min_compact_rows and ratios); the
no-EOS time is measured again for each setting.

Tunix runs in a subprocess with its own interpreter (a separate venv with requirements-peers.txt),
so the project's pinned stack is untouched; `--tunix_worker` is that subprocess's entry point.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time


def _best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_peak_flops(size: int = 2048, dtype: str = "float32", repeats: int = 5) -> float:
    """FLOP/s of a jitted [size, size] @ [size, size] in `dtype` on the default device."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (size, size), jnp.dtype(dtype))
    mm = jax.jit(lambda x: x @ x)
    mm(a).block_until_ready()
    return 2 * size ** 3 / _best_time(lambda: mm(a).block_until_ready(), repeats)


def copy_bandwidth(mib: int, repeats: int = 5) -> float:
    """Bytes/s (read + written) of a jitted elementwise pass over a `mib` MiB float32 array."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((mib * 2**18,), jnp.float32)
    double = jax.jit(lambda x: x * 2)
    double(a).block_until_ready()
    return 2 * a.nbytes / _best_time(lambda: double(a).block_until_ready(), repeats)


def long_tail_budgets(num_prompts: int, max_tokens: int, seed: int = 0):
    """One budget per prompt: log-normal with median 0.3 * max_tokens, sigma set so that P(>= max) =
    10%, clipped to [1, max_tokens]; stratified quantiles so that a few prompts already show the shape."""
    import numpy as np
    from scipy import stats

    sigma = np.log(1 / 0.3) / stats.norm.ppf(0.9)
    quantiles = (np.arange(num_prompts) + 0.5) / num_prompts
    budgets = np.exp(np.log(0.3 * max_tokens) + sigma * stats.norm.ppf(quantiles))
    budgets = np.clip(np.round(budgets), 1, max_tokens).astype(np.int32)
    return np.random.default_rng(seed).permutation(budgets)


def decode_bytes_per_step(cfg, param_bytes: int, prompts: int, group: int, prompt_len: int, slot: float) -> float:
    """Bytes one decode step must read: every weight once, the prompt cache once per prompt (shared
    by its G rows) and each row's response cache up to `slot`."""
    return param_bytes + kv_bytes_per_token(cfg) * (prompts * prompt_len + prompts * group * slot)


def kv_bytes_per_token(cfg) -> int:
    """K and V of one token over all layers, in the compute dtype."""
    import jax.numpy as jnp

    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * jnp.dtype(cfg.dtype).itemsize


def decode_flops_per_token(cfg, context: float) -> float:
    """Matmul FLOPs of one decode token: all weight matmuls plus attention over `context` keys."""
    d, hd = cfg.hidden_size, cfg.head_dim
    per_layer = 2 * d * (cfg.num_heads + 2 * cfg.num_kv_heads) * hd + 2 * cfg.num_heads * hd * d
    per_layer += 3 * 2 * d * cfg.intermediate_size + 2 * 2 * cfg.num_heads * hd * context
    return cfg.num_layers * per_layer + 2 * d * cfg.vocab_size


def bench_greso(args, prompts, cfg_name):
    import jax
    from flax import nnx

    from greso_jax.models import PRESETS, init_model, save_pretrained
    from greso_jax.sampling import compile_count, generate, prefill

    model = init_model(PRESETS[cfg_name].replace(dtype=args.dtype, param_dtype=args.dtype), seed=0)
    chunks, *other_chunks = args.response_chunks
    kwargs = dict(num_samples=args.group, max_new_tokens=args.new_tokens, temperature=1.0, response_chunks=chunks)
    start = time.perf_counter()
    out = generate(model, prompts, rng=jax.random.key(0), **kwargs)
    compile_s = time.perf_counter() - start
    seconds = _best_time(lambda: generate(model, prompts, rng=jax.random.key(1), **kwargs), args.repeats)
    assert (out.lengths == args.new_tokens).all() and compile_count() >= 1
    host_mesh = None  # the host's cores as data-parallel devices: (devices, seconds, rows changed)
    if args.host_devices > 1 and jax.default_backend() == "cpu" and jax.device_count() > 1:
        from greso_jax.parallel.sharding import make_mesh

        mesh_kwargs = dict(kwargs, mesh=make_mesh(data=jax.device_count()))
        sharded = generate(model, prompts, rng=jax.random.key(0), **mesh_kwargs)
        changed = int((sharded.tokens != out.tokens).any(axis=1).sum())  # float rounding of other shapes
        host_mesh = (jax.device_count(), _best_time(
            lambda: generate(model, prompts, rng=jax.random.key(1), **mesh_kwargs), args.repeats), changed)
    other_seconds = {}  # the same call with another response-cache chunk count, side by side
    for other in other_chunks:
        other_kwargs = dict(kwargs, response_chunks=other)
        generate(model, prompts, rng=jax.random.key(0), **other_kwargs)
        other_seconds[other] = _best_time(lambda: generate(model, prompts, rng=jax.random.key(1), **other_kwargs),
                                          args.repeats)
    long_tail = None
    if args.long_tail:
        settings = {"no compaction": ({}, prompts)}
        for shrink in args.compact_shrink:
            settings[f"compaction x{shrink} to {args.min_compact_rows} rows"] = (
                dict(min_compact_rows=args.min_compact_rows, compact_shrink=shrink), prompts)
        # Refill keeps as many rows in flight as the plain call runs, over more prompts: a rollout pass
        # of refill_factor times the prompts (the same prompts again; budgets drawn for all of them).
        for lanes in args.live_prompts:
            settings[f"refill, {lanes} lanes, {args.refill_factor}x prompts"] = (
                dict(live_prompts=lanes), prompts * args.refill_factor)
            for shrink in args.compact_shrink:
                settings[f"  + drain compaction x{shrink}"] = (
                    dict(live_prompts=lanes, min_compact_rows=args.min_compact_rows, compact_shrink=shrink),
                    prompts * args.refill_factor)
        budgets = long_tail_budgets(len(prompts), args.new_tokens)
        compiled_before = compile_count()
        plain = generate(model, prompts, rng=jax.random.key(2),
                         **dict(kwargs, max_new_tokens=budgets, max_new_tokens_cap=args.new_tokens))
        assert compile_count() == compiled_before, "the budgets must reuse the no-EOS program"
        long_tail = dict(useful_tokens={}, slots={}, seconds={}, no_eos_seconds={}, rows_changed={}, compile_s={},
                         budgets=budgets)
        for name, (on, call_prompts) in settings.items():
            budgets = long_tail_budgets(len(call_prompts), args.new_tokens)
            tail_kwargs = dict(kwargs, max_new_tokens=budgets, max_new_tokens_cap=args.new_tokens)
            compiled_before = compile_count()
            started = time.perf_counter()
            tail = generate(model, call_prompts, rng=jax.random.key(2), **tail_kwargs, **on)  # compiles if new
            if compile_count() > compiled_before:
                long_tail["compile_s"][name] = time.perf_counter() - started
            long_tail["useful_tokens"][name] = int(tail.lengths.sum())
            long_tail["slots"][name] = len(call_prompts) * args.group * args.new_tokens
            if call_prompts is prompts:  # the plain call of refill's longer prompt list would cost more than it
                long_tail["rows_changed"][name] = int((tail.tokens != plain.tokens).any(axis=1).sum())
            long_tail["seconds"][name] = _best_time(
                lambda: generate(model, call_prompts, rng=jax.random.key(3), **tail_kwargs, **on), args.repeats)
            long_tail["no_eos_seconds"][name] = seconds if not on else _best_time(
                lambda: generate(model, call_prompts, rng=jax.random.key(1), **kwargs, **on), args.repeats)

    graphdef, state = nnx.split(model)
    prefill_jit = jax.jit(lambda s, ids, lengths: prefill(nnx.merge(graphdef, s), ids, lengths))
    ids = jax.numpy.asarray(prompts, jax.numpy.int32)
    lengths = jax.numpy.full((len(prompts),), ids.shape[1], jax.numpy.int32)

    def prefill_time(rows_ids, rows_lengths):
        jax.block_until_ready(prefill_jit(state, rows_ids, rows_lengths))
        return _best_time(lambda: jax.block_until_ready(prefill_jit(state, rows_ids, rows_lengths)), args.repeats)

    shared = prefill_time(ids, lengths)
    per_row = prefill_time(jax.numpy.repeat(ids, args.group, 0), jax.numpy.repeat(lengths, args.group))
    folder = os.path.join(args.workdir, "bench-weights")
    save_pretrained(model, folder)
    param_bytes = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    return dict(seconds=seconds, other_seconds=other_seconds, host_mesh=host_mesh, compile_s=compile_s,
                prefill_shared_s=shared, prefill_per_row_s=per_row, kv_cache_bytes=out.kv_cache_bytes,
                weights=folder, cfg=model.cfg, param_bytes=param_bytes, long_tail=long_tail)


def bench_transformers(args, prompts, folder, threads):
    import torch
    from transformers import Qwen2ForCausalLM

    torch.set_num_threads(threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Qwen2ForCausalLM.from_pretrained(folder, attn_implementation="sdpa",
                                             dtype=getattr(torch, args.dtype)).eval().to(device)
    ids = torch.tensor(prompts, dtype=torch.long, device=device).repeat_interleave(args.group, dim=0)

    def run(new_tokens):
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                 top_k=0, top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 pad_token_id=0)
        assert out.shape == (ids.shape[0], ids.shape[1] + new_tokens)
        if device == "cuda":
            torch.cuda.synchronize()

    run(2)  # warm-up
    return _best_time(lambda: run(args.new_tokens), args.repeats)


def tunix_worker(args):
    """Runs inside the peers venv: Tunix's Qwen2 + Sampler at the bench shape, random weights."""
    import jax
    from flax import nnx
    from tunix.generate import sampler as tunix_sampler
    from tunix.models.qwen2 import model as tunix_qwen2

    class IntTokenizer:  # prompts are space-separated token ids; no BOS
        def encode(self, text, **_):
            return [int(t) for t in text.split()]

        def decode(self, ids, **_):
            return " ".join(str(int(t)) for t in ids)

        def bos_id(self):
            return 0

        def eos_id(self):
            return args.vocab - 1

        def pad_id(self):
            return 0

    cfg = tunix_qwen2.ModelConfig(num_layers=args.layers, vocab_size=args.vocab, embed_dim=args.hidden,
                                  hidden_dim=args.mlp, num_heads=args.heads, head_dim=args.hidden // args.heads,
                                  num_kv_heads=args.kv_heads, rope_theta=10000, norm_eps=1e-6,
                                  use_tied_embedding=True)
    model = tunix_qwen2.Qwen2(cfg, rngs=nnx.Rngs(0))
    cache = tunix_sampler.CacheConfig(cache_size=args.prompt_len + args.new_tokens, num_layers=args.layers,
                                      num_kv_heads=args.kv_heads, head_dim=args.hidden // args.heads)
    sampler = tunix_sampler.Sampler(model, IntTokenizer(), cache)
    with open(args.tunix_worker) as f:
        prompts = json.load(f)
    rows = [" ".join(map(str, p)) for p in prompts for _ in range(args.group)]

    def run(seed):
        out = sampler(rows, max_generation_steps=args.new_tokens, max_prompt_length=args.prompt_len,
                      temperature=1.0, top_p=1.0, eos_tokens=[args.vocab], seed=seed, pad_output=True)
        jax.block_until_ready(out.tokens)

    start = time.perf_counter()
    run(0)
    compile_s = time.perf_counter() - start
    seconds = min(_best_time(lambda: run(1), 1) for _ in range(args.repeats))
    print(json.dumps(dict(seconds=seconds, compile_s=compile_s)))


def bench_tunix(args, prompts, cfg):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(prompts, f)
    command = [args.tunix_python, os.path.abspath(__file__), f"--tunix_worker={f.name}",
               f"--group={args.group}", f"--prompt_len={args.prompt_len}", f"--new_tokens={args.new_tokens}",
               f"--repeats={args.repeats}", f"--layers={cfg.num_layers}", f"--vocab={cfg.vocab_size}",
               f"--hidden={cfg.hidden_size}", f"--mlp={cfg.intermediate_size}", f"--heads={cfg.num_heads}",
               f"--kv_heads={cfg.num_kv_heads}"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if result.returncode:
        return None, result.stderr.strip().splitlines()[-1] if result.stderr else f"exit {result.returncode}"
    return json.loads(result.stdout.strip().splitlines()[-1]), None


def add_call_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """The sampler call's shape: --preset, --prompts, --group, --prompt_len, --new_tokens (the CPU
    bench shape by default; also experiments/bench/decode_profile.py's)."""
    parser.add_argument("--preset", default="bench-30m")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt_len", type=int, default=64)
    parser.add_argument("--new_tokens", type=int, default=128)


def call_prompts(args) -> list[list[int]]:
    """The call's prompts for the shape in `args` (add_call_shape_arguments): seeded random token
    ids, [prompts, prompt_len], below the preset's vocabulary."""
    import numpy as np

    from greso_jax.models import PRESETS

    vocab = PRESETS[args.preset].vocab_size
    return np.random.default_rng(0).integers(1, vocab - 1, (args.prompts, args.prompt_len)).tolist()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_call_shape_arguments(parser)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--dtype", default="float32", help="compute and parameter dtype of both models")
    parser.add_argument("--peak_size", type=int, default=2048, help="matmul side for the measured peak")
    parser.add_argument("--bandwidth_mib", type=int, default=256, help="array size for the measured bandwidth")
    parser.add_argument("--long_tail", action="store_true", help="also time long-tailed per-prompt budgets")
    parser.add_argument("--min_compact_rows", type=int, default=8,
                        help="--long_tail: also time live-row compaction down to this many rows")
    parser.add_argument("--compact_shrink", type=float, nargs="*", default=[0.5, 0.75],
                        help="--long_tail: the compaction segment ratios to time side by side")
    parser.add_argument("--live_prompts", type=int, nargs="*", default=[16],
                        help="--long_tail: also time refill (continuous batching) with these lane counts")
    parser.add_argument("--refill_factor", type=int, default=4,
                        help="--long_tail: refill runs this many times --prompts through its lanes")
    parser.add_argument("--response_chunks", type=int, nargs="+", default=[4, 1],
                        help="response-cache chunks of greso_jax's calls; values after the first are timed "
                             "beside it on the no-EOS call")
    parser.add_argument("--host_devices", type=int, default=0,
                        help="on CPU, also time greso_jax with the host split into this many XLA devices, the "
                             "prompts data-parallel over them (0: the most cores that divide --prompts; 1: off)")
    parser.add_argument("--tunix_python", default="/tmp/venv-peers/bin/python")
    parser.add_argument("--skip_transformers", action="store_true")
    parser.add_argument("--workdir", default=tempfile.mkdtemp(prefix="bench-sampler-"))
    parser.add_argument("--tunix_worker", default="")
    for name in ("layers", "vocab", "hidden", "mlp", "heads", "kv_heads"):
        parser.add_argument(f"--{name}", type=int, default=0)
    args = parser.parse_args()
    if args.tunix_worker:
        return tunix_worker(args)

    import jax
    import numpy as np

    # More devices than divide the prompts would time padding rows.
    cores = os.cpu_count() or 1
    args.host_devices = args.host_devices or max(d for d in range(1, cores + 1) if args.prompts % d == 0)
    if args.host_devices > 1:  # before JAX's CPU client starts; a GPU or TPU backend ignores it
        jax.config.update("jax_num_cpu_devices", args.host_devices)

    prompts = call_prompts(args)
    tokens = args.prompts * args.group * args.new_tokens
    peak = matmul_peak_flops(args.peak_size, args.dtype)
    bandwidth = copy_bandwidth(args.bandwidth_mib)
    ours = bench_greso(args, prompts, args.preset)
    cfg = ours["cfg"]
    chunks = args.response_chunks[0]
    results = {"greso_jax": ours["seconds"]}
    results.update({f"  {n} chunk{'s' * (n > 1)}": s for n, s in ours["other_seconds"].items()})
    if ours["host_mesh"] is not None:
        results[f"  x{ours['host_mesh'][0]} devices"] = ours["host_mesh"][1]
    notes = []
    if not args.skip_transformers:
        results["transformers"] = bench_transformers(args, prompts, ours["weights"], args.threads)
    if args.tunix_python:
        tunix, error = bench_tunix(args, prompts, cfg)
        if tunix is None:
            notes.append(f"Tunix failed: {error}")
        else:
            results["tunix"] = tunix["seconds"]

    decode_s = ours["seconds"] - ours["prefill_shared_s"]
    mean_context = args.prompt_len + (args.new_tokens - 1) / 2
    decode_flops = args.prompts * args.group * (args.new_tokens - 1) * decode_flops_per_token(cfg, mean_context)
    rows = args.prompts * args.group
    decode_bound_s = sum(max(rows * decode_flops_per_token(cfg, args.prompt_len + slot) / peak,
                             decode_bytes_per_step(cfg, ours["param_bytes"], args.prompts, args.group,
                                                   args.prompt_len, slot) / bandwidth)
                         for slot in range(args.new_tokens - 1))
    print(f"shape: {args.preset}, {args.prompts} prompts x G={args.group} x {args.prompt_len}-token prompts x "
          f"{args.new_tokens} new tokens, temperature 1, no EOS, {args.dtype}, {args.threads} threads; "
          f"greso_jax with {chunks} response-cache chunk{'s' * (chunks > 1)}")
    fastest = min(s for name, s in results.items() if name == "greso_jax" or name.startswith("  "))
    print(f"{'sampler':<16}{'seconds':>10}{'tokens/s':>12}{'vs greso_jax':>14}{'vs its fastest':>16}")
    for name, seconds in results.items():
        print(f"{name:<16}{seconds:>10.2f}{tokens / seconds:>12.0f}{seconds / ours['seconds']:>13.2f}x"
              f"{seconds / fastest:>15.2f}x")
    if ours["host_mesh"] is not None:
        devices, _, changed = ours["host_mesh"]
        print(f"x{devices} devices: the same call with the host's cores as {devices} XLA CPU devices "
              f"(--host_devices), the prompts' groups data-parallel over them, {changed} of {rows} rows' tokens "
              f"differing from the one-device call's (float rounding); the other rows run on one device")
    print(f"greso_jax first call (compile + run): {ours['compile_s']:.1f} s")
    print(f"prefill with prefix sharing ({args.prompts} rows): {ours['prefill_shared_s'] * 1e3:.1f} ms; "
          f"without ({args.prompts * args.group} rows): {ours['prefill_per_row_s'] * 1e3:.1f} ms "
          f"({ours['prefill_per_row_s'] / ours['prefill_shared_s']:.1f}x)")
    per_row_cache = kv_bytes_per_token(cfg) * args.prompts * args.group * (args.prompt_len + args.new_tokens)
    print(f"KV cache: {ours['kv_cache_bytes'] / 2**20:.1f} MiB (a per-row cache of prompt + response would be "
          f"{per_row_cache / 2**20:.1f} MiB)")
    print(f"matmul peak ({args.peak_size}^3 {args.dtype}, same run): {peak / 1e9:.1f} GFLOP/s; decode: "
          f"{decode_flops / decode_s / 1e9:.1f} GFLOP/s = {decode_flops / decode_s / peak:.0%} of peak")
    print(f"copy bandwidth ({args.bandwidth_mib} MiB f32, same run): {bandwidth / 1e9:.1f} GB/s; decode roofline "
          f"bound {decode_bound_s:.3f} s vs measured {decode_s:.3f} s = {decode_bound_s / decode_s:.0%} of roofline")
    tail = ours["long_tail"]
    if tail is not None:
        budgets = tail["budgets"]
        print(f"long tail: budgets median {np.median(budgets):.0f}, mean {budgets.mean():.1f}, "
              f"{(budgets == args.new_tokens).mean():.0%} at {args.new_tokens}")
        print(f"{'greso_jax':<36}{'no-EOS s':>10}{'tokens/s':>10}{'useful/slots':>14}{'long-tail s':>12}"
              f"{'useful tok/s':>14}{'ratio':>7}{'compile s':>11}{'rows changed':>14}")
        for name, tail_s in tail["seconds"].items():
            no_eos_s = tail["no_eos_seconds"][name]
            slots = tail["slots"][name]
            useful = tail["useful_tokens"][name] / tail_s
            print(f"{name:<36}{no_eos_s:>10.2f}{slots / no_eos_s:>10.0f}"
                  f"{tail['useful_tokens'][name]:>7}/{slots:<6}{tail_s:>12.2f}{useful:>14.0f}"
                  f"{useful / (tokens / ours['seconds']):>6.2f}x{tail['compile_s'].get(name, float('nan')):>11.1f}"
                  f"{tail['rows_changed'].get(name, '-'):>14}")
        print("ratio: useful tokens/s over the plain no-EOS tokens/s (every setting runs the same rows per "
              "decode step: refill's lanes x G = the plain call's rows); compile s: the first call of that "
              "program (nan: compiled earlier); rows changed: rows whose tokens differ from the plain "
              "program's on the same call (float rounding of other matmul shapes; not run for refill's longer "
              "call, which tests/test_sampler.py checks)")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
