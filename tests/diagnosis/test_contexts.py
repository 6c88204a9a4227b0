"""Error contexts cut from dev-split whole logs (``sample_logs/contexts/``, issue 23 item 3):
the cutter (scripts/cut_whole_contexts.py), the committed folder, and the classifier that learns
from them. The whole logs live outside the repository: the cutter's tests build their own."""

from __future__ import annotations

import csv
import hashlib
import re
import shutil
from pathlib import Path

import pytest

from gpulens.diagnosis.classifier import Classifier, whole_classifier
from gpulens.diagnosis.corpus import CORPUS_DIR, load_context_corpus, load_corpus, load_real_corpus
from gpulens.diagnosis.logread.evaluate import _fold_classifiers
from scripts import cut_whole_contexts as cwc

WHOLE = CORPUS_DIR / "whole"


def test_cut_keeps_the_indicators_and_a_bounded_window_without_bars() -> None:
    lines = [f"reading shard {k} from /data/train" for k in range(1, 300)]
    lines[149] = "Training:  45%|████▌     | 450/1000 [01:02<01:10,  7.80it/s]"
    lines[155] = "step 450 loss 2.31"
    lines[159] = "RuntimeError: CUDA error: an illegal memory access was encountered"
    lo, hi, text = cwc.cut(lines, [160])
    assert (lo, hi) == (160 - cwc.BEFORE, 160 + cwc.AFTER)
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in text
    assert not any("it/s]" in t or "loss" in t for t in text)  # bars and metric lines are not material,
    # as in the context the reader gives the classifier
    lo, hi, text = cwc.cut(lines, [160], before=40, after=0, max_bytes=200)
    assert hi == 160 and text[-1].startswith("RuntimeError") and sum(len(t) + 1 for t in text) <= 200


def test_cut_never_drops_an_indicator_line_to_fit() -> None:
    lines = ["x" * 300 for _ in range(50)]
    lines[10] = "AssertionError"
    lines[40] = "ValueError: " + "y" * 390
    _, _, text = cwc.cut(lines, [11, 41], max_bytes=600)
    assert text[0] == "AssertionError" and text[-1].startswith("ValueError: yyy")
    assert sum(len(t.encode()) + 1 for t in text) <= 600


