"""Shared fixtures: tiny random Hugging Face checkpoints built offline with transformers, the data
sets, a warm-started tiny policy, the selection simulator; the --fault-table option."""

import os
import sys

import pytest

from greso_jax.data.catalog import default_root, missing_files

# the data sets: $GRESO_SHARED_DATA, else ../shared/data beside the clone, else the fetch cache
_SIBLING_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
SHARED_DATA = os.environ.get("GRESO_SHARED_DATA") or (_SIBLING_DATA if os.path.isdir(_SIBLING_DATA) else default_root())


def pytest_addoption(parser):
    parser.addoption("--fault-table", default="", metavar="FILE",
                     help="write the markdown table of the fault cases that ran (tests/test_faults.py) to FILE")


@pytest.fixture(scope="session")
def fault_log(request):
    """The fault cases run in this session (fault_harness.CaseLog); with --fault-table FILE, their
    report is written there when the session ends."""
    from fault_harness import CaseLog, report

    log = CaseLog()
    yield log
    path = request.config.getoption("--fault-table")
    if path and log.rows:
        with open(path, "w") as f:
            f.write(report(log.rows, log.end - log.start, "python -m pytest " + " ".join(sys.argv[1:])))


def make_hf_checkpoint(path, *, vocab=97, hidden=64, inter=96, layers=2, heads=4, kv_heads=2, tied=False,
                       rope_theta=10000.0, seed=0):
    """Saves a random transformers Qwen2ForCausalLM (float32) to `path` and returns the torch model."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, tie_word_embeddings=tied,
                         rope_theta=rope_theta, max_position_embeddings=256, rms_norm_eps=1e-6,
                         use_sliding_window=False, attn_implementation="eager", torch_dtype="float32")
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # HF initialises biases to zero: randomise them so the bias path is tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path, safe_serialization=True)
    return model


@pytest.fixture(scope="session")
def shared_data():
    path = os.path.abspath(SHARED_DATA)
    if not os.path.isdir(path):
        pytest.skip(f"data sets not found at {path}: fetch them with `python -m greso_jax.data.fetch all` "
                    "(or point GRESO_SHARED_DATA at a folder in that layout, docs/data.md)")
    missing = missing_files(path)
    if missing:  # e.g. after `fetch paper` only: the data tests read every set of the catalog
        dest = "" if path == default_root() else f" --dest {path}"
        files = ", ".join(f for names in missing.values() for f in names)
        pytest.skip(f"data sets incomplete at {path} (missing {files}): fetch them with "
                    f"`python -m greso_jax.data.fetch {' '.join(missing)}{dest}`")
    return path


@pytest.fixture(scope="session")
def warm_policy(tmp_path_factory):
    """A tiny-test policy warm-started (supervised, cached) on the trainer tests' 24-prompt pool:
    it solves some prompts and fails others, so every strategy meets groups with variance."""
    import trainer_config
    from greso_jax.data.sources import load_source
    from greso_jax.parallel import make_mesh
    from greso_jax.run.build import build_policy, build_tokenizer

    config = trainer_config.get_config("greso")
    config.train.warmstart_steps, config.train.warmstart_learning_rate = 300, 3e-3
    workdir = tmp_path_factory.mktemp("warm_policy")
    d = config.data
    rows = load_source(source=d.source, arith_num_train=d.arith_num_train, arith_num_heldout=d.arith_num_heldout,
                       arith_seed=d.arith_seed)
    build_policy(config, build_tokenizer(config), rows, str(workdir), make_mesh(1, 1, 1), log=lambda *a: None)
    (folder,) = (workdir / "warmstart").iterdir()  # the cache's one keyed folder
    return str(folder)
