"""Every command of README's CLI reference, run as a new operator would on the demo's data.

The commands come from README.md itself: each line of the "CLI reference" code blocks is either
in :data:`RUNS` (the concrete invocations that stand for it) or in :data:`EXEMPT` (with the
reason it cannot run here), and the test fails when a README line is in neither or when a line
of either table is no longer in the README, so the README and the CLI cannot drift apart.
Adding a README command is one line in one of the two tables.

Each run goes through ``gpulens.cli.main.main`` (the real entry point: exit codes, error
lines) on a small simulated store, with stdout piped and ``COLUMNS=80``, in text and, where the
line offers it, ``--json``. Checked: no traceback; the exit code is one the README documents
for that run; ``--json`` prints one JSON document (an array for listings, an object for one
thing); text output cuts no value (no ellipsis, every ``sim-`` job id and node whole).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from gpulens.cli.main import main
from gpulens.store import Store
from tests.conftest import built_once

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LOG = ROOT / "tests" / "diagnosis" / "fixtures" / "holdout" / "driver_old.log"
FIXTURES = ROOT / "tests" / "fixtures"


def readme_commands(text: str | None = None) -> list[str]:
    """The command lines of README's "CLI reference" (continuations joined, comments and
    repeated blanks removed)."""
    text = README.read_text(encoding="utf-8") if text is None else text
    section = text.split("\n## CLI reference", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line.startswith("gpulens "):
                out.append(" ".join(line.split()))
    return out


@dataclasses.dataclass(frozen=True)
class Run:
    """One invocation: ``args`` (placeholders in braces, see :func:`_values`), the exit codes
    the README documents for it, whether it also runs with ``--json`` and what that prints
    (``list`` or ``object``), and whether it needs its own copy of the store (it writes)."""

    args: str
    codes: frozenset[int] = frozenset({0})
    json: str | None = None
    own_store: bool = False


def r(args: str, *codes: int, json: str | None = None, own: bool = False) -> Run:
    return Run(args, frozenset(codes or (0,)), json, own)


LIST, OBJ = "list", "object"

#: README line -> the runs that stand for it.
RUNS: dict[str, list[Run]] = {
    "gpulens demo [--gpus 256] [--days 7] [--seed 0] [--no-serve]": [r("demo --no-serve")],
    "gpulens simulate --gpus N --days D --seed S [--start YYYY-MM-DD] [--force] [--json]": [
        r("simulate --gpus 8 --days 0.5 --seed 1", 2),  # the store already holds a simulation
        r("--data-dir {tmp}/sim simulate --gpus 8 --days 0.25 --seed 1 --start 2026-01-05 --force", json=OBJ),
    ],
    "gpulens collect --once [--json]": [r("collect --once --backend none", json=OBJ, own=True)],
    "gpulens collect --require-gpu": [r("collect --once --require-gpu", 0, 2, own=True)],
    "gpulens collect --backend fake --fake-scenario scenario.json": [
        r("collect --once --backend fake --fake-scenario {scenario} --node sim-fake0", own=True)],
    "gpulens collect [--backend auto|nvml|fake|none] [--no-store] [--interval S] [--host H] [--port P] [--node NAME]": [
        r("collect --once --backend none --no-store --node sim-n0000")],
    "gpulens collect --proc-root /host/proc --sysfs-root /host/sys": [
        r("collect --once --backend none --no-store --proc-root /proc --sysfs-root /sys")],
    "gpulens analyze utilization [--by cluster|user|vc|day] [--start D] [--end D] [--vc V] [--user U] [--json]": [
        r("analyze utilization", json=LIST), r("analyze utilization --by user", json=LIST),
        r("analyze utilization --by day --start {start} --end {end}", json=LIST),
        r("analyze utilization --by vc --vc {vc} --user {user}", json=LIST)],
    "gpulens analyze jobs [--status failed] [--limit N] [--json]": [
        r("analyze jobs", json=LIST), r("analyze jobs --limit 200 --status failed --status killed", json=LIST)],
    "gpulens analyze locality|early-stop|online-stop|failure-cost [--start D] [--end D] [--vc V] [--user U] [--json]": [
        r("analyze locality --boot 50", json=OBJ), r("analyze early-stop --limit 100", json=OBJ),
        r("analyze online-stop --limit 100", json=LIST), r("analyze failure-cost", json=LIST),
        r("analyze failure-cost --start {start} --end {end} --vc {vc}", json=LIST)],
    "gpulens analyze goodput [--by vc|user] [--json]": [
        r("analyze goodput", json=LIST), r("analyze goodput --by vc", json=LIST)],
    "gpulens analyze network [--freq minute|hour|day] [--by node|link_kind] [--start D] [--end D] [--json]": [
        r("analyze network", json=LIST), r("analyze network --freq day --by link_kind", json=LIST),
        r("analyze network --freq minute --by node --start {start} --end {end}", json=LIST)],
    "gpulens import philly DIR": [r("import philly {fixtures}/philly", json=OBJ, own=True)],
    "gpulens import slurm sacct.txt|sacct.json": [
        r("import slurm {fixtures}/slurm/sacct.txt", json=OBJ, own=True),
        r("import slurm {fixtures}/slurm/sacct.json", own=True)],
    "gpulens import metrics curves.csv|curves.jsonl": [r("import metrics {curves}", json=OBJ, own=True)],
    "gpulens import kubernetes pods.json [events.json] [--logs /var/log/pods|DUMPS]": [
        r("import kubernetes {fixtures}/kubernetes/pods.json {fixtures}/kubernetes/events.json",
          json=OBJ, own=True),
        r("import kubernetes {fixtures}/kubernetes/pods.json --logs {tmp}", json=OBJ, own=True)],
    "gpulens diagnose FILE... [--json]": [r("diagnose {log}", json=LIST), r("diagnose {log} {log}", json=LIST)],
    "gpulens analyze jobs --status failed": [r("analyze jobs --status failed --limit 100", json=LIST)],
    "gpulens diagnose --job ID [--json]": [r("diagnose --job {job}", json=OBJ),
                                           r("diagnose --job sim-999999", 2)],
    "gpulens diagnose --all": [r("diagnose --all", json=OBJ, own=True)],
    "gpulens diagnose --label JOB[:ATTEMPT] --origin data [--category C]": [
        r("diagnose --label {job} --origin data", json=OBJ, own=True)],
    "gpulens blacklist list [--state S] [--audit [--input X]] [--json]": [
        r("blacklist list", json=LIST), r("blacklist list --state blacklisted", json=LIST),
        r("blacklist list --audit", json=LIST), r("blacklist list --audit --input {input}", json=LIST)],
    "gpulens blacklist add|remove INPUT --reason TEXT [--actor NAME]": [
        r("blacklist add /data/new-set --reason test --actor ops", json=OBJ, own=True),
        r("blacklist remove {input} --reason re-uploaded", json=OBJ, own=True)],
    "gpulens blacklist check INPUT... [--json]": [
        r("blacklist check {input} /data/fine", 1, json=OBJ), r("blacklist check /data/fine", json=OBJ)],
    "gpulens blacklist update [--min-jobs K]": [r("blacklist update --min-jobs 1", json=LIST, own=True)],
    "gpulens nodes flag [--min-jobs K] [--fdr Q] | list [--all] | clear NODE --reason TEXT": [
        r("nodes flag --min-jobs 1 --fdr 0.5", json=LIST, own=True), r("nodes list", json=LIST),
        r("nodes list --all", json=LIST), r("nodes clear {node} --reason repaired", 0, 2, json=OBJ, own=True)],  # 2: no active flag
    "gpulens nodes anomalies [--top N] [--node N] [--no-refresh] [--json]": [
        r("nodes anomalies --no-refresh", json=LIST), r("nodes anomalies --top 5 --node {node}", json=LIST, own=True)],
    "gpulens nodes live [--json]": [r("nodes live", json=LIST)],
    "gpulens slurm epilog [--timeout S] [--no-scontrol] [--no-diagnose]": [
        r("slurm epilog --timeout 5 --no-scontrol --no-diagnose", own=True)],  # no Slurm job: logged, exit 0
    "gpulens slurm check [--workdir DIR] [--dry-run] JOB.sbatch [ARGS]": [
        r("slurm check --workdir {tmp} {tmp}/fine.sbatch"), r("slurm check --workdir {tmp} {tmp}/broken.sbatch", 1)],
    "gpulens slurm cli-filter [--python CMD] > /etc/slurm/cli_filter.lua": [r("slurm cli-filter")],
    "gpulens submit [--dry-run] -- sbatch [OPTIONS] JOB.sbatch [ARGS]": [
        r("submit -- sbatch --chdir={tmp} {tmp}/broken.sbatch", 1)],  # rejected before sbatch runs
    "gpulens validate [--input PATH]... [--output-dir DIR] [--gpus N] [--gpu-type T] [--steps N] "
    "[--timeout S] [--json] -- python train.py --lr 0.1": [
        r("validate --input {tmp}/fine.py --output-dir {tmp}/out --gpus 2 --gpu-type A100 --steps 1 "
          "--timeout 60 --workdir {tmp} -- {py} fine.py --lr 0.1", 0, 3, json=OBJ)],
    "gpulens validate --job-spec job.yaml [--json]": [r("validate --job-spec {spec}", 0, 3, json=OBJ)],
    "gpulens validate --static-only -- python train.py": [
        r("validate --static-only --workdir {tmp} -- {py} fine.py", json=OBJ),
        r("validate --static-only --workdir {tmp} -- {py} broken.py", 1)],
    "gpulens exporter [--host H] [--port 9848] [--cache-seconds 15] [--top-n 20] [--once]": [
        r("exporter --once --top-n 5")],
    "gpulens store info [--json]": [r("store info", json=OBJ)],
    "gpulens store check [--json]": [r("store check", json=OBJ)],
    "gpulens store restore [--generation N]": [r("store restore", json=OBJ, own=True)],
    "gpulens store compact [--kind K] [--settle S] [--grace S] [--open-min-files N] [--json]": [
        r("store compact --kind gpu --settle 0 --grace 0", json=OBJ, own=True)],
    "gpulens store export [DIR] [--json]": [r("store export {tmp}/export", json=OBJ)],
}

#: README line -> why the test does not run it (each is covered elsewhere, named here).
EXEMPT: dict[str, str] = {
    "gpulens collect": "a server that samples until stopped (tests/collectors/test_cli.py)",
    "gpulens analyze utilization|locality|goodput --engine spark [--master URL] [--lake-uri URI]":
        "needs Spark and a JVM (tests/analysis/test_spark.py)",
    "gpulens import prometheus --url URL --start T --end T [--step 60s] [--source auto|dcgm|...]":
        "needs a Prometheus server (tests/prometheus/test_import_history.py)",
    "gpulens diagnose --evaluate [--report docs/diagnosis-evaluation.md]":
        "cross-validates on the whole log corpus for minutes (tests/diagnosis/test_evaluate.py)",
    "gpulens nodes live --watch [--interval 5] [--agent-url 'http://{node}:9847/metrics'] [--agents-file F]":
        "the detector scrapes agents until stopped (tests/prometheus/test_straggler_e2e.py)",
    "gpulens dashboard [--host H] [--port 8501] [--prometheus-url URL]":
        "a server that runs until stopped (tests/dashboard/test_cli.py, test_browser.py)",
}

SCENARIO = '{"devices": [{"index": 0}, {"index": 1}]}'
FINE = "import sys\nprint('step 1 loss 0.5', flush=True)\nsys.exit(0)\n"
CURVES = "job,step,metric,value\n{job},1,accuracy,0.5\n{job},2,accuracy,0.6\n"


def _build_demo(folder: Path) -> None:
    """What `gpulens demo --no-serve` builds with 32 GPUs over 2 days."""
    data = folder / "data"
    mp = pytest.MonkeyPatch()
    mp.setenv("GPULENS_DATA_DIR", str(data))
    try:
        with pytest.raises(SystemExit) as done:
            main(["-q", "--data-dir", str(data), "demo", "--gpus", "32", "--days", "2", "--seed", "0",
                  "--no-serve"])
        assert done.value.code in (0, None)
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's data, small, built once for the run (every worker gets its own copy)."""
    built = built_once(tmp_path_factory, "readme-demo", _build_demo) / "data"
    data = tmp_path_factory.mktemp("readme") / "data"
    shutil.copytree(built, data, ignore=shutil.ignore_patterns("*.lock"))
    return data


