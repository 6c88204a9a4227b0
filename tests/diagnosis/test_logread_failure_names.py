"""How libraries and tools name a failure, read from whole logs: a training loop's NaN guard,
bash's translated messages, an error about NaN values after the loss went NaN, PyTorch's
argument checks, and a missing or wrong path in a checkpoint load under a launcher. Each excerpt
is small, realistic and written for the test."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _epochs(n: int) -> list[str]:
    out = []
    for e in range(1, n + 1):
        out += [f"Epoch: {e}", f"  TRAIN  100/900  200/900  300/900  loss 1.{90 - e}", f"  DEV acc: 4{e}.1%  TEST acc: 4{e}.0%"]
    return out


@pytest.mark.parametrize("guard", ["Loss is NAN: Mini-Batch Index: 7269", "Loss is nan, stopping training"])
def test_a_nan_guard_that_stops_training_is_a_diverged_failure(clf: Classifier, guard: str) -> None:
    lines = [*_epochs(6), "Epoch: 7", "  TRAIN  100/900  200/900", "", guard]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "model_diverged" and w.indicator_lines == [len(lines)]


@pytest.mark.parametrize(("end", "category"), [
    (["run_all.sh: 行 27: 数器：未找到命令", "run_all.sh: 行 28: 未预期的符号“done”附近有语法错误", "run_all.sh: 行 28: `done'"],
     "syntax_error"),
    (["job.sh: 行 1: 予期しないトークン `(' 周辺に構文エラーがあります", "job.sh: 行 1: `python train.py ("], "syntax_error"),
    (["job.sh: Zeile 68: Syntaxfehler beim unerwarteten Symbol »fi«"], "syntax_error"),
    (["job.sh: 行 14: torchrun: 未找到命令"], "import_error"),
    (["job.sh: ligne 14 : torchrun : commande introuvable"], "import_error"),
])
def test_bashs_translated_messages_end_a_job_script(clf: Classifier, end: list[str], category: str) -> None:
    lines = ["Processing subject 3", *[f"epoch {e} loss 0.{60 - e}" for e in range(1, 9)], "Successfully processed 3",
             *end]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == category


def test_an_error_about_nan_values_after_the_loss_went_nan_is_divergence(clf: Classifier) -> None:
    lines = [*[f"Train Epoch: {e} [1280/9500 (13%)]\tLoss: {3800 - e}.1" for e in range(1, 5)],
             *[f"Train Epoch: {e} [1280/9500 (13%)]\tLoss: nan" for e in range(5, 12)],
             "====> Test set loss: nan", "Traceback (most recent call last):", '  File "vae.py", line 339, in test',
             "    emb = TSNE(n_components=2).fit_transform(z)",
             '  File "/opt/py/site-packages/sklearn/utils/validation.py", line 56, in _assert_all_finite',
             "    raise ValueError(msg_err.format(type_err, X.dtype))",
             "ValueError: Input contains NaN, infinity or a value too large for dtype('float32')."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "model_diverged"
    # without the NaN loss before it, the same error is the code's or the data's, not divergence
    finite = [ln.replace("Loss: nan", "Loss: 3.2") for ln in lines]
    assert diagnose_text("\n".join(finite), clf).diagnosis.category != "model_diverged"


def _torchrun_failure(rank_lines: list[str]) -> list[str]:
    out = ["[rank0]: step 0 loading model"]
    out += [f"[rank1]: {ln}" for ln in rank_lines]
    out += ["E0101 10:00:00.000000 4100 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
            "local_rank: 1 (pid: 4103) of binary: /usr/bin/python3",
            "Traceback (most recent call last):", '  File "/usr/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================", "train.py FAILED",
            "------------------------------------------------------------", "Root Cause (first observed failure):",
            "[0]:", "  rank      : 1 (local_rank: 1)", "  exitcode  : 1 (pid: 4103)", "  error_file: <N/A>",
            "============================================================"]
    return out


def test_a_dtensor_mixed_with_a_plain_tensor_is_a_code_error(clf: Classifier) -> None:
    lines = _torchrun_failure(["Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
                               "    loss = loss * scale",
                               '  File "/opt/py/site-packages/torch/distributed/tensor/_dispatch.py", line 421, in '
                               "_try_replicate_spec_for_scalar_tensor",
                               "    raise RuntimeError(",
                               "RuntimeError: aten.mul.Tensor: got mixed torch.Tensor and DTensor, need to convert all "
                               "torch.Tensor to DTensor before calling distributed operators!"])
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("semantic_error", "user")


def test_a_resume_from_a_folder_without_the_trainer_state_is_a_checkpoint_error(clf: Classifier) -> None:
    lines = _torchrun_failure(
        ["Traceback (most recent call last):", '  File "sft.py", line 138, in run_sft',
         "    result = trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)",
         '  File "/opt/py/site-packages/transformers/trainer.py", line 2299, in train',
         "    state = TrainerState.load_from_json(os.path.join(resume_from_checkpoint, TRAINER_STATE_NAME))",
         '  File "/opt/py/site-packages/transformers/trainer_callback.py", line 153, in load_from_json',
         '    with open(json_path, encoding="utf-8") as f:',
         "FileNotFoundError: [Errno 2] No such file or directory: '/work/saves/lora/sft/run3/trainer_state.json'"])
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("checkpoint_error", "user")


def test_a_missing_data_file_read_outside_a_checkpoint_load_stays_an_input_error(clf: Classifier) -> None:
    lines = _torchrun_failure(
        ["Traceback (most recent call last):", '  File "train.py", line 40, in <module>',
         "    ds = load_jsonl(args.train_file)", '  File "data.py", line 12, in load_jsonl',
         "    with open(path) as f:",
         "FileNotFoundError: [Errno 2] No such file or directory: '/data/qqp/train.jsonl'"])
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "incorrect_input"


@pytest.mark.parametrize(("line", "category"), [
    # OpenSSH exits with the remote command's status (255: its own error): pdsh passes it on
    ("pdsh@node-a: node-b: ssh exited with exit code 1", "unknown"),
    ("pdsh@node-a: node-b: ssh exited with exit code 255", "comm_error"),
    # a launcher's report of a child that a fatal signal ended says how it died
    ("mpirun noticed that process rank 0 with PID 4242 on node gpu01 exited on signal 9 (Killed).", "cpu_oom"),
    ("mpirun noticed that process rank 0 with PID 4242 on node gpu01 exited on signal 11 (Segmentation fault).",
     "crash"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV", "crash"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL", "cpu_oom"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 1", "unknown"),
    ("srun: error: gpu01: task 0: Segmentation fault (core dumped)", "crash"),
    ("srun: error: gpu01: task 1: Killed", "unknown"),  # srun kills the other tasks when one fails
    # slurmstepd cannot start srun's command: the shell's "command not found"
    ("slurmstepd: error: execve(): torchrun: No such file or directory", "import_error"),
])
def test_what_a_launcher_says_of_a_child_that_died(clf: Classifier, line: str, category: str) -> None:
    lines = [f"step {i} loss 0.{50 - i}" for i in range(1, 6)] + [line]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == category


def test_a_pdsh_exit_after_a_nodes_own_error_leaves_the_error_the_answer(clf: Classifier) -> None:
    lines = ["[INFO] [runner.py:568:main] cmd = pdsh -S -f 1024 -w node-a,node-b export NCCL_DEBUG=INFO; cd /w; "
             "python -u pretrain.py", "node-b: Traceback (most recent call last):",
             'node-b:   File "pretrain.py", line 40, in <module>', "node-b:     assert gbs % (mbs * dp) == 0, msg",
             "node-b: AssertionError: global batch size (16) is not divisible by micro batch size (8) times data "
             "parallel size (4)", "pdsh@node-a: node-b: ssh exited with exit code 1"]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == "semantic_error"


@pytest.mark.parametrize(("xid", "category"), [(31, "cuda_error"), (13, "cuda_error"), (79, "gpu_hardware"),
                                               (48, "gpu_hardware"), (119, "gpu_hardware")])
def test_an_xid_is_read_as_the_nvidia_catalog_reads_it(clf: Classifier, xid: int, category: str) -> None:
    # 13, 31 and 43 are first of all the application's own fault; most other codes are the GPU's
    lines = [f"step {i} loss 0.{50 - i}" for i in range(1, 6)] + [
        "Traceback (most recent call last):", '  File "train.py", line 90, in <module>', "    loss.backward()",
        "RuntimeError: CUDA error: unspecified launch failure",
        f"[Mon Jan  6 10:00:00 2025] NVRM: Xid (PCI:0000:3b:00): {xid}, pid=4242, name=python, Ch 00000008"]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == category


def test_a_syntax_error_in_a_string_parsed_at_run_time_is_not_the_jobs_source(clf: Classifier) -> None:
    # wandb's agent parses the server's refusal with ast.literal_eval, which fails on it
    lines = ["wandb: Starting wandb agent 🕵️", "Traceback (most recent call last):",
             '  File "/opt/py/site-packages/wandb/util.py", line 996, in no_retry_auth',
             '    raise CommError("Permission denied, ask the project owner to grant you access")',
             "wandb.errors.CommError: Permission denied, ask the project owner to grant you access", "",
             "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):",
             '  File "/opt/py/site-packages/wandb/sdk/internal/internal_api.py", line 2059, in agent_heartbeat',
             '    message = ast.literal_eval(e.args[0])["message"]',
             '  File "/usr/lib/python3.9/ast.py", line 62, in literal_eval',
             "    node_or_string = parse(node_or_string, mode='eval')",
             '  File "<unknown>", line 1', "    Permission denied, ask the project owner to grant you access",
             "               ^", "SyntaxError: invalid syntax"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "permission_error"
    own = ['  File "train.py", line 12', "    print 'epoch', e", "                ^", "SyntaxError: invalid syntax"]
    assert diagnose_text("\n".join(["Traceback (most recent call last):", *own]), clf).diagnosis.category == \
        "syntax_error"


@pytest.mark.parametrize(("last", "category"), [
    ("Cuda failure 'out of memory'", "gpu_oom"),
    ("Cuda failure 'an illegal memory access was encountered'", "cuda_error"),
    ("Cuda failure 'invalid device ordinal'", "cuda_env_error"),
    ("Cuda failure 'uncorrectable ECC error encountered'", "gpu_hardware"),
])
def test_nccls_last_error_names_the_cuda_failure_behind_it(clf: Classifier, last: str, category: str) -> None:
    lines = [f"step {i} loss 0.{50 - i}" for i in range(1, 6)] + [
        "Traceback (most recent call last):", '  File "train.py", line 30, in <module>', "    dist.all_reduce(t)",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:", last]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == category


def test_two_ranks_on_one_gpu_is_the_launch_configuration(clf: Classifier) -> None:
    lines = ["Traceback (most recent call last):", '  File "train.py", line 12, in <module>',
             "    dist.barrier()",
             "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
             "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5",
             "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", "Last error:",
             "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert (d.category, d.origin) == ("comm_error", "user")


@pytest.mark.parametrize(("line", "category"), [
    ("RuntimeError: Early stopping conditioned on metric `val_loss` which is not available. Pass in or modify your "
     "`EarlyStopping` callback to use any of the following: `train_loss`", "semantic_error"),
    ("OSError: org/model-7b is not a local folder and is not a valid model identifier listed on "
     "'https://huggingface.co/models'", "checkpoint_error"),
    ("tensorflow.python.framework.errors_impl.InternalError: Failed copying input tensor from "
     "/job:localhost/replica:0/task:0/device:CPU:0 to /job:localhost/replica:0/task:0/device:GPU:0 in order to run "
     "_EagerConst: Dst tensor is not initialized.", "gpu_oom"),
    ("RuntimeError: CUDA Setup failed despite GPU being available. Please run the following command to get more "
     "information: python -m bitsandbytes", "cuda_env_error"),
    ("torch._dynamo.exc.Unsupported: call_function BuiltinVariable(setattr) [TensorVariable(), ConstantVariable(str)]",
     "semantic_error"),
])
def test_framework_messages_that_name_their_cause(clf: Classifier, line: str, category: str) -> None:
    lines = [f"step {i} loss 0.{50 - i}" for i in range(1, 6)] + [
        "Traceback (most recent call last):", '  File "train.py", line 30, in <module>', "    main()", line]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == category
