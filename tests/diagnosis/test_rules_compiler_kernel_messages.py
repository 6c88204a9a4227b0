"""Round 20 (library sweep E, compilers and kernels): messages that end a training or fine-tuning job, read from
the libraries' sources (torch 2.13.0 torch._dynamo/torch._inductor, triton 3.9.0, flash-attn 2.8.4 at git 0251105,
xformers 0.0.35, bitsandbytes 0.50.2, apex at git 6424da3, transformer_engine 2.20.2, vLLM formats found with
find_string in its sources), each in a small excerpt written for the test in the library's format (the raise site is
named in each case), not copied from a log. The whole sweep is in docs/library-sweeps/r20-e.csv; the cases marked
`left` there are answered otherwise (see the CSV's note) and are not asserted here."""

from __future__ import annotations

from typing import Any

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()

SP = "/usr/local/lib/python3.11/site-packages"
START = ["2026-11-20 10:01:02 | INFO | train | world_size=1 model=llama-3-8b seq_len=4096 micro_bs=4",
         "2026-11-20 10:01:03 | INFO | train | building model and optimizer",
         "2026-11-20 10:01:40 | INFO | train | step 0 starting"]


def ex(call: str, frames: list[tuple[str, str, str]], error: list[str], pre: tuple[str, ...] | list[str] = ()) -> str:
    lines = [*START, *pre, "Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 212, in <module>',
             "    main()", '  File "/home/u/proj/train.py", line 150, in main', f"    {call}"]
    for path, func, code in frames:
        lines += [f'  File "{path if path.startswith("/") else SP + "/" + path}", line 100, in {func}', f"    {code}"]
    return "\n".join([*lines, *error]) + "\n"


def plain(lines: list[str], pre: tuple[str, ...] | list[str] = ()) -> str:
    return "\n".join([*START, *pre, *lines]) + "\n"


TV = "2.13.0"
TR = "3.9.0"
FA = "2.8.4 (git 0251105)"
XF = "0.0.35"
BNB = "0.50.2"
APEX = "git 6424da3"
TE = "2.20.2"
VL = "git (forks, find_string)"

_DYN = [("torch/_dynamo/eval_frame.py", "compile_wrapper", "return fn(*args, **kwargs)"),
        ("torch/_dynamo/convert_frame.py", "__call__", "result = self._inner_convert(")]
_IND = _DYN + [("torch/_dynamo/output_graph.py", "call_user_compiler", "raise BackendCompilerFailed(")]
_TRI = [("torch/_inductor/runtime/triton_heuristics.py", "precompile", "self._precompile_worker()"),
        ("triton/compiler/compiler.py", "_init_handles", "raise_(OutOfResources(self.metadata.shared, max_shared, \"shared memory\"))")]

C: list[dict[str, Any]] = []


def add(lib: str, ver: str, where: str, msg: str, text: str, cat: str, org: str, note: str = "", left: str = "") -> None:
    C.append(dict(lib=lib, ver=ver, where=where, msg=msg, text=text, cat=cat, org=org, note=note, left=left))


# ---------------- torch.compile (dynamo / inductor) ----------------
m = ("torch._inductor.exc.InductorError: OutOfResources: out of resource: shared memory, Required: 232448, "
     "Hardware limit: 101376. Reducing block sizes or `num_stages` may help.")
add("torch", TV, "_inductor/exc.py:InductorError (triton OutOfResources in an inductor kernel)", m,
    ex("loss = model(batch).loss", _IND, [m, "", "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug to PyTorch). For even more developer context, set TORCH_LOGS=\"+dynamo\""]),
    "cuda_error", "framework")
m = "torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, 'g++')"
add("torch", TV, "_inductor/exc.py:InvalidCxxCompiler", m,
    ex("loss = model(batch).loss", _IND, [m]), "import_error", "user", "toolchain missing, as r18 files CppCompileError")
m = "torch._inductor.exc.InductorError: RuntimeError: Failed to find C compiler. Please specify via CC environment variable or set triton.knobs.build.impl."
add("triton", TR, "runtime/build.py:_build (no C compiler, under inductor)", m,
    ex("loss = model(batch).loss", _IND + [("triton/runtime/build.py", "_build", "raise RuntimeError(")], [m]),
    "import_error", "user", "toolchain missing")
m = "RuntimeError: Failed to find C compiler. Please specify via CC environment variable or set triton.knobs.build.impl."
add("triton", TR, "runtime/build.py:_build (no C compiler, own kernel)", m,
    ex("y = fused_rmsnorm(x, w)", [("/home/u/proj/kernels/rmsnorm.py", "fused_rmsnorm", "_rmsnorm_kernel[grid](x, w, y, n)"),
                                   ("triton/runtime/jit.py", "run", "kernel = self._do_compile(key, signature, device, constexprs, options, attrs, warmup)"),
                                   ("triton/runtime/build.py", "_build", "raise RuntimeError(")], [m]),
    "import_error", "user", "toolchain missing")
m = "RuntimeError: torch.compile is not supported on Python 3.15+"
add("torch", TV, "__init__.py:compile (Python version)", m,
    ex("model = torch.compile(model)", [("torch/__init__.py", "compile", "raise RuntimeError(\"torch.compile is not supported on Python 3.15+\")")], [m]),
    "import_error", "user", "version requirement of the environment (C9)")
