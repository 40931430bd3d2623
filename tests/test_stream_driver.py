"""The stream step driver (selection.stream) over real strategies, with a scripted lane backend whose
prompts finish after a known number of decode chunks with known outcomes."""

import collections

import numpy as np
import pytest

from greso_jax.selection import Aborted, Carry, LaneResult, PassConfig, PulledPrompts, make_selector, run_stream_step

G = 4


class ScriptedLanes:
    """Prompt p takes 1 + p % 3 chunks; it is mixed when p % 2 == 0, else all wrong. Tokens: 5 per chunk per row."""

    def __init__(self, lanes, num_prompts):
        self.lanes, self.num_prompts = lanes, num_prompts
        self.busy: dict[int, list] = {}  # lane -> [prompt, payload, chunks left, chunks run]
        self.position, self.admitted, self.selector = 0, [], None
        self.decoded = self.live = 0

    def pull(self, n):
        kept, skipped = [], []
        while len(kept) < n and self.position < 3 * self.num_prompts:
            prompt = self.position % self.num_prompts
            self.position += 1
            (kept if self.selector.should_keep(np.array([prompt]))[0] else skipped).append(prompt)
        return PulledPrompts(np.array(kept, np.int64), [f"p{p}" for p in kept], np.array(skipped, np.int64))

    def free_lanes(self):
        return self.lanes - len(self.busy)

    def admit(self, prompt_id, payload):
        lane = min(set(range(self.lanes)) - set(self.busy))
        self.busy[lane] = [prompt_id, payload, 1 + prompt_id % 3, 0]
        self.admitted.append(prompt_id)

    def in_flight(self):
        return len(self.busy)

    def advance(self):
        done = []
        self.decoded += self.lanes
        for lane in sorted(self.busy):
            entry = self.busy[lane]
            entry[2] -= 1
            entry[3] += 1
            self.live += 1
            if entry[2] == 0:
                prompt = entry[0]
                correct = np.array([prompt % 2 == 0 and k == 0 for k in range(G)])
                done.append(LaneResult(prompt, entry[1], correct, correct.astype(np.float32),
                                       handle={"prompt": prompt}, num_tokens=5 * G * entry[3]))
                del self.busy[lane]
        return done

    def abort_all(self):
        tokens = sum(5 * G * e[3] for e in self.busy.values())
        prompts = [tuple(self.busy[lane][:2]) for lane in sorted(self.busy)]
        self.busy.clear()
        return Aborted(prompts, len(prompts), tokens)

    def busy_share(self):
        return self.live / self.decoded if self.decoded else 0.0

    def sum_over_hosts(self, counts):
        return counts


def _setup(strategy="dynamic_sampling", lanes=3, num_prompts=40):
    selector = make_selector(strategy, num_prompts=num_prompts, group_size=G, seed=0)
    backend = ScriptedLanes(lanes, num_prompts)
    backend.selector = selector
    return selector, backend


def test_dynamic_sampling_streams_until_the_batch_holds_usable_groups():
    selector, backend = _setup()
    result, carry = run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=4,
                                    max_responses=10_000, in_flight="abort")
    assert len(result.groups) == 4 and all(g.has_variance for g in result.groups)
    assert all(g.prompt_id % 2 == 0 for g in result.groups)
    # Every finished lane was observed the moment it finished: the groups are the rolled-out ones.
    assert result.metrics["selection/kept"] == len(result.rolled_out)
    for g in result.rolled_out:  # each group's handle is its lane's output
        assert result.handles[g.response_refs[0, 0]] == {"prompt": g.prompt_id}
    assert result.metrics["stream/aborted_tokens"] > 0 and not carry.groups
    assert result.metrics["selection/full_batch"] == 1.0
    assert 0 < result.metrics["stream/lanes_busy_share"] <= 1


def test_carry_finishes_what_is_in_flight_and_trains_it_first_next_step():
    selector, backend = _setup()
    result, carry = run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=3,
                                    max_responses=10_000, in_flight="carry")
    assert result.metrics["stream/aborted_tokens"] == 0 and backend.in_flight() == 0
    assert carry.groups and all(g.has_variance for g in carry.groups)
    in_batch = {id(g) for g in result.groups}
    assert not any(id(g) in in_batch for g in carry.groups)
    carried_ids = [g.prompt_id for g in carry.groups]
    result2, _ = run_stream_step(selector, 2, pull_prompts=backend.pull, backend=backend, train_batch_size=3,
                                 max_responses=10_000, in_flight="carry", carry=carry)
    n = min(len(carried_ids), 3)
    assert [g.prompt_id for g in result2.groups[:n]] == carried_ids[:n]
    assert result2.metrics["stream/carried_groups"] == n
    for g in result2.groups[:n]:
        assert result2.handles[g.response_refs[0, 0]] == {"prompt": g.prompt_id}


