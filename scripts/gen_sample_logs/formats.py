"""Logs that cannot be produced on this CPU-only machine (GPU OOM, Xid/ECC, NCCL, driver
problems, cuBLAS/cuDNN failures, Slurm/kubelet events), written in the exact formats
the tools print (PyTorch's CUDA caching allocator, c10 CUDA_CHECK, ProcessGroupNCCL,
NVIDIA driver Xid lines in dmesg, nvidia-smi, slurmstepd, kubelet events), plus the
decoration applied to the logs of real runs (job banners, per-line timestamps).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator

__all__ = ["decorate", "written_logs"]

SP = "/opt/conda/envs/train/lib/python3.10/site-packages"
NODES = ["gpu-node-017", "dgx-a100-04", "hgx-h100-112", "gpu-a-23", "node0931", "trn-h100-7"]


def decorate(text: str, family: str, v: int) -> str:
    """Wrap a real run's output the way a cluster job log looks."""
    rnd = random.Random(zlib.crc32(f"{family}:{v}:decorate".encode()))
    style = v % 3
    job = rnd.randint(100000, 9999999)
    node = rnd.choice(NODES)
    if style == 0:
        head = (f"+ echo 'job {job} on {node}'\njob {job} on {node}\n+ export OMP_NUM_THREADS=1\n"
                f"+ python train.py --config configs/exp{rnd.randint(1, 40)}.yaml\n")
        return head + text
    if style == 1:
        stamp = f"2024-0{rnd.randint(1, 9)}-{rnd.randint(10, 28)}T{rnd.randint(10, 23)}:{rnd.randint(10, 59)}:"
        lines = text.splitlines()
        return "\n".join(f"{stamp}{10 + i * 37 // max(1, len(lines)):02d}.{rnd.randint(100000000, 999999999)}Z {ln}"
                         for i, ln in enumerate(lines)) + "\n"
    return f"==== {node} | SLURM_JOB_ID={job} | start {rnd.randint(1, 12)}:{rnd.randint(10, 59)} ====\n" + text