def _values(store: Path, tmp: Path) -> dict[str, str]:
    con = Store.open(store).connect()
    try:
        def one(sql: str) -> str:
            row = con.execute(sql).fetchone()
            assert row is not None, sql
            return str(row[0])

        job = one("SELECT job_id FROM failures ORDER BY (category = 'incorrect_input') DESC, job_id LIMIT 1")
        values = {
            "job": job,
            "input": one("SELECT input FROM blacklist ORDER BY (state = 'blacklisted') DESC, input LIMIT 1"),
            "node": one("SELECT node FROM placements GROUP BY node ORDER BY count(*) DESC, node LIMIT 1"),
            "vc": one("SELECT vc FROM jobs ORDER BY vc LIMIT 1"),
            "user": one('SELECT "user" FROM jobs ORDER BY "user" LIMIT 1'),
            "start": one("SELECT strftime(min(start_time), '%Y-%m-%d') FROM attempts"),
            "end": one("SELECT strftime(max(end_time) + INTERVAL 1 DAY, '%Y-%m-%d') FROM attempts"),
        }
        values["known"] = "\n".join(
            [str(x[0]) for x in con.execute("SELECT job_id FROM jobs UNION SELECT node FROM placements").fetchall()]
        )
    finally:
        con.close()
    (tmp / "fine.py").write_text(FINE)
    (tmp / "broken.py").write_text("def f(:\n")
    for name in ("fine", "broken"):
        (tmp / f"{name}.sbatch").write_text(f"#!/bin/bash\n#SBATCH --ntasks=1\n{sys.executable} {name}.py\n")
    (tmp / "scenario.json").write_text(SCENARIO)
    (tmp / "curves.csv").write_text(CURVES.format(job=values["job"]))
    (tmp / "job.yaml").write_text(f"command: [{sys.executable}, fine.py]\nworkdir: {tmp}\ngpus: 1\n")
    values.update(tmp=str(tmp), fixtures=str(FIXTURES), log=str(LOG), py=sys.executable,
                  scenario=str(tmp / "scenario.json"), curves=str(tmp / "curves.csv"),
                  spec=str(tmp / "job.yaml"))
    return values


