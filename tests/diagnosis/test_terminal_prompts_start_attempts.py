"""A terminal capture (scrollback, ``script``, tmux) holds the shell's prompts: a command typed at a prompt that
prints a run's worth of output after other output starts an attempt, so an earlier command's error is not the
last run's failure; short commands (``ls``, ``chmod``) before the job start none."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.attempts import attempt_starts


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _session(commands: list[tuple[str, list[str]]]) -> list[str]:
    out: list[str] = []
    for cmd, printed in commands:
        out += [f"(ReProver) ana@node-794:~/lean/ReProver$ {cmd}", *printed]
    return out


def test_a_command_typed_at_a_shell_prompt_after_others_starts_an_attempt() -> None:
    job = [f"Epoch 0: {k}/40 loss {1 / (k + 1):.3f}" for k in range(30)]
    lines = _session([("bash run_code.sh", job), ("python test_logs.py", ["E", "FAILED (errors=1)"]),
                      ("bash run_code.sh --seed 2", job)])
    assert attempt_starts(lines) == [0, 34]


def test_short_commands_at_prompts_before_the_job_start_no_attempt() -> None:
    lines = _session([("chmod +x run_grpo.sh", []), ("ls /root/autodl-tmp", ["cache"]), ("mkdir /root/cache", []),
                      ("./run_grpo.sh", [f"step {k} loss 0.5" for k in range(40)]), ("^C", [])])
    assert attempt_starts(lines) == [0]


def test_an_earlier_commands_error_is_not_the_last_runs_failure(clf: Classifier) -> None:
    job = [f"Epoch 0: {k}/40 loss {1 / (k + 1):.3f}" for k in range(30)]
    tb = ["Traceback (most recent call last):", '  File "main.py", line 1250, in main',
          "    results = trainer.predict(model)", "RuntimeError: SaveConfigCallback expected config.yaml to NOT exist."]
    other = ["Traceback (most recent call last):", '  File "test_logs.py", line 30, in setUp',
             "    shutil.rmtree(self.test_dir)",
             "FileNotFoundError: [Errno 2] No such file or directory: '/data/ana/test_lightning_logs'",
             *[f"test line {k}" for k in range(20)]]
    lines = _session([("bash run_code.sh", job + tb), ("python test_logs.py", other), ("bash run_code.sh --seed 2", job + tb)])
    w = diagnose_text("\n".join(lines) + "\n", clf)
    assert w.diagnosis.category == "semantic_error" and w.attempts == 3
    assert w.indicator_lines == [len(lines)]
