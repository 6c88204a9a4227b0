"""Signs that the training loop ran where the log prints no step line (P2).

Warnings that only a training step prints, NCCL's first gradient collectives timing out, a scheduler's
wall-time kill, wandb's run history, losses printed alone on their lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.lines import last_matching

__all__ = ["KILL_AFTER", "OUT_OF_TIME", "STEP_WARNINGS", "first_collective", "footer_above", "logged_history",
           "printed_losses", "stepped"]


#: Warnings PyTorch prints only once a training step has run or is running (each once per process): DDP's reducer
#: after the first backward ("Reducer buckets have been rebuilt in this iteration", "Grad strides do not match bucket
#: view strides", "find_unused_parameters=True was specified in DDP constructor, but did not find any
#: unused parameters in the forward pass"), a loss's shape warning in its forward (``torch/nn/modules/
#: loss.py``: "Using a target size (...) that is different to the input size"), anomaly mode's "Error
#: detected in XBackward0", activation checkpointing's forward ("None of the inputs have
#: requires_grad=True"). Not the scheduler's "Detected call of `lr_scheduler.step()` before
#: `optimizer.step()`": a resumed run that fast-forwards its scheduler prints it while setting up.
STEP_WARNINGS = ("Reducer buckets have been rebuilt", "rad strides do not match bucket",
                  "but did not find any unused parameters", "Using a target size", "Error detected in ",
                  "None of the inputs have requires_grad",
                  # the source line Python's ``warnings`` shows for a warning raised while autograd's engine runs a
                  # backward pass (``torch/autograd/graph.py`` ``_engine_run_backward``; ``torch/autograd/__init__.py``
                  # before 2.3): "  return Variable._execution_engine.run_backward(  # Calls into the C++ engine ..."
                  "Variable._execution_engine.run_backward(",
                  # ProcessGroupNCCL's warning at the first unbatched send/recv (``ProcessGroupNCCL.cpp``, ``TORCH_WARN_ONCE``:
                  # "An unbatched P2P op (send/recv) was called on this ProcessGroup with size N. In eager initialization
                  # mode, ..."): a pipeline stage or an MoE layer exchanging activations, the first step's forward
                  "An unbatched P2P op (send/recv) was called",
                  # a device-side assertion in ATen's loss kernels (``aten/src/ATen/native/cuda/Loss.cu``: binary_cross_entropy's
                  # "Assertion `target_val >= zero && target_val <= one` failed.", nll_loss's "Assertion `t >= 0 && t <
                  # n_classes` failed."; ``NLLLoss2d.cu``, ``MultiMarginCriterion.cu``, ``MultiLabelMarginCriterion.cu``):
                  # printed by the kernel that computes a loss, i.e. in a step's forward
                  "Loss.cu:", "NLLLoss2d.cu:", "MarginCriterion.cu:")


def stepped(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the failing program printed a warning that only a training step prints
    (:data:`STEP_WARNINGS`) before ``top``: it got as far as its first step."""
    return bool(last_matching(lines, STEP_WARNINGS, lambda ln: "Error detected in " not in ln or "Backward" in ln,
                              floor, top))


#: A scheduler's kill for the job's wall-time limit (Slurm, LSF, PBS/Torque, SGE): the job ran for its
#: whole allocation (hours), which a program still starting up does not.
OUT_OF_TIME = Guarded(r"DUE TO TIME LIMIT|TERM_RUNLIMIT|walltime \S+ exceeded limit|h_rt limit|[Tt]ime limit (?:was )?exceeded",
                       ("TIME LIMIT", "RUNLIMIT", "walltime", "h_rt", "ime limit"))
#: Lines after a failure read for the scheduler's verdict (an LSF report follows the program's last
#: words by about 40 lines).
KILL_AFTER = 60


#: A wandb run history's sparkline (``wandb:      loss ▄▅▇▄▄█▆▁▄▇``): one block per logged point.
_SPARKLINE = re.compile("[\u2581-\u2588]{3,}")


