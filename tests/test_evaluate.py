"""Evaluation CLI: pass@k against hand-computed values, checkpoint resolution, end-to-end runs of a tiny
Hugging Face checkpoint on every real benchmark file, and a run workdir's checkpoint restored exactly."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import make_hf_checkpoint
from greso_jax.evaluate import (EvaluateError, average_metrics, benchmark_metrics, evaluate, resolve_checkpoint,
                                results_table)
from greso_jax.run.scoring import pass_at_k, summarize

ROOT = os.path.join(os.path.dirname(__file__), "..")
REAL_BENCHMARKS = ("math500", "aime24", "amc23", "minerva_math", "olympiadbench", "gaokao2023en", "gsm8k")


# ------------------------------------------------------------------------------ estimators


@pytest.mark.parametrize("n, c, k, expected", [
    (4, 0, 1, 0.0),
    (4, 1, 1, 0.25),
    (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
    (4, 3, 2, 1.0),  # fewer than k wrong samples: every k-subset holds a correct one
    (4, 4, 4, 1.0),
    (4, 1, 4, 1.0),
    (10, 3, 5, 11 / 12),  # 1 - C(7,5)/C(10,5) = 1 - 21/252
    (16, 1, 8, 0.5),  # 1 - C(15,8)/C(16,8) = 1 - 8/16
])
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


def test_pass_at_k_needs_k_samples():
    with pytest.raises(ValueError, match="pass@5"):
        pass_at_k(4, 1, 5)


def test_avg_at_k_and_pass_at_1_agree_and_pass_at_k_is_any_correct():
    correct = np.random.default_rng(0).random((50, 4)) < 0.3
    m = benchmark_metrics(correct, [1, 2, 4])
    assert m["avg@4"] == pytest.approx(correct.mean()) and m["pass@1"] == pytest.approx(m["avg@4"])
    assert m["pass@4"] == pytest.approx(correct.any(axis=1).mean())  # k = n: any of the samples correct
    assert m["pass@1"] <= m["pass@2"] <= m["pass@4"]
    assert m["num_problems"] == 50 and m["num_samples"] == 4 and m["correct_counts"] == correct.sum(1).tolist()
    hand = np.mean([1 - math.comb(4 - c, 2) / math.comb(4, 2) for c in correct.sum(1)])
    assert m["pass@2"] == pytest.approx(hand)
    assert summarize(correct, 2)["pass@2"] == pytest.approx(hand)


def test_average_is_unweighted_over_benchmarks():
    big = benchmark_metrics(np.ones((100, 2), bool), [2])
    small = benchmark_metrics(np.zeros((2, 2), bool), [2])
    assert average_metrics({"a": big, "b": small}) == {"avg@2": 0.5, "pass@1": 0.5, "pass@2": 0.5}


# ------------------------------------------------------------------------- tiny checkpoints

WORDS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]", "\n", "user", "assistant", "the", "a", "of",
         "is", "and", "to", "in", "find", "what", "answer", "math", "problem", "solve", "Please", "following",
         "step", "by", "final", "Return", "\\", "boxed", "{", "}", "$", "+", "-", "=", "(", ")", ".", ","]
WORDS += [str(d) for d in range(10)]


def write_tokenizer(folder, extra_tokens=()):
    """A real tokenizers WordLevel tokenizer.json with a chat template beside a checkpoint; returns the vocab."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(WORDS + list(extra_tokens))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("\n", behavior="isolated"),
                                                 pre_tokenizers.Whitespace()])
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.save(os.path.join(folder, "tokenizer.json"))
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": template, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f)
    return vocab


def make_constant_policy(folder, token_id, vocab=97, hidden=64):
    """A real Qwen2 checkpoint whose next token is `token_id` with probability ~1 at any temperature
    near 1: every layer writes zero into the residual stream, all embeddings are one vector e, and
    the unembedding row of `token_id` is a large multiple of the normalised e."""
    import torch

    model = make_hf_checkpoint(folder, vocab=vocab, hidden=hidden, inter=96, tied=False, seed=1)
    with torch.no_grad():
        e = torch.randn(hidden)
        model.model.embed_tokens.weight[:] = e
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        model.lm_head.weight.zero_()
        model.lm_head.weight[token_id] = 30.0 * e / e.pow(2).mean().sqrt()
    model.save_pretrained(folder, safe_serialization=True)


