"""Browser test: the real `streamlit run` server, every page loaded by headless Chromium.

Every page opens from its own URL (no "Page not found" modal), shows no error box
or traceback, and no KPI tile truncates its label, value or delta at 1,400 px; a
screenshot of each is saved (into $GPULENS_SCREENSHOT_DIR when set, e.g. to
refresh docs/screenshots/).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.config import Config
from gpulens.store import Store
from tests.conftest import require_module, require_tool

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.browser]

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

#: url path -> (title of the page, screenshot name)
PAGES = {
    "": ("Overview", "overview-root"),  # / opens the Overview page at /overview
    "overview": ("Overview", "overview"),
    "jobs": ("Jobs", "jobs"),
    "job": ("Job", "job"),
    "locality": ("Locality", "locality"),
    "early_stop": ("Early stop", "early-stop"),
    "failures": ("Failures", "failures"),
    "inputs_nodes": ("Inputs and nodes", "inputs-nodes"),
    "validation": ("Validation", "validation"),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(dash_store: Store, tmp_path: Path) -> Iterator[str]:
    require_module("streamlit")
    from gpulens.dashboard.cli import launch, wait_ready

    port = _free_port()
    config = Config(data_dir=dash_store.root)
    log = open(tmp_path / "streamlit.log", "wb")
    proc = launch(config, port=port, stdout=log.fileno(), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, timeout=90, proc=proc)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _failed_job(store: Store) -> str:
    from gpulens import analysis

    con = store.connect()
    try:
        jobs = analysis.job_utilization(con)
    finally:
        con.close()
    failed = jobs[jobs["status"] == "failed"].sort_values("allocated_gpu_hours", ascending=False)
    return str((failed if len(failed) else jobs).iloc[0]["job_id"])


def _settle(page: object, timeout: float = 90.0) -> None:
    """Wait until the script run is over and the charts are drawn."""
    deadline = time.monotonic() + timeout
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        busy = page.evaluate(  # type: ignore[attr-defined]
            """() => {
                const running = document.querySelector('[data-testid="stStatusWidget"]');
                const title = document.querySelector('[data-testid="stMain"] h1');
                const skel = document.querySelector('[data-testid="stSkeleton"]');
                const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')];
                const pending = charts.filter(c => !c.querySelector('canvas, svg')).length;
                return Boolean(running) || !title || Boolean(skel) || pending > 0;
            }"""
        )
        now = time.monotonic()
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since > 1.5:
            return
        time.sleep(0.25)
    raise AssertionError("the page did not finish rendering")


#: KPI tiles (st.metric) whose label, value or delta text does not fit its box
_TRUNCATED_TILES = r"""() => [...document.querySelectorAll('[data-testid="stMetric"]')].flatMap(tile => {
    const parts = [...tile.querySelectorAll(
        '[data-testid="stMetricLabel"], [data-testid="stMetricValue"], [data-testid="stMetricDelta"]')];
    return parts.flatMap(part => [part, ...part.querySelectorAll('*')])
        .filter(el => el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 2
                      && getComputedStyle(el).overflowY === 'hidden')
        .filter(el => el.clientWidth > 0)
        .map(el => tile.innerText.replace(/\s+/g, ' ') + ' [' + el.innerText + ']');
})"""

#: the width the KPI tiles must fit at (issue 19)
WIDTH = 1400


def test_every_page_in_chromium(server: str, dash_store: Store, tmp_path: Path) -> None:
    chromium = require_tool("chromium")
    require_module("playwright")
    from playwright.sync_api import sync_playwright

    out = Path(os.environ.get("GPULENS_SCREENSHOT_DIR") or tmp_path / "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    job_id = _failed_job(dash_store)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1500})
            for path, (title, shot) in PAGES.items():
                url = f"{server}/{path}" + (f"?job={job_id}" if path == "job" else "")
                page.goto(url, wait_until="domcontentloaded")
                _settle(page)
                text = page.inner_text("body")
                assert page.locator('[data-testid="stException"]').count() == 0, (path, text[:2000])
                # a traceback outside the log viewer and the evidence lines is an app crash
                outside = page.evaluate(
                    """() => { const b = document.body.cloneNode(true);
                        b.querySelectorAll('.gl-log, [data-testid="stCode"]')
                         .forEach(e => e.remove());
                        return b.textContent; }"""
                )
                i = outside.find("Traceback")
                assert i < 0, (path, outside[max(0, i - 300):i + 100])
                errors = page.locator('[data-testid="stAlertContentError"]')
                assert errors.count() == 0, (path, errors.all_inner_texts())
                h1 = page.locator('[data-testid="stMain"] h1').first.inner_text()
                assert h1.startswith(title), (path, h1)
                assert "Time range" in page.locator('[data-testid="stSidebar"]').inner_text()
                assert "No data yet" not in text, path
                assert "Page not found" not in text, path
                opened = page.url.split("?")[0].rstrip("/")
                assert opened.endswith(f"/{path or 'overview'}"), (path, page.url)
                truncated = page.evaluate(_TRUNCATED_TILES)
                assert not truncated, (path, truncated)
                page.screenshot(path=str(out / f"{shot}.png"))
                assert (out / f"{shot}.png").stat().st_size > 10_000
        finally:
            browser.close()
