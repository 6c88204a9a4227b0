"""Find lines by literal keys fast (``str.find`` over one block, not a regex per line), and
say what kind of line each is: a failure, a secondary symptom, progress, benign noise."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded, Prefiltered, contains_any, remembered
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.lineprefix import prefix_free, ray_free
from gpulens.diagnosis.logread.ranks import RAY_HEAD, strip_prefix
from gpulens.diagnosis.logread.records import glog_info, glued_record
from gpulens.diagnosis.logread.signals import ABSEIL_STOP, is_stop_record
from gpulens.diagnosis.logread.tracebacks import EXCEPTION

__all__ = [
    "line_shape",
    "shapes_above",
    "SERVED",
    "SERVED_KEYS",
    "answered_ok",
    "SERVER_STOPPED",
    "ERROR_KEYS",
    "PROGRESS_KEYS",
    "TIMM_TRAIN",
    "last_matching",
    "KILL_KEYS",
    "KERNEL_OOM",
    "ABORTED",
    "ABORTED_ZH",
    "CORE_DUMPED",
    "CRASH_SIGNALS",
    "GLIBC_ERROR_IN",
    "GLOG_FATAL",
    "GLIBC_REASON",
    "SHELL_JOB",
    "LSF_TERM",
    "PBS_KILL",
    "OOM_KILLED",
    "SLURM_JOB",
    "SLURM_REASON",
    "has_error_level",
    "is_benign",
    "is_scheduler_kill",
    "is_failure",
    "is_progress",
    "is_terminal_kill",
    "ends_own_process",
    "shell_job_died",
    "DEBUGGER_PROMPTS",
    "DEBUGGER_QUIT",
    "is_debugger_quit",
]

#: Literal keys of lines that may state a failure (hard, infrastructure or secondary).
ERROR_KEYS: tuple[str, ...] = (
    "rror", "ERROR", "xception", "FATAL", "atal", "ailed", "FAILED", "illed", "xhausted", "EXHAUSTED",
    "ssert", "bort", "Segmentation", "denied", "No space", "CANCELLED", "OOM", "imed out", "imeout",
    "nvalid", "xit", "Traceback", "SIG", "erminated", "Interrupt", "core dumped", "died", "Illegal",
    "death signal", "Hangup", "defined signal", "srun: forcing", "State", "BdbQuit", "StopIteration", "can't open file",
    "lack of heartbeats",  # Sample Factory's runner stopping training when its workers stop reporting (logs._SECONDARY_RE)
    *logs.MPI_LAUNCH_KEYS,  # Open MPI / PRRTE / Horovod launch and stall failures: help texts with no error word
)

#: What follows a GAN's loss name: its value, after a colon, an equals sign or a blank (not a digit glued to the name:
#: "g_loss0: 2.56" names the loss of a generator's part 0).
_GAN_VALUE = re.compile(r"(?:\s*[:=]\s*|\s+)[-+]?\d")
#: A progress line's marks: a step/epoch/loss word, a bar's rate ("it/s", "s/it") or count ("5/9 [").
#: Tested one by one (is_progress): one search of the whole alternation tries each alternative at
#: every position (9 us on a 180-character line; the word alone 4 us, ``in`` well under 1).
_PROGRESS_WORD = re.compile(r"\b(?:step|epoch|iter(?:ation)?|loss|batch|Epoch|Step|Iter)\b"
                            r"|(?<!\w)[dgDG]_loss" + _GAN_VALUE.pattern)
#: _PROGRESS_WORD's words ("iter" also starts "iteration"), for :func:`_progress_word`.
_PROGRESS_WORDS = ("step", "epoch", "iter", "loss", "batch", "Epoch", "Step", "Iter")


def _progress_word(text: str) -> bool:
    """``_PROGRESS_WORD.search(text) is not None`` without the regex (it tries every word at every
    position): each word found with ``str.find``, kept where no word character (``\\w``:
    ``isalnum()`` or "_") touches it; "iter" also as the start of the word "iteration". (None of
    the words overlaps itself, and a match inside another word's letters is not one.)"""
    n = len(text)
    for w in _PROGRESS_WORDS:
        i = text.find(w)
        while i >= 0:
            j = i + len(w)
            if i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_") or (w == "loss" and _gan_loss(text, i)):
                if j == n or not (text[j].isalnum() or text[j] == "_"):
                    return True
                if w == "iter" and text.startswith("ation", j) and (j + 5 == n or not (text[j + 5].isalnum()
                                                                                      or text[j + 5] == "_")):
                    return True
            i = text.find(w, j)
    return False


def _gan_loss(text: str, i: int) -> bool:
    """Whether the "loss" at ``text[i]`` is a GAN's discriminator's or generator's with its value ("d_loss: 0.91,
    g_loss: 2.97", "D_loss=0.3": one letter and "_" before it, nothing else of the word; not a TensorFlow name scope's
    "GPU0/D_loss/G/..."), printed at each of its steps: :data:`_PROGRESS_WORD`'s last branch."""
    if not (i >= 2 and text[i - 1] == "_" and text[i - 2] in "dgDG" and (i == 2 or not (text[i - 3].isalnum()
                                                                                        or text[i - 3] == "_"))):
        return False
    return _GAN_VALUE.match(text, i + 4) is not None



_PROGRESS_BAR = re.compile(r"\d+/\d+ \[")
#: timm's ``train.py`` training log (``train_one_epoch``: ``f'Train: {epoch} [{update_idx:>4d}/{updates_per_epoch}
#: ({100. * update_idx / (updates_per_epoch - 1):>3.0f}%)]  Loss: {loss:#.3g} ({avg:#.3g})  Time: ...  LR: ...'``):
#: "Train: 0 [ 100/1251 (  8%)]  Loss: 6.91 (6.93)  Time: 0.512s, ...", whose words ("Train", "Loss") are capitalised
#: and whose count is bracketed; its counter (group 1) is the update in the epoch.
#: OpenCLIP's (``open_clip_train/train.py``, ``train_one_epoch``: ``f"Train Epoch: {epoch} [{num_samples:>{sample_digits}}/
#: {samples_per_epoch} ({percent_complete:.0f}%)] "`` then its meters, logged after a step every ``log_every_n_steps``
#: batches) counts the samples done in the epoch, the batch size or more after its first step: "Train Epoch: 0 [   256/100352
#: (0%)] Data (t): 3.204 Batch (t): 5.169, ... Loss: 5.5930 (5.5930)". One pattern for the progress test here and the
#: step reader (steplines: P2 (b), a line the loop prints only after a step).
TIMM_TRAIN = Guarded(r"(?:^|\s)Train(?: Epoch)?: \d+ \[\s*(\d+)/\d+ \(\s*\d+%\)\]", ("Train: ", "Train Epoch: "))
_ERRWORD = Guarded(r"[Ee]rror|ERROR|Exception|FATAL|[Ff]ailed(?: to|:| with)|FAILED|Killed|Traceback|CANCELLED",
                   ("rror", "ERROR", "Exception", "FATAL", "ailed", "FAILED", "Killed", "Traceback", "CANCELLED"))
#: Errors that do not end a run: trackers' and loggers' own troubles, warnings, cluster clean-up.
_BENIGN = Guarded(
    r"^wandb: (?:ERROR|WARNING|Network error)|--- Logging error ---|\bWarning\b|\w+Warning:|(?<!=)\bWARN(?:ING)?\b|warnings\.warn"
    r"|slurmstepd(?!.*(?:oom[-_]kill|OOM Kill)).*(?:cgroup|_oom_event|proctrack|Unable to|step_terminate_monitor"
    # its energy accounting plugin failing to read the node's counters (acct_gather_energy: "slurm_get_node_energy:
    # Socket timed out on send/recv operation"): the job's accounting, not the job
    r"|slurm_get_node_energy|_get_joules_task)"
    r"|destroy_process_group|NCCL WARN|\[W\d{4}|^\s*\[W |\bDeprecat|ignore_errors|\b0 errors?\b"
    r"|Set IB_HCA|Failed to load image Python extension|TORCH_CUDA_ARCH_LIST|\bFAILED\]\]\]"
    # LSF's job report: "Started at Fri Dec  1 03:10:02 2023" ... "Terminated at Fri Dec  1 04:27:09 2023"
    r"|^Terminated at (?:[A-Z][a-z]{2} ){2}",
    ("wandb: ", "Logging error", "Warning", "WARN", "warnings.warn", "slurmstepd", "destroy_process_group", "[W",
     "Deprecat", "ignore_errors", "0 error", "Set IB_HCA", "Failed to load image Python extension",
     "TORCH_CUDA_ARCH_LIST", "FAILED]]]", "Terminated at"), split=True,
)
#: PBS's (PBS Pro's, Torque's) kill of a job over a resource limit, which its MOM writes into the
#: job's stderr: "=>> PBS: job killed: walltime 21672 exceeded limit 21600", "=>> PBS: job killed:
#: mem 2097152kb exceeded limit 1048576kb", "=>> PBS: job killed: cput job total 7300 secs exceeded
#: limit 7200" (the resource, its use, the limit), and of a job one of whose nodes went away: "=>> PBS:
#: job killed: node 1 (n042) requested job terminate, 'EOJ' (code 1099) - received SISTER_EOJ ...". Every
#: form is a kill (Torque's and PBS Pro's MOM write no other "job killed" line).
PBS_KILL = r"PBS: job killed: \w+ "
#: A kill, a time limit, a signal or a non-zero exit: ends a run even with no traceback.
_KILL = Guarded(
    r"DUE TO (?:TIME LIMIT|PREEMPTION|NODE FAILURE)|CANCELLED AT|\bTERM_\w+|Exited with exit code [1-9]"
    r"|^\s*(?:\S+: line \d+:\s+\d+\s+)?Killed\b|Segmentation fault|core dumped|Bus error|Illegal instruction"
    r"|oom[-_]kill|OOM Killed|Out of memory: Kill|OOMKilled|exitcode\s*:\s*-?[1-9]|exit(?:ed)? (?:with )?(?:code|status) [1-9]"
    r"|exits with return code = -?[1-9]"
    # a job script's or a scheduler epilogue's report (the zero forms are completions): "Exit code: 1",
    # PBS "Exit_status=271", sacct/scontrol "ExitCode=1:0", seff "State: FAILED (exit code 1)", GNU time
    r"|(?i:exit(?:ed)?(?: with)? (?:code|status))\s*[:=]?\s*-?[1-9]|\bExit_status=-?[1-9]|\bExitCode[=: ]+(?:[1-9]\d*:\d+|0:[1-9])"
    r"|\b(?:State:\s*|JobState=)(?:FAILED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL|PREEMPTED|CANCELLED)\b"
    r"|exited with non-zero status [1-9]"
    r"|[Rr]eceived SIG\w+|[Rr]eceived \d+ death signal|terminate called|Fatal Python error|KeyboardInterrupt"
    # abseil's failure signal handler (absl/debugging/failure_signal_handler.cc WriteSignalMessage: "*** SIGTERM
    # received at time=1748300290 on cpu 8 ***"), installed by TensorFlow, JAX, Ray's workers and the libraries on them
    r"|" + ABSEIL_STOP.pattern +
    r"|srun: error: .*(?:Exited|Terminated|Killed)"
    # bash reporting a child killed by SIGTERM/SIGHUP/SIGUSR (a scheduler's or a session's end), srun giving up
    r"|^\s*(?:\S+: line \d+:\s+\d+\s+)?(?:Terminated|Hangup|User defined signal [12])\b"
    r"|srun: Job step aborted|srun: forcing job termination|" + PBS_KILL,
    ("PBS: job killed", "DUE TO", "CANCELLED AT", "TERM_", "xit", "Killed", "Segmentation fault", "core dumped", "Bus error",
     "Illegal instruction", "oom-kill", "oom_kill", "OOM Killed", "Out of memory: Kill", "eceived ", "terminate called", "Fatal Python error",
     "KeyboardInterrupt", "srun: error", "Terminated", "Hangup", "User defined signal", "srun: Job step aborted",
     "srun: forcing", "State"), split=True,
)


#: Keys of the scheduler's and the kernel's kill lines (they end a run even when the other
#: processes go on printing progress for a few lines until they are killed too).
#: (Searched over the whole attempt before the frontier, so kept short: a signal's or srun's own
#: report is read after the frontier, with the error keys.)
KILL_KEYS: tuple[str, ...] = ("CANCELLED", "DUE TO", "TERM_", "Killed", "oom-kill", "oom_kill",  # "Killed" finds "OOMKilled"
                               "PBS: job killed")
#: Named parts (regex source) of the kill lines, shared by :data:`_SCHEDULER_KILL` and the
#: indicator-line picker's patterns (rootline): Slurm's reason for ending a job from outside
#: ("*** JOB 81 ON g3 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***").
SLURM_REASON = r"DUE TO (?:TIME LIMIT|PREEMPTION|NODE FAILURE)"
#: Slurm's "*** JOB 81" / "*** STEP 81.0" at the head of its cancel lines (the job's and its step's say one thing).
SLURM_JOB = r"\*\*\* (?:JOB|STEP) [\d.]+"
#: LSF's termination reason ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.").
LSF_TERM = r"\bTERM_[A-Z]+\b"
#: A cgroup's or Kubernetes' OOM kill ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=55.0",
#: "Reason: OOMKilled").
OOM_KILLED = r"oom[-_]kill|OOMKilled"
#: The kernel OOM killer's own line and tools' words for it ("Out of memory: Killed process 4242
#: (python)", "OOM Killed"): they say why a process died, but are not searched as the scheduler's kill.
KERNEL_OOM = r"Out of memory: Kill|OOM Killed"
#: Named parts of a native crash's report, shared by the indicator-line picker (rootline: the
#: shell's abort and glibc's reason for it) and the origin decision (decide: the crashed program).
#: bash's report of a job a signal killed (jobs.c, notify_of_job_status): "script.sh: line 26:
#: 158958 Aborted (core dumped) ./simplex": the script's line and the process id before the
#: signal's description (strsignal), then "(core dumped)" and the command.
SHELL_JOB = r"line \d+: +\d+ "
#: SIGABRT's description as strsignal words it ("Aborted"; "已放弃" in a zh_CN locale).
ABORTED = r"\bAborted\b"
ABORTED_ZH = "已放弃"
#: The descriptions of the signals a crashing program gets (SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE).
CRASH_SIGNALS = r"Aborted|Segmentation fault|Bus error|Illegal instruction|Floating point exception"
CORE_DUMPED = r"\(core dumped\)"
#: glog's and abseil's FATAL line, after which the program calls abort(): the severity's letter, month
#: and day, time (abseil before logging is initialised prints "F0000 00:00:1750170647.707742"), the
#: thread id padded to 5, file:line and "] " (google/glog src/logging.cc LogMessage::Init; abseil
#: absl/log/internal/log_format.cc FormatBoundedFields): "F0617 14:30:47.707742 1097242
#: device_event_mgr.cc:226] Unexpected Event status: 1", then "*** Check failure stack trace: ***".
#: Matched at the start of a line without its rank prefix and leading blanks.
GLOG_FATAL = re.compile(r"F\d{4} \d\d:\d\d:\d+(?:\.\d+)?\s+\d+ \S+:\d+\] \S")
#: glibc's heap check (2.25 and older; malloc/malloc.c malloc_printerr) naming the program by its
#: argv[0]: "*** Error in `./simplex': corrupted size vs. prev_size: 0x00000000006ba7b0 ***".
GLIBC_ERROR_IN = r"\*\*\* Error in `(?P<prog>[^'`]+)': "
#: What glibc says before it calls abort() (the message alone since 2.26: "free(): invalid pointer",
#: "malloc(): corrupted top size"), and its stack protector's "*** stack smashing detected ***".
GLIBC_REASON = (r"\*\*\* (?:stack smashing|buffer overflow) detected \*\*\*"
                r"|(?:double free or corruption|(?:free|malloc|realloc|munmap_chunk|malloc_consolidate)\(\): "
                r"(?:invalid|corrupted|memory corruption|unaligned)|corrupted (?:size vs\. prev_size|double-linked list))")
_SCHEDULER_KILL = re.compile(
    rf"{SLURM_REASON}|{SLURM_JOB} ON \S+ CANCELLED AT|{LSF_TERM}|{PBS_KILL}"
    r"|^\s*(?:\S+: line \d+:\s+\d+\s+)?(?:Killed|Terminated|Hangup|User defined signal [12])\b|" + OOM_KILLED
    + r"|srun: Job step aborted|srun: forcing job termination"
)
#: A log level that says the line is an error (looked at before the prefix is stripped): "ERROR:name:",
#: "[ERROR]", "2024-05-01 10:00:01 ERROR ...", and the level between a timestamp and the message of the two
#: commonest formats: logging's "%(asctime)s - %(name)s - %(levelname)s - %(message)s" (the logging
#: cookbook's, CPython Doc/howto/logging-cookbook.rst) and loguru's default "{time} | {level: <8} |
#: {name}:{function}:{line} - {message}" (loguru/_defaults.py LOGURU_FORMAT).
_ERROR_LEVEL = re.compile(r"^\S*\s*(?:[\d:,.\- ]+\s)?\[?(?:ERROR|FATAL|CRITICAL)\]?[\s:]"
                          r"|^\d[\d\-/T:,. ]{7,30}(?: - [\w.<>-]+)? [-|] (?:ERROR|CRITICAL|FATAL) *[-|] ")


#: A program's own one-line error (argparse: "train.py: error: argument --fp16: ..."; a program
#: name of several words only with one of argparse's own messages: "Accelerate launch command:
#: error: argument --machine_rank: invalid int value").
_PROGRAM_ERROR = re.compile(
    # a bare StopIteration ending a traceback: the built-in exception whose name holds no error word
    # (PEP 479: raised out of a generator it becomes a RuntimeError; uncaught from next() it ends the process)
    r"^(?:\w+\.)*StopIteration\s*$|"
    r"^[\w./-]+: error: |^[\w./-]+(?: [\w./-]+){1,3}: error: (?:unrecognized arguments|the following arguments are "
    r"required|argument [-\w/]+:|ambiguous option|one of the arguments|too few arguments)|"
    # CPython's own error when the script it was given cannot be opened (Modules/main.c pymain_run_file:
    # "%ls: can't open file %R: [Errno %d] %s"), exit status 2: the interpreter ran nothing
    r"^\S*python[\d.]*(?:\.exe)?: can't open file '[^']+': \[Errno \d+\] ")


#: Lines above argparse's "prog: error: ..." searched for its "usage: prog [-h] ..." block.
_USAGE_REACH = 40


#: A non-interactive bash's report that a command of its script died of a signal (bash jobs.c
#: ``notify_of_job_status``: "%s: line %d: " then ``pretty_print_job`` with JLIST_NONINTERACTIVE: the pid, the
#: signal's description from ``strsignal`` with " (core dumped)", the command): "run.sh: line 5:  8004 Killed
#: python3 train.py --model sparse". That command's process has ended; what the script runs next is another one.
_SHELL_JOB_DIED = re.compile(r"^\S[^:]*: line \d+: +(?P<pid>\d+) (?:Killed|Terminated|Aborted|Segmentation fault|Bus error"
                             r"|Illegal instruction|Floating point exception|Hangup|Quit|CPU time limit exceeded"
                             r"|File size limit exceeded|User defined signal [12])(?: \(core dumped\))? +\S")


def shell_job_died(line: str) -> str | None:
    """The pid of the command a non-interactive bash reports dead of a signal on ``line`` (:data:`_SHELL_JOB_DIED`),
    else None."""
    text = prefix_free(line).strip()
    m = _SHELL_JOB_DIED.match(text) if ": line " in text else None
    return m["pid"] if m is not None else None


def ends_own_process(lines: Sequence[str], i: int) -> bool:
    """Whether line ``i`` is an error after which its process exits by itself, whatever follows in
    the file: argparse's "prog: error: ..." under its "usage: prog [-h] ..." block naming the same
    program (parser.error
    exits with status 2), the interpreter's "python: can't open file 'x.py'". What fails after
    it is another process of the job script."""
    line = prefix_free(lines[i]).strip()
    if "can't open file" in line and line.startswith(("python", "/")):
        return True
    if ": error: " not in line or _PROGRAM_ERROR.match(line) is None:
        return False
    usage = "usage: " + line.split(": error: ", 1)[0] + " "  # argparse names the same program in both
    return any(prefix_free(lines[k]).lstrip().startswith(usage) for k in range(max(0, i - _USAGE_REACH), i))


#: _SCHEDULER_KILL and _ERROR_LEVEL searched only where a literal their patterns require is (the same answers)
_SCHEDULER_KILL_FAST = Prefiltered(_SCHEDULER_KILL)
_ERROR_LEVEL_FAST = Prefiltered(_ERROR_LEVEL)


def is_scheduler_kill(norm: str) -> bool:
    """A scheduler's or the kernel's kill line (time limit, cancel, preemption, OOM kill)."""
    return _SCHEDULER_KILL_FAST.matches(norm)


def has_error_level(raw: str) -> bool:
    """Whether a raw line carries an ERROR/FATAL/CRITICAL log level (a logger's error)."""
    return _ERROR_LEVEL_FAST.matches(raw[:80])


def last_matching(lines: Sequence[str], keys: Sequence[str], pred: Callable[[str], bool], lo: int, hi: int,
                  count: int = 1, window: int = 64) -> list[int]:
    """The last ``count`` indexes in ``[lo, hi)`` (latest first) of lines holding one of ``keys``
    that satisfy ``pred``; searched backwards window by window (stops as soon as found)."""
    out: list[int] = []
    top = hi
    while top > lo and len(out) < count:
        bottom = max(lo, top - window)
        for i in reversed(find_keys(lines, keys, bottom, top)):
            if pred(lines[i]):
                out.append(i)
                if len(out) >= count:
                    break
        top = bottom
        window *= 2
    return out


#: Characters at a line's start that hold torchrun's rank tag ("[rank12]: ", torch/distributed/
#: elastic/multiprocessing tail_log / --local-ranks-filter prefix).
_RANK_TAG = 16


@remembered  # the reader asks again about the same lines (frontier, rank failures, context, phase)
def is_progress(raw: str) -> bool:
    """A line showing the job going on (a step, epoch, loss or progress bar; not an error)."""
    lead = raw[raw.index("]: ") + 3:] if raw.startswith("[rank") and "]: " in raw[:_RANK_TAG] else raw
    if lead.startswith((" ", "\t")) and not lead.lstrip().startswith(("Epoch", "epoch", "Step", "step")):
        return False  # an indented line (a traceback's frame or code line), also behind torchrun's "[rank0]: "
    if raw.startswith(("wandb:", "srun:", "slurmstepd")):  # a tracker's summary at exit, the scheduler's lines
        return False
    if _SUBMITTED in raw:  # sbatch's answer to the submission (its "batch" is the job's kind, not a step's)
        return False
    if lead.startswith("frame #"):  # a c10::Error backtrace's frame (c10/util/Backtrace.cpp: "frame #25:
        return False  # at::cross_entropy_loss(...) + 124 (0x... in lib.so)"): a function's name, not progress
    end = raw[-_SHOWN:]  # a progress bar's line holds every update ("\r"): the last is what shows
    if not _has_progress_key(end):
        return False
    if glued_record(end):
        return False  # a warning or error record written right after the bar: the record is what shows
    return not _ERRWORD.matches(end) and ("it/s" in end or "s/it" in end or _progress_word(end)
                                             or (" [" in end and _PROGRESS_BAR.search(end) is not None)
                                             or TIMM_TRAIN.matches(end))


#: Characters at the end of a line looked at (a tqdm line can hold thousands of updates).
_SHOWN = 400
#: sbatch's line on submitting a job ("Submitted batch job 39501466", src/sbatch/sbatch.c), which a site's
#: submission wrapper copies into the job's output (ECMWF's "[ECMWF-INFO -sbatch] - Submitted batch job N").
_SUBMITTED = "Submitted batch job "
#: Literals one of which every progress line holds (a cheap test before the regex).
PROGRESS_KEYS = ("step", "Step", "poch", "iter", "Iter", "loss", "Loss", "batch", "Batch", "it/", "/it")
#: ``any(k in text for k in PROGRESS_KEYS)`` without a generator (it runs on most lines read)
_has_progress_key = contains_any(PROGRESS_KEYS)


@remembered  # a pure test of one line, asked again about the same lines by several stages
def is_benign(norm: str) -> bool:
    """An error-looking line that does not end a run (a tracker's, a logger's, a warning)."""
    return _BENIGN.matches(norm)


@remembered  # a pure test of one line, asked again about the same lines by several stages
def is_terminal_kill(norm: str) -> bool:
    """A kill, a time limit, a signal or a non-zero exit (ends a run without a traceback)."""
    return _KILL.matches(norm)


@remembered  # asked again about the same lines by several stages
def is_failure(norm: str, raw: str = "") -> bool:
    """A (normalized) line that states a failure or a secondary symptom of one (``raw``: the
    line as printed, for its log level; a glog/abseil INFO record states none)."""
    norm = norm[:_SHOWN]
    shown = raw[:_SHOWN]
    if "pid=" in norm[:RAY_HEAD] and (rest := ray_free(norm)) != norm and EXCEPTION.match(rest) is not None:
        norm = rest  # a Ray worker's or a vLLM process's exception line ("(EngineCore pid=6890) ValueError: ...")
    if glog_info(shown):
        return False
    if is_benign(norm) or (shown != norm and is_benign(shown)):  # the same line: asked once
        return is_stop_record(norm)  # a warning that the process is being stopped
    return (logs.is_hard_error(norm) or is_terminal_kill(norm) or logs.is_secondary(norm)
            or _PROGRAM_ERROR.match(norm) is not None
            or (bool(raw) and has_error_level(raw)) or is_debugger_quit(norm))


#: pdb's exception when a debugger session ends by quitting ("bdb.BdbQuit"): a breakpoint left in a
#: batch job, whose prompt got end-of-input; the process ends with it (README rule R7).
DEBUGGER_QUIT = "BdbQuit"
#: The prompts of pdb and ipdb, printed when a breakpoint stops the program.
DEBUGGER_PROMPTS = ("(Pdb)", "ipdb>")


def is_debugger_quit(norm: str) -> bool:
    """Whether a (normalized) line is the exception line of a quit debugger session (``bdb.BdbQuit``,
    after a launcher's rank prefix)."""
    return DEBUGGER_QUIT in norm and strip_prefix(norm).strip().endswith(("bdb.BdbQuit", "BdbQuit"))


#: An inference server's access-log line for a model request it answered (P5: a serving job's work is evaluation):
#: uvicorn's (``uvicorn/logging.py`` ``AccessFormatter``: ``'%(client_addr)s - "%(request_line)s" %(status_code)s'``),
#: which vLLM's and SGLang's OpenAI-compatible servers run under ("127.0.0.1:35028 - "POST /v1/chat/completions HTTP/1.1"
#: 200 OK"), and Gin's default logger in Ollama's server (``gin/logger.go`` ``defaultLogFormatter``: ``"[GIN] %v |%s %3d %s|
#: %13v | %15s |%s %-7s %s %#v"``: "[GIN] 2025/06/26 - 22:38:34 | 200 |  1m59s |  127.0.0.1 | POST  "/api/generate""). Only
#: the routes that run the model (OpenAI's completions, chat and embeddings, Ollama's generate, chat and embed), not a
#: health check or a model list.
SERVED = Guarded(r'"POST /(?:v1/(?:chat/completions|completions|embeddings)|api/(?:generate|chat|embed\w*))\b[^"]*" \d{3}'
                 r'|\[GIN\] [^|]*\|\s*\d{3}\s*\|[^|]*\|[^|]*\|\s*POST\s+"/(?:v1/(?:chat/completions|completions|embeddings)'
                 r'|api/(?:generate|chat|embed\w*))"',
                 ('"POST /', "[GIN] "))
SERVED_KEYS = ('"POST /', "[GIN] ")
_SERVED_OK = re.compile(r'" 2\d\d\b|\|\s*2\d\d\s*\|')
#: Characters at a line's start where an access-log record is read.
_ACCESS_RECORD = 512


#: vLLM's OpenAI-compatible server stopped by SIGINT or SIGTERM: ``serve_http`` (vllm/entrypoints/launcher.py)
#: installs a signal handler that cancels the server task, and logs "Shutting down FastAPI HTTP server." only in
#: the ``except asyncio.CancelledError`` branch that cancel leads to (newer releases: "[shutdown] API server:
#: shutting down FastAPI HTTP server"); a server that returns on its own (its engine died: the watchdog's
#: ``should_exit``) returns without it. A server has no end of its own: this is a stop from outside (README O3).
SERVER_STOPPED = re.compile(r"\bShutting down FastAPI HTTP server\.|\bAPI server: shutting down FastAPI HTTP server\b")


def answered_ok(line: str) -> bool:
    """Whether a line is an inference server's access-log record of a model request it answered with
    success (:data:`SERVED`, a 2xx status)."""
    head = line[:_ACCESS_RECORD]
    return SERVED.search(head) is not None and _SERVED_OK.search(head) is not None


_NUMBERS_HEX = re.compile(r"0x[0-9a-f]+|\d+")


def line_shape(line: str) -> str:
    """A line's shape: normalized and stripped, its numbers (decimal or hex) masked."""
    return _NUMBERS_HEX.sub("N", logs.normalize_line(line).strip())


def shapes_above(lines: Sequence[str], head: int, count: int) -> set[str]:
    """The shapes (:func:`line_shape`) of the last ``count`` non-blank lines above ``lines[head]``."""
    out: set[str] = set()
    k, seen = head - 1, 0
    while k >= 0 and seen < count:
        if lines[k].strip():
            out.add(line_shape(lines[k]))
            seen += 1
        k -= 1
    return out
