"""A C++ exception that ends the process prints c10's backtrace after it ("Exception raised from ... (most recent
call first):", then "frame #N: function + offset (0x... in lib)"; c10/util/Exception.cpp, Backtrace.cpp). Those
lines are neither the job's output going on nor progress (a frame naming ``cross_entropy_loss`` holds the word
"loss"): the run failed. libc++'s "libc++abi: terminating due to uncaught exception of type ..." (macOS) is the
counterpart of libstdc++'s "terminate called after throwing". Excerpts written for the test."""

from __future__ import annotations

from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.lines import is_progress

_STEPS = [f"step {i} | loss {3.0 - i / 100:.3f} | lr 3e-4" for i in range(1, 40)]
_FRAMES = [f"frame #{k}: at::cross_entropy_loss(at::Tensor const&, long long, double) + {100 + k} "
           f"(0x11976{k:04d} in libtorch_cpu.dylib)" for k in range(30)]


def _crash(head: str) -> str:
    return "\n".join([*_STEPS, head,
                      "Exception raised from alloc_buffer_block at /Users/runner/work/pytorch/pytorch/aten/src/ATen/"
                      "mps/MPSAllocator.mm:286 (most recent call first):", *_FRAMES, "", "[DISPATCH] aten::matmul"]) + "\n"


def test_an_uncaught_c10_error_followed_by_its_backtrace_is_the_failure() -> None:
    text = _crash("libc++abi: terminating due to uncaught exception of type c10::Error: MPS backend out of memory "
                  "(MPS allocated: 18.69 GiB, other allocations: 794.72 MiB, max allowed: 20.13 GiB). Tried to "
                  "allocate 785.00 MiB on private pool.")
    w = diagnose_text(text)
    assert w.diagnosis.category == "gpu_oom" and w.indicator_lines == [len(_STEPS) + 1]


def test_libcxx_terminating_is_a_failure_line_whatever_the_exception() -> None:
    w = diagnose_text(_crash("libc++abi: terminating due to uncaught exception of type std::runtime_error: "
                             "shard index 12 is past the end of the manifest"))
    assert w.diagnosis.category != "none" and w.indicator_lines == [len(_STEPS) + 1]


def test_a_backtrace_frame_is_not_progress() -> None:
    assert not is_progress(_FRAMES[3]) and is_progress(_STEPS[3])
