"""Formats read from dev rows in stop 55: a benchmark harness's per-case result rows ("[oom  ] ..." beside "[ok   ]");
vLLM v1's engine process printing its own shutdown above the API server's; a job's exit status 127 with the shell's
"command not found" pushed out of the last lines by the scheduler's report; sbatch's "Submitted batch job N"; ECMWF's
job-profile banner naming the job's host; Marian's CUDA error format; Slurm's energy-accounting plugin errors; and
exception lines behind a Ray or vLLM process prefix ("(EngineCore pid=N) ValueError: ...")."""

from __future__ import annotations

from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.end.lastwords import missing_command
from gpulens.diagnosis.logread.end.terminal import case_results
from gpulens.diagnosis.logread.lines import is_benign, is_failure, is_progress
from gpulens.diagnosis.logread.ranks import HOST_KEYS, announced_host
from gpulens.diagnosis.rules import match_rules

_AUTOTUNE = ["  triton_mm_8 0.7025 ms 99.7% ACC_TYPE='tl.float32', BLOCK_K=16, BLOCK_M=64, num_stages=5, num_warps=4",
             "SingleProcess AUTOTUNE benchmarking takes 0.5867 seconds and 0.0001 seconds precompiling for 12 choices"]


def _bench(last: str) -> list[str]:
    lines = ["/opt/env/lib/python3.11/site-packages/torch/__init__.py:1: UserWarning: TF32 is enabled"]
    for size in ("l1/1", "l1/2", "l2/2", "l3/3"):
        lines += [*_AUTOTUNE, f"[ok   ] opA_compile_fwbw  {size} C64 E100000 float32 fwd=2.8 bwd=8.0 total=10.8 mem=1.4 ",
                  f"[ok   ] opB              {size} C64 E100000 float32 fwd=1.3 bwd=6.2 total=7.6 mem=1.0 "]
    return [*lines, last, "DONE -> /tmp/bench_20260614/compile_fwbw_flat/operator_compile_fwbw_flat.csv"]


def test_a_harness_records_a_cases_oom_as_its_result_and_finishes() -> None:
    oom = ("[oom  ] opC              l3/3 C64 E100000 float32 fwd= bwd= total= mem= OutOfMemoryError:CUDA out of memory. "
           "Tried to allocate 5.89 GiB. GPU 0 has a total capacity of 23.64 GiB of which 388.69 MiB is free.")
    lines = _bench(oom)
    assert case_results(lines, [len(lines) - 2, len(lines) - 3]) == {len(lines) - 2}
    assert diagnose_text("\n".join(lines)).diagnosis.healthy
    alone = [ln for ln in lines if not ln.startswith("[ok")]  # no case that went right beside it: no results table
    assert case_results(alone, [len(alone) - 2]) == set()
    assert not diagnose_text("\n".join(alone)).diagnosis.healthy


def _served(*engine: str) -> list[str]:
    lines = ["(APIServer pid=2348) INFO 06-02 03:20:01 [api_server.py:1900] Starting vLLM API server 0 on http://0.0.0.0:8000",
             "(APIServer pid=2348) INFO:     Application startup complete."]
    for k in range(40):
        lines.append(f'(APIServer pid=2348) INFO:     10.0.0.2:{51000 + k} - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    lines += ["(APIServer pid=2348) INFO 06-02 03:40:20 [loggers.py:271] Engine 000: Avg prompt throughput: 1917.7 tokens/s, "
              "Avg generation throughput: 435.8 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%", *engine,
              "(APIServer pid=2348) INFO 06-02 03:41:11 [launcher.py:137] Shutting down FastAPI HTTP server.",
              "(APIServer pid=2348) INFO:     Shutting down", "(APIServer pid=2348) INFO:     Waiting for application shutdown.",
              "(APIServer pid=2348) INFO:     Application shutdown complete."]
    return lines


def test_a_server_stopped_after_answering_with_its_engines_shutdown_above_ended_normally() -> None:
    engine = ("(EngineCore pid=2691) INFO 06-02 03:41:11 [core.py:1266] Shutdown initiated (timeout=0)",
              "(EngineCore pid=2691) INFO 06-02 03:41:11 [core.py:1289] Shutdown complete")
    assert diagnose_text("\n".join(_served(*engine))).diagnosis.healthy
    idle = ["(APIServer pid=2348) INFO 06-02 03:30:00 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 0.0 tokens/s, Running: 0 reqs"] * 6  # idle long after its last answer: stopped
    assert not diagnose_text("\n".join(_served(*idle, *engine))).diagnosis.healthy


