"""Open MPI / PRRTE launch failures and Horovod's stall shutdown: help-text blocks with no error word of their
own (round 20, found by library sweep G). The reader read such a log as a normal end; each block's head is now a
failure line (``logs._HARD_RE``, ``lines.ERROR_KEYS``) and a rule names its category. Excerpts written for the
test in the formats of Open MPI 4.1.8/5.x's help texts and Horovod 0.28.1's stall inspector."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.logread import diagnose_text

_RULE = "-" * 74
_TRAINING = ["[1,0]<stdout>:epoch 1 step 200 loss 0.8123", "[1,1]<stdout>:epoch 1 step 200 loss 0.8240"]


def _block(*lines: str, before: tuple[str, ...] = ("+ mpirun -np 8 python train.py",)) -> str:
    return "\n".join([*before, _RULE, *lines, _RULE]) + "\n"


CASES = [
    pytest.param(_block("There are not enough slots available in the system to satisfy the 8",
                        "slots that were requested by the application:", "", "  python", "",
                        "Either request fewer slots for your application, or make more slots",
                        "available for use."),
                 "semantic_error", "user", 3, id="not-enough-slots"),
    pytest.param(_block("mpirun has detected an attempt to run as root.", "",
                        "Running as root is *strongly* discouraged as any mistake (e.g., in",
                        "defining TMPDIR) or bug can result in catastrophic damage to the OS",
                        "You can override this protection by adding the --allow-run-as-root option"),
                 "semantic_error", "user", 3, id="run-as-root"),
    pytest.param(_block("mpirun was unable to launch the specified application as it could not access",
                        "or execute an executable:", "", "Executable: ./train_mpi", "Node: gpu07", "",
                        "while attempting to start process rank 0."),
                 "semantic_error", "user", 3, id="cannot-execute"),
    pytest.param(_block("A process or daemon was unable to complete a TCP connection", "to another process:",
                        "  Local host:    gpu07", "  Remote host:   gpu08",
                        "This is usually caused by a firewall on the remote host.", before=tuple(_TRAINING)),
                 "comm_error", "infrastructure", 4, id="tcp-connect"),
    pytest.param(_block("PRTE has lost communication with a remote daemon.", "",
                        "  HNP daemon   : [prterun-gpu07-4242@0,0] on node gpu07",
                        "  Remote daemon: [prterun-gpu07-4242@0,1] on node gpu08", before=tuple(_TRAINING)),
                 "comm_error", "infrastructure", 4, id="prrte-lost-daemon"),
    pytest.param("\n".join([*_TRAINING,
                            "[1,0]<stderr>:Missing ranks:", "[1,0]<stderr>:1: [allreduce.dense.weight]",
                            '[1,0]<stderr>:One or more rank (marked by "!") is stalled for longer than 600 seconds. '
                            "Will shutdown."]) + "\n",
                 "comm_error", "unknown", 5, id="horovod-stall-shutdown"),
    pytest.param(_block("MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD", "with errorcode 1.",
                        before=tuple(_TRAINING)),
                 "unknown", "unknown", 4, id="mpi-abort-alone-is-secondary"),
]


@pytest.mark.parametrize(("text", "category", "origin", "line"), CASES)
def test_open_mpi_launch_failures_are_failures_with_their_category(text: str, category: str, origin: str,
                                                                   line: int) -> None:
    w = diagnose_text(text)
    assert (w.diagnosis.category, w.diagnosis.origin) == (category, origin)
    assert line in w.indicator_lines


def test_mpi_abort_after_the_rank_error_keeps_the_rank_error() -> None:
    text = "\n".join([*_TRAINING, "[1,1]<stderr>:Traceback (most recent call last):",
                      '[1,1]<stderr>:  File "train.py", line 40, in <module>',
                      "[1,1]<stderr>:    shard = open(paths[rank])",
                      "[1,1]<stderr>:FileNotFoundError: [Errno 2] No such file or directory: '/data/shards/train_01.tar'",
                      _RULE, "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD", "with errorcode 1.",
                      _RULE]) + "\n"
    w = diagnose_text(text)
    assert w.diagnosis.category == "incorrect_input" and 6 in w.indicator_lines and 8 not in w.indicator_lines


def test_a_tcp_connect_warning_followed_by_the_finished_run_is_a_normal_end() -> None:
    text = "\n".join([*_TRAINING, _RULE, "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This",
                      "should not happen.", "", "Your Open MPI job may now hang or fail.", _RULE,
                      *[f"[1,0]<stdout>:epoch {e} step {e * 200} loss 0.{80 - e}" for e in range(2, 9)],
                      "[1,0]<stdout>:Training finished: 8 epochs, best val acc 0.912"]) + "\n"
    assert diagnose_text(text).diagnosis.category == "none"


@pytest.mark.parametrize(("text", "category", "origin", "line"), CASES[:6])
def test_the_excerpt_classifier_finds_the_same_blocks(text: str, category: str, origin: str, line: int) -> None:
    # logs.analyze (the excerpt path) prefilters error lines with its own literals (logs._ERR_LITERALS, _ANY_KEY)
    from gpulens.diagnosis.classifier import default_classifier

    d = default_classifier().classify_text(text)
    assert (d.category, d.origin) == (category, origin)


def test_a_failed_mpi_init_is_a_failure_though_its_last_line_says_completed_successfully() -> None:
    # ompi/runtime/help-mpi-runtime.txt [mpi_init:startup:internal-failure], then ompi_mpi_init.c's local abort line
    text = _block("It looks like MPI_INIT failed for some reason; your parallel process is",
                  "likely to abort.  There are many reasons that a parallel process can",
                  "  ompi_mpi_init: ompi_rte_init failed", '  --> Returned "(null)" (-43) instead of "Success" (0)',
                  before=("+ srun python train.py",)) + "\n".join([
        "*** An error occurred in MPI_Init_thread", "*** on a NULL communicator",
        "[gpu07:04242] Local abort before MPI_INIT completed completed successfully, but am not able to aggregate "
        "error messages, and not able to guarantee that all other processes were killed!"]) + "\n"
    w = diagnose_text(text)
    assert w.diagnosis.category != "none" and 3 in w.indicator_lines
