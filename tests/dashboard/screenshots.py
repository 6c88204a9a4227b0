"""Refresh the dashboard screenshots in docs/screenshots/ from a realistic simulated cluster.

    .venv/bin/python -m tests.dashboard.screenshots --data-dir /tmp/gl-shots [--out docs/screenshots]

Builds the store when the data directory holds no job yet (128 GPUs over 3 days, seed 2, then
what `gpulens demo` runs: diagnose, blacklist, flag and score nodes; and seven validations, so the
Validation page has something to show), starts the real server on a free port, loads every page
in headless Debian Chromium, saves a full-page screenshot of each and reduces it to 128 colours.
Not a test (pytest does not collect it); tests/dashboard/test_browser.py is the test.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["build_store", "main", "record_validations", "take"]

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "validator" / "jobs"

#: url path -> screenshot file name in docs/screenshots/
SHOTS = {
    "overview": "dashboard-overview.png",
    "jobs": "dashboard-jobs.png",
    "job": "dashboard-job.png",
    "locality": "dashboard-locality.png",
    "early_stop": "dashboard-early-stop.png",
    "failures": "dashboard-failures.png",
    "inputs_nodes": "dashboard-inputs-nodes.png",
    "validation": "dashboard-validation.png",
}


def _cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpulens", "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, timeout=300, check=False)


def _digits() -> Path:
    """scikit-learn's bundled digits data, the healthy test job's input."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-learn is not installed (make venv)")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"


def record_validations(data_dir: Path) -> list[str]:
    """Validations of the test jobs: two healthy dry runs, and failures static and dynamic.

    Static: a syntax error, a missing module, a blacklisted input. Dry run (CPU, two
    steps): a shape mismatch and a NaN loss.
    """
    runs = [  # (job script, extra validate options)
        ("healthy.py", ["--gpus", "8"]),
        ("healthy.py", ["--gpus", "2"]),
        ("syntax_error.py.txt", ["--static-only", "--gpus", "8"]),
        ("missing_module.py", ["--static-only", "--gpus", "4"]),
        ("healthy.py", ["--static-only", "--gpus", "16",
                        "--input", "/data/shared/corrupt-wmt16-shard01"]),
        ("shape_mismatch.py", ["--gpus", "8"]),
        ("nan_loss.py", ["--gpus", "4"]),
    ]
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (script, options) in enumerate(runs):
            job = Path(tmp) / f"job{i}"
            job.mkdir()
            shutil.copy(JOBS / script, job / "train.py")
            shutil.copy(_digits(), job / "digits.csv.gz")
            got = _cli(data_dir, "validate", "--json", "--workdir", str(job), "--input",
                       "digits.csv.gz", "--output-dir", "ckpt", "--gpu-type", "T4", "--steps", "2",
                       "--hide-output", *options, "--", sys.executable, "train.py", "--data",
                       "digits.csv.gz", "--out", "ckpt")
            verdicts.append(f"{script}: rc={got.returncode}")
    return verdicts


def build_store(data_dir: Path) -> None:
    """Simulate 128 GPUs over 3 days (seed 2) and post-process as `gpulens demo` does."""
    from gpulens.diagnosis import blacklist, jobs, nodes
    from gpulens.ingest.simulate import simulate
    from gpulens.store import Store

    store = Store.open(data_dir)
    simulate(store, gpus=128, days=3, seed=2)
    jobs.diagnose_all(store)
    blacklist.update_from_failures(store)
    nodes.flag_nodes(store)
    nodes.score_anomalies(store)
    print("validations:", ", ".join(record_validations(data_dir)))


def _has_jobs(data_dir: Path) -> bool:
    from gpulens.store import Store

    if not data_dir.exists():
        return False
    con = Store.open(data_dir).connect()
    try:
        row = con.execute("SELECT count(*) FROM jobs").fetchone()
    finally:
        con.close()
    return bool(row and row[0])


def _shrink(raw: bytes, colours: int) -> bytes:
    """The screenshot reduced to ``colours`` colours (0: as taken)."""
    from PIL import Image

    if colours <= 0:
        return raw
    img = Image.open(io.BytesIO(raw)).convert("RGB")
    # octree keeps the small areas' colours (legend swatches) that median cut merges
    small = img.quantize(colors=colours, method=Image.Quantize.FASTOCTREE,
                         dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return out.getvalue()


def take(url: str, out: Path, job_id: str, *, width: int = 1440, colours: int = 128,
         pages: list[str] | None = None) -> list[Path]:
    """Full-page screenshots of every page of the app at ``url``."""
    from playwright.sync_api import sync_playwright

    from tests.dashboard.test_browser import CHROMIUM_ARGS, _settle

    out.mkdir(parents=True, exist_ok=True)
    saved = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            page: Any = browser.new_page(viewport={"width": width, "height": 1000})
            for path, name in SHOTS.items():
                if pages and (path or "overview") not in pages:
                    continue
                page.set_viewport_size({"width": width, "height": 1000})
                page.goto(f"{url}/{path}" + (f"?job={job_id}" if path == "job" else ""),
                          wait_until="domcontentloaded")
                _settle(page)
                # Streamlit scrolls inside its main block: grow the window to the content
                height = int(page.evaluate(
                    """() => { const m = document.querySelector('[data-testid="stMain"]');
                        return Math.max(m ? m.scrollHeight : 0, document.body.scrollHeight); }"""
                ))
                page.set_viewport_size({"width": width, "height": min(height + 40, 8000)})
                _settle(page)
                target = out / name
                target.write_bytes(_shrink(page.screenshot(), colours))
                saved.append(target)
                print(f"{target}: {target.stat().st_size / 1024:.0f} KiB")
        finally:
            browser.close()
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--colours", type=int, default=128)
    parser.add_argument("--pages", nargs="*", help="url paths to shoot (default: all)")
    args = parser.parse_args(argv)

    from gpulens.config import Config
    from gpulens.dashboard.cli import launch, wait_ready
    from tests.dashboard.test_browser import _failed_job, _free_port

    if not _has_jobs(args.data_dir):
        build_store(args.data_dir)
    from gpulens.store import Store

    store = Store.open(args.data_dir)
    port = _free_port()
    proc = launch(Config(data_dir=args.data_dir), port=port, stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, timeout=90, proc=proc)
        take(url, args.out, _failed_job(store), width=args.width, colours=args.colours,
             pages=args.pages)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
