"""Prompt templates: the text the policy sees for a `PromptRow` ("plain", "chat", "greso",
"qwen_math")."""

from __future__ import annotations

from greso_jax.data.rows import PromptRow

TEMPLATES = ("plain", "chat", "greso", "qwen_math")

# GRESO's training prompt (as stored in its DAPO-Math-17K parquet).
GRESO_INSTRUCTION = (
    "Please solve the following math problem: {question}. The assistant first thinks about the reasoning process "
    "step by step and then provides the user with the answer. Return the final answer in \\boxed{{}} tags, "
    "for example \\boxed{{1}}. Let's solve this step by step. ")
# Qwen2.5-Math's chain-of-thought system prompt.
QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


def messages_for(row: PromptRow, template: str) -> list[dict]:
    """The chat messages of `row` under `template` (not used by "plain")."""
    if template == "chat":
        return list(row.messages) if row.messages else [{"role": "user", "content": row.question}]
    if template == "greso":
        prefix = GRESO_INSTRUCTION.split("{question}")[0]
        if row.question.startswith(prefix):  # GRESO's parquet stores the instruction already
            return [{"role": "user", "content": row.question}]
        return [{"role": "user", "content": GRESO_INSTRUCTION.format(question=row.question.rstrip().rstrip("."))}]
    if template == "qwen_math":
        return [{"role": "system", "content": QWEN_MATH_SYSTEM}, {"role": "user", "content": row.question}]
    raise ValueError(f"data.prompt_template: {template!r} is not one of {', '.join(TEMPLATES)}")


def format_prompt(row: PromptRow, template: str, tokenizer) -> str:
    """The prompt text: "plain" is the question alone (character tokenizer); the others
    render chat messages with the tokenizer's chat template (generation prompt added)."""
    if template == "plain":
        return row.question
    return tokenizer.apply_chat_template(messages_for(row, template), add_generation_prompt=True)
