"""Round 23: a launcher's report that a child died of a native crash signal (DeepSpeed launch.py's sigkill_handler
"... exits with return code = -6", torchrun's "failed (exitcode: -11)") is the crash's own line, not a secondary
report beside the launcher's teardown ("Killing subprocess N"): README's bare-exit rule makes it a crash."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import diagnose_text

_KILLS = [f"[2024-05-27 16:00:3{i},124] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 34166{i}"
          for i in range(8)]
_EXIT = ("[2024-05-27 16:00:37,466] [ERROR] [launch.py:321:sigkill_handler] ['/env/bin/python', '-u', 'train.py', "
         "'--local_rank=7', '--deepspeed_config', 'ds_config.json'] exits with return code = {code}")
_PRE = ["Adam Optimizer #0 is created with AVX512 arithmetic capability.", "Config: alpha=0.000010, betas=(0.9, 0.999)"]


def test_a_crash_signal_exit_beside_the_launchers_teardown_is_a_crash() -> None:
    w = diagnose_text("\n".join([*_PRE, *_KILLS, _EXIT.format(code=-6)]))
    assert w.diagnosis.category == "crash"


def test_an_exit_status_of_one_beside_the_teardown_stays_only_secondary() -> None:
    w = diagnose_text("\n".join([*_PRE, *_KILLS, _EXIT.format(code=1)]))
    assert w.diagnosis.category == "unknown"