def test_response_cap_and_data_end_stop_the_stream():
    selector, backend = _setup("vanilla", lanes=2, num_prompts=3)
    result, _ = run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=100,
                                max_responses=8, in_flight="abort")
    assert result.metrics["rollout/step_responses"] == 8 and result.metrics["selection/full_batch"] == 0
    selector, backend = _setup("vanilla", lanes=2, num_prompts=3)
    result, _ = run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=100,
                                max_responses=10_000, in_flight="abort")
    assert len(result.groups) == 9  # three epochs of the scripted stream, then no more data


def test_the_posterior_admits_the_likeliest_informative_prompts_first():
    selector, backend = _setup("posterior", lanes=3, num_prompts=40)
    ids = np.arange(6)
    correct = np.zeros((6, G), bool)
    correct[[0, 2, 4], 0] = True  # prompts 0, 2, 4 mixed; 1, 3, 5 all wrong
    selector.begin_step(1)
    for _ in range(3):
        selector.observe(ids, correct)
    order = selector.admission_order(ids)
    assert sorted(order[:3].tolist()) == [0, 2, 4]
    assert sorted(selector.admission_order(ids[::-1])[:3].tolist()) == [1, 3, 5]  # positions, reversed ids


def test_a_bad_admission_order_is_named():
    selector, backend = _setup("vanilla")
    selector.admission_order = lambda ids: np.zeros(ids.size, np.int64)
    with pytest.raises(ValueError, match="admission_order: must return a permutation"):
        run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=4,
                        max_responses=100)
    with pytest.raises(ValueError, match="stream_in_flight"):
        run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=4,
                        max_responses=100, in_flight="keep", carry=Carry())


def test_once_per_step_drops_repeats_in_the_stream():
    selector = make_selector("vanilla", num_prompts=3, group_size=G, seed=0,
                             passes=PassConfig(once_per_step=True))
    backend = ScriptedLanes(2, 3)
    backend.selector = selector
    result, _ = run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=100,
                                max_responses=10_000)
    assert sorted(g.prompt_id for g in result.rolled_out) == [0, 1, 2]
    assert result.metrics["selection/repeats_dropped"] == 6  # epochs two and three of the scripted stream


@pytest.mark.parametrize("in_flight,admission", [("abort", "fill"), ("carry", "fill"), ("carry", "fit")])
def test_no_pulled_prompt_vanishes(in_flight, admission):
    """Every kept prompt pulled is rolled out or pending (aborted or never admitted, admitted first next
    step); over the first epoch every prompt is rolled out, skipped or pending."""
    selector, backend = _setup("greso", lanes=3, num_prompts=12)
    pulled, skipped = collections.Counter(), set()

    def pull(n):
        got = backend.pull(n)
        pulled.update(got.prompt_ids.tolist())
        skipped.update(got.skipped_ids.tolist())
        return got

    carry, rolled, pending_seen = Carry(), collections.Counter(), 0
    for step in range(1, 6):
        pending_in = [p for p, _ in carry.pending]
        result, carry = run_stream_step(selector, step, pull_prompts=pull, backend=backend, train_batch_size=2,
                                        max_responses=10_000, in_flight=in_flight, carry=carry, admission=admission)
        rolled.update(g.prompt_id for g in result.rolled_out)
        admitted_first = backend.admitted[len(backend.admitted) - int(result.metrics["stream/admitted"]):]
        first = min(len(pending_in), len(admitted_first))  # fit admission may not need them all this step
        assert admitted_first[:first] == pending_in[:first]  # data order: the pending enter first
        pending_seen += len(carry.pending)
        assert pulled == rolled + collections.Counter(p for p, _ in carry.pending), step
        if backend.position >= 12:
            assert set(rolled) | skipped | {p for p, _ in carry.pending} == set(range(12))
    assert pending_seen > 0 and backend.position >= 12


