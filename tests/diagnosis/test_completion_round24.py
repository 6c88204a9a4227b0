"""Reader round 24, healthy or failed: excerpts written by hand in the formats job scripts and site epilogues
print. A site's end-of-job report that a Slurm or Torque epilogue appends to every job's output (NHR@FAU's
"=== JOB_STATISTICS ===" block, a Torque "Begin PBS Epilogue" block) is not the program going on after its
last error line: a job script's "ERROR: ..." check and ``exit 1`` before such a report is the failure."""

from __future__ import annotations

from gpulens.diagnosis.logread.end.after_error import went_on
from gpulens.diagnosis.logread.whole import diagnose_text

_PROLOGUE = ["### Starting TaskPrologue of job 4411 on n0102 at Mon Mar  2 09:00:01 CET 2026",
             "### Finished TaskPrologue", "", "== my experiment ==", "Loading modules...",
             "Copying dataset to $TMPDIR...", "Staging done: 12G"]
#: NHR@FAU's job statistics as the epilogue appends them (the values are made up).
_FAU_REPORT = ["=== JOB_STATISTICS ===", "=== current date     : Mon Mar  2 09:00:40 CET 2026",
               "= Job-ID             : 4411 on clusterx", "= Job-Name           : exp1",
               "= Job-Command        : /tmp/job_x1.sh", "= Initial workdir    : /home/u/proj",
               "= Queue/Partition    : gpu", "= Slurm account      : grp with QOS=normal",
               "= Features           : gpu_40g", "= Requested resources:  for 1-00:00:00",
               "= Elapsed runtime    : 00:00:39", "= Total RAM usage    : 1.1 GiB of assigned  GiB (%)",
               "= Node list          : n0102", "= Subm/Elig/Start/End: 2026-03-02T08:59:58 / 2026-03-02T08:59:58 / "
               "2026-03-02T09:00:00 / 2026-03-02T09:00:39", "======================", "=== Quota infos ======",
               "    Path     Used   SoftQ   HardQ", "    /home/x   3.1G  100.0G  200.0G", "======================",
               "=== GPU utilization ==",
               "gpu_name, gpu_bus_id, pid, gpu_utilization [%], mem_utilization [%], max_memory_usage [MiB], time [ms]",
               "NVIDIA A100, 00000000:0A:00.0, 1234, 0 %, 0 %, 520 MiB, 2100 ms",
               "NVIDIA A100, 00000000:0A:00.0, 1240, 0 %, 0 %, 530 MiB, 2000 ms"]
_TORQUE_REPORT = ["---------------------------------------", "Begin PBS Epilogue Mon Mar  2 09:00:40 EST 2026",
                  "Job ID:     777.sched-torque.example.edu", "User ID:    u1", "Job name:   exp1",
                  "Resources:  nodes=1:ppn=4:gpus=1,walltime=20:00:00", "Rsrc Used:  cput=00:01:10,walltime=00:00:39",
                  "Queue:      gpu", "Nodes:", "node-12.example.edu", "End PBS Epilogue Mon Mar  2 09:00:40 EST 2026",
                  "---------------------------------------"]
_SCRIPT_CHECK = ["ERROR: virtual environment not found at /scratch/venv", "Create it first: bash setup.sh --venv"]
_AT = len(_PROLOGUE)


def test_a_site_report_after_an_error_line_is_not_the_job_going_on() -> None:
    for report in (_FAU_REPORT, [*_TORQUE_REPORT, *_TORQUE_REPORT[1:]]):
        assert not went_on([*_PROLOGUE, *_SCRIPT_CHECK, *report], _AT)


def test_the_programs_own_output_before_a_site_report_is_still_going_on() -> None:
    own = [f"epoch {i}/30 train_loss {1.0 / i:.3f}" for i in range(1, 31)]
    assert went_on([*_PROLOGUE, *_SCRIPT_CHECK, *own, *_FAU_REPORT], _AT)


def test_a_job_script_error_check_before_a_site_report_is_the_failure() -> None:
    got = diagnose_text("\n".join([*_PROLOGUE, *_SCRIPT_CHECK, *_FAU_REPORT]) + "\n")
    assert got.diagnosis.category != "none"
    assert got.indicator_lines == [_AT + 1]


def test_a_healthy_job_before_a_site_report_stays_healthy() -> None:
    ending = ["epoch 10/10 loss 0.21", "test accuracy: 0.93", "Training complete.", "Mon Mar  2 09:00:39 CET 2026"]
    for report in (_FAU_REPORT, _TORQUE_REPORT):
        got = diagnose_text("\n".join([*_PROLOGUE, *ending, *report]) + "\n")
        assert got.diagnosis.category == "none"


