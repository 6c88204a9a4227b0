"""`gpulens dashboard`: the command line it runs and its help."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from dashboard.cli import APP_PATH, streamlit_command
from gpulens.cli.main import cli
from gpulens.config import Config


def test_streamlit_command_binds_localhost_headless(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    config.dashboard.prometheus_url = "http://127.0.0.1:9090"
    argv, env = streamlit_command(config, port=8765)
    assert argv[argv.index("run") + 1] == str(APP_PATH) and APP_PATH.is_file()
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"
    assert argv[argv.index("--server.port") + 1] == "8765"
    assert argv[argv.index("--server.headless") + 1] == "true"
    assert env["GPULENS_DATA_DIR"] == str((tmp_path / "data").resolve())
    assert env["GPULENS_DASHBOARD_PROMETHEUS_URL"] == "http://127.0.0.1:9090"


def test_streamlit_command_host_override(tmp_path: Path) -> None:
    argv, _ = streamlit_command(Config(data_dir=tmp_path), host="0.0.0.0")
    assert argv[argv.index("--server.address") + 1] == "0.0.0.0"


def test_dashboard_help() -> None:
    result = CliRunner().invoke(cli, ["dashboard", "--help"])
    assert result.exit_code == 0, result.output
    assert "--port" in result.output and "--prometheus-url" in result.output
