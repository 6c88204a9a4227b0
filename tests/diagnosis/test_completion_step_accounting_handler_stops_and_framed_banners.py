"""Healthy vs failed (reader round 17): a completion message followed only by Slurm's memory accounting
at the step's end is a normal end; a program's own SIGTERM handler record as its last words, and a
per-step report short of its end followed by the multiprocessing resource tracker's clean-up, are
failures, never a normal end; a banner framed by rulers printed again starts a new attempt. Each
excerpt is short, hand-written in the format of the library or scheduler its test names."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.attempts import attempt_starts
from gpulens.diagnosis.logread.end.completion_messages import completion_strength
from gpulens.diagnosis.logread.end.shutdown import shutdown_error


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


# ---------------------------------------------------------------- Slurm's step-end memory accounting

def _style_transfer_run() -> list[str]:
    """pytorch/examples fast_neural_style ``train``: a tab-separated report every log interval, then
    "Done, trained model saved at PATH" after the last epoch."""
    out = [f"Tue Mar  5 10:{k:02d}:00 2019\tEpoch 2:\t[{k * 500}/4000]\tcontent: 91234.5\tstyle: 1234.5\ttotal: 92469.0"
           for k in range(1, 9)]
    return [*out, "", "Done, trained model saved at saved/epoch_2_Tue_Mar_5_10:09:11_2019_1e5_1e10.model"]


def test_fast_neural_style_end_is_a_completion_message() -> None:
    assert completion_strength("Done, trained model saved at saved/epoch_2.model") >= 0.95


def test_step_memory_limit_reached_at_some_point_after_the_completion_is_a_normal_end(clf: Classifier) -> None:
    # Slurm task/cgroup (task_cgroup_memory.c, task_cgroup_memory_check_oom): the cgroup's failcnt is not
    # zero, printed at the step's end; no process was killed
    lines = [*_style_transfer_run(), "slurmstepd: error: Exceeded step memory limit at some point."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"
    assert "memory accounting" in (w.diagnosis.reason or "")


def test_job_memory_limit_line_is_the_accounting_kind() -> None:
    assert shutdown_error("slurmstepd: error: Exceeded job memory limit at some point.") == "accounting"


def test_an_oom_kill_event_after_the_completion_is_still_a_failure(clf: Classifier) -> None:
    # the cgroup OOM killer's count (Slurm 17.11 on) reports a kill, not the fail count
    lines = [*_style_transfer_run(), "slurmstepd: error: Detected 1 oom-kill event(s) in step 4242.batch cgroup. "
             "Some of your processes may have been killed by the cgroup out-of-memory handler."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "cpu_oom"


# ---------------------------------------------------------------- a signal handler's own record

def _osprey_header() -> list[str]:
    rule = "=" * 70
    return [rule, "= osprey is a tool for machine learning hyperparameter optimization. =", rule, "",
            "osprey version:      1.1.0", "time:               March 3, 2019  9:12 AM", "",
            "Loading config file:     config.yaml..."]


def _osprey_iterations(n: int, total: int) -> list[str]:
    out: list[str] = []
    for k in range(1, n + 1):
        out += ["-" * 70, f"Beginning iteration{k:>45} / {total}", "-" * 70,
                "Loading trials database: sqlite:///osprey-trials.db...", f"History contains: {k + 2} trials",
                "Choosing next hyperparameters with random...", "(random took 0.002 s)", "",
                f"Success! Model score = -1.2{k}", f"(best score so far   = -1.1{k})", "~" * 33, ""]
    return out


def test_a_workers_sigterm_record_as_its_last_words_is_a_stop_not_a_normal_end(clf: Classifier) -> None:
    # osprey/execute_worker.py: the SIGTERM handler it installs prints its footer (stdout), then
    # "== osprey worker received signal SIGTERM!" / "== exiting immediately." (stderr) and exits 1
    lines = [*_osprey_header(), *_osprey_iterations(6, 50), "6/50 models fit successfully.",
             "time:         March 3, 2019 11:40 AM", "elapsed:      2 hours, 28 minutes.", "osprey worker exiting.",
             "== osprey worker received signal SIGTERM!", "== exiting immediately."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "preempted"
    assert w.indicator_lines == [len(lines) - 1]


def test_a_sigterm_record_after_a_completion_message_is_a_normal_end(clf: Classifier) -> None:
    lines = [*[f"epoch {e}/10 loss 0.{60 - e}" for e in range(1, 11)], "Training complete: saved final model to out/",
             "Received signal SIGTERM, exiting"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"


def test_a_banner_between_rulers_printed_again_starts_an_attempt() -> None:
    first = [*_osprey_header(), *_osprey_iterations(1, 1), "TypeError: _ei() got an unexpected keyword argument 'kappa'"]
    second = [*_osprey_header(), *_osprey_iterations(3, 50)]
    assert attempt_starts([*first, *second]) == [0, len(first)]


def test_a_ruler_above_code_lines_starts_no_attempt() -> None:
    rule = "=" * 100
    code = ["import torch", "import torch.nn as nn", "", "def main():", "    pass"]
    lines = [rule, *code, rule, *[f"step:{k}/100 train_loss:3.{k}" for k in range(1, 9)], rule, *code, rule]
    assert attempt_starts(lines) == [0]


# ---------------------------------------------------------------- a per-step report short of its end

def _marl_iterations(n: int) -> list[str]:
    avg = "{'agent_0': tensor(0.), 'agent_1': tensor(0.), 'agent_2': tensor(0.), 'agent_3': tensor(0.)}"
    return [f"Iteration {k}/150 | Iteration Elapsed 7{k % 10}.41 | Average: {avg} | SPS 31{k % 10}.2 | "
            f"Policy Update 5{k % 10}.07 | Value Loss 0.0{k % 10}1 | Entropy 1.3{k % 10}" + " " * 300
            for k in range(1, n + 1)]


def test_a_step_report_short_of_its_end_then_the_resource_trackers_clean_up_is_a_stop(clf: Classifier) -> None:
    # multiprocessing/resource_tracker.py main(): warns of what no process unregistered once every
    # process that used the tracker has exited
    lines = [*_marl_iterations(12),
             "/opt/conda/lib/python3.10/multiprocessing/resource_tracker.py:224: UserWarning: resource_tracker: "
             "There appear to be 24 leaked shared_memory objects to clean up at shutdown",
             "  warnings.warn('resource_tracker: There appear to be %d '"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "unknown" and w.diagnosis.method == "completion"
    assert w.indicator_lines == [len(lines) - 1]


def test_a_step_report_at_its_end_is_still_results() -> None:
    from gpulens.diagnosis.logread.end.completion import end_evidence

    lines = [ln.replace("/150", "/12") for ln in _marl_iterations(12)]
    end = end_evidence(lines, 0, [])
    assert end is not None and not end.stopped


# ---------------------------------------------------------------- an early-stopping message in title case

def test_title_case_early_stopping_is_a_completion_message() -> None:
    assert completion_strength("Early Stopping....@ 41 epoch for patience @ 10.0") >= 0.95
    assert completion_strength("Early Stopping patience: 10") == 0.0