m = "RuntimeError: Python 3.15+ not yet supported for torch.compile"
add("torch", TV, "_dynamo/eval_frame.py:check_if_dynamo_supported", m,
    ex("model = torch.compile(model)", [("torch/_dynamo/eval_frame.py", "check_if_dynamo_supported", "raise RuntimeError(\"Python 3.15+ not yet supported for torch.compile\")")], [m]),
    "import_error", "user", "version requirement of the environment (C9)")
m = ("torch._inductor.exc.InductorError: CompilationError: at 14:4:\n    xmask = xindex < xnumel\n    tmp0 = tl.load(in_ptr0 + (x0), xmask)\n    ^\nValueError('unsupported tensor index: int64[]')")
add("triton", TR, "compiler/errors.py:CompilationError (inductor-generated kernel)", "torch._inductor.exc.InductorError: CompilationError: at 14:4: ...",
    ex("loss = model(batch).loss", _IND, m.split("\n")), "crash", "framework", "compiler's own kernel failing to compile (rule torch-compiler-internal-error)")
m = "triton.compiler.errors.CompilationError: at 12:8:"
add("triton", TR, "compiler/code_generator.py:visit (user's own @triton.jit kernel)", m + " ... NameError('BLOCK is not defined')",
    ex("y = fused_rmsnorm(x, w)", [("/home/u/proj/kernels/rmsnorm.py", "fused_rmsnorm", "_rmsnorm_kernel[grid](x, w, y, n, BLOCK_SIZE=1024)"),
                                   ("triton/runtime/jit.py", "run", "kernel = self._do_compile(key, signature, device, constexprs, options, attrs, warmup)"),
                                   ("triton/compiler/compiler.py", "compile", "module = src.make_ir(target, options, codegen_fns, module_map, context)"),
                                   ("triton/compiler/compiler.py", "make_ir", "return ast_to_ttir(self.fn, self, context=context, options=options, codegen_fns=codegen_fns,")],
       [m, "def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):", "    row = tl.program_id(0)",
        "    offs = tl.arange(0, BLOCK)", "        ^", "NameError('BLOCK is not defined')"]),
    "semantic_error", "user", "the job's own kernel code")
m = ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 196608, Hardware limit: 101376. "
     "Reducing block sizes or `num_stages` may help.")
add("triton", TR, "compiler/compiler.py:_init_handles (library kernel, consumer GPU)", m,
    ex("out = model(input_ids=ids, labels=labels)", [("flash_attn/flash_attn_triton.py", "forward", "o, lse, ctx.softmax_scale = _flash_attn_forward("),
                                                      ("triton/runtime/jit.py", "run", "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata,"),
                                                      ("triton/compiler/compiler.py", "__getattribute__", "self._init_handles()"),
                                                      ("triton/compiler/compiler.py", "_init_handles", "raise_(OutOfResources(self.metadata.shared, max_shared, \"shared memory\"))")], [m]),
    "cuda_error", "framework")
m = "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error"
add("triton", TR, "backends/nvidia/compiler.py:make_cubin (ptxas too old for the GPU)", m + " / ptxas fatal : Value 'sm_120a' is not defined for option 'gpu-name'",
    ex("loss = model(batch).loss", _IND + [("triton/backends/nvidia/compiler.py", "make_cubin", "raise PTXASError(error)")],
       ["torch._inductor.exc.InductorError: PTXASError: PTXAS error: Internal Triton PTX codegen error",
        "`ptxas` stderr:", "ptxas fatal   : Value 'sm_120a' is not defined for option 'gpu-name'", "",
        "Repro command: /usr/local/lib/python3.11/site-packages/triton/backends/nvidia/bin/ptxas -lineinfo -v --gpu-name sm_120a /tmp/tmpx.ptx -o /tmp/tmpx.ptx.o"]),
    "cuda_env_error", "user", "the environment's ptxas/toolkit does not know the device (build without kernels for the device, C7)")
m = "RuntimeError: 0 active drivers ([]). There should only be one."
add("triton", TR, "runtime/driver.py:_create_driver (no GPU driver visible)", m,
    ex("y = fused_rmsnorm(x, w)", [("/home/u/proj/kernels/rmsnorm.py", "fused_rmsnorm", "_rmsnorm_kernel[grid](x, w, y, n)"),
                                   ("triton/runtime/jit.py", "run", "device = driver.active.get_current_device()"),
                                   ("triton/runtime/driver.py", "_create_driver", "raise RuntimeError(f\"{len(active_drivers)} active drivers ({active_drivers}). There should only be one.\")")], [m]),
    "cuda_env_error", "unknown", "no CUDA device/driver visible to triton; whose environment not shown")
