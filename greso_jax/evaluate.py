"""CLI: pass@1 / avg@k / pass@k of a checkpoint (a run's workdir step or a Hugging Face folder) on benchmark sets.

  python -m greso_jax.evaluate --checkpoint runs/arith_tiny --benchmarks synthetic
  python -m greso_jax.evaluate --checkpoint /models/Qwen2.5-Math-1.5B \
      --config experiments/qwen2_5_math_1_5b.py --data_dir ../shared/data --output results.json

Sampling and grading are `greso_jax.run.scoring.sample_and_grade` with the settings
`greso_jax.run.build.eval_settings` reads from the config, the code the trainer runs every
eval.every_steps; with the step's own config and seed (the defaults) a workdir step reproduces
the in-training evaluation of that step.
"""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports below: a signal meanwhile gives one line
    from greso_jax.core.startup import stop_quietly_until_started

    stop_quietly_until_started("evaluate")

import copy
import dataclasses
import json
import os
from typing import Sequence

import ml_collections
import numpy as np

from greso_jax.config import ConfigError, get_config, validate
from greso_jax.run.scoring import EVAL_SEED_OFFSET as TRAINER_EVAL_SEED_OFFSET
from greso_jax.run.scoring import EvalSettings, sample_and_grade, summarize
from greso_jax.run.checkpoint import CHECKPOINTS_FOLDER, CheckpointError
from greso_jax.run.build import eval_settings
from greso_jax.config.paper_setups import PAPER_BENCHMARKS
from greso_jax.run.run_dir import saved_step


class EvaluateError(ValueError):
    """A bad checkpoint path, config or flag; the message names it."""


@dataclasses.dataclass(frozen=True)
class CheckpointSource:
    kind: str  # "workdir" (orbax checkpoints of a run) or "hf" (a Hugging Face folder)
    path: str  # the workdir or the HF folder
    step: int | None = None  # workdir: the checkpoint step
    config: dict | None = None  # workdir: the config saved with the step (`run_dir.saved_step`), None if none


def resolve_checkpoint(path: str, log=print) -> CheckpointSource:
    """`workdir` (its newest intact step), `workdir/checkpoints/<step>` (checked against its manifest),
    or a Hugging Face folder."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise EvaluateError(f"--checkpoint: no such folder: {path}")
    checkpoints = os.path.join(path, CHECKPOINTS_FOLDER)
    name, parent = os.path.basename(path), os.path.dirname(path)
    is_step = name.isdigit() and os.path.basename(parent) == CHECKPOINTS_FOLDER
    if os.path.isdir(checkpoints) or is_step:
        workdir = os.path.dirname(parent) if is_step else path
        try:
            saved = saved_step(workdir, int(name) if is_step else None, log=log)
        except CheckpointError as e:
            raise EvaluateError(f"--checkpoint: {e}") from None
        if saved is None:
            raise EvaluateError(f"--checkpoint: {checkpoints} holds no finished checkpoint")
        return CheckpointSource("workdir", workdir, saved.step, saved.config)
    has_weights = any(os.path.exists(os.path.join(path, f))
                      for f in ("model.safetensors", "model.safetensors.index.json"))
    if os.path.exists(os.path.join(path, "config.json")) and has_weights:
        return CheckpointSource("hf", path)
    raise EvaluateError(f"--checkpoint: {path} is neither a run workdir (with checkpoints/), a "
                        "workdir/checkpoints/<step> folder, nor a Hugging Face folder (config.json + safetensors)")


def _hf_folder_defaults() -> ml_collections.ConfigDict:
    """Settings for a bare Hugging Face folder evaluated without --config: the paper's evaluation
    protocol (4 samples, temperature 1.0, top-p 0.7, GRESO prompt) on its six benchmarks."""
    c = get_config()
    c.model.tokenizer = "hf"
    c.data.prompt_template = "greso"
    c.data.max_prompt_length = 1536
    c.sampling.max_new_tokens = 2560
    c.eval.num_samples, c.eval.temperature, c.eval.top_p = 4, 1.0, 0.7
    c.eval.benchmarks = PAPER_BENCHMARKS
    return c


def run_config(source: CheckpointSource, config: ml_collections.ConfigDict | None) -> ml_collections.ConfigDict:
    """The config that describes the checkpoint: `config` if given, else the config its step was saved
    with (workdir) or the HF defaults. A HF checkpoint's folder becomes model.path."""
    if config is not None:
        config = copy.deepcopy(config)
    elif source.kind == "workdir":
        if source.config is None:
            raise EvaluateError(f"--checkpoint: {os.path.join(source.path, CHECKPOINTS_FOLDER, str(source.step))} "
                                "records no config; pass the run's experiment file with --config")
        config = ml_collections.ConfigDict(copy.deepcopy(source.config))
    else:
        config = _hf_folder_defaults()
    if source.kind == "hf":
        config.model.path = source.path
        config.model.tokenizer = "hf"
    return config


