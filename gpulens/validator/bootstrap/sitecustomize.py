"""Start-up hook injected into a job's dry run by ``gpulens validate``.

Python imports ``sitecustomize`` at start-up from the first directory of
``sys.path`` that has one; the validator puts this file's directory first on the
child's ``PYTHONPATH``, so the job's own code stays untouched. The hook is a
no-op unless ``GPULENS_VALIDATE_MARKER_DIR`` is set.

What it does, in every Python process of the job:

* records an uncaught exception (type, message, innermost frames) and, when the
  validator declared inputs, which of them the process opened (audit hook);
* waits for ``torch`` to be imported (a meta-path finder; torch is never
  imported by the hook itself), then registers the global optimizer step
  post-hook (``torch.optim.optimizer.register_optimizer_step_post_hook``) and
  wraps ``torch.Tensor.backward`` to see the loss;
* after each optimizer step writes a JSON marker (``<pid>.json`` in the marker
  directory: steps, time of each step, peak RSS, peak CUDA memory, optimizer
  state size, last losses) and, after ``GPULENS_VALIDATE_STEPS`` steps, flushes
  stdio and ends the process with ``os._exit(STOP_EXIT_CODE)``; a non-finite
  loss ends it at once with ``DIVERGED_EXIT_CODE``.

Finally it chains to the job's own ``sitecustomize``, if it has one.
Only the standard library is used, and nothing here may raise into the job.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import os
import resource
import sys
import time
import traceback
from types import ModuleType, TracebackType
from typing import Any

__all__ = ["DIVERGED_EXIT_CODE", "STOP_EXIT_CODE"]

#: Exit status of a process the hook ended after the requested steps.
STOP_EXIT_CODE = 86
#: Exit status of a process the hook ended because the loss was not finite.
DIVERGED_EXIT_CODE = 87

_ENV_DIR = "GPULENS_VALIDATE_MARKER_DIR"
_ENV_STEPS = "GPULENS_VALIDATE_STEPS"
_ENV_INPUTS = "GPULENS_VALIDATE_INPUTS"
_HERE = os.path.dirname(os.path.abspath(__file__))


class _State:
    def __init__(self, marker_dir: str, steps: int, inputs: list[str]) -> None:
        self.marker_dir = marker_dir
        self.target = steps
        self.inputs = {os.path.realpath(p) for p in inputs if p}
        self.pid = os.getpid()
        self.started = time.time()
        self.torch_at: float | None = None
        self.steps = 0
        self.step_times: list[float] = []
        self.losses: list[float] = []
        self.nonfinite: dict[str, Any] | None = None
        self.cuda = False
        self.peak_cuda = 0
        self.optimizer_state_bytes = 0
        self.inputs_opened: list[str] = []
        self.exception: dict[str, Any] | None = None
        self.stopped: str | None = None

    def after_fork(self) -> None:
        """A forked child (e.g. a DataLoader worker) starts its own record."""
        self.pid = os.getpid()
        self.started = time.time()
        self.steps = 0
        self.step_times = []
        self.losses = []
        self.inputs_opened = []
        self.exception = None
        self.stopped = None

    def write(self) -> None:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        data = {
            "pid": self.pid,
            "argv": sys.argv[:8],
            "started": self.started,
            "torch_at": self.torch_at,
            "steps": self.steps,
            "step_times": self.step_times[-64:],
            "losses": self.losses[-16:],
            "nonfinite": self.nonfinite,
            "cuda": self.cuda,
            "peak_cuda_bytes": self.peak_cuda,
            "peak_rss_bytes": rss,
            "optimizer_state_bytes": self.optimizer_state_bytes,
            "inputs_opened": self.inputs_opened,
            "exception": self.exception,
            "stopped": self.stopped,
            "written": time.time(),
        }
        path = os.path.join(self.marker_dir, f"{self.pid}.json")
        tmp = path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
            os.replace(tmp, path)
        except OSError:
            pass

    def finish(self, reason: str, code: int) -> None:
        self.stopped = reason
        self.write()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _tensor_bytes(obj: Any, torch: ModuleType) -> int:
    if isinstance(obj, torch.Tensor):
        return int(obj.numel() * obj.element_size())
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, torch) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(_tensor_bytes(v, torch) for v in obj)
    return 0


def _on_torch(torch: ModuleType, state: _State) -> None:
    """Install the step hook and the loss watch once torch has been imported."""
    import torch.optim.optimizer as optimizer_mod

    state.torch_at = time.time()

    def step_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            state.steps += 1
            state.step_times.append(time.time())
            if state.steps == 1 or state.steps == state.target:
                total = 0
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        total += _tensor_bytes(p, torch)
                        if p.grad is not None:
                            total += _tensor_bytes(p.grad, torch)
                total += _tensor_bytes(list(optimizer.state.values()), torch)
                state.optimizer_state_bytes = max(state.optimizer_state_bytes, total)
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                state.cuda = True
                state.peak_cuda = max(state.peak_cuda, int(torch.cuda.max_memory_allocated()))
            state.write()
        except Exception:
            return
        if state.target > 0 and state.steps >= state.target:
            state.finish("steps", STOP_EXIT_CODE)

    optimizer_mod.register_optimizer_step_post_hook(step_hook)

    original_backward = torch.Tensor.backward

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if self.numel() == 1:
                value = float(self.detach().float().item())
                state.losses.append(value)
                del state.losses[:-16]
                if not math.isfinite(value):
                    state.nonfinite = {"step": state.steps, "value": repr(value)}
        except Exception:
            pass
        if state.nonfinite is not None:
            print(
                f"gpulens validate: loss is {state.nonfinite['value']} after "
                f"{state.steps} optimizer step(s); stopping the dry run",
                file=sys.stderr,
            )
            state.finish("nonfinite_loss", DIVERGED_EXIT_CODE)
        return original_backward(self, *args, **kwargs)

    torch.Tensor.backward = backward
    state.write()


class _TorchWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself; when ``torch`` is imported, runs the setup right after it."""

    def __init__(self, state: _State) -> None:
        self.state = state

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec("torch")
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        state = self.state

        def exec_module(module: ModuleType) -> None:
            original(module)
            try:
                _on_torch(module, state)
            except Exception as exc:
                print(f"gpulens validate: step hook not installed ({exc})", file=sys.stderr)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _install(state: _State) -> None:
    os.register_at_fork(after_in_child=state.after_fork)
    previous = sys.excepthook

    def excepthook(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        try:
            frames = traceback.extract_tb(tb)[-6:]
            state.exception = {
                "type": f"{exc_type.__module__}.{exc_type.__qualname__}",
                "message": str(exc)[:2000],
                "frames": [[f.filename, f.lineno, f.name] for f in frames],
            }
            state.write()
        except Exception:
            pass
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook

    if state.inputs:
        inputs = state.inputs

        def audit(event: str, args: tuple[Any, ...]) -> None:
            if event == "open" and args and isinstance(args[0], str | bytes):
                try:
                    name = os.fsdecode(args[0])
                    real = os.path.realpath(name)
                    if real in inputs or any(real.startswith(p + os.sep) for p in inputs):
                        if real not in state.inputs_opened:
                            state.inputs_opened.append(real)
                except Exception:
                    pass

        sys.addaudithook(audit)

    if "torch" in sys.modules:  # imported by a .pth file before us
        _on_torch(sys.modules["torch"], state)
    else:
        sys.meta_path.insert(0, _TorchWatcher(state))


def _chain() -> None:
    """Run the job's own sitecustomize, which this file shadows."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _main() -> None:
    marker_dir = os.environ.get(_ENV_DIR)
    if marker_dir:
        try:
            steps = int(os.environ.get(_ENV_STEPS, "0") or 0)
        except ValueError:
            steps = 0
        inputs = [p for p in os.environ.get(_ENV_INPUTS, "").split(os.pathsep) if p]
        try:
            _install(_State(marker_dir, steps, inputs))
        except Exception as exc:
            print(f"gpulens validate: start-up hook failed ({exc})", file=sys.stderr)
    try:
        _chain()
    except Exception:
        traceback.print_exc()


_main()
