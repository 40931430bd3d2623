"""Prompt rows: `PromptRow` (one prompt) and `PromptRows` (a list of them that remembers its file)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class PromptRow:
    """One prompt. ground_truth holds the gold *answer* (already extracted from a solution)."""

    prompt_id: int
    question: str
    ground_truth: str
    data_source: str
    difficulty: int = -1  # the level: synthetic tasks' difficulty, a file's data.level_field rank; -1: none
    messages: list[dict] | None = None  # the chat prompt as stored (verl parquet)
    where: str = ""  # where it was read: "<file>:<line>" (jsonl), "<file>: row <n>" (parquet); "": generated


class PromptRows(list):
    """A list of PromptRow that also records where it came from and how many rows were skipped."""

    def __init__(self, rows=(), *, path: str = "", num_bad_rows: int = 0):
        super().__init__(rows)
        self.path = path
        self.num_bad_rows = num_bad_rows
