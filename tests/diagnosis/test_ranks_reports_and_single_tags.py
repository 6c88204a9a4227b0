"""Reader round 14 (r14-rank): the first failing rank from formats the reader did not read yet, on excerpts
written by hand in the shapes the libraries print."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.ranks import Origin, origin_of

_CKPT_TRACE = ['  File "/opt/venv/lib/python3.10/site-packages/lightning/pytorch/callbacks/model_checkpoint.py", line 380, '
               'in _save_checkpoint', "    trainer.save_checkpoint(filepath, self.save_weights_only)",
               "OSError: [Errno 5] Input/output error"]


def test_lightnings_deadlock_report_names_the_rank_that_raised(rules: Classifier) -> None:
    # DDPStrategy.reconciliate_processes: f"DeadLock detected from rank: {self.global_rank} \n {trace}"
    line = "lightning.pytorch.utilities.exceptions.DeadlockDetectedException: DeadLock detected from rank: 1 "
    assert origin_of(line) == Origin(1)
    # its own source line, quoted in the traceback, names no rank
    assert origin_of('    raise DeadlockDetectedException(f"DeadLock detected from rank: {self.global_rank} \\n {trace}")') \
        == Origin()
    log = ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2", "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2",
           "Epoch 0: 100%|##########| 50/50 [00:10<00:00, loss=0.31]",
           "Traceback (most recent call last):", *_CKPT_TRACE, "",
           "During handling of the above exception, another exception occurred:", "",
           "Traceback (most recent call last):", '  File "train.py", line 12, in main', "    trainer.fit(model)",
           '  File "/opt/venv/lib/python3.10/site-packages/lightning/pytorch/strategies/ddp.py", line 410, in '
           "reconciliate_processes",
           '    raise DeadlockDetectedException(f"DeadLock detected from rank: {self.global_rank} \\n {trace}")',
           line, " Traceback (most recent call last):", *_CKPT_TRACE]
    assert diagnose_text("\n".join(log), rules).first_rank == 1


def _pals_job(ends: list[str]) -> list[str]:
    return ["Error executing job with overrides: []", "Traceback (most recent call last):",
            '  File "./main.py", line 185, in main', "    loss.backward()",
            "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:46, unhandled cuda error, NCCL version 2.10.3",
            "ncclUnhandledCudaError: Call to CUDA function failed.", *ends]


def test_pals_mpiexec_names_the_rank_that_ended_badly_first(rules: Classifier) -> None:
    # HPE Cray PALS mpiexec: "<host>: rank N died from signal S [and dumped core]" / "<host>: rank N exited with code C"
    one = _pals_job(["x1002c3s1b0n0.hsn.cm.polaris.alcf.anl.gov: rank 41 died from signal 6 and dumped core"])
    w = diagnose_text("\n".join(one), rules)
    assert (w.first_rank, w.first_node) == (41, "x1002c3s1b0n0.hsn.cm.polaris.alcf.anl.gov")
    # ranks mpiexec stopped with SIGTERM once one had failed are not the failure
    two = _pals_job(["x1002c3s1b0n1: rank 0 died from signal 15", "x1002c3s1b0n0: rank 9 exited with code 1"])
    assert diagnose_text("\n".join(two), rules).first_rank == 9


def _excepthook_copy(tags: list[int]) -> list[str]:
    """An uncaught error printed plain, then torch's excepthook copy of it behind each ``[rankN]:`` tag."""
    body = ["Traceback (most recent call last):", '  File "/srv/train.py", line 133, in <module>', "    trainer.train()",
            "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."]
    return ["{'loss': 7.63, 'epoch': 0.04}", *body, *(f"[rank{r}]: {ln}" for r in tags for ln in body)]


def test_torchs_rank_tags_that_name_one_rank_name_the_logs_process(rules: Classifier) -> None:
    # one rank's wandb output.log: torch's distributed excepthook tags its copy of the traceback [rank2]:
    assert diagnose_text("\n".join(_excepthook_copy([2])), rules).first_rank == 2
    # tags of two ranks in one log: the untagged first copy may be either's
    assert diagnose_text("\n".join(_excepthook_copy([2, 3])), rules).first_rank is None
    # Lightning's "[rank: 0]" is printed by rank 0 only (rank_zero_only): it names no log's process
    lightning = ["[rank: 0] Seed set to 42", *_excepthook_copy([])]
    assert diagnose_text("\n".join(lightning), rules).first_rank is None


def _dcp_report(printer: int, failed: int) -> list[str]:
    """torch.distributed.checkpoint's CheckpointException as each rank raises it, behind its ``[rankN]:`` tag."""
    body = ["Traceback (most recent call last):", '  File "/srv/train.py", line 300, in save', "    dcp.save(state, "
            "checkpoint_id=path)", "torch.distributed.checkpoint.api.CheckpointException: CheckpointException "
            f"ranks:dict_keys([{failed}])", f"Traceback (most recent call last): (RANK {failed})",
            '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/checkpoint/filesystem.py", line 120, in '
            "write_data", "OSError: [Errno 122] Disk quota exceeded"]
    return [f"[rank{printer}]: {ln}" for ln in body]


def test_a_checkpoint_exception_names_the_rank_whose_save_failed(rules: Classifier) -> None:
    # every rank raises the gathered report; rank 0's copy is printed first, rank 2's save failed
    assert origin_of("[rank0]: torch.distributed.checkpoint.api.CheckpointException: CheckpointException "
                     "ranks:dict_keys([2, 3])") == Origin(2)
    assert origin_of("gpu07: [rank0]: Traceback (most recent call last): (RANK 2)") == Origin(2)
    log = ["step 100 loss 1.93", *(ln for r in (0, 1, 2, 3) for ln in _dcp_report(r, 2))]
    assert diagnose_text("\n".join(log), rules).first_rank == 2


_RAYLET_REPORT = ("[2024-05-01 10:00:00,000 E 812 812] (raylet) node_manager.cc:3084: 1 Workers (tasks / actors) killed "
                  "due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 5f0c2e9a, IP: "
                  "10.0.0.9) over the last time period.")


def test_rays_raylet_lines_name_the_node_it_lost_workers_on() -> None:
    # the raylet's report of the workers it lost, as the driver prints a remote raylet's line (and its own node's)
    assert origin_of("(raylet, ip=10.0.0.9) " + _RAYLET_REPORT) == Origin(None, "10.0.0.9")
    assert origin_of("(raylet) " + _RAYLET_REPORT) == Origin(None, "10.0.0.9")
    assert origin_of("(raylet, ip=10.0.0.4) [2024-05-01 10:00:00,000 I 812 812] gcs_client.cc:100: connected") \
        == Origin(None, "10.0.0.4")