m = "AssertionError: libcuda.so cannot found!"
add("triton", TR, "backends/nvidia/driver.py:libcuda_dirs", m,
    ex("loss = model(batch).loss", _IND + [("triton/backends/nvidia/driver.py", "libcuda_dirs", "assert any(os.path.exists(os.path.join(path, 'libcuda.so.1')) for path in dirs), msg")],
       ["torch._inductor.exc.InductorError: AssertionError: libcuda.so cannot found!",
        "Possible files are located at ['/usr/lib/x86_64-linux-gnu/libcuda.so.1'].Please create a symlink of libcuda.so to any of the files."]),
    "cuda_env_error", "unknown", "CUDA driver library not found (C2); the job's container or the node: the message does not tell")

m = ("RuntimeError: Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run. Stack trace: "
     "File \"/home/u/proj/model.py\", line 88, in forward")
add("torch", TV, "_inductor/cudagraph_trees.py:_check_liveness / format_dealloc_msg (mode='reduce-overhead')", m,
    ex("loss = criterion(logits, labels)", [("torch/_inductor/cudagraph_trees.py", "__torch_dispatch__", "raise RuntimeError(self.format_dealloc_msg(stack_trace))")],
       [m, "    return self.head(h). To prevent overwriting, clone the tensor outside of torch.compile() or call "
        "torch.compiler.cudagraph_mark_step_begin() before each model invocation."]),
    "semantic_error", "user", "the job keeps a CUDA-graph output across runs (C4)")

# ---------------- flash-attn ----------------
_FA = [("transformers/models/llama/modeling_llama.py", "forward", "attn_output, attn_weights = attention_interface("),
       ("transformers/integrations/flash_attention.py", "flash_attention_forward", "attn_output = _flash_attention_forward("),
       ("flash_attn/flash_attn_interface.py", "_flash_attn_forward", "out, softmax_lse, S_dmask, rng_state = flash_attn_gpu.fwd(")]
for cpp_msg, cat, org, note in [
        ("FlashAttention only supports Ampere GPUs or newer.", "cuda_env_error", "infrastructure", "existing rule flash-attention-gpu-arch (origin as that rule)"),
        ("FlashAttention forward only supports head dimension at most 256", "semantic_error", "user", "model config exceeds the kernel's limit"),
        ("FlashAttention only support fp16 and bf16 data type", "semantic_error", "user", "job runs attention in fp32"),
        ("query, key, value, and out_ must have a head_size that is a multiple of 8", "semantic_error", "user", ""),
        ("Number of heads in key/value must divide number of heads in query", "semantic_error", "user", "")]:
    add("flash-attn", FA, "csrc/flash_attn/flash_api.cpp:mha_fwd (TORCH_CHECK)", "RuntimeError: " + cpp_msg,
        ex("out = model(input_ids=ids, labels=labels)", _FA, ["RuntimeError: " + cpp_msg]), cat, org, note)
m = "ImportError: /usr/local/lib/python3.11/site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
add("flash-attn", FA, "flash_attn_interface.py:import flash_attn_2_cuda (ABI mismatch)", m,
    ex("from flash_attn import flash_attn_func", [("flash_attn/__init__.py", "<module>", "from flash_attn.flash_attn_interface import ("),
                                                  ("flash_attn/flash_attn_interface.py", "<module>", "import flash_attn_2_cuda as flash_attn_gpu")], [m]),
    "import_error", "user")
m = "RuntimeError: FlashAttention is only supported on CUDA 11.7 and above.  Note: make sure nvcc has a supported version by running nvcc -V."
add("flash-attn", FA, "setup.py (build from source, nvcc too old)", m,
    plain(["Collecting flash-attn==2.8.3", "  Downloading flash_attn-2.8.3.tar.gz (8.4 MB)", "  Preparing metadata (setup.py): started",
           "  Preparing metadata (setup.py): finished with status 'error'", "  error: subprocess-exited-with-error", "  ",
           "  × python setup.py egg_info did not run successfully.", "  │ exit code: 1", "  ╰─> [12 lines of output]",
           "      Traceback (most recent call last):", '        File "/tmp/pip-install-x/flash-attn_1/setup.py", line 296, in <module>',
           "          raise RuntimeError(", "      " + m, "      ", "      torch.__version__  = 2.5.1+cu118", "      [end of output]"]),
    "cuda_env_error", "user", "CUDA toolkit too old to build (C2/C7)")

# ---------------- xformers ----------------
_XF = [("diffusers/models/attention_processor.py", "__call__", "hidden_states = xformers.ops.memory_efficient_attention("),
       ("xformers/ops/fmha/__init__.py", "memory_efficient_attention", "return _memory_efficient_attention("),
       ("xformers/ops/fmha/__init__.py", "_memory_efficient_attention_forward", "op = _dispatch_fw(inp, False)"),
       ("xformers/ops/fmha/dispatch.py", "_run_priority_list", "raise NotImplementedError(msg)")]
xf_head = ["NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:",
           "     query       : shape=(2, 4096, 8, 40) (torch.float16)", "     key         : shape=(2, 4096, 8, 40) (torch.float16)",
           "     value       : shape=(2, 4096, 8, 40) (torch.float16)", "     attn_bias   : <class 'NoneType'>", "     p           : 0.0"]
