"""Tokenizers: the character tokenizer and a real Hugging Face tokenizer.json with a chat template."""

import json

import pytest

from greso_jax.models import CharTokenizer, HFTokenizer


def test_char_tokenizer_round_trip_and_specials():
    tok = CharTokenizer("0123456789+=;", vocab_size=32)
    ids = tok.encode("12+07=")
    assert ids == [3, 4, 12, 2, 9, 13] and tok.decode(ids) == "12+07="
    assert tok.decode(ids + [tok.eos_ids[0], 5]) == "12+07="  # stops at EOS
    assert tok.pad_id == 0 and tok.vocab_size == 32
    assert tok.apply_chat_template([{"role": "user", "content": "1+1="}]) == "1+1="
    with pytest.raises(ValueError, match="'x'"):
        tok.encode("x")


def test_hf_tokenizer_json_with_chat_template(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "user", "assistant",
                                          "hello", "world", "\n", "[UNK]"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("\n", behavior="isolated")
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": template, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    hf = HFTokenizer(str(tmp_path))
    assert hf.eos_ids == (2, 0) and hf.pad_id == 0
    text = hf.apply_chat_template([{"role": "user", "content": "hello"}])
    assert text == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert hf.encode("hello") == [5]
    assert hf.decode([5, 2, 6]) == "hello"


def test_trained_bpe_tokenizer_round_trips_and_serves_a_preset(tmp_path):
    """A tokenizer trained on prompts (for runs at a real shape with random weights) is a Hugging
    Face folder the trainer's "hf" tokenizer reads: ChatML template, EOS and padding ids, bytes
    round-trip, within the requested vocabulary."""
    from greso_jax.config import get_config, validate
    from greso_jax.models.tokenizer import train_bpe_tokenizer
    from greso_jax.run.build import build_tokenizer

    texts = ["Find the sum of $x^2 + 3x$ when x = 4.", "Let n be a positive integer; compute n! mod 7.",
             "What is 12 * 17?"] * 20
    trained = train_bpe_tokenizer(texts, str(tmp_path / "tok"), vocab_size=300)
    assert trained.vocab_size <= 300
    text = "Compute 3x + 12 mod 7, über alles."  # unseen bytes still encode
    assert trained.decode(trained.encode(text)) == text
    assert trained.eos_ids == (trained._tok.token_to_id("<|im_end|>"),)
    assert trained.pad_id == trained._tok.token_to_id("<|endoftext|>")
    assert trained.apply_chat_template([{"role": "user", "content": "hi"}]) == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    config = get_config()
    config.model.tokenizer, config.model.tokenizer_path = "hf", str(tmp_path / "tok")
    validate(config)  # a preset (random weights) with a tokenizer folder of its own
    assert build_tokenizer(config).encode(text) == trained.encode(text)