def _invoke(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capfd.readouterr()
    with pytest.raises(SystemExit) as done:
        main(argv)
    out, err = capfd.readouterr()
    code = done.value.code
    return (0 if code is None else int(code)), out, err


def _check_whole(out: str, known: set[str], where: str) -> None:
    assert "\u2026" not in out, f"{where}: a value is cut with an ellipsis:\n{out}"
    for token in re.findall(r"(?<![\w/.-])sim-[\w-]*", out):
        assert token in known, f"{where}: {token!r} is not a whole job id or node:\n{out}"


def test_every_readme_command_is_run_or_exempt() -> None:
    lines = readme_commands()
    assert len(lines) >= 30, lines
    missing = [line for line in lines if line not in RUNS and line not in EXEMPT]
    assert not missing, f"README commands neither run nor exempted here (add them to RUNS or EXEMPT): {missing}"
    stale = [line for line in [*RUNS, *EXEMPT] if line not in lines]
    assert not stale, f"no longer in README's CLI reference (update RUNS / EXEMPT): {stale}"
    assert not set(RUNS) & set(EXEMPT)


def test_readme_parser_joins_continuations_and_drops_comments() -> None:
    text = ("intro\n## CLI reference\n```sh\ngpulens a --x \\\n    --y   # note\n"
            "    # a comment line\ngpulens b\n```\n## Next\n```sh\ngpulens c\n```\n")
    assert readme_commands(text) == ["gpulens a --x --y", "gpulens b"]


@pytest.mark.parametrize("line", sorted(RUNS))
def test_readme_command(line: str, demo_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        capfd: pytest.CaptureFixture[str]) -> None:
    store = demo_store
    if any(run.own_store for run in RUNS[line]):
        store = tmp_path / "data"
        shutil.copytree(demo_store, store, ignore=shutil.ignore_patterns("*.lock"))
    values = _values(store, tmp_path)
    known = set(values.pop("known").splitlines()) | {"sim-fake0"}
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("GPULENS_DATA_DIR", str(store))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GPULENS_DEBUG", raising=False)
    for run in RUNS[line]:
        args = shlex.split(run.args.format(**values))
        if args[0] != "--data-dir":
            args = ["--data-dir", str(store), *args]
        modes = [False, True] if run.json else [False]
        for as_json in modes:
            argv = [*args[:args.index("--")], "--json", *args[args.index("--"):]] if as_json and "--" in args \
                else [*args, "--json"] if as_json else args
            code, out, err = _invoke(argv, capfd)
            where = f"gpulens {shlex.join(argv)} (exit {code})"
            assert "Traceback" not in out + err, f"{where}:\n{err}"
            assert code in run.codes, f"{where}: expected exit {sorted(run.codes)}\nstdout:\n{out}\nstderr:\n{err}"
            if code == 2:
                assert err.strip().count("\n") == 0, f"{where}: more than one line on stderr:\n{err}"
                assert err.strip().startswith(("gpulens: error:", "Error:")), where
            if as_json and code != 2:
                _check_json(out, run.json, where)
            else:
                _check_whole(out, known, where)


def _check_json(out: str, kind: str | None, where: str) -> Any:
    try:
        doc = json.loads(out)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"{where}: stdout is not one JSON document ({exc}):\n{out[:2000]}") from None
    assert isinstance(doc, list if kind == LIST else dict), f"{where}: expected a JSON {kind}"
    return doc


