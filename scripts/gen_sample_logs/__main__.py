"""Rebuild sample_logs/: run the failing programs, write the format-based logs, write index.csv.

    .venv/bin/python -m scripts.gen_sample_logs [--out sample_logs] [--only FAMILY,...] [--missing] [--jobs 2]

Needs root for the permission cases (they run as ``nobody``) and the tmpfs mounts
(a 256 KiB filesystem that really fills up); without root those cases are skipped.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpulens.diagnosis.types import DEFAULT_ORIGIN
from scripts.gen_sample_logs import formats
from scripts.gen_sample_logs.programs import CASES, Case, Run

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
VENV = str(Path(sys.prefix))
BASE = str(Path(sys.base_prefix))
USERS = ["alice", "bwang", "cperez", "dkim", "eokafor", "fgarcia"]
PROJECTS = ["resnet-sweep", "llm-ft", "detr-coco", "speech-ctc", "gnn-bench", "vit-pretrain"]
PROTECTED = Path("/var/lib/gl-protected")


def _setup_protected() -> None:
    PROTECTED.mkdir(mode=0o700, exist_ok=True)
    os.chmod(PROTECTED, 0o700)
    for v in range(4):
        (PROTECTED / f"train_{v}.bin").write_bytes(b"\0" * 64)


def _preexec(run: Run) -> None:
    if run.rlimit_as:
        resource.setrlimit(resource.RLIMIT_AS, (run.rlimit_as, run.rlimit_as))
    if run.rlimit_fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (run.rlimit_fsize, run.rlimit_fsize))
    if run.ignore_sigxfsz:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def run_case(case: Case, v: int) -> str | None:
    """Run one variant; return its (path-anonymized) output, or None when it cannot run here."""
    work = Path(tempfile.mkdtemp(prefix="glgen-"))
    os.chmod(work, 0o755)
    run = case.make(v, work)
    if (run.user or run.tmpfs) and os.geteuid() != 0:
        return None
    if run.user:
        # the interpreter lives under /root here, so drop privileges inside the program after the
        # imports: everything the failing part does runs as this user
        import pwd

        pw = pwd.getpwnam(run.user)
        marker = "model = warmup()\n"
        drop = f"os.setgid({pw.pw_gid}); os.setuid({pw.pw_uid})\n"
        run.source = run.source.replace(marker, marker + drop, 1) if marker in run.source else drop + run.source
        run.user = None
    for name, content in run.files.items():
        p = work / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            p.write_text(content)
        else:
            p.write_bytes(content)
    (work / "train.py").write_text(run.source)
    for p in work.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    mounted = None
    if run.tmpfs:
        name, _, mode = run.tmpfs.partition(":")
        mounted = work / name
        mounted.mkdir(exist_ok=True)
        opts = "size=256k" + (",ro" if mode == "ro" else "")
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mounted)], check=True)
    if run.torchrun:
        cmd = [PY, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={run.torchrun}", "train.py"]
    else:
        cmd = [PY, "train.py"]
    if run.shell:
        # a job script: bash forks (no exec of a lone command) and reports how the child died
        # ("line 1: 4242 Aborted (core dumped) python train.py", "Segmentation fault", "Terminated")
        cmd = ["bash", "-c", " ".join(cmd) + "; exit $?"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **run.env}
    env.pop("CI", None)
    out_path = work / "out.log"
    try:
        with out_path.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    user=run.user, preexec_fn=lambda: _preexec(run))
            if run.signal_after:
                # wait until training has visibly started (torch import can be slow), then a bit more
                deadline = time.time() + 120
                while time.time() < deadline and proc.poll() is None and b"loss" not in out_path.read_bytes():
                    time.sleep(0.5)
                time.sleep(run.signal_after)
                target = proc.pid
                if run.shell:
                    import psutil

                    kids = psutil.Process(proc.pid).children()
                    target = kids[0].pid if kids else proc.pid
                os.kill(target, run.signal)
            try:
                proc.wait(timeout=run.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return None  # a hung run is not a sample
        text = out_path.read_bytes().decode("utf-8", errors="replace")
    finally:
        if mounted is not None:
            subprocess.run(["umount", str(mounted)], check=False)
    rnd = random.Random(zlib.crc32(f"{case.family}:{v}".encode()))
    home = f"/home/{rnd.choice(USERS)}/{rnd.choice(PROJECTS)}"
    text = text.replace(str(work), home).replace(VENV, "/opt/conda/envs/train").replace(str(ROOT), "/opt/src")
    text = text.replace(BASE, "/opt/conda/envs/train")  # the stdlib of the interpreter the venv is built on
    shutil.rmtree(work, ignore_errors=True)
    return formats.decorate(text, case.family, v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(ROOT / "sample_logs"))
    ap.add_argument("--only", default="", help="comma-separated families to (re)run")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--missing", action="store_true",
                    help="run only the variants whose log is not on disk yet (resume a partial run)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    only = {x for x in args.only.split(",") if x}
    if os.geteuid() == 0:
        _setup_protected()
    rows: dict[str, dict[str, str]] = {}
    index = out / "index.csv"
    if index.is_file():
        with index.open(newline="") as fh:
            rows = {r["file"]: r for r in csv.DictReader(fh)}

    # first variants of every family first, so a partial run still covers every category
    jobs = sorted(((c, v) for c in CASES for v in range(c.variants) if (not only or c.family in only)
                   and not (args.missing and (out / f"{c.category}/{c.family}_{v + 1:02d}.log").is_file())),
                  key=lambda cv: cv[1])

    def one(item: tuple[Case, int]) -> None:
        case, v = item
        rel = f"{case.category}/{case.family}_{v + 1:02d}.log"
        t0 = time.time()
        try:
            text = run_case(case, v)
        except Exception as exc:  # one broken case must not stop the corpus
            print(f"fail {rel}: {type(exc).__name__}: {exc}", flush=True)
            return
        if text is None:
            print(f"skip {rel} (needs root, or timed out)", flush=True)
            return
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
        rows[rel] = {"file": rel, "category": case.category, "origin": DEFAULT_ORIGIN[case.category],
                     "provenance": "run-here", "description": case.description}
        print(f"ran  {rel} ({time.time() - t0:.1f}s, {len(text)} chars)", flush=True)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, jobs))

    for case in CASES:  # logs already on disk from an earlier (partial) run
        for v in range(case.variants):
            rel = f"{case.category}/{case.family}_{v + 1:02d}.log"
            if rel not in rows and (out / rel).is_file():
                rows[rel] = {"file": rel, "category": case.category, "origin": DEFAULT_ORIGIN[case.category],
                             "provenance": "run-here", "description": case.description}
    if (not only and not args.missing) or "formats" in only:
        for rel, category, source, description, text in formats.written_logs():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text(text)
            rows[rel] = {"file": rel, "category": category, "origin": DEFAULT_ORIGIN[category],
                         "provenance": f"written-from-format:{source}", "description": description}
    out.mkdir(parents=True, exist_ok=True)
    with index.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["file", "category", "origin", "provenance", "description"])
        w.writeheader()
        for rel in sorted(rows):
            if (out / rel).is_file():
                w.writerow(rows[rel])
    print(f"{len(rows)} logs indexed in {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
