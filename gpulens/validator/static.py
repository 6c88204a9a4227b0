"""Static checks: seconds, before any of the job's code runs.

* every file of the job's import closure compiles (syntax errors with file:line and
  the import chain); a broken file outside the closure is a warning (see resolver.py);
* the imports that surely run resolve in the job's own interpreter and environment;
* declared inputs exist, are readable, non-empty and not blacklisted;
* the output/checkpoint directory is writable;
* the GPU request is sane (known type, count within the configured limit).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulens.config import ValidateConfig
from gpulens.errors import InputError
from gpulens.validator.spec import JobSpec

__all__ = [
    "LAUNCHER_MODULES",
    "BlacklistLookup",
    "EntryPoint",
    "Finding",
    "StaticReport",
    "check_inputs",
    "check_output_dir",
    "check_request",
    "entry_point",
    "job_python_files",
    "run_static_checks",
]

#: ``lookup(candidates)`` -> {input: reason} for the blacklisted ones.
BlacklistLookup = Callable[[list[str]], dict[str, str]]

_PYTHON_RE = re.compile(r"^(python|pypy)(\d+(\.\d+)?)?$")
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "dist-packages", "build", "dist"}
_MAX_FILES = 5000
_MAX_FILE_BYTES = 8 * 1024 * 1024
_RESOLVER = Path(__file__).with_name("resolver.py")
#: ``python -m <launcher> [options] train.py``: the job is the script it launches.
LAUNCHER_MODULES = frozenset(
    {"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch", "deepspeed.launcher.runner"}
)


@dataclasses.dataclass
class Finding:
    """One static problem that would make the job fail."""

    check: str  # compile | imports | inputs | blacklist | output_dir
    category: str
    origin: str
    message: str
    evidence: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class EntryPoint:
    interpreter: str | None  # the job's Python, when the command runs one
    script: Path | None
    module: str | None
    via: str | None = None  # "run.sh:3" when the entry point was read from a shell script


@dataclasses.dataclass
class StaticReport:
    findings: list[Finding] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    checks: list[str] = dataclasses.field(default_factory=list)
    files_compiled: int = 0
    python: str | None = None
    entry: EntryPoint | None = None
    closure: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings


def check_request(spec: JobSpec, config: ValidateConfig) -> str | None:
    """Raise InputError for an impossible request; return the canonical GPU type name."""
    if spec.gpus < 1:
        raise InputError(f"Requested GPU count {spec.gpus} must be at least 1.", "Fix --gpus / gpus.")
    if spec.gpus > config.max_gpus:
        raise InputError(
            f"Requested {spec.gpus} GPUs, above the cluster limit of {config.max_gpus}.",
            "Request fewer GPUs or raise validate.max_gpus in gpulens.toml.",
        )
    if spec.gpu_type is None:
        return None
    for name in config.gpu_types:
        if name.lower() == spec.gpu_type.lower():
            return name
    raise InputError(
        f"Requested GPU type {spec.gpu_type!r} is not one of the configured types.",
        f"Use one of {', '.join(sorted(config.gpu_types))} (validate.gpu_types in gpulens.toml).",
    )


def _which(name: str, env: dict[str, str], cwd: Path) -> str | None:
    if os.sep in name:
        p = Path(name) if os.path.isabs(name) else cwd / name
        return str(p) if p.exists() else None
    return shutil.which(name, path=env.get("PATH", os.environ.get("PATH", os.defpath)))


def _shebang_python(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode("utf-8", "replace").split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        parts = parts[1:]
        if parts[0] == "-S" and len(parts) > 1:
            parts = parts[1:]
    return parts[0] if _PYTHON_RE.match(os.path.basename(parts[0])) else None


def entry_point(command: list[str], env: dict[str, str], cwd: Path) -> EntryPoint:
    """Find the job's interpreter and its entry script or module.

    ``python [opts] train.py``, ``python -m pkg.mod``, ``./train.py`` (python
    shebang), launchers with a python shebang (``torchrun train.py``,
    ``accelerate launch train.py``), and a shell script of the job (``bash run.sh``,
    ``./run.sh``) whose first command line starting one of those is taken; anything
    else has no entry point, and only compiling is done.
    """
    argv0 = command[0]
    exe = _which(argv0, env, cwd)
    args = command[1:]
    if os.path.basename(argv0) in _SHELLS and "-c" in args[:-1]:  # bash -c "cd x && python train.py"
        return _from_shell_text(args[args.index("-c") + 1], "the -c command", env, cwd)
    shell = _shell_script(argv0, exe, args, cwd)
    if shell is not None:
        try:
            text = shell.read_bytes()[:_MAX_SHELL_BYTES].decode("utf-8", "replace")
        except OSError:
            return EntryPoint(None, None, None)
        return _from_shell_text(text, shell.name, env, cwd)
    if _PYTHON_RE.match(os.path.basename(argv0)):
        return _python_entry(exe, args, cwd)
    if exe is None:
        return EntryPoint(None, None, None)
    return _shebang_entry(exe, args, env, cwd)


def _python_entry(interpreter: str | None, args: list[str], cwd: Path) -> EntryPoint:
    """The entry of ``python [opts] script``, ``python -m module`` (or a launcher module) or ``python -c``."""
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-m") and (len(a) > 2 or i + 1 < len(args)):
            module = a[2:] or args[i + 1]
            rest = args[i + (1 if len(a) > 2 else 2) :]
            if module in LAUNCHER_MODULES:  # python -m torch.distributed.run ... train.py
                return _launched(interpreter, rest, cwd)
            return EntryPoint(interpreter, None, module)
        if a == "-c" or a.startswith("-c"):
            return EntryPoint(interpreter, None, None)
        if a in ("-X", "-W", "--check-hash-based-pycs"):
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return EntryPoint(interpreter, cwd / a if not os.path.isabs(a) else Path(a), None)
    return EntryPoint(interpreter, None, None)


def _shebang_entry(exe: str, args: list[str], env: dict[str, str], cwd: Path) -> EntryPoint:
    """The entry of an executable with a python shebang: the user's own script, or a launcher's."""
    shebang = _shebang_python(exe)
    if shebang is None:
        return EntryPoint(None, None, None)
    interpreter = _which(shebang, env, cwd) or shebang
    real = Path(exe).resolve()
    if real.suffix == ".py" or cwd.resolve() in real.parents:
        return EntryPoint(interpreter, real, None)  # the user's own script
    return _launched(interpreter, args, cwd)  # a launcher: torchrun / accelerate / deepspeed


_SHELLS = ("sh", "bash", "dash", "zsh", "ksh")
_SHELL_SHEBANG = re.compile(rb"^#!\s*\S*/(?:env\s+)?(?:sh|bash|dash|zsh|ksh)\b")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_MAX_SHELL_BYTES = 64 * 1024


def _shell_script(argv0: str, exe: str | None, args: list[str], cwd: Path) -> Path | None:
    """The job's own shell script the command runs (``bash run.sh``, ``./run.sh``), if any."""
    if os.path.basename(argv0) in _SHELLS:
        rest = [a for a in args if not a.startswith("-")]
        if not rest:
            return None
        path = Path(rest[0]) if os.path.isabs(rest[0]) else cwd / rest[0]
        return path if path.is_file() else None
    if exe is None:
        return None
    try:
        with open(exe, "rb") as fh:
            first = fh.readline(256)
    except OSError:
        return None
    real = Path(exe).resolve()
    return real if _SHELL_SHEBANG.match(first) and cwd.resolve() in real.parents else None


