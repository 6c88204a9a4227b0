"""Round 24: a job script's own setup command that failed (GNU coreutils' ``ln: ...``, bash's ``SCRIPT: line N:
CMD: ...``) before its program ran and raised an uncaught exception of its own is one the job went on from
(README rule R1), unless the later exception names what the command was about (R7's link)."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import diagnose_text

_RAN = [
    "2024-05-02 10:11:48.106478: I tensorflow/core/platform/cpu_feature_guard.cc:142] This TensorFlow binary is "
    "optimized with oneAPI Deep Neural Network Library (oneDNN)",
    "Loading training set...",
    "Constructing networks...",
    "Traceback (most recent call last):",
    '  File "train.py", line 402, in <module>',
    "    main()",
    '  File "train.py", line 388, in main',
    "    net.copy_vars_from(snapshot)",
]
_SHAPE = "ValueError: Cannot feed value of shape (3, 3, 64, 32) for Tensor 'conv0/weight:0', which has shape '(3, 3, 64, 64)'"


def _indicators(first: str, last: str) -> list[int]:
    return diagnose_text("\n".join([first] + _RAN + [last])).indicator_lines


def test_a_setup_command_the_program_ran_past_is_not_the_root() -> None:
    end = len(_RAN) + 2
    for first in ("ln: failed to create symbolic link '/lib/libcuda.so': Permission denied",
                  "ln: creating symbolic link `/usr/lib/libnccl.so': Permission denied",
                  "/var/spool/slurmd/job4411/slurm_script: line 9: module: command not found",
                  "bash: line 2: /opt/site/env_setup.sh: No such file or directory",
                  "mkdir: cannot create directory '/scratch/cache': Permission denied"):
        assert _indicators(first, _SHAPE) == [end], first


def test_a_command_whose_target_the_program_then_misses_stays_the_root() -> None:
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/scratch/run7/stats.json'"
    first = "mkdir: cannot create directory '/scratch/run7': Permission denied"
    assert _indicators(first, missing) == [1, len(_RAN) + 2]


def test_bash_reporting_a_killed_command_is_not_a_setup_command() -> None:
    killed = "./scripts/pretrain.sh: line 34: 2065236 Killed                  deepspeed train.py --zero 2"
    lines = diagnose_text("\n".join(["step 14/1500 loss 2.31", killed, "step 15/1500 loss 2.30"] + _RAN[3:]
                                     + ["RuntimeError: DataLoader worker (pid 2066132) is killed by signal: Killed. "]))
    assert 2 in lines.indicator_lines