add("xformers", XF, "ops/fmha/dispatch.py:_run_priority_list (not built with CUDA)", "NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs: ... xFormers wasn't build with CUDA support",
    ex("noise_pred = unet(latents, t, encoder_hidden_states=enc).sample", _XF,
       xf_head + ["`fa2F@v2.5.7-pt` is not supported because:", "    xFormers wasn't build with CUDA support",
                  "`cutlassF-pt` is not supported because:", "    xFormers wasn't build with CUDA support"],
       pre=["WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:",
            "    PyTorch 2.4.0+cu121 with CUDA 1201 (you have 2.5.1+cu124)", "    Python  3.11.9 (you have 3.11.10)",
            "  Please reinstall xformers (see https://github.com/facebookresearch/xformers#installing-xformers)",
            "  Memory-efficient attention, SwiGLU, sparse and more won't be available.",
            "  Set XFORMERS_MORE_DETAILS=1 for more details"]),
    "cuda_env_error", "user")
add("xformers", XF, "ops/fmha/dispatch.py:_run_priority_list (GPU too old)", "NotImplementedError: No operator found for `memory_efficient_attention_forward` ... requires device with capability >= (8, 0) but your GPU has capability (7, 0) (too old)",
    ex("noise_pred = unet(latents, t, encoder_hidden_states=enc).sample", _XF,
       xf_head + ["`fa3F@2.6.3-24cb0d5` is not supported because:", "    requires device with capability >= (9, 0) but your GPU has capability (7, 0) (too old)",
                  "`fa2F@2.6.3-24cb0d5` is not supported because:", "    requires device with capability >= (8, 0) but your GPU has capability (7, 0) (too old)",
                  "`cutlassF-pt` is not supported because:", "    operator wasn't built - see `python -m xformers.info` for more info"]),
    "cuda_env_error", "user")
add("xformers", XF, "ops/fmha/dispatch.py:_run_priority_list (tensors on CPU)", "NotImplementedError: No operator found for `memory_efficient_attention_forward` ... device=cpu (supported: {'cuda'})",
    ex("noise_pred = unet(latents, t, encoder_hidden_states=enc).sample", _XF,
       [xf_head[0], "     query       : shape=(2, 4096, 8, 40) (torch.float32)", "     key         : shape=(2, 4096, 8, 40) (torch.float32)",
        "     value       : shape=(2, 4096, 8, 40) (torch.float32)", "     attn_bias   : <class 'NoneType'>", "     p           : 0.0",
        "`fa2F@v2.5.7-pt` is not supported because:", "    device=cpu (supported: {'cuda'})", "    dtype=torch.float32 (supported: {torch.float16, torch.bfloat16})",
        "`cutlassF-pt` is not supported because:", "    device=cpu (supported: {'cuda'})"]),
    "semantic_error", "user", "the job put the model on the CPU; the message decides (C4 wrong device)")

# ---------------- bitsandbytes ----------------
_BNB = [("transformers/trainer.py", "train", "return inner_training_loop("),
        ("torch/optim/optimizer.py", "wrapper", "out = func(*args, **kwargs)"),
        ("bitsandbytes/optim/optimizer.py", "step", "self.update_step(group, p, gindex, pindex)"),
        ("bitsandbytes/functional.py", "optimizer_update_8bit_blockwise", "torch.ops.bitsandbytes.optimizer_update_8bit_blockwise("),
        ("bitsandbytes/cextension.py", "throw_on_call", "raise RuntimeError(f\"{self.formatted_error}Native code method attempted to call: lib.{name}()\")")]
add("bitsandbytes", BNB, "cextension.py:ErrorHandlerMockBNBNativeLibrary._format_dependency_error", "RuntimeError: \\n🚨 CUDA SETUP ERROR: Missing dependency: libcudart.so.12 🚨 ... Native code method attempted to call: lib.cadam_8bit_blockwise_grad_fp32()",
    ex("trainer.train()", _BNB,
       ["RuntimeError: ", "🚨 CUDA SETUP ERROR: Missing dependency: libcudart.so.12 🚨", "",
        "CUDA 12.x runtime libraries were not found in the LD_LIBRARY_PATH.", "", "To fix this, make sure that:",
        "1. You have installed CUDA 12.x toolkit on your system", "2. The CUDA runtime libraries are in your LD_LIBRARY_PATH", "",
        "You can add them with (and persist the change by adding the line to your .bashrc):",
        "   export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/path/to/cuda-12.x/lib64", "",
        "Original error: libcudart.so.12: cannot open shared object file: No such file or directory", "",
        "🔍 Run this command for detailed diagnostics:", "python -m bitsandbytes", "",
        "If you've tried everything and still have issues:", "1. Include ALL version info (operating system, bitsandbytes, pytorch, cuda, python)",
        "2. Describe what you've tried in detail", "3. Open an issue with this information:",
        "   https://github.com/bitsandbytes-foundation/bitsandbytes/issues", "",
        "Native code method attempted to call: lib.cadam_8bit_blockwise_grad_fp32()"]),
    "cuda_env_error", "user")
