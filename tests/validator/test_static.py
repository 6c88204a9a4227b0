"""Static checks: broken jobs fail in seconds, before any of their code runs."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpulens.config import ValidateConfig
from gpulens.errors import InputError
from gpulens.store import Store
from gpulens.validator import JobSpec, load_job_spec, validate
from gpulens.validator.static import entry_point, job_python_files


def test_syntax_error_fails_with_file_and_line(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    t0 = time.monotonic()
    result = validate(make_job("syntax_error.py.txt"), config, None)
    assert (result.verdict, result.category, result.origin) == ("fail", "syntax_error", "user")
    assert result.stage == "static" and result.steps_completed == 0
    assert any("train.py:35:" in line and "SyntaxError" in line for line in result.evidence), result.evidence
    assert time.monotonic() - t0 < 10  # torch was never started


def test_syntax_error_in_a_lazily_imported_helper_is_found_too(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    spec = make_job("healthy")
    (spec.run_dir / "utils").mkdir()
    (spec.run_dir / "utils" / "augment.py").write_text("def f(x):\n    return x +\n")
    with open(spec.run_dir / "train.py", "a") as fh:  # imported only when augment() is called
        fh.write("\n\ndef augment(x):\n    from utils.augment import f\n\n    return f(x)\n")
    result = validate(spec, config, None)
    assert result.category == "syntax_error" and result.stage == "static"
    assert any("augment.py:2" in line for line in result.evidence)


def test_missing_module_fails_as_import_error(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    result = validate(make_job("missing_module"), config, None)
    assert (result.verdict, result.category) == ("fail", "import_error")
    assert any("apex" in line and "train.py:9" in line for line in result.evidence), result.evidence
    assert result.python and sys.executable in result.python


def test_missing_local_module_is_found_without_importing_the_package(tmp_path: Path, config: ValidateConfig) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("raise SystemExit('package code must not run')\n")
    (tmp_path / "mypkg" / "models.py").write_text("X = 1\n")
    (tmp_path / "ok.py").write_text("import mypkg.models\nfrom mypkg import models\nprint('ok')\n")
    (tmp_path / "bad.py").write_text("from mypkg.modelz import X\n")
    (tmp_path / "opt.py").write_text("try:\n    import not_installed_xyz\nexcept ImportError:\n    pass\n")
    cfg = config
    ok = validate(JobSpec([sys.executable, "ok.py"], workdir=tmp_path), cfg, None, static_only=True)
    assert ok.verdict == "pass" and ok.category is None and ok.exit_status == 0  # static only
    assert ok.stage == "static" and ok.steps_completed == 0
    bad = validate(JobSpec([sys.executable, "bad.py"], workdir=tmp_path), cfg, None, static_only=True)
    assert bad.category == "import_error" and "mypkg.modelz" in bad.evidence[0]
    opt = validate(JobSpec([sys.executable, "opt.py"], workdir=tmp_path), cfg, None, static_only=True)
    assert opt.category is None  # optional imports in try blocks are not required


def test_missing_data_file_fails_as_incorrect_input(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    result = validate(make_job("healthy", data=False), config, None)
    assert (result.verdict, result.category, result.origin) == ("fail", "incorrect_input", "data")
    assert "does not exist" in result.evidence[0]


def test_empty_data_file_fails_as_incorrect_input(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    spec = make_job("healthy", data=False)
    (spec.run_dir / "digits.csv.gz").write_bytes(b"")
    result = validate(spec, config, None)
    assert result.category == "incorrect_input" and "empty" in result.evidence[0]


@pytest.mark.slow
def test_blacklisted_input_fails_from_the_store(make_job: Callable[..., JobSpec], config: ValidateConfig, store: Store) -> None:
    spec = make_job("healthy")
    path = str(spec.run_dir / "digits.csv.gz")
    with store.write() as con:
        con.execute(
            "INSERT INTO blacklist (input, state, reason, evidence_jobs, updated_at)"
            " VALUES (?, 'blacklisted', 'corrupt shard, failed 3 jobs', ['j1', 'j2', 'j3'], now())",
            [path],
        )
    result = validate(spec, config, store)
    assert (result.verdict, result.category, result.origin) == ("fail", "incorrect_input", "data")
    assert "corrupt shard" in result.evidence[0]
    assert "blacklist" in result.checks
    # a suspected (not blacklisted) input does not fail the static checks
    with store.write() as con:
        con.execute("UPDATE blacklist SET state = 'suspected' WHERE input = ?", [path])
    again = validate(spec, config, store, static_only=True)
    assert again.category is None
    rows = store.connect().execute("SELECT verdict, category FROM validations ORDER BY id").fetchall()
    assert rows == [("fail", "incorrect_input"), ("pass", None)]


def test_unwritable_checkpoint_dir_fails_as_checkpoint_error(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    spec = make_job("healthy")
    (spec.run_dir / "shared").write_text("a file where a directory is expected\n")
    spec.output_dir = "shared/ckpt"
    result = validate(spec, config, None)
    assert (result.verdict, result.category, result.origin) == ("fail", "checkpoint_error", "user")
    assert "shared/ckpt" in (result.reason or "")


def test_output_dir_probe_leaves_nothing_behind(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    spec = make_job("healthy")
    spec.output_dir = "runs/exp1/ckpt"
    result = validate(spec, config, None, static_only=True)
    assert result.category is None and "output_dir" in result.checks
    assert not (spec.run_dir / "runs").exists()


def test_request_sanity_is_a_usage_error(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    spec = make_job("healthy")
    spec.gpu_type = "Z9000"
    with pytest.raises(InputError, match="Z9000"):
        validate(spec, config, None)
    spec.gpu_type = "a100"
    spec.gpus = config.max_gpus + 1
    with pytest.raises(InputError, match="limit"):
        validate(spec, config, None)


def test_entry_point_understands_common_launchers(tmp_path: Path) -> None:
    env = {"PATH": str(Path(sys.executable).parent)}
    e = entry_point([sys.executable, "-u", "-X", "dev", "train.py", "--lr", "1"], env, tmp_path)
    assert e.script == tmp_path / "train.py" and e.interpreter
    assert entry_point(["python3", "-m", "pkg.train"], env, tmp_path).module == "pkg.train"
    (tmp_path / "bin").mkdir()
    launcher = tmp_path / "bin" / "torchrun"  # installed outside the job directory
    launcher.write_text(f"#!{sys.executable}\nimport sys\n")
    launcher.chmod(0o755)
    job = tmp_path / "job"
    job.mkdir()
    e = entry_point([str(launcher), "--nproc-per-node", "8", "train.py"], env, job)
    assert e.interpreter == sys.executable and e.script == job / "train.py"
    own = job / "train2.py"  # the user's own executable script with a python shebang
    own.write_text(f"#!{sys.executable}\nprint(1)\n")
    own.chmod(0o755)
    assert entry_point(["./train2.py"], env, job).script == own
    assert entry_point(["bash", "run.sh"], env, tmp_path).interpreter is None


def test_job_python_files_skips_virtualenvs_and_caches(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "x.py").write_text("")
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "pyvenv.cfg").write_text("")
    (tmp_path / "env" / "y.py").write_text("")
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "m.py").write_text("")
    files, truncated = job_python_files(tmp_path)
    assert sorted(p.name for p in files) == ["a.py", "m.py"] and not truncated


def test_job_spec_yaml_and_json(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        "command: python train.py --lr 0.1\nworkdir: sub\nenv: {SEED: 1}\n"
        "inputs: [data/a.csv]\noutput_dir: ckpt\ngpus: 4\ngpu_type: A100\n"
    )
    spec = load_job_spec(tmp_path / "job.yaml")
    assert spec.command == ["python", "train.py", "--lr", "0.1"]
    assert spec.workdir == tmp_path / "sub" and spec.env == {"SEED": "1"}
    assert (spec.inputs, spec.output_dir, spec.gpus, spec.gpu_type) == (["data/a.csv"], "ckpt", 4, "A100")
    (tmp_path / "job.json").write_text(json.dumps({"command": ["python", "x.py"], "gpus": 1}))
    assert load_job_spec(tmp_path / "job.json").command == ["python", "x.py"]
    (tmp_path / "bad.yaml").write_text("command: [python\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_job_spec(tmp_path / "bad.yaml")
    (tmp_path / "bad2.yaml").write_text("command: python x.py\ngpus: many\n")
    with pytest.raises(InputError, match="'gpus'"):
        load_job_spec(tmp_path / "bad2.yaml")
    (tmp_path / "bad3.yaml").write_text("comand: python x.py\n")
    with pytest.raises(InputError, match="unknown field"):
        load_job_spec(tmp_path / "bad3.yaml")
