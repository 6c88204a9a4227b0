"""A feature used without its extra says which extra to install (exit 2, one line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.errors import MissingExtraError
from gpulens.extras import require

ROOT = Path(__file__).resolve().parents[2]


def test_require_names_the_extra() -> None:
    with pytest.raises(MissingExtraError) as err:
        require("gpulens_no_such_module", extra="ml")
    assert "pip install 'gpulens[ml]'" in str(err.value)


def _without(module: str, *argv: str, data: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        f"sys.modules[{module!r}] = None  # this interpreter has no {module}\n"
        "from gpulens.cli.main import main\n"
        f"main(['--data-dir', {str(data)!r}, *{list(argv)!r}])\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


@pytest.mark.parametrize(
    ("module", "argv", "extra"),
    [
        ("streamlit", ["dashboard", "--port", "0"], "dashboard"),
        ("sklearn", ["nodes", "anomalies"], "ml"),
        ("pynvml", ["collect", "--once", "--backend", "nvml", "--no-store"], "gpu"),
        ("pyspark", ["analyze", "utilization", "--engine", "spark"], "spark"),
    ],
)
@pytest.mark.slow
def test_missing_extra_is_one_clear_line(tmp_path: Path, module: str, argv: list[str],
                                         extra: str) -> None:
    r = _without(module, *argv, data=tmp_path / "d")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"gpulens[{extra}]" in r.stderr
    assert "Traceback" not in r.stderr