def _shell_commands(text: str) -> list[tuple[int, list[str]]]:
    """(line, argv) of each simple command of a shell script (continuations joined, env prefixes dropped)."""
    commands: list[tuple[int, list[str]]] = []
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole, pending = pending + line, ""
        for part in re.split(r"&&|\|\||;|\|", whole):
            try:
                argv = shlex.split(part, comments=True)
            except ValueError:
                continue
            while argv and (_ASSIGN.match(argv[0]) or argv[0] in ("exec", "time", "nohup", "srun", "env")):
                argv = argv[1:]
            if argv:
                commands.append((start, argv))
    return commands


def _from_shell_text(text: str, name: str, env: dict[str, str], cwd: Path) -> EntryPoint:
    for line, argv in _shell_commands(text):
        if os.path.basename(argv[0]) in _SHELLS or "$" in argv[0] or argv[0].endswith(".sh"):
            continue  # one level of shell script only
        found = entry_point(argv, env, cwd)
        if found.script is not None or found.module is not None:
            if found.script is not None and ("$" in str(found.script) or found.script.name == "setup.py"):
                continue  # a variable, or a build step before the training command
            found.via = f"{name}:{line}"
            return found
    return EntryPoint(None, None, None)


def _launched(interpreter: str | None, args: list[str], cwd: Path) -> EntryPoint:
    """The script (``train.py``) or module (``-m pkg.train``) a launcher is told to start."""
    for i, a in enumerate(args):
        if a in ("-m", "--module") and i + 1 < len(args):
            return EntryPoint(interpreter, None, args[i + 1])
        if a.endswith(".py") and not a.startswith("-"):
            return EntryPoint(interpreter, cwd / a if not os.path.isabs(a) else Path(a), None)
    return EntryPoint(interpreter, None, None)


