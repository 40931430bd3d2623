"""Verifiable rewards: math answer grading (math-verify, bounded and timed), arithmetic exact match, a grading worker pool."""
