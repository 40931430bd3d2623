"""The fault cases: one list of what a hostile-but-realistic user does to the CLIs (train, evaluate,
export, data.fetch) and what each CLI must do about it. Bad configs, bad data, run-directory misuse,
damaged checkpoints, damaged model folders, a full disk and hostile grader inputs; every case runs a
real subprocess on real files (tests/fault_harness.py runs and classifies them, tests/test_faults.py
runs them as slow tests).

A new case is one `Case` in `cases()`: its CLI and arguments, what it damages first (`setup`, on
copies of the shared two-step run or model folder: `copy_run`, `copy_model`), and what it expects:
a one-line error naming `needles`, or a run that finishes and passes `check`; `protect` names the
files that must come through byte-identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Callable

import fault_cases_lifecycle
import fault_cases_outside
import fault_checks as checks
from fault_files import (all_files, break_header_json, damage_file, largest_file, overlap_first_layers, read_lines,
                         rewrite_safetensors_header, stale_lock, step_dir, write, write_jsonl, write_parquet)
from fault_harness import CONFIG, ENV, EVAL_FAST, ROOT, Case, Ctx, Result, run_cli, run_python


def train(*overrides: str) -> Callable[[Ctx], list[str]]:
    """The train CLI on the tiny config in the case's run folder; overrides may name {c.dir} etc."""
    return lambda c: [f"--config={CONFIG}", f"--workdir={c.run or os.path.join(c.dir, 'run')}",
                      *[o.format(c=c) for o in overrides]]


def experiment(text: str) -> Callable[[Ctx], list[str]]:
    """The train CLI on an experiment file of the user's holding `text`."""
    return lambda c: [f"--config={write(os.path.join(c.dir, 'exp.py'), text)}", f"--workdir={c.dir}/run"]


def good(c: Ctx) -> list[str]:
    """The lines of the shared good jsonl training file."""
    return read_lines(c.good_jsonl)


def everything(c: Ctx) -> list[str]:
    return all_files(c.run)


def history(c: Ctx) -> list[str]:
    """What a resume may not touch: the first launch's config and step 1."""
    return [os.path.join(c.run, "configs", "0.json"), *all_files(step_dir(c.run, 1))]


def damage_latest(how: str) -> Callable[[Ctx], None]:
    """Damages step 2's largest file (fault_files.damage_file); c.extra["damaged"] names it."""
    def setup(c: Ctx) -> None:
        target = largest_file(step_dir(c.run, 2))
        c.extra["damaged"] = os.path.relpath(target, os.path.join(c.run, "checkpoints"))
        damage_file(target, how)
    return setup


def damage_all(c: Ctx) -> None:
    for step in (1, 2):
        damage_file(largest_file(step_dir(c.run, step)), "flip")


def two_writers(c: Ctx) -> Result:
    """A second train CLI on a workdir while a first one holds it; c.extra: the first's pid and status."""
    first = subprocess.Popen([sys.executable, "-m", "greso_jax.train", f"--config={CONFIG}", f"--workdir={c.run}",
                              "--config.train.num_steps=3"], env=ENV, cwd=c.dir, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    lock = os.path.join(c.run, "run.lock")
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(lock) and open(lock).read()):
        time.sleep(0.1)
    c.extra["first_pid"] = first.pid
    result = run_cli(c, "greso_jax.train", [f"--config={CONFIG}", f"--workdir={c.run}",
                                            "--config.train.num_steps=3", "--config.train.learning_rate=1e-3"])
    try:
        first.wait(timeout=600)
    except subprocess.TimeoutExpired:
        first.kill()
        first.wait()
    c.extra["first_rc"] = first.returncode
    return result


# ---- the grader: one subprocess per input, grade() after warm_up(), a canary file that must never appear

GRADER_CODE = textwrap.dedent("""
    import json, sys, time
    from greso_jax.rewards.math import grade, warm_up
    text, timeout_s = json.loads(sys.stdin.read())
    warm_up()
    control = grade("\\\\boxed{1}", "1", timeout_s=timeout_s)
    start = time.monotonic()
    g = grade(text, "1", timeout_s=timeout_s)
    print(json.dumps({"reward": g.reward, "correct": g.correct, "status": g.status,
                      "seconds": time.monotonic() - start, "control": control.correct}))
""")
GRADER_TIMEOUT_S = 2.0
GRADER_SLACK_S = 0.5


