"""CLI: a run's trained policy as a Hugging Face folder that transformers and vLLM load.

  python -m greso_jax.export --workdir runs/arith_tiny --out exported/arith_tiny
  python -m greso_jax.export --workdir runs/qwen2_5_math_1_5b_greso --step 500 \
      --out /models/greso-qwen2.5-math-1.5b --dtype bfloat16
  vllm serve /models/greso-qwen2.5-math-1.5b

The folder holds config.json, model.safetensors (sharded above 4 GiB), the tokenizer files and
generation_config.json with the EOS and pad ids the run used. Tokenizers: a `model.tokenizer="hf"`
run gets the files of its model.path copied; a `"char"` run (the synthetic tasks) gets a
tokenizer.json written for its alphabet (a WordLevel model over single characters).
Exit status 2 on bad input, with a one-line message naming the flag or file.
"""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports below: a signal meanwhile gives one line
    from greso_jax.core.startup import stop_quietly_until_started

    stop_quietly_until_started("export")

import argparse
import errno
import json
import os
import shutil
import sys

import ml_collections

from greso_jax.parallel import preemption
from greso_jax.run.checkpoint import CHECKPOINTS_FOLDER, CheckpointError, checkpoint_dir
from greso_jax.run.run_dir import saved_step
from greso_jax.config import DTYPES

# the files a Hugging Face tokenizer folder may hold (transformers writes the chat template to its own file)
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                      "vocab.json", "merges.txt", "chat_template.jinja")
# CharTokenizer.apply_chat_template as Jinja: the contents of the non-system messages, concatenated
CHAR_CHAT_TEMPLATE = "{% for m in messages %}{% if m['role'] != 'system' %}{{ m['content'] }}{% endif %}{% endfor %}"


_DISK_ERRNOS = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}  # a full disk, a quota
_REFUSED_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}  # a read-only mount (root's writes fail there too)


class ExportError(ValueError):
    """A bad workdir, step or output folder; the message names it."""


def step_and_config(workdir: str, step: int | None, *, log=print) -> tuple[int, ml_collections.ConfigDict]:
    """`step` if its files match its manifest, or (None) the newest intact step of the run (a damaged
    newer step is reported through `log` and skipped, as a resume or `evaluate` would), and the
    config saved with that step: a resume may have changed fields since (checkpoint.allow_changes)."""
    flag = "--workdir" if step is None else "--step"
    if not os.path.isdir(checkpoint_dir(workdir)):
        raise ExportError(f"--workdir: {workdir} has no {CHECKPOINTS_FOLDER}/ (not a greso_jax run folder)")
    try:
        saved = saved_step(workdir, step, log=log)
    except CheckpointError as e:  # names the step (every step, for the newest) and the damaged file
        raise ExportError(f"{flag}: {e}") from None
    if saved is None:
        raise ExportError(f"--workdir: {checkpoint_dir(workdir)} holds no checkpoint")
    if saved.config is None:
        raise ExportError(f"{flag}: {checkpoint_dir(workdir)}/{saved.step} records no config "
                          "(not written by greso_jax.train)")
    return saved.step, ml_collections.ConfigDict(saved.config)


def load_exported_policy(workdir: str, step: int, config):
    """The run's model (architecture from its config) with the parameters of `step`, on one device:
    the export gathers every parameter on this host anyway."""
    import jax

    from greso_jax.models import PRESETS
    from greso_jax.parallel import make_mesh
    from greso_jax.run.build import load_policy

    if not config.model.path and config.model.preset not in PRESETS:
        raise ExportError(f"model.preset: {config.model.preset!r} (from {checkpoint_dir(workdir)}/{step}) is not "
                          f"one of {', '.join(PRESETS)}")
    try:
        return load_policy(config, make_mesh(1, 1, 1, devices=jax.devices()[:1]), workdir=workdir, step=step)
    except CheckpointError as e:  # names the step and what does not match
        raise ExportError(str(e)) from None