def test_text_names_what_an_operator_acts_on(demo_store: Path, monkeypatch: pytest.MonkeyPatch,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    """blacklist list: every entry with all its evidence jobs; diagnose --job: the suspect
    inputs and the evidence lines; an unknown job points to the command that lists jobs."""
    monkeypatch.setenv("COLUMNS", "80")
    base = ["--data-dir", str(demo_store)]
    _, out, _ = _invoke([*base, "blacklist", "list", "--json"], capfd)
    entries = json.loads(out)
    assert any(len(e["evidence_jobs"]) > 1 for e in entries)  # what crashed the text output
    code, text, _ = _invoke([*base, "blacklist", "list"], capfd)
    assert code == 0
    for e in entries:
        assert e["input"] in text and all(j in text for j in e["evidence_jobs"])
    job = _values(demo_store, demo_store.parent)["job"]
    code, text, _ = _invoke([*base, "diagnose", "--job", job], capfd)
    assert code == 0 and "suspect input(s)" in text and "evidence (log lines):" in text
    code, _, err = _invoke([*base, "diagnose", "--job", "sim-999999"], capfd)
    assert code == 2 and "gpulens analyze jobs --status failed" in err
    code, out, _ = _invoke([*base, "analyze", "jobs", "--status", "failed", "--json"], capfd)
    rows = json.loads(out)
    assert rows and {r["status"] for r in rows} == {"failed"} and job in {r["job_id"] for r in rows}
    assert all(r["failure_origin"] for r in rows if r["failure_category"])


def test_internal_error_is_one_line_and_exit_70(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    import click

    from gpulens.cli import main as entry

    @click.command("boom")
    def boom() -> None:
        raise ValueError("The truth value of an array with more than one element is ambiguous.")

    monkeypatch.setitem(entry.COMMANDS, "boom", (lambda: boom, "fails on purpose"))
    monkeypatch.delenv("GPULENS_DEBUG", raising=False)
    code, out, err = _invoke(["--data-dir", str(tmp_path), "boom"], capfd)
    assert code == entry.EXIT_INTERNAL == 70 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("gpulens: internal error: ValueError") and "--debug" in err
    code, _, err = _invoke(["--data-dir", str(tmp_path), "--debug", "boom"], capfd)
    assert code == 70 and "Traceback" in err


def test_help_lists_every_importer_the_json_rule_and_the_system_config(
        capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _invoke(["--help"], capfd)
    assert code == 0
    flat = " ".join(out.split())
    for name in ("Philly", "Slurm", "Kubernetes", "Prometheus", "metric curves"):
        assert name in flat
    assert "/etc/gpulens/gpulens.toml" in flat and "exactly one JSON document" in flat


def test_terminal_tables_wrap_and_wide_keeps_rows_whole(demo_store: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capfd: pytest.CaptureFixture[str]) -> None:
    """On an 80-column terminal a table folds long values inside its width (nothing cut, no
    ellipsis); `--wide` prints it as wide as its widest row, every id on one line."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: stdout is a terminal
    base = ["-q", "--data-dir", str(demo_store)]
    _, out, _ = _invoke([*base, "analyze", "jobs", "--limit", "5", "--json"], capfd)
    ids = [r["job_id"] for r in json.loads(out)[:5]]
    ansi = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
    code, out, _ = _invoke([*base, "analyze", "jobs", "--limit", "5"], capfd)
    text = ansi.sub("", out)
    assert code == 0 and "\u2026" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    first_col = "".join(line.split("\u2502")[1].strip() for line in text.splitlines() if line.count("\u2502") > 2)
    assert all(i in first_col for i in ids)  # folded over lines, but whole
    code, out, _ = _invoke([*base, "--wide", "analyze", "jobs", "--limit", "5"], capfd)
    text = ansi.sub("", out)
    assert code == 0 and max(len(line) for line in text.splitlines()) > 80
    assert all(re.search(rf"\u2502 {i} +\u2502", text) for i in ids)


def test_validate_names_the_interpreter(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A static-only pass exits 0; an import the job's Python lacks names that Python and says
    to validate from the job's own environment."""
    (tmp_path / "fine.py").write_text(FINE)
    (tmp_path / "needs.py").write_text("import not_installed_xyz_27\n")
    base = ["-q", "--data-dir", str(tmp_path / "data"), "validate", "--static-only", "--no-record",
            "--workdir", str(tmp_path), "--"]
    code, out, _ = _invoke([*base, sys.executable, "fine.py"], capfd)
    assert code == 0 and out.startswith("PASS") and f"python:   {sys.executable}" in out
    code, out, _ = _invoke([*base, sys.executable, "needs.py"], capfd)
    assert code == 1 and "import_error" in out
    assert f"the job ran with {sys.executable}" in out and "activate it" in out
