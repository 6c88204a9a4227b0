"""Round 12, formats that round 11 found outside its files: Hydra's compact config errors, NCCL's
shared-memory warning before its bare system error, pytorch-template's early stop, timm's train
lines, dash naming the script, a buffered repeat of a file's first line at its end, TensorFlow's
event poller abort, and an import failing in a model's remote code. Each excerpt is short and
written for the test in the library's format."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.attempts import attempt_starts
from gpulens.diagnosis.logread.end.completion_messages import completion_strength
from gpulens.diagnosis.logread.end.lastwords import last_words
from gpulens.diagnosis.logread.lines import is_progress

_HYDRA_END = "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."


def _startup() -> list[str]:
    return ["Job 5151 on node03 at Tue Mar  4 09:12:01 UTC 2025", "conda env: vit", "Preparing the run ..."]


def test_hydra_missing_config_without_an_exception_class_is_classified(rules: Classifier) -> None:
    lines = [*_startup(), "In 'train': Could not find 'model/vit_hugee'", "", "Available options in 'model':",
             "\tvit_base", "\tvit_large", "Config search path:", "\tprovider=hydra, path=pkg://hydra.conf",
             "\tprovider=main, path=file:///home/u/proj/conf", "", _HYDRA_END]
    assert last_words(lines, 0) == [3, len(lines) - 1]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.diagnosis.category, w.diagnosis.rule_id) == ("semantic_error", "hydra-missing-config")
    assert w.indicator_lines == [4] and w.phase == "startup"


def test_hydra_override_of_an_unknown_key_is_classified(rules: Classifier) -> None:
    lines = [*_startup(), "Could not override 'optim.lr_warmup'.", "To append to your config use +optim.lr_warmup=500",
             "Key 'lr_warmup' is not in struct", "    full_key: optim.lr_warmup", "    object_type=dict", "",
             _HYDRA_END]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.diagnosis.category, w.diagnosis.rule_id) == ("semantic_error", "omegaconf-config-error")
    assert w.indicator_lines == [4]


def test_hydra_end_after_a_traceback_adds_no_line() -> None:
    lines = [*_startup(), "Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 9, in main',
             "    run(cfg)", "ValueError: bad", "", _HYDRA_END]
    assert last_words(lines, 0) == []


def _nccl_shm() -> list[str]:
    return ["node7:2231:2290 [0] NCCL INFO Channel 00/02 :    0   1",
            "node7:2231:2290 [0] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-Qa81Zs to "
            "9637892 bytes",
            "node7:2231:2290 [0] misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment "
            "/dev/shm/nccl-Qa81Zs (size 9637888)",
            "node7:2231:2290 [0] NCCL INFO transport/shm.cc:114 -> 2",
            "Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 88, in <module>',
            "    main()", '  File "/home/u/proj/train.py", line 61, in main', "    dist.barrier()",
            '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3685, '
            "in barrier", "    work = default_pg.barrier(opts=opts)",
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
            "1691, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
            "Last error:"]


def test_nccl_shm_warning_before_its_system_error_is_the_cause(rules: Classifier) -> None:
    w = diagnose_text("\n".join([*_startup(), *_nccl_shm()]), rules)
    assert (w.diagnosis.category, w.diagnosis.rule_id) == ("cpu_oom", "nccl-shm-too-small")


def test_nccl_system_error_without_a_warning_stays_a_comm_error(rules: Classifier) -> None:
    lines = [ln for ln in _nccl_shm() if "NCCL WARN" not in ln]
    w = diagnose_text("\n".join([*_startup(), *lines]), rules)
    assert w.diagnosis.category == "comm_error"


def _template_epochs() -> list[str]:
    out = []
    for e in range(14, 17):
        out += [f"    epoch          : {e}", f"    loss           : 0.4{e}", f"    val_loss       : 0.5{e}"]
    return out


def test_pytorch_template_early_stop_is_a_normal_end(rules: Classifier) -> None:
    stop = "Validation performance didn't improve for 10 epochs. Training stops."
    assert completion_strength(stop) >= 0.95
    w = diagnose_text("\n".join([*_template_epochs(), stop]), rules)
    assert w.diagnosis.category == "none" and w.diagnosis.reason.endswith("a completion message, no failure after it")


def test_timm_train_lines_are_progress() -> None:
    assert is_progress("Train: 3 [ 100/1251 (  8%)]  Loss: 6.912 (6.93)  Time: 0.412s,  621.36/s  "
                       "(0.418s,  612.50/s)  LR: 1.000e-03  Data: 0.012 (0.015)")
    assert is_progress("2025-03-04 09:30:12,101 INFO Train: 12 [1250/1251 (100%)]  Loss: 3.41 (3.52)  Time: 0.402s")
    assert not is_progress("Train: 3 [ 100/1251 (  8%)]  Loss: nan (nan)  RuntimeError: boom")


def test_dash_naming_the_script_ends_the_job(rules: Classifier) -> None:
    lines = [*_startup(), "run_pretrain.sh: 7: torchrun: not found"]
    assert last_words(lines, 0) == [3]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.diagnosis.category, w.diagnosis.rule_id) == ("import_error", "shell-command-not-found")


def test_bash_translated_syntax_error_ends_the_job(rules: Classifier) -> None:
    lines = [*_startup(), "/home/u/job.sh: 行 28: 未预期的符号 `done' 附近有语法错误", "/home/u/job.sh: 行 28: `done'"]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.diagnosis.category, w.diagnosis.rule_id) == ("syntax_error", "shell-syntax-error")


_UCX = "[1718000000.123456] [gpu12:4242:0]          parser.c:2036 UCX  DEBUG UCX_TLS variable set to rc,sm"


def test_first_line_again_at_the_very_end_starts_no_attempt() -> None:
    body = [_UCX, "Epoch 1 step 1 loss 2.3", "Epoch 1 step 2 loss 2.1", "Traceback (most recent call last):",
            '  File "/home/u/t.py", line 3, in <module>', "RuntimeError: boom", "srun: error: gpu12: task 0: Exited "
            "with exit code 1", ""]
    assert attempt_starts([*body, _UCX, "[1718000000.2] [gpu12:4242:0] UCX  DEBUG done"]) == [0]
    assert attempt_starts([*body, _UCX, "a", "b", "c", "d"]) == [0, len(body)]


def test_tensorflow_event_poller_abort_is_a_cuda_error(rules: Classifier) -> None:
    lines = [*[f"Epoch 1/5 step {k}/200 loss 0.{90 - k}" for k in range(1, 13)],
             "F0000 00:00:1712345678.123456 4242 device_event_mgr.cc:226] Unexpected Event status: 1",
             "*** Check failure stack trace: ***",
             "    @     0x7f0a1b2c3d40  absl::log_internal::LogMessage::SendToLog()",
             "    @     0x7f0a1b2c5a70  start_thread"]
    w = diagnose_text("\n".join(lines), rules)
    assert (w.diagnosis.category, w.diagnosis.rule_id) == ("cuda_error", "tf-event-mgr-unexpected-status")


def test_import_failing_in_remote_model_code_is_startup(rules: Classifier) -> None:
    lines = [*_startup(), "Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 120, in <module>',
             "    load_model()", '  File "/home/u/proj/train.py", line 64, in load_model',
             "    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)",
             '  File "/opt/conda/lib/python3.10/site-packages/transformers/models/auto/auto_factory.py", line 553, '
             "in from_pretrained", "    model_class = get_class_from_dynamic_module(",
             '  File "/opt/conda/lib/python3.10/site-packages/transformers/dynamic_module_utils.py", line 315, '
             "in get_cached_module_file", "    modules_needed = check_imports(resolved_module_file)",
             '  File "/opt/conda/lib/python3.10/site-packages/transformers/dynamic_module_utils.py", line 180, '
             "in check_imports", "    raise ImportError(",
             "ImportError: This modeling file requires the following packages that were not found in your "
             "environment: flash_attn. Run `pip install flash_attn`"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.diagnosis.category == "import_error" and w.phase == "startup"
