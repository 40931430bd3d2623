"""Decode profile: where one `generate` call's time goes, by part of the decode step.

Traces one call with `jax.profiler` and attributes every op to the named scope the sampler gives it
(`greso_jax.core.op_profile`): prefill, and per decode step qkv_projection, kv_cache_write, attention
(prompt and response caches), out_projection, mlp, logits (final norm + unembedding), token_draw;
`other` is the rest (the loop's bookkeeping, token writes, RNG keys, copies). Prints op time per
decode step by scope and how much of the wall time some op was running: on a GPU, the idle rest is
launch and loop overhead; on a CPU, op time over wall above 1 means threads ran ops side by side.
The call is also timed untraced, beside the traced one, to show what tracing costs.

XLA:GPU launches sequences of kernels (in recent versions whole loops) as command buffers (CUDA
graphs), and a trace may name their kernels only by the command buffer, so this script turns
command buffers off (`--xla_gpu_enable_command_buffer=` in XLA_FLAGS, unless
--keep_command_buffers): the split by scope is then complete, and the idle time includes launch
costs a graph would save (compare the untraced time with the sampler benchmark's).

    python experiments/bench/decode_profile.py                        # CPU: bench-30m, 16 x 8 x 64 x 128
    python experiments/bench/decode_profile.py --preset qwen2.5-0.5b --prompts 64 --prompt_len 128 \\
        --new_tokens 512 --dtype bfloat16                             # a GPU, the issue's shape
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from experiments.bench.sampler import add_call_shape_arguments, call_prompts

SCOPES = ("prefill", "qkv_projection", "kv_cache_write", "attention", "out_projection", "mlp", "logits",
          "token_draw")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_call_shape_arguments(parser)
    parser.add_argument("--dtype", default="float32", help="compute and parameter dtype")
    parser.add_argument("--response_chunks", type=int, default=4)
    parser.add_argument("--top_p", type=float, default=1.0)
    parser.add_argument("--top_k", type=int, default=0)
    parser.add_argument("--trace_dir", default="", help="where the trace goes (default: a temporary folder)")
    parser.add_argument("--keep_command_buffers", action="store_true",
                        help="leave XLA:GPU's command buffers on (their kernels then go unattributed)")
    args = parser.parse_args(argv)
    if not args.keep_command_buffers:  # before JAX starts its backend; a CPU ignores the GPU flag
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_enable_command_buffer=".strip()

    import jax

    from greso_jax.core import op_profile
    from greso_jax.models import PRESETS, init_model
    from greso_jax.sampling import generate, lower_generate

    model = init_model(PRESETS[args.preset].replace(dtype=args.dtype, param_dtype=args.dtype), seed=0)
    prompts = call_prompts(args)
    kwargs = dict(num_samples=args.group, max_new_tokens=args.new_tokens, temperature=1.0, top_p=args.top_p,
                  top_k=args.top_k, response_chunks=args.response_chunks)
    start = time.perf_counter()
    generate(model, prompts, rng=jax.random.key(0), **kwargs)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    generate(model, prompts, rng=jax.random.key(1), **kwargs)
    untraced_s = time.perf_counter() - start
    # The same program's optimised HLO, for its instruction names and scopes.
    hlo = lower_generate(model, prompts, rng=jax.random.key(1), **kwargs).compile().as_text()
    scope_of = op_profile.hlo_op_scopes(hlo, SCOPES)

    trace_dir = args.trace_dir or tempfile.mkdtemp(prefix="decode-profile-")
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        generate(model, prompts, rng=jax.random.key(1), **kwargs)
    result = op_profile.breakdown(op_profile.op_events(op_profile.load_trace_events(trace_dir), scope_of),
                                  scope_of)

    steps = args.new_tokens - 1  # the first token comes from the prefill's logits
    rows = args.prompts * args.group
    print(f"device: {jax.devices()[0].device_kind}; {args.preset}, {args.prompts} prompts x G={args.group} x "
          f"{args.prompt_len}-token prompts x {args.new_tokens} new tokens ({rows} rows), {args.dtype}, "
          f"top_p {args.top_p}, top_k {args.top_k}, {args.response_chunks} response-cache chunks")
    print(f"call: {untraced_s:.3f} s untraced; traced, from its first op to its last: {result.wall_us / 1e6:.3f} s "
          f"(first call, with compilation: {compile_s:.1f} s); trace in {trace_dir}\n")
    print(op_profile.format_breakdown(result, per=steps, per_name="decode step"))
    print(f"\n(prefill counts once per call: {result.op_us.get('prefill', 0.0) / 1e3:.2f} ms in all; "
          f"per decode step above it is spread over the {steps} steps)")


if __name__ == "__main__":
    main()