add("bitsandbytes", BNB, "cextension.py:_format_lib_error_message (CUDA version mismatch)", "RuntimeError: 🚨 CUDA VERSION MISMATCH 🚨 ... Attempted to use bitsandbytes native library functionality but it's not available.",
    ex("trainer.train()", _BNB,
       ["RuntimeError: ", "🚨 CUDA VERSION MISMATCH 🚨", "Requested CUDA version:          13.2", "Detected PyTorch CUDA version:   13.2",
        "Available pre-compiled versions: ", "  - 11.8", "  - 12.1", "  - 12.8", "  - 13.0", "", "This means:",
        "The version you're trying to use is NOT distributed with this package", "",
        "Attempted to use bitsandbytes native library functionality but it's not available.", "",
        "This typically happens when:", "1. bitsandbytes doesn't ship with a pre-compiled binary for your CUDA version",
        "2. The library wasn't compiled properly during installation from source", "",
        "bitsandbytes tried to find a compatible CUDA binary but none could be loaded.",
        "If your CUDA version isn't among the available pre-compiled versions above, you must compile from source.", "",
        "Original error: No compatible CUDA binary found at /usr/local/lib/python3.11/site-packages/bitsandbytes/libbitsandbytes_cuda132.so", "",
        "Native code method attempted to call: lib.cadam_8bit_blockwise_grad_fp32()"]),
    "cuda_env_error", "user")
m = "RuntimeError: Method 'cquantize_blockwise_fp16_nf4' not available in CPU-only version of bitsandbytes."
add("bitsandbytes", BNB, "cextension.py:BNBNativeLibrary.__getattr__.throw_on_call", m,
    ex("model = AutoModelForCausalLM.from_pretrained(name, quantization_config=bnb_cfg)",
       [("bitsandbytes/functional.py", "quantize_4bit", "lib.cquantize_blockwise_fp16_nf4("),
        ("bitsandbytes/cextension.py", "throw_on_call", "raise RuntimeError(")], [m, "Reinstall with GPU support or use CUDA-enabled hardware."]),
    "cuda_env_error", "user")
m = "bitsandbytes library load error: libbitsandbytes_cuda124.so: cannot open shared object file: No such file or directory"
add("bitsandbytes", BNB, "cextension.py:<module> logger.error (library load error), then the job dies calling the mock", m,
    plain(["ERROR:bitsandbytes.cextension:" + m, "Traceback (most recent call last):",
           '  File "/usr/local/lib/python3.11/site-packages/bitsandbytes/cextension.py", line 390, in <module>', "    lib = get_native_library()",
           "OSError: libbitsandbytes_cuda124.so: cannot open shared object file: No such file or directory",
           "2026-11-20 10:02:11 | INFO | train | step 0 starting", "Traceback (most recent call last):",
           '  File "/home/u/proj/train.py", line 212, in <module>', "    main()",
           '  File "/usr/local/lib/python3.11/site-packages/bitsandbytes/cextension.py", line 326, in throw_on_call',
           "    raise RuntimeError(f\"{self.formatted_error}Native code method attempted to call: lib.{name}()\")",
           "RuntimeError: ", "Attempted to use bitsandbytes native library functionality but it's not available.", "",
           "Original error: libbitsandbytes_cuda124.so: cannot open shared object file: No such file or directory", "",
           "Native code method attempted to call: lib.cadam32bit_grad_fp32()"]),
    "cuda_env_error", "user")
m = "ValueError: loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
add("bitsandbytes", BNB, "optim/optimizer.py:Optimizer8bit.load_state_dict", m,
    ex("optimizer.load_state_dict(torch.load(os.path.join(args.resume, 'optimizer.pt')))",
       [("bitsandbytes/optim/optimizer.py", "load_state_dict", "raise ValueError(")], [m]),
    "checkpoint_error", "user", "resume with a different parameter set (C5 mismatch)")
m = "ValueError: Invalid learning rate: -0.0002"
add("bitsandbytes", BNB, "optim/optimizer.py:Optimizer2State.__init__", m,
    ex("optimizer = bnb.optim.AdamW8bit(model.parameters(), lr=-args.lr)",
       [("bitsandbytes/optim/adamw.py", "__init__", "super().__init__("), ("bitsandbytes/optim/optimizer.py", "__init__", "raise ValueError(f\"Invalid learning rate: {lr}\")")], [m]),
    "semantic_error", "user")

# ---------------- apex ----------------
m = "RuntimeError: apex.optimizers.FusedAdam requires cuda extensions"
add("apex", APEX, "optimizers/fused_adam.py:FusedAdam.__init__", m,
    ex("optimizer = FusedAdam(model.parameters(), lr=args.lr)", [("apex/optimizers/fused_adam.py", "__init__", "raise RuntimeError(\"apex.optimizers.FusedAdam requires cuda extensions\")")], [m]),
    "import_error", "user", "apex installed without its CUDA extensions (C9 extension)")
m = "RuntimeError: apex.optimizers.FusedLAMB requires cuda extensions"
add("apex", APEX, "optimizers/fused_lamb.py:FusedLAMB.__init__", m,
    ex("optimizer = FusedLAMB(model.parameters(), lr=args.lr)", [("apex/optimizers/fused_lamb.py", "__init__", "raise RuntimeError(\"apex.optimizers.FusedLAMB requires cuda extensions\")")], [m]),
    "import_error", "user")
m = ("RuntimeError: ('Attempted to call MultiTensorApply method, but MultiTensorApply is not available, possibly because Apex was "
     "installed without --cpp_ext --cuda_ext.  Original import error message:', ModuleNotFoundError(\"No module named 'amp_C'\"))")
