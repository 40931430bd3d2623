"""`greso_jax.export`: a trained run's policy as a Hugging Face folder that transformers (torch CPU)
loads without warnings and decodes greedily token for token like our sampler."""

import json
import logging
import os
import re
import sys
import types
import warnings

import jax
import numpy as np
import pytest

from greso_jax import export as export_mod
from greso_jax.run.build import rows_from_config
from greso_jax.run.build import build_tokenizer
from greso_jax.data.prompts import format_prompt
from greso_jax.models import safetensors_io
from greso_jax.sampling import generate
from greso_jax.run.trainer import Trainer

sys.path.insert(0, os.path.dirname(__file__))
import trainer_config  # noqa: E402


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, warm_policy):
    """Two RL steps on the warm-started tiny policy: real orbax checkpoints at steps 1 and 2."""
    workdir = str(tmp_path_factory.mktemp("run"))
    config = trainer_config.get_config(f"vanilla,{warm_policy}")
    config.train.num_steps = 2
    Trainer(config, workdir, log=lambda *a: None).run()
    return workdir, config


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _load_with_transformers(folder):
    """The model and tokenizer as transformers loads them, and every warning it raised doing so."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    handler = _Records()
    logging.getLogger("transformers").addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = AutoModelForCausalLM.from_pretrained(folder).eval()
            tokenizer = AutoTokenizer.from_pretrained(folder)
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    return model, tokenizer, handler.messages + [str(w.message) for w in caught]


def test_exported_policy_generates_greedily_like_ours(trained_run, tmp_path):
    import torch

    workdir, config = trained_run
    out = export_mod.export(workdir, str(tmp_path / "hf"))
    assert sorted(os.listdir(out)) == ["config.json", "generation_config.json", "model.safetensors",
                                       "tokenizer.json", "tokenizer_config.json"]
    hf_model, hf_tokenizer, messages = _load_with_transformers(out)
    assert messages == []
    assert hf_model.generation_config.eos_token_id == [1] and hf_model.generation_config.pad_token_id == 0

    ours = build_tokenizer(config)
    rows, _ = rows_from_config(config)
    texts = [format_prompt(row, config.data.prompt_template, ours) for row in rows[:8]]
    prompts = [ours.encode(t) for t in texts]
    assert [hf_tokenizer.encode(t) for t in texts] == prompts  # the exported tokenizer is the run's

    policy = export_mod.load_exported_policy(workdir, 2, config)
    sampled = generate(policy, prompts, num_samples=1, max_new_tokens=12, rng=jax.random.key(0), temperature=0.0,
                       eos_ids=ours.eos_ids, pad_id=ours.pad_id)
    ended = 0
    for i, prompt in enumerate(prompts):
        with torch.no_grad():  # stopping and padding come from the exported generation_config.json
            theirs = hf_model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                       do_sample=False, max_new_tokens=12)[0, len(prompt):].tolist()
        assert sampled.tokens[i, :sampled.lengths[i]].tolist() == theirs, f"prompt {i}: {texts[i]!r}"
        ended += theirs[-1] == 1
        assert hf_tokenizer.decode(theirs, skip_special_tokens=True) == ours.decode(theirs)
    assert ended, "the warm-started policy should end some answers with EOS"


def test_cli_exports_a_chosen_step_in_bfloat16(trained_run, tmp_path, capsys):
    import torch

    workdir, _ = trained_run
    out = tmp_path / "bf16"
    assert export_mod.main(["--workdir", workdir, "--step", "1", "--out", str(out), "--dtype", "bfloat16"]) == 0
    assert capsys.readouterr().out.strip() == f"exported {workdir} step 1 to {out}"
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    tensors = safetensors_io.open_tensors(str(out / "model.safetensors"))
    assert {str(t.dtype) for t in tensors.values()} == {"bfloat16"}
    step1 = export_mod.load_exported_policy(workdir, 1, export_mod.step_and_config(workdir, 1)[1])
    np.testing.assert_array_equal(np.asarray(tensors["model.embed_tokens.weight"]).astype(np.float32),
                                  np.asarray(step1.embed.value).astype("bfloat16").astype(np.float32))
    hf_model, _, messages = _load_with_transformers(str(out))
    assert messages == [] and hf_model.dtype == torch.bfloat16


def test_each_step_is_exported_and_evaluated_with_the_config_it_was_saved_with(trained_run, tmp_path):
    """A resume may change fields (checkpoint.allow_changes, eval.*): config.json then holds the latest
    launch's values, and each step is still described by the config saved in its own checkpoint."""
    import copy
    import shutil

    from greso_jax.evaluate import evaluate
    from greso_jax.run.records import read_metrics

    workdir, config = trained_run
    resumed = str(tmp_path / "run")
    shutil.copytree(workdir, resumed)
    changed = copy.deepcopy(config)
    changed.train.num_steps, changed.eval.num_samples = 3, 4
    changed.train.learning_rate = config.train.learning_rate * 2
    changed.checkpoint.allow_changes = "train.learning_rate"
    Trainer(changed, resumed, log=lambda *a: None).run()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["learning_rate"] == \
        changed.train.learning_rate

    for step, lr in ((2, config.train.learning_rate), (3, changed.train.learning_rate)):
        assert export_mod.step_and_config(resumed, step)[1].train.learning_rate == lr
    assert export_mod.step_and_config(resumed, None)[0] == 3
    assert export_mod.export(resumed, str(tmp_path / "hf2"), step=2)  # the step's own config builds its model

    quiet = {"num_grading_workers": 0, "log": lambda *a: None}
    assert evaluate(os.path.join(resumed, "checkpoints", "2"), **quiet)["settings"]["num_samples"] == 2
    latest = evaluate(resumed, **quiet)
    assert latest["step"] == 3 and latest["settings"]["num_samples"] == 4
    logged = read_metrics(resumed)[-1]
    assert logged["step"] == 3 and latest["benchmarks"]["synthetic"]["avg@4"] == logged["eval/synthetic/avg@4"]