def job_python_files(root: Path, extra: list[Path] | None = None) -> tuple[list[Path], bool]:
    """The ``.py`` files of the job (virtualenvs, caches and hidden dirs skipped); bool = truncated."""
    files: list[Path] = []
    truncated = False
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".")
            and d not in _SKIP_DIRS
            and not (Path(dirpath) / d / "pyvenv.cfg").exists()
        )
        for name in sorted(filenames):
            if name.endswith(".py"):
                p = Path(dirpath) / name
                try:
                    if p.stat().st_size > _MAX_FILE_BYTES:
                        continue
                except OSError:
                    continue
                files.append(p)
                if len(files) >= _MAX_FILES:
                    truncated = True
                    break
        if truncated:
            break
    for p in extra or []:
        if p.suffix == ".py" and p.is_file() and p not in files:
            files.append(p)
    return files, truncated


def _run_resolver(
    interpreter: str, request: dict[str, Any], cwd: Path, env: dict[str, str], timeout: float
) -> dict[str, Any] | None:
    source = _RESOLVER.read_text(encoding="utf-8")
    try:
        proc = subprocess.run(
            [interpreter, "-c", source],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        answer: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return None
    return answer


def _roots(spec: JobSpec, entry: EntryPoint) -> list[Path]:
    """The job's own tree: the declared working directory and the entry script's directory.

    With no declared working directory (the current one, maybe a home directory), only the
    entry script's directory, as before.
    """
    here = entry.script.resolve().parent if entry.script is not None else None
    if spec.workdir is None and here is not None:
        return [here]
    roots = [spec.run_dir]
    if here is not None and not any(r == here or r in here.parents for r in roots):
        roots.append(here)
    return roots


def _analyze_here(request: dict[str, Any]) -> dict[str, Any]:
    """The closure and compile checks in gpulens's own Python (no import resolution)."""
    from gpulens.validator import resolver

    return resolver.analyze({**request, "check_imports": False}, [""])


def _resolve_code(
    spec: JobSpec, entry: EntryPoint, env: dict[str, str], report: StaticReport, timeout: float
) -> dict[str, Any]:
    run_dir = spec.run_dir
    roots = _roots(spec, entry)
    files: list[Path] = []
    for root in roots:
        found, truncated = job_python_files(root)
        files.extend(f for f in found if f not in files)
        if truncated:
            report.warnings.append(f"only the first {_MAX_FILES} Python files under {root} were compiled")
    request = {
        "files": [str(f) for f in files],
        "script": str(entry.script) if entry.script is not None else None,
        "module": entry.module,
        "workdir": str(run_dir),
        "roots": [str(r) for r in roots],
    }
    answer: dict[str, Any] | None = None
    if entry.interpreter is not None:
        answer = _run_resolver(entry.interpreter, request, run_dir, env, timeout)
        if answer is None:
            report.warnings.append(
                f"could not run the job's interpreter {entry.interpreter} to resolve imports;"
                " compiled with gpulens's own Python instead"
            )
        else:
            report.python = f"{answer.get('executable')} ({answer.get('python')})"
    elif spec.command:
        report.warnings.append(
            f"{spec.command[0]!r} is not a Python command I can read: imports were not checked"
        )
    if answer is None:
        answer = _analyze_here(request)
        answer.pop("imports", None)
    report.files_compiled = len(set(answer.get("closure", [])) | {str(f) for f in files})
    report.closure = list(answer.get("closure", []))
    return answer


def _syntax_findings(answer: dict[str, Any], entry: EntryPoint, report: StaticReport) -> None:
    """A syntax error in the import closure fails the job; elsewhere it is a warning."""
    closure = set(answer.get("closure", []))
    known = entry.script is not None or entry.module is not None
    via: dict[str, list[Any]] = answer.get("via", {})
    for file, line, col, msg, text in answer["syntax"]:
        evidence = [f"{file}:{line}:{col}: SyntaxError: {msg}"]
        if text:
            evidence.append(f"    {text.strip()}")
        inside = os.path.abspath(file) in closure
        if inside:
            chain = _import_chain(os.path.abspath(file), via)
            if chain:
                evidence.append("imported via " + " <- ".join(chain))
            report.findings.append(Finding("compile", "syntax_error", "user", f"{file}:{line}: {msg}", evidence))
        elif known:
            report.warnings.append(
                f"{file}:{line}: SyntaxError: {msg} (not imported by the job's entry point: ignored)"
            )
        else:
            report.warnings.append(
                f"{file}:{line}: SyntaxError: {msg} (the entry point is unknown, so it may not be used)"
            )
    for file, reason in answer["unreadable"]:
        report.warnings.append(f"{file} could not be read ({reason})")


def _import_chain(file: str, via: dict[str, list[Any]]) -> list[str]:
    chain: list[str] = []
    seen = {file}
    while file in via and len(chain) < 6:
        parent, line = via[file]
        chain.append(f"{parent}:{line}")
        if parent in seen:
            break
        seen.add(parent)
        file = parent
    return chain


def _check_code(spec: JobSpec, env: dict[str, str], report: StaticReport, timeout: float) -> None:
    entry = entry_point(spec.command, env, spec.run_dir)
    report.entry = entry
    if entry.via is not None:
        what = entry.script.name if entry.script is not None else f"-m {entry.module}"
        report.warnings.append(f"entry point {what} read from {entry.via}; its import closure was checked")
    answer = _resolve_code(spec, entry, env, report, timeout)
    report.checks.append("compile")
    _syntax_findings(answer, entry, report)
    if entry.interpreter is None or "imports" not in answer:
        return
    report.checks.append("imports")
    _import_findings(answer, entry, report)


def _import_findings(answer: dict[str, Any], entry: EntryPoint, report: StaticReport) -> None:
    if answer.get("entry_missing") and not answer["missing"]:
        where = answer.get("entry") or entry.module
        report.findings.append(
            Finding(
                "imports",
                "incorrect_input" if entry.script is not None else "import_error",
                "user",
                f"entry point {where} does not exist",
                [f"python: can't open file {where!r}: [Errno 2] No such file or directory"],
            )
        )
    for name, line, file in answer["missing"]:
        where = f"{file}:{line}: " if file else ""
        shown = name if "." in name else name.split(".")[0]
        report.findings.append(
            Finding(
                "imports",
                "import_error",
                "user",
                f"{where}No module named {shown!r}",
                [f"{where}import {name}: ModuleNotFoundError: not found by {answer.get('executable')}"],
            )
        )
    for name, line, file in answer.get("optional_missing", []):
        report.warnings.append(
            f"{file}:{line}: import {name} would fail (not installed); it is inside a function,"
            " a try block or a condition, so it may never run"
        )


def check_inputs(
    spec: JobSpec, blacklisted: BlacklistLookup | None, report: StaticReport
) -> list[Path]:
    """Declared inputs exist, are readable, non-empty, and not blacklisted."""
    resolved: list[Path] = []
    if not spec.inputs:
        return resolved
    report.checks.append("inputs")
    for raw in spec.inputs:
        path = spec.resolve(raw)
        resolved.append(path)
        problem = _input_problem(path)
        if problem:
            report.findings.append(
                Finding(
                    "inputs",
                    "incorrect_input",
                    "data",
                    f"input {raw} {problem}",
                    [f"declared input {path} {problem}"],
                )
            )
    if blacklisted is not None:
        report.checks.append("blacklist")
        _check_blacklist(list(zip(spec.inputs, resolved, strict=True)), blacklisted, report)
    return resolved


def _input_problem(path: Path) -> str | None:
    """What is wrong with a declared input (missing, unreadable, empty), or None."""
    try:
        st = path.stat()
        if path.is_dir():
            with os.scandir(path) as it:
                if next(it, None) is None:
                    return "is an empty directory"
        elif st.st_size == 0:
            return "is empty (0 bytes)"
        else:
            with open(path, "rb") as fh:
                fh.read(1)
    except FileNotFoundError:
        return "does not exist"
    except PermissionError:
        return "is not readable (permission denied)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None


def _input_names(raw: str, path: Path) -> tuple[str, str, str]:
    """The names a blacklist may know an input by: as declared, resolved, and with links followed."""
    return raw, str(path), os.path.realpath(path)


def _check_blacklist(inputs: list[tuple[str, Path]], blacklisted: BlacklistLookup, report: StaticReport) -> None:
    """One finding per declared input (raw, resolved) that the blacklist knows by any of its names."""
    candidates: list[str] = []
    for raw, path in inputs:
        for c in _input_names(raw, path):
            if c not in candidates:
                candidates.append(c)
    hits = blacklisted(candidates)
    seen: set[str] = set()
    for raw, path in inputs:
        for c in _input_names(raw, path):
            if c in hits and raw not in seen:
                seen.add(raw)
                reason = hits[c] or "blacklisted by an operator"
                report.findings.append(
                    Finding(
                        "blacklist",
                        "incorrect_input",
                        "data",
                        f"input {raw} is blacklisted ({reason})",
                        [f"blacklist: {c}: {reason}"],
                    )
                )


def check_output_dir(spec: JobSpec, report: StaticReport) -> None:
    """The output/checkpoint directory can be created and written (probed, then cleaned up)."""
    if not spec.output_dir:
        return
    report.checks.append("output_dir")
    target = spec.resolve(spec.output_dir)
    created: list[Path] = []
    try:
        _probe_writable(target, created)
    except OSError as exc:
        report.findings.append(_output_dir_finding(spec.output_dir, target, exc))
    finally:
        for d in reversed(created):
            try:
                d.rmdir()
            except OSError:
                pass


def _probe_writable(target: Path, created: list[Path]) -> None:
    """Create ``target``'s missing directories (listed in ``created``) and write and remove a file in it.

    Raises the OSError that stopped it.
    """
    missing: list[Path] = []
    p = target
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir()
        created.append(d)
    if not target.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(target))
    fd, probe = tempfile.mkstemp(prefix=".gpulens-probe-", dir=target)
    os.close(fd)
    os.unlink(probe)


def _output_dir_finding(output_dir: str, target: Path, exc: OSError) -> Finding:
    """The finding for an output directory that cannot be written: a full disk is the storage's fault."""
    category, origin = "checkpoint_error", "user"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        category, origin = "storage_error", "infrastructure"
    reason = exc.strerror or str(exc)
    return Finding(
        "output_dir",
        category,
        origin,
        f"output directory {output_dir} is not writable ({reason})",
        [f"{type(exc).__name__}: [Errno {exc.errno}] {reason}: {exc.filename or target}"],
    )


def run_static_checks(
    spec: JobSpec,
    config: ValidateConfig,
    *,
    env: dict[str, str],
    blacklisted: BlacklistLookup | None = None,
) -> StaticReport:
    """All static checks; ``env`` is the job's full environment."""
    report = StaticReport()
    _check_code(spec, env, report, timeout=max(10.0, min(config.timeout, 60.0)))
    check_inputs(spec, blacklisted, report)
    check_output_dir(spec, report)
    return report
