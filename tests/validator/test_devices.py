"""Picking the cheap validation GPU and projecting memory onto the requested type."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpulens.config import ValidateConfig
from gpulens.validator import GpuCandidate, JobSpec, pick_device, project_memory, validate
from gpulens.validator.devices import candidates_from_backend, gpu_type_of, parse_pool

GIB = 1024**3
TYPES = ValidateConfig().gpu_types


def test_cheapest_idle_gpu_of_the_pool_wins() -> None:
    gpus = [
        GpuCandidate(0, "NVIDIA H100 80GB HBM3", 80 * GIB, utilization=0.0),
        GpuCandidate(1, "Tesla V100-SXM2-32GB", 32 * GIB, utilization=0.0),
        GpuCandidate(2, "Tesla T4", 16 * GIB, utilization=97.0),  # busy
        GpuCandidate(3, "Tesla T4", 16 * GIB, utilization=1.0, processes=1),  # someone's process
        GpuCandidate(4, "NVIDIA A100-SXM4-80GB", 80 * GIB, utilization=0.0, price_per_hour=0.1),
    ]
    assert pick_device(gpus, gpu_types=TYPES).index == 4  # its own price beats the table
    assert pick_device(gpus[:4], gpu_types=TYPES).index == 1  # V100 2.5/h < H100 6/h
    assert pick_device(gpus[:4], gpu_types=TYPES, pool={0}).index == 0
    assert pick_device(gpus[2:4], gpu_types=TYPES) is None  # nothing idle: run on CPU


def test_without_prices_smallest_memory_then_oldest_model() -> None:
    gpus = [
        GpuCandidate(0, "NVIDIA A40", 48 * GIB),
        GpuCandidate(1, "NVIDIA L4", 24 * GIB),
        GpuCandidate(2, "NVIDIA A10", 24 * GIB),
        GpuCandidate(3, "Tesla P100-PCIE-16GB", 16 * GIB, memory_used_bytes=2 * GIB),  # not idle
    ]
    assert pick_device(gpus, gpu_types={}).index == 2  # 24 GiB, and A10 is older than L4


def test_model_names_map_to_configured_types() -> None:
    assert gpu_type_of("NVIDIA A100-SXM4-80GB", TYPES) == "A100"
    assert gpu_type_of("NVIDIA H100 80GB HBM3", TYPES) == "H100"
    assert gpu_type_of("Tesla T4", TYPES) == "T4"
    assert gpu_type_of("NVIDIA GeForce RTX 4090", TYPES) is None
    assert parse_pool("0, 2-4") == {0, 2, 3, 4} and parse_pool("") is None


def test_memory_projection_rules() -> None:
    common = {"target_type": "T4", "target_memory_bytes": 16 * GIB}
    p = project_memory(**common, device_memory_bytes=80 * GIB, peak_gpu_bytes=20 * GIB, lower_bound_bytes=None, oom_on_device=False)
    assert (p.verdict, p.category) == ("fail", "gpu_oom") and "predicted" in p.message
    p = project_memory(**common, device_memory_bytes=80 * GIB, peak_gpu_bytes=10 * GIB, lower_bound_bytes=None, oom_on_device=False)
    assert p.verdict is None
    # the cheap GPU ran out, but the requested A100 is larger: not a failure of the job
    p = project_memory(target_type="A100", target_memory_bytes=80 * GIB, device_memory_bytes=16 * GIB, peak_gpu_bytes=None, lower_bound_bytes=None, oom_on_device=True)
    assert (p.verdict, p.category) == ("inconclusive", "gpu_oom")
    p = project_memory(**common, device_memory_bytes=16 * GIB, peak_gpu_bytes=None, lower_bound_bytes=None, oom_on_device=True)
    assert (p.verdict, p.category) == ("fail", "gpu_oom")
    # on CPU: weights + grads + optimizer state are a lower bound of GPU memory
    p = project_memory(**common, device_memory_bytes=None, peak_gpu_bytes=None, lower_bound_bytes=40 * GIB, oom_on_device=False)
    assert (p.verdict, p.category) == ("fail", "gpu_oom")
    p = project_memory(**common, device_memory_bytes=None, peak_gpu_bytes=None, lower_bound_bytes=GIB, oom_on_device=False)
    assert p.verdict is None and "not measured" in p.message


def _scenario(tmp_path: Path) -> Path:
    scenario = {
        "devices": [
            {"index": 0, "uuid": "GPU-h100", "model": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 80 * GIB, "values": {"util_gpu": 0, "mem_used_bytes": 0}},
            {"index": 1, "uuid": "GPU-t4-busy", "model": "Tesla T4", "memory_total_bytes": 16 * GIB, "values": {"util_gpu": 95, "mem_used_bytes": 8 * GIB}},
            {"index": 2, "uuid": "GPU-t4-idle", "model": "Tesla T4", "memory_total_bytes": 16 * GIB, "values": {"util_gpu": 0, "mem_used_bytes": 0}},
        ]
    }
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(scenario))
    return path


def test_fake_backend_candidates_and_cuda_visible_devices(tmp_path: Path) -> None:
    from gpulens.collectors.gpu.fake import FakeBackend, load_scenario

    scenario = _scenario(tmp_path)
    found = candidates_from_backend(FakeBackend(load_scenario(scenario)))
    assert [c.index for c in found] == [0, 1, 2]
    assert found[1].utilization == 95 and found[2].uuid == "GPU-t4-idle"
    job = tmp_path / "job"
    job.mkdir()
    (job / "show.py").write_text("import os\nprint('CVD=' + os.environ['CUDA_VISIBLE_DEVICES'])\n")
    cfg = ValidateConfig(backend="fake", fake_scenario=str(scenario), timeout=60)
    out: list[bytes] = []
    result = validate(JobSpec([sys.executable, "show.py"], workdir=job), cfg, None, echo=out.append)
    assert result.verdict == "pass" and result.device == "cuda:2 (Tesla T4)"
    assert b"CVD=GPU-t4-idle" in b"".join(out)
    cfg.pool = "0"
    result = validate(JobSpec([sys.executable, "show.py"], workdir=job), cfg, None)
    assert result.device.startswith("cuda:0")


def test_no_gpu_runs_on_cpu_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text("import os\nassert os.environ['CUDA_VISIBLE_DEVICES'] == ''\n")
    result = validate(JobSpec([sys.executable, "show.py"], workdir=tmp_path), ValidateConfig(backend="none"), None)
    assert result.verdict == "pass" and result.device.startswith("cpu")
    assert any("running on CPU" in w for w in result.warnings)