def hostile_inputs(canary: str) -> list[tuple[str, str]]:
    """(label, response) pairs graded against the gold answer 1; code in them would touch `canary`."""
    code = f"__import__('os').system('touch {canary}')"
    return [
        ("power tower 9^9^9^9", "\\boxed{9^{9^{9^{9}}}}"),
        ("2^(2^40)", "\\boxed{2^{2^{40}}}"),
        ("(10^10)!", "\\boxed{(10^{10})!}"),
        ("100000!", "\\boxed{100000!}"),
        ("((10^6)!)!", "\\boxed{((10^{6})!)!}"),
        ("(1/1000)^-100000", "\\boxed{(\\frac{1}{1000})^{-100000}}"),
        ("1 MB of 'x'", "x" * 1_000_000),
        ("sum of 50,000 ones", "\\boxed{" + "1+" * 50_000 + "1}"),
        ("10,000 nested braces", "{" * 10_000 + "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}"),
        ("10,000 unclosed \\boxed{", "\\boxed{" * 10_000),
        ("150 nested \\sqrt", "\\boxed{" + "\\sqrt{" * 150 + "2" + "}" * 151),
        ("latex macro bomb \\def\\x{\\x\\x}", "\\boxed{\\def\\x{\\x\\x}\\x}"),
        ("boxed __import__('os').system", f"\\boxed{{{code}}}"),
        ("boxed open(...).write", f"\\boxed{{open('{canary}', 'w').write('x')}}"),
        ("'The answer is' __import__", f"The answer is {code}"),
        ("boxed exec(...)", f"\\boxed{{exec(\"import os; os.system('touch {canary}')\")}}"),
        ("\\text{__import__...}", f"\\boxed{{\\text{{{code}}}}}"),
    ]


def grade_case(text_of: Callable[[str], str]) -> Callable[[Ctx], Result]:
    """Grades `text_of(canary path)` in a child process; c.extra["canary"] is that path."""
    def run(c: Ctx) -> Result:
        canary = os.path.join(c.dir, "canary")
        c.extra["canary"] = canary
        return run_python(ROOT, ["-c", GRADER_CODE], stdin=json.dumps([text_of(canary), GRADER_TIMEOUT_S]),
                          timeout=60)
    return run


def check_grade(c: Ctx, r: Result) -> list[str]:
    """Within the deadline, not correct, the control graded correct, and no code ran."""
    try:
        g = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return ["no grade printed"]
    r.note = f"reward {g['reward']} ({g['status']}) in {g['seconds']:.2f} s"
    problems = []
    if g["seconds"] > GRADER_TIMEOUT_S + GRADER_SLACK_S:
        problems.append(f"took {g['seconds']:.2f} s (deadline {GRADER_TIMEOUT_S} s)")
    if g["correct"] or g["reward"] not in (0.0, 0.1):
        problems.append("graded a wrong answer as correct")
    if not g["control"]:
        problems.append("the control \\boxed{1} was not graded correct")
    if os.path.exists(c.extra["canary"]):
        problems.append("CODE RAN: the canary file exists")
    return problems


# ---- the list

