"""Failure logs for the simulator's failed attempts.

Each failed attempt gets ``<data_dir>/logs/sim/<job_id>/attempt-<n>.log``: a
short launcher header (job, node, GPUs, declared inputs) followed by the body of
a real failure log of the planted category from ``sample_logs/`` (listed in
``sample_logs/index.csv`` with columns ``file,category,...``, or found as
``sample_logs/<category>/*.log`` when there is no index). When the corpus has
nothing for a category, a small built-in template is used instead, so the
simulator always works. The header never names the category.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["FRAME_TEMPLATES", "LogCorpus", "TEMPLATES", "default_sample_logs_dir"]

MAX_BODY = 64 * 1024
_HEAD = 8 * 1024

#: Built-in fallbacks: one typical fatal excerpt per category the simulator plants.
TEMPLATES: dict[str, str] = {
    "syntax_error": (
        'Traceback (most recent call last):\n  File "/job/train.py", line 41\n'
        "    for epoch in range(args.epochs)\n                                   ^\n"
        "SyntaxError: invalid syntax\n"
    ),
    "import_error": (
        'Traceback (most recent call last):\n  File "/job/train.py", line 7, in <module>\n'
        "    import apex\nModuleNotFoundError: No module named 'apex'\n"
    ),
    "semantic_error": (
        'Traceback (most recent call last):\n  File "/job/train.py", line 118, in forward\n'
        "    x = self.fc(x)\nRuntimeError: mat1 and mat2 shapes cannot be multiplied (64x2048 and 4096x1000)\n"
    ),
    "gpu_oom": (
        'Traceback (most recent call last):\n  File "/job/train.py", line 210, in train_step\n'
        "    loss.backward()\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
        "(GPU 0; 22.38 GiB total capacity; 20.91 GiB already allocated; 1.02 GiB free)\n"
    ),
    "cpu_oom": (
        "[rank0] loading shard 14/64 into memory\n"
        "Out of memory: Killed process 48213 (python) total-vm:98123444kB, anon-rss:64102332kB\n"
        "/job/run.sh: line 12: 48213 Killed                  python train.py\n"
    ),
    "incorrect_input": (
        'Traceback (most recent call last):\n  File "/job/data.py", line 77, in __getitem__\n'
        "    record = decode(fh.read(size))\n"
        "ValueError: corrupted record at offset 18446744 in {input}: unexpected end of data\n"
    ),
    "checkpoint_error": (
        'Traceback (most recent call last):\n  File "/job/train.py", line 64, in resume\n'
        "    state = torch.load(args.resume)\n"
        "RuntimeError: Error(s) in loading state_dict for ResNet: Missing key(s) in state_dict: \"fc.weight\"\n"
    ),
    "permission_error": (
        'Traceback (most recent call last):\n  File "/job/train.py", line 30, in <module>\n'
        "    os.makedirs(args.out)\nPermissionError: [Errno 13] Permission denied: '/output/shared/run-17'\n"
    ),
    "model_diverged": (
        "epoch 3 step 1200 loss 7.812\nepoch 3 step 1300 loss 1834.2\nepoch 3 step 1400 loss nan\n"
        "RuntimeError: loss is NaN, training diverged; stopping\n"
    ),
    "cuda_error": (
        'Traceback (most recent call last):\n  File "/job/train.py", line 188, in forward\n'
        "    out = self.conv(x)\nRuntimeError: CUDA error: an illegal memory access was encountered\n"
    ),
    "crash": (
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f3a (most recent call first):\n"
        '  File "/usr/lib/python3/site-packages/framework/ops.py", line 902 in _run\n'
        "Segmentation fault (core dumped)\n"
    ),
    "gpu_hardware": (
        "NVRM: Xid (PCI:0000:{bus}:00): 79, GPU has fallen off the bus.\n"
        'Traceback (most recent call last):\n  File "/job/train.py", line 210, in train_step\n'
        "RuntimeError: CUDA error: unspecified launch failure\n"
    ),
    "comm_error": (
        "[rank3] NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129\n"
        "RuntimeError: NCCL communicator was aborted on rank 3: unhandled system error\n"
    ),
    "storage_error": (
        'Traceback (most recent call last):\n  File "/job/data.py", line 40, in open_shard\n'
        "OSError: [Errno 5] Input/output error: '/data/datasets/shard-0031'\n"
    ),
}


def default_sample_logs_dir() -> Path | None:
    """``sample_logs/`` next to the installed packages (a source checkout), if present."""
    env = os.environ.get("GPULENS_SAMPLE_LOGS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[3] / "sample_logs"
    return here if here.is_dir() else None


class LogCorpus:
    """Failure logs by category from sample_logs/, with built-in fallbacks."""

    def __init__(self, root: Path | None, categories: Iterable[str]) -> None:
        self.root = root
        self.by_category: dict[str, list[Path]] = {}
        self._cache: dict[Path, str] = {}
        wanted = set(categories)
        if root is None or not root.is_dir():
            return
        index = root / "index.csv"
        if index.is_file():
            try:
                with index.open(newline="", encoding="utf-8") as fh:
                    for row in csv.DictReader(fh):
                        cat = (row.get("category") or "").strip()
                        rel = (row.get("file") or "").strip()
                        if cat not in wanted or not rel:
                            continue
                        path = root / rel
                        if not path.is_file():
                            path = root.parent / rel
                        if path.is_file():
                            self.by_category.setdefault(cat, []).append(path)
            except (OSError, csv.Error, UnicodeDecodeError):
                self.by_category = {}
        if not self.by_category:
            for cat in sorted(wanted):
                d = root / cat
                if d.is_dir():
                    files = sorted(p for p in d.iterdir() if p.is_file() and p.suffix in (".log", ".txt"))
                    if files:
                        self.by_category[cat] = files
        for files in self.by_category.values():
            files.sort()

    def count(self, category: str) -> int:
        return len(self.by_category.get(category, ()))

    def body(self, category: str, pick: int, *, input_path: str = "", bus: str = "3b",
             frame: str | None = None, user: str = "user") -> tuple[str, str]:
        """(log body, source) for a category; ``pick`` selects among the corpus files.

        With a ``frame`` (crash / cuda_error), one of :data:`FRAME_TEMPLATES` whose
        failing frame is the user's code or the framework's.
        """
        framed = FRAME_TEMPLATES.get((category, frame or ""))
        if framed:
            return framed[pick % len(framed)].replace("{user}", user), f"builtin:{category}:{frame}"
        files = self.by_category.get(category)
        if files:
            path = files[pick % len(files)]
            text = self._cache.get(path)
            if text is None:
                try:
                    raw = path.read_bytes()
                except OSError:
                    raw = b""
                if len(raw) > MAX_BODY:
                    raw = raw[:_HEAD] + b"\n[... truncated by gpulens simulate ...]\n" + raw[-(MAX_BODY - _HEAD):]
                text = raw.decode("utf-8", errors="replace")
                self._cache[path] = text
            if text.strip():
                src = str(path.relative_to(self.root)) if self.root else str(path)
                return text, f"sample_logs/{src}"
        template = TEMPLATES.get(category, "RuntimeError: job failed\n")
        return template.replace("{input}", input_path or "/data/input").replace("{bus}", bus), f"builtin:{category}"


_CUDA_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
    "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
)
_SITE = "/opt/conda/envs/train/lib/python3.10/site-packages"

#: Deterministic crashes and CUDA errors by where they happen (docs/diagnosis.md, "One origin
#: convention"): ``user_code`` - the innermost frame is the user's file (origin user);
#: ``framework`` - a framework internal assert or the innermost frame inside the framework
#: (origin framework). ``{user}`` is replaced by the job's user.
FRAME_TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("cuda_error", "user_code"): (
        'Traceback (most recent call last):\n  File "/home/{user}/proj/train.py", line 301, in <module>\n'
        "    train(cfg)\n"
        '  File "/home/{user}/proj/ops/fused_adam.py", line 88, in step\n'
        "    fused_adam_cuda.adam(p.data, exp_avg, exp_avg_sq, lr)\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n" + _CUDA_TAIL,
        'Traceback (most recent call last):\n  File "/home/{user}/proj/train.py", line 140, in <module>\n'
        "    main()\n"
        '  File "/home/{user}/proj/kernels/gather.py", line 57, in gather_rows\n'
        "    return _ext.gather(src, idx, out)\n"
        "RuntimeError: CUDA error: misaligned address\n" + _CUDA_TAIL,
    ),
    ("cuda_error", "framework"): (
        'Traceback (most recent call last):\n  File "/home/{user}/proj/train.py", line 244, in train\n'
        "    scaler.scale(loss).backward()\n"
        f'  File "{_SITE}/torch/_tensor.py", line 522, in backward\n'
        "    torch.autograd.backward(\n"
        f'  File "{_SITE}/torch/autograd/__init__.py", line 266, in backward\n'
        "    Variable._execution_engine.run_backward(\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n" + _CUDA_TAIL,
        'Traceback (most recent call last):\n  File "/home/{user}/proj/train.py", line 118, in forward\n'
        "    out = self.attn(q, k, v)\n"
        f'  File "{_SITE}/torch/nn/functional.py", line 5382, in multi_head_attention_forward\n'
        "    attn_output = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)\n"
        "RuntimeError: CUDA error: an illegal instruction was encountered\n" + _CUDA_TAIL,
    ),
    ("crash", "user_code"): (
        "Fatal Python error: Segmentation fault\n\n"
        "Current thread 0x00007f6b75485b80 (most recent call first):\n"
        '  File "/home/{user}/proj/native_ops.py", line 41 in gather_rows\n'
        '  File "/home/{user}/proj/train.py", line 122 in train_step\n'
        '  File "/home/{user}/proj/train.py", line 210 in <module>\n\n'
        "Segmentation fault (core dumped)\n",
        "Fatal Python error: Aborted\n\n"
        "Current thread 0x00007f269122cb80 (most recent call first):\n"
        '  File "/home/{user}/proj/data/decoder.py", line 77 in decode_batch\n'
        '  File "/home/{user}/proj/train.py", line 23 in <module>\n\n'
        "Aborted (core dumped)\n",
    ),
    ("crash", "framework"): (
        "Fatal Python error: Segmentation fault\n\n"
        "Current thread 0x00007f3a12345b80 (most recent call first):\n"
        f'  File "{_SITE}/torch/nn/modules/conv.py", line 456 in _conv_forward\n'
        f'  File "{_SITE}/torch/nn/modules/module.py", line 1520 in _call_impl\n'
        '  File "/home/{user}/proj/train.py", line 88 in forward\n\n'
        "Segmentation fault (core dumped)\n",
        "Fatal Python error: Aborted\n\n"
        "Current thread 0x00007f3a5d1e2b80 (most recent call first):\n"
        f'  File "{_SITE}/torch/distributed/distributed_c10d.py", line 2288 in all_reduce\n'
        '  File "/home/{user}/proj/train.py", line 199 in sync_grads\n\n'
        "Aborted (core dumped)\n",
    ),
}
