"""``validate(spec, config, store)``: static checks, the dry run, the verdict, the record."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulens.config import ValidateConfig
from gpulens.diagnosis.types import DEFAULT_ORIGIN, Diagnosis
from gpulens.errors import GpulensError, ValidatorError
from gpulens.validator import devices as dev
from gpulens.validator.runner import RunLimits, RunOutcome, run_process
from gpulens.validator.spec import JobSpec
from gpulens.validator.static import StaticReport, check_request, run_static_checks

__all__ = [
    "BOOTSTRAP_DIR",
    "DIVERGED_EXIT_CODE",
    "EXIT_CODES",
    "FIX_HINTS",
    "STOP_EXIT_CODE",
    "ValidationResult",
    "classify_output",
    "validate",
]

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
#: Kept in sync with bootstrap/sitecustomize.py (which cannot import gpulens).
STOP_EXIT_CODE = 86
DIVERGED_EXIT_CODE = 87
#: CLI exit code per verdict.
EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 3}

FIX_HINTS: dict[str, str] = {
    "syntax_error": "Fix the syntax error at the file:line shown, then validate again.",
    "import_error": "Install the missing module in the job's environment (or fix the import name) before submitting.",
    "incorrect_input": "Fix the input named in the evidence (path, permissions or contents); a blacklisted input must be cleared by an operator.",
    "semantic_error": "Fix the program error in the evidence (e.g. tensor shapes); it fails the same way on any GPU.",
    "model_diverged": "Lower the learning rate (or add warm-up / gradient clipping): the loss was not finite in the first steps.",
    "cpu_oom": "Use less host memory (smaller batch, no whole-dataset caching, fewer DataLoader workers) or request more memory.",
    "gpu_oom": "Reduce the batch size or model, use mixed precision / activation checkpointing, or request a GPU type with more memory.",
    "checkpoint_error": "Point the output/checkpoint directory at a writable location (create it and check its permissions).",
    "permission_error": "Fix the permissions of the path in the evidence (or run with an account that can read/write it).",
    "cuda_error": "Check the CUDA kernels/extension build and the framework version of the job's environment.",
    "cuda_env_error": "Check the CUDA / driver / framework versions of the job's environment (see the evidence).",
    "gpu_hardware": "The validation GPU looks faulty: report it to the operators and validate again on another GPU.",
    "comm_error": "Check the distributed set-up (rendezvous address, world size, NCCL environment).",
    "preempted": "The dry run was preempted: validate again.",
    "storage_error": "Free space or fix the file system the job writes to (or raise validate.file_size_limit_bytes).",
    "crash": "The process crashed in native code: check the framework / extension versions and the evidence.",
    "unknown": "Read the evidence lines; the dry run failed before training could be confirmed.",
}
_HANG_HINT = (
    "The program stopped making progress before its first optimizer step: look for blocking reads,"
    " locks, barriers or rendezvous waits (`py-spy dump --pid PID` shows where it waits)."
)

#: Exception types (or the modules they are raised in) that mean "this file's contents are bad".
_DECODE_ERRORS = (
    "BadGzipFile", "BadZipFile", "UnpicklingError", "UnicodeDecodeError", "JSONDecodeError",
    "EOFError", "zlib.error", "csv.Error", "ParserError", "EmptyDataError", "UnidentifiedImageError",
    "HeaderParsingError", "DecompressionBombError", "ArrowInvalid",
)  # fmt: skip
_DECODER_FILES = (
    "/gzip.py", "/zipfile", "/pickle.py", "/json/", "/csv.py", "/_npyio_impl.py", "/npyio.py",
    "/numpy/lib/format.py", "/pandas/io/", "/PIL/", "/h5py/", "/torch/serialization.py",
    "/safetensors/", "/pyarrow/", "/lzma.py", "/bz2.py", "/tarfile.py",
)  # fmt: skip


_CLASSIFIER_ERRORS: list[str] = []


@dataclasses.dataclass
class ValidationResult:
    """The outcome of one validation (what ``--json`` prints)."""

    verdict: str  # pass | fail | inconclusive
    category: str | None
    origin: str | None
    evidence: list[str]
    steps_completed: int
    seconds: float
    peak_memory_bytes: int | None
    device: str
    fix: str | None = None
    reason: str | None = None
    stage: str = "static"  # static | dry_run
    command: str = ""
    requested_gpus: int = 1
    gpu_type: str | None = None
    exit_code: int | None = None
    peak_rss_bytes: int | None = None
    peak_gpu_memory_bytes: int | None = None
    optimizer_state_bytes: int | None = None
    first_step_seconds: float | None = None
    seconds_per_step: float | None = None
    losses: list[float] = dataclasses.field(default_factory=list)
    projection: str | None = None
    checks: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    python: str | None = None
    hung: bool = False
    timed_out: bool = False
    orphans_killed: int = 0
    classifier_method: str | None = None
    recorded_id: int | None = None

    @property
    def exit_status(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def classify_output(text: str) -> Diagnosis | None:
    """The one call into the log classifier (``gpulens.diagnosis.classify_text``); None if unavailable."""
    try:
        from gpulens.diagnosis import classify_text

        return classify_text(text, file="<validate dry run>")
    except Exception as exc:  # a broken or missing classifier must not lose the verdict
        _CLASSIFIER_ERRORS.append(f"{type(exc).__name__}: {exc}")
        return None


def _lines(text: str, n: int = 6) -> list[str]:
    out = [line.rstrip() for line in text.splitlines() if line.strip()]
    return out[-n:]


def _input_blame(outcome: RunOutcome) -> tuple[str, list[str]] | None:
    """A decoding error raised after a declared input was opened: the input's contents are bad."""
    for m in outcome.markers:
        exc = m.get("exception")
        opened = m.get("inputs_opened") or []
        if not exc or not opened:
            continue
        exc_type = str(exc.get("type", ""))
        frames = exc.get("frames") or []
        in_decoder = any(any(mark in str(f[0]) for mark in _DECODER_FILES) for f in frames[-3:])
        by_type = any(exc_type.endswith(t) for t in _DECODE_ERRORS)
        if by_type or in_decoder:
            short = exc_type.rsplit(".", 1)[-1]
            return opened[-1], [
                f"{short}: {exc.get('message', '')}".rstrip(": "),
                f"raised while reading declared input {opened[-1]}",
            ]
    return None