@pytest.fixture(scope="module")
def aime_golds(shared_data):
    from greso_jax.data.sources import load_benchmark
    from greso_jax.rewards.math import is_correct

    rows = load_benchmark("aime24", shared_data)
    gold0, gold1 = rows[0].ground_truth, rows[1].ground_truth
    assert not is_correct(f"\\boxed{{{gold0}}}", gold1)
    return gold0, gold1


@pytest.fixture(scope="module")
def constant_policy(tmp_path_factory, aime_golds):
    """Answers `\\boxed{<gold of AIME24 problem 0>}` to every prompt."""
    folder = tmp_path_factory.mktemp("constant_policy")
    answer_token = f"\\boxed{{{aime_golds[0]}}}"
    vocab = write_tokenizer(str(folder), extra_tokens=[answer_token])
    make_constant_policy(str(folder), vocab[answer_token])
    return str(folder)


@pytest.mark.slow  # one compile per benchmark's prompt bucket; the CLI test below covers aime24 in the fast suite
def test_every_real_benchmark_end_to_end(constant_policy, shared_data):
    """Two problems of each real benchmark file: loaded, prompted, sampled, graded, summarised. The
    policy answers AIME24 problem 0 and nothing else, so AIME24's scores are known exactly."""
    results = evaluate(constant_policy, benchmarks=list(REAL_BENCHMARKS), num_samples=2, max_new_tokens=3,
                       max_prompt_length=1024, data_dir=shared_data, max_problems=2, pass_k=[1, 2],
                       num_grading_workers=0, log=lambda *a: None)
    assert results["kind"] == "hf" and results["step"] is None
    assert set(results["benchmarks"]) == set(REAL_BENCHMARKS)
    for name, m in results["benchmarks"].items():
        assert m["num_problems"] == 2 and m["num_samples"] == 2 and m["prompts_too_long"] == 0, name
        assert m["pass@1"] == m["avg@2"]
    aime = results["benchmarks"]["aime24"]
    assert aime["correct_counts"] == [2, 0] and aime["avg@2"] == 0.5 and aime["pass@2"] == 0.5
    others = [m["avg@2"] for n, m in results["benchmarks"].items() if n != "aime24"]
    assert results["average"]["avg@2"] == pytest.approx((0.5 + sum(others)) / len(REAL_BENCHMARKS))
    table = results_table(results)
    assert "aime24" in table and table.splitlines()[-1].startswith("average")


def test_cli_writes_json_and_table(constant_policy, shared_data, tmp_path):
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "greso_jax.evaluate", f"--checkpoint={constant_policy}", "--benchmarks=aime24",
           "--num_samples=4", "--k=1,2,4", "--temperature=1.0", "--top_p=0.7", "--max_new_tokens=2",
           f"--data_dir={shared_data}", "--max_problems=3", "--grading_workers=0", f"--output={out}"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    saved = json.loads(out.read_text())
    aime = saved["benchmarks"]["aime24"]
    assert aime["correct_counts"][:2] == [4, 0] and aime["num_problems"] == 3
    assert saved["settings"]["top_p"] == 0.7 and saved["settings"]["pass_k"] == [1, 2, 4]
    assert {"avg@4", "pass@1", "pass@2", "pass@4"} <= set(saved["average"])
    assert "average" in result.stdout and "pass@4" in result.stdout


