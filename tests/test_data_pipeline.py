"""Grain prompt pipeline: exact state round trip, per-epoch orders, seeds, length drops,
the keep-filter hook, shards; prompt templates."""

import json
import os

import numpy as np
import pytest

from greso_jax.data.arith import ARITH_ALPHABET, make_arith_pools
from greso_jax.data.pipeline import KeepAll, PromptPipeline
from greso_jax.data.prompts import QWEN_MATH_SYSTEM, format_prompt
from greso_jax.data.rows import PromptRow
from greso_jax.models.tokenizer import CharTokenizer, HFTokenizer

ROWS, _ = make_arith_pools(40, 0, seed=5)
TOKENIZER = CharTokenizer(ARITH_ALPHABET, 32)


def pipeline(**overrides):
    settings = dict(template="plain", max_prompt_length=64, seed=11)
    settings.update(overrides)
    return PromptPipeline(overrides.pop("rows", ROWS), TOKENIZER, **{k: v for k, v in settings.items() if k != "rows"})


def ids(elements):
    return [e["prompt_id"] for e in elements]


class EvenIds:
    def should_keep(self, prompt_ids, epochs=None):
        return prompt_ids % 2 == 0


def test_state_round_trip_mid_epoch_resumes_identically():
    first = pipeline(keep_filter=EvenIds())
    first.next_prompts(7)
    state = json.loads(json.dumps(first.get_state()))  # the trainer stores it as JSON
    expected = [first.next_prompts(9) for _ in range(6)]  # crosses into later epochs
    resumed = pipeline(keep_filter=EvenIds())
    resumed.set_state(state)
    for kept, skipped in expected:
        again = resumed.next_prompts(9)
        assert ids(again[0]) == ids(kept)
        np.testing.assert_array_equal(again[1], skipped)
        for a, b in zip(again[0], kept):
            np.testing.assert_array_equal(a["prompt_tokens"], b["prompt_tokens"])
    assert resumed.get_state() == first.get_state()


def test_epochs_differ_and_seeds_repeat():
    stream = pipeline()
    epoch0, epoch1 = ids(stream.next_prompts(40)[0]), ids(stream.next_prompts(40)[0])
    assert sorted(epoch0) == sorted(epoch1) == list(range(40))
    assert epoch0 != epoch1 and stream.epoch == 2
    same = pipeline()
    assert ids(same.next_prompts(80)[0]) == epoch0 + epoch1
    assert ids(pipeline(seed=12).next_prompts(40)[0]) != epoch0
    assert ids(pipeline(shuffle=False).next_prompts(40)[0]) == list(range(40))


def test_elements_carry_tokens_and_labels():
    element = pipeline().next_prompts(1)[0][0]
    row = ROWS[element["prompt_id"]]
    assert element["prompt_tokens"].dtype == np.int32
    assert TOKENIZER.decode(element["prompt_tokens"]) == row.question
    assert (element["ground_truth"], element["data_source"], element["difficulty"]) == (
        row.ground_truth, "arith", row.difficulty)


def test_too_long_prompts_are_dropped_and_counted():
    limit = 8
    too_long = sum(len(r.question) > limit for r in ROWS)
    assert 0 < too_long < len(ROWS)
    shuffled = pipeline(max_prompt_length=limit).next_prompts(len(ROWS) - too_long)[0]
    assert all(len(e["prompt_tokens"]) <= limit for e in shuffled)
    assert sorted(ids(shuffled)) == [r.prompt_id for r in ROWS if len(r.question) <= limit]
    stream = pipeline(max_prompt_length=limit, shuffle=False)  # in id order: drops are read up to the last fit
    fitting = [r.prompt_id for r in ROWS if len(r.question) <= limit]
    assert ids(stream.next_prompts(len(fitting))[0]) == fitting
    assert stream.num_dropped_too_long == sum(len(r.question) > limit for r in ROWS[:fitting[-1] + 1])
    assert ids(stream.next_prompts(1)[0]) == fitting[:1]
    assert stream.num_dropped_too_long == too_long + fitting[0] and stream.epoch == 1
    with pytest.raises(ValueError, match="max_prompt_length"):
        pipeline(max_prompt_length=2).next_prompts(1)


