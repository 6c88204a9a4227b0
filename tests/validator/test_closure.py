"""Import-closure static checks on a repository-shaped fixture (tests/validator/repo/).

The fixture is a small training repo: an entry script importing a package with
relative imports, a lazy import inside a function, an import inside a loop, a
``importlib.import_module("literal")``, an ``if __name__ == "__main__":`` import,
an ``if TYPE_CHECKING:`` import, an ``exec(open("config_exec.py").read())``, a ``-m``
entry point, and stale files nothing imports. Each test copies it and breaks one file.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpulens.config import ValidateConfig
from gpulens.validator import JobSpec, validate
from gpulens.validator.static import run_static_checks
from tests.conftest import require_module

REPO = Path(__file__).resolve().parent / "repo"
BROKEN = "def broken(:\n    pass\n"

CLOSURE = {
    "train.py", "cli.py", "models/__init__.py", "models/net.py", "models/layers.py",
    "models/blocks/__init__.py", "models/blocks/attention.py", "utils/__init__.py",
    "utils/metrics.py", "utils/helpers.py", "plugins/__init__.py", "plugins/schedule.py",
    "config_exec.py",
}  # fmt: skip
OUTSIDE = ["scripts/old_experiment.py", "tools/export.py", "utils/unused.py", "tools/typing_only.py"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(REPO, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _static(repo: Path, config: ValidateConfig, command: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return validate(JobSpec(command, workdir=repo, env=env or {}), config, None, static_only=True, record=False)


def test_closure_is_the_entry_and_everything_it_imports(repo: Path, config: ValidateConfig) -> None:
    spec = JobSpec([sys.executable, "train.py"], workdir=repo)
    report = run_static_checks(spec, config, env=dict(os.environ))
    got = {str(Path(f).relative_to(repo)) for f in report.closure}
    assert got == CLOSURE
    assert report.ok and not report.warnings


@pytest.mark.parametrize("stale", OUTSIDE)
def test_a_broken_file_outside_the_closure_is_a_warning(repo: Path, config: ValidateConfig, stale: str) -> None:
    (repo / stale).write_text(BROKEN)
    result = _static(repo, config, [sys.executable, "train.py"])
    assert result.category is None and result.verdict == "pass"  # static checks passed
    assert any(stale in w and "SyntaxError" in w and "not imported" in w for w in result.warnings), result.warnings


@pytest.mark.parametrize(
    "module",
    [
        "utils/metrics.py",  # lazy: imported inside a function
        "utils/helpers.py",  # importlib.import_module("utils.helpers") inside a function
        "plugins/schedule.py",  # imported inside a loop
        "cli.py",  # imported under if __name__ == "__main__"
        "models/blocks/attention.py",  # reached through relative imports of a package
        "models/__init__.py",  # a package's __init__ runs on import
        "config_exec.py",  # exec(open("config_exec.py").read())
    ],
)
def test_a_broken_module_on_the_import_path_fails_before_the_dry_run(
    repo: Path, config: ValidateConfig, module: str
) -> None:
    (repo / module).write_text(BROKEN)
    result = _static(repo, config, [sys.executable, "train.py"])
    assert (result.verdict, result.category, result.stage) == ("fail", "syntax_error", "static")
    assert any(f"{module}:1:" in line for line in result.evidence), result.evidence
    assert any(line.startswith("imported via") for line in result.evidence), result.evidence
    assert result.fix and "file:line" in result.fix


def test_module_entry_point_follows_its_own_package(repo: Path, config: ValidateConfig) -> None:
    (repo / "train.py").write_text(BROKEN)  # another entry point: not this job's
    ok = _static(repo, config, [sys.executable, "-m", "launch_pkg.train"])
    assert ok.category is None and any("train.py:1" in w for w in ok.warnings)
    (repo / "launch_pkg" / "config.py").write_text(BROKEN)  # `from .config import STEPS`
    bad = _static(repo, config, [sys.executable, "-m", "launch_pkg.train"])
    assert bad.category == "syntax_error" and any("config.py:1:" in e for e in bad.evidence)


def _fake_launcher(bin_dir: Path, name: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(0)\n")
    path.chmod(0o755)


@pytest.mark.parametrize(
    "launcher",
    [
        ["torchrun", "--standalone", "--nproc-per-node", "2", "train.py", "--steps", "1"],
        ["accelerate", "launch", "--num_processes", "2", "train.py"],
        ["deepspeed", "--num_gpus", "2", "train.py", "--deepspeed_config", "ds.json"],
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"],
    ],
    ids=["torchrun", "accelerate", "deepspeed", "python-m-torch.distributed.run"],
)
def test_launcher_wrapped_scripts_get_the_same_closure(
    repo: Path, tmp_path: Path, config: ValidateConfig, launcher: list[str]
) -> None:
    bin_dir = tmp_path / "bin"
    for name in ("torchrun", "accelerate", "deepspeed"):
        _fake_launcher(bin_dir, name)  # stand-ins with a python shebang, as installed launchers are
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    (repo / "scripts" / "old_experiment.py").write_text(BROKEN)
    ok = _static(repo, config, launcher, env)
    assert ok.category is None, ok.evidence
    (repo / "models" / "layers.py").write_text(BROKEN)
    bad = _static(repo, config, launcher, env)
    assert bad.category == "syntax_error" and any("layers.py:1:" in e for e in bad.evidence)


def test_missing_installed_module_fails_only_where_the_import_surely_runs(repo: Path, config: ValidateConfig) -> None:
    layers = repo / "models" / "layers.py"
    layers.write_text("def fast():\n    import not_installed_xyz\n    return not_installed_xyz\n")
    lazy = _static(repo, config, [sys.executable, "train.py"])
    assert lazy.category is None
    assert any("not_installed_xyz" in w and "may never run" in w for w in lazy.warnings), lazy.warnings
    layers.write_text("import not_installed_xyz\n")  # module level of an imported module
    bad = _static(repo, config, [sys.executable, "train.py"])
    assert bad.category == "import_error"
    assert any("layers.py:1" in e and "not_installed_xyz" in e for e in bad.evidence), bad.evidence


def test_unknown_entry_point_reports_broken_files_as_warnings(repo: Path, config: ValidateConfig) -> None:
    (repo / "run.sh").write_text('CMD="$1"\n$CMD --steps 1\n')  # nothing a static reader can follow
    (repo / "scripts" / "old_experiment.py").write_text(BROKEN)
    result = _static(repo, config, ["bash", "run.sh"])
    assert result.category is None
    assert any("old_experiment.py:1" in w and "entry point is unknown" in w for w in result.warnings)


@pytest.mark.parametrize(
    "command",
    [["bash", "run.sh"], ["./run.sh"], ["sh", "-c", f"cd . && {sys.executable} -u train.py --steps 1"]],
    ids=["bash-run.sh", "./run.sh", "sh-c"],
)
def test_shell_script_wrapping_python_gets_its_entry_points_closure(
    repo: Path, config: ValidateConfig, command: list[str]
) -> None:
    run = repo / "run.sh"
    run.write_text(
        "#!/bin/bash\nset -e\n# train the model\nexport OMP_NUM_THREADS=1\n"
        f"cd . && OMP_NUM_THREADS=1 {sys.executable} -u train.py \\\n    --steps 1\n"
    )
    run.chmod(0o755)
    (repo / "scripts" / "old_experiment.py").write_text(BROKEN)
    ok = _static(repo, config, command)
    where = "the -c command:1" if "-c" in command else "run.sh:5"
    assert ok.category is None and any(f"read from {where}" in w for w in ok.warnings), ok.warnings
    (repo / "utils" / "helpers.py").write_text(BROKEN)
    bad = _static(repo, config, command)
    assert bad.category == "syntax_error" and any("helpers.py:1:" in e for e in bad.evidence)


@pytest.mark.torch
def test_healthy_job_next_to_a_broken_script_passes_with_a_warning(
    make_job: Callable[..., JobSpec], config: ValidateConfig
) -> None:
    require_module("torch")
    spec = make_job("healthy")
    (spec.run_dir / "old_experiment.py").write_text(BROKEN)
    result = validate(spec, config, None, record=False)
    assert (result.verdict, result.steps_completed) == ("pass", 2), result
    assert any("old_experiment.py:1" in w for w in result.warnings), result.warnings


def test_installed_packages_inside_the_job_directory_are_not_its_code(repo: Path, config: ValidateConfig) -> None:
    site = repo / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "vendored").mkdir(parents=True)
    (site / "vendored" / "__init__.py").write_text(BROKEN)  # not ours to compile or follow
    (repo / "job2.py").write_text("import vendored\n")
    result = _static(repo, config, [sys.executable, "job2.py"], {"PYTHONPATH": str(site)})
    assert result.category is None, result.evidence
    spec = JobSpec([sys.executable, "job2.py"], workdir=repo, env={"PYTHONPATH": str(site)})
    report = run_static_checks(spec, config, env={**os.environ, "PYTHONPATH": str(site)})
    assert [Path(f).name for f in report.closure] == ["job2.py"]
