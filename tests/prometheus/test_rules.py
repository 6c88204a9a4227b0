"""The alert and recording rules: promtool check/test, and the conventions every alert follows."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_tool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
ALERTS = RULES / "gpulens-alerts.yml"
RECORDING = RULES / "gpulens-recording.yml"
UNIT_TESTS = sorted((RULES / "tests").glob("*.test.yml"))


def _alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def _recording_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RECORDING.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def test_promtool_check_rules() -> None:
    promtool = require_tool("promtool")
    out = subprocess.run(
        [promtool, "check", "rules", str(RECORDING), str(ALERTS)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    n_alerts = len(_alert_rules())
    assert f"SUCCESS: {n_alerts} rules found" in out.stdout


@pytest.mark.slow
def test_promtool_unit_tests_pass() -> None:
    promtool = require_tool("promtool")
    assert UNIT_TESTS, "no promtool unit tests under rules/tests/"
    out = subprocess.run(
        [promtool, "test", "rules", *map(str, UNIT_TESTS)],
        capture_output=True, text=True, timeout=120, cwd=RULES / "tests",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_alert_list_covers_the_issue() -> None:
    names = {r["alert"] for r in _alert_rules()}
    wanted = {
        "GpulensJobGpusIdle", "GpulensJobSpreadLowUtilization", "GpulensGpuMemoryNearFull",
        "GpulensGpuXidHardware", "GpulensGpuXidApplication", "GpulensGpuXidOther",
        "GpulensGpuEccUncorrectable", "GpulensGpuRowRemapFailure", "GpulensGpuPcieReplaysRising",
        "GpulensNicErrorRatioHigh", "GpulensInfinibandSymbolErrors", "GpulensInfinibandLinkDowned",
        "GpulensAgentDown", "GpulensAgentSamplesStale", "GpulensFailureRateRising",
        "GpulensBlacklistedInputUsed", "GpulensNodeAnomalyScoreHigh", "GpulensNodeFlaggedBad",
    }
    assert wanted <= names, wanted - names


@pytest.mark.parametrize("rule", _alert_rules(), ids=lambda r: r["alert"])
def test_alert_conventions(rule: dict[str, Any]) -> None:
    name = rule["alert"]
    assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), f"{name}: needs a for: duration"
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    ann = rule["annotations"]
    for key in ("summary", "description"):
        assert "{{ $labels." in ann[key], f"{name}: {key} must use label values"
    assert ann["runbook_url"] == f"docs/runbooks/{name}.md"
    runbook = ROOT / ann["runbook_url"]
    assert runbook.is_file(), f"missing runbook {runbook}"
    text = runbook.read_text()
    for heading in ("## What it means", "## How to confirm", "## What to do"):
        assert heading in text, f"{runbook.name}: missing {heading!r}"


def test_every_alert_has_firing_and_quiet_unit_tests() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        doc = yaml.safe_load(path.read_text())
        for group in doc["tests"]:
            for case in group.get("alert_rule_test", []):
                if case.get("exp_alerts"):
                    firing.add(case["alertname"])
                    for alert in case["exp_alerts"]:  # annotations are checked, not just labels
                        assert set(alert["exp_annotations"]) >= {"summary", "description", "runbook_url"}
                        assert "severity" in alert["exp_labels"]
                else:
                    quiet.add(case["alertname"])
    names = {r["alert"] for r in _alert_rules()}
    assert names - firing == set(), f"alerts without a firing test: {names - firing}"
    assert names - quiet == set(), f"alerts without a not-firing test: {names - quiet}"


def test_recording_rules_follow_naming_convention() -> None:
    for rule in _recording_rules():
        assert re.fullmatch(r"[a-z_]+:gpulens_[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]


#: Node agent metric names from the cross-team contract (collectors issue).
AGENT_METRICS = frozenset("""
gpulens_gpu_utilization_ratio gpulens_gpu_memory_utilization_ratio gpulens_gpu_memory_used_bytes
gpulens_gpu_memory_total_bytes gpulens_gpu_pcie_transmit_bytes_total gpulens_gpu_pcie_receive_bytes_total
gpulens_gpu_pcie_replay_errors_total gpulens_gpu_power_watts gpulens_gpu_energy_joules_total
gpulens_gpu_temperature_celsius gpulens_gpu_sm_clock_hertz gpulens_gpu_ecc_errors_total
gpulens_gpu_row_remap_failure gpulens_gpu_xid_errors_total gpulens_gpu_job_info
gpulens_job_gpu_utilization_ratio gpulens_job_gpu_memory_used_bytes
gpulens_network_receive_bytes_total gpulens_network_transmit_bytes_total
gpulens_network_receive_packets_total gpulens_network_transmit_packets_total
gpulens_network_receive_errors_total gpulens_network_transmit_errors_total
gpulens_network_receive_drops_total gpulens_network_transmit_drops_total
gpulens_infiniband_symbol_errors_total gpulens_infiniband_link_downed_total
gpulens_agent_last_sample_timestamp_seconds gpulens_agent_sample_duration_seconds
gpulens_agent_errors_total gpulens_agent_dropped_samples_total gpulens_agent_store_writable
gpulens_agent_gpu_backend_info
""".split())


def known_metric_names() -> set[str]:
    from gpulens.exporters.cluster import METRIC_NAMES

    return set(AGENT_METRICS) | set(METRIC_NAMES) | {r["record"] for r in _recording_rules()}


def referenced_metric_names(text: str) -> set[str]:
    """Metric names (raw and recorded) used in PromQL text."""
    pattern = r"\b[a-z_]+:gpulens_[a-z0-9_]+:[a-z0-9_]+"
    recorded = set(re.findall(pattern, text))
    raw = set(re.findall(r"\bgpulens_[a-z0-9_]+", re.sub(pattern, " ", text)))
    return raw | recorded


def test_rules_reference_only_existing_metrics() -> None:
    exprs = "\n".join(r["expr"] for r in _alert_rules() + _recording_rules())
    unknown = referenced_metric_names(exprs) - known_metric_names()
    assert not unknown, f"rules use metrics nobody exports: {sorted(unknown)}"
