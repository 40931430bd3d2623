"""Benchmark: tokens/s of one GRPO optimiser update (forward + backward + AdamW) and its FLOP/s as a
fraction of this machine's measured float32 matmul peak, both measured in the same run.

    python experiments/bench/train_step.py [--presets tiny,bench-100m] [--rows 8] [--length 128] [--peak_size 2048]

Model FLOPs per update = tokens x (6 x parameters + 12 x layers x T x hidden) (forward + backward,
causal attention counted in full, recomputation not counted). The matmul peak is the best of
several jitted [n, n] x [n, n] float32 products.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from greso_jax.config import get_config
from greso_jax.run.build import learner_from_config
from greso_jax.models import PRESETS, count_parameters, init_model
from greso_jax.rl import make_train_batch


def matmul_peak_flops(n: int = 2048, repeats: int = 5) -> float:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    product = jax.jit(lambda x, y: x @ y)
    product(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        product(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def bench_preset(name: str, rows: int, length: int, repeats: int) -> dict:
    cfg = PRESETS[name]
    config = get_config()
    config.rl.micro_batch_size = rows
    config.sampling.max_new_tokens = length // 2
    model = init_model(cfg, seed=0)
    params = count_parameters(model)
    learner = learner_from_config(model, config)
    rng = np.random.default_rng(0)
    prompt_length, response_length = length - length // 2, length // 2
    batch = make_train_batch([list(rng.integers(1, cfg.vocab_size, prompt_length)) for _ in range(rows)],
                             rng.integers(1, cfg.vocab_size, (rows, response_length)),
                             np.full(rows, response_length), rng.normal(-np.log(cfg.vocab_size), 0.1,
                                                                       (rows, response_length)),
                             rng.normal(size=rows), pad_id=0, total_length=length)
    start = time.perf_counter()
    learner.update(batch, num_minibatches=1)  # compiles
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        learner.update(batch, num_minibatches=1)
        times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    tokens = rows * length
    flops = tokens * (6 * params + 12 * cfg.num_layers * length * cfg.hidden_size)
    return {"preset": name, "params_M": params / 1e6, "rows": rows, "length": length, "first_call_s": compile_s,
            "update_s": seconds, "tokens_per_s": tokens / seconds, "flops_per_s": flops / seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,bench-100m")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peak_size", type=int, default=2048,
                        help="matmul side for the peak (a GPU needs ~8192 to reach it)")
    args = parser.parse_args()
    peak = matmul_peak_flops(args.peak_size)
    print(f"devices: {jax.devices()}  measured f32 matmul peak: {peak / 1e9:.1f} GFLOP/s")
    print("| preset | params | rows x T | first call s | update s | tokens/s | GFLOP/s | fraction of peak |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.presets.split(","):
        r = bench_preset(name, args.rows, args.length, args.repeats)
        print(f"| {r['preset']} | {r['params_M']:.1f}M | {r['rows']} x {r['length']} | {r['first_call_s']:.1f} | "
              f"{r['update_s']:.3f} | {r['tokens_per_s']:.0f} | {r['flops_per_s'] / 1e9:.1f} | "
              f"{r['flops_per_s'] / peak:.2f} |", flush=True)
    print(f"matmul peak re-measured after: {matmul_peak_flops(args.peak_size) / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
