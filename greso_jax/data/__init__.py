"""Prompt data: sources (verl parquet, benchmark jsonl, synthetic arithmetic), templates, the Grain pipeline."""
