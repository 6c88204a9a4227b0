"""Check the whole-log corpus against its index (sample_logs/whole/index*.csv, issue 23).

The logs themselves are kept outside the repository (they were fetched from public
repositories and are not committed here); the index records where each came from and
what it says. This checks, for every row of every index file: the file exists under
the corpus root with the recorded sha256, byte count and line count; every label is in
the project's vocabulary (``gpulens.vocab``) or the index's own closed sets; the
indicator lines lie within the file and are given exactly for runs that failed.

    .venv/bin/python -m scripts.check_whole_corpus [ROOT]    # ROOT defaults to $GPULENS_WHOLE_LOGS

Prints one summary line and exits 0, or prints one line naming the problem and exits 2.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import re
import sys
from collections import Counter
from pathlib import Path

from gpulens.vocab import CATEGORIES, NO_FAILURE, ORIGINS

INDEX_DIR = Path(__file__).resolve().parent.parent / "sample_logs" / "whole"

COLUMNS = (
    "file,sha256,bytes,lines,repo,path,commit,project,split,source_kind,framework,ended_normally,"
    "category,origin,multi_rank,first_rank,first_node,indicator_lines,phase,step,attempts,ambiguous,"
    "description"
).split(",")
SOURCE_KINDS = frozenset(
    "slurm_out slurm_err nohup stdout_capture pbs lsf srun_label torchrun deepspeed accelerate "
    "megatron horovod mpirun wandb_output ray k8s other".split()
)
FRAMEWORKS = frozenset(
    "pytorch lightning hf_trainer accelerate deepspeed fairseq megatron jax tensorflow ray other".split()
)
PHASES = frozenset(
    "startup first_step training evaluation checkpoint_save checkpoint_load shutdown".split()
)
YES_NO = frozenset(("yes", "no"))
MAX_INDICATORS = 6


class CorpusError(Exception):
    """One problem with the corpus or its index, said in one line."""


def split_of(project: str) -> str:
    """The dev/holdout split of a project: a stable hash, about 40 % holdout."""
    bucket = int(hashlib.sha256(project.lower().encode()).hexdigest()[:8], 16) % 100
    return "holdout" if bucket < 40 else "dev"


def count_lines(data: bytes) -> int:
    """Lines separated by "\\n"; a last line without its newline counts too."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def check_labels(where: str, row: dict[str, str]) -> None:
    failed = row["ended_normally"] == "no"
    if row["ended_normally"] not in YES_NO:
        raise CorpusError(f"{where}: ended_normally must be yes or no, not {row['ended_normally']!r}")
    for column, allowed in (
        ("source_kind", SOURCE_KINDS),
        ("framework", FRAMEWORKS),
        ("multi_rank", YES_NO),
        ("ambiguous", YES_NO),
    ):
        if row[column] not in allowed:
            raise CorpusError(f"{where}: {column} {row[column]!r} is not one of {sorted(allowed)}")
    if failed:
        if row["category"] not in CATEGORIES:
            raise CorpusError(f"{where}: category {row['category']!r} is not in gpulens.vocab.CATEGORIES")
        if row["origin"] not in ORIGINS:
            raise CorpusError(f"{where}: origin {row['origin']!r} is not in gpulens.vocab.ORIGINS")
        if row["phase"] not in PHASES:
            raise CorpusError(f"{where}: phase {row['phase']!r} is not one of {sorted(PHASES)}")
    else:
        for column in ("category", "origin", "phase"):
            if row[column] != NO_FAILURE:
                raise CorpusError(f"{where}: a run that ended normally has {column} {NO_FAILURE!r}, not {row[column]!r}")
        if row["first_rank"] or row["first_node"]:
            raise CorpusError(f"{where}: a run that ended normally has no first_rank/first_node")
    if row["first_rank"] and not row["first_rank"].isdigit():
        raise CorpusError(f"{where}: first_rank {row['first_rank']!r} is not a rank number")
    if not row["attempts"].isdigit() or int(row["attempts"]) < 1:
        raise CorpusError(f"{where}: attempts {row['attempts']!r} is not a positive integer")
    if row["split"] != split_of(row["project"]):
        raise CorpusError(f"{where}: split {row['split']!r} disagrees with the hash rule ({split_of(row['project'])})")
    if not re.fullmatch(r"[0-9a-f]{40}", row["commit"]) or not re.fullmatch(r"[0-9a-f]{64}", row["sha256"]):
        raise CorpusError(f"{where}: commit must be 40 hex digits and sha256 64")


