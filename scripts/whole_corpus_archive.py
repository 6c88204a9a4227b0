"""Keep the whole-log corpus in one file, and bring it back, checked against the index (issue 23).

The corpus lives outside the repository (sample_logs/whole/README.md); a new machine has had to fetch it again
repository by repository (one snapshot each, more than one session's fetch budget). With a place that outlives the
machine (a shared folder, an object store), one archive does it::

    .venv/bin/python -m scripts.whole_corpus_archive pack whole-corpus.tar.gz [--root ROOT]
    .venv/bin/python -m scripts.whole_corpus_archive unpack whole-corpus.tar.gz [--root ROOT]

``pack`` puts every indexed file present under ROOT (default ``$GPULENS_WHOLE_LOGS``) whose sha256 is the recorded
one into a gzip'd tar, written to a temporary name and renamed. ``unpack`` reads only regular members whose name is
an indexed file, no larger than 64 MiB, and writes each below ROOT at the index's own path once its sha256 is the
recorded one (a temporary name, then a rename): a member the index does not name, a link or a device is skipped, a
member with other bytes is refused, and nothing outside ROOT is ever written. Prints one line per file that was not
taken (``SKIP`` or ``FAIL`` with the reason) and a count; exits 2 when a file failed or the archive cannot be read.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tarfile
from pathlib import Path

from scripts.rebuild_whole_corpus import INDEX_DIR, _write, index_rows

#: Largest member read from an archive (the corpus's largest log is about 16 MB).
MAX_MEMBER = 64 * 1024 * 1024


def _recorded(index_dir: Path) -> dict[str, str]:
    """Indexed file -> its recorded sha256."""
    return {row["file"]: row["sha256"] for row in index_rows(index_dir)}


def pack(out: Path, root: Path, index_dir: Path = INDEX_DIR) -> tuple[int, list[str]]:
    """Archive the indexed files present under ``root`` with their recorded bytes: (files packed, problems)."""
    problems: list[str] = []
    packed = 0
    tmp = out.with_name(out.name + ".part")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for name, sha in _recorded(index_dir).items():
                path = root / name
                if not path.is_file():
                    continue
                if hashlib.sha256(path.read_bytes()).hexdigest() != sha:
                    problems.append(f"FAIL {name}: its bytes are not the recorded ones (not packed)")
                    continue
                tar.add(path, arcname=name, recursive=False)
                packed += 1
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)  # (a full disk or a read error mid-way leaves no half-written archive)
    return packed, problems


def unpack(archive: Path, root: Path, index_dir: Path = INDEX_DIR) -> tuple[int, list[str]]:
    """Write the archive's indexed files below ``root`` (module doc): (files written, SKIP/FAIL lines)."""
    recorded = _recorded(index_dir)
    lines: list[str] = []
    written = 0
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            if member.isdir():
                continue  # (folders are made as their files are written)
            why = _refused(member, recorded)
            if why is not None:
                lines.append(why)
                continue
            got = tar.extractfile(member)
            data = got.read() if got is not None else b""
            if hashlib.sha256(data).hexdigest() != recorded[member.name]:
                lines.append(f"FAIL {member.name}: its bytes are not the recorded ones (not written)")
                continue
            _write(root / member.name, data)
            written += 1
    return written, lines


def _refused(member: tarfile.TarInfo, recorded: dict[str, str]) -> str | None:
    """Why a member is not taken (SKIP: not a file of the index; FAIL: too large), or None."""
    if member.name not in recorded:
        return f"SKIP {member.name}: no index row names it"
    if not member.isfile():
        return f"SKIP {member.name}: not a regular file"
    if member.size > MAX_MEMBER:
        return f"FAIL {member.name}: {member.size} bytes, more than any log of the corpus"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("pack", "unpack"))
    parser.add_argument("archive", type=Path, help="the archive to write (pack) or to read (unpack)")
    parser.add_argument("--root", type=Path, default=Path(os.environ.get("GPULENS_WHOLE_LOGS", "")),
                        help="the corpus root (default: $GPULENS_WHOLE_LOGS)")
    args = parser.parse_args(argv)
    if not str(args.root) or str(args.root) == ".":
        print("whole_corpus_archive: no corpus root; pass --root or set GPULENS_WHOLE_LOGS", file=sys.stderr)
        return 2
    try:
        if args.action == "pack":
            count, lines = pack(args.archive, args.root)
        else:
            count, lines = unpack(args.archive, args.root)
    except (OSError, tarfile.TarError, EOFError) as err:
        said = " ".join(str(err).split())  # (tarfile's "r:*" lists each method it tried on a line of its own)
        print(f"whole_corpus_archive: cannot {args.action} {args.archive}: {said}; "
              "check the path and that the archive is a whole .tar.gz", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    print(f"{'packed' if args.action == 'pack' else 'written'}: {count} files; not taken: {len(lines)}")
    return 2 if any(line.startswith("FAIL") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