#: A vLLM OpenAI server's log in its own format (vllm/entrypoints/launcher.py ``serve_http``, uvicorn's lines
#: behind the API server's process prefix); the start-up CUDA-graph capture bar reaches its end.
_VLLM = "(APIServer pid=501) "
_SERVER = [f"{_VLLM}INFO 03-02 10:00:00 [api_server.py:1800] vLLM API server version 0.10.2",
           "(EngineCore_0 pid=620) Capturing CUDA graphs (decode, FULL): 100%|██████████| 67/67 [00:03<00:00, 20.1it/s]",
           "(EngineCore_0 pid=620) INFO 03-02 10:00:40 [gpu_model_runner.py:3100] Graph capturing finished in 4 secs",
           f"{_VLLM}INFO 03-02 10:00:41 [api_server.py:1900] Starting vLLM API server 0 on http://0.0.0.0:8000",
           f"{_VLLM}INFO 03-02 10:00:41 [launcher.py:36] Available routes are:",
           *[f"{_VLLM}INFO 03-02 10:00:41 [launcher.py:44] Route: /v1/{r}, Methods: POST" for r in ("chat", "completions")],
           f"{_VLLM}INFO:     Started server process [501]", f"{_VLLM}INFO:     Waiting for application startup.",
           f"{_VLLM}INFO:     Application startup complete.",
           f'{_VLLM}INFO:     127.0.0.1:50000 - "GET /v1/models HTTP/1.1" 200 OK']
_SIGNAL_STOP = [f"{_VLLM}INFO 03-02 11:30:00 [launcher.py:101] Shutting down FastAPI HTTP server.",
                f"{_VLLM}INFO:     Shutting down", f"{_VLLM}INFO:     Waiting for application shutdown.",
                f"{_VLLM}INFO:     Application shutdown complete."]


def test_a_vllm_server_stopped_by_its_signal_handler_is_a_stop_from_outside() -> None:
    got = diagnose_text("\n".join([*_SERVER, *_SIGNAL_STOP]) + "\n")
    assert (got.diagnosis.category, got.diagnosis.origin) == ("preempted", "unknown")
    assert got.indicator_lines == [len(_SERVER) + 1]
    newer = f"{_VLLM}INFO 03-02 11:30:00 [launcher.py:120] [shutdown] API server: shutting down FastAPI HTTP server"
    got = diagnose_text("\n".join([*_SERVER, newer, *_SIGNAL_STOP[1:]]) + "\n")
    assert got.diagnosis.category == "preempted"


def test_a_vllm_server_without_the_signal_shutdown_is_not_called_stopped_by_it() -> None:
    got = diagnose_text("\n".join([*_SERVER, *_SIGNAL_STOP[1:]]) + "\n")
    assert got.diagnosis.category != "preempted"


_ANSWERED = [f'{_VLLM}INFO:     127.0.0.1:{50001 + i} - "POST /v1/chat/completions HTTP/1.1" 200 OK' for i in range(3)]
_STATS = (f"{_VLLM}INFO 03-02 11:29:55 [loggers.py:123] Engine 000: Avg prompt throughput: 310.2 tokens/s, "
          "Avg generation throughput: 88.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%")


def test_a_server_stopped_right_after_answering_its_requests_ended_normally() -> None:
    """A prediction script starts a vLLM server, sends its requests and stops the server once its last answer is in:
    the signal shutdown right after answered requests (its statistics lines between) is the job's normal end."""
    for tail in ([*_ANSWERED], [*_ANSWERED, _STATS, _STATS]):
        got = diagnose_text("\n".join([*_SERVER, *tail, *_SIGNAL_STOP]) + "\n")
        assert (got.diagnosis.category, got.diagnosis.origin) == ("none", "none"), tail
        assert got.completion is not None and "Shutting down FastAPI" in got.completion[1]


def test_a_server_stopped_after_a_failed_request_or_idling_was_stopped_from_outside() -> None:
    failed = f'{_VLLM}INFO:     127.0.0.1:50009 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error'
    idle = [f"{_VLLM}WARNING 03-02 11:00:00 [api_server.py:900] client disconnected"]
    for tail in ([*_ANSWERED, failed], [*_ANSWERED, *idle], [*_ANSWERED, *[_STATS] * 6]):
        got = diagnose_text("\n".join([*_SERVER, *tail, *_SIGNAL_STOP]) + "\n")
        assert got.diagnosis.category == "preempted", tail


def test_a_site_report_is_not_the_job_s_error_context() -> None:
    """A site's end-of-job report (its RAM and GPU memory tables), appended after the job script exited, is cut from
    the error context the model reads: the report's memory figures are not the job's error."""
    from gpulens.diagnosis.logread.end.after_error import site_report
    from gpulens.diagnosis.logread.whole import diagnose_text
    report = ["=== JOB_STATISTICS ===", "=== current date     : Fri 27 Mar 2026 10:12:03 AM CET",
              "= Job-ID             : 3260432 on alex", "= Node list          : a0803",
              "= Total RAM usage    : 3.1 GiB of requested  GiB (%)",
              "GPU utilization and memory: max_memory_usage [MiB] 61234, out of memory events 0"]
    lines = ["Starting job on a0803", "ERROR: No Python environment found", "Run setup first: bash setup.sh"] + report
    assert site_report(lines, 0) == 3
    assert site_report(lines[:3], 0) is None
    w = diagnose_text("\n".join(lines))
    assert not any("max_memory_usage" in e or "RAM usage" in e for e in w.diagnosis.evidence)