def test_bad_input_is_named(constant_policy, tmp_path):
    missing = subprocess.run([sys.executable, "-m", "greso_jax.evaluate", f"--checkpoint={tmp_path / 'nope'}"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert missing.returncode == 2 and "--checkpoint" in missing.stderr and "nope" in missing.stderr
    with pytest.raises(EvaluateError, match="math501"):
        evaluate(constant_policy, benchmarks=["math500", "math501"])
    with pytest.raises(EvaluateError, match="--k"):
        evaluate(constant_policy, num_samples=2, pass_k=[4])
    with pytest.raises(EvaluateError, match="eval.top_p"):
        evaluate(constant_policy, top_p=1.5)
    with pytest.raises(EvaluateError, match="data.prompt_template"):
        evaluate(constant_policy, template="alpaca")
    with pytest.raises(EvaluateError, match=r"--benchmarks aime24 \(data_dir"):
        evaluate(constant_policy, benchmarks=["aime24"], data_dir=str(tmp_path))


def test_resolve_checkpoint_forms(tmp_path):
    run = tmp_path / "run"
    from greso_jax.run.checkpoint import write_manifest

    for step in (10, 30):  # a step is finished once its folder has a readable metadata item and a manifest
        (run / "checkpoints" / str(step) / "meta").mkdir(parents=True)
        (run / "checkpoints" / str(step) / "meta" / "metadata").write_text("{}")
        write_manifest(str(run / "checkpoints" / str(step)))
    assert resolve_checkpoint(str(run)).step == 30
    assert resolve_checkpoint(str(run / "checkpoints" / "10")).step == 10
    hf = tmp_path / "hf"
    hf.mkdir()
    with pytest.raises(EvaluateError, match="neither a run workdir"):
        resolve_checkpoint(str(hf))
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"")
    assert resolve_checkpoint(str(hf)).kind == "hf"
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(EvaluateError, match="no finished checkpoint"):
        resolve_checkpoint(str(tmp_path / "empty"))


# -------------------------------------------------------------------------- run workdirs


def test_a_run_saved_before_a_field_existed_is_evaluated_at_its_default(tmp_path):
    """A field added after a run was saved cannot have been used by it: evaluation reads the step's
    saved config with that field at today's default instead of failing on the missing key."""
    from greso_jax.config import get_config
    from greso_jax.evaluate import run_config

    saved = json.loads(get_config().to_json_best_effort())
    del saved["sampling"]["compact_shrink"], saved["sampling"]["min_compact_rows"]
    saved["sampling"]["temperature"] = 0.7
    (tmp_path / "checkpoints" / "3" / "meta").mkdir(parents=True)
    (tmp_path / "checkpoints" / "3" / "meta" / "metadata").write_text(json.dumps({"step": 3, "config": saved}))
    (tmp_path / "config.json").write_text(get_config().to_json_best_effort())  # a later launch's: not step 3's
    config = run_config(resolve_checkpoint(str(tmp_path)), None)
    assert config.sampling.compact_shrink == 0.5 and config.sampling.min_compact_rows == 0
    assert config.sampling.temperature == 0.7


def test_a_step_without_a_saved_config_needs_one_given(tmp_path):
    from greso_jax.config import get_config
    from greso_jax.evaluate import run_config

    (tmp_path / "checkpoints" / "3" / "meta").mkdir(parents=True)
    (tmp_path / "checkpoints" / "3" / "meta" / "metadata").write_text(json.dumps({"step": 3}))
    source = resolve_checkpoint(str(tmp_path))
    with pytest.raises(EvaluateError, match=r"checkpoints/3 records no config; pass .* --config"):
        run_config(source, None)
    given = get_config()
    given.sampling.temperature = 0.5
    assert run_config(source, given).sampling.temperature == 0.5


def test_workdir_checkpoint_restores_the_trained_parameters(tmp_path):
    """A checkpoint written the way the trainer writes it (Learner.train_state + Checkpointer, the
    config in the step's metadata) is evaluated with exactly the parameters it holds."""
    import jax
    import jax.numpy as jnp

    from greso_jax.run.scoring import EvalSettings, sample_and_grade
    from greso_jax.run.checkpoint import Checkpointer
    from greso_jax.data.sources import load_benchmark
    from greso_jax.evaluate import TRAINER_EVAL_SEED_OFFSET, run_config
    from greso_jax.models import PRESETS, init_model
    from greso_jax.parallel import make_mesh
    from greso_jax.run.build import build_tokenizer, load_policy
    from greso_jax.rewards.pool import GradingPool
    from greso_jax.run.build import learner_from_config

    from experiments import arith_tiny

    config = arith_tiny.get_config("greso,quick")
    config.data.arith_num_train, config.data.arith_num_heldout = 200, 50
    trained = init_model(PRESETS["tiny"], seed=7)  # not what config.seed would initialise
    learner = learner_from_config(trained, config)
    workdir = tmp_path / "run"
    checkpointer = Checkpointer(str(workdir / "checkpoints"), async_save=False)
    checkpointer.save(3, train_state=learner.train_state(), selector_state={"history": np.zeros(4, np.int8)},
                      meta={"step": 3, "config": json.loads(config.to_json_best_effort())})
    checkpointer.close()

    source = resolve_checkpoint(str(workdir))
    assert (source.kind, source.step) == ("workdir", 3)
    mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
    restored = load_policy(run_config(source, None), mesh, workdir=source.path, step=source.step)
    ids = jnp.asarray(np.random.default_rng(0).integers(1, 20, (2, 9)), jnp.int32)
    np.testing.assert_array_equal(np.asarray(restored(ids)), np.asarray(trained(ids)))

    results = evaluate(str(workdir / "checkpoints" / "3"), benchmarks=["synthetic"], num_samples=2, max_problems=8,
                       num_grading_workers=0, mesh=mesh, log=lambda *a: None)
    assert results["step"] == 3 and results["benchmarks"]["synthetic"]["num_problems"] == 8
    rows = load_benchmark("synthetic", "", arith_num_heldout=50, arith_num_train=200,
                          arith_seed=config.data.arith_seed)[:8]
    with GradingPool(num_workers=0) as pool:
        settings = EvalSettings(
            template=config.data.prompt_template, num_samples=2, temperature=config.eval.temperature,
            top_p=config.eval.top_p, max_new_tokens=config.sampling.max_new_tokens,
            max_prompt_length=config.data.max_prompt_length, seed=config.seed + TRAINER_EVAL_SEED_OFFSET,
            prompt_buckets=tuple(config.sampling.prompt_length_buckets), row_buckets=tuple(config.sampling.row_buckets))
        direct = sample_and_grade(trained, build_tokenizer(config), rows, settings, pool=pool, mesh=mesh)
    assert results["benchmarks"]["synthetic"]["correct_counts"] == direct.sum(1).tolist()


@pytest.mark.slow
def test_cli_reproduces_the_in_training_evaluation(tmp_path):
    """A real two-step training run; evaluating its workdir with the defaults gives exactly the
    eval/* numbers the trainer logged at its last step (same code, seed, parameters)."""
    workdir = tmp_path / "run"
    train = [sys.executable, "-m", "greso_jax.train", "--config", "experiments/arith_tiny.py:quick",
             "--workdir", str(workdir), "--config.train.num_steps=2", "--config.train.warmstart_steps=30",
             "--config.eval.every_steps=0", "--config.eval.max_problems=24", "--config.data.arith_num_train=300",
             "--config.data.arith_num_heldout=48", "--config.train.train_batch_size=8", "--config.rl.mini_batch_size=8",
             "--config.rl.micro_batch_size=64", "--config.selection.rollout_batch_size=12",
             "--config.checkpoint.async_save=false", "--config.train.quiet=true"]
    result = subprocess.run(train, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    records = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
    logged = [r for r in records if "eval/synthetic/avg@4" in r][-1]
    assert logged["step"] == 2
    results = evaluate(str(workdir), num_grading_workers=0, log=lambda *a: None)
    assert results["step"] == 2 and results["benchmarks"]["synthetic"]["num_problems"] == 24
    synthetic = results["benchmarks"]["synthetic"]
    assert synthetic["avg@4"] == pytest.approx(logged["eval/synthetic/avg@4"], abs=1e-12)
    assert synthetic["pass@4"] == pytest.approx(logged["eval/synthetic/pass@4"], abs=1e-12)