def test_bad_input_exits_2_with_one_line(trained_run, tmp_path, capsys):
    workdir, _ = trained_run
    cases = [(["--workdir", str(tmp_path / "nope")], "--workdir: no such folder"),
             (["--workdir", str(tmp_path)], "not a greso_jax run folder"),
             (["--workdir", workdir, "--step", "7"], "--step: .*has no step 7 \\(steps: 1, 2\\)"),
             (["--workdir", workdir, "--dtype", "int8"], "--dtype: 'int8' is not one of")]
    for args, message in cases:
        assert export_mod.main(args + ["--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
        assert re.search(message, err), err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    assert export_mod.main(["--workdir", workdir, "--out", str(tmp_path / "full")]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err


def test_hf_runs_keep_their_tokenizer_files_and_generation_defaults(tmp_path):
    model_path = tmp_path / "model"
    model_path.mkdir()
    (model_path / "tokenizer.json").write_text("{}")
    (model_path / "chat_template.jinja").write_text("{{ messages }}")
    (model_path / "generation_config.json").write_text(json.dumps({"temperature": 0.7, "eos_token_id": 5}))
    out = tmp_path / "out"
    out.mkdir()
    export_mod._copy_hf_tokenizer(str(model_path), str(out))
    assert sorted(os.listdir(out)) == ["chat_template.jinja", "tokenizer.json"]
    config = trainer_config.get_config()
    config.model.path = str(model_path)
    run_tokenizer = types.SimpleNamespace(eos_ids=(7, 8), pad_id=7)
    assert export_mod._generation_config(config, run_tokenizer) == {"temperature": 0.7, "eos_token_id": [7, 8],
                                                                   "pad_token_id": 7}
    os.remove(model_path / "tokenizer.json")
    with pytest.raises(export_mod.ExportError, match="model.path: .* has no tokenizer.json"):
        export_mod._copy_hf_tokenizer(str(model_path), str(out))
