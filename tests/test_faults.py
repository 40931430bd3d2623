"""Hostile-but-realistic use of a run directory, with real processes, orbax checkpoints and files:
two writers, incompatible resumes, damaged checkpoints, a full disk, damaged model folders and the
user errors both CLIs must report in one line with exit status 2."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from greso_jax.run.checkpoint import CheckpointError, checkpoint_dir, choose_restore_step
from greso_jax.run.records import read_metrics
from greso_jax.run.run_dir import RunDirError, WorkdirLock, open_run_dir
from greso_jax.run.trainer import Trainer

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)
CONFIG = os.path.join(HERE, "trainer_config.py")
sys.path.insert(0, HERE)
import trainer_config  # noqa: E402

ENV = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)


def _cli(module, *args, timeout=300, **kwargs):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout,
                          env=ENV, cwd=ROOT, **kwargs)


# Sets RLIMIT_FSIZE, then execs the CLI: writing past the limit fails with EFBIG, like a full disk. A
# launcher instead of preexec_fn, so that no Python runs in a forked child of this multithreaded process.
_FILE_LIMIT_LAUNCHER = ("import os, resource, sys; limit = int(sys.argv[1]); "
                        "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
                        "os.execv(sys.executable, [sys.executable, '-m', *sys.argv[2:]])")


def _cli_with_file_limit(limit, module, *args, timeout=300):
    return subprocess.run([sys.executable, "-c", _FILE_LIMIT_LAUNCHER, str(limit), module, *args],
                          capture_output=True, text=True, timeout=timeout, env=ENV, cwd=ROOT)


def _train(workdir, *overrides, **kwargs):
    return _cli("greso_jax.train", f"--config={CONFIG}", f"--workdir={workdir}", *overrides, **kwargs)


def _one_line_error(result, *needles, background_noise=False):
    """Exit status 2, and stderr's last line is the whole error: no traceback. `background_noise`: orbax's
    tensorstore writer threads print their own "Event loop is closed" traces after a failed write;
    then only frames of our code are ruled out."""
    assert result.returncode == 2, result.stderr[-3000:]
    forbidden = f'File "{ROOT}' if background_noise else "Traceback"
    assert forbidden not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, line
    return line


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A finished two-step run (checkpoints 1 and 2 with manifests); tests work on copies."""
    workdir = tmp_path_factory.mktemp("trained") / "run"
    config = trainer_config.get_config()
    config.train.num_steps = 2
    Trainer(config, str(workdir), log=lambda *a: None).run()
    return workdir