_UNSW_REPORT = ["=" * 80, " " * 21 + "Resource Usage on 04/07/2026 16:50:50" + " " * 22, "", "Job Id: 8462307 ",
                "Queue: SIMI", "Walltime: 00:09:08  (requested 12:00:00)",
                "Job unsuccessful. Exit Status 127 - Exit status refers to the exit value of the",
                "top process in the job, typically the shell.", "This may be the exit value of the last command executed in "
                "the shell.", "See job output error.", "", "-" * 80, "|              |    GPUs    |    Memory    |", "-" * 80]


def test_exit_status_127_names_the_shells_missing_command_above_the_schedulers_report() -> None:
    missing = "/var/spool/pbs/mom_priv/jobs/8462307.kman.SC: line 159: mfa: command not found"
    lines = ["Prepared 449 utterances in /srv/scratch/raw_data.", "[INFO] Running Montreal Forced Aligner", missing,
             "Cgroup memsw limit exceeded: ", *_UNSW_REPORT]
    verdict = lines.index(_UNSW_REPORT[6])
    assert missing_command(lines, 0, [verdict]) == [2]
    w = diagnose_text("\n".join(lines))
    assert w.diagnosis.category == "import_error" and w.indicator_lines == [3]
    status_1 = [ln.replace("Exit Status 127", "Exit Status 1") for ln in lines]
    assert missing_command(status_1, 0, [verdict]) == []  # another status: the command's own failure, not a missing one


def test_sbatchs_submission_line_is_no_training_step() -> None:
    assert not is_progress("[ECMWF-INFO -sbatch] - Submitted batch job 39501466")
    assert not is_progress("Submitted batch job 39501466")
    assert is_progress("epoch 3 batch 120/730 loss=5.1257")


def test_ecmwfs_job_profile_banner_names_the_jobs_host() -> None:
    banner = "[ECMWF-INFO -ecprofile] /usr/bin/bash NON_INTERACTIVE on ac6-306 at 20251215_192224.591, PID: 26561, JOBID: 1"
    assert any(k in banner for k in HOST_KEYS)
    assert announced_host([banner], [0]) == "ac6-306"
    assert announced_host(["[ECMWF-INFO -sbatch] - sbatch executed on ac"], [0]) is None


def test_marians_cuda_error_names_the_launch_failure() -> None:
    line = ("[2019-01-08 04:45:31] Error: CUDA error 4 'unspecified launch failure' - /src/tensors/gpu/cuda_helpers.h:45: "
            "cudaMemcpy(dest, start, (end - start) * sizeof(T), cudaMemcpyDefault)")
    assert [m.rule.id for m in match_rules(line)][:1] == ["cuda-unspecified-launch-failure"]


def test_slurms_energy_plugin_error_is_no_failure() -> None:
    line = "slurmstepd: error: slurm_get_node_energy: Socket timed out on send/recv operation"
    assert is_benign(line) and not is_failure(line, line)
    assert is_failure("slurmstepd: error: Detected 1 oom_kill event in StepId=36898710.batch.",
                      "slurmstepd: error: Detected 1 oom_kill event in StepId=36898710.batch.")


def test_an_exception_behind_a_ray_or_vllm_process_prefix_is_a_failure_line() -> None:
    assert is_failure("(EngineCore pid=6890) ValueError: To serve at least one request with the model's max seq len")
    assert is_failure("\x1b[36m(TaskRunner pid=625502)\x1b[0m RuntimeError: boom")
    assert not is_failure("(AgentLoopWorker pid=948099) ERROR:2026-07-16 17:47:20,190:Failed to decode tool call")
    kv = ("ValueError: To serve at least one request with the model's max seq len (262144), (18.35 GiB KV cache is needed, "
          "which is larger than the available KV cache memory (8.72 GiB). Try increasing `gpu_memory_utilization`.")
    tb = ["Traceback (most recent call last):", '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", '
          "line 294, in _initialize_kv_caches", "    kv_cache_configs = get_kv_cache_configs(", kv]
    lines = ["(APIServer pid=6787) INFO 08-03 21:40:01 [utils.py:253] non-default args: {'model': 'x/y-INT4'}",
             "(EngineCore pid=6890) INFO 08-03 21:49:20 [gpu_worker.py:391] Available KV cache memory: 8.72 GiB",
             *(f"(EngineCore pid=6890) ERROR 08-03 21:49:23 [core.py:1231] {ln}" for ln in tb),
             "(EngineCore pid=6890) Process EngineCore:", *(f"(EngineCore pid=6890) {ln}" for ln in tb),
             "(APIServer pid=6787) Traceback (most recent call last):",
             '(APIServer pid=6787)   File "/venv/bin/vllm", line 10, in <module>',
             "(APIServer pid=6787) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
    w = diagnose_text("\n".join(lines))
    assert w.diagnosis.category == "gpu_oom"
    # the engine's logged record (its own traceback's reprint is the same chain), then the API server's terminal line
    # that points at it (README R7)
    assert w.indicator_lines == [6, len(lines)]
