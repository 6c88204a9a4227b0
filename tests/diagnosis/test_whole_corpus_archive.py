"""The whole-log corpus packed into one archive and brought back, checked against the index."""

from __future__ import annotations

import csv
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from scripts import check_whole_corpus as cwc
from scripts import whole_corpus_archive as wca

LOGS = {"a/x__one__train.out": b"epoch 1 loss 0.5\nRuntimeError: CUDA out of memory.\n",
        "b/y__two__logs__run.log": b"step 10 loss 1.2\nTraining done\n"}


def _index(tmp_path: Path) -> Path:
    index_dir = tmp_path / "index"
    (index_dir / "blind").mkdir(parents=True)
    with (index_dir / "index_a.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cwc.COLUMNS)
        w.writeheader()
        for name, data in LOGS.items():
            w.writerow({**{c: "" for c in cwc.COLUMNS}, "file": name, "sha256": hashlib.sha256(data).hexdigest()})
    return index_dir


def _corpus(root: Path, logs: dict[str, bytes]) -> None:
    for name, data in logs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def _tar(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_pack_then_unpack_gives_every_file_back_byte_for_byte(tmp_path: Path) -> None:
    index_dir = _index(tmp_path)
    _corpus(tmp_path / "old", {**LOGS, "a/not_indexed.log": b"x"})
    packed, problems = wca.pack(tmp_path / "c.tar.gz", tmp_path / "old", index_dir)
    assert (packed, problems) == (2, [])
    with tarfile.open(tmp_path / "c.tar.gz") as tar:
        assert sorted(tar.getnames()) == sorted(LOGS)  # only the index's files
    written, lines = wca.unpack(tmp_path / "c.tar.gz", tmp_path / "new", index_dir)
    assert (written, lines) == (2, [])
    assert {n: (tmp_path / "new" / n).read_bytes() for n in LOGS} == LOGS
    assert not list((tmp_path / "new").rglob("*.part"))


def test_pack_leaves_out_a_file_whose_bytes_changed(tmp_path: Path) -> None:
    index_dir = _index(tmp_path)
    _corpus(tmp_path / "old", {**LOGS, "a/x__one__train.out": b"edited\n"})
    packed, problems = wca.pack(tmp_path / "c.tar.gz", tmp_path / "old", index_dir)
    assert packed == 1 and problems == ["FAIL a/x__one__train.out: its bytes are not the recorded ones (not packed)"]


def test_unpack_takes_only_the_index_files_with_their_recorded_bytes(tmp_path: Path) -> None:
    index_dir = _index(tmp_path)
    name, other = list(LOGS)
    _tar(tmp_path / "bad.tar.gz", {name: b"tampered\n", other: LOGS[other], "../../escape.log": b"x",
                                   "a/unknown.log": b"y"})
    written, lines = wca.unpack(tmp_path / "bad.tar.gz", tmp_path / "new", index_dir)
    assert written == 1 and (tmp_path / "new" / other).read_bytes() == LOGS[other]
    assert lines == [f"FAIL {name}: its bytes are not the recorded ones (not written)",
                     "SKIP ../../escape.log: no index row names it", "SKIP a/unknown.log: no index row names it"]
    assert not (tmp_path / "new" / name).exists() and not (tmp_path / "escape.log").exists()
    assert sorted(p.name for p in tmp_path.rglob("*.log")) == ["y__two__logs__run.log"]


def test_a_link_member_is_not_followed(tmp_path: Path) -> None:
    index_dir = _index(tmp_path)
    name = next(iter(LOGS))
    with tarfile.open(tmp_path / "link.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    written, lines = wca.unpack(tmp_path / "link.tar.gz", tmp_path / "new", index_dir)
    assert written == 0 and lines == [f"SKIP {name}: not a regular file"]
    assert not (tmp_path / "new" / name).exists()


def test_the_command_line_says_what_is_wrong_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junk.tar.gz").write_bytes(b"\x1f\x8b not really gzip")
    assert wca.main(["unpack", str(tmp_path / "junk.tar.gz"), "--root", str(tmp_path / "whole")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot unpack" in err and "junk.tar.gz" in err and "Traceback" not in err
    assert wca.main(["unpack", str(tmp_path / "absent.tar.gz"), "--root", str(tmp_path / "whole")]) == 2
    assert "cannot unpack" in capsys.readouterr().err
    assert wca.main(["pack", str(tmp_path / "c.tar.gz"), "--root", ""]) == 2
    assert "no corpus root" in capsys.readouterr().err
