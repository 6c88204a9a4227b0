"""Rebuild whole-log corpus files from the git history of the repositories they came from (issue 23).

The corpus index (``sample_logs/whole/index*.csv`` and ``blind/index*.csv``) records, for every log,
the repository, the path and the commit it was read at, and the file's sha256. Given a git directory
of one of those repositories (a clone, or a snapshot fetched with the search tool), this writes each
indexed file of that repository below the corpus root, byte for byte, after checking its sha256::

    .venv/bin/python -m scripts.rebuild_whole_corpus OWNER/NAME GIT_DIR [--root ROOT]
    .venv/bin/python -m scripts.rebuild_whole_corpus --missing [--root ROOT]   # repositories still to fetch
    .venv/bin/python -m scripts.rebuild_whole_corpus --missing --by-count     # most missing logs first, with counts

A fetch budget rebuilds the most logs when the repositories holding the most missing logs come first (stop 46: 500
snapshots gave back 820 of 1,423 logs that way).

A file whose recorded commit is not in the history is looked for at every commit that touched its path
(a snapshot may have been rewritten); it is taken only where its sha256 matches. Files are written to a
temporary name and renamed, so an interrupted run leaves no half-written log. Prints one line per file
(``OK`` or ``FAIL`` with the reason) and exits 2 when any file failed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

INDEX_DIR = Path(__file__).resolve().parent.parent / "sample_logs" / "whole"


def index_rows(index_dir: Path = INDEX_DIR) -> Iterator[dict[str, str]]:
    """Every row of the evaluated and the blind index files."""
    for index in sorted(index_dir.glob("index*.csv")) + sorted(index_dir.glob("blind/index*.csv")):
        with index.open(newline="", encoding="utf-8") as fh:
            yield from csv.DictReader(fh)


def _show(git_dir: Path, commit: str, path: str) -> bytes | None:
    got = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], capture_output=True)
    return got.stdout if got.returncode == 0 else None


def _commits_touching(git_dir: Path, path: str) -> list[str]:
    got = subprocess.run(["git", "--git-dir", str(git_dir), "log", "--all", "--format=%H", "--", path],
                         capture_output=True, text=True)
    return got.stdout.split() if got.returncode == 0 else []


def blob_of(git_dir: Path, row: dict[str, str]) -> bytes | None:
    """The file of ``row`` from ``git_dir`` with its recorded sha256, or None."""
    data = _show(git_dir, row["commit"], row["path"])
    if data is not None and hashlib.sha256(data).hexdigest() == row["sha256"]:
        return data
    for commit in _commits_touching(git_dir, row["path"]):
        data = _show(git_dir, commit, row["path"])
        if data is not None and hashlib.sha256(data).hexdigest() == row["sha256"]:
            return data
    return None


def _write(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, dest)


def rebuild(repo: str, git_dir: Path, root: Path, index_dir: Path = INDEX_DIR) -> list[str]:
    """Write the indexed files of ``repo`` from ``git_dir`` below ``root``; one line per file."""
    out: list[str] = []
    for row in index_rows(index_dir):
        if row["repo"].lower() != repo.lower():
            continue
        data = blob_of(git_dir, row)
        if data is None:
            out.append(f"FAIL {row['file']}: no commit of {repo} holds {row['path']} with the recorded sha256")
            continue
        _write(root / row["file"], data)
        out.append(f"OK {row['file']}")
    return out or [f"FAIL {repo}: no index row names this repository"]


def _missing(root: Path, index_dir: Path) -> dict[str, int]:
    """Repository -> its indexed files not yet under ``root``, in index order."""
    counts: dict[str, int] = {}
    for row in index_rows(index_dir):
        if not (root / row["file"]).is_file():
            counts[row["repo"]] = counts.get(row["repo"], 0) + 1
    return counts


def missing(root: Path, index_dir: Path = INDEX_DIR) -> list[str]:
    """Repositories with at least one indexed file not yet under ``root`` (each once, index order)."""
    return list(_missing(root, index_dir))


def missing_counts(root: Path, index_dir: Path = INDEX_DIR) -> list[tuple[str, int]]:
    """(repository, its indexed files not yet under ``root``), the most missing first (index order on a tie)."""
    return sorted(_missing(root, index_dir).items(), key=lambda kv: -kv[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", nargs="?", help="OWNER/NAME as in the index's repo column")
    parser.add_argument("git_dir", nargs="?", type=Path, help="a git directory of that repository")
    parser.add_argument("--root", type=Path, default=Path(os.environ.get("GPULENS_WHOLE_LOGS", "")),
                        help="the corpus root (default: $GPULENS_WHOLE_LOGS)")
    parser.add_argument("--missing", action="store_true", help="list the repositories whose files are not all there")
    parser.add_argument("--by-count", action="store_true",
                        help="with --missing: the repositories with the most missing files first, each with its count")
    args = parser.parse_args(argv)
    if not str(args.root) or str(args.root) == ".":
        print("rebuild_whole_corpus: no corpus root; pass --root or set GPULENS_WHOLE_LOGS", file=sys.stderr)
        return 2
    if args.missing:
        rows = [f"{repo}\t{n}" for repo, n in missing_counts(args.root)] if args.by_count else missing(args.root)
        print("\n".join(rows))
        return 0
    if not args.repo or args.git_dir is None:
        print("rebuild_whole_corpus: give OWNER/NAME and its GIT_DIR, or --missing", file=sys.stderr)
        return 2
    if not (args.git_dir / "HEAD").is_file():
        print(f"rebuild_whole_corpus: {args.git_dir} is not a git directory (no HEAD); pass the .git folder or a bare clone",
              file=sys.stderr)
        return 2
    lines = rebuild(args.repo, args.git_dir, args.root)
    print("\n".join(lines))
    return 2 if any(line.startswith("FAIL") for line in lines) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # its listing piped into `head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (no second error at exit's flush)
        sys.exit(0)
