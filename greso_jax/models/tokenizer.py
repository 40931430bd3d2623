"""Tokenizers behind one interface: Hugging Face `tokenizer.json` (+ chat template) and a
built-in character-level tokenizer for synthetic tasks."""

from __future__ import annotations

import json
import os
from typing import Protocol, Sequence

Message = dict  # {"role": ..., "content": ...}


class Tokenizer(Protocol):
    vocab_size: int
    pad_id: int
    eos_ids: tuple[int, ...]

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def apply_chat_template(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str: ...


class CharTokenizer:
    """One token per character of a fixed alphabet, plus <pad>=0 and <eos>=1.
    Characters outside the alphabet are an error (synthetic data never has them)."""

    PAD, EOS = "<pad>", "<eos>"

    def __init__(self, alphabet: str, vocab_size: int | None = None):
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("CharTokenizer: alphabet has repeated characters")
        self.alphabet = alphabet
        self._ids = {ch: i + 2 for i, ch in enumerate(alphabet)}
        self.pad_id, self.eos_ids = 0, (1,)
        self.vocab_size = vocab_size or len(alphabet) + 2
        if self.vocab_size < len(alphabet) + 2:
            raise ValueError(f"CharTokenizer: vocab_size {vocab_size} < {len(alphabet) + 2} tokens")

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[ch] for ch in text]
        except KeyError as e:
            raise ValueError(f"CharTokenizer: character {e.args[0]!r} is not in the alphabet") from None

    def decode(self, ids: Sequence[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i in self.eos_ids:
                break
            if 2 <= i < len(self.alphabet) + 2:
                out.append(self.alphabet[i - 2])
        return "".join(out)

    def apply_chat_template(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        return "".join(m["content"] for m in messages if m["role"] != "system")


class HFTokenizer:
    """A Hugging Face tokenizer folder: tokenizer.json, tokenizer_config.json (chat template,
    special tokens) and generation_config.json (EOS ids) when present."""

    def __init__(self, path: str):
        from tokenizers import Tokenizer as _Tokenizer

        file = os.path.join(path, "tokenizer.json")
        if not os.path.exists(file):
            raise FileNotFoundError(f"{path}: no tokenizer.json")
        try:
            self._tok = _Tokenizer.from_file(file)
        except Exception as e:  # noqa: BLE001 -- the tokenizers library raises a bare Exception for a bad file
            raise _folder_error(f"{file}: not a readable tokenizer file ({' '.join(str(e).split())})") from None
        config = _read_json(os.path.join(path, "tokenizer_config.json"))
        generation = _read_json(os.path.join(path, "generation_config.json"))
        self.chat_template = config.get("chat_template")
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        eos = [self._token_id(_token_text(config.get("eos_token")))]
        gen_eos = generation.get("eos_token_id")
        eos += gen_eos if isinstance(gen_eos, list) else [gen_eos]
        self.eos_ids = tuple(dict.fromkeys(i for i in eos if i is not None))
        pad = self._token_id(_token_text(config.get("pad_token")))
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        self.bos_token = _token_text(config.get("bos_token")) or ""
        self.eos_token = _token_text(config.get("eos_token")) or ""

    def _token_id(self, text):
        return None if text is None else self._tok.token_to_id(text)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids]
        for j, i in enumerate(ids):
            if i in self.eos_ids:
                ids = ids[:j]
                break
        return self._tok.decode(ids, skip_special_tokens=True)

    def apply_chat_template(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            return "".join(m["content"] + "\n" for m in messages)
        import jinja2.sandbox

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise_template_error
        return env.from_string(self.chat_template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token, eos_token=self.eos_token)


CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def train_bpe_tokenizer(texts: Sequence[str], folder: str, vocab_size: int) -> HFTokenizer:
    """Trains a byte-level BPE tokenizer of at most `vocab_size` tokens on `texts` and writes it to
    `folder` as a Hugging Face tokenizer (tokenizer.json, tokenizer_config.json with a ChatML
    template, EOS <|im_end|>, padding <|endoftext|>), as Qwen2.5's are laid out. For runs at a real
    model's shape where no tokenizer file can be downloaded: prompts of real length, random weights."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    os.makedirs(folder, exist_ok=True)
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHAT_TEMPLATE, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f)
    return HFTokenizer(folder)


def _raise_template_error(message):
    raise ValueError(f"chat template: {message}")


def _token_text(token) -> str | None:
    return token.get("content") if isinstance(token, dict) else token


def _read_json(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        try:
            value = json.load(f)
        except ValueError as e:
            raise _folder_error(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise _folder_error(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _folder_error(message: str) -> Exception:
    """weights.ModelFolderError (a user error: one line), imported here only when one is raised: the
    tokenizer module stays free of jax."""
    from greso_jax.models.weights import ModelFolderError

    return ModelFolderError(message)
