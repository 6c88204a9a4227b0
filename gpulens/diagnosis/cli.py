"""`gpulens diagnose`: classify failure logs (no store needed), one job, every failed attempt,
or evaluate the classifier."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from gpulens.cliapp import App, emit, json_option, pass_app, progress, stage_progress
from gpulens.errors import GpulensError, InputError

__all__ = ["diagnose"]


def _record(d: Any) -> dict[str, Any]:
    return {
        "file": d.file,
        "category": d.category,
        "origin": d.origin,
        "confidence": round(float(d.confidence), 3),
        "evidence": list(d.evidence),
        "method": d.method,
        "rule_id": d.rule_id,
        "inputs": list(d.inputs),
        "input_records": list(getattr(d, "input_records", []) or []),
        "reason": d.reason,
        "hint": d.hint,
        "clue": d.clue,
    }


@click.command("diagnose")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=True, path_type=Path))
@click.option("--job", "job_id", default=None, help="Diagnose one job from the store (uses retries, node health, inputs).")
@click.option("--all", "all_", is_flag=True, help="Diagnose every failed attempt in the store (fills the failures table).")
@click.option("--evaluate", is_flag=True, help="Evaluate the classifier leave-project-out on the real logs of sample_logs/real/ "
                   "(and on the generated logs) and write the report.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where --evaluate writes its Markdown report (default: print it on stdout).")
@click.option("--whole-logs", "whole_logs", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With --evaluate: evaluate whole-log diagnosis on the whole-log corpus in this directory "
                   "(sample_logs/whole/README.md; GPULENS_WHOLE_LOGS) and write its section of --report.")
@click.option("--label", "label", default=None, metavar="JOB[:ATTEMPT]",
              help="Record your verdict on a failed attempt (default: its last); needs --origin. "
                   "Labels survive --all and the origin network learns from them.")
@click.option("--origin", "origin", default=None, help="With --label: user, data, framework or infrastructure.")
@click.option("--category", "category", default=None, help="With --label: the category (default: the diagnosed one).")
@json_option
@pass_app
def diagnose(app: App, files: tuple[Path, ...], job_id: str | None, all_: bool, evaluate: bool,
             report: Path | None, whole_logs: Path | None, label: str | None, origin: str | None,
             category: str | None, as_json: bool) -> None:
    """Diagnose job log FILE(s) whole: healthy (category none) or failed, the failure-indicating
    lines with their numbers, the first failing rank and node, the phase; category, origin,
    confidence, evidence.

    Works without a store. With --json, prints one JSON array with one object per file
    (--job ID: one object for the job).
    """
    modes = sum([bool(files), job_id is not None, all_, evaluate, label is not None])
    if modes != 1:
        raise InputError("Give log FILE(s), or exactly one of --job ID, --all, --evaluate, --label JOB.",
                         "Example: gpulens diagnose job.log --json")
    if whole_logs is not None and not evaluate:
        raise InputError("--whole-logs goes with --evaluate.",
                         "Example: gpulens diagnose --evaluate --whole-logs $GPULENS_WHOLE_LOGS")
    if (origin is not None or category is not None) and label is None:
        raise InputError("--origin and --category go with --label JOB[:ATTEMPT].",
                         "Example: gpulens diagnose --label job-42:1 --origin data")
    if label is not None:
        _label(app, label, origin, category, as_json)
    elif evaluate and whole_logs is not None:
        _evaluate_whole(app, whole_logs, report, as_json)
    elif evaluate:
        _evaluate(app, report, as_json)
    elif job_id is not None:
        _job(app, job_id, as_json)
    elif all_:
        _all(app, as_json)
    else:
        _files(app, files, as_json)


# The store modes import gpulens.diagnosis.jobs (pandas, the store: about 1 CPU-s) when they run;
# diagnosing files needs neither.
def _job(app: App, job_id: str, as_json: bool) -> None:
    from gpulens.diagnosis import jobs

    _drain_epilog_queue(app)
    with app.console.status(f"diagnosing job {job_id}"):
        result = jobs.diagnose_job(app.store(), job_id)
    emit(result.to_dict(), as_json, lambda: click.echo("\n".join(jobs.format_job(result))))


def _all(app: App, as_json: bool) -> None:
    from gpulens.diagnosis import jobs

    _drain_epilog_queue(app)
    with stage_progress(app.console) as tick:
        n = jobs.diagnose_all(app.store(), progress=tick)
    emit({"diagnosed": n}, as_json, lambda: click.echo(f"diagnosed {n} failed attempts"))


BATCH = 256


def _drain_epilog_queue(app: App) -> None:
    """Record what Slurm epilogs queued but could not record in their time budget (docs/slurm.md)."""
    from gpulens.ingest.importers.slurm_epilog import drain_queue

    store = app.store()
    try:
        got = drain_queue(store, warn=lambda line: app.console.print(f"[yellow]warning: {line}[/yellow]"))
    except GpulensError as exc:  # e.g. a read-only mount: diagnose what the store has
        app.console.print(f"[yellow]warning: queued Slurm epilog records not recorded ({exc.message})[/yellow]")
        return
    if got.records:
        app.console.print(f"recorded {got.records} queued Slurm epilog record(s)")


def _label(app: App, label: str, origin: str | None, category: str | None, as_json: bool) -> None:
    from gpulens.diagnosis import jobs

    if origin is None:
        raise InputError("--label needs --origin.", "Example: gpulens diagnose --label job-42 --origin data")
    job_id, _, att = label.rpartition(":") if ":" in label else (label, "", "")
    if att and not att.isdigit():
        job_id, att = label, ""
    attempt, cat, org = jobs.label_failure(app.store(), job_id, int(att) if att else None, origin, category)
    emit({"job_id": job_id, "attempt": attempt, "category": cat, "origin": org, "method": "manual"}, as_json,
         lambda: click.echo(f"labelled job {job_id} attempt {attempt}: {cat}, origin {org} (manual)"))


def _files(app: App, files: tuple[Path, ...], as_json: bool) -> None:
    from gpulens.diagnosis.classifier import whole_classifier
    from gpulens.diagnosis.logread import diagnose_path

    clf = whole_classifier()
    unreadable = 0
    records = []
    if as_json:  # one JSON array, streamed one element (one line) per file
        sys.stdout.write("[")
    for path in files:
        whole = diagnose_path(path, clf)
        d = whole.diagnosis
        if d.reason in ("file not found", "permission denied reading the log") or (
            d.reason or "").startswith(("cannot read", "is a directory")):
            unreadable += 1
        rec = {**_record(d), **whole.to_dict()}
        records.append(rec)
        if as_json:
            sys.stdout.write(("\n" if len(records) == 1 else ",\n") + json.dumps(rec, default=str))
            sys.stdout.flush()
        else:
            _human(rec, whole.indicators)
    if as_json:
        sys.stdout.write("\n]\n")
    if unreadable:
        raise InputError(f"{unreadable} of {len(files)} log file(s) could not be read (see 'reason').",
                         "Check the paths and permissions.")


def _human(r: dict[str, Any], indicators: list[str]) -> None:
    """One block per file: the verdict, the story, the indicator lines with their numbers."""
    how = r["rule_id"] or r["method"]
    click.echo(f"{r['file']}: {r['category']} (origin {r['origin']}, confidence {r['confidence']:.2f}, {how})")
    click.echo(f"  {r['story']}")
    for number, text in zip(r["indicator_lines"], indicators, strict=False):
        click.echo(f"  {number:>8,} | {text}")
    if not r["indicator_lines"]:
        for line in r["evidence"][:3]:
            click.echo(f"         | {line}")
    if r["reason"] and r["category"] != "none":
        click.echo(f"  ({r['reason']})")
    for line in r["new_in_attempt"][:5]:
        click.echo(f"  new in this attempt: {line}")
    if r["hint"]:
        click.echo(f"  hint: {r['hint']}")


def _evaluate(app: App, report: Path | None, as_json: bool) -> None:
    """Cross-validate; the Markdown report goes to ``report`` or, without one, to stdout."""
    from gpulens.diagnosis.evaluate import evaluate, render_markdown, write_report

    with progress(app.console) as bar:
        task = bar.add_task("evaluating (leave-project-out)", total=12)
        res = evaluate(progress=lambda k, n: bar.update(task, completed=k, total=n))
    if report is not None:
        write_report(report, res)
    elif not as_json:
        click.echo(render_markdown(res))
        return
    rules, svm, comb = res.lpo
    summary = {
        "report": str(report) if report is not None else None,
        "real_logs": res.n_real,
        "projects": res.n_projects,
        "generated_logs": res.n_generated,
        "macro_f1": round(comb.macro_f1(), 4),
        "accuracy": round(comb.accuracy(), 4),
        "origin_accuracy": round(comb.origin_accuracy() or 0.0, 4),
        "rules_only_macro_f1": round(rules.macro_f1(), 4),
        "svm_only_macro_f1": round(svm.macro_f1(), 4),
        "holdout_split_macro_f1": round(res.holdout[2].macro_f1(), 4),
        "holdout_split_origin_accuracy": round(res.holdout[2].origin_accuracy() or 0.0, 4),
        "generated_macro_f1": round(res.generated[2].macro_f1(), 4),
    }
    emit(summary, as_json, lambda: click.echo(
        f"leave-project-out on {res.n_real} real logs: macro-F1 {summary['macro_f1']:.3f}, origin accuracy "
        f"{summary['origin_accuracy']:.3f}; report written to {report}"))


def _evaluate_whole(app: App, root: Path, report: Path | None, as_json: bool) -> None:
    """Evaluate whole-log diagnosis; its section goes into ``report`` (kept in place between its
    markers, the rest of the report untouched) or, without one, to stdout."""
    from datetime import date

    from gpulens.diagnosis.logread.evaluate import evaluate_whole, render_section, write_section

    with progress(app.console) as bar:
        task = bar.add_task("diagnosing whole logs", total=1)
        ev = evaluate_whole(root, progress=lambda k, n: bar.update(task, completed=k, total=n))
    text = render_section(ev, date=date.today().isoformat(),
                          command="gpulens diagnose --evaluate --whole-logs $GPULENS_WHOLE_LOGS --report "
                                  "docs/diagnosis-evaluation.md")
    if report is not None:
        write_section(report, text)
    elif not as_json:
        click.echo(text)
        return
    subs = ev.subsets()
    summary = {"report": str(report) if report is not None else None, "logs": len(ev.cases),
               "megabytes": round(ev.megabytes, 2), "seconds": round(ev.seconds, 2),
               **{f.name: _figures(f) for f in subs}}
    emit(summary, as_json, lambda: click.echo(
        f"whole logs: {len(ev.cases)}; holdout category macro-F1 {subs[1].category_macro_f1:.3f}; "
        f"section written to {report}"))


def _figures(f: Any) -> dict[str, Any]:
    return {"logs": f.n, "normal_called_failed": f.normal_called_failed[0],
            "healthy_accuracy": round(f.healthy_accuracy[0] / max(1, f.healthy_accuracy[1]), 4),
            "category_macro_f1": round(f.category_macro_f1, 4),
            "origin_accuracy": round(f.origin_accuracy[0] / max(1, f.origin_accuracy[1]), 4),
            "indicator_line_f1": round(f.line_f1, 4),
            "first_rank_node": list(f.first_rank_node)}