@pytest.fixture
def run_copy(trained_run, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(trained_run, target)
    return target


def _largest_file(step_dir):
    files = [os.path.join(root, n) for root, _, names in os.walk(step_dir) for n in names if n != "manifest.json"]
    return max(files, key=os.path.getsize)


# -------------------------------------------------------------------------- case 1: one writer


def test_second_writer_refuses_naming_the_holder_and_a_stale_lock_is_taken_over(tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    lock = WorkdirLock(str(workdir), log=lambda *a: None)
    try:
        result = _train(workdir)
        _one_line_error(result, "in use by another run", f"pid {os.getpid()}")
        assert not (workdir / "config.json").exists() and not (workdir / "checkpoints").exists()
    finally:
        lock.release()
    # A holder killed without releasing: the kernel dropped its flock, the file still names it.
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from greso_jax.run.run_dir import WorkdirLock; "
                               f"WorkdirLock({str(workdir)!r}); print('held', flush=True); time.sleep(600)"],
                              env=ENV, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    warnings = []
    WorkdirLock(str(workdir), log=warnings.append).release()
    assert len(warnings) == 1 and f"pid {holder.pid}" in warnings[0] and "did not finish" in warnings[0]


@pytest.mark.slow
def test_two_runs_on_one_workdir_one_refuses(tmp_path):
    first = subprocess.Popen([sys.executable, "-m", "greso_jax.train", f"--config={CONFIG}", f"--workdir={tmp_path}",
                              "--config.train.num_steps=3"], env=ENV, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "run.lock").exists() or not (tmp_path / "run.lock").read_text():
        time.sleep(0.1)
    second = _train(tmp_path, "--config.train.num_steps=3", "--config.train.learning_rate=1e-3")
    _one_line_error(second, "in use by another run", f"pid {first.pid}")
    assert first.wait(timeout=600) == 0
    assert [r["step"] for r in read_metrics(str(tmp_path))] == [0, 1, 2, 3]
    assert json.loads((tmp_path / "config.json").read_text())["train"]["learning_rate"] == 3e-4


# -------------------------------------------------------------------------- case 2: compatible resumes


def test_resume_with_a_changed_field_refuses_before_writing_anything(run_copy):
    before = {p: p.read_bytes() for p in [run_copy / "config.json", *sorted((run_copy / "configs").iterdir())]}
    result = _train(run_copy, "--config.train.num_steps=3", "--config.rl.group_size=2")
    _one_line_error(result, "rl.group_size (4 -> 2)", "--config.checkpoint.allow_changes=rl.group_size")
    after = {p: p.read_bytes() for p in [run_copy / "config.json", *sorted((run_copy / "configs").iterdir())]}
    assert after == before
    for field, value in [("selection.strategy", "aero"), ("model.preset", "tiny"), ("data.arith_seed", 5),
                         ("seed", 4), ("selection.greso.delta_p", 0.5), ("selection.rollout_batch_size", 8),
                         ("data.reward_shaping", "greso")]:
        config = trainer_config.get_config()
        section, _, name = field.rpartition(".")
        node = config
        for part in filter(None, section.split(".")):
            node = node[part]
        node[name] = value
        with pytest.raises(RunDirError, match=f"different {field.replace('.', '[.]')} "):
            Trainer(config, str(run_copy), log=lambda *a: None)


def test_fields_that_may_change_pass_and_allowed_changes_are_recorded(run_copy):
    config = trainer_config.get_config()
    config.train.num_steps, config.eval.every_steps, config.checkpoint.keep = 3, 1, 5  # cadence: may change
    config.selection.aero.n_extra = 3  # a strategy this run does not use
    config.train.learning_rate = 1e-4
    with pytest.raises(RunDirError, match=r"train\.learning_rate \(0\.0003 -> 0\.0001\)"):
        Trainer(config, str(run_copy), log=lambda *a: None)
    config.checkpoint.allow_changes = "train.learning_rate"
    trainer = Trainer(config, str(run_copy), log=lambda *a: None)
    assert trainer.run_dir.start_step == 2
    trainer.run()
    assert [r["step"] for r in read_metrics(str(run_copy))] == [0, 1, 2, 3]
    assert json.loads((run_copy / "configs" / "0.json").read_text())["train"]["learning_rate"] == 3e-4
    assert json.loads((run_copy / "configs" / "2.json").read_text())["train"]["learning_rate"] == 1e-4
    launch = [json.loads(line) for line in (run_copy / "configs" / "launches.jsonl").read_text().splitlines()][-1]
    assert launch["step"] == 2 and launch["changed"]["train.learning_rate"] == [3e-4, 1e-4]


def test_num_steps_below_the_checkpoint_says_so_and_changes_nothing(run_copy):
    summary = (run_copy / "summary.json").read_bytes()
    config = trainer_config.get_config()
    config.train.num_steps = 1
    with pytest.raises(RunDirError, match=r"^train\.num_steps: 1 is below step 2"):
        Trainer(config, str(run_copy), log=lambda *a: None)
    assert (run_copy / "summary.json").read_bytes() == summary
    assert not (run_copy / "configs" / "2.json").exists()


# -------------------------------------------------------------------------- case 3: damaged checkpoints


def _flip_bytes(path, count=4):
    data = bytearray(open(path, "rb").read())
    for i in np.linspace(len(data) // 3, len(data) - 1, count).astype(int):
        data[i] ^= 0xFF
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_latest_step_is_reported_and_the_run_falls_back(run_copy, damage):
    target = _largest_file(checkpoint_dir(str(run_copy)) + "/2")
    if damage == "flip":
        _flip_bytes(target)
    elif damage == "truncate":
        os.truncate(target, os.path.getsize(target) // 2)
    else:
        os.remove(target)
    log = []
    run = open_run_dir(str(run_copy), trainer_config.get_config(), log=log.append)
    run.close()
    assert run.start_step == 1
    relative = os.path.relpath(target, checkpoint_dir(str(run_copy)))
    damaged = [line for line in log if "damaged" in line]
    assert len(damaged) == 1 and "checkpoint step 2 is damaged" in damaged[0] and relative in damaged[0]
    assert not os.path.exists(checkpoint_dir(str(run_copy)) + "/2")
    assert len(os.listdir(run_copy / "damaged_checkpoints")) == 1  # moved aside, not deleted


@pytest.mark.slow
def test_resume_after_flipped_bytes_continues_from_the_intact_step(run_copy):
    _flip_bytes(_largest_file(checkpoint_dir(str(run_copy)) + "/2"))
    result = _train(run_copy, "--config.train.num_steps=3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "checkpoint step 2 is damaged" in result.stdout and "resumed from step 1" in result.stdout
    assert [r["step"] for r in read_metrics(str(run_copy))] == [0, 1, 2, 3]
    assert choose_restore_step(checkpoint_dir(str(run_copy)), log=lambda *a: None) == 3


def test_no_intact_step_is_a_one_line_error_naming_step_and_file(run_copy):
    for step in (1, 2):
        _flip_bytes(_largest_file(checkpoint_dir(str(run_copy)) + f"/{step}"))
    with pytest.raises(CheckpointError, match=r"no intact checkpoint: step 2: 2/train_state/.*; step 1: 1/"):
        choose_restore_step(checkpoint_dir(str(run_copy)), log=lambda *a: None)
    result = _train(run_copy, "--config.train.num_steps=3")
    _one_line_error(result, "no intact checkpoint", "step 2: 2/train_state/", "SHA-256 mismatch")
    assert sorted(os.listdir(checkpoint_dir(str(run_copy)))) == ["1", "2"]  # nothing moved: nothing to fall back to
    evaluated = _cli("greso_jax.evaluate", f"--checkpoint={checkpoint_dir(str(run_copy))}/2")
    _one_line_error(evaluated, "step 2 is damaged", "train_state")


# -------------------------------------------------------------------------- full disk


@pytest.mark.slow
def test_a_full_disk_names_the_path_and_leaves_the_previous_step_intact(run_copy):
    limit = os.path.getsize(_largest_file(checkpoint_dir(str(run_copy)) + "/2")) // 2
    result = _cli_with_file_limit(limit, "greso_jax.train", f"--config={CONFIG}", f"--workdir={run_copy}",
                                  "--config.train.num_steps=5")
    line = _one_line_error(result, checkpoint_dir(str(run_copy)), "File too large")
    # Which save first crosses the limit depends on how the checkpoint's files fill up (step 3 or later):
    # the error names that step and the one before it, which must be the newest restorable step.
    failed = int(re.search(r"checkpoint step (\d+)", line).group(1))
    assert failed >= 3 and f"step {failed - 1} is intact" in line, line
    assert choose_restore_step(checkpoint_dir(str(run_copy)), log=lambda *a: None) == failed - 1
    again = _train(run_copy, f"--config.train.num_steps={failed}")
    assert again.returncode == 0 and f"resumed from step {failed - 1}" in again.stdout, again.stderr[-3000:]


# -------------------------------------------------------------------------- case 4 + 6: real-data runs


@pytest.mark.slow
def test_a_jsonl_run_with_default_evaluation_finishes_and_counts_dropped_and_bad_prompts(tmp_path):
    from greso_jax.data.arith import make_arith_pools

    train, _ = make_arith_pools(12, 0, 1)
    path = tmp_path / "good.jsonl"
    lines = [json.dumps({"question": r.question, "answer": r.ground_truth}) for r in train]
    lines.insert(3, json.dumps({"question": "1+1=" * 250_000, "answer": "2"}))  # a 1 MB prompt
    lines.insert(5, '{"question": "no answer"')  # a malformed row, skipped and counted
    path.write_text("\n".join(lines) + "\n")
    result = _train(tmp_path / "run", "--config.train.num_steps=2", "--config.data.source=jsonl",
                    f"--config.data.path={path}", "--config.data.skip_bad_rows=True")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["accuracy_before"] is None and summary["accuracy_after"] is None
    assert result.stdout.count("dropping prompts longer than data.max_prompt_length") == 1
    last = read_metrics(str(tmp_path / "run"))[-1]
    assert last["data/dropped_too_long"] >= 1 and last["data/bad_rows"] == 1
    assert (tmp_path / "run" / "plots").is_dir()


# -------------------------------------------------------------------------- case 5: model folders


def _tiny_hf_folder(path):
    from greso_jax.models import PRESETS, init_model, save_pretrained

    save_pretrained(init_model(PRESETS["tiny-test"], seed=0), str(path))
    return path / "model.safetensors"


def _rewrite_header(file, edit):
    from greso_jax.models.safetensors_io import read_header

    start, header = read_header(str(file))
    data = open(file, "rb").read()[start:]
    edit(header)
    blob = json.dumps(header).encode()
    open(file, "wb").write(len(blob).to_bytes(8, "little") + blob + data)


def test_safetensors_offsets_are_validated(tmp_path):
    from greso_jax.models import from_pretrained
    from greso_jax.models.safetensors_io import SafetensorsError

    file = _tiny_hf_folder(tmp_path / "overlap")
    _rewrite_header(file, lambda h: h["model.layers.0.self_attn.q_proj.weight"].update(
        data_offsets=h["model.layers.1.self_attn.q_proj.weight"]["data_offsets"]))
    with pytest.raises(SafetensorsError, match=r"model\.safetensors: tensors .* overlap"):
        from_pretrained(str(tmp_path / "overlap"))
    file = _tiny_hf_folder(tmp_path / "truncated")
    os.truncate(file, os.path.getsize(file) - 1000)
    with pytest.raises(SafetensorsError, match=r"model\.safetensors: tensor \S+: data_offsets .* outside"):
        from_pretrained(str(tmp_path / "truncated"))
    file = _tiny_hf_folder(tmp_path / "size")
    _rewrite_header(file, lambda h: h["model.norm.weight"].update(shape=[3]))
    with pytest.raises(SafetensorsError, match=r"tensor model\.norm\.weight: data_offsets span \d+ bytes"):
        from_pretrained(str(tmp_path / "size"))
    file = _tiny_hf_folder(tmp_path / "json")
    raw = bytearray(open(file, "rb").read())
    raw[8] = ord("[")  # the header's opening brace
    open(file, "wb").write(bytes(raw))
    with pytest.raises(SafetensorsError, match=r"model\.safetensors: the header is not valid JSON"):
        from_pretrained(str(tmp_path / "json"))


# -------------------------------------------------------------------------- user errors: one line, exit 2


def _bad_jsonl(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"question": "1+1=", "answer": "2"}\n{"question": "2+2=", "answer"\n')
    return path


def _non_utf8_jsonl(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"question": "1+1=", "answer": "2"}\n{"question": "caf\xe9 1+1=", "answer": "2"}\n')
    return path


def _overlapping_model(tmp_path):
    file = _tiny_hf_folder(tmp_path / "model")
    _rewrite_header(file, lambda h: h["model.layers.0.mlp.up_proj.weight"].update(
        data_offsets=h["model.layers.1.mlp.up_proj.weight"]["data_offsets"]))
    return tmp_path / "model"


def _raising_experiment(tmp_path):
    path = tmp_path / "raising.py"
    path.write_text("def get_config():\n    return undefined_name\n")
    return path


@pytest.mark.parametrize("make_args,needles", [
    (lambda t: ["--config=missing.py"], ["--config: cannot load missing.py"]),
    (lambda t: [f"--config={CONFIG}", "--config.rl.gruop_size=2"],
     ["--config.rl.gruop_size: no such config field", "did you mean rl.group_size?"]),
    pytest.param(lambda t: [f"--config={CONFIG}", "--config.trian.num_steps=3"],
                 ["--config.trian.num_steps: no such config field", "did you mean train.num_steps?"],
                 marks=pytest.mark.slow),
    (lambda t: [f"--config={_raising_experiment(t)}"], ["--config: ", "raising.py:2: NameError", "undefined_name"]),
    (lambda t: [f"--config={CONFIG}", "--config.mesh.data=3"], ["mesh.data*mesh.fsdp*mesh.tensor = 3"]),
    (lambda t: [f"--config={CONFIG}", "--config.data.source=jsonl", f"--config.data.path={_bad_jsonl(t)}"],
     ["bad.jsonl:2:"]),
    pytest.param(lambda t: [f"--config={CONFIG}", "--config.data.source=jsonl",
                            f"--config.data.path={_non_utf8_jsonl(t)}"], ["latin1.jsonl:2:", "utf-8"],
                 marks=pytest.mark.slow),
    (lambda t: [f"--config={CONFIG}", f"--config.model.path={_overlapping_model(t)}"],
     ["model.safetensors: tensors model.layers.", "overlap"]),
])
def test_train_cli_user_errors_are_one_line(tmp_path, make_args, needles):
    result = _cli("greso_jax.train", f"--workdir={tmp_path / 'run'}", *make_args(tmp_path))
    _one_line_error(result, *needles)
    verbose = _cli("greso_jax.train", f"--workdir={tmp_path / 'run2'}", *make_args(tmp_path), "--verbose")
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr


def test_a_workdir_that_is_a_file_is_a_one_line_error(tmp_path):
    (tmp_path / "afile").write_text("mine")
    _one_line_error(_train(tmp_path / "afile"), "--workdir", "afile", "is not a folder")
    assert (tmp_path / "afile").read_text() == "mine"


def test_skip_bad_rows_counts_a_non_utf8_line_and_says_so(tmp_path, caplog):
    from greso_jax.data.sources import load_jsonl

    rows = load_jsonl(str(_non_utf8_jsonl(tmp_path)), skip_bad_rows=True)
    assert len(rows) == 1 and rows.num_bad_rows == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "latin1.jsonl: skipped 1 bad row (data.skip_bad_rows); the first: line 2:" \
        in warnings[0], warnings


def test_evaluate_cli_user_errors_are_one_line(tmp_path):
    _one_line_error(_cli("greso_jax.evaluate", f"--checkpoint={tmp_path / 'absent'}"), "--checkpoint: no such folder")
    _one_line_error(_cli("greso_jax.evaluate", f"--checkpoint={tmp_path}", "--k=x"), "--k: expected integers")
    _one_line_error(_cli("greso_jax.evaluate", f"--checkpoint={tmp_path}", "--config=missing.py"),
                    "--config: cannot load missing.py")


# -------------------------------------------------------------------------- export of a damaged or full-disk run


def test_export_skips_a_damaged_latest_step_and_refuses_a_damaged_chosen_one(run_copy, tmp_path, capsys):
    from greso_jax import export as export_mod

    _flip_bytes(_largest_file(checkpoint_dir(str(run_copy)) + "/2"))
    before = sorted(os.listdir(checkpoint_dir(str(run_copy))))
    assert export_mod.main(["--workdir", str(run_copy), "--out", str(tmp_path / "hf")]) == 0
    out = capsys.readouterr().out
    assert "checkpoint step 2 is damaged" in out and f"exported {run_copy} step 1 to" in out
    assert export_mod.main(["--workdir", str(run_copy), "--step", "2", "--out", str(tmp_path / "hf2")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--step: step 2 is damaged" in err and "2/train_state/" in err, err
    assert not (tmp_path / "hf2").exists()
    assert sorted(os.listdir(checkpoint_dir(str(run_copy)))) == before  # export moves nothing


def test_export_on_a_full_disk_is_one_line_and_leaves_no_partial_folder(run_copy, tmp_path):
    out = tmp_path / "hf"
    # 20 kB: far below the tiny model's weights.
    result = _cli_with_file_limit(20_000, "greso_jax.export", f"--workdir={run_copy}", f"--out={out}")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"export: writing {out} failed") and "File too large" in line, line
    assert not out.exists()