def test_keep_filter_skips_before_generation():
    stream = pipeline(keep_filter=EvenIds())
    kept, skipped = stream.next_prompts(20)
    num_skipped = len(skipped)
    assert all(i % 2 == 0 for i in ids(kept)) and len(kept) == 20
    assert num_skipped == len(skipped) and all(skipped % 2 == 1)
    assert stream.num_skipped == num_skipped
    unfiltered = ids(pipeline().next_prompts(20 + num_skipped)[0])
    assert [i for i in unfiltered if i % 2 == 0] == ids(kept)
    assert KeepAll().should_keep(np.arange(3)).tolist() == [True] * 3


class OneInTen:
    def should_keep(self, prompt_ids, epochs=None):
        return (prompt_ids * 7 + np.asarray(epochs)) % 10 == 0


def test_a_sparse_filter_consumes_the_stream_exactly_up_to_the_nth_kept_prompt():
    stream = pipeline(keep_filter=OneInTen())
    pulls = [stream.next_prompts(3) for _ in range(8)]  # about 240 prompts read: six epochs
    reference = pipeline()  # the unfiltered stream, one prompt at a time
    for kept, skipped in pulls:
        met = []
        while len([i for i, k in met if k]) < 3 and len(met) < 3 + reference.num_prompts:  # or one epoch
            prompt = reference.next_prompts(1)[0][0]["prompt_id"]
            epoch = (reference.get_state()["next_index"] - 1) // reference.num_prompts
            met.append((prompt, bool(OneInTen().should_keep(np.array([prompt]), np.array([epoch]))[0])))
        assert ids(kept) == [i for i, k in met if k] and skipped.tolist() == [i for i, k in met if not k]
    assert stream.get_state()["next_index"] == reference.get_state()["next_index"]
    assert stream.num_skipped == reference.get_state()["next_index"] - sum(len(kept) for kept, _ in pulls)


class CountingOneInTen(OneInTen):
    def __init__(self):
        self.calls = 0

    def should_keep(self, prompt_ids, epochs=None):
        self.calls += 1
        return super().should_keep(prompt_ids, epochs)


def test_small_pulls_read_ahead_by_the_last_pulls_rate_without_changing_any_decision():
    remembering, forgetting = CountingOneInTen(), CountingOneInTen()
    streams = pipeline(keep_filter=remembering), pipeline(keep_filter=forgetting)
    for n in [1, 2, 1, 3, 1, 1, 2, 1, 4, 1, 1, 1]:  # a stream step's refills: a few prompts at a time
        streams[1].reset_read_ahead()  # every pull starts from a keep rate of 1
        (kept_a, skipped_a), (kept_b, skipped_b) = (s.next_prompts(n) for s in streams)
        assert ids(kept_a) == ids(kept_b) and skipped_a.tolist() == skipped_b.tolist()
    assert streams[0].get_state() == streams[1].get_state()
    # At a 10% keep rate a pull from a rate of 1 asks the filter ~4 times; from the last pull's rate ~1-2.
    assert remembering.calls < 0.7 * forgetting.calls, (remembering.calls, forgetting.calls)


def test_bad_keep_filter_and_bad_state():
    class Wrong:
        def should_keep(self, prompt_ids, epochs=None):
            return np.ones(len(prompt_ids) + 1, dtype=bool)

    with pytest.raises(ValueError, match="should_keep"):
        pipeline(keep_filter=Wrong()).next_prompts(2)
    state = pipeline().get_state()
    with pytest.raises(ValueError, match="seed"):
        pipeline(seed=3).set_state(state)
    with pytest.raises(ValueError, match="version 1"):
        pipeline().set_state(dict(state, version=1))


def test_shards_split_each_epoch():
    parts = [pipeline(shard_index=i, shard_count=2) for i in range(2)]
    reads = [ids(p.next_prompts(20)[0]) for p in parts]
    assert sorted(reads[0] + reads[1]) == list(range(40))
    assert parts[0].num_prompts == 40


