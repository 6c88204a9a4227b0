"""scripts/rebuild_whole_corpus.py: corpus files written back from a real git history, checked by sha256."""

from __future__ import annotations

import csv
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import check_whole_corpus as cwc
from scripts import rebuild_whole_corpus as rwc

LOG = b"epoch 1 loss 0.5\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository whose logs/train.out held LOG at one commit and other bytes at the next: (git dir,
    the first commit, the last)."""
    repo = tmp_path / "src"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "logs").mkdir()
    (repo / "logs" / "train.out").write_bytes(LOG)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "log")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "logs" / "train.out").write_bytes(b"rewritten\n")
    _git(repo, "commit", "-q", "-am", "rewrite")
    return repo / ".git", first, _git(repo, "rev-parse", "HEAD")


def _index(tmp_path: Path, commit: str, data: bytes = LOG) -> Path:
    index_dir = tmp_path / "index"
    (index_dir / "blind").mkdir(parents=True)
    row = {c: "" for c in cwc.COLUMNS}
    row.update(file="a/someone__proj__logs__train.out", sha256=hashlib.sha256(data).hexdigest(), repo="someone/proj",
               path="logs/train.out", commit=commit)
    with (index_dir / "index_a.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cwc.COLUMNS)
        w.writeheader()
        w.writerow(row)
    return index_dir


def test_the_recorded_commit_gives_the_file_byte_for_byte(tmp_path: Path, history: tuple[Path, str, str]) -> None:
    git_dir, first, _ = history
    index_dir, root = _index(tmp_path, first), tmp_path / "whole"
    assert rwc.missing(root, index_dir) == ["someone/proj"]
    assert rwc.rebuild("Someone/Proj", git_dir, root, index_dir) == ["OK a/someone__proj__logs__train.out"]
    assert (root / "a" / "someone__proj__logs__train.out").read_bytes() == LOG
    assert rwc.missing(root, index_dir) == []


def test_a_commit_not_in_the_history_falls_back_to_the_one_with_the_same_bytes(
        tmp_path: Path, history: tuple[Path, str, str]) -> None:
    git_dir, _, _ = history
    index_dir, root = _index(tmp_path, "f" * 40), tmp_path / "whole"
    assert rwc.rebuild("someone/proj", git_dir, root, index_dir)[0].startswith("OK ")
    assert (root / "a" / "someone__proj__logs__train.out").read_bytes() == LOG


def test_other_bytes_are_refused_and_nothing_is_written(tmp_path: Path, history: tuple[Path, str, str]) -> None:
    git_dir, _, last = history
    index_dir, root = _index(tmp_path, last, data=b"what the labeller read\n"), tmp_path / "whole"
    lines = rwc.rebuild("someone/proj", git_dir, root, index_dir)
    assert lines[0].startswith("FAIL a/someone__proj__logs__train.out")
    assert not (root / "a").exists()


def test_the_command_line_says_what_is_wrong_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rwc.main(["someone/proj", str(tmp_path), "--root", str(tmp_path / "whole")]) == 2
    assert "is not a git directory" in capsys.readouterr().err
    assert rwc.main(["--root", str(tmp_path / "whole")]) == 2
    assert "--missing" in capsys.readouterr().err


def test_missing_by_count_puts_the_repository_with_most_missing_logs_first(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    index_dir = tmp_path / "index"
    (index_dir / "blind").mkdir(parents=True)
    with (index_dir / "index_a.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cwc.COLUMNS)
        w.writeheader()
        for name, repo in (("a/one.log", "x/one"), ("a/two1.log", "y/two"), ("a/two2.log", "y/two")):
            w.writerow({**{c: "" for c in cwc.COLUMNS}, "file": name, "repo": repo})
    root = tmp_path / "whole"
    assert rwc.missing(root, index_dir) == ["x/one", "y/two"]  # index order
    assert rwc.missing_counts(root, index_dir) == [("y/two", 2), ("x/one", 1)]
    (root / "a").mkdir(parents=True)
    (root / "a" / "two1.log").write_text("x")
    (root / "a" / "two2.log").write_text("x")
    assert rwc.missing_counts(root, index_dir) == [("x/one", 1)]


def test_a_listing_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    # the real index (over a thousand repositories) listed into a reader that stops after one line:
    # no BrokenPipeError traceback, exit 0
    repo_root = Path(__file__).resolve().parents[2]
    got = subprocess.run(f"{sys.executable} -m scripts.rebuild_whole_corpus --missing --root {tmp_path} | head -n 1",
                         shell=True, cwd=repo_root, capture_output=True, text=True, check=False, timeout=120,
                         executable="/bin/bash")
    assert got.returncode == 0
    assert got.stdout.count("\n") == 1 and "/" in got.stdout
    assert "Traceback" not in got.stderr and "BrokenPipe" not in got.stderr, got.stderr
