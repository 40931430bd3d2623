"""The training loop: select -> sample -> score -> observe -> filter/curate -> update -> record.

Every strategy runs through the same code: the selector decides which prompts are rolled
out (`selection.run_selection_step` drives the passes), this module supplies the two
callbacks that touch models (pull prompts from the Grain pipeline, roll out and grade a
group), then builds the learner's batch from the groups the selector accepted.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax
import numpy as np

from greso_jax import evaluation
from greso_jax.checkpoint import Checkpointer
from greso_jax.configs import validate
from greso_jax.data.pipeline import PromptPipeline
from greso_jax.from_config import learner_from_config, sampling_kwargs
from greso_jax.metrics import MetricsWriter, Progress, format_table, plot_run, read_metrics
from greso_jax.components import build_policy, build_tokenizer, load_rows
from greso_jax.rewards.pool import GradingPool, score_across_hosts
from greso_jax.rl.batch import assemble_batch
from greso_jax.sampling import generate_in_chunks
from greso_jax.selection import PulledPrompts, RolloutResult, make_selector, run_selection_step
from greso_jax.parallel import multihost
from greso_jax.parallel.sharding import mesh_from_config


class Trainer:
    def __init__(self, config, workdir: str, *, log=print):
        self.config = validate(config)  # before anything is compiled or loaded
        self.workdir = os.path.abspath(workdir)
        self.is_main = jax.process_index() == 0
        self.log = log if self.is_main else (lambda *a, **k: None)
        os.makedirs(self.workdir, exist_ok=True)
        c = config
        self.mesh = mesh_from_config(c.mesh)
        self.tokenizer = build_tokenizer(c)
        self.train_rows, self.eval_sets = load_rows(c)
        self.model = build_policy(c, self.tokenizer, self.train_rows, self.workdir, self.mesh, log=self.log)
        self.learner = learner_from_config(self.model, c, self.mesh)
        self.selector = make_selector(c.selection, num_prompts=max(r.prompt_id for r in self.train_rows) + 1,
                                      group_size=c.rl.group_size, train_batch_size=c.train.train_batch_size,
                                      seed=c.seed)
        self.pipeline = PromptPipeline(
            self.train_rows, self.tokenizer, template=c.data.prompt_template,
            max_prompt_length=c.data.max_prompt_length, seed=c.seed, shuffle=c.data.shuffle,
            keep_filter=self.selector, shard_index=jax.process_index(), shard_count=jax.process_count())
        self.pool = GradingPool(num_workers=c.data.grading_workers, timeout_s=c.data.grading_timeout_s,
                                shaping=c.data.reward_shaping)
        self.checkpointer = Checkpointer(os.path.join(self.workdir, "checkpoints"), keep=c.checkpoint.keep,
                                         every_steps=c.checkpoint.every_steps, async_save=c.checkpoint.async_save)
        self.counters = {"rollout/num_responses": 0, "rollout/num_tokens": 0, "selection/skipped_total": 0,
                         "train/bad_steps": 0}
        self._timers: dict[str, float] = {}
        with open(os.path.join(self.workdir, "config.json"), "w") as f:
            f.write(c.to_json_best_effort(indent=2))

    # -- callbacks for the selection driver -------------------------------------------------

    def _pull_prompts(self, n: int) -> PulledPrompts:
        if multihost.is_multihost():
            elements, _, skipped_ids = self.pipeline.next_prompts_across_hosts(n, multihost.allgather)
        else:
            elements, _, skipped_ids = self.pipeline.next_prompts(n)
        ids = np.asarray([e["prompt_id"] for e in elements], np.int64)
        return PulledPrompts(prompt_ids=ids, payloads=elements, skipped_ids=np.asarray(skipped_ids, np.int64))

    def _rollout(self, prompt_ids, payloads, num_samples: int) -> RolloutResult:
        c = self.config
        call = self._rollout_calls
        self._rollout_calls += 1
        prompts = [list(map(int, e["prompt_tokens"])) for e in payloads]
        start = time.perf_counter()
        rng = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(c.seed), self._step), call)
        out = generate_in_chunks(self.learner.model, prompts, num_samples=num_samples, rng=rng,
                                 eos_ids=self.tokenizer.eos_ids, pad_id=self.tokenizer.pad_id, mesh=self.mesh,
                                 **sampling_kwargs(c))
        self._tick("time/rollout", start)
        start = time.perf_counter()
        rows = len(prompts) * num_samples
        texts = [self.tokenizer.decode(out.tokens[r, :out.lengths[r]]) for r in range(rows)]
        golds = [e["ground_truth"] for e in payloads for _ in range(num_samples)]
        sources = [e["data_source"] for e in payloads for _ in range(num_samples)]
        rewards, correct, failures = score_across_hosts(
            self.pool, texts, golds, sources, process_index=jax.process_index(), process_count=jax.process_count(),
            allgather=multihost.allgather)
        self._grading_failures += failures
        self._tick("time/reward", start)
        return RolloutResult(correct=correct.reshape(len(prompts), num_samples),
                             rewards=rewards.reshape(len(prompts), num_samples),
                             handle=out, num_tokens=int(np.sum(out.lengths)))

    def _tick(self, name: str, start: float) -> None:
        self._timers[name] = self._timers.get(name, 0.0) + time.perf_counter() - start

    # -- evaluation, checkpoints ------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        c = self.config
        out, means = {}, []
        start = time.perf_counter()
        for name, rows in self.eval_sets.items():
            correct = evaluation.sample_and_grade(
                self.learner.model, self.tokenizer, rows, template=c.data.prompt_template,
                num_samples=c.eval.num_samples, temperature=c.eval.temperature, top_p=c.eval.top_p,
                max_new_tokens=c.eval.max_new_tokens or c.sampling.max_new_tokens, seed=c.seed + evaluation.EVAL_SEED_OFFSET,
                pool=self.pool, max_prompt_length=c.data.max_prompt_length,
                prompt_buckets=tuple(c.sampling.prompt_length_buckets), row_buckets=tuple(c.sampling.row_buckets),
                mesh=self.mesh)
            summary = evaluation.summarize(correct)
            out.update({f"eval/{name}/{k}": v for k, v in summary.items()})
            means.append(summary[f"avg@{c.eval.num_samples}"])
        out["eval/accuracy"] = float(np.mean(means)) if means else float("nan")
        out["time/eval"] = time.perf_counter() - start
        return out

    def _save(self, step: int) -> None:
        meta = {"step": step, "data_state": self.pipeline.get_state(), "counters": self.counters,
                "config": json.loads(self.config.to_json_best_effort())}
        self.checkpointer.save(step, train_state=self.learner.train_state(),
                               selector_state=self.selector.state_dict(), meta=meta)

    def _restore(self) -> int:
        step = self.checkpointer.latest_step()
        if step is None:
            return 0
        restored = self.checkpointer.restore(step, train_state_like=self.learner.train_state(),
                                             selector_state_like=self.selector.state_dict())
        self.learner.load_train_state(restored["train_state"])
        self.selector.load_state_dict(restored["selector"])
        self.pipeline.set_state(restored["meta"]["data_state"])
        self.counters.update(restored["meta"]["counters"])
        self.log(f"resumed from step {step} ({self.checkpointer.directory})")
        return step

    # -- the loop ---------------------------------------------------------------------------

    def train_step(self, step: int) -> dict[str, Any]:
        c = self.config
        self._step, self._rollout_calls, self._grading_failures, self._timers = step, 0, 0, {}
        step_start = time.perf_counter()
        result = run_selection_step(self.selector, step, pull_prompts=self._pull_prompts, rollout=self._rollout,
                                    train_batch_size=c.train.train_batch_size)
        metrics = dict(result.metrics)
        every = c.train.host_check_every_steps
        if multihost.is_multihost() and every and step % every == 0:
            multihost.check_identical_across_hosts(self.selector.state_dict(), "the selector state", step)
        if result.groups:
            num_minibatches = c.train.train_batch_size // c.rl.mini_batch_size
            assembled = assemble_batch(result.groups, result.handles, advantage=c.rl.advantage,
                                       pad_id=self.tokenizer.pad_id,
                                       total_length=c.data.max_prompt_length + c.sampling.max_new_tokens,
                                       row_multiple=num_minibatches * c.rl.micro_batch_size)
            metrics.update(assembled.stats)
            start = time.perf_counter()
            metrics.update(self.learner.update(assembled.batch, num_minibatches=num_minibatches,
                                               truncated=assembled.truncated))
            self._tick("time/update", start)
        else:
            metrics["train/groups"] = 0
        skipped = metrics.get("selection/skipped_easy", 0) + metrics.get("selection/skipped_hard", 0)
        considered = skipped + metrics.get("selection/kept", 0)
        metrics["selection/skip_frac"] = skipped / considered if considered else 0.0
        self.counters["selection/skipped_total"] += int(skipped)
        for key in ("rollout/num_responses", "rollout/num_tokens"):
            if key in metrics:
                self.counters[key] = int(metrics[key])
        metrics["rewards/grading_failures"] = self._grading_failures
        if metrics.get("actor/nonfinite_skipped", 0):
            self.counters["train/bad_steps"] += 1
        else:
            self.counters["train/bad_steps"] = 0
        metrics.update(self._timers)
        metrics["time/step"] = time.perf_counter() - step_start
        metrics.update(self.counters)
        return metrics

    def run(self) -> dict[str, Any]:
        c = self.config
        start_step = self._restore()
        writer = MetricsWriter(self.workdir, enabled=self.is_main, resume_step=start_step if start_step else None)
        progress = Progress(c.train.num_steps, start_step, quiet=c.train.quiet, enabled=self.is_main)
        try:
            if start_step == 0:
                first_eval = self.evaluate(0)
                writer.write(0, first_eval | self.counters)
                self.log(f"step 0: held-out accuracy {first_eval['eval/accuracy']:.3f}")
            self._loop(start_step, writer, progress)
        finally:  # also on errors: finish pending checkpoint writes, stop the grading workers
            progress.close()
            self.checkpointer.close()
            writer.close()
            self.pool.close()
        summary = self._summary()
        if self.is_main:
            plot_run(self.workdir)
            with open(os.path.join(self.workdir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2)
            self.log(format_table([summary], list(summary)))
        return summary

    def _loop(self, start_step: int, writer: MetricsWriter, progress: Progress) -> None:
        c = self.config
        for step in range(start_step + 1, c.train.num_steps + 1):
            metrics = self.train_step(step)
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
            if self.checkpointer.should_save(step, final) and not metrics.get("actor/nonfinite_skipped", 0):
                self._save(step)

    def _summary(self) -> dict[str, Any]:
        evals = [r for r in read_metrics(self.workdir) if "eval/accuracy" in r]
        before = evals[0]["eval/accuracy"] if evals else float("nan")
        after = evals[-1]["eval/accuracy"] if evals else float("nan")
        return {"strategy": self.config.selection.strategy, "steps": self.config.train.num_steps,
                "accuracy_before": round(before, 4), "accuracy_after": round(after, 4),
                "rollouts_generated": self.counters["rollout/num_responses"],
                "prompts_skipped": self.counters["selection/skipped_total"]}