def test_pipeline_rejects_sparse_ids():
    rows = [PromptRow(5, "1+1=", "2", "arith")]
    with pytest.raises(ValueError, match="prompt ids"):
        PromptPipeline(rows, TOKENIZER, template="plain", max_prompt_length=8, seed=0)


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = tmp_path_factory.mktemp("tok")
    words = ["<|im_start|>", "<|im_end|>", "[UNK]"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "eos_token": "<|im_end|>"}))
    return HFTokenizer(str(folder))


def test_templates(chat_tokenizer):
    row = PromptRow(0, "What is 1+1?", "2", "gsm8k")
    assert format_prompt(row, "plain", chat_tokenizer) == "What is 1+1?"
    chat = format_prompt(row, "chat", chat_tokenizer)
    assert chat == "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n"
    greso = format_prompt(row, "greso", chat_tokenizer)
    assert "Please solve the following math problem: What is 1+1?" in greso and "\\boxed{}" in greso
    qwen = format_prompt(row, "qwen_math", chat_tokenizer)
    assert qwen.startswith(f"<|im_start|>system\n{QWEN_MATH_SYSTEM}<|im_end|>")
    stored = PromptRow(0, "q", "2", "dapo", messages=[{"role": "user", "content": "stored prompt"}])
    assert "stored prompt" in format_prompt(stored, "chat", chat_tokenizer)
    with pytest.raises(ValueError, match="prompt_template"):
        format_prompt(row, "fancy", chat_tokenizer)


def test_greso_template_keeps_the_parquet_instruction(shared_data):
    from greso_jax.data.sources import load_verl_parquet

    row = load_verl_parquet(os.path.join(shared_data, "dapo_math17k_cleaned", "train.parquet"))[0]
    text = format_prompt(row, "greso", CharTokenizer("ab"))
    assert text.count("Please solve the following math problem") == 1


class RejectAll:
    def should_keep(self, prompt_ids, epochs=None):
        return np.zeros(len(prompt_ids), dtype=bool)


def test_a_filter_that_rejects_a_whole_epoch_returns_short():
    stream = pipeline(keep_filter=RejectAll())
    kept, skipped = stream.next_prompts(5)
    assert kept == [] and len(skipped) >= stream.num_prompts and stream.num_skipped == len(skipped)


