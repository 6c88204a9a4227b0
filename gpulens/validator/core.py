"""``validate(spec, config, store)``: static checks, the dry run, the verdict, the record."""

from __future__ import annotations

import dataclasses
import os
import re
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
from gpulens.validator.hints import FIX_HINTS, HintContext, fix_hint
from gpulens.validator.refine import exception_of, input_blame, refine
from gpulens.validator.runner import RunLimits, RunOutcome, run_process
from gpulens.validator.spec import JobSpec
from gpulens.validator.static import StaticReport, check_request, run_static_checks

__all__ = [
    "BOOTSTRAP_DIR",
    "DIVERGED_EXIT_CODE",
    "EXIT_CODES",
    "FIX_HINTS",
    "STEP_SIGNALS",
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

_HANG_HINT = (
    "The program stopped making progress before its first training step: look for blocking reads,"
    " locks, barriers or rendezvous waits (`py-spy dump --pid PID` shows where it waits)."
)
#: How each step signal of the start-up hook is reported.
STEP_SIGNALS = {
    "optimizer": "optimizer steps (torch.optim step hook)",
    "autograd": "backward passes followed by a parameter change (no torch.optim step seen)",
}
#: The program wanted a GPU the CPU dry run does not have (its torch has CUDA): no claim either way.
_NO_GPU_RE = re.compile(r"No CUDA GPUs are available|Found no NVIDIA driver|no CUDA-capable device|CUDA driver initialization failed")
#: The job's own environment has a CPU-only torch: it fails the same way on any GPU node.
_CPU_TORCH_RE = re.compile(r"not compiled with CUDA|has no attribute '_cuda_")


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
    step_signal: str | None = None  # optimizer | autograd (see STEP_SIGNALS)
    backward_passes: int | None = None

    @property
    def exit_status(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _Call:
    """The state of one ``validate`` call (nothing is kept between calls)."""

    spec: JobSpec
    config: ValidateConfig
    t0: float
    target_type: str | None
    target_memory: int | None
    base: dict[str, Any] = dataclasses.field(default_factory=dict)
    classifier_errors: list[str] = dataclasses.field(default_factory=list)
    device: str = ""
    device_memory: int | None = None
    on_cpu: bool = True

    def context(self) -> HintContext:
        return HintContext(
            args=list(self.spec.command[1:]),
            inputs=list(self.spec.inputs),
            output_dir=self.spec.output_dir,
            workdir=str(self.spec.run_dir),
        )

    def hint(self, category: str, evidence: list[str]) -> str:
        return fix_hint(category, evidence, self.context())


def classify_output(text: str, errors: list[str] | None = None) -> Diagnosis | None:
    """The one call into the log classifier (``gpulens.diagnosis.classify_text``); None if unavailable.

    Why it was unavailable is appended to ``errors`` (the caller's own list).
    """
    try:
        from gpulens.diagnosis import classify_text

        return classify_text(text, file="<validate dry run>")
    except Exception as exc:  # a broken or missing classifier must not lose the verdict
        if errors is not None:
            errors.append(f"{type(exc).__name__}: {exc}")
        return None


def _lines(text: str, n: int = 6) -> list[str]:
    out = [line.rstrip() for line in text.splitlines() if line.strip()]
    return out[-n:]


@dataclasses.dataclass
class _Seen:
    """What the start-up hook's markers say, over all processes of the run."""

    steps: int = 0
    signal: str | None = None
    backward_passes: int = 0
    step_times: list[float] = dataclasses.field(default_factory=list)
    losses: list[float] = dataclasses.field(default_factory=list)
    peak_cuda: int = 0
    peak_rss: int = 0
    state_bytes: int = 0
    started: float | None = None
    nonfinite: dict[str, Any] | None = None
    cuda: bool = False


def _aggregate(outcome: RunOutcome) -> _Seen:
    seen = _Seen()
    for m in outcome.markers:
        seen.peak_cuda = max(seen.peak_cuda, int(m.get("peak_cuda_bytes") or 0))
        seen.peak_rss = max(seen.peak_rss, int(m.get("peak_rss_bytes") or 0))
        seen.backward_passes = max(seen.backward_passes, int(m.get("backward_passes") or 0))
        seen.cuda = seen.cuda or bool(m.get("cuda"))
        if m.get("nonfinite") and seen.nonfinite is None:
            seen.nonfinite = m["nonfinite"]
        if int(m.get("steps") or 0) >= seen.steps and (m.get("steps") or m.get("losses")):
            seen.steps = int(m.get("steps") or 0)
            seen.signal = m.get("signal")
            seen.step_times = list(m.get("step_times") or [])
            seen.losses = list(m.get("losses") or [])
            seen.state_bytes = int(m.get("optimizer_state_bytes") or 0)
            seen.started = m.get("started")
    seen.peak_rss = max(seen.peak_rss, outcome.peak_rss_bytes)
    return seen


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
    call = _start(spec, config)
    say = notice or (lambda _msg: None)
    env = _job_env(spec)
    say("static checks")
    report = run_static_checks(spec, config, env=env, blacklisted=_lookup_or_none(store))
    call.base = {
        "command": spec.command_line(),
        "requested_gpus": spec.gpus,
        "gpu_type": call.target_type,
        "checks": report.checks,
        "warnings": list(report.warnings),
        "python": report.python,
    }
    if not report.ok:
        result = _static_failure(call, report)
    elif static_only:
        result = _static_passed(call)
    else:
        result = _dry_run(call, env, candidates, echo, say)
    result.seconds = time.monotonic() - call.t0
    if store is not None and record:
        _record(store, result)
    return result


def _start(spec: JobSpec, config: ValidateConfig) -> _Call:
    """Check the request and the command; the per-call state."""
    t0 = time.monotonic()
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
    return _Call(spec, config, t0, target_type, target_memory)


def _lookup_or_none(store: Any) -> Callable[[list[str]], dict[str, str]] | None:
    if store is None:
        return None
    try:
        return _blacklist_lookup(store)
    except GpulensError:
        return None


def _record(store: Any, result: ValidationResult) -> None:
    from gpulens.validator.record import record_validation

    try:
        result.recorded_id = record_validation(store, result)
    except GpulensError as exc:
        result.warnings.append(f"not recorded in the store ({exc.message})")


def _static_failure(call: _Call, report: StaticReport) -> ValidationResult:
    first = report.findings[0]
    evidence: list[str] = []
    for f in report.findings:
        evidence.extend(f.evidence)
    return ValidationResult(
        verdict="fail",
        category=first.category,
        origin=first.origin,
        evidence=evidence[:12],
        steps_completed=0,
        seconds=time.monotonic() - call.t0,
        peak_memory_bytes=None,
        device="none (static check)",
        fix=call.hint(first.category, first.evidence + [first.message]),
        reason="; ".join(f.message for f in report.findings[:4]),
        stage="static",
        **call.base,
    )


def _static_passed(call: _Call) -> ValidationResult:
    """--static-only asked for the static checks: they passed, so the answer is pass (exit 0);
    ``stage`` static and the device say that nothing ran."""
    return ValidationResult(
        verdict="pass",
        category=None,
        origin=None,
        evidence=[],
        steps_completed=0,
        seconds=time.monotonic() - call.t0,
        peak_memory_bytes=None,
        device="none (static checks only)",
        reason="static checks passed (--static-only: the job was not run)",
        stage="static",
        **call.base,
    )


def _choose_device(
    call: _Call, candidates: list[dev.GpuCandidate] | None, env: dict[str, str]
) -> dev.GpuCandidate | None:
    """Pick the cheapest idle GPU (or the CPU); sets CUDA_VISIBLE_DEVICES and ``call.device``."""
    config = call.config
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
    if chosen is not None:
        env["CUDA_VISIBLE_DEVICES"] = chosen.uuid or str(chosen.index)
        call.device = f"cuda:{chosen.index} ({chosen.model})"
        call.device_memory = chosen.memory_total_bytes
        call.on_cpu = False
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        reason = why if not candidates else "no idle GPU in the pool"
        call.device = f"cpu ({reason})"
        call.base["warnings"].append(f"running on CPU: {reason}")
    return chosen


def _child_env(call: _Call, env: dict[str, str], marker_dir: Path, tmp_dir: Path) -> None:
    inputs = [str(call.spec.resolve(i)) for i in call.spec.inputs]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(
                [str(BOOTSTRAP_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
            ),
            "PYTHONUNBUFFERED": "1",
            "GPULENS_VALIDATE_MARKER_DIR": str(marker_dir),
            "GPULENS_VALIDATE_STEPS": str(max(1, call.config.steps)),
            "GPULENS_VALIDATE_INPUTS": os.pathsep.join(inputs),
            "TMPDIR": str(tmp_dir),
            "TEMP": str(tmp_dir),
            "TMP": str(tmp_dir),
        }
    )


def _limits(config: ValidateConfig, on_gpu: bool) -> RunLimits:
    return RunLimits(
        timeout=config.timeout,
        memory_bytes=config.memory_limit_bytes or None,
        address_space=not on_gpu,  # RLIMIT_AS breaks CUDA's address reservations
        file_size_bytes=config.file_size_limit_bytes or None,
        hang_seconds=config.hang_seconds,
        kill_grace=config.kill_grace_seconds,
    )


def _dry_run(
    call: _Call,
    env: dict[str, str],
    candidates: list[dev.GpuCandidate] | None,
    echo: Callable[[bytes], None] | None,
    say: Callable[[str], None],
) -> ValidationResult:
    spec, config = call.spec, call.config
    chosen = _choose_device(call, candidates, env)
    private = Path(tempfile.mkdtemp(prefix="gpulens-validate-"))
    try:
        marker_dir = private / "markers"
        tmp_dir = private / "tmp"
        marker_dir.mkdir()
        tmp_dir.mkdir()
        _child_env(call, env, marker_dir, tmp_dir)
        say(f"dry run on {call.device}: up to {config.steps} training step(s), {config.timeout:.0f} s budget")
        try:
            outcome = run_process(
                spec.command,
                cwd=spec.run_dir,
                env=env,
                limits=_limits(config, chosen is not None),
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
    return _judge(outcome, call)


# --- the verdict of a dry run: named steps, first answer wins ------------------------------


def _judge(outcome: RunOutcome, call: _Call) -> ValidationResult:
    """The verdict: what the hook saw, the limits the validator enforced, how the program ended."""
    seen = _aggregate(outcome)
    res = _measured(outcome, seen, call)
    for step in (_diverged, _over_memory, _hung, _deadline, _reached, _exited_ok, _sigkilled, _file_too_large):
        verdict = step(outcome, seen, res, call)
        if verdict is not None:
            return verdict
    return _failed(outcome, seen, res, call)


def _measured(outcome: RunOutcome, seen: _Seen, call: _Call) -> ValidationResult:
    """A passing result holding every measurement; the steps below change what they must."""
    times = seen.step_times
    peak_gpu = seen.peak_cuda or None
    peak_rss = seen.peak_rss or None
    res = ValidationResult(
        verdict="pass",
        category=None,
        origin=None,
        evidence=[],
        steps_completed=seen.steps,
        seconds=time.monotonic() - call.t0,
        peak_memory_bytes=peak_gpu if seen.cuda else peak_rss,
        device=call.device,
        stage="dry_run",
        exit_code=outcome.returncode,
        peak_rss_bytes=peak_rss,
        peak_gpu_memory_bytes=peak_gpu,
        optimizer_state_bytes=seen.state_bytes or None,
        first_step_seconds=(times[0] - seen.started) if times and seen.started else None,
        seconds_per_step=(times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None,
        losses=[float(v) for v in seen.losses if isinstance(v, int | float)],
        hung=outcome.hung,
        timed_out=outcome.timed_out,
        orphans_killed=outcome.killed,
        step_signal=seen.signal if seen.steps else None,
        backward_passes=seen.backward_passes,
        **call.base,
    )
    if outcome.leftover:
        res.warnings.append(f"processes {outcome.leftover} of the dry run could not be killed")
    return res


def _fail(res: ValidationResult, call: _Call, category: str, origin: str | None, evidence: list[str], reason: str) -> ValidationResult:
    res.verdict = "fail"
    res.category = category
    res.origin = origin or DEFAULT_ORIGIN.get(category, "unknown")
    res.evidence = evidence[:12]
    res.reason = reason
    res.fix = call.hint(category, evidence)
    return res


def _reached(outcome: RunOutcome, seen: _Seen, res: ValidationResult, call: _Call) -> ValidationResult | None:
    steps = seen.steps
    if not (outcome.stopped_by_hook == "steps" or steps >= call.config.steps > 0):
        return None
    proj = _project(res, call, oom_on_device=False)
    if proj.verdict == "fail" and proj.category:
        return _fail(res, call, proj.category, "user", [proj.message], proj.message)
    res.reason = f"{steps} training step(s) completed; counted by {STEP_SIGNALS.get(seen.signal or '', seen.signal)}"
    return res


def _project(res: ValidationResult, call: _Call, *, oom_on_device: bool) -> dev.Projection:
    proj = dev.project_memory(
        target_type=call.target_type,
        target_memory_bytes=call.target_memory,
        device_memory_bytes=call.device_memory,
        peak_gpu_bytes=res.peak_gpu_memory_bytes,
        lower_bound_bytes=res.optimizer_state_bytes,
        oom_on_device=oom_on_device,
    )
    res.projection = proj.message
    return proj


def _not_reached(outcome: RunOutcome, seen: _Seen, call: _Call) -> bool:
    return not (outcome.stopped_by_hook == "steps" or seen.steps >= call.config.steps > 0)


def _diverged(outcome: RunOutcome, seen: _Seen, res: ValidationResult, call: _Call) -> ValidationResult | None:
    if seen.nonfinite is None and outcome.stopped_by_hook != "nonfinite_loss":
        return None
    nf = seen.nonfinite or {}
    return _fail(
        res,
        call,
        "model_diverged",
        "user",
        [f"loss = {nf.get('value', 'nan')} after {nf.get('step', seen.steps)} training step(s)"]
        + [f"losses: {', '.join(f'{v:.4g}' for v in res.losses[-6:])}"],
        "the loss was not finite during the dry run",
    )


def _over_memory(outcome: RunOutcome, seen: _Seen, res: ValidationResult, call: _Call) -> ValidationResult | None:
    if not outcome.memory_exceeded or not _not_reached(outcome, seen, call):
        return None
    limit = call.config.memory_limit_bytes / 1024**3
    return _fail(
        res,
        call,
        "cpu_oom",
        "user",
        [f"the job's processes used more than {limit:.1f} GiB of memory (the validator's limit)"]
        + _lines(outcome.output, 3),
        "the memory limit of the dry run was exceeded",
    )


def _hung(outcome: RunOutcome, seen: _Seen, res: ValidationResult, call: _Call) -> ValidationResult | None:
    if not outcome.hung or not _not_reached(outcome, seen, call):
        return None
    text = outcome.output
    diag = classify_output(text, call.classifier_errors) if text.strip() else None
    known = diag is not None and diag.category != "unknown"
    res.verdict = "fail"
    res.hung = True
    res.category = diag.category if diag is not None and known else "unknown"
    res.origin = diag.origin if diag is not None and known else "user"
    quiet = f"no CPU, I/O or output for {call.config.hang_seconds:.0f} s"
    res.reason = (
        f"hang before the first training step: {quiet}"
        if seen.steps == 0
        else f"hang after {seen.steps} training step(s): {quiet}"
    )
    res.evidence = [res.reason] + _lines(text, 4)
    res.fix = _HANG_HINT if not known else call.hint(res.category, res.evidence)
    return res


def _deadline(outcome: RunOutcome, seen: _Seen, res: ValidationResult, call: _Call) -> ValidationResult | None:
    if not outcome.timed_out or not _not_reached(outcome, seen, call):
        return None
    res.verdict = "inconclusive"
    res.reason = f"still running and busy at the {call.config.timeout:.0f} s deadline" + (
        f" after {seen.steps} of {call.config.steps} step(s)" if seen.steps else " before its first training step"
    )
    res.evidence = _lines(outcome.output, 4)
    return res


def _exited_ok(outcome: RunOutcome, seen: _Seen, res: ValidationResult, call: _Call) -> ValidationResult | None:
    if outcome.returncode != 0:
        return None
    if seen.steps:
        res.reason = f"the program exited successfully after {seen.steps} training step(s)"
    else:
        res.reason = (
            "the program exited successfully before any training step"
            f" (no optimizer step; {seen.backward_passes} backward pass(es) and no parameter change after one)"
        )
        res.warnings.append(
            "the program exited 0 before any training step: its training code was not exercised by the dry run"
        )
    return res


def _sigkilled(outcome: RunOutcome, seen: _Seen, res: ValidationResult, call: _Call) -> ValidationResult | None:
    if outcome.returncode != -9:
        return None
    diag = classify_output(outcome.output, call.classifier_errors)
    if diag is not None and diag.category not in ("unknown", "crash"):
        return None
    return _fail(
        res,
        call,
        "cpu_oom",
        "user",
        ["killed by SIGKILL (not by the validator): most likely the kernel's OOM killer"]
        + _lines(outcome.output, 3),
        "killed by SIGKILL",
    )


def _file_too_large(outcome: RunOutcome, seen: _Seen, res: ValidationResult, call: _Call) -> ValidationResult | None:
    rc = outcome.returncode
    # SIGXFSZ (or EFBIG, as Python ignores SIGXFSZ): the dry run's own limit, not the job
    if not ((rc is not None and rc < 0 and -rc == 25) or "[Errno 27] File too large" in outcome.output):
        return None
    res.verdict = "inconclusive"
    res.reason = f"wrote a file larger than the dry run's limit ({call.config.file_size_limit_bytes} bytes)"
    res.evidence = _lines(outcome.output, 4)
    return res


def _failed(outcome: RunOutcome, seen: _Seen, res: ValidationResult, call: _Call) -> ValidationResult:
    """A non-zero exit: the classifier's category, refined by what the hook recorded."""
    rc = outcome.returncode
    how = f"exit status {rc}" if rc is not None and rc >= 0 else f"killed by {_signal_name(rc or 0)}"
    default_reason = f"the program failed ({how}) after {seen.steps} training step(s)"
    text = outcome.output
    diag = classify_output(text, call.classifier_errors)
    blame = input_blame(outcome.markers)
    if blame is not None and (diag is None or diag.category in ("unknown", "crash", "semantic_error")):
        return _fail(res, call, "incorrect_input", "data", blame[1], f"declared input {blame[0]} could not be read")
    refined = refine(diag.category if diag is not None else "unknown", exception_of(outcome.markers), call.context())
    if refined is not None:
        extra = [line for line in (diag.evidence if diag is not None else []) if line not in refined.evidence]
        return _fail(res, call, refined.category, refined.origin, refined.evidence + extra, refined.reason)
    if diag is None:
        why = call.classifier_errors[-1] if call.classifier_errors else "not installed"
        res.warnings.append(f"the log classifier is not available ({why}): category unknown")
        return _fail(res, call, "unknown", "unknown", _lines(text), default_reason)
    res.classifier_method = diag.method
    evidence = list(diag.evidence) or _lines(text)
    if blame is not None and diag.category == "incorrect_input":
        evidence.append(blame[1][-1])
    if diag.category == "gpu_oom":
        return _gpu_oom(res, call, diag, evidence, default_reason)
    if diag.category == "cuda_env_error":
        return _cuda_env(res, call, diag, evidence, default_reason)
    return _fail(res, call, diag.category, diag.origin, evidence, diag.reason or default_reason)


def _gpu_oom(res: ValidationResult, call: _Call, diag: Diagnosis, evidence: list[str], reason: str) -> ValidationResult:
    proj = _project(res, call, oom_on_device=True)
    if proj.verdict == "inconclusive":
        res.verdict = "inconclusive"
        res.category, res.origin = "gpu_oom", diag.origin
        res.evidence, res.reason = evidence[:12], proj.message
        return res
    return _fail(res, call, "gpu_oom", diag.origin, evidence, diag.reason or reason)


def _cuda_env(res: ValidationResult, call: _Call, diag: Diagnosis, evidence: list[str], reason: str) -> ValidationResult:
    """No GPU on a CPU dry run is not the job's fault; a CPU-only torch in its environment is."""
    text = "\n".join(evidence)
    if _CPU_TORCH_RE.search(text):
        evidence = evidence + ["the job's environment has a PyTorch build without CUDA: it fails the same way on a GPU node"]
        return _fail(res, call, "cuda_env_error", "user", evidence, "the job's PyTorch has no CUDA support")
    if call.on_cpu and _NO_GPU_RE.search(text):
        res.verdict = "inconclusive"
        res.category, res.origin = None, None
        res.evidence = evidence[:12]
        res.reason = "the program needs a GPU and the dry run ran on the CPU (no idle GPU): no verdict on GPU code"
        return res
    return _fail(res, call, "cuda_env_error", diag.origin, evidence, diag.reason or reason)


def _stderr_echo(data: bytes) -> None:
    sys.stderr.buffer.write(data)
    sys.stderr.buffer.flush()
