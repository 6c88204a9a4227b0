"""Round 22: an uncaught KeyboardInterrupt ends a launch (Python >= 3.8 exits by SIGINT, so the
shell that ran it stops too); a launch line after it starts a new attempt."""

from __future__ import annotations

from gpulens.diagnosis.logread.attempts import attempt_starts
from gpulens.diagnosis.logread.whole import diagnose_text

_INTERRUPTED = [
    "2024-01-02T10:00:00 (run.sh:90:main) ./run.sh --stage 3 --ngpu 1",
    "2024-01-02T10:00:00 (run.sh:120:main) Stage 3: Training",
    "2024-01-02 10:00:01,000 (launch:94) INFO: python3 -m mytool.bin.train --config conf/a.yaml",
    "Traceback (most recent call last):",
    '  File "/opt/py/lib/python3.9/runpy.py", line 197, in _run_module_as_main',
    "    return _run_code(code, main_globals, None,",
    '  File "/opt/py/lib/python3.9/subprocess.py", line 1911, in _wait',
    "    time.sleep(delay)",
    "KeyboardInterrupt",
]
_RELAUNCH = [
    "2024-01-02T12:00:00 (run.sh:90:main) ./run.sh --stage 3 --ngpu 1",
    "2024-01-02T12:00:00 (run.sh:120:main) Stage 3: Training",
    "2024-01-02 12:00:01,000 (launch:94) INFO: python3 -m mytool.bin.train --config conf/a.yaml",
    "2024-01-02T15:00:00 (run.sh:200:main) Stage 4: Scoring",
    "2024-01-02T15:00:05 (run.sh:300:main) Successfully finished. [elapsed=18005s]",
]


def test_interrupt_then_relaunch_is_two_attempts() -> None:
    assert attempt_starts(_INTERRUPTED + _RELAUNCH) == [0, len(_INTERRUPTED)]


def test_relaunch_that_finishes_is_healthy() -> None:
    d = diagnose_text("\n".join(_INTERRUPTED + _RELAUNCH) + "\n").diagnosis
    assert d.category == "none"


def test_other_script_traceback_after_interrupt_starts_attempt() -> None:
    first = ["Traceback (most recent call last):", '  File "/w/train.py", line 5, in <module>',
             "    load()", '  File "/w/util.py", line 9, in load', "    x = get()", "KeyboardInterrupt"]
    second = ["/env/site-packages/t/generic.py:441: UserWarning: deprecated", "  _register(",
              "Traceback (most recent call last):", '  File "/w/test.py", line 1, in <module>',
              "    import torch", '  File "/env/torch/__init__.py", line 3, in <module>', "    x", "KeyboardInterrupt"]
    assert attempt_starts(first + second) == [0, len(first) + 2]


def test_buffered_output_after_interrupt_is_same_launch() -> None:
    tb = ["Traceback (most recent call last):", '  File "/w/drive.py", line 80, in <module>',
          "    ray.get(results)", '  File "/env/ray/worker.py", line 2755, in get', "    values = w()",
          "KeyboardInterrupt"]
    after = ["(train pid=31) Epoch: 13", "(train pid=31) Batch 62 of 125", "(train pid=32) loss 0.5",
             "(train pid=31) Batch 63 of 125", "(train pid=32) loss 0.4"]
    wandb = ["wandb: Waiting for W&B process to finish... (failed 255).", "wandb: Synced 5 files",
             "wandb: Find logs at: ./wandb/run-1/logs", "wandb: run summary:", "wandb: loss 0.1"]
    elastic = ["WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 1 closing signal SIGTERM",
               "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 2 closing signal SIGTERM",
               "Traceback (most recent call last):", '  File "/env/bin/torchrun", line 8, in <module>',
               "    sys.exit(main())", "torch.distributed.elastic.multiprocessing.api.SignalException: Process 9 got signal: 2"]
    for tail in (after, wandb, elastic):
        assert attempt_starts(tb + tail) == [0]


def _yolox(t: str, rest: str, fn: str = "before_train:130") -> str:
    return f"2023-05-01 {t}.100 | INFO     | yolox.core.trainer:{fn} - {rest}"


def _yolox_launch(t: str) -> list[str]:
    return [_yolox(t, "args: Namespace(experiment_name='yolox_s', batch_size=8, devices=1, resume=False)"),
            _yolox(t, "exp value:", "before_train:131"), "╒══════════╤═══════╕", "│ seed     │ None  │",
            "╘══════════╧═══════╛", _yolox(t, "Model Summary: Params: 8.94M", "before_train:137"),
            _yolox(t, "---> start train epoch1", "before_epoch:188")]


def test_yolox_args_line_starts_each_appended_launch() -> None:
    lines = _yolox_launch("10:00:00") + _yolox_launch("11:00:00") + _yolox_launch("12:00:00")
    assert attempt_starts(lines) == [0, 7, 14]


def test_yolox_args_line_behind_a_prefix_starts_nothing() -> None:
    first = _yolox_launch("10:00:00")
    again = ["[rank1]: " + ln for ln in _yolox_launch("10:00:01")]
    assert attempt_starts(first + again) == [0]


def test_espnet_self_call_starts_a_launch_nested_script_does_not() -> None:
    def launch(t: str) -> list[str]:
        return [f"2024-01-02T{t} (asr.sh:277:main) ./asr.sh --stage 1 --ngpu 1",
                f"2024-01-02T{t} (asr.sh:400:main) Stage 1: Data preparation",
                f"2024-01-02T{t} (data.sh:20:main) local/data.sh",
                f"2024-01-02T{t} (data.sh:40:main) stage 1: Data preparation",
                f"2024-01-02T{t} (asr.sh:500:main) Stage 2: Speed perturbation",
                f"2024-01-02T{t} (asr.sh:600:main) Stage 3: Format wav.scp"]
    assert attempt_starts(launch("10:00:00") + ["Killed"] + launch("11:00:00")) == [0, 7]
