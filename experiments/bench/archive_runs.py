"""Archive finished runs' records into a results folder, so that their tables can be rebuilt, and new runs
paired against them, on another machine after the run folders are gone.

    python experiments/bench/archive_runs.py --root ROOT --out RESULTS/runs [--strategies a,b] [--seeds 0,1] \
        [--precise_cache precise.json] [--no_groups]

For each finished run ROOT/VARIANT/seedS (one with summary.json; a linked variant folder is read through its
link) it writes OUT/VARIANT/seedS/ with summary.json and config.json as they are, metrics.jsonl.gz and
groups.jsonl.gz (the group trace, unless --no_groups) gzip-compressed, and precise.json: the run's
checkpoints graded by precise_eval.py, taken from --precise_cache. The archive has the layout of a root, and
the readers of run records read a `.gz` copy where the plain file is missing, so compare_strategies.py
--collect_only, engine_compare.py, per_step_diagnosis.py, level_diagnosis.py and regime_check.py accept it as
a root, and precise_eval.py reads an archived run's grades instead of its checkpoints. Checkpoints are not
archived: a run's step-400 policy is megabytes, its grades a few kilobytes.

Pairing stays honest only where the new runs would reproduce the archived ones: the same code that a run
reads, the same config and seed, and a machine that reproduces the warm start (warmstart/steps and
warmstart/accuracy of the step-0 record are the quick check).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys

from experiments.bench.precise_eval import ARCHIVED_GRADES, archive_key, load_cache
from experiments.sweep import finished_runs

PLAIN = ("summary.json", "config.json")
COMPRESSED = ("metrics.jsonl", "groups.jsonl")


def precise_grades(workdir: str, cache: dict) -> dict:
    """The precise_eval.py cache's grades of one run, {"STEPxSAMPLES": graded}."""
    prefix = os.path.realpath(workdir) + "@"
    return {key[len(prefix):]: graded for key, graded in cache.items() if key.startswith(prefix)}


def archive_run(workdir: str, target: str, *, grades: dict, groups: bool = True) -> list[str]:
    """Writes one run's archive into `target` (created); returns the names written."""
    os.makedirs(target, exist_ok=True)
    written = []
    for name in PLAIN:
        if os.path.isfile(os.path.join(workdir, name)):
            shutil.copyfile(os.path.join(workdir, name), os.path.join(target, name))
            written.append(name)
    for name in COMPRESSED:
        source = os.path.join(workdir, name)
        if not os.path.isfile(source) or (name == "groups.jsonl" and not groups):
            continue
        # mtime=0: the same records give the same bytes, so re-archiving a run leaves git with no change.
        with open(source, "rb") as f, open(os.path.join(target, name + ".gz"), "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
                shutil.copyfileobj(f, out)
        written.append(name + ".gz")
    if grades:
        with open(os.path.join(target, ARCHIVED_GRADES), "w") as f:
            json.dump(grades, f, sort_keys=True)
        written.append(ARCHIVED_GRADES)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="folder of ROOT/VARIANT/seedS runs (compare_strategies.py)")
    parser.add_argument("--out", required=True, help="the archive: OUT/VARIANT/seedS")
    parser.add_argument("--strategies", default="", help="comma-separated variants (default: every one)")
    parser.add_argument("--seeds", default="", help="comma-separated seeds (default: every one)")
    parser.add_argument("--precise_cache", default="", help="precise_eval.py's --cache file, for the runs' grades")
    parser.add_argument("--no_groups", action="store_true", help="leave the group traces out")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.root):
        parser.error(f"--root: {args.root} is not a folder")
    if os.path.realpath(args.out).startswith(os.path.realpath(args.root) + os.sep):
        parser.error("--out: must not lie inside --root (it would be read as a variant)")
    cache = load_cache(args.precise_cache)
    count = 0
    variants = {s.strip() for s in args.strategies.split(",") if s.strip()}
    seeds = {int(s) for s in args.seeds.split(",") if s.strip()}
    for variant, seed, workdir in finished_runs(args.root, variants, seeds):
        target = os.path.join(args.out, variant, f"seed{seed}")
        written = archive_run(workdir, target, grades=precise_grades(workdir, cache), groups=not args.no_groups)
        size = sum(os.path.getsize(os.path.join(target, name)) for name in written)
        print(f"{variant}/seed{seed}: {', '.join(written)} ({size / 1024:.0f} KiB)")
        count += 1
    if not count:
        parser.error(f"no finished run under {args.root} for strategies {args.strategies or 'any'} and seeds "
                     f"{args.seeds or 'any'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