add("apex", APEX, "multi_tensor_apply/multi_tensor_apply.py:check_avail", m,
    ex("scaler.step(optimizer)", [("apex/multi_tensor_apply/multi_tensor_apply.py", "__call__", "self.check_avail()"),
                                  ("apex/multi_tensor_apply/multi_tensor_apply.py", "check_avail", "raise RuntimeError(")], [m]),
    "import_error", "user")
m = "ModuleNotFoundError: No module named 'fused_layer_norm_cuda'"
add("apex", APEX, "normalization/fused_layer_norm.py:FusedLayerNormAffineFunction (lazy import)", m,
    ex("out = model(batch)", [("apex/normalization/fused_layer_norm.py", "forward", "return fused_layer_norm_affine(input, self.weight, self.bias, self.normalized_shape, self.eps)"),
                              ("apex/normalization/fused_layer_norm.py", "forward", "fused_layer_norm_cuda = importlib.import_module(\"fused_layer_norm_cuda\")")], [m]),
    "import_error", "user")
m = "AttributeError: module 'apex' has no attribute 'amp'"
add("apex", APEX, "apex/__init__.py (amp removed, commit cb65b8e)", m,
    ex("model, optimizer = apex.amp.initialize(model, optimizer, opt_level='O1')", [], [m]),
    "semantic_error", "user", "API removed between versions (C4/C9)")
m = "RuntimeError: FusedAdam only support fp16 and fp32."
add("apex", APEX, "optimizers/fused_adam.py:step", m,
    ex("optimizer.step()", [("apex/optimizers/fused_adam.py", "step", "raise RuntimeError(\"FusedAdam only support fp16 and fp32.\")")], [m]),
    "semantic_error", "user", "", "rare dtype check; SVM answers unknown below 0.5 (not confidently wrong); no rule added")

# ---------------- Transformer Engine ----------------
_TEA = [("transformer_engine/pytorch/quantization.py", "autocast", "FP8GlobalStateManager.autocast_enter("),
        ("transformer_engine/pytorch/quantization.py", "autocast_enter", "assert fp8_available, reason_for_no_fp8")]
for cm, note in [("Device compute capability 8.9 or higher required for FP8 execution.", "existing rule"),
                 ("Device compute capability 10.0 or higher required for MXFP8 execution.", "MXFP8 recipe on Hopper"),
                 ("Device compute capability 10.0 or higher required for NVFP4 execution.", "NVFP4 recipe"),
                 ("CublasLt version 12.1.3.x or higher required for FP8 execution on Ada.", "old cuBLAS in the environment"),
                 ("FP8 block scaled GEMM requires compute capability 9.0 or higher and CUDA >= 12.9.", "block scaling recipe")]:
    add("transformer_engine", TE, "pytorch/quantization.py:FP8GlobalStateManager.autocast_enter", "AssertionError: " + cm,
        ex("with te.autocast(enabled=True, recipe=fp8_recipe):", _TEA, ["AssertionError: " + cm]), "cuda_env_error", "user", note)
m = "RuntimeError: Transformer Engine requires cuDNN 9.3.0 or later, but the cuDNN runtime is 8.9.7."
add("transformer_engine", TE, "common/__init__.py:check_cudnn_version", m,
    ex("import transformer_engine.pytorch as te", [("transformer_engine/pytorch/__init__.py", "<module>", "load_framework_extension(\"torch\")"),
                                                   ("transformer_engine/common/__init__.py", "check_cudnn_version", "raise RuntimeError(")], [m]),
    "cuda_env_error", "user", "CUDA library too old (C2/C7)")
m = ("RuntimeError: Found empty `transformer-engine` meta package installed. Install `transformer-engine` with framework extensions via"
     "'pip3 install --no-build-isolation transformer-engine[pytorch,jax]==VERSION' or 'pip3 install transformer-engine[core]` for the TE core lib only.")
add("transformer_engine", TE, "common/__init__.py:sanity_checks_for_pypi_installation", m,
    ex("import transformer_engine.pytorch as te", [("transformer_engine/__init__.py", "<module>", "import transformer_engine.common"),
                                                   ("transformer_engine/common/__init__.py", "sanity_checks_for_pypi_installation", "raise RuntimeError(")], [m]),
    "import_error", "user")
m = "AssertionError: Transformer Engine package version mismatch. Found transformer-engine v2.20.2 and transformer-engine-cu12 v2.8.0."
add("transformer_engine", TE, "common/__init__.py:sanity_checks_for_pypi_installation (version)", m,
    ex("import transformer_engine.pytorch as te", [("transformer_engine/__init__.py", "<module>", "import transformer_engine.common"),
                                                   ("transformer_engine/common/__init__.py", "sanity_checks_for_pypi_installation", "assert version(\"transformer-engine\") == te_core_version, (")], [m]),
    "import_error", "user")
m = ("ValueError: No dot product attention backend is available for the provided inputs. Please run with NVTE_DEBUG=1 "
     "NVTE_DEBUG_LEVEL=2 to find out the reasons for disabling all backends.")