def _validate_for_evaluation(config: ml_collections.ConfigDict) -> None:
    """Validates every field evaluation uses; the training data file is not needed here."""
    checked = copy.deepcopy(config)
    checked.data.source, checked.data.path = "arith", ""
    try:
        validate(checked)
    except ConfigError as e:
        raise EvaluateError(str(e)) from None


@dataclasses.dataclass(frozen=True)
class EvalRequest:
    """What the CLI evaluates (which problems, which pass@k) and how it samples them."""

    benchmarks: tuple[str, ...]
    data_dir: str
    max_problems: int
    pass_k: tuple[int, ...]
    sampling: EvalSettings

    def record(self) -> dict:
        """The results file's "settings"."""
        s = self.sampling
        return {"benchmarks": self.benchmarks, "num_samples": s.num_samples, "temperature": s.temperature,
                "top_p": s.top_p, "max_new_tokens": s.max_new_tokens, "max_prompt_length": s.max_prompt_length,
                "template": s.template, "data_dir": self.data_dir, "max_problems": self.max_problems, "seed": s.seed,
                "pass_k": self.pass_k}


def request_from(config, *, benchmarks=None, num_samples=None, temperature=None, top_p=None,
                  max_new_tokens=None, max_prompt_length=None, template=None, data_dir=None, max_problems=None,
                  seed=None, pass_k=None, batch_prompts: int = 128) -> EvalRequest:
    """Flags override the config's eval section (None: keep the config's value); checked like the config.
    Sampling is `build.eval_settings` of the overridden config: the trainer's, flags aside."""
    c = copy.deepcopy(config)
    e = c.eval
    overrides = {"eval.num_samples": num_samples, "eval.temperature": temperature, "eval.top_p": top_p,
                 "eval.max_new_tokens": max_new_tokens, "data.max_prompt_length": max_prompt_length,
                 "data.prompt_template": template, "eval.data_dir": data_dir, "eval.max_problems": max_problems}
    for name, value in overrides.items():
        if value is not None:
            section, field = name.split(".")
            try:
                c[section][field] = value
            except TypeError as error:
                raise EvaluateError(f"{name}: {error}") from None
    if benchmarks is not None:
        e.benchmarks = tuple(benchmarks)
    _validate_for_evaluation(c)
    from greso_jax.data.sources import BENCHMARKS

    names = tuple(e.benchmarks)
    unknown = [b for b in names if b not in BENCHMARKS]
    if not names or unknown:
        raise EvaluateError(f"--benchmarks: {', '.join(unknown) or '(none)'} not among {', '.join(BENCHMARKS)}")
    if len(set(names)) != len(names):
        raise EvaluateError(f"--benchmarks: a benchmark is listed twice: {', '.join(names)}")
    ks = tuple(sorted(set(pass_k))) if pass_k else (e.num_samples,)
    if any(k < 1 or k > e.num_samples for k in ks):
        raise EvaluateError(f"--k: every k must be in [1, num_samples={e.num_samples}], got {list(ks)}")
    sampling = eval_settings(c, batch_prompts=batch_prompts, **({} if seed is None else {"seed": seed}))
    return EvalRequest(benchmarks=names, data_dir=e.data_dir, max_problems=e.max_problems, pass_k=ks,
                       sampling=sampling)


def benchmark_metrics(correct: np.ndarray, pass_k: Sequence[int]) -> dict:
    """correct bool [P, K] -> avg@K, pass@1 and pass@k for each k (unbiased), with per-problem counts."""
    out = {}
    for k in pass_k:
        out.update(summarize(correct, k))
    out["num_samples"] = int(correct.shape[1])
    out["correct_counts"] = correct.sum(axis=1).astype(int).tolist()
    return out


