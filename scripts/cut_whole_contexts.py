"""Cut the error contexts of the failed DEV-split whole logs into ``sample_logs/contexts/``.

Each context is what an operator (and the classifier at whole-log diagnosis time) reads around the
root failure: the labelled indicator lines of a failed run (``sample_logs/whole/index_*.csv``,
column ``indicator_lines``), up to ``BEFORE`` lines above the first of them and ``AFTER`` lines
below the last, without progress-bar lines, bounded to ``MAX_BYTES``. Secrets (API keys, tokens,
passwords) are replaced by ``<REDACTED>``. Only rows with ``split == dev`` and
``ended_normally == no`` are cut, and none of a project that is in the holdout split of the
excerpt corpus (``sample_logs/real/index.csv``) or of any whole-log index (by project name,
lower-cased): the holdout projects stay unseen by the model.

    GPULENS_WHOLE_LOGS=/path/to/whole .venv/bin/python -m scripts.cut_whole_contexts [--out DIR]

Writes ``<out>/<category>/<slice>__<name>.log`` and ``<out>/index.csv`` (provenance of each:
repository, path, commit, source file and its sha256, the line range cut). Re-running on the same
corpus and index gives the same files. Exits 2 with one line when the corpus is missing or a
log's sha256 does not match its index row.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from gpulens.diagnosis.logread.lines import is_progress

__all__ = ["AFTER", "BEFORE", "MAX_BYTES", "cut", "excluded_projects", "main", "redact"]

ROOT = Path(__file__).resolve().parents[1]
WHOLE_INDEX = ROOT / "sample_logs" / "whole"
REAL_INDEX = ROOT / "sample_logs" / "real" / "index.csv"
OUT = ROOT / "sample_logs" / "contexts"
#: Lines kept above the first indicator line, and below the last one.
BEFORE = 40
AFTER = 40
#: Bound of one context (UTF-8 bytes), and of one line (characters).
MAX_BYTES = 4096
MAX_LINE = 400
FIELDS = ["file", "category", "origin", "project", "split", "repo", "path", "commit", "source_file",
          "source_sha256", "line_from", "line_to", "indicator_lines", "ambiguous", "description"]

_SECRET_NAMED = re.compile(
    r"(?i)(\b[\w.-]*(?:api[_-]?key|access[_-]?key|secret[_-]?key|auth[_-]?key|secret|token|password|passwd)"
    r"\b['\"]?\s*[=:]\s*['\"]?)([^\s'\",;]{8,})")
_SECRET_SHAPED = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|AKIA[0-9A-Z]{16}|xox[abposr]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,})\b")
_WANDB_LOGIN = re.compile(r"(?i)(wandb\s+login\s+(?:--relogin\s+)?)([0-9a-f]{40})\b")


def redact(line: str) -> str:
    """``line`` with API keys, tokens and passwords replaced by ``<REDACTED>`` (a value named by
    a key/token/secret/password variable, or shaped like a known provider's token)."""
    line = _SECRET_NAMED.sub(lambda m: m.group(1) + ("<REDACTED>" if not m.group(2).startswith("<") else m.group(2)),
                             line)
    line = _WANDB_LOGIN.sub(r"\1<REDACTED>", line)
    return _SECRET_SHAPED.sub("<REDACTED>", line)


def excluded_projects(whole_rows: Sequence[dict[str, str]], real_rows: Sequence[dict[str, str]]) -> set[str]:
    """Lower-cased projects in the holdout split of the excerpt corpus or of any whole-log index."""
    return {r["project"].lower() for r in [*whole_rows, *real_rows] if r["split"] == "holdout"}


def _shown(raw: str) -> str:
    """What a terminal shows of a line: the last carriage-return segment that holds text."""
    parts = [p for p in raw.rstrip("\r").split("\r") if p.strip()]
    return parts[-1] if parts else ""


def cut(lines: Sequence[str], indicators: Sequence[int], before: int = BEFORE, after: int = AFTER,
        max_bytes: int = MAX_BYTES) -> tuple[int, int, list[str]]:
    """(first line, last line, kept text) of the context around ``indicators`` (1-based): up to
    BEFORE lines above the first and AFTER below the last, progress lines dropped (never an
    indicator line), lines cut at MAX_LINE, then lines dropped from the top (above the first
    indicator), from the bottom (below the last) and finally between the indicator lines until
    the text fits MAX_BYTES."""
    lo = max(1, min(indicators) - before)
    hi = min(len(lines), max(indicators) + after)
    keep = [(n, _shown(lines[n - 1])[:MAX_LINE]) for n in range(lo, hi + 1)]
    keep = [(n, t) for n, t in keep if n in indicators or (t.strip() and not is_progress(t))]
    first, last = min(indicators), max(indicators)

    def size() -> int:
        return sum(len(t.encode("utf-8")) + 1 for _, t in keep)

    while size() > max_bytes and keep[0][0] < first:
        keep.pop(0)
    while size() > max_bytes and keep[-1][0] > last:
        keep.pop()
    while size() > max_bytes and (drop := [k for k, (n, _) in enumerate(keep) if n not in indicators]):
        keep.pop(drop[len(drop) // 2])
    while size() > max_bytes:  # only indicator lines are left: shorten the longest
        k = max(range(len(keep)), key=lambda j: len(keep[j][1]))
        keep[k] = (keep[k][0], keep[k][1][: len(keep[k][1]) // 2])
    return keep[0][0], keep[-1][0], [redact(t) for _, t in keep]


def _rows(index_dir: Path, slices: str | None = None) -> list[dict[str, str]]:
    """The rows of the index files of ``slices`` (comma-separated slice names, "as" or "a,b,ar"; None: all)."""
    names = None if slices is None else {x.strip() for x in slices.split(",")}
    rows: list[dict[str, str]] = []
    for path in sorted(index_dir.glob("index_*.csv")):
        if names is not None and path.stem.removeprefix("index_") not in names:
            continue
        with path.open(encoding="utf-8", newline="") as fh:
            rows += list(csv.DictReader(fh))
    return rows


def _name(file: str) -> str:
    slice_, _, base = file.partition("/")
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", base)
    return f"{slice_}__{stem}" + ("" if stem.endswith(".log") else ".log")


def build(corpus: Path, out: Path, index_dir: Path = WHOLE_INDEX, real_index: Path = REAL_INDEX, *,
          before: int = BEFORE, after: int = AFTER, max_bytes: int = MAX_BYTES,
          slices: str | None = None) -> int:
    """Write the contexts of the dev rows of the index files of ``slices`` (comma-separated names; None: all)
    and their index; the number written. Holdout projects are excluded over every index."""
    whole = _rows(index_dir, slices)
    banned_rows = _rows(index_dir)
    with real_index.open(encoding="utf-8", newline="") as fh:
        real = list(csv.DictReader(fh))
    banned = excluded_projects(banned_rows, real)
    todo = [r for r in whole if r["split"] == "dev" and r["ended_normally"] == "no"
            and r["project"].lower() not in banned and r["indicator_lines"].strip()]
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*/*.log"):  # a re-run replaces the whole folder's contexts
        old.unlink()
    written: list[dict[str, str]] = []
    for r in todo:
        data = (corpus / r["file"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != r["sha256"]:
            raise ValueError(f"{corpus / r['file']}: sha256 differs from its index row")
        lines = data.decode("utf-8", errors="replace").split("\n")
        marks = [int(x) for x in r["indicator_lines"].split()]
        lo, hi, text = cut(lines, marks, before, after, max_bytes)
        name = f"{r['category']}/{_name(r['file'])}"
        (out / r["category"]).mkdir(exist_ok=True)
        (out / name).write_text("\n".join(text) + "\n", encoding="utf-8")
        written.append({"file": name, "category": r["category"], "origin": r["origin"], "project": r["project"],
                        "split": "dev", "repo": r["repo"], "path": r["path"], "commit": r["commit"],
                        "source_file": r["file"], "source_sha256": r["sha256"], "line_from": str(lo),
                        "line_to": str(hi), "indicator_lines": r["indicator_lines"], "ambiguous": r["ambiguous"],
                        "description": redact(r["description"])})
    with (out / "index.csv").open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(sorted(written, key=lambda x: x["file"]))
    return len(written)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT), help="output folder (default sample_logs/contexts)")
    ap.add_argument("--before", type=int, default=BEFORE, help=f"lines above the first indicator (default {BEFORE})")
    ap.add_argument("--after", type=int, default=AFTER, help=f"lines below the last indicator (default {AFTER})")
    ap.add_argument("--max-bytes", type=int, default=MAX_BYTES, help=f"bound of one context (default {MAX_BYTES})")
    # by default every index_*.csv present, by a fixed rule: each slice scored blind gives its dev
    # rows to the contexts once its holdout rows have been scored
    ap.add_argument("--slices", default="all",
                    help="names of the index files to cut from, comma-separated ('as' is index_as.csv, 'a,b' two files; "
                         "default 'all': every index_*.csv present)")
    args = ap.parse_args(argv)
    corpus = os.environ.get("GPULENS_WHOLE_LOGS", "")
    if not corpus or not Path(corpus).is_dir():
        print("error: GPULENS_WHOLE_LOGS does not name the whole-log corpus folder; rebuild it as "
              "sample_logs/whole/README.md says and point the variable at it", file=sys.stderr)
        return 2
    try:
        n = build(Path(corpus), Path(args.out), before=args.before, after=args.after, max_bytes=args.max_bytes,
                  slices=None if args.slices == "all" else args.slices)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}; rebuild that log from its index row (sample_logs/whole/README.md)", file=sys.stderr)
        return 2
    print(f"{n} error contexts written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