def test_lookahead_lets_a_ranking_strategy_admit_the_best_of_more_prompts():
    """With lookahead L the waiting set holds up to L kept prompts and the lanes take the first of the
    strategy's order over all of them; the ones it ranks last wait into the next step, none is lost."""
    admitted = {}
    for lookahead in (0, 9):
        selector, backend = _setup("vanilla", lanes=3, num_prompts=40)
        selector.admission_order = lambda ids: np.argsort(-ids, kind="stable")  # the highest id first
        result, carry = run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=2,
                                        max_responses=10_000, lookahead=lookahead)
        admitted[lookahead] = backend.admitted[:3]
        rolled = {g.prompt_id for g in result.rolled_out}
        assert rolled.isdisjoint(p for p, _ in carry.pending)
        assert rolled | {p for p, _ in carry.pending} == set(range(backend.position))
    assert admitted[0] == [2, 1, 0] and admitted[9] == [8, 7, 6]
    selector, backend = _setup("vanilla", lanes=3)
    with pytest.raises(ValueError, match="stream_lookahead: 2 is below the 3 lanes"):
        run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=2,
                        max_responses=100, lookahead=2)


def test_fit_admission_counts_what_the_lanes_in_flight_will_bring():
    from greso_jax.selection.stream import _fitting_admissions, _usable_share

    assert _usable_share((0, 0), 0, 0) == 0.5  # one usable and one not of prior
    assert _usable_share((3, 8), 2, 2) == (3 + 2 + 1) / (8 + 2 + 2)
    # 10 usable lacking, 6 lanes in flight at a share of 0.5: 7 expected short, 14 prompts to admit
    assert _fitting_admissions(10, 6, 1, 0.5) == 14 and _fitting_admissions(10, 6, 2, 0.5) == 7
    assert _fitting_admissions(3, 6, 1, 0.5) == 0 and _fitting_admissions(0, 0, 1, 0.5) == 0


def test_fit_admission_trains_this_steps_groups_where_filling_the_lanes_carries_them():
    """Eight lanes, a batch of three usable groups, half the prompts usable: filling every free lane leaves
    about four usable groups in flight when the batch fills, each carried into the next step; admitting only
    what the batch lacks carries far fewer, and every step's batch is still full."""
    carried, responses = {}, {}
    for admission in ("fill", "fit"):
        selector, backend = _setup(lanes=8, num_prompts=400)
        carry = Carry()
        carried[admission] = responses[admission] = 0
        for step in range(1, 9):
            result, carry = run_stream_step(selector, step, pull_prompts=backend.pull, backend=backend,
                                            train_batch_size=3, max_responses=10_000, in_flight="carry",
                                            carry=carry, admission=admission)
            assert result.metrics["selection/full_batch"] == 1.0
            assert carry.usable_share == (sum(g.has_variance for g in result.rolled_out), len(result.rolled_out))
            carried[admission] += result.metrics["stream/carried_groups"]
            responses[admission] += result.metrics["rollout/step_responses"]
    assert carried["fit"] < 0.5 * carried["fill"], carried
    assert responses["fit"] <= responses["fill"], responses
    selector, backend = _setup()
    with pytest.raises(ValueError, match="stream_admission"):
        run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=4,
                        max_responses=100, admission="all")


def test_a_bound_on_pool_reads_ends_a_step_that_keeps_almost_nothing():
    """One prompt in ten kept and each once a step: unbounded, the step reads on through the scripted stream
    (over two readings of the pool) for a batch it cannot fill; bounded at one reading, it stops pulling there
    (overshooting by at most its last pull) and trains on what it has."""
    reads, trained = {}, {}
    for bound in (0.0, 1.0):
        selector = make_selector("vanilla", num_prompts=40, group_size=G, seed=0,
                                 passes=PassConfig(once_per_step=True))
        selector.should_keep = lambda ids, epochs=None: np.asarray(ids) % 10 == 0
        backend = ScriptedLanes(2, 40)
        backend.selector = selector
        result, _ = run_stream_step(selector, 1, pull_prompts=backend.pull, backend=backend, train_batch_size=100,
                                    max_responses=10_000, max_pool_reads=bound)
        reads[bound], trained[bound] = result.metrics["stream/pool_reads"], len(result.groups)
    assert reads[0.0] > 2.0 and 1.0 <= reads[1.0] < 1.5, reads
    assert trained[1.0] == trained[0.0] == 4  # prompts 0, 10, 20 and 30 (even: mixed), once each
