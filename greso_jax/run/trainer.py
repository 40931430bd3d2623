"""The training loop: select → sample → score → observe → filter/curate → update → record.

Each arrow is one call into a component (docs/design.md, "One training step"): the strategy
and its step driver (`selection`), generation (`sampling`), grading (`rewards`), batch
assembly and the update (`rl`). The pieces are built from the config by `run.build`; run state
is saved and restored by `run.checkpoint`.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax
import numpy as np

from greso_jax.run.scoring import sample_and_grade, summarize
from greso_jax.run.checkpoint import Checkpointer, checkpoint_dir, restore_run_state, save_run_state
from greso_jax.run.timers import SectionTimers
from greso_jax.config import rl_seed, validate
from greso_jax.data.pipeline import PromptPipeline
from greso_jax.run.build import (eval_settings, learner_from_config, prompt_levels, rows_from_config,
                                   sampling_kwargs, selector_from_config)
from greso_jax.run.records import GroupTraceWriter, MetricsWriter, Progress, format_table, plot_run, run_summary
from greso_jax.parallel import multihost, preemption
from greso_jax.parallel.sharding import mesh_from_config
from greso_jax.run.build import build_policy, build_tokenizer
from greso_jax.rewards.pool import GradingPool
from greso_jax.rl.batch import assemble_batch
from greso_jax.run.run_dir import open_run_dir
from greso_jax.run.rollouts import PassRollouts, carry_from_json, carry_to_json, stream_rollouts
from greso_jax.selection import Carry, PulledPrompts, run_selection_step, run_stream_step
from greso_jax.run.skip_audit import SkipAudit
from greso_jax.core.specs import ConfigError


class Trainer:
    """One run in `workdir`: builds every piece from the config, resumes from the latest checkpoint,
    trains to train.num_steps. Only process 0 logs and writes metrics."""

    def __init__(self, config, workdir: str, *, log=print):
        self.config = c = validate(config)  # before anything is compiled or loaded
        self.workdir = os.path.abspath(workdir)
        self.is_main = jax.process_index() == 0
        self.log = log if self.is_main else (lambda *a, **k: None)
        os.makedirs(self.workdir, exist_ok=True)
        # Lock the workdir, choose the newest intact checkpoint and refuse an incompatible resume
        # before anything below writes into the workdir (warm-start cache, config files).
        self.run_dir = open_run_dir(self.workdir, c, is_main=self.is_main, log=self.log)
        self.mesh = mesh_from_config(c.mesh)
        self.tokenizer = build_tokenizer(c)
        self.train_rows, self.eval_sets = rows_from_config(c)
        if not self.eval_sets:
            self.log(f"no evaluation sets for data.source={c.data.source!r} (eval.benchmarks="
                     f"{list(c.eval.benchmarks)}): held-out accuracy is not measured")
        self.warmstart = {}  # warmstart/steps and warmstart/accuracy of a banded warm start, written with step 0
        self.model = build_policy(c, self.tokenizer, self.train_rows, self.workdir, self.mesh, log=self.log,
                                  report=self.warmstart)
        self.learner = learner_from_config(self.model, c, self.mesh)
        levels = prompt_levels(self.train_rows)
        self.selector = selector_from_config(c, num_prompts=levels.size, prompt_levels=levels)
        self.pipeline = PromptPipeline(
            self.train_rows, self.tokenizer, template=c.data.prompt_template,
            max_prompt_length=c.data.max_prompt_length, seed=rl_seed(c), shuffle=c.data.shuffle,
            keep_filter=self.selector, shard_index=jax.process_index(), shard_count=jax.process_count())
        self.pool = GradingPool(num_workers=c.data.grading_workers, timeout_s=c.data.grading_timeout_s,
                                shaping=c.data.reward_shaping)
        self.checkpointer = Checkpointer(checkpoint_dir(self.workdir), keep=c.checkpoint.keep,
                                         every_steps=c.checkpoint.every_steps, async_save=c.checkpoint.async_save)
        self.timers = SectionTimers()
        self.passes = PassRollouts(self.learner.model, self.tokenizer, self.pool, self.timers, seed=rl_seed(c),
                                   mesh=self.mesh, generation=sampling_kwargs(c))
        self.stream = stream_rollouts(c, self.learner.model, self.tokenizer, self.pool, self.timers,
                                      self.pipeline.element)
        self.carry = Carry()  # stream_in_flight = "carry": the groups the next step trains first
        self.counters = {"rollout/num_responses": 0, "rollout/num_tokens": 0, "selection/skipped_total": 0,
                         "train/bad_steps": 0}
        self.skip_audit = SkipAudit(c.eval.skip_audit_fraction, rl_seed(c))
        if c.eval.skip_audit_fraction and jax.process_count() > 1:
            raise ConfigError("eval.skip_audit_fraction: the skip audit runs on one host only; set it to 0")
        self._dropped_logged = False
        self.group_trace = GroupTraceWriter(self.workdir, enabled=False)  # run() opens it with the resume step
        if self.is_main:  # config.json, configs/<step>.json, configs/launches.jsonl
            self.run_dir.record_launch(c)

    # -- one step ------------------------------------------------------------------------------

    def train_step(self, step: int) -> dict[str, Any]:
        c = self.config
        self.timers.reset()
        self.skip_audit.begin_step()
        start, cpu_start = time.perf_counter(), time.process_time()
        epoch = self.pipeline.epoch_across_hosts(multihost.allgather) if self.stream else self.pipeline.epoch
        self.passes.begin_step(step)  # the skip audit samples in passes in either mode
        if self.stream is not None:
            self.stream.begin_step(step)
        rollouts = self.stream or self.passes
        if self.stream is None:
            result = run_selection_step(self.selector, step, pull_prompts=self._pull_prompts, rollout=self.passes,
                                        train_batch_size=c.train.train_batch_size, epoch=epoch)
        else:
            sel = c.selection
            result, self.carry = run_stream_step(
                self.selector, step, pull_prompts=self._pull_prompts, backend=self.stream, epoch=epoch,
                train_batch_size=c.train.train_batch_size, in_flight=sel.stream_in_flight, carry=self.carry,
                max_responses=sel.max_passes * sel.rollout_batch_size * c.rl.group_size, lookahead=sel.stream_lookahead,
                admission=sel.stream_admission, max_pool_reads=sel.stream_max_pool_reads)
        metrics = {"data/epoch": epoch, **result.metrics}
        self.group_trace.write(step, epoch, result.rolled_out)
        every = c.train.host_check_every_steps
        if multihost.is_multihost() and every and step % every == 0:
            multihost.check_identical_across_hosts(self.selector.state_dict(), "the selector state", step)
        metrics.update(self._update(result) if result.groups else {"train/groups": 0})
        self._count(metrics)
        metrics["rewards/grading_failures"] = rollouts.failures
        metrics["data/dropped_too_long"] = self.pipeline.num_dropped_too_long
        metrics["data/bad_rows"] = self.train_rows.num_bad_rows  # skipped with data.skip_bad_rows
        if self.pipeline.num_dropped_too_long and not self._dropped_logged:
            self._dropped_logged = True
            self.log(f"dropping prompts longer than data.max_prompt_length={c.data.max_prompt_length} tokens "
                     "(counted in data/dropped_too_long)")
        metrics.update(self.timers.seconds)
        metrics["time/step"] = time.perf_counter() - start
        metrics["cpu/step"] = time.process_time() - cpu_start
        metrics.update(self.counters)
        return metrics

    def _pull_prompts(self, n: int) -> PulledPrompts:
        if multihost.is_multihost() and self.stream:  # each host streams its own shard; skips are shared
            elements, skipped_ids = self.pipeline.next_prompts(n)
            skipped_ids = np.concatenate(multihost.allgather_ragged(np.asarray(skipped_ids, np.int64)))
        elif multihost.is_multihost():
            elements, skipped_ids = self.pipeline.next_prompts_across_hosts(n, multihost.allgather)
        else:
            elements, skipped_ids = self.pipeline.next_prompts(n)
        ids = np.asarray([e["prompt_id"] for e in elements], np.int64)
        skipped_ids = np.asarray(skipped_ids, np.int64)
        if self.skip_audit.enabled and skipped_ids.size:  # what each was skipped as, as it was then
            self.skip_audit.record(skipped_ids, self.selector.skip_kinds(skipped_ids))
        return PulledPrompts(prompt_ids=ids, payloads=elements, skipped_ids=skipped_ids)

    def _update(self, result) -> dict[str, float]:
        """Advantages and the learner batch from the accepted groups, then one training update."""
        c = self.config
        num_minibatches = c.train.train_batch_size // c.rl.mini_batch_size
        assembled = assemble_batch(result.groups, result.handles, advantage=c.rl.advantage,
                                   pad_id=self.tokenizer.pad_id,
                                   total_length=c.data.max_prompt_length + c.sampling.max_new_tokens,
                                   row_multiple=num_minibatches * c.rl.micro_batch_size)
        with self.timers.timed("time/update"):
            metrics = self.learner.update(assembled.batch, num_minibatches=num_minibatches,
                                          truncated=assembled.truncated, group_ids=assembled.group_ids)
        return {**assembled.stats, **metrics}

    def _count(self, metrics: dict) -> None:
        """Cumulative counters and the skip fraction, from a step's metrics."""
        skipped = metrics.get("selection/skipped_easy", 0) + metrics.get("selection/skipped_hard", 0)
        considered = skipped + metrics.get("selection/kept", 0)
        metrics["selection/skip_frac"] = skipped / considered if considered else 0.0
        self.counters["selection/skipped_total"] += int(skipped)
        for key in ("rollout/num_responses", "rollout/num_tokens"):
            if key in metrics:
                self.counters[key] = int(metrics[key])
        bad = metrics.get("actor/nonfinite_skipped", 0)
        self.counters["train/bad_steps"] = self.counters["train/bad_steps"] + 1 if bad else 0

    # -- evaluation ----------------------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        """avg@k, pass@1 and pass@k on every evaluation set, and their mean as eval/accuracy."""
        settings = eval_settings(self.config)
        out, means = {}, []
        start = time.perf_counter()
        for name, rows in self.eval_sets.items():
            correct = sample_and_grade(self.learner.model, self.tokenizer, rows, settings, pool=self.pool,
                                       mesh=self.mesh)
            summary = summarize(correct)
            out.update({f"eval/{name}/{k}": v for k, v in summary.items()})
            means.append(summary[f"avg@{settings.num_samples}"])
        out["eval/accuracy"] = float(np.mean(means)) if means else float("nan")
        out["time/eval"] = time.perf_counter() - start
        return out

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        c = self.config
        extras: dict = {}
        start_step = restore_run_state(self.checkpointer, learner=self.learner, selector=self.selector,
                                       pipeline=self.pipeline, counters=self.counters, step=self.run_dir.start_step,
                                       fall_back=self.run_dir.fall_back, extras=extras)
        self.carry = carry_from_json(extras, self.pipeline.element)
        if start_step:
            self.log(f"resumed from step {start_step} ({self.checkpointer.directory})")
        writer = MetricsWriter(self.workdir, enabled=self.is_main, resume_step=start_step or None, config=c)
        self.group_trace = GroupTraceWriter(self.workdir, enabled=self.is_main and c.logging.group_trace,
                                            resume_step=start_step or None)
        progress = Progress(c.train.num_steps, start_step, quiet=c.train.quiet, enabled=self.is_main,
                            knobs=[self.selector.metric_name(knob) for knob in self.selector.knobs])
        try:
            if start_step == 0:
                first_eval = self.evaluate(0)
                writer.write(0, first_eval | self.counters | self.warmstart)
                self.log(f"step 0: held-out accuracy {first_eval['eval/accuracy']:.3f}")
            stopped = self._loop(start_step, writer, progress)
        finally:  # also on errors: stop the grading workers (first: they outlive a failed close), finish pending writes
            self.pool.close()
            progress.close()
            self.checkpointer.close()
            writer.close()
        if stopped:  # by a signal, at a safe point: the checkpoint and records are complete, the run is not
            self.run_dir.close()
            raise stopped
        summary = run_summary(self.workdir, strategy=c.selection.strategy, num_steps=c.train.num_steps,
                              counters=self.counters)
        if self.is_main:
            plot_run(self.workdir)
            with open(os.path.join(self.workdir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2)
            self.log(format_table([summary], list(summary)))
        self.run_dir.close()  # release the workdir lock once everything is written
        return summary

    def _loop(self, start_step: int, writer: MetricsWriter, progress: Progress) -> preemption.Stopped | None:
        c = self.config
        for step in range(start_step + 1, c.train.num_steps + 1):
            metrics = self.train_step(step)
            if self.skip_audit.enabled:
                metrics.update(self.skip_audit.run(step, self.passes, self.pipeline.element, c.rl.group_size))
            if self.counters["train/bad_steps"] >= c.train.max_bad_steps:
                writer.write(step, metrics)
                raise FloatingPointError(
                    f"step {step}: {self.counters['train/bad_steps']} consecutive non-finite updates "
                    f"(train.max_bad_steps={c.train.max_bad_steps}); stopping. The last checkpoint is finite.")
            final = step == c.train.num_steps
            if (c.eval.every_steps and step % c.eval.every_steps == 0) or final:
                metrics.update(self.evaluate(step))
            writer.write(step, metrics)
            progress.update(step, metrics)
            stop = None if final else preemption.stop_agreed()  # a collective: every host stops after one step
            if self.checkpointer.should_save(step, final or bool(stop)) and not metrics.get("actor/nonfinite_skipped"):
                save_run_state(self.checkpointer, step, learner=self.learner, selector=self.selector,
                               pipeline=self.pipeline, counters=self.counters, config=c,
                               extras=carry_to_json(self.carry))
            if stop:
                return preemption.stopped(stop, step, self.checkpointer.latest_step(), self.workdir)
        return None