add("transformer_engine", TE, "pytorch/attention/dot_product_attention/dot_product_attention.py:forward", m,
    ex("output = model(tokens, position_ids, attention_mask)", [("megatron/core/transformer/attention.py", "forward", "core_attn_out = self.core_attention("),
                                                                 ("transformer_engine/pytorch/attention/dot_product_attention/dot_product_attention.py", "forward", "raise ValueError(")], [m]),
    "semantic_error", "user", "unsupported combination of inputs/options; may also be the GPU (cannot tell)")
m = "RuntimeError: torch.distributed must be initialized before using Userbuffers"
add("transformer_engine", TE, "pytorch/module/base.py:initialize_ub", m,
    ex("te.module.base.initialize_ub(shape, tp_size, use_fp8=True)", [("transformer_engine/pytorch/module/base.py", "initialize_ub", "raise RuntimeError(\"torch.distributed must be initialized before using Userbuffers\")")], [m]),
    "semantic_error", "user")
m = "RuntimeError: cudnn shared object not found."
add("transformer_engine", TE, "common/__init__.py:_load_cuda_library (cuDNN not in the environment)", m,
    ex("import transformer_engine.pytorch as te", [("transformer_engine/common/__init__.py", "<module>", "_, _CUDNN_LIB_CTYPES = _load_cuda_library(\"cudnn\")"),
                                                   ("transformer_engine/common/__init__.py", "_load_cuda_library", "raise RuntimeError(f\"{lib_name} shared object not found.\")")], [m]),
    "cuda_env_error", "user", "a CUDA library missing (C2)")
m = "FileNotFoundError: Could not find shared object file for Transformer Engine torch lib."
add("transformer_engine", TE, "common/__init__.py:_get_shared_object_file", m,
    ex("import transformer_engine.pytorch as te", [("transformer_engine/pytorch/__init__.py", "<module>", "load_framework_extension(\"torch\")"),
                                                   ("transformer_engine/common/__init__.py", "_get_shared_object_file", "raise FileNotFoundError(")], [m]),
    "import_error", "user", "the framework extension was not built/installed (C2 library)")
m = ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 101376. "
     "Reducing block sizes or `num_stages` may help.")
add("triton", TR, "compiler/compiler.py:_init_handles (the job's own kernel)", m,
    ex("y = fused_rmsnorm(x, w)", [("/home/u/proj/kernels/rmsnorm.py", "fused_rmsnorm", "_rmsnorm_kernel[grid](x, w, y, n, BLOCK_SIZE=65536, num_stages=4)"),
                                   ("triton/runtime/jit.py", "run", "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata,"),
                                   ("triton/compiler/compiler.py", "_init_handles", "raise_(OutOfResources(self.metadata.shared, max_shared, \"shared memory\"))")], [m]),
    "cuda_error", "user", "the job's own kernel and block size", "the same message as a library's kernel; only the frames tell the job's own kernel, which a format rule cannot read")

# ---------------- vLLM (engine init, as used for RL rollouts / eval in training jobs) ----------------
_VE = [("vllm/entrypoints/llm.py", "__init__", "self.llm_engine = LLMEngine.from_engine_args("),
       ("vllm/v1/engine/core.py", "__init__", "num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(")]
m = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
add("vllm", VL, "v1/core/kv_cache_utils.py:check_enough_kv_cache_memory", m,
    ex("llm = LLM(model=args.model, gpu_memory_utilization=0.3)", _VE + [("vllm/v1/core/kv_cache_utils.py", "check_enough_kv_cache_memory", "raise ValueError(\"No available memory for the cache blocks. \"")], [m]),
    "gpu_oom", "user")
m = ("ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the "
     "available KV cache memory (1.52 GiB). Based on the available memory, the estimated maximum model length is 12432. Try increasing "
     "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
add("vllm", VL, "v1/core/kv_cache_utils.py:check_enough_kv_cache_memory (max len)", m,
    ex("llm = LLM(model=args.model, gpu_memory_utilization=0.3)", _VE + [("vllm/v1/core/kv_cache_utils.py", "check_enough_kv_cache_memory", "raise ValueError(")], [m]),
    "gpu_oom", "user")
m = ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (27296). "
     "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
add("vllm", VL, "worker/worker.py:raise_if_cache_size_invalid (v0)", m,
    ex("llm = LLM(model=args.model, gpu_memory_utilization=0.3)", [("vllm/worker/worker.py", "raise_if_cache_size_invalid", "raise ValueError(")], [m]),
    "gpu_oom", "user")
m = "ValueError: Free memory on device cuda:0 (10.12/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
add("vllm", VL, "v1/worker/utils.py:request_memory", m,
    ex("llm = LLM(model=args.model)", _VE + [("vllm/v1/worker/gpu_worker.py", "init_device", "self.requested_memory = request_memory(init_snapshot, self.cache_config)"),
                                              ("vllm/v1/worker/utils.py", "request_memory", "raise ValueError(")], [m]),
    "gpu_oom", "user")
m = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n  Value error, User-specified max_model_len (65536) is greater than the derived "
     "max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var "
     "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. [type=value_error, input_value=ArgsKwargs((), {'model': 'Qwen/Qwen2.5-7B'}), input_type=ArgsKwargs]")
