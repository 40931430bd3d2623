"""CLI: download the public data sets into the local data layout, each checked against its SHA-256.

  python -m greso_jax.data.fetch paper                 # DAPO-Math-17K + the six benchmarks
  python -m greso_jax.data.fetch gsm8k math500 --dest /data
  python -m greso_jax.data.fetch --list                # what is known, what is present

Files already present with the recorded hash are kept (no network needed). A download is
written beside its target, checked (raw hash where known, then the converted file's hash)
and only then moved into place, so a data folder never holds an unverified file.
Exit status: 0 all present and verified, 1 a download or check failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import urllib.request

from greso_jax.data.catalog import DATASETS, GROUPS, DataFile, Upstream, data_root
from greso_jax.core.files import sha256_of


class FetchError(RuntimeError):
    """A download or checksum failure; the message names the file."""


def _copy(raw_path: str, out_path: str) -> None:
    shutil.copyfile(raw_path, out_path)


def _math500(raw_path: str, out_path: str) -> None:
    """HuggingFaceH4/MATH-500 test.jsonl ({problem, solution, answer, subject, level, unique_id})
    -> our math500 layout ({question, answer = the full solution}, whose last \\boxed{} the loader grades)."""
    with open(raw_path, encoding="utf-8") as f, open(out_path, "w", encoding="utf-8") as out:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            if not isinstance(record, dict) or not {"problem", "solution"} <= record.keys():
                raise FetchError(f"{raw_path}:{line_number}: expected an object with 'problem' and 'solution'")
            out.write(json.dumps({"question": record["problem"], "answer": record["solution"]}) + "\n")


CONVERTERS = {"copy": _copy, "math500": _math500}


def install(file: DataFile, raw_path: str, root: str) -> str:
    """Checks a downloaded raw file, converts it into `root/<relpath>` and checks the result;
    the target is only replaced once both checks pass. Returns the target path."""
    up = file.upstream
    if up.sha256 is not None and (got := sha256_of(raw_path)) != up.sha256:
        raise FetchError(f"{file.relpath}: the download of {up.repo}/{up.path}@{up.revision} has sha256 {got}, "
                         f"expected {up.sha256}")
    target = os.path.join(root, file.relpath)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = target + ".partial"
    try:
        CONVERTERS[file.convert](raw_path, partial)
        if (got := sha256_of(partial)) != file.sha256:
            raise FetchError(f"{file.relpath}: converted file has sha256 {got}, expected {file.sha256} "
                             f"(upstream {up.repo}/{up.path}@{up.revision}"
                             f"{'' if up.pinned else ', an unpinned revision that may have changed'})")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return target


def _download(up: Upstream, into: str) -> str:
    """The raw upstream file, downloaded into the folder `into`."""
    if up.host == "huggingface":
        from huggingface_hub import hf_hub_download  # only this host needs it

        return hf_hub_download(up.repo, up.path, repo_type="dataset", revision=up.revision, local_dir=into)
    path = os.path.join(into, os.path.basename(up.path))
    with urllib.request.urlopen(up.url, timeout=60) as response, open(path, "wb") as f:
        shutil.copyfileobj(response, f)
    return path


def fetch_file(file: DataFile, root: str, log=print) -> str:
    """Makes `root/<relpath>` present and verified, downloading only when it is not."""
    target = os.path.join(root, file.relpath)
    if os.path.exists(target):
        if sha256_of(target) == file.sha256:
            log(f"ok       {file.relpath} (present, sha256 verified)")
            return target
        log(f"replace  {file.relpath} (present, but its sha256 differs from the recorded one)")
    up = file.upstream
    os.makedirs(root, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as scratch:
        try:
            raw = _download(up, scratch)
        except Exception as e:  # urllib and huggingface_hub raise many types; all mean "not downloaded"
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise FetchError(f"{file.relpath}: cannot download {up.url} ({reason}); without network, copy the "
                             f"file into {target} (layout: docs/data.md)") from None
        install(file, raw, root)
    log(f"fetched  {file.relpath} from {up.repo}@{up.revision[:12]}")
    return target


def expand(names: list[str]) -> list[str]:
    """Data set names with the groups ("paper", "all") expanded, in order, without repeats."""
    out = []
    for name in names:
        if name not in DATASETS and name not in GROUPS:
            raise ValueError(f"unknown data set {name!r} (one of {', '.join([*DATASETS, *GROUPS])})")
        out += GROUPS.get(name, (name,))
    return list(dict.fromkeys(out))


def _listing(root: str) -> str:
    lines = [f"data folder: {root}"]
    for name, dataset in DATASETS.items():
        lines.append(f"{name}: {dataset.description}")
        for f in dataset.files:
            path = os.path.join(root, f.relpath)
            state = ("verified" if sha256_of(path) == f.sha256 else "hash differs") if os.path.exists(path) else "absent"
            up = f.upstream
            pin = "pinned" if up.pinned else "unpinned"
            lines.append(f"  {f.relpath:<36} {state:<12} {up.host}:{up.repo}/{up.path}@{up.revision} ({pin})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m greso_jax.data.fetch", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"data sets: {', '.join(DATASETS)}, or a group: {', '.join(GROUPS)}")
    parser.add_argument("--dest", default="", help="data folder (default: $GRESO_DATA, else the user cache)")
    parser.add_argument("--list", action="store_true", help="show the known sets and which files are present")
    args = parser.parse_args(argv)
    root = data_root(args.dest)
    if args.list:
        print(_listing(root))
        return 0
    if not args.names:
        parser.print_usage(sys.stderr)
        print("fetch: name at least one data set (or --list)", file=sys.stderr)
        return 2
    try:
        names = expand(args.names)
    except ValueError as e:
        print(f"fetch: {e}", file=sys.stderr)
        return 2
    try:
        for name in names:
            for file in DATASETS[name].files:
                fetch_file(file, root)
    except (FetchError, OSError) as e:  # no network, a full disk: one line and status 2, like every CLI error
        print(f"fetch: {e}", file=sys.stderr)
        return 2
    print(f"data folder: {root}")
    return 0


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
