"""Chaos: real agents, a state writer and a reader; random SIGKILLs, a truncated segment and a
damaged state file injected mid-run. Zero reader failures, zero duplicates, nothing lost
beyond one flush, and a clean recovery (`gpulens store restore`)."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from gpulens.store import Store

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
INTERVAL, FLUSH, SEGMENT = 0.25, 0.5, 1.5
RUN_SECONDS = 36


class Procs:
    """Child processes with their output in files (a pipe nobody reads would block them)."""

    def __init__(self, root: Path, logs: Path) -> None:
        self.root, self.logs = root, logs
        self.n = 0
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
        self.env.update(PYTHONPATH=str(ROOT), GPULENS_COLLECT_FLUSH_SECONDS=str(FLUSH),
                        GPULENS_COLLECT_SEGMENT_SECONDS=str(SEGMENT))

    def start(self, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        self.n += 1
        out = self.logs / f"{self.n:03d}-{args[0] if args[0] != '-m' else args[1]}.log"
        fh = open(out, "wb")
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=self.env, stdout=fh,
                                stderr=subprocess.STDOUT)
        fh.close()
        return proc, out

    def agent(self, node: str, scenario: Path) -> tuple[subprocess.Popen[bytes], Path]:
        return self.start("-m", "gpulens", "--data-dir", str(self.root), "collect", "--backend", "fake",
                          "--fake-scenario", str(scenario), "--node", node, "--port", "0",
                          "--interval", str(INTERVAL), "--proc-root", str(FIX / "proc"),
                          "--sysfs-root", str(FIX / "sys"))

    def state_writer(self, start: int) -> tuple[subprocess.Popen[bytes], Path]:
        return self.start("-m", "tests.core.store_procs", "chaos_state_writer", str(self.root), str(start))


def _committed(log: Path) -> int:
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("committed ")]
    return int(lines[-1].split()[1]) if lines else 0


def _state_jobs(store: Store) -> int:
    """Chaos jobs committed to the state file (under the writers' lock: agents write it too)."""
    with store.write() as con:
        return int(con.execute("SELECT count(*) FROM jobs WHERE job_id LIKE 'chaos-%'").fetchone()[0])  # type: ignore[index]


def _block_of_a_quiet_table(store: Store) -> int:
    """File offset of a block that holds rows of ``imports`` (nobody writes it during the run)."""
    with store.write() as con:
        con.executemany("INSERT INTO imports (ts, kind, path, rows, quirks) VALUES (now(), 'chaos', ?, 1, '{}')",
                        [[f"/data/{k:06d}/" + "x" * 100] for k in range(5000)])
    con = duckdb.connect(str(store.state_db), read_only=True)  # no other process runs yet
    try:
        (block,) = con.execute("SELECT min(block_id) FROM pragma_storage_info('imports') "
                               "WHERE persistent AND block_id >= 0").fetchone()  # type: ignore[misc]
    finally:
        con.close()
    return 3 * 4096 + int(block) * 262144  # DuckDB: three 4 KiB headers, then 256 KiB blocks


def _damage_state(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:  # past the headers: only the block checksum can see it
        fh.seek(offset + 100)
        fh.write(bytes((i * 7919) % 251 for i in range(16384)))


@pytest.mark.slow
def test_chaos(tmp_path: Path) -> None:
    root = tmp_path / "data"
    logs = tmp_path / "logs"
    logs.mkdir()
    store = Store.open(root)
    block = _block_of_a_quiet_table(store)
    scenario = tmp_path / "gpus.json"
    scenario.write_text(json.dumps({"devices": [{"index": 0}, {"index": 1}]}))
    procs = Procs(root, logs)
    rng = random.Random(14)
    stop = tmp_path / "stop"
    reader, reader_log = procs.start("-m", "tests.core.store_procs", "chaos_reader", str(root), str(stop))
    agents = {n: procs.agent(n, scenario) for n in ("agent-a", "agent-b")}
    kills: list[tuple[str, float]] = []  # (node, wall time of the SIGKILL)
    sampling_since: dict[str, float] = {}
    writer_kills = 0
    writer, writer_log = procs.state_writer(-1)
    truncated: Path | None = None
    damaged = False
    t0 = time.monotonic()
    try:
        while (time.monotonic() - t0 < RUN_SECONDS or len(kills) < 3 or writer_kills < 2) \
                and time.monotonic() - t0 < 3 * RUN_SECONDS:
            time.sleep(rng.uniform(1.5, 3.0))
            elapsed = time.monotonic() - t0
            if truncated is None and elapsed > 10:
                segs = sorted((p for p in (root / "samples" / "kind=gpu").glob("*/node=agent-*/*.parquet")),
                              key=lambda p: p.stat().st_mtime)
                if segs:
                    truncated = segs[0]
                    os.truncate(truncated, truncated.stat().st_size // 2)
                continue
            if not damaged and elapsed > 20:
                writer.send_signal(signal.SIGKILL)
                writer.wait()
                assert _state_jobs(store) >= _committed(writer_log)
                _damage_state(store.state_db, block)
                writer, writer_log = procs.state_writer(-1)
                assert writer.wait(timeout=60) == 2, writer_log.read_text()
                err = [ln for ln in writer_log.read_text().splitlines() if ln.startswith("gpulens: error:")]
                assert len(err) == 1 and "gpulens store restore" in err[0] and "snapshots/state-" in err[0]
                r = subprocess.run([sys.executable, "-m", "gpulens", "--data-dir", str(root), "store",
                                    "restore", "--json"], cwd=ROOT, env=procs.env, capture_output=True,
                                   text=True, timeout=120)
                assert r.returncode == 0, r.stderr
                writer, writer_log = procs.state_writer(-1)
                damaged = True
                continue
            for node, (_, log) in agents.items():  # when each agent run is seen sampling
                if node not in sampling_since and "sampling every" in log.read_text():
                    sampling_since[node] = time.monotonic()
            ripe = [n for n, since in sampling_since.items() if time.monotonic() - since >= 3.5]
            victim = rng.choice(ripe) if ripe and rng.random() < 0.7 else "writer"
            if victim == "writer":
                writer.send_signal(signal.SIGKILL)
                writer.wait()
                assert _state_jobs(store) >= _committed(writer_log), "a committed job was lost"
                writer_kills += 1
                writer, writer_log = procs.state_writer(-1)
            else:
                proc, _ = agents[victim]
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills.append((victim, time.time()))  # it had sampled for >= 3.5 s: the check holds
                del sampling_since[victim]
                agents[victim] = procs.agent(victim, scenario)
    finally:
        for proc, _ in agents.values():
            proc.send_signal(signal.SIGTERM)  # graceful: flush and roll what is left
        for proc, _ in agents.values():
            proc.wait(timeout=60)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        stop.write_text("")
        reader.wait(timeout=120)

    summary = reader_log.read_text().splitlines()[-1]
    stats = dict(kv.split("=") for kv in summary.split())
    assert stats["errors"] == "0", reader_log.read_text()[-3000:]
    assert int(stats["queries"]) >= 5 and stats["duplicates"] == "0"
    assert truncated is not None and damaged and len(kills) >= 3 and writer_kills >= 2

    con = store.connect()
    n, distinct = con.execute("SELECT count(*), count(DISTINCT (node, gpu_index, ts)) FROM gpu_samples").fetchone()  # type: ignore[misc]
    assert n == distinct, "duplicated samples"
    for node, killed_at in kills:  # everything older than one flush (plus a tick) before the kill is stored
        newest = con.execute(
            "SELECT max(ts) FROM gpu_samples WHERE node = ? AND ts <= ?",
            [node, dt.datetime.fromtimestamp(killed_at, dt.UTC).replace(tzinfo=None)],
        ).fetchone()[0]  # type: ignore[index]
        lag = killed_at - newest.replace(tzinfo=dt.UTC).timestamp()
        assert lag <= FLUSH + 2 * INTERVAL + 2.0, (node, lag)  # one flush, a tick, scheduling slack
    con.close()

    r = subprocess.run([sys.executable, "-m", "gpulens", "--data-dir", str(root), "store", "check", "--json"],
                       cwd=ROOT, env=procs.env, capture_output=True, text=True, timeout=300)
    check = json.loads(r.stdout)
    assert check["state_damaged"] is None and check["newly_quarantined"] == []
    assert [q["file"] for q in check["quarantined"]] == [str(truncated.relative_to(root))]
    assert list((root / "tmp").glob("spool-*")) == []
    with Store.open(root).write() as con2:  # and the store takes writes again
        con2.execute("INSERT INTO jobs (job_id, status) VALUES ('after-chaos', 'passed')")
