"""The CLI as a user runs it: a real `gpulens` process, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.store import Store


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    return subprocess.run(
        [sys.executable, "-m", "gpulens", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=120,
    )


@pytest.mark.slow
def test_version() -> None:
    r = run("--version")
    assert r.returncode == 0 and "gpulens, version" in r.stdout


@pytest.mark.slow
def test_help_lists_every_command() -> None:
    from gpulens.cli.main import COMMANDS

    r = run("--help")
    assert r.returncode == 0
    for name in COMMANDS:
        assert name in r.stdout


@pytest.mark.slow
def test_store_info_json(tmp_path: Path) -> None:
    r = run("--data-dir", str(tmp_path / "d"), "store", "info", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["schema_version"] == data["code_schema_version"] >= 1
    assert data["rows"]["jobs"] == 0


@pytest.mark.slow
def test_malformed_config_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text("[collect]\ninterval = \n")
    r = run("--config", str(cfg), "store", "info")
    assert r.returncode == 2
    assert str(cfg) in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_config_found_in_working_directory(tmp_path: Path) -> None:
    (tmp_path / "gpulens.toml").write_text(f'data_dir = "{tmp_path / "from-toml"}"\n')
    r = run("store", "info", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["data_dir"] == str(tmp_path / "from-toml")


@pytest.mark.slow
def test_unwritable_data_dir_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run("--data-dir", str(blocker / "sub"), "store", "info")
    assert r.returncode == 2
    assert "not writable" in r.stderr and "--data-dir" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_corrupt_store_exits_2_and_keeps_the_file(tmp_path: Path) -> None:
    root = tmp_path / "d"
    Store.open(root)
    garbage = b"\x00garbage" * 4096
    (root / "state.duckdb").write_bytes(garbage)
    for s in (root / "snapshots").glob("state-*.duckdb"):
        s.write_bytes(garbage)
    r = run("--data-dir", str(root), "store", "info")
    assert r.returncode == 2
    assert "cannot be opened" in r.stderr and "Traceback" not in r.stderr
    assert (root / "state.duckdb").read_bytes() == garbage  # nothing overwritten


@pytest.mark.slow
def test_unknown_command_is_a_usage_error() -> None:
    r = run("frobnicate")
    assert r.returncode == 2


@pytest.mark.slow
def test_a_finding_exit_code_survives_python_m(tmp_path: Path) -> None:
    """`blacklist check` exits 1 on a blacklisted input, also through `python -m gpulens`."""
    d = str(tmp_path / "d")
    assert run("--data-dir", d, "blacklist", "add", "/data/bad.tar", "--reason", "corrupt").returncode == 0
    r = run("--data-dir", d, "blacklist", "check", "/data/bad.tar")
    assert r.returncode == 1, r.stderr
    assert run("--data-dir", d, "blacklist", "check", "/data/good.tar").returncode == 0