def _aggregate(outcome: RunOutcome) -> dict[str, Any]:
    steps = 0
    step_times: list[float] = []
    losses: list[float] = []
    peak_cuda = 0
    peak_rss = 0
    state_bytes = 0
    started: float | None = None
    nonfinite: dict[str, Any] | None = None
    cuda = False
    for m in outcome.markers:
        peak_cuda = max(peak_cuda, int(m.get("peak_cuda_bytes") or 0))
        peak_rss = max(peak_rss, int(m.get("peak_rss_bytes") or 0))
        cuda = cuda or bool(m.get("cuda"))
        if m.get("nonfinite") and nonfinite is None:
            nonfinite = m["nonfinite"]
        if int(m.get("steps") or 0) >= steps and (m.get("steps") or m.get("losses")):
            steps = int(m.get("steps") or 0)
            step_times = list(m.get("step_times") or [])
            losses = list(m.get("losses") or [])
            state_bytes = int(m.get("optimizer_state_bytes") or 0)
            started = m.get("started")
    return {
        "steps": steps,
        "step_times": step_times,
        "losses": losses,
        "peak_cuda": peak_cuda,
        "peak_rss": max(peak_rss, outcome.peak_rss_bytes),
        "state_bytes": state_bytes,
        "started": started,
        "nonfinite": nonfinite,
        "cuda": cuda,
    }


def _signal_name(rc: int) -> str:
    import signal

    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _job_env(spec: JobSpec) -> dict[str, str]:
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("GPULENS_VALIDATE_"):
            del env[key]
    env.update(spec.env)
    return env


def _blacklist_lookup(store: Any) -> Callable[[list[str]], dict[str, str]] | None:
    if store is None:
        return None

    def lookup(candidates: list[str]) -> dict[str, str]:
        con = store.connect()
        try:
            hits: dict[str, str] = {}
            for c in candidates:
                row = con.execute(
                    "SELECT input, coalesce(reason, '') FROM blacklist"
                    " WHERE input = ? AND state = 'blacklisted'",
                    [c],
                ).fetchone()
                if row is not None:
                    hits[c] = str(row[1])
            return hits
        finally:
            con.close()

    return lookup


