"""Reader round 24, attempts: excerpts written by hand in the formats CPython and job schedulers print.
CPython prints an uncaught exception's traceback from ``sys.excepthook`` and the process exits 1
(Python/pythonrun.c ``_PyErr_PrintEx``): nothing of that process's top level runs after it, so a
second uncaught traceback from the same script's top level, raised by another top-level statement,
is the script run again with its output appended to the same file (a PBS/Slurm job's stderr file
that each job appends, a shell loop)."""

from __future__ import annotations

from gpulens.diagnosis.logread.attempts import attempt_starts
from gpulens.diagnosis.logread.whole import diagnose_text

_RUN1 = ["Traceback (most recent call last):", '  File "fit.py", line 40, in <module>',
         "    model.restore('ckpt/last')", "AttributeError: 'Model' object has no attribute 'restore'"]
_RUN2 = ["Traceback (most recent call last):", '  File "fit.py", line 41, in <module>', "    model.fit()",
         '  File "/home/u/pkg/model.py", line 88, in fit', "    self.load_data()",
         '  File "/home/u/pkg/data.py", line 12, in load_data', "    raise NotImplementedError", "NotImplementedError"]
_RUN3 = ["Reading structures: 100%|##########| 300/300 [00:01<00:00, 250.00it/s]",
         "epoch 1/5 loss 0.91", "epoch 5/5 loss 0.12",
         "Traceback (most recent call last):", '  File "fit.py", line 52, in <module>', "    plt.scatter(x, y)",
         '  File "/opt/py/matplotlib/pyplot.py", line 3000, in scatter', "    ax = gca()",
         "_tkinter.TclError: no display name and no $DISPLAY environment variable"]


def test_a_script_failing_again_at_another_statement_is_a_new_attempt() -> None:
    lines = [*_RUN1, *_RUN2, *_RUN3]
    assert attempt_starts(lines) == [0, len(_RUN1), len(_RUN1) + len(_RUN2)]
    got = diagnose_text("\n".join(lines) + "\n")
    assert got.attempts == 3
    assert got.indicator_lines == [len(lines)]


def test_the_same_statement_failing_again_is_one_attempt() -> None:
    # a pipeline that runs one program twice with other arguments: it fails at the same statement
    again = [_RUN2[0], _RUN2[1], *_RUN2[2:-1], "NotImplementedError: other split"]
    assert attempt_starts([*_RUN2, *_RUN3[:3], *again]) == [0]


def test_no_new_attempt_between_ranks_or_in_a_chain() -> None:
    ranks = ["[W socket.cpp:100] torch.distributed init: world_size=2", *_RUN1, *_RUN2, *_RUN3]
    assert attempt_starts(ranks) == [0]
    chained = [*_RUN1, "", "During handling of the above exception, another exception occurred:", "", *_RUN2]
    assert attempt_starts(chained) == [0]


def _ppocr(stamp: str) -> list[str]:
    """PaddleOCR's logger (ppocr/utils/logging.py: "[%(asctime)s] %(name)s %(levelname)s: %(message)s",
    datefmt "%Y/%m/%d %H:%M:%S") printing the config at each launch's start, then training."""
    return [f"[{stamp}] ppocr INFO: Architecture : ", f"[{stamp}] ppocr INFO:     Backbone : ",
            f"[{stamp}] ppocr INFO:         name : ResNet", f"[{stamp}] ppocr INFO: train dataloader has 120 iters",
            f"[{stamp}] ppocr INFO: epoch: [1/50], global_step: 10, lr: 0.001, loss: 12.1",
            f"[{stamp}] ppocr INFO: epoch: [1/50], global_step: 20, lr: 0.001, loss: 9.8"]


def test_a_timestamped_first_line_logged_again_starts_an_attempt() -> None:
    lines = [*_ppocr("2024/08/08 05:25:19"), *_ppocr("2024/08/08 05:32:20"), *_ppocr("2024/08/08 06:01:02")]
    assert attempt_starts(lines) == [0, 6, 12]
    assert diagnose_text("\n".join(lines) + "\n").attempts == 3


def test_a_timestamped_line_every_process_logs_starts_nothing() -> None:
    ds = "[INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda (auto detect)"
    head = ["[WARNING] [runner.py:202:fetch_hostfile] Unable to find hostfile", "[INFO] [launch.py:146:main] nnodes=1",
            "[INFO] [launch.py:153:main] dist_world_size=2", "[INFO] [launch.py:163:main] Setting CUDA_VISIBLE_DEVICES=0,1"]
    one, two = "[2025-02-20 20:25:03,116] ", "[2025-02-20 20:25:09,502] "
    lines = [one + ds, *[one + h for h in head], two + ds, two + ds, *[two + h for h in head]]
    assert attempt_starts([*lines, *[f"iteration {k} loss 1.{k}" for k in range(10)]]) == [0]


def test_a_pipelines_next_stage_under_the_same_first_line_is_one_attempt() -> None:
    def stage(stamp: str, split: str) -> list[str]:
        return [f"2025-02-06 {stamp},896 (infer:256) INFO: infer data_cfg: DataConfig(data_dir='/data')",
                f"2025-02-06 {stamp},896 (infer:257) INFO: it will infer the {split} set.",
                *[f"2025-02-06 {stamp},900 (infer:300) INFO: batch {k} done" for k in range(4)]]
    assert attempt_starts([*stage("10:06:09", "Eval"), *stage("10:06:13", "Test")]) == [0]


_IMPORTS = ["/opt/py/site-packages/transformers/utils/hub.py:128: FutureWarning: Using `TRANSFORMERS_CACHE` is deprecated",
            "  warnings.warn(", "Downloading the model's code from the hub..."]
_SAME = ["Traceback (most recent call last):", '  File "/home/u/compare.py", line 362, in <module>', "    sys.exit(main())",
         '  File "/home/u/compare.py", line 194, in main', "    model = load(cfg)",
         "RuntimeError: operator torchvision::nms does not exist"]


def test_the_same_failure_after_a_new_processs_own_output_is_a_new_attempt() -> None:
    lines = [*_IMPORTS, *_SAME, *_IMPORTS, *_SAME, *_IMPORTS, *_SAME]
    assert attempt_starts(lines) == [0, 9, 18]
    got = diagnose_text("\n".join(lines) + "\n")
    assert (got.attempts, got.indicator_lines) == (3, [len(lines)])


def test_a_traceback_printed_twice_in_a_row_is_one_attempt() -> None:
    # wandb's console capture (files/output.log) holds the uncaught traceback twice, back to back
    assert attempt_starts(["Train set: 16000 samples", *_SAME, *_SAME]) == [0]


def test_the_exception_reprinted_after_a_failed_excepthook_is_one_attempt() -> None:
    # CPython (Python/pythonrun.c _PyErr_PrintEx): "Error in sys.excepthook:", the hook's traceback,
    # "Original exception was:", then the original traceback
    lines = ["step 40 loss 0.8", "Error in sys.excepthook:", *_SAME, "", "Original exception was:", *_SAME]
    assert attempt_starts(lines) == [0]
