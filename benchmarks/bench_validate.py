"""Validator benchmark: overhead to a verdict, and time to verdict vs a full run failing.

1. Overhead: ``validate()`` on the healthy digits MLP (2 steps, torch.optim) and
   on a hand-written-update loop (manual_update.py, no torch.optim: steps seen as
   backward passes followed by a parameter change) vs the same script run plainly
   until it prints "step 2" (its own time to its 2nd step).
   overhead = time to verdict - own time; target <= 2 s. Both runs get
   OMP_NUM_THREADS=1 (OpenMP busy-waiting makes a loaded 2-core machine noisy).
2. Broken jobs: time to verdict (with verdict and category) vs the time a plain
   full run (20 epochs) takes to fail, run side by side here. On a cluster the
   full run also waits in the queue first and holds all requested GPUs.

    python -m benchmarks.run validate [--reps=N] [--fixed-only | --overhead-only]
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
_ENV = {"OMP_NUM_THREADS": "1"}
JOBS = ROOT / "tests" / "validator" / "jobs"


def _digits() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    assert spec is not None and spec.submodule_search_locations
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"


def _job(base: Path, name: str, script: str) -> Path:
    job = base / name
    job.mkdir()
    shutil.copy(JOBS / script, job / "train.py")
    shutil.copy(_digits(), job / "digits.csv.gz")
    return job


def _cmd() -> list[str]:
    return [sys.executable, "train.py", "--data", "digits.csv.gz", "--out", "ckpt"]


def _plain_until(job: Path, marker: bytes | None, limit_as: int | None = None, timeout: float = 600) -> tuple[float, int | None]:
    """Run plainly; seconds until ``marker`` appears on stdout (then kill), or until it exits."""

    def preexec() -> None:
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    t0 = time.monotonic()
    env = {**os.environ, **_ENV}
    proc = subprocess.Popen(_cmd(), cwd=job, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=preexec)
    assert proc.stdout is not None
    rc: int | None = None
    for line in proc.stdout:
        if marker is not None and line.startswith(marker):
            elapsed = time.monotonic() - t0
            proc.kill()
            proc.wait()
            return elapsed, None
        if time.monotonic() - t0 > timeout:
            break
    rc = proc.wait()
    return time.monotonic() - t0, rc


def _overhead(base: Path, cfg: Any, script: str, label: str, reps: int) -> None:
    from gpulens.validator import JobSpec, validate

    print(f"-- overhead: {label} ({script}), {cfg.steps} steps, {reps} rep(s), alternating plain / validate")
    own: list[float] = []
    verdict: list[float] = []
    for i in range(reps):
        job = _job(base, f"{Path(script).stem}{i}", script)
        t, _ = _plain_until(job, b"step 2 ")
        own.append(t)
        spec = JobSpec(_cmd(), workdir=job, inputs=["digits.csv.gz"], output_dir="ckpt", gpu_type="T4", env=dict(_ENV))
        t0 = time.monotonic()
        r = validate(spec, cfg, None)
        verdict.append(time.monotonic() - t0)
        assert r.verdict == "pass" and r.steps_completed == cfg.steps, r
        print(f"   rep {i}: own time to step 2 {own[-1]:.2f} s, validate -> {r.verdict} ({r.step_signal}) in"
              f" {verdict[-1]:.2f} s, overhead {verdict[-1] - own[-1]:+.2f} s", flush=True)
    over = [v - o for v, o in zip(verdict, own, strict=True)]
    print(f"   median own {statistics.median(own):.2f} s, median verdict {statistics.median(verdict):.2f} s,"
          f" median overhead {statistics.median(over):+.2f} s (target <= 2 s)", flush=True)


def main(argv: list[str]) -> None:
    from gpulens.config import ValidateConfig
    from gpulens.store import Store
    from gpulens.validator import JobSpec, validate

    reps = 3
    for a in argv:
        if a.startswith("--reps="):
            reps = int(a.split("=", 1)[1])
    cfg = ValidateConfig(backend="none", timeout=300, hang_seconds=10, memory_limit_bytes=int(2.5 * 1024**3))
    base = Path(tempfile.mkdtemp(prefix="bench-validate-"))
    fixed_only = "--fixed-only" in argv
    try:
        # The validator's own fixed cost, without torch's noisy multi-second start-up:
        # a trivial Python job, plain vs validated (static checks, resolver, hook, watcher, cleanup).
        tiny = base / "tiny"
        tiny.mkdir()
        (tiny / "train.py").write_text("import numpy\nprint('done')\n")
        plain_t: list[float] = []
        val_t: list[float] = []
        for _ in range(5):
            t0 = time.monotonic()
            subprocess.run([sys.executable, "train.py"], cwd=tiny, check=True, capture_output=True)
            plain_t.append(time.monotonic() - t0)
            t0 = time.monotonic()
            r = validate(JobSpec([sys.executable, "train.py"], workdir=tiny), cfg, None)
            val_t.append(time.monotonic() - t0)
            assert r.verdict == "pass", r
        print(f"-- fixed cost (trivial job, 5 reps): plain {statistics.median(plain_t):.2f} s,"
              f" validated {statistics.median(val_t):.2f} s,"
              f" overhead {statistics.median(val_t) - statistics.median(plain_t):+.2f} s (median)", flush=True)
        if fixed_only:
            return
        for script, label in (("healthy.py", "healthy MLP, torch.optim"), ("manual_update.py", "hand-written update, no torch.optim")):
            _overhead(base, cfg, script, label, reps)
        if "--overhead-only" in argv:
            return

        print("-- broken jobs: time to verdict vs plain full run (20 epochs) to failure")
        store = Store.open(base / "data")
        rows: list[tuple[str, str, float, str]] = []

        def run(name: str, script: str, prepare=None, plain: bool = True, limit_as: int | None = None) -> None:  # type: ignore[no-untyped-def]
            job = _job(base, name, script)
            spec = JobSpec(_cmd(), workdir=job, inputs=["digits.csv.gz"], output_dir="ckpt", gpu_type="T4")
            if prepare is not None:
                prepare(job, spec)
            t0 = time.monotonic()
            r = validate(spec, cfg, store, record=False)
            tv = time.monotonic() - t0
            label = f"{r.verdict} {r.category or ''}".strip()
            if plain:
                t, rc = _plain_until(job, None, limit_as=limit_as)
                full = f"{'fails' if rc else 'exits 0'} after {t:.1f} s"
            else:
                full = "-"
            rows.append((name, label, tv, full))
            print(f"   {name:22s} {label:28s} verdict {tv:6.1f} s | full run: {full}", flush=True)

        def truncate(job: Path, spec: JobSpec) -> None:
            p = job / "digits.csv.gz"
            p.write_bytes(p.read_bytes()[:20000])

        def remove(job: Path, spec: JobSpec) -> None:
            (job / "digits.csv.gz").unlink()

        def blacklist(job: Path, spec: JobSpec) -> None:
            with store.write() as con:
                con.execute("INSERT OR REPLACE INTO blacklist (input, state, reason, updated_at)"
                            " VALUES (?, 'blacklisted', 'bench', now())", [str(job / "digits.csv.gz")])

        def unwritable(job: Path, spec: JobSpec) -> None:
            (job / "ckpt").write_text("a file, not a directory")

        run("syntax_error", "syntax_error.py.txt")
        run("missing_module", "missing_module.py")
        run("missing_data", "healthy.py", remove)
        run("corrupt_data", "healthy.py", truncate)
        run("blacklisted_input", "healthy.py", blacklist, plain=False)
        run("unwritable_ckpt", "healthy.py", unwritable)
        run("shape_mismatch", "shape_mismatch.py")
        run("nan_loss", "nan_loss.py")
        run("memory_hog", "memory_hog.py", limit_as=int(2.5 * 1024**3))
        run("hang_before_step", "hang.py", plain=False)
        run("crash_end_of_epoch", "crash_end_of_epoch.py")
        print("   (plain runs of blacklisted_input and hang_before_step are not timed: the first"
              " trains on a known-bad input, the second never ends)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