@pytest.mark.parametrize(("line", "kept"), [
    ("export SWANLAB_API_KEY=Qx7pLm2vRt9sKw4ZbN1c", "export SWANLAB_API_KEY=<REDACTED>"),
    ("wandb login 0123456789abcdef0123456789abcdef01234567", "wandb login <REDACTED>"),
    ("token: hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "token: <REDACTED>"),
    ("using key sk-proj-abcdefghij0123456789XYZ", "using key <REDACTED>"),
    ("--password 'correct-horse-battery'", "--password 'correct-horse-battery'"),  # no = or :, left
    ("password=correct-horse-battery", "password=<REDACTED>"),
    ("hub_token=<HUB_TOKEN>,", "hub_token=<HUB_TOKEN>,"),  # already redacted by transformers
    ("generate(max_tokens=1024, pad_token_id=2)", "generate(max_tokens=1024, pad_token_id=2)"),
])
def test_secrets_are_redacted_and_nothing_else(line: str, kept: str) -> None:
    assert cwc.redact(line) == kept


def _write_index(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _row(file: str, data: bytes, project: str, split: str, ended: str, category: str, lines: str) -> dict[str, str]:
    return {"file": file, "sha256": hashlib.sha256(data).hexdigest(), "repo": project, "path": "train.out",
            "commit": "a" * 40, "project": project, "split": split, "ended_normally": ended, "category": category,
            "origin": "user" if ended == "no" else "none", "indicator_lines": lines, "ambiguous": "no",
            "description": "why"}


def test_build_cuts_failed_dev_logs_of_projects_held_out_nowhere(tmp_path: Path) -> None:
    corpus, index, out = tmp_path / "whole", tmp_path / "index", tmp_path / "out"
    (corpus / "a").mkdir(parents=True)
    index.mkdir()
    failed = b"epoch 1\nepoch 2\nTraceback (most recent call last):\n  File \"t.py\", line 3\nKeyError: 'labels'\n"
    rows = []
    for name, project, split, ended in (("ok", "me/kept", "dev", "no"), ("held", "me/held", "holdout", "no"),
                                        ("leak", "Other/Excerpt", "dev", "no"), ("fine", "me/fine", "dev", "yes")):
        (corpus / "a" / name).write_bytes(failed)
        rows.append(_row(f"a/{name}", failed, project, split, ended, "semantic_error" if ended == "no" else "none",
                         "5" if ended == "no" else ""))
    _write_index(index / "index_a.csv", rows)
    real = tmp_path / "real.csv"
    _write_index(real, [{"file": "x.log", "project": "other/excerpt", "split": "holdout"}])  # other case: same project
    assert cwc.build(corpus, out, index, real) == 1
    with (out / "index.csv").open(encoding="utf-8") as fh:
        (got,) = list(csv.DictReader(fh))
    assert got["source_file"] == "a/ok" and got["split"] == "dev" and got["source_sha256"] == rows[0]["sha256"]
    assert (got["line_from"], got["line_to"]) == ("3", "5")  # the epoch lines and the blank last line are not kept
    assert (out / got["file"]).read_text().splitlines()[-1] == "KeyError: 'labels'"
    (corpus / "a" / "ok").write_bytes(failed + b"more\n")  # not the indexed log any more
    with pytest.raises(ValueError, match="sha256"):
        cwc.build(corpus, out, index, real)


def test_main_without_the_corpus_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("GPULENS_WHOLE_LOGS", str(tmp_path / "nowhere"))
    assert cwc.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "GPULENS_WHOLE_LOGS" in err


def test_committed_contexts_are_dev_failures_of_projects_held_out_nowhere() -> None:
    ctx = load_context_corpus()
    assert len(ctx) >= 150
    whole = [r for p in sorted(WHOLE.glob("index_*.csv")) for r in csv.DictReader(p.open(encoding="utf-8"))]
    real = [{"project": e.project, "split": e.split} for e in load_real_corpus()]
    banned = cwc.excluded_projects(whole, real)
    by_file = {r["file"]: r for r in whole}
    with (CORPUS_DIR / "contexts" / "index.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for e, r in zip(ctx, rows, strict=True):
        src = by_file[r["source_file"]]
        assert e.split == "dev" == src["split"] and src["ended_normally"] == "no"
        assert e.project.lower() not in banned and e.category == src["category"]
        assert src["sha256"] == r["source_sha256"] and (r["repo"], r["path"], r["commit"]) == (
            src["repo"], src["path"], src["commit"])
        text = (CORPUS_DIR / e.file).read_bytes()
        assert len(text) <= cwc.MAX_BYTES + 1
        assert not re.search(rb"(?i)(api_key|secret_key|access_token)\s*[=:]\s*(?!<)[^\s'\"]{8,}", text)


def test_only_the_whole_log_classifier_learns_from_the_contexts(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    shutil.copytree(CORPUS_DIR / "syntax_error", root / "syntax_error")
    (root / "index.csv").write_text("file,category,origin,provenance,description\n" + "".join(
        f"{e.file},{e.category},{e.origin},x,y\n" for e in load_corpus() if e.category == "syntax_error"))
    (root / "contexts" / "gpu_oom").mkdir(parents=True)
    log = root / "contexts" / "gpu_oom" / "a__x.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    (root / "contexts" / "index.csv").write_text(
        "file,category,origin,project,split,repo,path,commit,line_from,line_to,description\n"
        "gpu_oom/a__x.log,gpu_oom,user,me/x,dev,me/x,t.out,abc,1,1,oom\n")
    entries = load_corpus(root)
    plain, whole = Classifier(corpus_dir=root, cache_dir=None), Classifier(corpus_dir=root, cache_dir=None, contexts=True)
    key_plain, key_whole = plain._corpus_key(entries), whole._corpus_key(entries)
    assert key_plain != key_whole
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    assert plain._corpus_key(entries) == key_plain and whole._corpus_key(entries) != key_whole  # retrains
    assert [e.project for e in load_context_corpus(root)] == ["me/x"]
    assert _fold_classifiers(Classifier(model=None, cache_dir=None), ["me/x"]) == {}
    assert whole_classifier().contexts and whole_classifier() is whole_classifier()


def test_slices_are_named_whole_not_by_their_letters(tmp_path: Path) -> None:
    """``--slices as`` cuts from index_as.csv alone (not index_a.csv and index_s.csv, as a letter test would)."""
    for name in ("a", "s", "as"):
        (tmp_path / f"index_{name}.csv").write_text(f"file,split\n{name}/x.log,dev\n", encoding="utf-8")
    assert [r["file"] for r in cwc._rows(tmp_path, "as")] == ["as/x.log"]
    assert [r["file"] for r in cwc._rows(tmp_path, "a,s")] == ["a/x.log", "s/x.log"]
