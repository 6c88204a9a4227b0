from __future__ import annotations

import configparser
from pathlib import Path

import yaml

from gpulens.cli.collect import collect

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _options() -> set[str]:
    return {o for p in collect.params for o in getattr(p, "opts", [])}


def test_daemonset_host_pid_read_only_proc_sys_and_known_flags() -> None:
    ds = yaml.safe_load((DEPLOY / "daemonset.yaml").read_text())
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and spec["hostNetwork"] is True
    c = spec["containers"][0]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/host/proc"]["readOnly"] is True and mounts["/host/sys"]["readOnly"] is True
    assert c["args"][0] == "collect"
    flags = [a for a in c["args"] if a.startswith("--")]
    assert flags and set(flags) <= _options()
    assert spec["terminationGracePeriodSeconds"] >= 30


def test_systemd_unit_runs_collect_and_stops_with_sigterm() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((DEPLOY / "gpulens-agent.service").read_text())
    assert unit["Service"]["ExecStart"].endswith("gpulens collect")
    assert unit["Service"]["KillSignal"] == "SIGTERM"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
