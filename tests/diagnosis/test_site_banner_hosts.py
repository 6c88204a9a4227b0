"""The host a single-node job ran on, from the banners sites and toolkits print around it (NHR@FAU's
Slurm TaskPrologue and job report, Kaldi's queue.pl/slurm.pl log header), on excerpts written by hand in those formats."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.ranks import HOST_KEYS, announced_host

_FAILURE = ["Traceback (most recent call last):", '  File "train.py", line 12, in <module>',
            "    main()", "ValueError: unknown optimizer 'adamw8'"]


def _host(lines: list[str]) -> str | None:
    return announced_host(lines, find_keys(lines, HOST_KEYS, 0))


def test_nhr_fau_task_prologue_and_job_report_name_the_node() -> None:
    assert _host(["### Starting TaskPrologue of job 4411 on tg093 at Mon Mar  3 10:00:01 CET 2025",
                  "### Finished TaskPrologue"]) == "tg093"
    assert _host(["=== JOB_STATISTICS ===", "= Node list          : tg093"]) == "tg093"
    # a node list of two hosts names none
    assert _host(["= Node list          : tg[093-094]"]) is None


def test_kaldi_queue_header_names_the_node_but_not_a_device() -> None:
    assert _host(["# Running on gpu-n17", "# Started at Tue May 6 09:00:00 2025"]) == "gpu-n17"
    assert _host(["# Running on cuda"]) is None
    assert _host(["# Running on the validation set"]) is None


def test_a_failed_job_charges_the_banners_node(rules: Classifier) -> None:
    log = ["### Starting TaskPrologue of job 4411 on tg093 at Mon Mar  3 10:00:01 CET 2025",
           "### Finished TaskPrologue", "epoch 0 step 0 loss 2.31", *_FAILURE]
    assert diagnose_text("\n".join(log), rules).first_node == "tg093"
