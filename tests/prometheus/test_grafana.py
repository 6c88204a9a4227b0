"""The Grafana dashboard: well-formed JSON whose queries are valid PromQL over metrics that exist."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import require_tool
from tests.prometheus.test_rules import known_metric_names, referenced_metric_names

DASHBOARD = Path(__file__).resolve().parents[2] / "rules" / "grafana" / "gpulens.json"


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def queries(doc: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def concrete(expr: str) -> str:
    """Replace dashboard variables so that the query is plain PromQL."""
    return re.sub(r"\$\{?(node|vc)\}?", ".*", expr)


def test_dashboard_structure() -> None:
    doc = load()
    assert doc["title"] and doc["uid"] == "gpulens-overview"
    assert isinstance(doc["schemaVersion"], int)
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    data_panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len(data_panels) >= 20
    for p in data_panels:
        assert p["targets"], f"panel {p['title']!r} has no query"
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "node", "vc"} <= variables


def test_dashboard_uses_only_existing_metrics() -> None:
    doc = load()
    text = "\n".join(queries(doc) + [v.get("definition", "") for v in doc["templating"]["list"]])
    used = referenced_metric_names(text)
    unknown = used - known_metric_names()
    assert not unknown, f"dashboard uses metrics nobody exports: {sorted(unknown)}"
    # the dashboard shows both sources: agents and the cluster exporter
    assert any(n.startswith("gpulens_gpu_") for n in used)
    assert any(n.startswith("gpulens_cluster_") for n in used)


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}:check", "expr": concrete(e)}
        for i, e in enumerate(queries(load()))]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