def validate(
    spec: JobSpec,
    config: ValidateConfig,
    store: Any = None,
    *,
    candidates: list[dev.GpuCandidate] | None = None,
    static_only: bool = False,
    echo: Callable[[bytes], None] | None = None,
    notice: Callable[[str], None] | None = None,
    record: bool = True,
) -> ValidationResult:
    """Validate one job: static checks, then (unless they fail) a dry run of its first steps.

    ``store``: a gpulens Store (blacklist lookup and recording) or None.
    ``candidates``: the local GPUs to choose from (default: ask the collectors' backend).
    ``echo`` receives the child's output as it comes; ``notice`` one-line progress notes.
    """
    t0 = time.monotonic()
    say = notice or (lambda _msg: None)
    target_type = check_request(spec, config)
    target_memory: int | None = None
    if target_type is not None:
        mem = config.gpu_types[target_type].get("memory_bytes")
        target_memory = int(mem) if mem else None
    if not spec.command:
        raise ValidatorError("No command to validate.", "Give one after `--` or in the job spec.")
    if not spec.run_dir.is_dir():
        raise ValidatorError(
            f"Working directory {spec.run_dir} does not exist.", "Fix workdir / --workdir."
        )
    env = _job_env(spec)
    lookup = None
    if store is not None:
        try:
            lookup = _blacklist_lookup(store)
        except GpulensError:
            lookup = None
    say("static checks")
    report = run_static_checks(spec, config, env=env, blacklisted=lookup)
    base: dict[str, Any] = {
        "command": spec.command_line(),
        "requested_gpus": spec.gpus,
        "gpu_type": target_type,
        "checks": report.checks,
        "warnings": list(report.warnings),
        "python": report.python,
    }
    if not report.ok:
        first = report.findings[0]
        evidence: list[str] = []
        for f in report.findings:
            evidence.extend(f.evidence)
        result = ValidationResult(
            verdict="fail",
            category=first.category,
            origin=first.origin,
            evidence=evidence[:12],
            steps_completed=0,
            seconds=time.monotonic() - t0,
            peak_memory_bytes=None,
            device="none (static check)",
            fix=FIX_HINTS.get(first.category),
            reason="; ".join(f.message for f in report.findings[:4]),
            stage="static",
            **base,
        )
    elif static_only:
        result = ValidationResult(
            verdict="inconclusive",
            category=None,
            origin=None,
            evidence=[],
            steps_completed=0,
            seconds=time.monotonic() - t0,
            peak_memory_bytes=None,
            device="none (static checks only)",
            reason="static checks passed; the dry run was skipped",
            stage="static",
            **base,
        )
    else:
        result = _dry_run(spec, config, env, report, candidates, target_type, target_memory, echo, say, base, t0)
    result.seconds = time.monotonic() - t0
    if store is not None and record:
        from gpulens.validator.record import record_validation

        try:
            result.recorded_id = record_validation(store, result)
        except GpulensError as exc:
            result.warnings.append(f"not recorded in the store ({exc.message})")
    return result


