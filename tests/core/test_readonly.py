"""A read-only data directory (the usual way to give analysts access) is readable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import read_only_view

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["XDG_CACHE_HOME"] = str(cache)
    return subprocess.run([sys.executable, "-m", "gpulens", *args], capture_output=True, text=True,
                          env=env, timeout=180)


@pytest.mark.slow
def test_readers_work_on_a_read_only_data_dir_and_writers_say_why_not(tmp_path: Path) -> None:
    src = tmp_path / "data"
    cache = tmp_path / "cache"
    r = run("--data-dir", str(src), "simulate", "--gpus", "16", "--days", "0.25", cache=cache)
    assert r.returncode == 0, r.stderr
    segs = sorted(p for p in (src / "samples" / "kind=gpu").glob("*/*/*.parquet") if "__seed__" not in str(p))
    os.truncate(segs[0], 100)  # damage that a reader cannot move aside here
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    with read_only_view(src, tmp_path / "ro") as ro:
        r = run("--data-dir", str(ro), "store", "info", "--json", cache=cache)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["rows"]["jobs"] > 0
        assert r.stderr.count("\n") == 1 and "left out (data dir is read-only)" in r.stderr, r.stderr
        for args in (("analyze", "utilization", "--json"), ("blacklist", "list")):
            r = run("--data-dir", str(ro), *args, cache=cache)
            assert r.returncode == 0, (args, r.stderr)
        r = run("--data-dir", str(ro), "store", "check", "--json", cache=cache)
        assert r.returncode == 1 and json.loads(r.stdout)["left_out_read_only"] == [
            str(segs[0].relative_to(src))], r.stderr
        log = ROOT / "sample_logs" / "gpu_oom" / sorted(os.listdir(ROOT / "sample_logs" / "gpu_oom"))[0]
        r = run("--data-dir", str(ro), "diagnose", str(log), "--json", cache=cache)
        assert r.returncode == 0, r.stderr
        r = run("--data-dir", str(ro), "blacklist", "add", "/data/x", "--reason", "r", cache=cache)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not writable" in r.stderr, r.stderr
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before, "nothing written to the data dir"
