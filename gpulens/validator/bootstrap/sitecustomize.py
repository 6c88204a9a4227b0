"""Start-up hook injected into a job's dry run by ``gpulens validate``.

Python imports ``sitecustomize`` at start-up from the first directory of
``sys.path`` that has one; the validator puts this file's directory first on the
child's ``PYTHONPATH``, so the job's own code stays untouched. The hook is a
no-op unless ``GPULENS_VALIDATE_MARKER_DIR`` is set.

What it does, in every Python process of the job:

* records an uncaught exception (type, message, innermost frames with their
  source lines) and, when the validator declared inputs, which of them the
  process opened (audit hook);
* waits for ``torch`` to be imported (a meta-path finder; torch is never
  imported by the hook itself), then counts training steps by two signals:
  the global optimizer step pre/post-hooks (``torch.optim.optimizer``), and,
  for programs without ``torch.optim``, a completed backward pass
  (``torch.Tensor.backward`` / ``torch.autograd.backward`` wrapped) followed by
  a change of the graph's leaf tensors (see ``_Autograd``); the wrappers also
  read scalar losses;
* after each step writes a JSON marker (``<pid>.json`` in the marker
  directory: steps and which signal counted them, backward passes, time of each
  step, peak RSS, peak CUDA memory, optimizer state size, last losses) and,
  after ``GPULENS_VALIDATE_STEPS`` steps, flushes stdio and ends the process
  with ``os._exit(STOP_EXIT_CODE)``; a non-finite loss ends it at once with
  ``DIVERGED_EXIT_CODE``.

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
import threading
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
        self.optimizer_steps = 0
        self.update_steps = 0
        self.backward_passes = 0
        self.signal: str | None = None
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
        self.optimizer_steps = 0
        self.update_steps = 0
        self.backward_passes = 0
        self.signal = None
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
            "optimizer_steps": self.optimizer_steps,
            "update_steps": self.update_steps,
            "backward_passes": self.backward_passes,
            "signal": self.signal,
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

    def step(self, signal: str) -> None:
        """One training step seen by ``signal`` ("optimizer" or "autograd")."""
        if signal == "optimizer":
            self.optimizer_steps += 1
            if self.signal != "optimizer":  # optimizer steps, once seen, are the count
                self.signal = "optimizer"
                self.steps = 0
                self.step_times = []
        else:
            self.update_steps += 1
            if self.signal == "optimizer":
                return
            self.signal = "autograd"
        self.steps += 1
        self.step_times.append(time.time())
        self.write()
        if self.target > 0 and self.steps >= self.target:
            self.finish("steps", STOP_EXIT_CODE)

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


_MAX_LEAVES = 512
_SAMPLE = 8


class _Autograd:
    """Training steps without ``torch.optim``: a completed backward pass, then a parameter change.

    Before each backward pass the leaves of its graph (the tensors gradients
    accumulate into: the parameters) are collected; after it, a fingerprint of
    them is kept (data pointer, version counter, a few sampled values). At the
    next backward pass, a changed fingerprint means the parameters were updated
    (``p -= lr * p.grad`` under ``no_grad``, ``p.data.add_(...)``, ``p.data = ...``,
    or any optimizer): one step. Backward passes inside an optimizer's ``step``
    (an LBFGS closure) are the optimizer's, not steps of their own. Once an
    optimizer step has been seen, that signal counts and this one stops looking.
    """

    def __init__(self, torch: ModuleType, state: _State) -> None:
        self.torch = torch
        self.state = state
        self.in_optimizer = 0
        self.leaves: list[Any] = []
        self.print: list[tuple[Any, int, int]] | None = None
        self.values: Any = None

    def watching(self) -> bool:
        return self.state.optimizer_steps == 0 and self.in_optimizer == 0

    def collect(self, roots: Any) -> None:
        tensors = [roots] if isinstance(roots, self.torch.Tensor) else list(roots or [])
        seen: set[int] = set()
        stack = [t.grad_fn for t in tensors if isinstance(t, self.torch.Tensor)]
        leaves = [t for t in tensors if isinstance(t, self.torch.Tensor) and t.grad_fn is None and t.requires_grad]
        while stack and len(leaves) < _MAX_LEAVES and len(seen) < 200_000:
            fn = stack.pop()
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            var = getattr(fn, "variable", None)
            if var is not None:
                leaves.append(var)
                continue
            stack.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)
        self.leaves = leaves

    def _sample(self, tensors: list[Any]) -> Any:
        torch = self.torch
        parts = []
        with torch.no_grad():
            for p in tensors:
                t = p.detach()
                if t.numel() == 0 or not t.is_contiguous() or not (t.is_floating_point() or t.is_complex()):
                    continue
                flat = t.view(-1)
                stride = max(1, flat.numel() // _SAMPLE)
                parts.append(flat[::stride][:_SAMPLE].real.float())
            if not parts:
                return None
            try:  # one device-to-host copy (one sync on a GPU), not one per tensor
                return torch.cat(parts).cpu()
            except RuntimeError:  # tensors on several devices
                return torch.cat([part.cpu() for part in parts])

    def snapshot(self) -> None:
        self.print = [(p, p.data_ptr(), p._version) for p in self.leaves]
        self.values = self._sample(self.leaves)

    def changed(self) -> bool:
        if not self.print:
            return False
        for p, ptr, version in self.print:
            if p.data_ptr() != ptr or p._version != version:
                return True
        now = self._sample([p for p, _, _ in self.print])
        if now is None or self.values is None:
            return False
        return bool(now.shape != self.values.shape or not self.torch.equal(now, self.values))

    def before(self, roots: Any) -> None:
        if not self.watching():
            self.print = None
            return
        if self.changed():
            self.print = None
            self.state.step("autograd")
        self.collect(roots)

    def after(self) -> None:
        self.state.backward_passes += 1
        if self.watching() and self.leaves:
            self.snapshot()
        self.leaves = []


def _record_loss(state: _State, roots: Any, torch: ModuleType) -> None:
    try:
        if isinstance(roots, torch.Tensor) and roots.numel() == 1:
            value = float(roots.detach().float().item())
            state.losses.append(value)
            del state.losses[:-16]
            if not math.isfinite(value):
                state.nonfinite = {"step": state.steps, "value": repr(value)}
    except Exception:
        pass
    if state.nonfinite is not None:
        print(
            f"gpulens validate: loss is {state.nonfinite['value']} after "
            f"{state.steps} training step(s); stopping the dry run",
            file=sys.stderr,
        )
        state.finish("nonfinite_loss", DIVERGED_EXIT_CODE)


def _wrap_backward(original: Any, watch: _Autograd, local: threading.local, method: bool) -> Any:
    """``Tensor.backward`` calls ``torch.autograd.backward``: only the outer call counts."""

    def backward(*args: Any, **kwargs: Any) -> Any:
        if getattr(local, "depth", 0):
            return original(*args, **kwargs)
        roots = args[0] if args else kwargs.get("self" if method else "tensors")
        local.depth = 1
        try:
            _record_loss(watch.state, roots, watch.torch)
            try:
                watch.before(roots)
            except Exception:
                watch.leaves = []
            result = original(*args, **kwargs)
            try:
                watch.after()
            except Exception:
                watch.leaves = []
            return result
        finally:
            local.depth = 0

    backward.__wrapped__ = original  # type: ignore[attr-defined]
    return backward


def _on_torch(torch: ModuleType, state: _State) -> None:
    """Install the step hooks and the loss watch once torch has been imported."""
    import torch.optim.optimizer as optimizer_mod
    from torch import autograd

    state.torch_at = time.time()
    watch = _Autograd(torch, state)

    def pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        watch.in_optimizer += 1

    def step_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        watch.in_optimizer = max(0, watch.in_optimizer - 1)
        try:
            if state.optimizer_steps == 0 or state.optimizer_steps + 1 == state.target:
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
        except Exception:
            pass
        state.step("optimizer")

    optimizer_mod.register_optimizer_step_pre_hook(pre_hook)
    optimizer_mod.register_optimizer_step_post_hook(step_hook)
    local = threading.local()
    torch.Tensor.backward = _wrap_backward(torch.Tensor.backward, watch, local, True)
    autograd.backward = _wrap_backward(autograd.backward, watch, local, False)
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
            frames = traceback.extract_tb(tb)[-12:]
            state.exception = {
                "type": f"{exc_type.__module__}.{exc_type.__qualname__}",
                "message": str(exc)[:2000],
                "frames": [[f.filename, f.lineno, f.name, (f.line or "")[:300]] for f in frames],
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
