# ruff: noqa: UP031 - program sources are built with %-formatting on purpose (they contain braces)
"""Small failing Python/PyTorch programs. Each case really runs; its output is the log.

A case is (category, family, variants). ``make(v, work)`` returns a Run: the program
source, extra files to create, how to run it (plain python, torchrun, as another user,
with resource limits, or with a signal sent after a delay) and the files in ``work``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import random
import zipfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["CASES", "Case", "Run"]


@dataclasses.dataclass
class Run:
    source: str
    files: dict[str, bytes | str] = dataclasses.field(default_factory=dict)
    torchrun: int = 0  # >0: run under torch.distributed.run with this many processes
    user: str | None = None  # run as this user (permission errors)
    rlimit_as: int | None = None
    rlimit_fsize: int | None = None
    ignore_sigxfsz: bool = False
    signal_after: float | None = None  # send SIGTERM (to the launcher) after this many seconds
    signal: int = 15
    shell: bool = False  # run through bash -c (the shell reports signals: "Terminated")
    tmpfs: str | None = None  # mount a tiny tmpfs at work/<name> ("ro" suffix: read-only)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    timeout: float = 400


@dataclasses.dataclass
class Case:
    category: str
    family: str
    variants: int
    make: Callable[[int, Path], Run]
    description: str


PRELUDE = '''\
import os, sys, time, math, logging, warnings, random
import torch, torch.nn as nn
from tqdm import tqdm
logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO, stream=sys.stdout)
log = logging.getLogger("{logger}")
torch.manual_seed({seed})
{mislead}
def warmup(steps={steps}):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in tqdm(range(steps), desc="epoch 0", mininterval=0, ncols=90, file=sys.stderr):
        x = torch.randn(8, 16); y = torch.randint(0, 4, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if step % {every} == 0:
            log.info("step %d loss %.4f lr %.3g", step, loss.item(), 0.05)
    sys.stderr.flush()
    return model
'''

MISLEADS = [
    "",
    'warnings.warn("`error_bad_lines` is deprecated and will be removed in a future version; '
    'use on_bad_lines instead", FutureWarning)',
    'warnings.warn("torch.cuda.amp.GradScaler(args...) is deprecated. Please use '
    'torch.amp.GradScaler(\'cuda\', args...) instead.", FutureWarning)',
    "try:\n    import wandb_does_not_exist\nexcept ImportError:\n"
    "    log.warning('wandb not installed, error reporting to W&B disabled')",
    "try:\n    json_cfg = {}['tracker_url']\nexcept KeyError:\n"
    "    log.exception('could not read tracker_url from config; continuing without tracker')",
    'log.error("Error loading optional plugin apex.fused: not found (this is not fatal)")',
]


def prelude(v: int, *, steps: int | None = None) -> str:
    rnd = random.Random(v * 7919)
    return PRELUDE.format(
        logger=rnd.choice(["train", "trainer", "__main__", "main", "fit"]),
        seed=v,
        mislead=MISLEADS[v % len(MISLEADS)],
        steps=steps if steps is not None else rnd.choice([5, 20, 40, 60]),
        every=rnd.choice([5, 10]),
    )


def simple(category: str, family: str, variants: int, description: str,
           body: Callable[[int], str], *, warm: bool = True,
           files: Callable[[int, Path], dict[str, bytes | str]] | None = None,
           **run_kw: object) -> Case:
    def make(v: int, work: Path) -> Run:
        src = (prelude(v) + "model = warmup()\n" if warm else "") + body(v)
        return Run(src, files(v, work) if files else {}, **run_kw)  # type: ignore[arg-type]
    return Case(category, family, variants, make, description)


def _rnd(v: int) -> random.Random:
    return random.Random(1000 + v)


CASES: list[Case] = []
add = CASES.append

# ------------------------------------------------------------------ syntax_error
add(simple("syntax_error", "unclosed_paren", 2, "missing closing parenthesis in the training script",
           lambda v: f'print("starting run", {v}\nmodel.train()\n', warm=False))
add(simple("syntax_error", "bad_indent", 2, "unexpected indent after an edit",
           lambda v: "def main():\n    lr = 0.1\n        epochs = %d\n    return lr\nmain()\n" % (v + 3), warm=False))
add(simple("syntax_error", "missing_colon", 2, "def without colon",
           lambda v: "import torch\ndef train(model, steps=%d)\n    return model\n" % v, warm=False))


def _syntax_in_module(v: int, work: Path) -> Run:
    src = prelude(v) + "model = warmup()\nlog.info('building model')\nimport mymodels\n"
    mod = ("import torch.nn as nn\nclass Net(nn.Module):\n    def forward(self, x):\n"
           "        return x if x.sum() > 0 else = -x\n")
    if v % 2:
        mod = "import torch\nmsg = f'unterminated\n"
    return Run(src, {"mymodels.py": mod})


add(Case("syntax_error", "syntax_in_imported_module", 3, _syntax_in_module,
         "syntax error in a module imported after a few training steps"))

# ------------------------------------------------------------------ import_error
add(simple("import_error", "missing_module", 3, "third-party package not installed in the image",
           lambda v: "import %s\n" % ["timm", "apex", "deepspeed", "wandb_sdk"][v % 4]))
add(simple("import_error", "cannot_import_name", 3, "API renamed between versions",
           lambda v: ["from torch.optim import AdamWW\n", "from collections import Mapping\n",
                      "from torch.utils.data import DataLoaderX\n"][v % 3]))


def _circular(v: int, work: Path) -> Run:
    return Run(prelude(v) + "import models_a\n", {
        "models_a.py": "from models_b import Backbone\nclass Head: pass\n",
        "models_b.py": "from models_a import Head\nclass Backbone: pass\n",
    })


add(Case("import_error", "circular_import", 2, _circular, "circular import between two project modules"))

# ------------------------------------------------------------------ semantic_error
add(simple("semantic_error", "linear_shape", 3, "classifier head has the wrong input size",
           lambda v: "head = nn.Linear(%d, 10)\nfeats = torch.randn(32, %d)\nout = head(feats)\n" % (256 + v, 512 + 8 * v)))
add(simple("semantic_error", "broadcast_mismatch", 2, "adding tensors of incompatible sizes",
           lambda v: "a = torch.randn(8, %d)\nb = torch.randn(8, %d)\nc = a + b\n" % (3 + v, 4 + v)))
add(simple("semantic_error", "dtype_mismatch", 2, "double input to a float model",
           lambda v: "import numpy as np\nx = torch.from_numpy(np.random.rand(4, 16))\ny = model(x)\n"))
add(simple("semantic_error", "none_attribute", 2, "forgot to return a value",
           lambda v: "def build_batch(i):\n    batch = {'x': torch.randn(4, 16)}\n\nb = build_batch(%d)\nprint(b.shape)\n" % v))
add(simple("semantic_error", "config_keyerror", 2, "missing key in the config dict",
           lambda v: "cfg = {'lr': 0.1, 'epochs': 3}\nwarmup_steps = cfg['warmup_%s']\n" % ["steps", "ratio"][v % 2]))
add(simple("semantic_error", "wrong_arity", 2, "forward called with too many arguments",
           lambda v: "class Net(nn.Module):\n    def __init__(self):\n        super().__init__(); self.l = nn.Linear(16, 4)\n"
                     "    def forward(self, x):\n        return self.l(x)\nNet()(torch.randn(2, 16), torch.ones(2))\n"))
add(simple("semantic_error", "index_error", 2, "off-by-one over a list of schedulers",
           lambda v: "milestones = [10, 20, 30]\nfor i in range(4):\n    log.info('milestone %d', milestones[i])\n"))
add(simple("semantic_error", "inplace_autograd", 2, "in-place op breaks autograd",
           lambda v: "w = torch.randn(4, requires_grad=True)\ny = w.sigmoid()\ny.mul_(2)\ny.sum().backward()\n"))

# ------------------------------------------------------------------ incorrect_input
def _files_missing(v: int, work: Path) -> dict[str, bytes | str]:
    return {}


add(simple("incorrect_input", "missing_data_file", 3, "dataset file not at the configured path",
           lambda v: "import pandas as pd\ndf = pd.read_csv('datasets/%s/train.csv')\n" % ["imagenet", "cifar10", "wiki103"][v % 3]))
add(simple("incorrect_input", "corrupt_json", 2, "truncated JSON annotations",
           lambda v: "import json\nwith open('data/annotations.json') as f:\n    ann = json.load(f)\n",
           files=lambda v, w: {"data/annotations.json": '{"images": [{"id": 1, "file": "a.jpg"}, {"id": 2, "fi'}))
add(simple("incorrect_input", "bad_csv", 2, "CSV with a ragged row",
           lambda v: "import pandas as pd\ndf = pd.read_csv('data/labels.csv')\nlog.info('rows %d', len(df))\n",
           files=lambda v, w: {"data/labels.csv": "id,label\n" + "".join(f"{i},{i % 3}\n" for i in range(50)) + "51,2,extra,fields\n"}))
add(simple("incorrect_input", "corrupt_gzip", 2, "corrupted gzip shard",
           lambda v: "import gzip\nwith gzip.open('data/shard-%05d.jsonl.gz', 'rt') as f:\n    rows = [l for l in f]\n" % v,
           files=lambda v, w: {f"data/shard-{v:05d}.jsonl.gz": gzip.compress(b'{"t": 1}\n' * 200)[:-40] + os.urandom(10)}))
add(simple("incorrect_input", "truncated_npy", 2, "truncated .npy feature file",
           lambda v: "import numpy as np\nfeats = np.load('data/features.npy')\n",
           files=lambda v, w: {"data/features.npy": _npy_truncated()}))
add(simple("incorrect_input", "empty_dataset", 2, "data directory empty: DataLoader gets no samples",
           lambda v: "import glob\nfrom torch.utils.data import DataLoader\nfiles = sorted(glob.glob('data/train/*.pt'))\n"
                     "log.info('found %d training files', len(files))\nloader = DataLoader(files, batch_size=4, shuffle=True)\n"
                     "for batch in loader:\n    pass\n"))
add(simple("incorrect_input", "bad_image", 2, "image file is not an image",
           lambda v: "from PIL import Image\nimg = Image.open('data/train/img_%04d.jpg')\n" % v,
           files=lambda v, w: {f"data/train/img_{v:04d}.jpg": b"<html>404 Not Found</html>"}))
NON_NUMERIC = [
    "import csv\ndef load_features(path):\n    feats = []\n    with open(path, newline='') as f:\n"
    "        for row in csv.DictReader(f):\n            feats.append([float(row[k]) for k in ('f1', 'f2')])\n"
    "    return torch.tensor(feats)\nlog.info('loading features')\nx = load_features('data/train_features.csv')\n",
    "import numpy as np\nlog.info('loading features')\n"
    "x = np.loadtxt('data/train_features.csv', delimiter=',', skiprows=1, dtype=np.float32)\n",
    "import pandas as pd\ndf = pd.read_csv('data/train_features.csv')\nlog.info('read %d rows', len(df))\n"
    "df['f2'] = df['f2'].astype(float)\n",
]
add(simple("incorrect_input", "non_numeric_csv", 3, "a non-numeric value in a numeric column of the input CSV",
           lambda v: NON_NUMERIC[v % 3],
           files=lambda v, w: {"data/train_features.csv": "f1,f2\n1.0,2.0\n3.5,%s\n" % ["n/a", "?", "#VALUE!"][v % 3]}))


def _npy_truncated() -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.zeros((100, 64), dtype=np.float32))
    return buf.getvalue()[:3000]


# ------------------------------------------------------------------ model_diverged
add(simple("model_diverged", "nan_guard", 3, "learning rate too high: the NaN guard stops training",
           lambda v: "opt = torch.optim.SGD(model.parameters(), lr=%g)\n" % (1e6 * (v + 1)) +
           "for step in range(200):\n    x = torch.randn(8, 16) * 100; y = torch.randint(0, 4, (8,))\n"
           "    loss = nn.functional.cross_entropy(model(x), y)\n"
           "    if not torch.isfinite(loss):\n" +
           ["        raise RuntimeError(f'Loss is {loss.item()} at step {step}, stopping')\n",
            "        raise FloatingPointError(f'non-finite loss at step {step}')\n",
            "        assert torch.isfinite(loss), f'loss became {loss.item()} at step {step}'\n"][v % 3] +
           "    opt.zero_grad(); loss.backward(); opt.step()\n    log.info('step %d loss %.4f', step, loss.item())\n"))
add(simple("model_diverged", "anomaly_detect", 3, "autograd anomaly detection finds NaN in backward",
           lambda v: "torch.autograd.set_detect_anomaly(True)\nw = torch.tensor([%s], requires_grad=True)\n" % ["-1.0, 4.0", "0.0, -2.0", "-3.0"][v % 3] +
           "loss = torch.sqrt(w).sum()\nlog.info('loss %s', loss)\nloss.backward()\n"))
add(simple("model_diverged", "nan_in_grad_check", 2, "gradient check in the training loop detects NaN",
           lambda v: "for p in model.parameters():\n    p.grad = torch.full_like(p, float('nan'))\n"
                     "for n, p in model.named_parameters():\n    if torch.isnan(p.grad).any():\n"
                     "        raise ValueError(f'Detected NaN in gradients of {n}; training diverged')\n"))

# ------------------------------------------------------------------ checkpoint_error
add(simple("checkpoint_error", "corrupt_checkpoint", 2, "checkpoint file overwritten with garbage",
           lambda v: "state = torch.load('ckpt/epoch_%d.pt')\n" % (v + 3),
           files=lambda v, w: {f"ckpt/epoch_{v + 3}.pt": os.urandom(2048)}))
add(simple("checkpoint_error", "truncated_checkpoint", 2, "checkpoint truncated by an interrupted copy",
           lambda v: "torch.save(model.state_dict(), 'ckpt/last.pt')\ndata = open('ckpt/last.pt','rb').read()\n"
                     "open('ckpt/last.pt','wb').write(data[:len(data)//%d])\nlog.info('resuming from ckpt/last.pt')\n"
                     "model.load_state_dict(torch.load('ckpt/last.pt'))\n" % (v + 2),
           files=lambda v, w: {"ckpt/.keep": ""}))
add(simple("checkpoint_error", "state_dict_mismatch", 2, "resuming a checkpoint of a different architecture",
           lambda v: "other = nn.Sequential(nn.Linear(16, %d), nn.ReLU(), nn.Linear(%d, 4))\n" % (64 + v, 64 + v) +
           "torch.save(other.state_dict(), 'ckpt.pt')\nlog.info('loading ckpt.pt')\nmodel.load_state_dict(torch.load('ckpt.pt'))\n"))
add(simple("checkpoint_error", "missing_checkpoint", 1, "resume path points to a checkpoint that was never written",
           lambda v: "resume = 'checkpoints/run%d/epoch_%d.pth'\nlog.info('resuming from %%s', resume)\nsd = torch.load(resume)\n" % (v, 10 + v)))
add(simple("checkpoint_error", "weights_only_load", 1, "torch>=2.6 weights_only refuses a pickled object",
           lambda v: "import collections\nclass TrainState:\n    def __init__(self): self.epoch = %d\n" % v +
           "torch.save({'model': model.state_dict(), 'state': TrainState()}, 'resume.pt')\nck = torch.load('resume.pt')\n"))

# ------------------------------------------------------------------ permission_error (run as nobody)
add(simple("permission_error", "write_output_dir", 3, "output directory owned by another user",
           lambda v: "os.makedirs('/var/lib/gl-protected/exp%d', exist_ok=True)\n" % v if v % 3 == 0 else
           "torch.save(model.state_dict(), '/var/lib/gl-protected/model_%d.pt')\n" % v if v % 3 == 1 else
           "open('/var/lib/gl-protected/metrics.json', 'w').write('{}')\n", user="nobody"))
add(simple("permission_error", "read_protected_data", 2, "dataset file readable only by its owner",
           lambda v: "with open('/var/lib/gl-protected/train_%d.bin', 'rb') as f:\n    data = f.read()\n" % v, user="nobody"))
add(simple("permission_error", "log_file_handler", 2, "log file in a root-owned directory",
           lambda v: "fh = logging.FileHandler('/var/log/gl-train-%d.log')\n" % v, user="nobody"))
add(simple("permission_error", "chmod_not_owner", 1, "chmod of a file owned by another user",
           lambda v: "os.chmod('/var/lib/gl-protected', 0o777)\n", user="nobody"))

# ------------------------------------------------------------------ cpu_oom (RLIMIT_AS)
GB = 1024 ** 3
add(simple("cpu_oom", "torch_alloc", 2, "tensor larger than the memory limit (RLIMIT_AS)",
           lambda v: "log.info('caching dataset in memory')\ncache = torch.empty(%d, 1024, 1024)\n" % (3000 + 500 * v),
           rlimit_as=3 * GB))
add(simple("cpu_oom", "numpy_alloc", 1, "numpy array larger than the memory limit",
           lambda v: "import numpy as np\nemb = np.zeros((%d, 1024, 1024), dtype=np.float32)\n" % (2000 + v * 100),
           rlimit_as=3 * GB))
add(simple("cpu_oom", "python_growth", 1, "python list keeps growing until MemoryError",
           lambda v: "buf = []\nwhile True:\n    buf.append(bytearray(64 * 1024 * 1024))\n", rlimit_as=3 * GB))
add(simple("cpu_oom", "dataloader_worker_killed", 1, "DataLoader worker SIGKILLed (as by the OOM killer)",
           lambda v: "import signal\nfrom torch.utils.data import Dataset, DataLoader\n"
                     "class DS(Dataset):\n    def __len__(self): return 1000\n"
                     "    def __getitem__(self, i):\n        if i > %d: os.kill(os.getpid(), signal.SIGKILL)\n        return torch.randn(16)\n" % (10 + v) +
                     "for i, b in enumerate(DataLoader(DS(), batch_size=4, num_workers=2)):\n    log.info('batch %d', i)\n"))

# ------------------------------------------------------------------ preempted
LOOP = ("for step in range(100000):\n    x = torch.randn(8, 16); loss = model(x).pow(2).mean()\n"
        "    if step % 20 == 0: log.info('step %d loss %.4f', step, loss.item())\n    time.sleep(0.05)\n")
add(simple("preempted", "sigterm_handler", 2, "scheduler sends SIGTERM; the script's handler checkpoints and exits",
           lambda v: "import signal\ndef on_term(sig, frame):\n" +
           ["    log.warning('Received SIGTERM, saving checkpoint and exiting (preempted)')\n",
            "    print('Caught signal 15 (SIGTERM): job preempted by the scheduler, requeueing', flush=True)\n",
            "    log.warning('received SIGTERM; writing emergency checkpoint')\n"][v % 3] +
           "    torch.save(model.state_dict(), 'emergency.pt'); sys.exit(143)\nsignal.signal(signal.SIGTERM, on_term)\n" + LOOP,
           signal_after=3.0))
add(simple("preempted", "sigterm_shell", 1, "SIGTERM with the default handler; the shell reports it",
           lambda v: LOOP, signal_after=3.0, shell=True))

# ------------------------------------------------------------------ storage_error
add(simple("storage_error", "disk_full_write", 2, "output filesystem full (256 KiB tmpfs)",
           lambda v: "with open('out/predictions_%d.txt', 'w') as f:\n    for i in range(100000):\n        f.write('sample %%d %%f\\n' %% (i, random.random()))\n" % v,
           tmpfs="out"))
add(simple("storage_error", "disk_full_checkpoint", 2, "checkpoint save on a full filesystem",
           lambda v: "big = nn.Linear(%d, 512)\nlog.info('saving checkpoint')\ntorch.save(big.state_dict(), 'out/ckpt.pt')\n" % (1024 * (v + 1)),
           tmpfs="out"))
add(simple("storage_error", "read_only_fs", 1, "writing to a read-only mount",
           lambda v: "with open('out/log_%d.txt', 'w') as f:\n    f.write('x')\n" % v, tmpfs="out:ro"))
add(simple("storage_error", "file_size_limit", 1, "RLIMIT_FSIZE exceeded while writing (SIGXFSZ ignored)",
           lambda v: "with open('big.bin', 'wb') as f:\n    for i in range(64):\n        f.write(os.urandom(1 << 20))\n",
           rlimit_fsize=8 * 1024 * 1024, ignore_sigxfsz=True))
add(simple("storage_error", "stale_handle", 1, "NFS stale file handle while reading a shard (errno injected)",
           lambda v: "import errno\ndef read_shard(p):\n    raise OSError(errno.ESTALE, os.strerror(errno.ESTALE), p)\n"
                     "read_shard('/mnt/nfs/datasets/coco/train2017/%012d.jpg')\n" % (391895 + v)))

# ------------------------------------------------------------------ crash
add(simple("crash", "segfault", 3, "native extension dereferences NULL (faulthandler on)",
           lambda v: "import ctypes, faulthandler\nfaulthandler.enable()\nctypes.string_at(0)\n"))
add(simple("crash", "abort", 2, "native abort()", lambda v: "os.abort()\n", shell=True))
add(simple("crash", "segfault_quiet", 2, "segfault without faulthandler, reported by the shell",
           lambda v: "import ctypes\nctypes.string_at(0)\n", shell=True))

# ------------------------------------------------------------------ cuda_env_error (CPU-only torch)
add(simple("cuda_env_error", "not_compiled_with_cuda", 2, "CPU-only torch build on a GPU job",
           lambda v: ["model = model.cuda()\n", "torch.cuda.set_device(0)\nx = torch.zeros(1, device='cuda')\n"][v % 2]))
add(simple("cuda_env_error", "nccl_not_built", 1, "NCCL backend requested on a build without it",
           lambda v: "import torch.distributed as dist\nos.environ.setdefault('MASTER_ADDR','127.0.0.1'); os.environ.setdefault('MASTER_PORT','29533')\n"
                     "dist.init_process_group('nccl', rank=0, world_size=1)\n"))

# ------------------------------------------------------------------ comm_error (gloo, real)
DIST = "import torch.distributed as dist\nfrom datetime import timedelta\n"
add(simple("comm_error", "store_timeout", 1, "rendezvous store timeout: the second rank never joins",
           lambda v: DIST + "store = dist.TCPStore('127.0.0.1', 0, 2, True, timeout=timedelta(seconds=%d))\n" % (3 + v) +
           "dist.init_process_group('gloo', store=store, rank=0, world_size=2, timeout=timedelta(seconds=%d))\n" % (3 + v)))
add(simple("comm_error", "connect_refused", 1, "master address unreachable",
           lambda v: DIST + "store = dist.TCPStore('127.0.0.1', %d, 2, False, timeout=timedelta(seconds=3))\n" % (1 + v)))


def _torchrun(v: int, work: Path, body: str, n: int = 2) -> Run:
    src = prelude(v, steps=10) + DIST + (
        "dist.init_process_group('gloo', timeout=timedelta(seconds=%d))\nrank = dist.get_rank()\n"
        "model = warmup()\nt = torch.ones(4)\ndist.all_reduce(t)\nlog.info('rank %%d all_reduce ok', rank)\n" % 5
    ) + body
    return Run(src, torchrun=n)


add(Case("comm_error", "peer_exits", 1,
         lambda v, w: _torchrun(v, w, "if rank == 1:\n    os._exit(0)\nfor i in range(5):\n    dist.all_reduce(t)\n"),
         "torchrun: a peer process disappears, gloo reports connection closed"))
add(Case("comm_error", "collective_timeout", 1,
         lambda v, w: _torchrun(v, w, "if rank == 1:\n    time.sleep(30)\ndist.all_reduce(t)\n"),
         "torchrun: one rank stalls, the collective times out"))
add(Case("semantic_error", "torchrun_rank_valueerror", 1,
         lambda v, w: _torchrun(v, w, "if rank == 1:\n    raise ValueError(f'expected batch of size 8, got {t.numel()}')\ndist.all_reduce(t)\n"),
         "torchrun: one rank raises, ChildFailedError root cause"))
add(Case("incorrect_input", "torchrun_missing_shard", 1,
         lambda v, w: _torchrun(v, w, "shard = f'data/shard_{rank:03d}.bin'\nif rank == 1:\n    open(shard, 'rb').read()\ndist.all_reduce(t)\n"),
         "torchrun: the shard for rank 1 is missing"))
add(Case("crash", "torchrun_segfault", 1,
         lambda v, w: _torchrun(v, w, "import ctypes\nif rank == 1:\n    ctypes.string_at(0)\ndist.all_reduce(t)\n"),
         "torchrun: a rank segfaults (exitcode -11)"))
add(Case("cpu_oom", "torchrun_sigkill", 1,
         lambda v, w: _torchrun(v, w, "import signal\nif rank == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\ndist.all_reduce(t)\n"),
         "torchrun: a rank is SIGKILLed (as by the OOM killer), exitcode -9"))
add(Case("preempted", "torchrun_sigterm", 1,
         lambda v, w: dataclasses.replace(_torchrun(v, w, LOOP.replace("model(x)", "model(x)")), signal_after=4.0),
         "torchrun receives SIGTERM from the scheduler and shuts the workers down"))


def _zip_bytes(files: dict[str, bytes]) -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, b in files.items():
            z.writestr(k, b)
    return buf.getvalue()


_ = json  # imported for programs that build JSON inputs

# ------------------------------------------------------------------ unknown (no usable signature)
add(simple("unknown", "silent_exit", 2, "script exits non-zero without saying why",
           lambda v: "log.info('evaluation finished')\nsys.exit(%d)\n" % (3 + v)))
add(simple("unknown", "vague_error", 2, "a framework wrapper reports a failure with no cause",
           lambda v: ["log.error('Run failed. See logs above for details.')\nsys.exit(1)\n",
                      "class TrainerFailure(Exception):\n    pass\nraise TrainerFailure('trainer stopped: status=FAILED (code 7)')\n"][v % 2]))
add(simple("unknown", "truncated_log", 2, "log ends mid-training: the process vanished without output",
           lambda v: "for step in range(%d):\n    log.info('step %%d loss %%.4f', step, 1.0 / (step + 1))\nos._exit(1)\n" % (30 + 10 * v)))
add(simple("unknown", "custom_runtime_error", 2, "opaque RuntimeError raised by user code",
           lambda v: "raise RuntimeError('%s')\n" % ["job failed with status 3", "Something went wrong during step 1200"][v % 2]))
add(simple("unknown", "wrapper_unbound_var", 2, "the job wrapper's post-training step fails on an unset shell variable",
           lambda v: "import subprocess\nlog.info('training done, syncing results')\n"
                     "r = subprocess.run(['bash', '-c', 'set -euo pipefail; echo \"syncing results\"; rsync -a out/ \"$%s\"/'])\n"
                     "sys.exit(r.returncode)\n" % ["RESULTS_BUCKET", "SCRATCH_DIR"][v % 2]))
add(simple("unknown", "killed_no_message", 1, "process killed from outside (SIGKILL) mid-training; the log just stops",
           lambda v: LOOP, signal_after=3.0, signal=9))

# ------------------------------------------------------------------ more crashes (real glibc / CPython output)
add(simple("crash", "abort_faulthandler", 1, "native abort() with faulthandler enabled (Fatal Python error: Aborted)",
           lambda v: "import faulthandler\nfaulthandler.enable()\nlog.info('calling into the extension')\nos.abort()\n"))
add(simple("crash", "invalid_free", 1, "native code frees an invalid pointer (glibc aborts)",
           lambda v: "import ctypes\nlibc = ctypes.CDLL('libc.so.6')\nbuf = ctypes.create_string_buffer(64)\n"
                     "libc.free(ctypes.cast(ctypes.byref(buf, 8), ctypes.c_void_p))\n", shell=True))
