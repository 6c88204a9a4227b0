"""`pip install .` puts one top-level package into site-packages: gpulens (issue 11)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_installs_only_gpulens(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("gpulens-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"gpulens"}
    # the parts, their data files and the validator's start-up hook are all inside it
    for part in ("collectors", "ingest", "analysis", "diagnosis", "validator", "exporters",
                 "dashboard", "cli", "store"):
        assert f"gpulens/{part}/__init__.py" in names, part
    assert "gpulens/diagnosis/rules/signatures.yaml" in names
    assert "gpulens/validator/bootstrap/sitecustomize.py" in names
    assert any(n.startswith("gpulens/store/migrations/") and n.endswith(".sql") for n in names)
