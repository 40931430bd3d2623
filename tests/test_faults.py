"""Hostile-but-realistic use of the CLIs and a run directory, with real processes, orbax checkpoints
and files. The fault cases of tests/fault_cases.py (bad configs, bad data, run-directory misuse,
damaged checkpoints and model folders, a full disk, hostile grader inputs) each run a CLI subprocess
and are slow; the tests below them check the same faults in-process or on one CLI call, fast:
two writers, incompatible resumes, damaged checkpoints, damaged safetensors headers, a full disk and
the user errors both CLIs must report in one line with exit status 2.

`python -m pytest -m slow tests/test_faults.py --fault-table=FILE` also writes the cases' markdown table."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

import trainer_config
from fault_cases import CASES
from fault_files import damage_file, flip_bytes, largest_file, rewrite_safetensors_header
from fault_harness import CONFIG, ENV, ROOT, Case, run_case, run_python
from greso_jax.run.checkpoint import CheckpointError, checkpoint_dir, choose_restore_step
from greso_jax.run.records import read_metrics
from greso_jax.run.run_dir import RunDirError, WorkdirLock, open_run_dir
from greso_jax.run.trainer import Trainer


def _cli(module, *args, timeout=300, **kwargs):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout,
                          env=ENV, cwd=ROOT, **kwargs)


def _train(workdir, *overrides, **kwargs):
    return _cli("greso_jax.train", f"--config={CONFIG}", f"--workdir={workdir}", *overrides, **kwargs)


def _one_line_error(result, *needles):
    """Exit status 2, and stderr's last line is the whole error: no traceback."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, line
    return line


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A finished two-step run (checkpoints 1 and 2 with manifests); tests and cases work on copies."""
    workdir = tmp_path_factory.mktemp("trained") / "run"
    config = trainer_config.get_config()
    config.train.num_steps = 2
    Trainer(config, str(workdir), log=lambda *a: None).run()
    (workdir / "run.lock").unlink(missing_ok=True)
    return workdir


@pytest.fixture
def run_copy(trained_run, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(trained_run, target)
    return target


# -------------------------------------------------------------------------- the fault cases


@pytest.fixture(scope="session")
def case_fixtures(trained_run, tmp_path_factory):
    """What every case starts from (fault_harness.Ctx): the two-step run, that run exported as a
    Hugging Face folder by the export CLI, and a good jsonl training file of 12 arithmetic rows."""
    from greso_jax.data.arith import make_arith_pools

    base = tmp_path_factory.mktemp("fault_fixtures")
    hf = base / "hf"
    exported = _cli("greso_jax.export", f"--workdir={trained_run}", f"--out={hf}")
    assert exported.returncode == 0, exported.stderr[-3000:]
    rows, _ = make_arith_pools(12, 0, 1)
    good = base / "good.jsonl"
    good.write_text("".join(json.dumps({"question": r.question, "answer": r.ground_truth}) + "\n" for r in rows))
    return dict(base_run=str(trained_run), hf=str(hf), good_jsonl=str(good))


def _case_id(case: Case) -> str:
    return f"{case.number:02d}-" + re.sub(r"\W+", "_", f"{case.category} {case.name}").strip("_")


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fault_case(fault_log, case_fixtures, case, tmp_path):
    row = run_case(case, case_fixtures, str(tmp_path))
    fault_log.add(row)
    assert row.verdict == "PASS", f"{row.outcome} (expected {case.expect}): {row.detail}\n{row.line}"


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


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_latest_step_is_reported_and_the_run_falls_back(run_copy, damage):
    target = largest_file(checkpoint_dir(str(run_copy)) + "/2")
    damage_file(target, damage)
    log = []
    run = open_run_dir(str(run_copy), trainer_config.get_config(), log=log.append)
    run.close()
    assert run.start_step == 1
    relative = os.path.relpath(target, checkpoint_dir(str(run_copy)))
    damaged = [line for line in log if "damaged" in line]
    assert len(damaged) == 1 and "checkpoint step 2 is damaged" in damaged[0] and relative in damaged[0]
    assert not os.path.exists(checkpoint_dir(str(run_copy)) + "/2")
    assert len(os.listdir(run_copy / "damaged_checkpoints")) == 1  # moved aside, not deleted


def test_no_intact_step_is_a_one_line_error_naming_step_and_file(run_copy):
    for step in (1, 2):
        flip_bytes(largest_file(checkpoint_dir(str(run_copy)) + f"/{step}"))
    with pytest.raises(CheckpointError, match=r"no intact checkpoint: step 2: 2/train_state/.*; step 1: 1/"):
        choose_restore_step(checkpoint_dir(str(run_copy)), log=lambda *a: None)
    result = _train(run_copy, "--config.train.num_steps=3")
    _one_line_error(result, "no intact checkpoint", "step 2: 2/train_state/", "SHA-256 mismatch")
    assert sorted(os.listdir(checkpoint_dir(str(run_copy)))) == ["1", "2"]  # nothing moved: nothing to fall back to
    evaluated = _cli("greso_jax.evaluate", f"--checkpoint={checkpoint_dir(str(run_copy))}/2")
    _one_line_error(evaluated, "step 2 is damaged", "train_state")


# -------------------------------------------------------------------------- case 5: model folders


def _tiny_hf_folder(path):
    from greso_jax.models import PRESETS, init_model, save_pretrained

    save_pretrained(init_model(PRESETS["tiny-test"], seed=0), str(path))
    return path / "model.safetensors"


def test_safetensors_offsets_are_validated(tmp_path):
    from greso_jax.models import from_pretrained
    from greso_jax.models.safetensors_io import SafetensorsError

    file = _tiny_hf_folder(tmp_path / "overlap")
    rewrite_safetensors_header(file, lambda h: h["model.layers.0.self_attn.q_proj.weight"].update(
        data_offsets=h["model.layers.1.self_attn.q_proj.weight"]["data_offsets"]))
    with pytest.raises(SafetensorsError, match=r"model\.safetensors: tensors .* overlap"):
        from_pretrained(str(tmp_path / "overlap"))
    file = _tiny_hf_folder(tmp_path / "truncated")
    os.truncate(file, os.path.getsize(file) - 1000)
    with pytest.raises(SafetensorsError, match=r"model\.safetensors: tensor \S+: data_offsets .* outside"):
        from_pretrained(str(tmp_path / "truncated"))
    file = _tiny_hf_folder(tmp_path / "size")
    rewrite_safetensors_header(file, lambda h: h["model.norm.weight"].update(shape=[3]))
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
    rewrite_safetensors_header(file, lambda h: h["model.layers.0.mlp.up_proj.weight"].update(
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

    flip_bytes(largest_file(checkpoint_dir(str(run_copy)) + "/2"))
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
    result = run_python(ROOT, ["-m", "greso_jax.export", f"--workdir={run_copy}", f"--out={out}"], fsize=20_000)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"export: writing {out} failed") and "File too large" in line, line
    assert not out.exists()


def test_a_fall_back_after_the_launch_was_recorded_records_the_step_resumed(run_copy):
    run = open_run_dir(str(run_copy), trainer_config.get_config(), log=lambda *a: None)
    try:
        assert run.start_step == 2
        run.record_launch(run.config)
        assert run.fall_back(2, "2/train_state: not finite") == 1
    finally:
        run.close()
    launches = [json.loads(line) for line in (run_copy / "configs" / "launches.jsonl").read_text().splitlines()]
    assert [r["step"] for r in launches] == [0, 1] and launches[-1]["fell_back_from"] == [2]
    assert launches[-1]["config"] == "configs/1.json" and not (run_copy / "configs" / "2.json").exists()