def _lockstep_hosts(num_hosts, n, keep_filter, pulls, hosts=None):
    """Runs `num_hosts` sharded pipelines (default: over ROWS) in lockstep threads with a real barrier-based
    allgather."""
    import threading

    if hosts is None:
        hosts = [pipeline(keep_filter=keep_filter, shard_index=h, shard_count=num_hosts) for h in range(num_hosts)]
    barrier, slots, results = threading.Barrier(num_hosts), [None] * num_hosts, [[] for _ in range(num_hosts)]

    def run(h):
        def allgather(x):
            slots[h] = np.asarray(x)
            barrier.wait()
            out = np.stack(slots)
            barrier.wait()
            return out
        for _ in range(pulls):
            kept, skipped = hosts[h].next_prompts_across_hosts(n, allgather)
            results[h].append((ids(kept), skipped.tolist()))

    threads = [threading.Thread(target=run, args=(h,)) for h in range(num_hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results, hosts


def _single_host_pulls(stream, n, pulls):
    """[(kept ids, skipped ids)] of `pulls` pulls of `n` from one host's stream, as _lockstep_hosts records them."""
    out = []
    for _ in range(pulls):
        kept, skipped = stream.next_prompts(n)
        out.append((ids(kept), skipped.tolist()))
    return out


@pytest.mark.parametrize("num_hosts", [2, 3])
def test_sharded_pull_equals_the_single_host_stream(num_hosts):
    expected = _single_host_pulls(pipeline(keep_filter=EvenIds()), 5, 7)
    results, _ = _lockstep_hosts(num_hosts, 5, EvenIds(), 7)
    for host_result in results:
        assert host_result == expected


class KeepsFirstEpochOddIds:
    """Keeps odd ids in epoch 0 only: later pulls reject whole epochs and stop at their bound."""

    def should_keep(self, prompt_ids, epochs=None):
        return (prompt_ids % 2 == 1) & (np.asarray(epochs) == 0)


@pytest.mark.parametrize("num_hosts", [2, 3])
def test_a_sharded_pull_that_meets_its_bound_consumes_what_one_host_would(num_hosts):
    # Where the filter rejects a whole epoch, the pull stops at its bound: how far that consumes the stream
    # must not depend on the read-ahead (a resumed run forgets the recent keep rate), so it must equal the
    # single-host stream's, which counts pulled prompts exactly.
    single = pipeline(keep_filter=KeepsFirstEpochOddIds())
    expected = _single_host_pulls(single, 15, 5)
    assert [len(kept) for kept, _ in expected][:2] == [15, 5] and expected[2][0] == []
    results, hosts = _lockstep_hosts(num_hosts, 15, KeepsFirstEpochOddIds(), 5)
    for host_result in results:
        assert host_result == expected
    assert hosts[0].epoch == single.epoch and hosts[0].num_skipped == single.num_skipped


def test_sharded_pull_counts_drops_once_and_reads_rows_in_any_order():
    limit = 8
    rows = ROWS[::-1]  # rows need not be stored in id order
    single = pipeline(rows=rows, keep_filter=EvenIds(), max_prompt_length=limit)
    expected = [ids(single.next_prompts(5)[0]) for _ in range(6)]
    hosts = [pipeline(rows=rows, keep_filter=EvenIds(), max_prompt_length=limit, shard_index=h, shard_count=2)
             for h in range(2)]
    results, hosts = _lockstep_hosts(2, 5, EvenIds(), 6, hosts)
    assert [kept for kept, _ in results[0]] == [kept for kept, _ in results[1]] == expected
    assert sum(h.num_dropped_too_long for h in hosts) == single.num_dropped_too_long > 0
    element = single.element(7)
    assert TOKENIZER.decode(element["prompt_tokens"]) == ROWS[7].question and element["prompt_id"] == 7


def test_a_two_host_state_resumes_on_one_host():
    single = pipeline(keep_filter=EvenIds())
    expected = [ids(single.next_prompts(5)[0]) for _ in range(5)]
    results, hosts = _lockstep_hosts(2, 5, EvenIds(), 3)
    assert [kept for kept, _ in results[0]] == expected[:3]
    resumed = pipeline(keep_filter=EvenIds())
    resumed.set_state(hosts[0].get_state())  # process 0 checkpoints its own shard's state
    assert [ids(resumed.next_prompts(5)[0]) for _ in range(2)] == expected[3:5]


class RecordingFilter:
    """Keeps everything and records the (prompt id, epoch) pairs it was asked about."""

    def __init__(self):
        self.asked = []

    def should_keep(self, prompt_ids, epochs=None):
        self.asked += list(zip(np.asarray(prompt_ids).tolist(), np.asarray(epochs).tolist()))
        return np.ones(len(prompt_ids), dtype=bool)


def test_the_filter_sees_each_occurrences_epoch_and_the_step_epoch_follows_the_stream():
    recorder = RecordingFilter()
    stream = pipeline(keep_filter=recorder)
    n = stream.num_prompts
    assert stream.epoch == 0
    stream.next_prompts(n - 2)
    assert stream.epoch == 0
    stream.next_prompts(4)  # two from the end of epoch 0, two from epoch 1
    assert [e for _, e in recorder.asked[-4:]] == [0, 0, 1, 1] and stream.epoch == 1
    assert sorted(i for i, e in recorder.asked if e == 0) == list(range(n))  # epoch 0 is one permutation


def test_the_skip_benchmark_pulls_what_its_keep_rate_implies():
    from experiments.bench import pipeline_skip as bench

    rows, _ = make_arith_pools(400, 0, seed=0)
    seconds, pulled, kept = bench.time_pulls(rows, keep_rate=0.1, batch=16, steps=5)
    assert kept == 80 and 400 < pulled < 1600 and seconds > 0  # about 800 pulled at a 10% keep rate
    assert bench.time_pulls(rows, keep_rate=1.0, batch=16, steps=5)[1:] == (80, 80)
    small = bench.time_pulls(rows, keep_rate=0.1, batch=16, steps=5, pull=2)
    assert small[1:] == bench.time_pulls(rows, keep_rate=0.1, batch=16, steps=5, pull=2, forget_rate=True)[1:]
    assert small[1:] == (pulled, kept)  # the same prompts, gathered two at a time