def _preamble(rnd: random.Random, prefix: str = "", n: int | None = None, epoch: int | None = None) -> str:
    n = n if n is not None else rnd.randint(5, 60)
    ep = epoch if epoch is not None else rnd.randint(0, 30)
    total = rnd.choice([500, 1000, 1563, 2502, 5005])
    out = [f"{prefix}{SP}/torch/utils/data/dataloader.py:617: UserWarning: This DataLoader will create 16 worker "
           "processes in total. Our suggested max number of worker in current system is 8, which is smaller than what "
           "this DataLoader is going to create. Please be aware that excessive worker creation might get DataLoader "
           "running slow or even freeze, lower the worker number to avoid potential slowness/freeze if necessary.",
           f"{prefix}  warnings.warn("]
    if rnd.random() < 0.5:
        out.append(f"{prefix}[W reducer.cpp:1360] Warning: find_unused_parameters=True was specified in DDP constructor, "
                   "but did not find any unused parameters in the forward pass. This flag results in an extra traversal "
                   "of the autograd graph every iteration, which can adversely affect performance. (function operator())")
    step = 0
    for i in range(n):
        step += rnd.randint(10, 60)
        if rnd.random() < 0.6:
            pct = min(99, step * 100 // total)
            out.append(f"{prefix}Epoch {ep}: {pct:3d}%|{'█' * (pct // 10)}{' ' * (10 - pct // 10)}| {min(step, total)}/{total} "
                       f"[{i // 3:02d}:{i * 7 % 60:02d}<{(n - i) // 2:02d}:{i * 13 % 60:02d}, {rnd.uniform(1, 9):.2f}it/s, "
                       f"loss={rnd.uniform(0.5, 3):.3f}, lr={rnd.choice(['1e-4', '3e-4', '5e-5'])}]")
        else:
            out.append(f"{prefix}2024-05-{rnd.randint(10, 28)} {rnd.randint(10, 23)}:{rnd.randint(10, 59)}:{rnd.randint(10, 59)},"
                       f"{rnd.randint(100, 999)} - INFO - train - step {step} loss {rnd.uniform(0.5, 3):.4f} "
                       f"grad_norm {rnd.uniform(0.1, 5):.3f} throughput {rnd.uniform(100, 900):.1f} samples/s")
    return "\n".join(out) + "\n"


def _tb(frames: list[tuple[str, int, str, str]], exc: str, prefix: str = "") -> str:
    lines = [f"{prefix}Traceback (most recent call last):"]
    for file, line, fn, code in frames:
        lines.append(f'{prefix}  File "{file}", line {line}, in {fn}')
        lines.append(f"{prefix}    {code}")
    lines.extend(prefix + x for x in exc.splitlines())
    return "\n".join(lines) + "\n"


TRAIN_FRAMES = [
    ("/home/alice/llm-ft/train.py", 412, "<module>", "main(args)"),
    ("/home/alice/llm-ft/train.py", 377, "main", "loss = train_one_epoch(model, loader, optimizer, scaler, epoch)"),
    ("/home/alice/llm-ft/engine.py", 88, "train_one_epoch", "outputs = model(images)"),
    (f"{SP}/torch/nn/modules/module.py", 1511, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
    (f"{SP}/torch/nn/modules/module.py", 1520, "_call_impl", "return forward_call(*args, **kwargs)"),
]
BACKWARD_FRAMES = [
    ("/home/bwang/resnet-sweep/main.py", 301, "<module>", "train(cfg)"),
    ("/home/bwang/resnet-sweep/main.py", 244, "train", "scaler.scale(loss).backward()"),
    (f"{SP}/torch/_tensor.py", 522, "backward", "torch.autograd.backward("),
    (f"{SP}/torch/autograd/__init__.py", 266, "backward", "Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
]
CUDA_TRAILER = ("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
                "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")


def _rankify(text: str, rank: int | None) -> str:
    if rank is None:
        return text
    return "\n".join(f"[rank{rank}]: {ln}" for ln in text.splitlines()) + "\n"


def written_logs() -> Iterator[tuple[str, str, str, str, str]]:
    """(relative file, category, format source, description, text) for each written log."""
    R = random.Random

    # ---------------------------------------------------------------- gpu_oom
    oom_msgs = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
        "of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. Of the allocated "
        "memory 75.12 GiB is allocated by PyTorch, and 1.97 GiB is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
        "See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 3; 31.75 GiB total capacity; 29.40 GiB already "
        "allocated; 301.50 MiB free; 30.12 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try "
        "setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
        "14.61 GiB already allocated; 4.75 MiB free; 14.84 GiB reserved in total by PyTorch) If reserved memory is >> "
        "allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management "
        "and PYTORCH_CUDA_ALLOC_CONF",
    ]
    for i in range(5):
        rnd = R(100 + i)
        rank = i if i % 2 else None
        body = _preamble(rnd, f"[rank{rank}]: " if rank is not None else "")
        frames = TRAIN_FRAMES + [(f"{SP}/torch/nn/modules/conv.py", 460, "forward", "return self._conv_forward(input, self.weight, self.bias)")]
        if i == 4:
            frames = BACKWARD_FRAMES
        body += _rankify(_tb(frames, oom_msgs[i % 3]), rank)
        fam = ["torch_oom_capacity_msg", "runtime_cuda_oom_legacy", "torch_cuda_oom_legacy"][i % 3]
        yield (f"gpu_oom/{fam}_{i // 3 + 1:02d}.log", "gpu_oom", "pytorch-cuda-caching-allocator",
               "PyTorch CUDA OOM in forward/backward", body)
    for i in range(2):
        rnd = R(150 + i)
        body = _preamble(rnd)
        body += _tb(TRAIN_FRAMES[:3] + [(f"{SP}/torch/nn/functional.py", 2573, "layer_norm",
                                         "return torch.layer_norm(input, normalized_shape, weight, bias, eps, torch.backends.cudnn.enabled)")],
                    "RuntimeError: CUDA error: out of memory\n" + CUDA_TRAILER)
        yield (f"gpu_oom/cuda_error_oom_{i + 1:02d}.log", "gpu_oom", "c10-cuda-check", "cudaErrorMemoryAllocation via CUDA_CHECK", body)
    for i in range(2):
        rnd = R(170 + i)
        body = _preamble(rnd)
        body += ("2024-05-11 10:42:01.512234: W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out "
                 "of memory trying to allocate 1.53GiB (rounded to 1642070016)requested by op model/conv2d_7/Conv2D\n"
                 "If the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation.\n"
                 "Traceback (most recent call last):\n  File \"/home/dkim/speech-ctc/fit.py\", line 88, in <module>\n    model.fit(ds, epochs=30)\n"
                 "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:\n\n"
                 "OOM when allocating tensor with shape[64,256,128,128] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
                 "\t [[{{node model/conv2d_7/Conv2D}}]]\nHint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n")
        yield (f"gpu_oom/tf_resource_exhausted_{i + 1:02d}.log", "gpu_oom", "tensorflow-bfc-allocator", "TensorFlow GPU OOM", body)

    # ---------------------------------------------------------------- gpu_hardware
    xids = [
        ("79", "GPU has fallen off the bus."),
        ("48", "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 4, subpartition 0."),
        ("94", "Contained ECC error occurred (0x0)"),
        ("63", "Row Remapper: New row marked for remapping, reset gpu to activate."),
        ("74", "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"),
    ]
    for i, (xid, msg) in enumerate(xids):
        rnd = R(200 + i)
        body = _preamble(rnd)
        body += _tb(TRAIN_FRAMES, "RuntimeError: CUDA error: " + ["unspecified launch failure", "uncorrectable ECC error encountered",
                                                                    "an illegal memory access was encountered", "unknown error",
                                                                    "unspecified launch failure"][i] + "\n" + CUDA_TRAILER)
        body += (f"srun: error: {rnd.choice(NODES)}: task 0: Exited with exit code 1\n"
                 f"--- dmesg ({rnd.choice(NODES)}) ---\n"
                 f"[{rnd.randint(100000, 900000)}.{rnd.randint(100000, 999999)}] NVRM: GPU at PCI:0000:{rnd.choice(['3b', '86', 'af', '18'])}:00: GPU-{rnd.getrandbits(32):08x}-1b2c-4d5e-8f90-{rnd.getrandbits(48):012x}\n"
                 f"[{rnd.randint(100000, 900000)}.{rnd.randint(100000, 999999)}] NVRM: Xid (PCI:0000:{rnd.choice(['3b', '86', 'af', '18'])}:00): {xid}, pid={rnd.randint(1000, 99999)}, name=python, {msg}\n")
        yield (f"gpu_hardware/xid_{xid}_{1:02d}.log", "gpu_hardware", "nvidia-xid-dmesg", f"CUDA failure with kernel Xid {xid}", body)
    for i in range(2):
        rnd = R(260 + i)
        body = _preamble(rnd) + _tb(TRAIN_FRAMES[:3], "RuntimeError: CUDA error: uncorrectable ECC error encountered\n" + CUDA_TRAILER)
        yield (f"gpu_hardware/cuda_ecc_{i + 1:02d}.log", "gpu_hardware", "cuda-runtime-error-strings", "uncorrectable ECC error from CUDA", body)
    for i in range(2):
        rnd = R(280 + i)
        body = (_preamble(rnd) + "+ nvidia-smi\nUnable to determine the device handle for GPU 0000:3B:00.0: GPU is lost. "
                "Reboot the system to recover this GPU\n"
                f"Exception: job health check failed on {rnd.choice(NODES)}\n")
        yield (f"gpu_hardware/nvidia_smi_gpu_lost_{i + 1:02d}.log", "gpu_hardware", "nvidia-smi", "prolog health check: GPU lost", body)

    # ---------------------------------------------------------------- cuda_error
    cuda_errs = [
        "RuntimeError: CUDA error: an illegal memory access was encountered\n" + CUDA_TRAILER,
        "RuntimeError: CUDA error: device-side assert triggered\n" + CUDA_TRAILER,
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
        "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
        "RuntimeError: CUDA error: misaligned address\n" + CUDA_TRAILER,
        "RuntimeError: CUDA error: an illegal instruction was encountered\n" + CUDA_TRAILER,
        "RuntimeError: CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling `cublasCreate(handle)`",
        "RuntimeError: CUDA error: invalid configuration argument\n" + CUDA_TRAILER,
    ]
    for i, msg in enumerate(cuda_errs):
        rnd = R(300 + i)
        body = _preamble(rnd)
        if "device-side" in msg:
            body += "".join(f"../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
                            f"thread: [{t},0,0] Assertion `t >= 0 && t < n_classes` failed.\n" for t in range(4))
        rank = 2 if i % 3 == 0 else None
        body += _rankify(_tb(TRAIN_FRAMES if i % 2 else BACKWARD_FRAMES, msg), rank)
        fam = ["illegal_address", "device_assert", "cublas_exec_failed", "cudnn_exec_failed", "misaligned_address",
               "illegal_instruction", "cublas_internal", "invalid_config"][i]
        yield (f"cuda_error/{fam}_01.log", "cuda_error", "c10-cuda-check", "CUDA kernel/library failure", body)

    # ---------------------------------------------------------------- cuda_env_error
    env_msgs = [
        ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver by "
         "downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
         "https://pytorch.org to install a PyTorch version that has been compiled with your version of the CUDA driver.", "driver too old"),
        ("RuntimeError: No CUDA GPUs are available", "no GPU visible in the container"),
        ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n" + CUDA_TRAILER, "GPU in exclusive-process mode held by another job"),
        ("ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory", "cuDNN library missing in the image"),
    ]
    for i, (msg, desc) in enumerate(env_msgs):
        rnd = R(400 + i)
        body = _preamble(rnd, n=rnd.randint(0, 3)) + _tb(TRAIN_FRAMES[:2] + [(f"{SP}/torch/cuda/__init__.py", 302, "_lazy_init", "torch._C._cuda_init()")], msg)
        fam = ["driver_too_old", "no_cuda_gpus", "device_busy", "libcudnn_missing"][i]
        yield (f"cuda_env_error/{fam}_01.log", "cuda_env_error", "torch-cuda-lazy-init", desc, body)
    for i in range(2):
        rnd = R(450 + i)
        err = ["Error 803: system has unsupported display driver / cuda driver combination",
               "Error 804: forward compatibility was attempted on non supported HW"][i]
        body = (f"+ nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.{161 + 30 * i}\n"
                f"+ python train.py\n{SP}/torch/cuda/__init__.py:{128 + i * 10}: UserWarning: CUDA initialization: Unexpected error "
                "from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already "
                f"set an error? {err} (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)\n"
                "  return torch._C._cuda_getDeviceCount() > 0\n"
                + _tb(TRAIN_FRAMES[:1] + [(f"{SP}/torch/cuda/__init__.py", 302, "_lazy_init", "torch._C._cuda_init()")],
                      "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
                      f"functions before calling NumCudaDevices() that might have already set an error? {err}"))
        yield (f"cuda_env_error/nvml_mismatch_{i + 1:02d}.log", "cuda_env_error", "nvidia-smi-nvml", "driver/library mismatch after a driver upgrade", body)

    # ---------------------------------------------------------------- comm_error (NCCL)
    for i in range(3):
        rnd = R(500 + i)
        r = rnd.randint(0, 7)
        body = _preamble(rnd, f"[rank{r}]: ")
        t = f"[rank{r}]:[E{rnd.randint(1, 12):02d}{rnd.randint(10, 28)} 0{rnd.randint(0, 9)}:{rnd.randint(10, 59)}:{rnd.randint(10, 59)}.{rnd.randint(100000000, 999999999)} ProcessGroupNCCL.cpp:"
        seq = rnd.randint(1000, 90000)
        op = rnd.choice(["ALLREDUCE", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE", "BROADCAST"])
        timeout = rnd.choice([600000, 1800000])
        work = (f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={rnd.randint(1, 9999999)}, NumelOut={rnd.randint(1, 9999999)}, "
                f"Timeout(ms)={timeout}) ran for {timeout + rnd.randint(10, 99)} milliseconds before timing out.")
        body += (f"{t}616] [Rank {r}] Watchdog caught collective operation timeout: {work}\n"
                 f"{t}1785] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq + 2}, last completed NCCL work: {seq - 1}.\n"
                 f"{t}630] [Rank {r}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n"
                 f"{t}636] [Rank {r}] To avoid data inconsistency, we are taking the entire process down.\n"
                 f"{t}1595] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Process group watchdog thread terminated with exception: [Rank {r}] Watchdog caught collective operation timeout: {work}\n"
                 "terminate called after throwing an instance of 'c10::DistBackendError'\n"
                 f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {r}] Process group watchdog thread terminated with exception: [Rank {r}] Watchdog caught collective operation timeout: {work}\n")
        yield (f"comm_error/nccl_watchdog_timeout_{i + 1:02d}.log", "comm_error", "torch-ProcessGroupNCCL", "NCCL collective watchdog timeout", body)
    for i in range(3):
        rnd = R(520 + i)
        body = _preamble(rnd)
        body += (f"{rnd.choice(NODES)}:{rnd.randint(1000, 9999)}:{rnd.randint(1000, 9999)} [{i}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.{i}.12<0>\n"
                 f"{rnd.choice(NODES)}:{rnd.randint(1000, 9999)}:{rnd.randint(1000, 9999)} [{i}] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.{i}.14<{rnd.randint(30000, 60000)}> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.{i}.12 remoteGids::ffff:10.0.{i}.14\n")
        body += _tb(TRAIN_FRAMES[:2] + [(f"{SP}/torch/distributed/distributed_c10d.py", 2050, "all_reduce", "work = group.allreduce([tensor], opts)")],
                    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system "
                    "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\nncclSystemError: System call (e.g. socket, malloc) or external "
                    "library call failed or device error. \nLast error:\nNET/IB : Got completion from peer with error 12")
        yield (f"comm_error/nccl_system_error_{i + 1:02d}.log", "comm_error", "nccl-debug-output", "NCCL unhandled system error (InfiniBand)", body)

    # ---------------------------------------------------------------- preempted (Slurm, kubelet)
    for i, why in enumerate(["DUE TO TIME LIMIT", "DUE TO PREEMPTION", ""]):
        rnd = R(600 + i)
        body = _preamble(rnd) + (f"slurmstepd: error: *** JOB {rnd.randint(100000, 9999999)} ON {rnd.choice(NODES)} CANCELLED AT "
                                 f"2024-0{rnd.randint(1, 9)}-1{rnd.randint(0, 9)}T0{rnd.randint(0, 9)}:1{rnd.randint(0, 9)}:0{rnd.randint(0, 9)} {why} ***\n".replace(" ***", " ***").replace("  ***", " ***"))
        yield (f"preempted/slurm_cancelled_{i + 1:02d}.log", "preempted", "slurmstepd", f"Slurm cancelled the job {why.lower()}".strip(), body)
    for i in range(2):
        rnd = R(650 + i)
        body = (_preamble(rnd) + "--- kubectl describe pod trainer-0 ---\nStatus:           Failed\nReason:           Evicted\n"
                "Message:          The node was low on resource: memory. Threshold quantity: 100Mi, available: 81616Ki. Container trainer was using 61245932Ki, which exceeds its request of 32Gi.\n"
                "Events:\n  Type     Reason   Age   From     Message\n  ----     ------   ----  ----     -------\n"
                "  Warning  Evicted  2m    kubelet  The node was low on resource: memory.\n")
        yield (f"preempted/k8s_evicted_{i + 1:02d}.log", "preempted", "kubelet-eviction", "pod evicted by the kubelet", body)

    # ---------------------------------------------------------------- cpu_oom (kernel, Slurm cgroup)
    for i in range(2):
        rnd = R(700 + i)
        body = _preamble(rnd) + (f"/var/spool/slurmd/job{rnd.randint(10000, 99999)}/slurm_script: line 21: {rnd.randint(1000, 99999)} Killed                  python train.py\n"
                                 f"slurmstepd: error: Detected 1 oom_kill event in StepId={rnd.randint(10000, 99999)}.batch. Some of the step tasks have been OOM Killed.\n")
        yield (f"cpu_oom/slurm_oom_kill_{i + 1:02d}.log", "cpu_oom", "slurmstepd-cgroup", "cgroup OOM kill reported by Slurm", body)
    rnd = R(720)
    body = _preamble(rnd) + (f"[{rnd.randint(100000, 900000)}.123456] python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0\n"
                             f"[{rnd.randint(100000, 900000)}.123999] Out of memory: Killed process 28131 (python) total-vm:92844412kB, anon-rss:62119544kB, "
                             "file-rss:70496kB, shmem-rss:8192kB, UID:1000 pgtables:125000kB oom_score_adj:0\n")
    yield ("cpu_oom/dmesg_oom_killer_01.log", "cpu_oom", "linux-oom-killer", "kernel OOM killer in dmesg", body)

    # ---------------------------------------------------------------- storage_error
    for i, msg in enumerate(["OSError: [Errno 122] Disk quota exceeded: '/home/eokafor/gnn-bench/checkpoints/step_120000.pt'",
                             "OSError: [Errno 5] Input/output error: '/lustre/datasets/laion/part-00412.tar'"]):
        rnd = R(800 + i)
        body = _preamble(rnd) + _tb(TRAIN_FRAMES[:2] + [("/home/eokafor/gnn-bench/utils/io.py", 41, "save", "with open(path, 'wb') as f:")], msg)
        yield (f"storage_error/{['quota_exceeded', 'lustre_eio'][i]}_01.log", "storage_error", "errno", "quota / EIO on shared storage", body)

    # ---------------------------------------------------------------- gpu_hardware (no Xid line)
    for i in range(2):
        rnd = R(290 + i)
        ts = rnd.randint(1000, 90000)
        bus = rnd.choice(["b3", "44", "86", "1b"])
        body = _preamble(rnd) + _tb(TRAIN_FRAMES, "RuntimeError: CUDA error: unspecified launch failure\n" + CUDA_TRAILER)
        body += (f"--- journalctl -k ({rnd.choice(NODES)}) ---\n"
                 f"[{ts}.308145] NVRM: The NVIDIA GPU 0000:{bus}:00.0\n"
                 f"               NVRM: (PCI ID: 10de:{rnd.choice(['2330', '20b5', '26b5'])}) installed in this system has\n"
                 "               NVRM: fallen off the bus and is not responding to commands.\n"
                 f"[{ts}.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).\n")
        yield (f"gpu_hardware/fallen_off_bus_multiline_{i + 1:02d}.log", "gpu_hardware", "nvidia-driver-dmesg",
               "GPU fell off the bus (newer drivers print it over several NVRM lines, no Xid)", body)
