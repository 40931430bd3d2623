"""Run records: metrics.jsonl + TensorBoard (+ Weights & Biases), the progress bar, end-of-run plots and summary table."""

from __future__ import annotations

import gzip
import json
import math
import os
import secrets
from typing import Iterable, Sequence

import numpy as np

from greso_jax.core.specs import ConfigError
from greso_jax.selection import STRATEGIES


class MetricsWriter:
    """Appends one JSON object per step to `workdir/metrics.jsonl` and mirrors scalars to
    TensorBoard. On resume from `resume_step`, lines of later steps (written by the killed
    run after its last checkpoint) are dropped so the file reads as one uninterrupted run.
    With a run `config` whose logging.wandb is on, every line also goes to Weights & Biases."""

    def __init__(self, workdir: str, *, enabled: bool = True, resume_step: int | None = None,
                 tensorboard: bool = True, config=None):
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        self._tb = self._wandb = None
        if not enabled:
            return
        os.makedirs(workdir, exist_ok=True)
        _truncate_after(self.path, -1 if resume_step is None else resume_step)
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
        if config is not None and config.get("logging") is not None and config.logging.wandb:
            self._wandb = WandbSink(workdir, config)

    def write(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        record = {"step": int(step)} | {k: _plain(v) for k, v in sorted(metrics.items())}
        try:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:  # a full disk: write() and close() name no file
            raise OSError(e.errno, f"{e.strerror} (writing step {step} of {self.path})") from None
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(step, record)

    def close(self) -> None:
        """Never raises for TensorBoard (metrics.jsonl is the record): closing runs on error paths
        too, where raising would hide the error being reported."""
        if self._tb is not None:
            try:
                self._tb.close()
            except OSError as e:
                print(f"warning: {os.path.dirname(self.path)}/tensorboard/ is incomplete ({e.strerror})")
            self._tb = None
        if self._wandb is not None:
            self._wandb.close()


class GroupTraceWriter:
    """Appends one line per step to `workdir/groups.jsonl` (logging.group_trace): the data epoch and,
    for every group rolled out in the step (zero-variance and surplus ones too; the skip audit's
    shadow groups not), its prompt id, correct responses and responses, in rollout order. It is the
    outcome record that offline selector studies replay (experiments/bench/predictor_replay.py).
    On resume, lines after `resume_step` are dropped, as in metrics.jsonl."""

    FILE = "groups.jsonl"

    def __init__(self, workdir: str, *, enabled: bool, resume_step: int | None = None):
        self.enabled = enabled
        self.path = os.path.join(workdir, self.FILE)
        if enabled:
            os.makedirs(workdir, exist_ok=True)
            _truncate_after(self.path, -1 if resume_step is None else resume_step)

    def write(self, step: int, epoch: int, groups) -> None:
        """groups: selection Groups (prompt_id, correct bool [k])."""
        if not self.enabled:
            return
        record = {"step": int(step), "epoch": int(epoch), "prompt_ids": [int(g.prompt_id) for g in groups],
                  "num_correct": [int(np.count_nonzero(g.correct)) for g in groups],
                  "num_samples": [int(g.correct.size) for g in groups]}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def read_group_trace(workdir: str) -> list[dict]:
    """The lines of `workdir/groups.jsonl`; a clear error when the run did not record one."""
    path = os.path.join(workdir, GroupTraceWriter.FILE)
    if record_path(path) is None:
        raise FileNotFoundError(f"{path}: no group trace; run with --config.logging.group_trace=True")
    return read_lines(path)


class WandbSink:
    """A Weights & Biases run for a workdir. Its id is kept in `workdir/wandb_run_id`, so a
    resumed training run continues the same W&B run; project, entity and name come from the
    config's logging section, and the whole config is the run's config. `wandb` is optional:
    it is imported only here."""

    ID_FILE = "wandb_run_id"

    def __init__(self, workdir: str, config):
        try:
            import wandb
        except ImportError:
            raise ImportError("logging.wandb=True needs the wandb package: pip install -e .[wandb]") from None
        id_path = os.path.join(workdir, self.ID_FILE)
        if os.path.exists(id_path):
            with open(id_path) as f:
                run_id = f.read().strip()
        else:
            run_id = secrets.token_hex(6)  # W&B run ids are [a-z0-9]; ours are random hex
            with open(id_path, "w") as f:
                f.write(run_id + "\n")
        settings = config.logging
        self._run = wandb.init(
            project=settings.wandb_project, entity=settings.wandb_entity or None,
            name=settings.wandb_run_name or os.path.basename(os.path.abspath(workdir)), id=run_id, resume="allow",
            # passed on every init: wandb reads WANDB_DIR only once per process
            config=config.to_dict(), dir=os.environ.get("WANDB_DIR") or workdir)
        self.run_id = run_id

    def log(self, step: int, record: dict) -> None:
        # A resumed run recomputes the steps after its last checkpoint; W&B already holds the
        # killed run's lines for them (the same values: every key derives from seed and step),
        # and it refuses steps below its current one, so those are skipped here quietly.
        if step < self._run.step:
            return
        scalars = {k: v for k, v in record.items() if k != "step" and isinstance(v, (int, float))
                   and not isinstance(v, bool) and math.isfinite(v)}
        self._run.log(scalars, step=step)

    def close(self) -> None:
        self._run.finish()


def _plain(value):
    if isinstance(value, (np.generic, np.ndarray)):
        value = value.item() if np.ndim(value) == 0 else value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN; keep it visible
    return value


def _truncate_after(path: str, step: int) -> None:
    """Keeps the lines with step <= `step` (all lines are dropped when step is -1)."""
    if not os.path.exists(path):
        return
    kept = [line for line in read_lines(path) if line["step"] <= step]
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in kept)
    os.replace(path + ".tmp", path)