def logged_history(after: Sequence[str]) -> bool:
    """Whether wandb's "Run history:" printed at the process's exit (after the failure) holds a
    metric logged three times or more: the run had done training steps although it printed none."""
    return any(ln.startswith("wandb:") and ("\u2581" in ln or "\u2588" in ln) and _SPARKLINE.search(ln) for ln in after)


def footer_above(lines: Sequence[str], floor: int, top: int) -> Sequence[str]:
    """The block of wandb's exit lines (``wandb: ...``, blank lines between) printed just above ``top``:
    its footer (``wandb/sdk/wandb_run.py``'s run history and summary) written at the same exit as the
    traceback below it, on stdout while the traceback went to stderr, one stream flushed before the other."""
    k = top
    while k > floor and (not lines[k - 1].strip() or lines[k - 1].startswith("wandb:")):
        k -= 1
    return lines[k:top]


#: A value printed alone on its line, as ``print(loss.item())`` or ``print(loss)`` does once a step
#: ("0.0632455", "tensor(0.0632, device='cuda:0', grad_fn=<NllLossBackward0>)").
_BARE_VALUE = re.compile(r"^\s*(?:tensor\(\s*)?[-+]?\d*\.\d+(?:[eE][-+]?\d+)?(?:\s*$|,\s*device=|,\s*grad_fn=|\))")
#: Bare values among the last lines before a failure that show a loop printing its loss.
_BARE_LINES, _BARE_ENOUGH = 12, 6


def printed_losses(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the last lines before ``top`` are mostly values printed alone (a loss a step), or a C++ program printed
    its loss as libtorch prints a tensor (:func:`_libtorch_loss`)."""
    recent = [ln for ln in lines[max(floor, top - 3 * _BARE_LINES):top] if ln.strip()][-_BARE_LINES:]
    return sum(1 for ln in recent if _BARE_VALUE.match(ln)) >= _BARE_ENOUGH or _libtorch_loss(lines, floor, top)


#: The type line libtorch prints under a tensor's values (``aten/src/ATen/core/Formatting.cpp``, ``print``: a 0-dim
#: tensor prints its value, then ``"[ " << toString() << "{}" << " ]"``; "[ CPUFloatType{} ]", "[ CUDAFloatType{} ]",
#: "[ MPSFloatType{} ]"), so ``std::cout << "Step Loss:\n" << loss`` prints "Step Loss:", "10.8612", "[ MPSFloatType{} ]".
_TENSOR_TYPE = re.compile(r"^\[ \w+Type\{\} \]\s*$")
_TYPE_KEY = "Type{} ]"
#: A label naming a loss, its value on the lines after it ("Step Loss:", "loss =").
_LOSS_LABEL = re.compile(r"(?i)\bloss\s*[:=]?\s*$")
_NUMBER_ALONE = re.compile(r"^\s*[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?\s*$")
#: Lines above a failure searched for libtorch's print of a loss.
_LIBTORCH_BACK = 2000


def _libtorch_loss(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether a loss was printed above ``top`` the way libtorch prints a scalar tensor (:data:`_TENSOR_TYPE`): its label
    line, its value alone, its type line. A training loop prints its loss after the step's forward and backward (P2 (b))."""
    def printed(k: int) -> bool:
        return k >= floor + 2 and _TENSOR_TYPE.match(lines[k]) is not None \
            and _NUMBER_ALONE.match(lines[k - 1]) is not None and _LOSS_LABEL.search(lines[k - 2]) is not None
    return any(printed(k) for k in find_keys(lines, (_TYPE_KEY,), max(floor, top - _LIBTORCH_BACK), top))


#: NCCL's watchdog naming the collective it timed out on, with its sequence number.
_NCCL_WORK = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(?:ALLREDUCE|_?ALLGATHER\w*|_?REDUCE_SCATTER\w*)")


def first_collective(region: Sequence[str]) -> bool:
    """Whether NCCL timed out on one of the first gradient collectives (an all-reduce, an
    all-gather or a reduce-scatter with sequence number 0-2: set-up only broadcasts), i.e. in
    the backward pass of the first step."""
    for ln in region:
        if "WorkNCCL(" in ln:
            m = _NCCL_WORK.search(ln)
            if m and int(m.group(1)) <= 2:
                return True
    return False
