"""Indicator lines of library formats the reader misread, each excerpt
written by hand in the format the library prints (README "Indicator lines: rules" R1-R9)."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread import lines as lines_mod
from gpulens.diagnosis.logread.indicators import rooterror
from tests.diagnosis.test_indicator_formats import _CAUSE, _DURING, _STEPS, _picked, _tb

#: vLLM's logger header, on every line of a traceback it logs (vllm/logger.py's format)
_V = "ERROR 03-04 11:22:33 [registry.py:355] "


def test_a_logged_traceback_counts_by_the_subprocess_error_it_embeds(rules: Classifier) -> None:
    # vLLM logs "Error in inspecting model architecture" and the chain: CalledProcessError (the
    # child's exit, R8) -> "RuntimeError: Error raised in subprocess:" embedding the child's own
    # traceback (R4: the embedded original counts); the process then raises its ValueError
    logged = ([_V + "Error in inspecting model architecture 'OPTForCausalLM'"]
              + [_V + ln for ln in _tb("subprocess.CalledProcessError: Command '['python', '-m', "
                                       "'vllm.model_executor.models.registry']' returned non-zero exit status 1.")]
              + [_V + ln.strip() for ln in _CAUSE]
              + [_V + ln for ln in _tb("RuntimeError: Error raised in subprocess:")]
              + [_V + "<frozen runpy>:128: RuntimeWarning: 'vllm.x' found in sys.modules after import of package 'vllm'"]
              + [_V + ln for ln in _tb("ImportError: cannot import name 'AttrsDescriptor' from 'triton.backends.compiler'",
                                       "/env/torch/_inductor/runtime/hints.py")]
              + [_V])
    lines = (["INFO 03-04 11:22:30 [__init__.py:239] Automatically detected platform cuda."] + logged
             + _tb("ValueError: Model architectures ['OPTForCausalLM'] failed to be inspected. "
                   "Please check the logs for more details.", "/env/vllm/model_executor/models/registry.py"))
    assert _picked(lines, rules) == [
        _V + "ImportError: cannot import name 'AttrsDescriptor' from 'triton.backends.compiler'",
        "ValueError: Model architectures ['OPTForCausalLM'] failed to be inspected. Please check the logs for more details."]


def test_an_old_torch_cuda_error_with_its_advice_first_is_the_error(rules: Classifier) -> None:
    # torch 1.8-1.10 put the asynchronous-report advice before "CUDA error: ..." on one line
    err = ("RuntimeError: CUDA kernel errors might be asynchronously reported at some other API call,so the "
           "stacktrace below might be incorrect. For debugging consider passing CUDA_LAUNCH_BLOCKING=1. "
           "CUDA error: an illegal memory access was encountered")
    lines = (_STEPS + _tb(err) + ["terminate called after throwing an instance of 'c10::CUDAError'",
                                  "  what():  " + err.split(": ", 1)[1],
                                  "Exception raised from create_event_internal at ../c10/cuda/CUDACachingAllocator.cpp:1055"])
    assert _picked(lines, rules) == [err]


def test_pdb_location_is_the_root_of_a_quit_debugger_without_its_prompt(rules: Classifier) -> None:
    # a captured stdout holds pdb's "> file(N)func()" / "-> source" but not its "(Pdb) " prompt (R7)
    lines = (["Invalidate trace cache @ step 0", "> /srv/reward.py(67)accuracy_reward()", "-> reward = 0.0",
              "['<answer>33</answer>']", "[]"]
             + _tb("bdb.BdbQuit", "/usr/lib/python3.10/bdb.py"))
    picked = _picked(lines, rules)
    assert picked[0] == "> /srv/reward.py(67)accuracy_reward()"
    assert picked[-1] == "bdb.BdbQuit"


def test_a_pip_freeze_line_is_no_error(rules: Classifier) -> None:
    # an experiment dumps `pip freeze` (name==version) before it runs; "async-timeout" is a package
    lines = (["Beginning experiment!", "aiohttp==3.9.1", "async-timeout==4.0.3", "attrs==23.1.0", "torch==2.1.0",
              "speechbrain.core - ERROR - Exception:"]
             + _tb('AssertionError: metadata.csv does not exist', "/srv/ljspeech_prepare.py"))
    w = diagnose_text("\n".join(lines), rules)
    assert [lines[n - 1] for n in w.indicator_lines] == ["AssertionError: metadata.csv does not exist"]


def test_huggingface_hub_retry_warning_is_not_the_error(rules: Classifier) -> None:
    # huggingface_hub's http_backoff warns "'<err>' thrown while requesting HEAD <url>" and retries
    warn = ("'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: "
            "/timm/resnet18/resolve/main/model.safetensors (Caused by ConnectTimeoutError(<urllib3.connection."
            "HTTPSConnection object at 0x7f>, 'Connection to huggingface.co timed out. (connect timeout=10)'))\"), "
            "'(Request ID: 6c09)')' thrown while requesting HEAD https://huggingface.co/timm/resnet18/resolve/main/"
            "model.safetensors")
    lines = (["nohup: ignoring input", warn, "Building the data loaders ..."]
             + _tb("socket.timeout: timed out", "/env/urllib3/util/connection.py") + _CAUSE
             + _tb("huggingface_hub.utils._errors.LocalEntryNotFoundError: An error happened while trying to locate "
                   "the file on the Hub and we cannot find the requested files in the local cache.",
                   "/env/huggingface_hub/file_download.py"))
    picked = _picked(lines, rules)
    assert warn not in picked
    assert picked == ["socket.timeout: timed out", lines[-1]]


def test_deepspeed_zero3_cache_flush_warning_is_not_the_error(rules: Classifier) -> None:
    # ZeRO-3's memory-pressure warning, its head lost to a progress bar's refresh
    warn = ("ental to performance. if this is happening frequently consider adjusting settings to reduce memory "
            "consumption. If you are unable to make the cache flushes go away consider adding "
            "get_accelerator().empty_cache() calls in your training loop to ensure that all ranks flush their "
            "caches at the same time")
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 44.35 GiB"
    lines = ["  0%|          | 1/18010 [01:43<5159:20:52, 103.13s/it]", warn] + _tb(oom)
    assert not rooterror.is_root_error(warn)  # a classifier quoting it must not bring it in
    assert _picked(lines, rules) == [oom]


def test_a_chain_whose_messages_quote_other_names_is_two_messages(rules: Classifier) -> None:
    # R4: the first and the last exception of a chain when their messages differ, even where only
    # the quoted name differs (another process's copy is told by its numbers, not by its names)
    first, last = "NameError: name 'accelerator' is not defined", "NameError: name 'logger' is not defined"
    lines = _STEPS + _tb(first) + _DURING + _tb(last)
    assert _picked(lines, rules) == [first, last]


def test_an_error_logged_with_its_message_then_its_traceback_is_labelled_once(rules: Classifier) -> None:
    # logger.error(f"engine init failed: {e}") then logger.error(traceback.format_exc()): R5, the
    # error once at its earliest printing (the logged line), not again at the traceback's end
    msg = "Consistency check failed: file should be of size 2271071852 but has size 834837087 (model.safetensors)."
    logged = f"2025-12-19 02:56:32 - [ERROR] - engine init failed: {msg}"
    lines = (["2025-12-19 02:40:44 - [INFO] - loading 7405 samples", logged,
              "This is usually due to network issues while downloading the file.",
              "2025-12-19 02:56:32 - [ERROR] - Traceback (most recent call last):",
              '  File "/srv/evaluate.py", line 139, in <module>', "    engine = Engine()",
              f"OSError: {msg}", "This is usually due to network issues while downloading the file."])
    assert _picked(lines, rules) == [logged]


_PBS_WALLTIME = "=>> PBS: job killed: walltime 21672 exceeded limit 21600"


@pytest.mark.parametrize("line", [_PBS_WALLTIME, "=>> PBS: job killed: mem 2097152kb exceeded limit 1048576kb",
                                  "=>> PBS: job killed: cput job total 7300 secs exceeded limit 7200",
                                  "=>> PBS: job killed: node 1 (cn112) requested job terminate, 'EOJ' (code 1099) - "
                                  "received SISTER_EOJ attempting to communicate with sister MOM's"])
def test_pbs_kill_is_a_scheduler_kill(line: str) -> None:
    assert lines_mod.is_scheduler_kill(line) and lines_mod.is_terminal_kill(line)


@pytest.mark.parametrize("line", ["PBS: job killed", "echo 'PBS: job killed:'", "#PBS -l walltime=24:00:00"])
def test_pbs_mention_without_a_kill_is_none(line: str) -> None:
    assert not lines_mod.is_scheduler_kill(line)


def test_pbs_walltime_kill_ends_a_training(rules: Classifier) -> None:
    lines = _STEPS * 3 + [_PBS_WALLTIME]
    assert _picked(lines, rules) == [_PBS_WALLTIME]


def test_a_time_limit_that_kills_a_rank_still_running_is_labelled_with_the_error(rules: Classifier) -> None:
    # R6: some ranks failed (their error is the root), the others ran on until PBS's walltime
    # kill, whose SIGTERM the launcher reports ending a rank: the limit ended the job too
    err = "OSError: [Errno 122] Disk quota exceeded"
    lines = (["Due to MODULEPATH changes, the following have been reloaded:"] + _tb(err)
             + ["", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", _PBS_WALLTIME,
                "x3007c0s19b0n0.hsn.cm.polaris.alcf.anl.gov: rank 57 died from signal 15"])
    assert _picked(lines, rules) == [err, _PBS_WALLTIME]


_TIME_LIMIT = "slurmstepd: error: *** JOB 81 ON g3 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***"


@pytest.mark.parametrize("aftermath", [
    _tb("KeyboardInterrupt"),
    _tb("torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15", "/env/bin/torchrun"),
    _tb("lightning.pytorch.utilities.exceptions.SIGTERMException", "/env/lightning/pytorch/trainer/trainer.py")])
def test_the_exception_a_scheduler_kill_raises_is_not_labelled(rules: Classifier, aftermath: list[str]) -> None:
    # R6: the time limit's line; not the traceback its signal then causes
    lines = _STEPS + [_TIME_LIMIT] + aftermath
    assert _picked(lines, rules) == [_TIME_LIMIT]


def test_ray_unhandled_error_head_is_not_the_error(rules: Classifier) -> None:
    # Ray logs a task error nobody retrieved as "Unhandled error (...): ray::Actor.method() (pid=...)"
    # followed by the task's frames and its exception line: the exception line is the error (R2, R4)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    lines = _STEPS + ["2024-05-01 10:00:00,000\tERROR worker.py:406 -- Unhandled error (suppress with "
                      "'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::Trainer.train() (pid=4242, ip=10.0.0.5, actor_id=abc)",
                      '  File "/srv/trainer.py", line 50, in train', "    loss = self.step()", oom]
    assert _picked(lines, rules) == [oom]


def test_glog_fatal_line_says_why_the_process_aborted(rules: Classifier) -> None:
    # R6: the abort and the line that says why: glog/absl's FATAL line above "Check failure stack trace"
    fatal = "F0617 14:30:47.707742 1097242 device_event_mgr.cc:226] Unexpected Event status: 1"
    lines = _STEPS + [fatal, "*** Check failure stack trace: ***",
                      "    @     0x7efd8799b194  absl::log_internal::LogMessage::SendToLog()",
                      "    @     0x7efd87759d93  tensorflow::EventMgr::PollEvents()", "Aborted (core dumped)"]
    assert _picked(lines, rules) == [fatal, "Aborted (core dumped)"]


@pytest.mark.parametrize("line", [
    "F0617 14:30:47.707742 1097242 device_event_mgr.cc:226] Unexpected Event status: 1",  # glog, thread id > 5 digits
    "F0301 10:00:01.500000    77 common.cpp:66] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",  # padded id
    "F0000 00:00:1750170647.707742 4242 cuda_executor.cc:1228] Check failed: false",  # abseil before log init
    "F0301 10:00:01 4242 solver.cpp:12] Check failed: x",  # no fraction of a second
])
def test_one_pattern_reads_glog_and_abseil_fatal_lines(line: str) -> None:
    assert lines_mod.GLOG_FATAL.match(line)


@pytest.mark.parametrize("line", [
    "I0301 10:00:01.500000 4242 api.py:525] global_ranks=[5]",  # info, not fatal
    "E0301 10:00:01.500000 4242 api.py:525] failed (exitcode: 1)",  # error level: not the abort's reason
    "F0301 is the form number",
])
def test_glog_pattern_needs_the_fatal_header(line: str) -> None:
    assert not lines_mod.GLOG_FATAL.match(line)
