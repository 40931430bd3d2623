"""The training loop: select -> sample -> score -> observe -> filter/curate -> update -> record.

Every strategy runs through the same code: the selector decides which prompts are rolled
out (`selection.run_selection_step` drives the passes), this module supplies the two
callbacks that touch models (pull prompts from the Grain pipeline, roll out and grade a
group), then builds the learner's batch from the groups the selector accepted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any

import jax
import numpy as np

from greso_jax.benchmark_scoring import EVAL_SEED_OFFSET, sample_and_grade, summarize
from greso_jax.checkpoint import Checkpointer, checkpoint_dir, restore_run_state, save_run_state
from greso_jax.configs import validate
from greso_jax.data.pipeline import PromptPipeline
from greso_jax.data.sources import load_eval_sets, load_source
from greso_jax.metrics import MetricsWriter, Progress, format_table, plot_run, read_metrics
from greso_jax.policy import build_policy, build_tokenizer
from greso_jax.rewards.pool import GradingPool
from greso_jax.rl.advantages import compute_advantages
from greso_jax.rl.batch import make_rollout_batch
from greso_jax.rl.learner import Learner
from greso_jax.sampling import generate
from greso_jax.selection import PassConfig, PulledPrompts, ScoredPass, make_selector, resolve_strategy, run_selection_step
from greso_jax.parallel import multihost
from greso_jax.parallel.sharding import mesh_from_config
from greso_jax.run_dir import open_run_dir


def _load_rows(c):
    """The training rows and the evaluation sets {name: rows} the config names."""
    d = c.data
    arith = {"arith_num_train": d.arith_num_train, "arith_num_heldout": d.arith_num_heldout,
             "arith_seed": d.arith_seed}
    train = load_source(source=d.source, path=d.path, skip_bad_rows=d.skip_bad_rows, **arith)
    # "synthetic" is the held-out half of the arithmetic pool: a run on other data has none
    benchmarks = [b for b in c.eval.benchmarks if b != "synthetic" or (d.source == "arith" and d.arith_num_heldout)]
    return train, load_eval_sets(benchmarks, data_dir=c.eval.data_dir, max_problems=c.eval.max_problems, **arith)


def _rounded(value) -> float | None:
    return round(value, 4) if isinstance(value, (int, float)) and math.isfinite(value) else None


@dataclasses.dataclass
class Rollout:
    """What one sampler call produced for `prompts` (kept by the selector's driver as a handle)."""

    num_samples: int  # responses per prompt: row i*num_samples + j is sample j of prompt i
    prompt_tokens: list[list[int]]  # one per response row
    tokens: np.ndarray  # int32 [R, L]
    logprobs: np.ndarray  # f32 [R, L]
    lengths: np.ndarray  # int32 [R]
    truncated: np.ndarray  # bool [R]


class Trainer:
    def __init__(self, config, workdir: str, *, log=print):
        self.config = validate(config)  # before anything is compiled or loaded
        self.workdir = os.path.abspath(workdir)
        self.is_main = jax.process_index() == 0
        self.log = log if self.is_main else (lambda *a, **k: None)
        os.makedirs(self.workdir, exist_ok=True)
        c = config
        # run_dir hook: lock the workdir, pick the newest intact checkpoint, refuse an incompatible
        # resume; before anything below writes into the workdir (warm-start cache, config.json).
        self.run_dir = open_run_dir(self.workdir, c, is_main=self.is_main, log=self.log)
        self.mesh = mesh_from_config(c.mesh)
        self.tokenizer = build_tokenizer(c)
        self.train_rows, self.eval_sets = _load_rows(c)
        if not self.eval_sets:
            self.log(f"no evaluation sets for data.source={c.data.source!r} (eval.benchmarks={list(c.eval.benchmarks)}): "
                     "held-out accuracy is not measured")
        self.model = build_policy(c, self.tokenizer, self.train_rows, self.workdir, self.mesh, log=self.log)
        self.learner = Learner(self.model, c, mesh=self.mesh)
        strategy = resolve_strategy(c.selection.strategy)
        self.selector = make_selector(
            strategy, num_prompts=max(r.prompt_id for r in self.train_rows) + 1, group_size=c.rl.group_size,
            seed=c.seed, passes=PassConfig(**{f: c.selection[f] for f in PassConfig.__dataclass_fields__}),
            settings=c.selection.get(strategy))
        self.pipeline = PromptPipeline(
            self.train_rows, self.tokenizer, template=c.data.prompt_template,
            max_prompt_length=c.data.max_prompt_length, seed=c.seed, shuffle=c.data.shuffle,
            keep_filter=self.selector, shard_index=jax.process_index(), shard_count=jax.process_count())
        self.pool = GradingPool(num_workers=c.data.grading_workers, timeout_s=c.data.grading_timeout_s,
                                shaping=c.data.reward_shaping)
        self.checkpointer = Checkpointer(checkpoint_dir(self.workdir), keep=c.checkpoint.keep,
                                         every_steps=c.checkpoint.every_steps, async_save=c.checkpoint.async_save)
        self.counters = {"rollout/num_responses": 0, "rollout/num_tokens": 0, "selection/skipped_total": 0,
                         "train/bad_steps": 0}
        self._timers: dict[str, float] = {}
        self._dropped_logged = False
        if self.is_main:  # run_dir hook: config.json, configs/<step>.json, configs/launches.jsonl
            self.run_dir.record_launch(c)

    # -- callbacks for the selection driver -------------------------------------------------

    def _pull_prompts(self, n: int) -> PulledPrompts:
        if multihost.is_multihost():
            elements, _, skipped_ids = self.pipeline.next_prompts_across_hosts(n, multihost.allgather)
        else:
            elements, _, skipped_ids = self.pipeline.next_prompts(n)
        ids = np.asarray([e["prompt_id"] for e in elements], np.int64)
        return PulledPrompts(prompt_ids=ids, payloads=elements, skipped_ids=np.asarray(skipped_ids, np.int64))

    def _rollout(self, prompt_ids, payloads, num_samples: int) -> ScoredPass:
        c = self.config
        call = self._rollout_calls
        self._rollout_calls += 1
        prompts = [list(map(int, e["prompt_tokens"])) for e in payloads]
        start = time.perf_counter()
        rng = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(c.seed), self._step), call)
        out = self._generate_in_chunks(prompts, num_samples, rng)
        self._tick("time/rollout", start)
        start = time.perf_counter()
        rows = len(prompts) * num_samples
        texts = [self.tokenizer.decode(out.tokens[r, :out.lengths[r]]) for r in range(rows)]
        golds = [e["ground_truth"] for e in payloads for _ in range(num_samples)]
        sources = [e["data_source"] for e in payloads for _ in range(num_samples)]
        rewards, correct = self._score_across_hosts(texts, golds, sources)
        self._tick("time/reward", start)
        return ScoredPass(correct=correct.reshape(len(prompts), num_samples),
                             rewards=rewards.reshape(len(prompts), num_samples),
                             handle=out, num_tokens=int(np.sum(out.lengths)))

    def _generate_in_chunks(self, prompts: list[list[int]], num_samples: int, rng) -> Rollout:
        """Generates num_samples responses per prompt, at most sampling.max_rows_per_call rows
        per sampler call so that the KV cache of a large pass fits in device memory."""
        c = self.config
        per_call = len(prompts)
        if c.sampling.max_rows_per_call:
            per_call = max(1, c.sampling.max_rows_per_call // num_samples)
        parts = []
        for i, start in enumerate(range(0, len(prompts), per_call)):
            parts.append(generate(
                self.learner.model, prompts[start:start + per_call], num_samples=num_samples,
                max_new_tokens=c.sampling.max_new_tokens, rng=jax.random.fold_in(rng, i),
                temperature=c.sampling.temperature, top_p=c.sampling.top_p, top_k=c.sampling.top_k,
                eos_ids=self.tokenizer.eos_ids, pad_id=self.tokenizer.pad_id,
                prompt_buckets=tuple(c.sampling.prompt_length_buckets), row_buckets=tuple(c.sampling.row_buckets),
                mesh=self.mesh))
        return Rollout(num_samples=num_samples, prompt_tokens=[p for p in prompts for _ in range(num_samples)],
                       tokens=np.concatenate([p.tokens for p in parts]),
                       logprobs=np.concatenate([p.logprobs for p in parts]),
                       lengths=np.concatenate([p.lengths for p in parts]),
                       truncated=np.concatenate([p.truncated for p in parts]))

    def _score_across_hosts(self, texts, golds, sources) -> tuple[np.ndarray, np.ndarray]:
        """Grades every response once: host h grades rows h, h+P, ...; the results are gathered
        so every host holds all rewards (the selector must observe identical groups everywhere)."""
        hosts, me = jax.process_count(), jax.process_index()
        rows = np.arange(me, len(texts), hosts)
        scored = self.pool.score([texts[i] for i in rows], [golds[i] for i in rows], [sources[i] for i in rows])
        width = -(-len(texts) // hosts)
        local = np.zeros((width, 3), np.float32)
        local[:len(rows), 0] = scored.rewards
        local[:len(rows), 1] = scored.correct
        local[0, 2] = scored.num_timeouts + scored.num_crashes
        gathered = multihost.allgather(local)  # [P, width, 3]
        rewards, correct = np.zeros(len(texts), np.float32), np.zeros(len(texts), bool)
        for host in range(hosts):
            host_rows = np.arange(host, len(texts), hosts)
            rewards[host_rows] = gathered[host, :len(host_rows), 0]
            correct[host_rows] = gathered[host, :len(host_rows), 1] > 0.5
        self._grading_failures += int(gathered[:, 0, 2].sum())
        return rewards, correct

    def _tick(self, name: str, start: float) -> None:
        self._timers[name] = self._timers.get(name, 0.0) + time.perf_counter() - start

    # -- batch assembly -------------------------------------------------------------------

    def _assemble_batch(self, result) -> tuple[Any, np.ndarray, dict]:
        """Accepted groups -> the learner's RolloutBatch (row count padded to a multiple of the
        update's micro-batch layout so the compiled update is reused)."""
        c = self.config
        groups = result.groups
        width = max(len(g.rewards) for g in groups)
        rewards = np.zeros((len(groups), width), np.float32)
        mask = np.zeros((len(groups), width), bool)
        baseline = np.full(len(groups), np.nan, np.float32)
        scale = np.full(len(groups), np.nan, np.float32)
        for i, g in enumerate(groups):
            k = len(g.rewards)
            rewards[i, :k] = g.rewards
            mask[i, :k] = g.loss_mask
            baseline[i], scale[i] = g.baseline, g.scale
        advantages = compute_advantages(rewards, c.rl.advantage, response_mask=mask, baseline=baseline,
                                        scale=scale)
        prompt_tokens, tokens, logprobs, lengths, truncated, row_adv, row_mask = [], [], [], [], [], [], []
        for i, g in enumerate(groups):
            for j, (call, row, sample) in enumerate(g.response_refs):
                h = result.handles[call]
                r = row * h.num_samples + sample
                prompt_tokens.append(h.prompt_tokens[r])
                tokens.append(h.tokens[r])
                logprobs.append(h.logprobs[r])
                lengths.append(h.lengths[r])
                truncated.append(h.truncated[r])
                row_adv.append(advantages[i, j])
                row_mask.append(mask[i, j])
        num_minibatches = c.train.train_batch_size // c.rl.mini_batch_size
        multiple = num_minibatches * c.rl.micro_batch_size
        padded = -(-len(tokens) // multiple) * multiple
        filler = padded - len(tokens)
        prompt_tokens += [[self.tokenizer.pad_id]] * filler
        tokens += [np.full_like(tokens[0], self.tokenizer.pad_id)] * filler
        logprobs += [np.zeros_like(logprobs[0])] * filler
        lengths += [0] * filler
        truncated += [False] * filler
        row_adv += [0.0] * filler
        row_mask += [False] * filler
        batch = make_rollout_batch(
            prompt_tokens, np.stack(tokens), np.asarray(lengths, np.int32), np.stack(logprobs),
            np.asarray(row_adv, np.float32), pad_id=self.tokenizer.pad_id,
            total_length=c.data.max_prompt_length + c.sampling.max_new_tokens, loss_mask=np.asarray(row_mask))
        stats = {"rollout/reward_mean": float(rewards[mask].mean()) if mask.any() else 0.0,
                 "train/groups": len(groups), "train/responses": len(tokens) - filler}
        return batch, np.asarray(truncated), stats

    # -- evaluation, checkpoints ------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        c = self.config
        out, means = {}, []
        start = time.perf_counter()
        for name, rows in self.eval_sets.items():
            correct = sample_and_grade(
                self.learner.model, self.tokenizer, rows, template=c.data.prompt_template,
                num_samples=c.eval.num_samples, temperature=c.eval.temperature, top_p=c.eval.top_p,
                max_new_tokens=c.eval.max_new_tokens or c.sampling.max_new_tokens, seed=c.seed + EVAL_SEED_OFFSET,
                pool=self.pool, max_prompt_length=c.data.max_prompt_length,
                prompt_buckets=tuple(c.sampling.prompt_length_buckets), row_buckets=tuple(c.sampling.row_buckets),
                mesh=self.mesh)
            summary = summarize(correct)
            out.update({f"eval/{name}/{k}": v for k, v in summary.items()})
            means.append(summary[f"avg@{c.eval.num_samples}"])
        out["eval/accuracy"] = float(np.mean(means)) if means else float("nan")
        out["time/eval"] = time.perf_counter() - start
        return out

    def _save(self, step: int) -> None:
        save_run_state(self.checkpointer, step, learner=self.learner, selector=self.selector, pipeline=self.pipeline,
                       counters=self.counters, config=self.config)

    def _restore(self) -> int:
        step = restore_run_state(self.checkpointer, learner=self.learner, selector=self.selector,
                                 pipeline=self.pipeline, counters=self.counters, step=self.run_dir.start_step)
        if step:
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
            batch, truncated, stats = self._assemble_batch(result)
            metrics.update(stats)
            start = time.perf_counter()
            metrics.update(self.learner.update(batch, num_minibatches=c.train.train_batch_size // c.rl.mini_batch_size,
                                               truncated=truncated))
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
        metrics["data/dropped_too_long"] = self.pipeline.num_dropped_too_long
        if self.pipeline.num_dropped_too_long and not self._dropped_logged:
            self._dropped_logged = True
            self.log(f"dropping prompts longer than data.max_prompt_length={c.data.max_prompt_length} tokens "
                     "(counted in data/dropped_too_long)")
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
        self.run_dir.close()  # run_dir hook: release the workdir lock once everything is written
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
        # metrics.jsonl stores a NaN accuracy (no evaluation sets) as the string "nan": report None
        before, after = (evals[i]["eval/accuracy"] if evals else None for i in (0, -1))
        return {"strategy": self.config.selection.strategy, "steps": self.config.train.num_steps,
                "accuracy_before": _rounded(before), "accuracy_after": _rounded(after),
                "rollouts_generated": self.counters["rollout/num_responses"],
                "prompts_skipped": self.counters["selection/skipped_total"]}