class RecordsError(ConfigError):
    """A run's record (metrics.jsonl, groups.jsonl) cannot be read back; the message names the file
    and line."""


def record_path(path: str) -> str | None:
    """`path`, or its gzip-compressed copy `path.gz` when only that exists (an archived run,
    experiments/bench/archive_runs.py); None when neither does."""
    for candidate in (path, path + ".gz"):
        if os.path.isfile(candidate):
            return candidate
    return None


def read_lines(path: str) -> list[dict]:
    """The JSON objects of a jsonl record, one a line (read from `path.gz` when only that exists). A
    last line without its newline that is not JSON is the write a killed run left unfinished, and is
    dropped; any other unreadable line is a RecordsError naming the file and line."""
    path = record_path(path) or path
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        lines = f.readlines()
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("step", 0), int):
                raise ValueError("not a JSON object with an integer step")
        except ValueError as e:
            if number == len(lines) and not line.endswith("\n"):
                break
            raise RecordsError(f"{path}:{number}: unreadable record ({e}); repair or remove the line") from None
        out.append(record)
    return out


def read_metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    return read_lines(path) if record_path(path) else []


class Progress:
    """A tqdm bar over training steps with the numbers a researcher watches, the strategy's knobs among
    them (`knobs`: their metric names); `quiet` prints one plain line per step instead (for log files)."""

    FIELDS = (("reward", "rollout/reward_mean", "{:.3f}"), ("acc", "eval/accuracy", "{:.3f}"),
              ("skip", "selection/skip_frac", "{:.0%}"))

    def __init__(self, total: int, initial: int = 0, *, quiet: bool = False, enabled: bool = True,
                 knobs: Sequence[str] = ()):
        self.fields = (*self.FIELDS, *((key.rsplit("/", 1)[-1], key, "{:.3f}") for key in knobs),
                       ("rollouts", "rollout/num_responses", "{:,.0f}"))
        self.quiet, self.enabled, self._last = quiet, enabled, {}
        self._bar = None
        if enabled and not quiet:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc="train", dynamic_ncols=True)

    def update(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        self._last.update({k: v for k, v in metrics.items() if v is not None})
        parts = {name: fmt.format(self._last[key]) for name, key, fmt in self.fields if key in self._last}
        if self._bar is not None:
            self._bar.set_postfix(parts, refresh=False)
            self._bar.update(1)
        else:
            print(f"step {step}: " + " ".join(f"{k}={v}" for k, v in parts.items()), flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _series(records: Iterable[dict], key: str, x_key: str = "step"):
    pairs = [(r[x_key], r[key]) for r in records
             if isinstance(r.get(key), (int, float)) and isinstance(r.get(x_key), (int, float))]
    return ([p[0] for p in pairs], [p[1] for p in pairs]) if pairs else ([], [])


def plot_run(workdir: str) -> list[str]:
    """Writes PNG plots from metrics.jsonl: accuracy vs step and vs cumulative rollouts,
    zero-variance ratios, the strategy's knobs (selection/<strategy>/<knob>, those its class
    declares), and the wall-time split. Returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(workdir)
    out_dir = os.path.join(workdir, "plots")
    os.makedirs(out_dir, exist_ok=True)
    panels = [
        ("accuracy.png", [("eval/accuracy", "step", "held-out accuracy"),
                          ("rollout/accuracy", "step", "rollout accuracy")], "step"),
        ("accuracy_vs_rollouts.png", [("eval/accuracy", "rollout/num_responses", "held-out accuracy")],
         "cumulative rollouts (responses generated)"),
        ("zero_variance.png", [("selection/easy_ratio", "step", "all-correct groups"),
                               ("selection/hard_ratio", "step", "all-wrong groups"),
                               ("selection/zero_variance_ratio", "step", "zero-variance groups")], "step"),
        ("strategy_knobs.png", [(f"selection/{name}/{knob}", "step", f"{name} {knob}")
                                for name, cls in STRATEGIES.items() for knob in cls.knobs], "step"),
        ("time_split.png", [("time/rollout", "step", "rollout"), ("time/reward", "step", "reward"),
                            ("time/update", "step", "update"), ("time/step", "step", "step")], "step"),
    ]
    paths = []
    for name, lines, xlabel in panels:
        fig, ax = plt.subplots(figsize=(6, 4))
        drawn = 0
        for key, x_key, label in lines:
            xs, ys = _series(records, key, x_key)
            if xs:
                ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=label)
                drawn += 1
        if drawn:
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
            ax.legend()
            fig.tight_layout()
            path = os.path.join(out_dir, name)
            fig.savefig(path, dpi=100)
            paths.append(path)
        plt.close(fig)
    return paths


def format_table(rows: list[dict], columns: list[str]) -> str:
    """A plain fixed-width text table (used by the summary and the benchmarks)."""
    def cell(v):
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    body = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def run_summary(workdir: str, *, strategy: str, num_steps: int, counters: dict) -> dict:
    """A finished run in one record: held-out accuracy at its first and last evaluation, responses
    generated and prompts skipped. A run without evaluation sets reports its accuracy as None."""
    evals = [r for r in read_metrics(workdir) if "eval/accuracy" in r]
    before, after = (evals[i]["eval/accuracy"] if evals else None for i in (0, -1))
    return {"strategy": strategy, "steps": num_steps, "accuracy_before": _rounded(before),
            "accuracy_after": _rounded(after), "rollouts_generated": counters["rollout/num_responses"],
            "prompts_skipped": counters["selection/skipped_total"]}


def _rounded(value) -> float | None:
    # The NaN accuracy of a run without evaluation sets is stored as the string "nan".
    return round(value, 4) if isinstance(value, (int, float)) and math.isfinite(value) else None
