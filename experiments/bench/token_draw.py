"""Next-token draw benchmark: `choose_tokens` per sampling mode beside the logits matmul that feeds it.

The draw runs once per decode step on [rows, vocab] float32 logits; at a Qwen2.5 vocabulary
(151,936 tokens) it reads as many bytes as the unembedding does, so it is timed here against the
[rows, hidden] x [hidden, vocab] logits matmul of the same shape, in the same run (the ratio is the
number to compare across machines).

    python experiments/bench/token_draw.py                                  # CPU: 128 x 4096, 512 x 151936
    python experiments/bench/token_draw.py --shapes 512x151936 --hidden 1536 --dtype bfloat16   # a GPU
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from greso_jax.sampling.token_sampling import SamplingMode, choose_tokens

MODES = {
    "sample (top_p 1, top_k 0)": SamplingMode(greedy=False, top_k=0, use_top_p=False),
    "greedy": SamplingMode(greedy=True, top_k=0, use_top_p=False),
    "top_k 50": SamplingMode(greedy=False, top_k=50, use_top_p=False),
    "top_p 0.7": SamplingMode(greedy=False, top_k=0, use_top_p=True),
    "top_k 50 + top_p 0.7": SamplingMode(greedy=False, top_k=50, use_top_p=True),
}


def best_ms(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["128x4096", "512x151936"], help="ROWSxVOCAB")
    parser.add_argument("--hidden", type=int, default=896, help="hidden size of the logits matmul (0.5B: 896)")
    parser.add_argument("--dtype", default="float32", help="dtype of the logits matmul's operands")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    print(f"device: {jax.devices()[0].device_kind}; logits matmul [rows, {args.hidden}] x [{args.hidden}, vocab] "
          f"in {args.dtype}, float32 out; best of {args.repeats}")
    print(f"{'rows x vocab':>14}  {'mode':<24} {'ms':>9}  {'vs logits matmul':>16}")
    for shape in args.shapes:
        rows, vocab = (int(x) for x in shape.split("x"))
        key = jax.random.key(0)
        hidden = jax.random.normal(key, (rows, args.hidden), jnp.dtype(args.dtype))
        unembed = jax.random.normal(jax.random.key(1), (args.hidden, vocab), jnp.dtype(args.dtype)) * 0.1
        matmul = jax.jit(lambda h, w: jnp.dot(h, w, preferred_element_type=jnp.float32))
        matmul_ms = best_ms(matmul, hidden, unembed, repeats=args.repeats)
        print(f"{shape:>14}  {'logits matmul':<24} {matmul_ms:9.2f}  {1.0:15.2f}x")
        logits = matmul(hidden, unembed)
        keys = jax.random.split(jax.random.key(2), rows)
        for name, mode in MODES.items():
            # Temperature and top_p are traced arguments, as in the sampler (not constants XLA could fold).
            draw = jax.jit(lambda lg, ks, t, p, mode=mode: choose_tokens(lg, ks, mode, t, p))
            ms = best_ms(draw, logits, keys, jnp.float32(1.0), jnp.float32(0.7), repeats=args.repeats)
            print(f"{shape:>14}  {name:<24} {ms:9.2f}  {ms / matmul_ms:15.2f}x")


if __name__ == "__main__":
    main()