def average_metrics(per_benchmark: dict[str, dict]) -> dict[str, float]:
    """The unweighted mean over benchmarks of every rate (avg@K, pass@1, pass@k)."""
    rates = [k for k in next(iter(per_benchmark.values())) if k.startswith(("avg@", "pass@"))]
    return {k: float(np.mean([m[k] for m in per_benchmark.values()])) for k in rates}


def evaluate(checkpoint: str, *, config=None, benchmarks: Sequence[str] | None = None, num_samples: int | None = None,
             temperature: float | None = None, top_p: float | None = None, max_new_tokens: int | None = None,
             max_prompt_length: int | None = None, template: str | None = None, data_dir: str | None = None,
             max_problems: int | None = None, seed: int | None = None, pass_k: Sequence[int] | None = None,
             num_grading_workers: int | None = None, batch_prompts: int = 128, mesh=None, log=print) -> dict:
    """Loads `checkpoint`, samples and grades every benchmark; returns the results dict written as JSON.
    Every setting left None comes from the config (see `request_from`)."""
    from greso_jax.data.prompts import format_prompt
    from greso_jax.data.sources import DataError, load_eval_sets
    from greso_jax.parallel.sharding import mesh_from_config
    from greso_jax.run.build import build_tokenizer, load_policy
    from greso_jax.rewards.pool import GradingPool

    source = resolve_checkpoint(checkpoint, log=log)
    config = run_config(source, config)
    request = request_from(config, benchmarks=benchmarks, num_samples=num_samples, temperature=temperature,
                            top_p=top_p, max_new_tokens=max_new_tokens, max_prompt_length=max_prompt_length,
                            template=template, data_dir=data_dir, max_problems=max_problems, seed=seed,
                            pass_k=pass_k, batch_prompts=batch_prompts)
    settings = request.sampling
    if config.model.tokenizer == "hf" and not os.path.exists(os.path.join(config.model.path, "tokenizer.json")):
        raise EvaluateError(f"model.path: {config.model.path} has no tokenizer.json")
    try:
        rows = load_eval_sets(request.benchmarks, data_dir=request.data_dir, max_problems=request.max_problems,
                              arith_num_train=config.data.arith_num_train,
                              arith_num_heldout=config.data.arith_num_heldout, arith_seed=config.data.arith_seed,
                              arith_level_weights=tuple(config.data.get("arith_level_weights", ())))
    except DataError as e:
        raise EvaluateError(f"--benchmarks {e}") from None
    mesh = mesh if mesh is not None else mesh_from_config(config.mesh)
    tokenizer = build_tokenizer(config)
    try:
        model = load_policy(config, mesh, workdir=source.path if source.kind == "workdir" else "", step=source.step)
    except CheckpointError as e:
        raise EvaluateError(f"--checkpoint: {e}") from None
    log(f"evaluating {source.kind} {source.path}" + (f" step {source.step}" if source.step is not None else "")
        + f": {', '.join(f'{n} ({len(r)})' for n, r in rows.items())}, {settings.num_samples} samples each")
    workers = config.data.grading_workers if num_grading_workers is None else num_grading_workers
    per_benchmark = {}
    with GradingPool(num_workers=workers, timeout_s=config.data.grading_timeout_s) as pool:
        for name, benchmark_rows in rows.items():
            correct = sample_and_grade(model, tokenizer, benchmark_rows, settings, pool=pool, mesh=mesh)
            metrics = benchmark_metrics(correct, request.pass_k)
            metrics["prompts_too_long"] = sum(
                len(tokenizer.encode(format_prompt(row, settings.template, tokenizer))) > settings.max_prompt_length
                for row in benchmark_rows)
            per_benchmark[name] = metrics
            log(f"  {name}: avg@{settings.num_samples} {metrics[f'avg@{settings.num_samples}']:.4f}")
    return {"checkpoint": source.path, "kind": source.kind, "step": source.step,
            "settings": request.record(), "benchmarks": per_benchmark,
            "average": average_metrics(per_benchmark)}


def results_table(results: dict) -> str:
    from greso_jax.run.records import format_table

    rates = list(results["average"])
    rows = [{"benchmark": name, "problems": m["num_problems"], **{k: round(m[k], 4) for k in rates}}
            for name, m in results["benchmarks"].items()]
    rows.append({"benchmark": "average", "problems": sum(m["num_problems"] for m in results["benchmarks"].values()),
                 **{k: round(v, 4) for k, v in results["average"].items()}})
    return format_table(rows, ["benchmark", "problems", *rates])


