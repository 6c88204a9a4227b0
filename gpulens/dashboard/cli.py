"""``gpulens dashboard``: start the Streamlit operator dashboard.

The command replaces itself (exec) with ``streamlit run gpulens/dashboard/app.py`` (through
:mod:`gpulens.dashboard.server`, which imports what the pages need first), bound to
127.0.0.1 by default, headless, with the data directory (and config file)
passed through the environment (``GPULENS_DATA_DIR``, ``GPULENS_CONFIG``).
``launch()`` and ``wait_ready()`` are what ``gpulens demo`` and the browser
test use to run it in the background.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import click

from gpulens.cliapp import App, pass_app
from gpulens.config import Config
from gpulens.errors import GpulensError
from gpulens.extras import require

__all__ = ["APP_PATH", "dashboard", "launch", "streamlit_command", "wait_ready"]

APP_PATH = Path(__file__).resolve().parent / "app.py"


def streamlit_command(
    config: Config, *, host: str | None = None, port: int | None = None
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run the dashboard for ``config``."""
    host = host or config.dashboard.host
    port = config.dashboard.port if port is None else port
    argv = [
        sys.executable, "-m", "gpulens.dashboard.server", "run", str(APP_PATH),
        "--server.address", host,
        "--server.port", str(port),
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--browser.gatherUsageStats", "false",
        "--global.developmentMode", "false",
        "--client.toolbarMode", "viewer",
        "--theme.base", "light",
    ]
    env = dict(os.environ)
    env["GPULENS_DATA_DIR"] = str(Path(config.data_dir).expanduser().resolve())
    if config.source is not None:
        env["GPULENS_CONFIG"] = str(Path(config.source).resolve())
    # Settings given on the command line travel to the app through the environment.
    env["GPULENS_DASHBOARD_PROMETHEUS_URL"] = config.dashboard.prometheus_url
    env["GPULENS_DASHBOARD_OPERATOR_TOKEN"] = config.dashboard.operator_token
    env["GPULENS_DASHBOARD_CACHE_TTL"] = str(config.dashboard.cache_ttl)
    env.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
    return argv, env


def launch(
    config: Config,
    *,
    host: str | None = None,
    port: int | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start the dashboard in the background; the caller owns (and terminates) the process."""
    require("streamlit")
    argv, env = streamlit_command(config, host=host, port=port)
    return subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr,
                            start_new_session=True)


def wait_ready(url: str, timeout: float = 60.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until Streamlit's health endpoint answers (raise GpulensError on timeout)."""
    deadline = time.monotonic() + timeout
    health = url.rstrip("/") + "/_stcore/health"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise GpulensError(
                f"The dashboard exited with status {proc.returncode} before it was ready.",
                "Run `gpulens dashboard` in a terminal to see its error.",
            )
        try:
            with urllib.request.urlopen(health, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise GpulensError(f"The dashboard at {url} did not answer within {timeout:.0f} s.",
                       "Check that the port is free and see the dashboard's output.")


@click.command("dashboard")
@click.option("--host", default=None, help="Address to bind (default: dashboard.host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port (default: dashboard.port, 8501).")
@click.option("--prometheus-url", default=None,
              help="Prometheus base URL; firing alerts show on Overview.")
@pass_app
def dashboard(app: App, host: str | None, port: int | None, prometheus_url: str | None) -> None:
    """Start the Streamlit operator dashboard (Ctrl-C stops it).

    Reads the store in the data directory without blocking collectors or
    imports. Blacklist changes need dashboard.operator_token; read-only otherwise.
    """
    require("streamlit")
    require("altair")
    app.store()  # create or migrate the data directory before the app reads it
    if prometheus_url is not None:
        app.config.dashboard.prometheus_url = prometheus_url
    host = host or app.config.dashboard.host
    port = app.config.dashboard.port if port is None else port
    if host not in {"127.0.0.1", "localhost", "::1"}:
        app.console.print(
            f"[yellow]The dashboard will listen on {host}: anyone who can reach it can read "
            "the cluster's data.[/yellow]"
        )
    app.console.print(f"gpulens dashboard on http://{host}:{port} (data: {app.config.data_dir})")
    argv, env = streamlit_command(app.config, host=host, port=port)
    # Become Streamlit (no wrapper process): Ctrl-C, SIGTERM from a supervisor or from
    # `gpulens demo` reach the server itself, and nothing is left behind.
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)
