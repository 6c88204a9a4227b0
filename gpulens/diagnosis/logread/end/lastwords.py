"""A job's last words that say it ended without an error word: the shell could not find a command,
the scheduler killed it for a limit, the C++ runtime aborted, a Rust or Go program panicked, Hydra's
last line, a NaN guard's stop, an uncaught exception after a completion message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.logread.end.hydra import HYDRA_END, hydra_report
from gpulens.diagnosis.logread.end.script_reports import after_work
from gpulens.diagnosis.logread.end.uncaught import exception_copies, uncaught_exception

__all__ = ["LAST_WORDS_TAIL", "last_words", "missing_command"]

#: How a job ends when the failure-line keys see no error word in its last lines: the shell
#: cannot find the command or the script (bash "line 12: torchrun: command not found", "bash:
#: ./run.sh: No such file or directory", CPython "python: can't open file 'x.py': [Errno 2] ..."),
#: the PBS/Torque MOM kills it for a resource limit ("=>> PBS: job killed: mem 33554432kb exceeded
#: limit 16777216kb"; also vmem, cput, walltime, a sister node lost), or the C++ runtime aborts on an uncaught
#: exception ("terminate called after throwing an instance of 'std::bad_alloc'"); dash ("/bin/sh: 1:
#: python: not found", and for a script it runs, its name: "run.sh: 7: torchrun: not found", dash
#: src/error.c exvwarning2's "%s: %d: " prefix with arg0, then exec.c's "%s: not found"), zsh and env say a command is missing their own way; a Rust or Go program
#: panics ("thread 'main' panicked at src/main.rs:10:5:", "panic: runtime error: ..."); GNU make
#: reports a failed recipe ("make: *** [Makefile:12: train] Error 1"); bash and dash stop a
#: script that does not parse ("job.sh: line 21: syntax error near unexpected token `fi'", "line 9:
#: syntax error: unexpected end of file", "sh: 3: Syntax error: "(" unexpected"); Hydra's ``run_and_report``
#: ends its short report of the exception the job raised with "Set the environment variable
#: HYDRA_FULL_ERROR=1 for a complete stack trace." and then exits 1 (an instantiate error prints
#: no traceback and no "XError:" line: "Error in call to target 'x.f':" / "TypeError(...)");
#: a training loop's NaN guard stops it ("Loss is nan, stopping training" of DETR, DeiT, MAE,
#: DINO and the code built on them, which then print the loss dict and sys.exit(1); "Loss is NAN:
#: Mini-Batch Index: 7269"), printing no error word. Bash says its two in the user's language
#: too (its po translations: zh_CN "job.sh: 行 28: 未预期的符号 `done' 附近有语法错误" and "行 9: foo:
#: 未找到命令", ja "行 1: 予期しないトークン `(' 周辺に構文エラーがあります", de "Zeile 68: Syntaxfehler
#: beim unerwarteten Symbol »]«" and "Kommando nicht gefunden.", fr "erreur de syntaxe près du
#: symbole inattendu", ru "синтаксическая ошибка рядом с неожиданным маркером" and "команда не найдена").
_LAST_WORDS = Guarded(
    r"^(?:\S+: )?(?:line \d+: )?[^\s:]+: command not found$"
    r"|can't open file '[^']+': \[Errno \d+\]"
    r"|^(?:-?(?:ba|z|k|c|tc)?sh|/\S+|\S+: line \d+)(?:: line \d+)?: [^\s:]+: No such file or directory$"
    r"|PBS: job killed: "
    r"|^terminate called (?:after throwing|without an active exception)"
    r"|^(?:/bin/)?(?:da)?sh: \d+: [^\s:]+: not found$|^\S+: \d+: [^\s:]+: not found$|^zsh: command not found: \S+$|^env: '?[^\s:']+'?: No such file or directory$"
    r"|^thread '[^']*' panicked at |^panic: |^make(?:\[\d+\])?: \*\*\* \[[^\]]*\] Error \d+"
    r"|^(?:\S+: )?line \d+: (?:syntax error near unexpected token |syntax error: unexpected end of file"
    r"|unexpected EOF while looking for matching )|^(?:\S+: )?\d+: (?:\S+: )?Syntax error: "
    r"|^Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace\.$"
    r"|^(?:[Ll]oss|LOSS) is (?:nan|NaN|NAN|-?inf|-?Inf|INF)\b"
    r"|^(?:\S+: ?)?(?:(?:行|Zeile|ligne|строка) ?\d+ ?: )?[^\s:]+? ?(?:: |：)(?:未找到命令|コマンドが見つかりません"
    r"|Kommando nicht gefunden\.?|Befehl nicht gefunden|commande introuvable|команда не найдена)$"
    r"|^(?:\S+: ?)?(?:行|Zeile|ligne|строка) ?\d+ ?: (?:未预期的符号|予期しないトークン|Syntaxfehler beim unerwarteten"
    r"|erreur de syntaxe près du symbole inattendu|синтаксическая ошибка рядом с неожиданным маркером)",
    ("command not found", "can't open file", "No such file or directory", "PBS: job killed", "terminate called",
     ": not found", "panicked at ", "panic: ", "*** [", "syntax error", "unexpected EOF while", "Syntax error: ",
     "HYDRA_FULL_ERROR=1", "oss is ", "OSS is ", "未找到命令", "コマンドが見つかりません", "nicht gefunden",
     "commande introuvable", "команда не найдена", "未预期的符号", "予期しないトークン", "Syntaxfehler beim",
     "erreur de syntaxe", "синтаксическая ошибка"),
)
#: Bash's report of the job killed by a signal ("Terminated", "Killed") written onto a line whose log
#: prefix the program had begun (the timestamp of nnU-Net's ``print_to_log_file`` and other loggers that
#: print the prefix and the message in separate writes), as the prefix's normalization leaves it: the
#: separator, then the shell's word (bash jobs.c ``j_strsignal``/``printable_job_status``).
_BEHIND_PREFIX = re.compile(r"^[:|\-]\s*(?:Killed|Terminated)$")
#: Non-blank lines at the end of an attempt read for them: such a line ends the job only when
#: it is (nearly) the last thing the job printed; a script that goes on after a missing command
#: (a "module: command not found" before the training starts) was not ended by it.
LAST_WORDS_TAIL = 4


def last_words(lines: Sequence[str], floor: int) -> list[int]:
    """Indexes of the lines among the last ``LAST_WORDS_TAIL`` non-blank lines of
    ``lines[floor:]`` that say the job ended without an error word (see ``_LAST_WORDS``; for
    Hydra's last line, ``hydra_report``)."""
    out: list[int] = []
    seen = 0
    for i in range(len(lines) - 1, floor - 1, -1):
        s = logs.normalize_line(lines[i]).strip()
        if not s:
            continue
        if (_LAST_WORDS.search(s) and not after_work(lines, floor, i)) or _BEHIND_PREFIX.match(s):
            out.extend(hydra_report(lines, floor, i) if HYDRA_END in s else [i])
        elif uncaught_exception(lines, floor, i):
            out.extend(exception_copies(lines, floor, i))
        seen += 1
        if seen >= LAST_WORDS_TAIL:
            break
    return sorted(set(out))


#: A report of the job's exit status 127, which the shell gives a command it cannot find (POSIX, "Exit Status and
#: Errors": 127 when a command is not found): a scheduler's or a job script's "Exit Status 127", "exit code 127",
#: "Exit_status=127", "ExitCode=127:0".
_EXIT_127 = re.compile(r"(?i:exit(?:ed)?(?: with)? (?:code|status))\s*[:=]?\s*127\b|\bExit_status=127\b|\bExitCode[=: ]+127:")
#: Lines above the exit report searched for the shell's report of the missing command.
_MISSING_REACH = 60


def missing_command(lines: Sequence[str], floor: int, found: Sequence[int]) -> list[int]:
    """The shell's last "command not found" line (:data:`_LAST_WORDS`) within ``_MISSING_REACH`` lines above a failure
    line in ``found`` that reports exit status 127 (:data:`_EXIT_127`), when it came after no completed work
    (:func:`script_reports.after_work`): the command that status names, though the scheduler's report printed after it
    pushes it out of the last lines; else []."""
    for i in found:
        if "127" not in lines[i] or _EXIT_127.search(lines[i]) is None:
            continue
        for k in range(i - 1, max(floor, i - _MISSING_REACH) - 1, -1):
            s = logs.normalize_line(lines[k]).strip()
            if "not found" in s and _LAST_WORDS.search(s) and not after_work(lines, floor, k):
                return [k]
    return []
