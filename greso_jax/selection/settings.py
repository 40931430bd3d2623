"""A strategy's settings: a frozen dataclass per config section, the one place its defaults and checks live.

`selection.*` is `PassConfig`, the pass sizing every pass-based strategy shares; each strategy's
own section `selection.<name>.*` is its `Settings` dataclass. Fields are declared with
`core.specs.field` (type, range, one-line doc), so the base config, `config.validate` and the
constructors read the same declaration.
"""

from __future__ import annotations

import dataclasses

from greso_jax.core.specs import BOOL, FLOAT, INT, STR, ConfigError, Spec, check_dataclass, field

GROUP_SIZE_SPEC = Spec(INT, 2)  # rl.group_size: a group of one response never has reward variance
IN_FLIGHT_MODES = ("abort", "carry")  # selection.stream_in_flight (stream.run_stream_step checks it too)
ADMISSION_MODES = ("fill", "fit")  # selection.stream_admission


class StrategySettings:
    """Base of a strategy's settings dataclass. `checked` runs every check on it: each field's spec,
    the relations between fields, and the checks that need the run's group size."""

    def checked(self, prefix: str, *, group_size: int | None = None):
        """Returns self after checking it; errors are ConfigErrors naming `prefix.field`. group_size
        (rl.group_size): also the checks of what the settings derive from it (None: those are left out)."""
        check_dataclass(self, prefix)
        self.check_relations(prefix)
        if group_size is not None:
            self.check_group_size(prefix, group_size)
        return self

    def check_relations(self, prefix: str) -> None:
        """Checks between fields; raise ConfigError naming `prefix.field`."""

    def check_group_size(self, prefix: str, group_size: int) -> None:
        """Checks of what the settings derive from rl.group_size (AERO's budget); raise ConfigError."""


@dataclasses.dataclass(frozen=True)
class PassConfig(StrategySettings):
    """How pass-based strategies size the rollout passes of one step (`selection.*`, shared by all)."""

    rollout_batch_size: int = field(96, Spec(INT, 1), "kept prompts in the first pass of a step; also the "
                                    "largest pass")
    min_pass_size: int = field(8, Spec(INT, 1), "smallest follow-up pass")
    max_passes: int = field(8, Spec(INT, 1), "cap on rollout passes per step (DAPO's max_num_gen_batches)")
    pass_cap: str = field("passes", Spec(STR, choices=("passes", "prompts")),
                          "what max_passes caps: passes (DAPO's rule); prompts: max_passes x rollout_batch_size "
                          "prompts rolled out a step, whatever the passes' sizes, so a skipper's smaller passes "
                          "meet the budget ds_fixed's full passes have instead of running out of passes first")
    on_max_passes: str = field("train", Spec(STR, choices=("train", "error")),
                               "when the cap is hit: train on what was collected, or raise")
    once_per_step: bool = field(False, Spec(BOOL), "roll out a prompt at most once per step: a pulled prompt "
                                "already rolled out this step is dropped (selection/repeats_dropped). A selector "
                                "that skips most of a small pool cycles it within a step and would otherwise "
                                "re-roll the same prompts on the same policy")
    rollout_mode: str = field("passes", Spec(STR, choices=("passes", "stream")),
                              "passes: rollouts in passes of prompts; stream: a fixed set of lanes decoding "
                              "continuously, each refilled with the next kept prompt as its group finishes")
    stream_lanes: int = field(0, Spec(INT, 0), "stream mode: prompts (of G rows each) in flight; 0: "
                              "rollout_batch_size")
    stream_lookahead: int = field(0, Spec(INT, 0), "stream mode: most kept prompts waiting for a lane, ranked "
                                  "by the strategy's admission order (the rest wait into the next step); 0: "
                                  "stream_lanes. Above it, a strategy that ranks picks the best of more candidates")
    stream_admission: str = field("fill", Spec(STR, choices=ADMISSION_MODES),
                                  "stream mode, which free lanes take a waiting prompt: fill (every one) or fit "
                                  "(only while the usable groups plus the lanes in flight, at the usable share of "
                                  "the groups finished this step and the last, fall short of the batch, so that "
                                  "the lanes still in flight when it fills hold about what it lacks and little is "
                                  "carried a step off-policy or aborted)")
    stream_max_pool_reads: float = field(0.0, Spec(FLOAT, 0.0), "stream mode: the most prompts a step pulls "
                                         "(kept or skipped), in readings of the pool; 0: no bound. Where a "
                                         "selector keeps almost nothing a step otherwise reads on until its batch "
                                         "fills (~30 readings a step measured on saturated seeds); bounded, it "
                                         "trains on what it has, as passes do at max_passes")
    stream_chunk_steps: int = field(32, Spec(INT, 1), "stream mode: most decode steps between two host "
                                    "decisions (a chunk also ends when a lane finishes)")
    stream_in_flight: str = field("carry", Spec(STR, choices=IN_FLIGHT_MODES),
                                  "stream mode, lanes in flight once the batch is full: carry (finish them and "
                                  "train their usable groups first next step, one step off-policy; measured on "
                                  "the headline task: as accurate as abort at 8% less CPU a step) or abort (their "
                                  "tokens counted as stream/aborted_tokens)")

    def check_relations(self, prefix: str) -> None:
        if self.min_pass_size > self.rollout_batch_size:
            raise ConfigError(f"{prefix}.min_pass_size: {self.min_pass_size} exceeds "
                              f"{prefix}.rollout_batch_size {self.rollout_batch_size}")
        lanes = self.stream_lanes or self.rollout_batch_size
        if 0 < self.stream_lookahead < lanes:
            raise ConfigError(f"{prefix}.stream_lookahead: {self.stream_lookahead} is below the {lanes} stream lanes "
                              "it must keep filled (0: as many as the lanes)")


@dataclasses.dataclass(frozen=True)
class Ablation:
    """The setting a strategy's own study sweeps (GRESO's Δp): its field and the values swept. The
    simulator's table and experiments/ablate_delta_p.py read it from the strategy."""

    field: str
    values: tuple[float, ...]
    label: str = ""  # the column header ("": the field's name)