def _dry_run(
    spec: JobSpec,
    config: ValidateConfig,
    env: dict[str, str],
    report: StaticReport,
    candidates: list[dev.GpuCandidate] | None,
    target_type: str | None,
    target_memory: int | None,
    echo: Callable[[bytes], None] | None,
    say: Callable[[str], None],
    base: dict[str, Any],
    t0: float,
) -> ValidationResult:
    warnings: list[str] = base["warnings"]
    if candidates is None:
        candidates, why = dev.local_candidates(config.backend, config.fake_scenario)
    else:
        why = f"{len(candidates)} GPU(s) given"
    try:
        pool = dev.parse_pool(config.pool)
    except ValueError:
        raise ValidatorError(
            f"validate.pool {config.pool!r} is not a list of GPU indexes.", "Write it like \"0,2-3\"."
        ) from None
    chosen = dev.pick_device(
        candidates,
        pool=pool,
        gpu_types=config.gpu_types,
        idle_utilization=config.idle_utilization,
        idle_memory_bytes=config.idle_memory_bytes,
    )
    device_memory: int | None = None
    if chosen is not None:
        env["CUDA_VISIBLE_DEVICES"] = chosen.uuid or str(chosen.index)
        device = f"cuda:{chosen.index} ({chosen.model})"
        device_memory = chosen.memory_total_bytes
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        reason = why if not candidates else "no idle GPU in the pool"
        device = f"cpu ({reason})"
        warnings.append(f"running on CPU: {reason}")

    private = Path(tempfile.mkdtemp(prefix="gpulens-validate-"))
    try:
        marker_dir = private / "markers"
        tmp_dir = private / "tmp"
        marker_dir.mkdir()
        tmp_dir.mkdir()
        inputs = [str(spec.resolve(i)) for i in spec.inputs]
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(
                    [str(BOOTSTRAP_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
                ),
                "PYTHONUNBUFFERED": "1",
                "GPULENS_VALIDATE_MARKER_DIR": str(marker_dir),
                "GPULENS_VALIDATE_STEPS": str(max(1, config.steps)),
                "GPULENS_VALIDATE_INPUTS": os.pathsep.join(inputs),
                "TMPDIR": str(tmp_dir),
                "TEMP": str(tmp_dir),
                "TMP": str(tmp_dir),
            }
        )
        limits = RunLimits(
            timeout=config.timeout,
            memory_bytes=config.memory_limit_bytes or None,
            address_space=chosen is None,  # RLIMIT_AS breaks CUDA's address reservations
            file_size_bytes=config.file_size_limit_bytes or None,
            hang_seconds=config.hang_seconds,
            kill_grace=config.kill_grace_seconds,
        )
        say(f"dry run on {device}: up to {config.steps} optimizer step(s), {config.timeout:.0f} s budget")
        try:
            outcome = run_process(
                spec.command,
                cwd=spec.run_dir,
                env=env,
                limits=limits,
                marker_dir=marker_dir,
                tag=uuid.uuid4().hex,
                echo=echo,
            )
        except FileNotFoundError:
            raise ValidatorError(
                f"Command {spec.command[0]!r} was not found.", "Check the command and PATH."
            ) from None
        except PermissionError:
            raise ValidatorError(
                f"Command {spec.command[0]!r} is not executable.", "chmod +x it or call its interpreter."
            ) from None
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return _judge(outcome, config, base, device, device_memory, chosen, target_type, target_memory, t0)