def cases() -> list[Case]:
    """Every case, numbered in table order."""
    T, E, X, F = "greso_jax.train", "greso_jax.evaluate", "greso_jax.export", "greso_jax.data.fetch"
    cfg, data, rund, ckpt, model, disk = ("bad config", "bad data", "run directory", "damaged checkpoint",
                                          "damaged model folder", "full disk")
    jsonl = ["--config.data.source=jsonl"]

    def jpath(name):
        return f"--config.data.path={{c.dir}}/{name}"

    def eval_hf(c):
        return [f"--checkpoint={c.model}", f"--config={CONFIG}", *EVAL_FAST]

    out = [
        # ------------------------------------------------------------------ bad configs
        Case(cfg, "config file missing", T, lambda c: ["--config=missing.py", f"--workdir={c.dir}/run"],
             needles=["--config: cannot load missing.py"]),
        Case(cfg, "config file with a syntax error", T,
             experiment("def get_config(:\n    pass\n"), needles=["exp.py:1"]),
        Case(cfg, "config file whose get_config raises", T,
             experiment("def get_config():\n    return undefined_name\n"),
             needles=["--config: ", "exp.py:2", "undefined_name"]),
        Case(cfg, "unknown field (typo) with did-you-mean", T, train("--config.rl.gruop_size=2"),
             needles=["--config.rl.gruop_size: no such config field", "did you mean rl.group_size?"]),
        Case(cfg, "unknown section (typo)", T, train("--config.trian.num_steps=3"),
             needles=["no such config field trian.num_steps", "did you mean train.num_steps?"]),
        Case(cfg, "wrong type: text for an int", T, train("--config.rl.group_size=four"),
             needles=["rl.group_size"]),
        Case(cfg, "wrong type: 2.5 for an int", T, train("--config.train.num_steps=2.5"),
             needles=["train.num_steps"]),
        Case(cfg, "wrong type: 'maybe' for a bool", T, train("--config.checkpoint.async_save=maybe"),
             needles=["checkpoint.async_save"]),
        Case(cfg, "out of range: group_size 0", T, train("--config.rl.group_size=0"), needles=["rl.group_size"]),
        Case(cfg, "out of range: negative learning rate", T, train("--config.train.learning_rate=-0.001"),
             needles=["train.learning_rate"]),
        Case(cfg, "out of range: top_p 1.5", T, train("--config.sampling.top_p=1.5"), needles=["sampling.top_p"]),
        Case(cfg, "cross-field: mini-batch 3 does not divide batch 4", T, train("--config.rl.mini_batch_size=3"),
             needles=["rl.mini_batch_size", "must divide"]),
        Case(cfg, "cross-field: warm-start band high without low", T,
             train("--config.train.warmstart_accuracy_high=0.5"), needles=["train.warmstart_accuracy_high"]),
        Case(cfg, "strategy 'oracle' for training", T, train("--config.selection.strategy=oracle"),
             needles=["selection.strategy", "simulation-only"]),
        Case(cfg, "unknown strategy 'gerso'", T, train("--config.selection.strategy=gerso"),
             needles=["selection.strategy", "gerso"]),
        Case(cfg, "unknown model preset", T, train("--config.model.preset=tiny-tset"), needles=["model.preset"]),
        Case(cfg, "mesh that does not fit the devices (data=3 on 1 CPU)", T, train("--config.mesh.data=3"),
             needles=["mesh.data*mesh.fsdp*mesh.tensor = 3"]),
        Case(cfg, "model.path folder that does not exist", T, train("--config.model.path={c.dir}/nope"),
             needles=["model.path", "nope"]),
        Case(cfg, "checkpoint.allow_changes names no field", T,
             train("--config.checkpoint.allow_changes=rl.gruop_size"),
             needles=["checkpoint.allow_changes", "did you mean 'rl.group_size'"]),
        Case(cfg, "--workdir missing", T, lambda c: [f"--config={CONFIG}"], needles=["workdir"]),
        Case(cfg, "--workdir is a file", T,
             lambda c: [f"--config={CONFIG}", f"--workdir={write(c.dir + '/afile', 'x')}"],
             needles=["--workdir", "afile", "not a folder"]),
        Case(cfg, "data.source=jsonl without data.path", T, train(*jsonl), needles=["data.path", "required"]),
        Case(cfg, "data.level_field on the arith source", T, train("--config.data.level_field=level"),
             needles=["data.level_field", "arith"]),
        # ------------------------------------------------------------------ bad data
        Case(data, "training file missing", T, train(*jsonl, jpath("absent.jsonl")),
             needles=["data.path", "absent.jsonl"]),
        Case(data, "data.path is a folder", T, train(*jsonl, "--config.data.path={c.dir}"),
             needles=["{dir}"]),
        Case(data, "malformed jsonl row (line 2)", T, train(*jsonl, jpath("bad.jsonl")),
             setup=lambda c: write_jsonl(c.dir, "bad.jsonl", [good(c)[0], '{"question": "2+2=", "answer"',
                                                     *good(c)[1:]]),
             needles=["bad.jsonl:2:"]),
        Case(data, "non-UTF-8 line (line 3)", T, train(*jsonl, jpath("latin1.jsonl")),
             setup=lambda c: write_jsonl(c.dir, "latin1.jsonl", [*good(c)[:2], b'{"question": "caf\xe9 1+1=", '
                                                        b'"answer": "2"}', *good(c)[2:]]),
             needles=["latin1.jsonl:3:", "utf-8"]),
        Case(data, "non-UTF-8 line with data.skip_bad_rows=true", T,
             train(*jsonl, jpath("latin1.jsonl"), "--config.data.skip_bad_rows=true", "--config.train.num_steps=2"),
             setup=lambda c: write_jsonl(c.dir, "latin1.jsonl", [*good(c)[:2], b'{"question": "caf\xe9 1+1=", '
                                                        b'"answer": "2"}', *good(c)[2:]]),
             expect="ok", check=checks.bad_row_skipped),
        Case(data, "row without a gold answer (line 4)", T, train(*jsonl, jpath("nogold.jsonl")),
             setup=lambda c: write_jsonl(c.dir, "nogold.jsonl", [*good(c)[:3], '{"question": "5+5="}',
                                                        *good(c)[3:]]),
             needles=["nogold.jsonl:4:"]),
        Case(data, "row that is a JSON list (line 1)", T, train(*jsonl, jpath("list.jsonl")),
             setup=lambda c: write_jsonl(c.dir, "list.jsonl", ['["1+1=", "2"]', *good(c)]),
             needles=["list.jsonl:1:", "JSON object"]),
        Case(data, "data.level_field that no row has (typo)", T,
             train(*jsonl, jpath("good.jsonl"), "--config.data.level_field=levle"),
             setup=lambda c: write_jsonl(c.dir, "good.jsonl", good(c)),
             needles=["good.jsonl", "no row has the field data.level_field='levle'"]),
        Case(data, "empty training file", T, train(*jsonl, jpath("empty.jsonl")),
             setup=lambda c: write(c.dir + "/empty.jsonl", ""), needles=["empty.jsonl", "no usable prompts"]),
        Case(data, "parquet with the wrong columns", T,
             train("--config.data.source=parquet", jpath("wrong.parquet")),
             setup=lambda c: write_parquet(c.dir + "/wrong.parquet", [{"question": "1+1=", "answer": "2"}] * 4),
             needles=["wrong.parquet", "row 1", "prompt"]),
        Case(data, "parquet file that is not parquet", T,
             train("--config.data.source=parquet", jpath("junk.parquet")),
             setup=lambda c: write(c.dir + "/junk.parquet", b"PAR1 this is not parquet" * 10),
             needles=["junk.parquet", "not a readable parquet file"]),
        Case(data, "a 1 MB prompt is dropped, logged once, counted", T,
             train(*jsonl, jpath("long.jsonl"), "--config.train.num_steps=2"),
             setup=lambda c: write_jsonl(c.dir, "long.jsonl", [*good(c)[:3],
                                                      json.dumps({"question": "1+1=" * 250_000, "answer": "2"}),
                                                      *good(c)[3:]]),
             expect="ok", check=checks.long_prompt_dropped),
        # ------------------------------------------------------------------ run directory
        Case(rund, "two writers on one workdir", T, None, custom=two_writers, copy_run=False,
             setup=lambda c: (os.makedirs(c.dir + "/run"), setattr(c, "run", c.dir + "/run")) and None,
             needles=lambda c: ["in use by another run", f"pid {c.extra['first_pid']}"],
             check=checks.first_writer_unharmed, timeout=900),
        Case(rund, "resume with group_size 4 -> 2", T, train("--config.train.num_steps=3", "--config.rl.group_size=2"),
             copy_run=True, protect=everything,
             needles=["rl.group_size (4 -> 2)", "--config.checkpoint.allow_changes=rl.group_size"]),
        Case(rund, "resume with strategy greso -> aero", T,
             train("--config.train.num_steps=3", "--config.selection.strategy=aero"),
             copy_run=True, protect=everything, needles=["selection.strategy ('greso' -> 'aero')"]),
        Case(rund, "resume with another model preset", T,
             train("--config.train.num_steps=3", "--config.model.preset=tiny"),
             copy_run=True, protect=everything, needles=["model.preset ('tiny-test' -> 'tiny')"]),
        Case(rund, "resume with a changed data file", T,
             train("--config.train.num_steps=3", *jsonl, "--config.data.path={c.extra[jsonl]}"),
             setup=lambda c: c.extra.update(jsonl=c.good_jsonl),
             copy_run=True, protect=everything, needles=["data.source ('arith' -> 'jsonl')", "data.path"]),
        Case(rund, "resume with allowed changes (num_steps, eval cadence) over a stale lock", T,
             train("--config.train.num_steps=3", "--config.eval.every_steps=1", "--config.checkpoint.keep=5"),
             copy_run=True, setup=lambda c: stale_lock(c.run), protect=history, expect="ok",
             check=checks.stale_lock_taken_over),
        Case(rund, "resume with learning rate changed via allow_changes", T,
             train("--config.train.num_steps=3", "--config.train.learning_rate=1e-4",
                    "--config.checkpoint.allow_changes=train.learning_rate"),
             copy_run=True, protect=history, expect="ok", check=checks.allowed_lr_recorded),
        Case(rund, "num_steps 1 below the checkpoint's step 2", T, train("--config.train.num_steps=1"),
             copy_run=True, protect=everything, needles=["train.num_steps: 1 is below step 2"],
             check=checks.summary_untouched),
        Case(rund, "jsonl run with the default evaluation finishes with a summary", T,
             train(*jsonl, "--config.data.path={c.good_jsonl}", "--config.train.num_steps=2"),
             expect="ok", check=checks.jsonl_run_finished),
        # ------------------------------------------------------------------ damaged checkpoints
        Case(ckpt, "train: truncated file in step 2 -> falls back to step 1", T, train("--config.train.num_steps=3"),
             copy_run=True, setup=damage_latest("truncate"), protect=history, expect="ok",
             check=checks.train_fell_back),
        Case(ckpt, "evaluate: flipped bytes in step 2 -> evaluates step 1", E,
             lambda c: [f"--checkpoint={c.run}", *EVAL_FAST], copy_run=True, setup=damage_latest("flip"),
             protect=everything, expect="ok", check=checks.fell_back_to_step_1("evaluating workdir")),
        Case(ckpt, "export: a file of step 2 deleted -> exports step 1", X,
             lambda c: [f"--workdir={c.run}", f"--out={c.dir}/out"], copy_run=True, setup=damage_latest("delete"),
             protect=everything, expect="ok", check=checks.fell_back_to_step_1("exported")),
        Case(ckpt, "train: no intact step -> one line naming step and file", T, train("--config.train.num_steps=3"),
             copy_run=True, setup=damage_all, protect=everything,
             needles=["no intact checkpoint", "step 2: 2/train_state/", "step 1: 1/train_state/"]),
        Case(ckpt, "evaluate checkpoints/2 with flipped bytes", E,
             lambda c: [f"--checkpoint={c.run}/checkpoints/2", *EVAL_FAST], copy_run=True,
             setup=damage_latest("flip"), protect=everything, needles=["step 2 is damaged", "train_state"]),
        Case(ckpt, "export --step 2 with flipped bytes", X,
             lambda c: [f"--workdir={c.run}", "--step=2", f"--out={c.dir}/out"], copy_run=True,
             setup=damage_latest("flip"), protect=everything, prefix="export: ",
             needles=["step 2", "damaged", "train_state"]),
        Case(ckpt, "export --step 7 (no such step)", X,
             lambda c: [f"--workdir={c.run}", "--step=7", f"--out={c.dir}/out"], copy_run=True,
             protect=everything, prefix="export: ", needles=["--step", "no step 7"]),
        Case(ckpt, "export into a non-empty --out", X,
             lambda c: [f"--workdir={c.run}", f"--out={c.dir}/full"], copy_run=True,
             setup=lambda c: (os.makedirs(c.dir + "/full"), write(c.dir + "/full/keep.txt", "mine")) and None,
             protect=lambda c: [*everything(c), c.dir + "/full/keep.txt"], prefix="export: ",
             needles=["--out", "not an empty folder"]),
        Case(ckpt, "export of an intact run", X, lambda c: [f"--workdir={c.run}", f"--out={c.dir}/out"],
             copy_run=True, protect=everything, expect="ok", check=checks.exported_folder_complete),
        # ------------------------------------------------------------------ damaged model folders
        Case(model, "evaluate: model.safetensors missing", E, eval_hf, copy_model=True,
             setup=lambda c: os.remove(c.model + "/model.safetensors"), needles=["{model}"]),
        Case(model, "evaluate: model.safetensors truncated", E, eval_hf, copy_model=True,
             setup=lambda c: os.truncate(c.model + "/model.safetensors",
                                         os.path.getsize(c.model + "/model.safetensors") - 1000),
             needles=["model.safetensors: tensor ", "outside"]),
        Case(model, "evaluate: overlapping data_offsets", E, eval_hf, copy_model=True,
             setup=lambda c: rewrite_safetensors_header(c.model + "/model.safetensors", overlap_first_layers),
             needles=["model.safetensors: tensors model.layers.", "overlap"]),
        Case(model, "evaluate: safetensors header is not JSON", E, eval_hf, copy_model=True,
             setup=lambda c: break_header_json(c.model + "/model.safetensors"),
             needles=["model.safetensors: the header is not valid JSON"]),
        Case(model, "evaluate: config.json missing", E, eval_hf, copy_model=True,
             setup=lambda c: os.remove(c.model + "/config.json"), needles=["{model}"]),
        Case(model, "train: model.path with overlapping data_offsets", T, train("--config.model.path={c.model}"),
             copy_model=True,
             setup=lambda c: rewrite_safetensors_header(c.model + "/model.safetensors", overlap_first_layers),
             needles=["model.safetensors: tensors model.layers.", "overlap"]),
        Case(model, "train: model.path whose config.json is not JSON", T, train("--config.model.path={c.model}"),
             copy_model=True, setup=lambda c: write(c.model + "/config.json", "{\"hidden_size\": 64,"),
             needles=["config.json"]),
        Case(model, "train: model.path without model.safetensors", T, train("--config.model.path={c.model}"),
             copy_model=True, setup=lambda c: os.remove(c.model + "/model.safetensors"), needles=["{model}"]),
        # ------------------------------------------------------------------ full disk
        Case(disk, "train: RLIMIT_FSIZE while checkpointing", T, train("--config.train.num_steps=5"),
             copy_run=True, fsize_limit=lambda c: os.path.getsize(largest_file(step_dir(c.run, 2))) // 2,
             protect=lambda c: [os.path.join(c.run, "configs", "0.json")],
             needles=lambda c: [os.path.join(c.run, "checkpoints"), "File too large"],
             check=checks.full_disk_kept_the_previous_step),
        Case(disk, "export: RLIMIT_FSIZE while writing the weights", X,
             lambda c: [f"--workdir={c.run}", f"--out={c.dir}/out"], copy_run=True,
             fsize_limit=lambda c: os.path.getsize(os.path.join(c.hf, "model.safetensors")) // 2,
             protect=everything, prefix="export: ", needles=lambda c: [f"{c.dir}/out", "File too large"],
             check=lambda c, r: [f"a partial {c.dir}/out is left"] if os.path.exists(f"{c.dir}/out") else []),
        # ------------------------------------------------------------------ fetch
        Case(data, "fetch: unknown data set name", F, lambda c: ["math5000", f"--dest={c.dir}/data"],
             prefix="fetch: ", needles=["math5000", "unknown data set"]),
    ]
    for label, text in hostile_inputs("{canary}"):
        out.append(Case("hostile grader input", label, "greso_jax.rewards.math", None, expect="ok",
                        custom=grade_case(lambda canary, t=text: t.replace("{canary}", canary)), check=check_grade,
                        timeout=60))
    out += fault_cases_lifecycle.cases()  # signals, unverified steps, a workdir without checkpoints, ...
    out += fault_cases_outside.cases()  # what the sweep of 2026-12-02 found: read-only mounts, a real full disk, ...
    for i, case in enumerate(out, start=1):
        case.number = i
    return out


CASES = cases()
