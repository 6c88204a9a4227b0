"""`diagnose --json` `inputs`: only what a data failure blames, never progress bars,
tracker run directories or launcher configs (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gpulens.cli.main import cli
from gpulens.diagnosis.logs import extract_inputs

ROOT = Path(__file__).resolve().parents[2]

#: tqdm as it lands in a log file: carriage-return updates joined on one line
TQDM = "".join(
    f"\rTokenizing: {p:3d}%|{'█' * (p // 10):<10}| {p * 0.30:.2f}kit/30.0kit [00:{p // 10:02d}<00:12, 2.20kit/s]"
    for p in range(0, 101, 5)
) + "\n"
WANDB = (
    "wandb: Currently logged in as: mlee (mlee-lab). Use `wandb login --relogin` to force relogin\n"
    "wandb: Tracking run with wandb version 0.16.3\n"
    "wandb: Run data is saved locally in /home/mlee/llama-ft/wandb/run-20240312_101502-3kd9x2ab\n"
    "wandb: Run `wandb offline` to turn off syncing.\n"
    "wandb: Syncing run fine-gorge-17\n"
)
DEEPSPEED = (
    "[2024-03-12 10:15:07,114] [INFO] [config.py:972:print] DeepSpeedEngine configuration:\n"
    "[2024-03-12 10:15:07,115] [INFO] [config.py:976:print]   deepspeed_config_path ........ "
    "/home/mlee/llama-ft/configs/ds_config_zero3.json\n"
    "[2024-03-12 10:15:07,116] [INFO] [engine.py:1104:_configure_optimizer] Using client Optimizer "
    "as basic optimizer\n"
    "Loading config from configs/ds_zero3_offload.yaml\n"
)
PREEMPTED = (
    WANDB + DEEPSPEED + TQDM * 3
    + "slurmstepd: error: *** JOB 4417812 ON gpu-a17 CANCELLED AT 2024-03-12T11:02:44 DUE TO "
    "PREEMPTION ***\n"
)
OOM = (
    WANDB + DEEPSPEED + TQDM
    + "Traceback (most recent call last):\n"
    '  File "/home/mlee/llama-ft/train.py", line 211, in <module>\n'
    "    engine.backward(loss)\n"
    '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1976, in backward\n'
    "    self.optimizer.backward(loss, retain_graph=retain_graph)\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB "
    "total capacity; 75.20 GiB already allocated; 1.41 GiB free)\n"
    "wandb: Waiting for W&B process to finish... (failed 1).\n"
    "wandb: Find logs at: /home/mlee/llama-ft/wandb/run-20240312_101502-3kd9x2ab/logs\n"
)
DATA = (
    WANDB + DEEPSPEED + TQDM
    + "Traceback (most recent call last):\n"
    '  File "/home/mlee/llama-ft/train.py", line 188, in <module>\n'
    "    for step, batch in enumerate(loader):\n"
    '  File "/home/mlee/llama-ft/data.py", line 77, in __getitem__\n'
    "    record = json.loads(self.lines[i])\n"
    "ValueError: corrupted record 1834 in /data/shared/c4/part-00017.jsonl: "
    "Unterminated string starting at: line 1 column 12 (char 11)\n"
    "wandb: Find logs at: /home/mlee/llama-ft/wandb/run-20240312_101502-3kd9x2ab/logs\n"
)


def _diagnose(tmp_path: Path, **logs: str) -> dict[str, dict[str, object]]:
    files = []
    for name, text in logs.items():
        path = tmp_path / f"{name}.log"
        path.write_text(text)
        files.append(str(path))
    res = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "nostore"), "diagnose", *files,
                                   "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    return {Path(str(r["file"])).stem: r for r in rows}


def test_only_data_failures_name_inputs(tmp_path: Path) -> None:
    got = _diagnose(tmp_path, preempted=PREEMPTED, oom=OOM, data=DATA)
    assert got["preempted"]["category"] == "preempted"
    assert got["preempted"]["inputs"] == [] and got["preempted"]["input_records"] == []
    assert got["oom"]["category"] == "gpu_oom"
    assert got["oom"]["inputs"] == []
    assert got["data"]["category"] == "incorrect_input"
    assert got["data"]["inputs"] == ["/data/shared/c4/part-00017.jsonl"]
    assert "record 1834" in got["data"]["input_records"]


def test_sample_logs_blame_the_file_in_the_failing_lines(tmp_path: Path) -> None:
    samples = ROOT / "sample_logs" / "incorrect_input"
    got = _diagnose(tmp_path, **{p.stem: p.read_text() for p in (
        samples / "bad_csv_02.log", samples / "bad_image_01.log",
        samples / "missing_data_file_01.log", samples / "corrupt_json_01.log")})
    assert got["bad_csv_02"]["inputs"] == ["data/labels.csv"]  # from the frame's code line
    assert got["bad_csv_02"]["input_records"] == ["line 52"]  # "Expected 2 fields in line 52"
    assert got["bad_image_01"]["inputs"] == ["data/train/img_0000.jpg"]
    assert got["missing_data_file_01"]["inputs"] == ["datasets/imagenet/train.csv"]
    # the file was opened earlier (`with open(...) as f`): nothing in the failing lines names it
    assert got["corrupt_json_01"]["inputs"] == []


def test_path_like_noise_is_not_an_input() -> None:
    assert extract_inputs(TQDM.split("\r")) == []
    assert extract_inputs(WANDB.splitlines()) == []
    assert extract_inputs(DEEPSPEED.splitlines()) == []
    assert extract_inputs(["OSError: cannot read /data/imagenet/train/n01440764/x.JPEG"]) == [
        "/data/imagenet/train/n01440764/x.JPEG"]