def _judge(
    outcome: RunOutcome,
    config: ValidateConfig,
    base: dict[str, Any],
    device: str,
    device_memory: int | None,
    chosen: dev.GpuCandidate | None,
    target_type: str | None,
    target_memory: int | None,
    t0: float,
) -> ValidationResult:
    agg = _aggregate(outcome)
    steps = int(agg["steps"])
    times: list[float] = agg["step_times"]
    first_step = (times[0] - agg["started"]) if times and agg["started"] else None
    per_step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
    peak_gpu = int(agg["peak_cuda"]) or None
    peak_rss = int(agg["peak_rss"]) or None
    rc = outcome.returncode
    text = outcome.output
    res = ValidationResult(
        verdict="pass",
        category=None,
        origin=None,
        evidence=[],
        steps_completed=steps,
        seconds=time.monotonic() - t0,
        peak_memory_bytes=peak_gpu if agg["cuda"] else peak_rss,
        device=device,
        stage="dry_run",
        exit_code=rc,
        peak_rss_bytes=peak_rss,
        peak_gpu_memory_bytes=peak_gpu,
        optimizer_state_bytes=int(agg["state_bytes"]) or None,
        first_step_seconds=first_step,
        seconds_per_step=per_step,
        losses=[float(v) for v in agg["losses"] if isinstance(v, int | float)],
        hung=outcome.hung,
        timed_out=outcome.timed_out,
        orphans_killed=outcome.killed,
        **base,
    )
    if outcome.leftover:
        res.warnings.append(f"processes {outcome.leftover} of the dry run could not be killed")

    def fail(category: str, origin: str | None, evidence: list[str], reason: str) -> ValidationResult:
        res.verdict = "fail"
        res.category = category
        res.origin = origin or DEFAULT_ORIGIN.get(category, "unknown")
        res.evidence = evidence[:12]
        res.reason = reason
        res.fix = FIX_HINTS.get(category)
        return res

    def classified(default_reason: str) -> ValidationResult:
        diag = classify_output(text)
        blame = _input_blame(outcome)
        if blame is not None and (diag is None or diag.category in ("unknown", "crash", "semantic_error")):
            return fail("incorrect_input", "data", blame[1], f"declared input {blame[0]} could not be read")
        if diag is None:
            why = _CLASSIFIER_ERRORS[-1] if _CLASSIFIER_ERRORS else "not installed"
            res.warnings.append(f"the log classifier is not available ({why}): category unknown")
            return fail("unknown", "unknown", _lines(text), default_reason)
        res.classifier_method = diag.method
        evidence = list(diag.evidence) or _lines(text)
        if blame is not None and diag.category == "incorrect_input":
            evidence.append(blame[1][-1])
        if diag.category == "gpu_oom":
            proj = dev.project_memory(
                target_type=target_type,
                target_memory_bytes=target_memory,
                device_memory_bytes=device_memory,
                peak_gpu_bytes=peak_gpu,
                lower_bound_bytes=res.optimizer_state_bytes,
                oom_on_device=True,
            )
            res.projection = proj.message
            if proj.verdict == "inconclusive":
                res.verdict = "inconclusive"
                res.category, res.origin = "gpu_oom", diag.origin
                res.evidence, res.reason = evidence[:12], proj.message
                return res
        reason = diag.reason or default_reason
        return fail(diag.category, diag.origin, evidence, reason)

    # 1. what the hook saw
    if agg["nonfinite"] is not None or outcome.stopped_by_hook == "nonfinite_loss":
        nf = agg["nonfinite"] or {}
        return fail(
            "model_diverged",
            "user",
            [f"loss = {nf.get('value', 'nan')} after {nf.get('step', steps)} optimizer step(s)"]
            + [f"losses: {', '.join(f'{v:.4g}' for v in res.losses[-6:])}"],
            "the loss was not finite during the dry run",
        )
    reached = outcome.stopped_by_hook == "steps" or (steps >= config.steps > 0)
    # 2. limits the validator enforced
    if outcome.memory_exceeded and not reached:
        return fail(
            "cpu_oom",
            "user",
            [f"the job's processes used more than {config.memory_limit_bytes / 1024**3:.1f} GiB of memory"]
            + _lines(text, 3),
            "the memory limit of the dry run was exceeded",
        )
    if outcome.hung and not reached:
        res.verdict = "fail"
        res.hung = True
        diag = classify_output(text) if text.strip() else None
        res.category = diag.category if diag is not None and diag.category != "unknown" else "unknown"
        res.origin = diag.origin if diag is not None and diag.category != "unknown" else "user"
        res.reason = (
            f"hang before the first optimizer step: no CPU, I/O or output for {config.hang_seconds:.0f} s"
            if steps == 0
            else f"hang after {steps} optimizer step(s): no CPU, I/O or output for {config.hang_seconds:.0f} s"
        )
        res.evidence = [res.reason] + _lines(text, 4)
        res.fix = _HANG_HINT
        return res
    if outcome.timed_out and not reached:
        res.verdict = "inconclusive"
        res.reason = (
            f"still running and busy at the {config.timeout:.0f} s deadline"
            + (f" after {steps} of {config.steps} step(s)" if steps else " before its first optimizer step")
        )
        res.evidence = _lines(text, 4)
        return res
    # 3. how the program ended
    if reached:
        proj = dev.project_memory(
            target_type=target_type,
            target_memory_bytes=target_memory,
            device_memory_bytes=device_memory,
            peak_gpu_bytes=peak_gpu,
            lower_bound_bytes=res.optimizer_state_bytes,
            oom_on_device=False,
        )
        res.projection = proj.message
        if proj.verdict == "fail" and proj.category:
            return fail(proj.category, "user", [proj.message], proj.message)
        res.reason = f"{steps} optimizer step(s) completed"
        return res
    if rc == 0:
        res.reason = (
            "the program exited successfully"
            + ("" if steps else " (no PyTorch optimizer step was observed)")
        )
        return res
    if rc is not None and rc == -9:
        diag = classify_output(text)
        if diag is None or diag.category in ("unknown", "crash"):
            return fail(
                "cpu_oom",
                "user",
                ["killed by SIGKILL (not by the validator): most likely the kernel's OOM killer"]
                + _lines(text, 3),
                "killed by SIGKILL",
            )
    if (rc is not None and rc < 0 and -rc == 25) or "[Errno 27] File too large" in text:
        # SIGXFSZ (or EFBIG, as Python ignores SIGXFSZ): the dry run's own limit, not the job
        res.verdict = "inconclusive"
        res.reason = (
            f"wrote a file larger than the dry run's limit ({config.file_size_limit_bytes} bytes)"
        )
        res.evidence = _lines(text, 4)
        return res
    how = f"exit status {rc}" if rc is not None and rc >= 0 else f"killed by {_signal_name(rc or 0)}"
    return classified(f"the program failed ({how}) after {steps} optimizer step(s)")


def _stderr_echo(data: bytes) -> None:
    sys.stderr.buffer.write(data)
    sys.stderr.buffer.flush()
