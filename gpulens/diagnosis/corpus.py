"""The labelled material the diagnosis model learns from (``sample_logs/``).

Three corpora, each an ``index.csv`` beside its logs: the generated logs (``sample_logs/index.csv``,
families of one generator), the real excerpts users posted publicly (``sample_logs/real/``, with
project and dev/holdout split) and the error contexts cut from dev-split whole logs
(``sample_logs/contexts/``). :class:`CorpusEntry` is one row of any of them.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

__all__ = ["CONTEXTS_SUBDIR", "CORPUS_DIR", "REAL_SUBDIR", "CorpusEntry", "family_of", "load_context_corpus",
           "load_corpus", "load_real_corpus"]

CORPUS_DIR = Path(__file__).resolve().parents[2] / "sample_logs"
#: The real-world corpus inside the corpus directory (trained on together with the generated logs).
REAL_SUBDIR = "real"
#: Error contexts cut from the dev-split whole logs (``scripts/cut_whole_contexts.py``), trained on
#: together with the excerpts: what the whole-log reader hands the model at diagnosis time.
CONTEXTS_SUBDIR = "contexts"


@dataclasses.dataclass(frozen=True)
class CorpusEntry:
    file: str  # relative to the corpus directory
    category: str
    origin: str
    provenance: str
    description: str
    #: real logs: the public project the log comes from (the unit of leave-project-out folds)
    project: str = ""
    #: real logs: ``dev`` (rules may be written from it) or ``holdout`` (never looked at for rules)
    split: str = ""
    ambiguous: bool = False

    @property
    def family(self) -> str:
        return f"project:{self.project}" if self.project else family_of(self.file)


def family_of(file: str) -> str:
    """Generator family of a corpus file: its name without the trailing variant number."""
    stem = re.sub(r"[_-]?\d+$", "", Path(file).stem)
    return f"{Path(file).parent.name}/{stem}"


def _index_rows(corpus_dir: str | Path | None, subdir: str = "") -> list[dict[str, str]]:
    """The rows of ``<corpus_dir>/<subdir>/index.csv``; none when it is absent."""
    index = (Path(corpus_dir) if corpus_dir else CORPUS_DIR) / subdir / "index.csv"
    if not index.is_file():
        return []
    with index.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def load_corpus(corpus_dir: str | Path | None = None) -> list[CorpusEntry]:
    """Entries of ``sample_logs/index.csv`` (empty when there is no corpus)."""
    return [CorpusEntry(r["file"], r["category"], r["origin"], r["provenance"], r["description"])
            for r in _index_rows(corpus_dir)]


def load_real_corpus(corpus_dir: str | Path | None = None) -> list[CorpusEntry]:
    """Entries of ``sample_logs/real/index.csv`` (logs users posted publicly), with ``file``
    relative to ``corpus_dir`` (``real/<category>/<name>.log``); empty when absent."""
    return [CorpusEntry(f"{REAL_SUBDIR}/{r['file']}", r["category"], r["origin"], r["provenance"], r["description"],
                        project=r["project"], split=r["split"], ambiguous=r.get("ambiguous") == "yes")
            for r in _index_rows(corpus_dir, REAL_SUBDIR)]


def load_context_corpus(corpus_dir: str | Path | None = None) -> list[CorpusEntry]:
    """Entries of ``sample_logs/contexts/index.csv`` (error contexts cut from dev-split whole
    logs), with ``file`` relative to ``corpus_dir``; empty when absent."""
    return [CorpusEntry(f"{CONTEXTS_SUBDIR}/{r['file']}", r["category"], r["origin"],
                        f"https://github.com/{r['repo']}/blob/{r['commit']}/{r['path']}#L{r['line_from']}-L{r['line_to']}",
                        r["description"], project=r["project"], split=r["split"], ambiguous=r.get("ambiguous") == "yes")
            for r in _index_rows(corpus_dir, CONTEXTS_SUBDIR)]
