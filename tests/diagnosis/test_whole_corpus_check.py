"""scripts/check_whole_corpus.py: the whole-log corpus index and its checker (issue 23).

The logs themselves live outside the repository, so these tests build a small corpus of
their own in a temporary folder for the file checks, and check the committed index rows'
labels (which need no files).
"""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pytest

from scripts import check_whole_corpus as cwc

INDEX_DIR = Path(__file__).resolve().parents[2] / "sample_logs" / "whole"

FAILED_LOG = b"epoch 1 loss 0.5\nepoch 2 loss 0.4\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
PASSED_LOG = b"epoch 1 loss 0.5\nTraining done"


def _row(name: str, data: bytes, **labels: str) -> dict[str, str]:
    project = labels.get("project", "someone/project")
    row = {
        "file": f"a/{name}",
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": str(len(data)),
        "lines": str(cwc.count_lines(data)),
        "repo": project,
        "path": name,
        "commit": "0" * 40,
        "project": project,
        "split": cwc.split_of(project),
        "source_kind": "slurm_out",
        "framework": "pytorch",
        "ended_normally": "no",
        "category": "gpu_oom",
        "origin": "user",
        "multi_rank": "no",
        "first_rank": "",
        "first_node": "",
        "indicator_lines": "3",
        "phase": "training",
        "step": "epoch 2",
        "attempts": "1",
        "ambiguous": "no",
        "description": "test row",
    }
    row.update(labels)
    return row


def _corpus(tmp_path: Path, rows: list[dict[str, str]], files: dict[str, bytes]) -> tuple[Path, Path]:
    root, index_dir = tmp_path / "whole", tmp_path / "index"
    (root / "a").mkdir(parents=True)
    index_dir.mkdir()
    for name, data in files.items():
        (root / "a" / name).write_bytes(data)
    with (index_dir / "index_a.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=cwc.COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return root, index_dir


def _good_rows() -> list[dict[str, str]]:
    return [
        _row("failed.out", FAILED_LOG),
        _row(
            "passed.out",
            PASSED_LOG,
            ended_normally="yes",
            category="none",
            origin="none",
            phase="none",
            indicator_lines="",
        ),
    ]


def test_counts_lines_like_wc_plus_an_unterminated_last_line() -> None:
    assert cwc.count_lines(FAILED_LOG) == 3
    assert cwc.count_lines(PASSED_LOG) == 2
    assert cwc.count_lines(b"") == 0


def test_a_consistent_corpus_passes_with_its_counts(tmp_path: Path) -> None:
    root, index_dir = _corpus(tmp_path, _good_rows(), {"failed.out": FAILED_LOG, "passed.out": PASSED_LOG})
    counts = cwc.check(index_dir, root)
    assert counts["logs"] == 2
    assert counts["ended_normally"] == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"category": "out_of_memory"}, "not in gpulens.vocab.CATEGORIES"),
        ({"origin": "hardware"}, "not in gpulens.vocab.ORIGINS"),
        ({"indicator_lines": "4"}, "outside 1..3"),
        ({"indicator_lines": ""}, "exactly for runs that failed"),
        ({"lines": "2"}, "has 3 lines"),
        ({"sha256": "f" * 64}, "not the recorded file"),
        ({"split": "nonsense"}, "hash rule"),
        ({"phase": "none"}, "phase"),
        ({"first_rank": "rank3"}, "not a rank number"),
    ],
)
def test_each_inconsistency_is_one_line_naming_the_row(
    tmp_path: Path, change: dict[str, str], message: str
) -> None:
    rows = _good_rows()
    rows[0].update(change)
    root, index_dir = _corpus(tmp_path, rows, {"failed.out": FAILED_LOG, "passed.out": PASSED_LOG})
    with pytest.raises(cwc.CorpusError, match="index_a.csv line 2") as info:
        cwc.check(index_dir, root)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_normal_end_carries_no_failure_labels(tmp_path: Path) -> None:
    rows = _good_rows()
    rows[1]["indicator_lines"] = "1"
    root, index_dir = _corpus(tmp_path, rows, {"failed.out": FAILED_LOG, "passed.out": PASSED_LOG})
    with pytest.raises(cwc.CorpusError, match="line 3"):
        cwc.check(index_dir, root)


def test_main_exits_2_with_one_line_when_a_file_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, index_dir = _corpus(tmp_path, _good_rows(), {"failed.out": FAILED_LOG})
    assert cwc.main([str(root), "--index-dir", str(index_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "passed.out" in err and "git show" in err


def test_present_only_checks_what_is_there_and_counts_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, index_dir = _corpus(tmp_path, _good_rows(), {"failed.out": FAILED_LOG})
    counts = cwc.check(index_dir, root, present_only=True)
    assert (counts["logs"], counts["missing"]) == (1, 1)
    assert cwc.main([str(root), "--index-dir", str(index_dir), "--present-only"]) == 0
    assert "1 indexed logs not present" in capsys.readouterr().out
    (root / "a" / "failed.out").write_bytes(b"other bytes\n")  # a damaged file that is there still fails
    assert cwc.main([str(root), "--index-dir", str(index_dir), "--present-only"]) == 2
    assert "not the recorded file" in capsys.readouterr().err


def test_main_without_a_root_says_how_to_give_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GPULENS_WHOLE_LOGS", raising=False)
    assert cwc.main([]) == 2
    assert "GPULENS_WHOLE_LOGS" in capsys.readouterr().err


def test_committed_index_rows_have_valid_labels() -> None:
    """Every committed row passes the label checks (the logs themselves are not in the repo)."""
    indexes = sorted(INDEX_DIR.glob("index*.csv"))
    assert indexes, "sample_logs/whole/index*.csv is missing"
    seen = 0
    for index in indexes:
        with index.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            assert reader.fieldnames == cwc.COLUMNS
            for number, row in enumerate(reader, start=2):
                cwc.check_labels(f"{index.name} line {number}", row)
                failed = row["ended_normally"] == "no"
                assert bool(row["indicator_lines"].split()) == failed, row["file"]
                seen += 1
    assert seen >= 80
