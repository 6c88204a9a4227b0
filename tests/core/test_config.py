from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpulens.config import AGENT_PORT, load_config
from gpulens.errors import ConfigError


def test_defaults_without_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(env={"XDG_CONFIG_HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)},
                      system_dir=tmp_path / "etc")
    assert cfg.collect.port == AGENT_PORT
    assert cfg.collect.host == "127.0.0.1" and cfg.exporter.host == "127.0.0.1"
    assert cfg.source is None


def test_file_then_env_then_option(tmp_path: Path) -> None:
    f = tmp_path / "gpulens.toml"
    f.write_text('data_dir = "/srv/a"\n[collect]\ninterval = 2.5\nport = 9999\n[diagnose]\nblacklist_min_jobs = 3\n')
    cfg = load_config(f, env={"GPULENS_COLLECT_PORT": "1234", "GPULENS_COLLECT_REQUIRE_GPU": "yes"})
    assert cfg.collect.interval == 2.5
    assert cfg.collect.port == 1234
    assert cfg.collect.require_gpu is True
    assert cfg.diagnose.blacklist_min_jobs == 3
    assert cfg.data_dir == Path("/srv/a")
    cfg = load_config(f, env={"GPULENS_DATA_DIR": "/srv/b"})
    assert cfg.data_dir == Path("/srv/b")
    cfg = load_config(f, env={"GPULENS_DATA_DIR": "/srv/b"}, data_dir="/srv/c")
    assert cfg.data_dir == Path("/srv/c")


def test_system_file_after_the_users_before_defaults(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """/etc/gpulens/gpulens.toml (here a folder standing for /etc/gpulens) is read when the user
    has no file of their own, and never when they have one."""
    etc, home = tmp_path / "etc", tmp_path / "home"
    etc.mkdir()
    (etc / "gpulens.toml").write_text('data_dir = "/srv/shared"\n[collect]\nport = 9001\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("GPULENS_CONFIG", raising=False)
    cfg = load_config(env={}, system_dir=etc)
    assert cfg.source == etc / "gpulens.toml"
    assert cfg.data_dir == Path("/srv/shared") and cfg.collect.port == 9001
    assert load_config(env={"GPULENS_COLLECT_PORT": "9002"}, system_dir=etc).collect.port == 9002
    (home / "gpulens").mkdir(parents=True)
    (home / "gpulens" / "gpulens.toml").write_text("[collect]\nport = 9003\n")
    cfg = load_config(env={}, system_dir=etc)
    assert cfg.source == home / "gpulens" / "gpulens.toml" and cfg.collect.port == 9003
    assert cfg.data_dir != Path("/srv/shared")  # one file is read, not a merge
    assert load_config(env={}, system_dir=tmp_path / "none").source == home / "gpulens" / "gpulens.toml"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[collect\n", "not valid TOML"),
        ("[collect]\nport = 'eighty'\n", "collect.port"),
        ("[collect]\nprot = 1\n", "Unknown setting collect.prot"),
        ("colour = 1\n", "Unknown top-level setting"),
        ("collect = 3\n", "must be a table"),
        ("data_dir = 5\n", "Invalid value 5 for data_dir"),
        ("data_dir = \"\"\n", "for data_dir"),
    ],
)
def test_malformed_file(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "gpulens.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f, env={})
    assert needle in str(err.value)


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env={"GPULENS_COLLECT_INTERVAL": "fast"})
    assert "collect.interval" in str(err.value)


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_config(tmp_path / "nope.toml", env={})


@pytest.mark.slow
def test_numeric_data_dir_is_one_line_exit_2_and_creates_nothing(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "gpulens.toml").write_text("data_dir = 5\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    r = subprocess.run([sys.executable, "-m", "gpulens", "store", "info"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "data_dir" in r.stderr, r.stderr
    assert not (tmp_path / "5").exists()
