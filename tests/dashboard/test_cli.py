"""`gpulens dashboard`: the command line it runs and its help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpulens.cli.main import cli
from gpulens.config import Config
from gpulens.dashboard.cli import APP_PATH, streamlit_command


def test_streamlit_command_binds_localhost_headless(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    config.dashboard.prometheus_url = "http://127.0.0.1:9090"
    argv, env = streamlit_command(config, port=8765)
    assert argv[argv.index("run") + 1] == str(APP_PATH) and APP_PATH.is_file()
    assert argv[1:3] == ["-m", "gpulens.dashboard.server"]
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


@pytest.mark.server
@pytest.mark.slow
def test_sigterm_stops_the_dashboard_and_leaves_no_process(tmp_path: Path) -> None:
    import signal
    import socket
    import subprocess
    import sys

    import psutil

    from gpulens.dashboard.cli import wait_ready

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "--data-dir", str(tmp_path / "d"), "dashboard",
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=120, proc=proc)  # type: ignore[arg-type]
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(family, timeout=15)
        assert not alive, [p.cmdline() for p in alive]
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_server_imports_what_pages_need_but_no_page_module() -> None:
    """The server process imports pandas and the analyses before it listens, and none of the
    dashboard's own modules: their st.cache_data functions must be made where the runtime is."""
    code = ("import sys, gpulens.dashboard.server; "
            "print(sorted(m for m in ('pandas', 'duckdb', 'altair', 'gpulens.analysis', "
            "'gpulens.dashboard.data', 'gpulens.dashboard.ui') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == str(["altair", "duckdb", "gpulens.analysis", "pandas"])


def test_server_settle_takes_the_start_up_objects_out_of_the_collectors_generations() -> None:
    """After ``settle`` (what ``main`` does before Streamlit starts) the objects the imports made
    are frozen: the collections a page run triggers no longer traverse them."""
    code = ("import gc, gpulens.dashboard.server as s; before = len(gc.get_objects()); s.settle(); "
            "print(before, gc.get_freeze_count(), len(gc.get_objects()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, frozen, tracked = map(int, out.stdout.split())
    assert frozen > 0.9 * before > 10_000 and tracked < 0.01 * before