add("vllm", VL, "config/model.py:get_and_verify_max_len", "pydantic ValidationError ... User-specified max_model_len (65536) is greater than the derived max_model_len ...",
    ex("llm = LLM(model=args.model, max_model_len=65536)", [("vllm/entrypoints/llm.py", "__init__", "self.llm_engine = LLMEngine.from_engine_args("),
                                                            ("vllm/engine/arg_utils.py", "create_model_config", "return ModelConfig(")], m.split("\n")),
    "semantic_error", "user", "setting rejected by the library's config check (C4)")
m = ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5. "
     "You can use float16 instead by explicitly setting the`dtype` flag in CLI, for example: --dtype=half.")
add("vllm", VL, "worker/worker.py:_check_if_gpu_supports_dtype", m,
    ex("llm = LLM(model=args.model)", [("vllm/v1/worker/gpu_worker.py", "init_device", "_check_if_gpu_supports_dtype(self.model_config.dtype)"),
                                        ("vllm/v1/worker/gpu_worker.py", "_check_if_gpu_supports_dtype", "raise ValueError(")], [m]),
    "cuda_env_error", "user", "dtype the GPU cannot run; the message names the job's --dtype fix", "existing rule gpu-arch-no-bf16 sets infrastructure for every GPU-too-old-for-bf16 message (as flash-attention-gpu-arch); a project-wide origin convention, not this sweep's to change")
m = "ValueError: Total number of attention heads (32) must be divisible by tensor parallel size (3)."
add("vllm", VL, "config/model.py:verify_with_parallel_config", m,
    ex("llm = LLM(model=args.model, tensor_parallel_size=3)", [("vllm/config/__init__.py", "__post_init__", "self.model_config.verify_with_parallel_config(self.parallel_config)"),
                                                               ("vllm/config/model.py", "verify_with_parallel_config", "raise ValueError(")], [m]),
    "semantic_error", "user")
m = "ValueError: GPU memory utilization must be less than 1.0. Got 1.5."
add("vllm", VL, "config/cache.py:CacheConfig._verify_args", m,
    ex("llm = LLM(model=args.model, gpu_memory_utilization=1.5)", [("vllm/config/cache.py", "_verify_args", "raise ValueError(")], [m]),
    "semantic_error", "user")
m = "ValueError: Model architectures ['Qwen3NextForCausalLM'] are not supported for now. Supported architectures: dict_keys(['AquilaModel', 'LlamaForCausalLM'])"
add("vllm", VL, "model_executor/models/registry.py:_raise_for_unsupported", m,
    ex("llm = LLM(model=args.model)", [("vllm/model_executor/models/registry.py", "_raise_for_unsupported", "raise ValueError(")], [m]),
    "import_error", "user", "existing rule vllm-architecture-unsupported (version of vllm too old)")
m = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
add("vllm", VL, "v1/engine/utils.py:wait_for_engine_startup (root cause above: KV cache)", m,
    plain(["(EngineCore_DP0 pid=2507) ERROR 11-20 10:03:11 [core.py:708] EngineCore failed to start.",
           "(EngineCore_DP0 pid=2507) Traceback (most recent call last):",
           '(EngineCore_DP0 pid=2507)   File "/usr/local/lib/python3.11/site-packages/vllm/v1/core/kv_cache_utils.py", line 699, in check_enough_kv_cache_memory',
           '(EngineCore_DP0 pid=2507)     raise ValueError("No available memory for the cache blocks. "',
           "(EngineCore_DP0 pid=2507) ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
           "Traceback (most recent call last):", '  File "/home/u/proj/grpo.py", line 88, in <module>', "    llm = LLM(model=args.model)",
           '  File "/usr/local/lib/python3.11/site-packages/vllm/v1/engine/utils.py", line 960, in wait_for_engine_startup', "    raise RuntimeError(", m]),
    "gpu_oom", "user", "the root cause above decides (C1)")
add("vllm", VL, "v1/engine/utils.py:wait_for_engine_startup (nothing above)", m,
    ex("llm = LLM(model=args.model)", [("vllm/v1/engine/core_client.py", "__init__", "with launch_core_engines(vllm_config, executor_class, log_stats) as (engine_manager,"),
                                        ("vllm/v1/engine/utils.py", "wait_for_engine_startup", "raise RuntimeError(")], [m]),
    "unknown", "unknown", "secondary only: the cause is in the engine process's output, absent")
m = "ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 89. Current capability: 80."
add("vllm", VL, "config/model.py:_verify_quantization", m,
    ex("llm = LLM(model=args.model, quantization='fp8')", [("vllm/config/model.py", "_verify_quantization", "raise ValueError(")], [m]),
    "cuda_env_error", "user")


CASES = [pytest.param(c["text"], c["cat"], c["org"], id=f"{i:02d}-{c['lib']}-{c['where'].split(':')[0].split('/')[-1]}")
         for i, c in enumerate(C) if not c["left"]]


@pytest.mark.parametrize(("text", "category", "origin"), CASES)
def test_library_message_category_and_origin(text: str, category: str, origin: str, clf: Classifier) -> None:
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.origin) == (category, origin), (d.rule_id, d.reason)