def _check_file(where: str, row: dict[str, str], root: Path) -> None:
    path = root / row["file"]
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{where}: cannot read {path} ({exc.strerror}); rebuild it from the index: "
                          f"git show {row['commit']}:{row['path']} in {row['repo']}") from None
    if hashlib.sha256(data).hexdigest() != row["sha256"] or str(len(data)) != row["bytes"]:
        raise CorpusError(f"{where}: {path} is not the recorded file (sha256/bytes differ); fetch it again")
    nlines = count_lines(data)
    if str(nlines) != row["lines"]:
        raise CorpusError(f"{where}: {path} has {nlines} lines, the index says {row['lines']}")
    numbers = row["indicator_lines"].split()
    failed = row["ended_normally"] == "no"
    if failed != bool(numbers):
        raise CorpusError(f"{where}: indicator_lines must be given exactly for runs that failed")
    if len(numbers) > MAX_INDICATORS:
        raise CorpusError(f"{where}: at most {MAX_INDICATORS} indicator lines, not {len(numbers)}")
    for number in numbers:
        if not number.isdigit() or not 1 <= int(number) <= nlines:
            raise CorpusError(f"{where}: indicator line {number!r} is outside 1..{nlines}")


def check(index_dir: Path, root: Path, *, present_only: bool = False) -> Counter[str]:
    """Check every index file under index_dir against the logs under root; counts on success.
    ``present_only``: a log not under root is counted as ``missing`` (its labels are still checked), not an
    error (a corpus rebuilt in part, stop 46)."""
    indexes = sorted(index_dir.glob("index*.csv"))
    if not indexes:
        raise CorpusError(f"no index*.csv under {index_dir}")
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    for index in indexes:
        with index.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames != COLUMNS:
                raise CorpusError(f"{index.name}: columns must be exactly {','.join(COLUMNS)}")
            for number, row in enumerate(reader, start=2):
                where = f"{index.name} line {number} ({row['file']})"
                if row["file"] in seen:
                    raise CorpusError(f"{where}: the file is listed twice")
                seen.add(row["file"])
                check_labels(where, row)
                if present_only and not (root / row["file"]).exists():
                    counts["missing"] += 1
                    continue
                _check_file(where, row, root)
                counts["logs"] += 1
                counts["ended_normally"] += row["ended_normally"] == "yes"
                counts["multi_rank"] += row["multi_rank"] == "yes"
                counts[row["split"]] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=os.environ.get("GPULENS_WHOLE_LOGS", ""),
                        help="folder holding the logs named by the index (default: $GPULENS_WHOLE_LOGS)")
    parser.add_argument("--index-dir", type=Path, default=INDEX_DIR, help="folder of index*.csv")
    parser.add_argument("--present-only", action="store_true",
                        help="check the logs that are there and count the others (a corpus rebuilt in part)")
    args = parser.parse_args(argv)
    if not args.root:
        print("check_whole_corpus: no corpus root; pass it or set GPULENS_WHOLE_LOGS", file=sys.stderr)
        return 2
    try:
        counts = check(args.index_dir, Path(args.root), present_only=args.present_only)
    except CorpusError as exc:
        print(f"check_whole_corpus: {exc}", file=sys.stderr)
        return 2
    print(
        f"whole-log corpus OK: {counts['logs']} logs, {counts['ended_normally']} ended normally, "
        f"{counts['multi_rank']} multi-rank, {counts['dev']} dev / {counts['holdout']} holdout"
        + (f"; {counts['missing']} indexed logs not present (rebuild: scripts/rebuild_whole_corpus.py --missing --by-count)"
           if counts["missing"] else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