def _define_flags():
    from absl import flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file(
        "config", None, "Experiment file (…/x.py[:variant]) describing the model, tokenizer and prompt; "
        "default: the config saved with the checkpoint's step, or the paper's evaluation settings for a Hugging "
        "Face folder.",
        lock_config=False)
    flags.DEFINE_string("checkpoint", None, "A run workdir (latest step), workdir/checkpoints/<step>, or a "
                        "Hugging Face folder (config.json, *.safetensors, tokenizer.json).")
    flags.DEFINE_list("benchmarks", None, "Comma-separated: math500, aime24, amc23, minerva_math, olympiadbench, "
                      "gaokao2023en, gsm8k, synthetic (default: the config's eval.benchmarks).")
    flags.DEFINE_integer("num_samples", None, "Responses per problem k (default: eval.num_samples).")
    flags.DEFINE_float("temperature", None, "Sampling temperature (default: eval.temperature; 0 = greedy).")
    flags.DEFINE_float("top_p", None, "Nucleus sampling (default: eval.top_p).")
    flags.DEFINE_integer("max_new_tokens", None, "Response length cap (default: eval.max_new_tokens, "
                         "else sampling.max_new_tokens).")
    flags.DEFINE_integer("max_prompt_length", None, "Longer prompts count as wrong (default: data.max_prompt_length).")
    flags.DEFINE_string("template", None, "Prompt template: plain, chat, greso, qwen_math (default: "
                        "data.prompt_template).")
    flags.DEFINE_string("data_dir", None, "Folder with <benchmark>/test.jsonl (default: eval.data_dir).")
    flags.DEFINE_integer("max_problems", None, "First N problems of each benchmark; 0 = all (default: "
                         "eval.max_problems).")
    flags.DEFINE_integer("seed", None, "Sampling seed (default: the trainer's evaluation seed, config.seed + "
                         f"{TRAINER_EVAL_SEED_OFFSET}).")
    flags.DEFINE_list("k", None, "pass@k values to report, each <= num_samples (default: num_samples).")
    flags.DEFINE_integer("grading_workers", None, "Grading processes (default: data.grading_workers).")
    flags.DEFINE_integer("batch_prompts", 128, "Problems per sampler call.")
    flags.DEFINE_string("output", "", "Write the results as JSON here.")
    flags.mark_flag_as_required("checkpoint")


def main(argv) -> None:
    from absl import flags

    del argv
    f = flags.FLAGS
    try:
        pass_k = [int(k) for k in f.k] if f.k else None
    except ValueError:
        raise EvaluateError(f"--k: expected integers, got {','.join(f.k)}") from None
    if f.output:  # found before the evaluation, not after it
        _check_output(f.output)
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint file it reads at INFO
    results = evaluate(f.checkpoint, config=f.config, num_grading_workers=f.grading_workers,
                       batch_prompts=f.batch_prompts, benchmarks=f.benchmarks, num_samples=f.num_samples,
                       temperature=f.temperature, top_p=f.top_p, max_new_tokens=f.max_new_tokens,
                       max_prompt_length=f.max_prompt_length, template=f.template, data_dir=f.data_dir,
                       max_problems=f.max_problems, seed=f.seed, pass_k=pass_k)
    print(results_table(results))
    if f.output:
        try:
            with open(f.output, "w") as out:
                json.dump(results, out, indent=2)
        except OSError as e:  # a full disk: no partial file is left
            if os.path.exists(f.output):
                os.remove(f.output)
            raise EvaluateError(f"--output: writing {f.output} failed ({e.strerror}); the results are "
                                "printed above") from None
        print(f"wrote {f.output}")


def _check_output(path: str) -> None:
    """Raises EvaluateError unless `path` names a file that can be written: not a folder, in a
    folder that exists (it is made) and takes writes (a read-only mount refuses root too)."""
    if os.path.isdir(path):
        raise EvaluateError(f"--output: {path} is a folder; name the JSON file to write")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise EvaluateError(f"--output: cannot make the folder {folder} ({e.strerror})") from None
    if not os.access(folder, os.W_OK):
        raise EvaluateError(f"--output: {folder} does not take writes (read-only or not writable)")


def run() -> None:
    from greso_jax.run import cli  # defines --verbose

    _define_flags()
    cli.run(main, user_errors=(EvaluateError,))  # user errors: one line, exit 2


if __name__ == "__main__":
    run()