def write_char_tokenizer(tokenizer, out: str, max_length: int) -> None:
    """tokenizer.json + tokenizer_config.json that encode and decode like `tokenizer` (a CharTokenizer)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tokenizer.PAD: tokenizer.pad_id, tokenizer.EOS: tokenizer.eos_ids[0]}
    vocab |= {ch: i + 2 for i, ch in enumerate(tokenizer.alphabet)}
    hf = Tokenizer(models.WordLevel(vocab, unk_token=tokenizer.PAD))
    hf.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # every character is a token
    hf.decoder = decoders.Fuse()  # joined without spaces
    hf.add_special_tokens([AddedToken(tokenizer.PAD, special=True), AddedToken(tokenizer.EOS, special=True)])
    hf.save(os.path.join(out, "tokenizer.json"))
    _write_json(os.path.join(out, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": tokenizer.PAD, "eos_token": tokenizer.EOS,
        "model_max_length": max_length, "clean_up_tokenization_spaces": False, "chat_template": CHAR_CHAT_TEMPLATE})


def _copy_hf_tokenizer(model_path: str, out: str) -> None:
    if not os.path.exists(os.path.join(model_path, "tokenizer.json")):
        raise ExportError(f"model.path: {model_path} has no tokenizer.json to export")
    for name in HF_TOKENIZER_FILES:
        if os.path.exists(os.path.join(model_path, name)):
            shutil.copyfile(os.path.join(model_path, name), os.path.join(out, name))


def _write_json(path: str, value: dict) -> None:
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def _generation_config(config, tokenizer) -> dict:
    """The model folder's generation_config.json (hf runs) with the run's EOS and pad ids."""
    base = {}
    source = os.path.join(config.model.path, "generation_config.json") if config.model.path else ""
    if source and os.path.exists(source):
        with open(source) as f:
            base = json.load(f)
    return base | {"eos_token_id": list(tokenizer.eos_ids), "pad_token_id": tokenizer.pad_id}


def export(workdir: str, out: str, *, step: int | None = None, dtype: str | None = None, log=print) -> str:
    """Writes the policy of `workdir` at `step` (default: the newest intact step) to the folder `out`;
    returns it. A failed write (a full disk) removes what it wrote: `out` was new or empty."""
    return _export(workdir, out, step=step, dtype=dtype, log=log)[0]


def _export(workdir: str, out: str, *, step: int | None, dtype: str | None, log) -> tuple[str, int]:
    """`export`, also returning the step it exported (checking a step's files costs a pass over them)."""
    from greso_jax.run.build import build_tokenizer

    workdir, out = os.path.abspath(workdir), os.path.abspath(out)
    if not os.path.isdir(workdir):
        raise ExportError(f"--workdir: no such folder: {workdir}")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ExportError(f"--out: {out} exists and is not an empty folder")
    if dtype is not None and dtype not in DTYPES:
        raise ExportError(f"--dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
    step, config = step_and_config(workdir, step, log=log)
    model = load_exported_policy(workdir, step, config)
    tokenizer = build_tokenizer(config)
    existed = os.path.isdir(out)
    try:
        _write_folder(model, tokenizer, config, out, dtype)
    except BaseException:
        if existed:  # it was empty: empty it again
            for name in os.listdir(out):
                path = os.path.join(out, name)
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
        else:
            shutil.rmtree(out, ignore_errors=True)
        raise
    return out, step


def _write_folder(model, tokenizer, config, out: str, dtype: str | None) -> None:
    from greso_jax.models import save_pretrained

    save_pretrained(model, out, dtype=dtype or config.model.param_dtype)
    hf_config_path = os.path.join(out, "config.json")
    with open(hf_config_path) as f:
        hf_config = json.load(f)
    # transformers 5 reads "dtype" ("torch_dtype" is its deprecated spelling); the ids let it
    # and vLLM stop and pad like the run did
    hf_config["dtype"] = hf_config.pop("torch_dtype")
    hf_config |= {"eos_token_id": list(tokenizer.eos_ids), "pad_token_id": tokenizer.pad_id}
    _write_json(hf_config_path, hf_config)
    _write_json(os.path.join(out, "generation_config.json"), _generation_config(config, tokenizer))
    if config.model.tokenizer == "hf":
        _copy_hf_tokenizer(config.model.path, out)
    else:
        write_char_tokenizer(tokenizer, out, model.cfg.max_position_embeddings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m greso_jax.export", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the run's folder (checkpoints/)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    parser.add_argument("--out", required=True, help="new or empty folder for the Hugging Face files")
    parser.add_argument("--dtype", default=None, help=f"weights dtype, one of {', '.join(DTYPES)} "
                                                      "(default: the run's model.param_dtype)")
    args = parser.parse_args(argv)
    try:
        out, step = _export(args.workdir, args.out, step=args.step, dtype=args.dtype, log=print)
    except (ExportError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
        print(f"export: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in _DISK_ERRNOS | _REFUSED_ERRNOS:  # a full disk, a read-only mount
            raise
        print(f"export: writing {os.path.abspath(args.out)} failed ({e}); nothing was kept there", file=sys.stderr)
        return 2
    print(f"exported {args.workdir} step {step} to {out}")
    return 0


def run() -> None:
    preemption.stop_at_once_on_sigterm()  # a scheduler's SIGTERM cleans up as Ctrl-C does
    try:
        code = main()
        preemption.ignore_sigterm_from_now()
        sys.exit(code)
    except KeyboardInterrupt as e:  # _export has removed what it wrote into --out
        print(f"export: {preemption.interrupted_line(e, 'nothing was kept in --out')}", file=sys.stderr)
        sys.exit(preemption.interrupted_exit_code(e))


if __name__ == "__main__":
    run()
