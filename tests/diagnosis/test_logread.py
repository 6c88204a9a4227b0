"""Whole-log diagnosis (issue 23) on generated fixture logs (tests/diagnosis/fixtures/
whole_generated/, written by hand; no figure comes from them): healthy or failed, indicator
line numbers as ``grep -n`` gives them, first rank and node, phase and step, appended attempts,
the named cases of the issue, the CLI's story and --json fields, and the evaluation's arithmetic."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpulens.cli.main import cli
from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_path, diagnose_text
from gpulens.diagnosis.logread.attempts import attempt_starts
from gpulens.diagnosis.logread.evaluate import (
    SOURCES,
    Case,
    evaluate_whole,
    render_section,
    source_of,
    sources,
    write_section,
)
from gpulens.diagnosis.logread.ranks import origin_of, root_cause_table
from gpulens.diagnosis.logread.source import read_whole
from gpulens.diagnosis.logread.whole import WholeDiagnosis
from gpulens.diagnosis.types import Diagnosis

FIX = Path(__file__).resolve().parent / "fixtures" / "whole_generated"


def _labels() -> list[dict[str, str]]:
    with (FIX / "labels.csv").open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


@pytest.mark.parametrize("row", _labels(), ids=lambda r: r["file"])
def test_fixture_logs_get_their_labels(clf: Classifier, row: dict[str, str]) -> None:
    w = diagnose_path(FIX / row["file"], clf)
    d = w.diagnosis
    assert d.category == row["category"], (d, w.story())
    if row["ended_normally"] == "yes":
        assert d.origin == "none" and d.healthy and w.indicator_lines == [] and w.phase == "none"
        return
    assert w.indicator_lines == [int(x) for x in row["indicator_lines"].split()], w.indicators
    assert w.phase == row["phase"]
    assert (str(w.first_rank) if w.first_rank is not None else "") == row["first_rank"]
    assert (w.first_node or "") == row["first_node"]
    if row["step"]:
        assert w.step == row["step"]


def test_indicator_numbers_are_grep_n_numbers(clf: Classifier) -> None:
    for row in _labels():
        lines = (FIX / row["file"]).read_text(encoding="utf-8").split("\n")
        w = diagnose_path(FIX / row["file"], clf)
        for number, text in zip(w.indicator_lines, w.indicators, strict=True):
            assert text in lines[number - 1]  # line 1 is the first line, as grep -n counts


def test_other_ranks_timeouts_are_secondary_and_the_root_cause_table_names_the_node(clf: Classifier) -> None:
    w = diagnose_path(FIX / "torchrun_rank2_oom.log", clf)
    assert (w.first_rank, w.first_node) == (2, "gpu07")
    assert w.secondary_lines >= 3  # ranks 0, 1, 3 timed out in NCCL afterwards
    story = w.story()
    assert story.startswith("rank 2 on gpu07 (named on line 31) failed first, at step 1,200 in training")
    assert story.endswith("then ranks 0-1 and 3 timed out waiting in a collective (7 later error lines, secondary)")
    # the OOM only (R8: rank 2 printed it, so torchrun's verdict lines are not indicator lines)
    assert "(line 13)" in story and "secondary" in story


def test_the_last_attempt_is_diagnosed_and_what_changed_is_named(clf: Classifier) -> None:
    w = diagnose_path(FIX / "two_attempts.out", clf)
    assert w.attempts == 2
    assert "CUDA Version: 12.4" in w.new_in_attempt
    assert not any("12.1" in x for x in w.new_in_attempt)


def test_a_caught_exception_followed_by_training_is_not_a_failure(clf: Classifier) -> None:
    w = diagnose_path(FIX / "caught_then_done.log", clf)
    assert w.diagnosis.category == "none"
    # the same log cut right after the exception is a failure, with the KeyError as its line
    cut = (FIX / "caught_then_done.log").read_text(encoding="utf-8").split("\n")[:16]
    w2 = diagnose_text("\n".join(cut), clf)
    assert w2.diagnosis.category == "semantic_error"
    assert 15 in w2.indicator_lines and cut[14] == "KeyError: 'k'"


def test_a_wandb_sync_after_a_crash_is_no_completion(clf: Classifier) -> None:
    text = "\n".join([
        "step 1 loss 2.0", "step 2 loss 1.9", "step 3 loss 1.8",
        "Traceback (most recent call last):", '  File "/work/train.py", line 9, in <module>', "    save(model)",
        "OSError: [Errno 122] Disk quota exceeded",
        "wandb: Run summary:", "wandb:   train/loss 1.8", "wandb:   train/global_step 3",
        "wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)"])
    w = diagnose_text(text, clf)
    assert w.diagnosis.category == "storage_error" and w.indicator_lines == [7]


MINGPT = """number of parameters: 0.09M
Traceback (most recent call last):
  File "/home/u/minGPT/projects/adder/adder.py", line 148, in <module>
    model = GPT(config.model)
  File "/home/u/minGPT/mingpt/model.py", line 140, in __init__
    assert type_given ^ params_given # exactly one of these (XOR)
AssertionError
"""
FLASH = """step 0
Traceback (most recent call last):
  File "train.py", line 10, in <module>
    out = flash_attn_func(q, k, v)
RuntimeError: FlashAttention only supports Ampere GPUs or newer.
"""
RAY = """(main_task pid=1234) step:20 - actor/loss:0.12 - critic/score/mean:0.4
(main_task pid=1234) step:21 - actor/loss:0.12 - critic/score/mean:0.4
(main_task pid=1234) step:22 - actor/loss:0.11 - critic/score/mean:0.41
(raylet) A worker died or was killed while executing a task by an unexpected system error. Worker unexpectedly exits with a connection error code 2. End of file.
Traceback (most recent call last):
  File "verl/trainer/main_ppo.py", line 20, in main
    ray.get(runner.run.remote(config))
ray.exceptions.ActorUnavailableError: The actor 4a1b is unavailable: Socket closed. The actor may be restarting.
"""


def test_the_issues_named_cases(clf: Classifier) -> None:
    mingpt = diagnose_text(MINGPT, clf).diagnosis
    assert mingpt.category == "semantic_error" and mingpt.method == "rule"  # not incorrect_input
    flash = diagnose_text(FLASH, clf).diagnosis
    assert flash.category == "cuda_env_error" and flash.origin == "infrastructure"
    ray = diagnose_text(RAY, clf)
    assert ray.diagnosis.category == "unknown" and "secondary" in (ray.diagnosis.reason or "")
    assert ray.step == "22" and ray.phase == "training"


def test_line_numbers_stay_exact_when_the_middle_of_a_big_log_is_skipped(tmp_path: Path) -> None:
    lines = [f"step {i} loss 0.{i % 10}" for i in range(1, 20001)]
    lines[19990] = "RuntimeError: CUDA error: an illegal memory access was encountered"
    log = tmp_path / "big.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    src = read_whole(log, keep_bytes=4096)
    assert src.first > 1 and src.n_lines == 20000
    at = src.lines.index(lines[19990])
    assert src.number(at) == 19991
    whole = read_whole(log)
    assert whole.first == 1 and whole.n_lines == 20000


@pytest.mark.parametrize("line, rank, node", [
    ("[rank3]: torch.OutOfMemoryError: CUDA out of memory.", 3, None),
    ("[default5]:Traceback (most recent call last):", 5, None),
    ("12: RuntimeError: NCCL error", 12, None),
    ("[1,7]<stderr>:RuntimeError: boom", 7, None),
    ("gpu-node-07: RuntimeError: boom", None, "gpu-node-07"),
    ("(RayTrainWorker pid=4242, ip=10.0.0.7) RuntimeError: boom", None, "10.0.0.7"),
    ("Unhandled error: ray::WorkerDict.update() (pid=3961424, ip=10.3.28.3, actor_id=7c5)", None, "10.3.28.3"),
    ("srun: error: gpu12: task 3: Exited with exit code 1", 3, "gpu12"),
    ("slurmstepd: error: *** JOB 9 ON node-17 CANCELLED AT 2024-05-01T12:00:00 ***", None, "node-17"),
    ("slurmstepd-gpu-51: error: *** STEP 148840.0 ON gpu-51 CANCELLED AT 2025-01-01T00:00:00 ***", None, "gpu-51"),
    ("[E ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog caught collective operation timeout", 4, None),
    ("ERROR: something failed", None, None),
])
def test_rank_and_host_prefixes(line: str, rank: int | None, node: str | None) -> None:
    o = origin_of(line)
    assert (o.rank, o.node) == (rank, node)


def test_root_cause_table() -> None:
    text = (FIX / "torchrun_rank2_oom.log").read_text(encoding="utf-8").split("\n")
    o = root_cause_table(text)
    assert o is not None and (o.rank, o.node) == (2, "gpu07")
    assert root_cause_table(["no table here"]) is None


def test_cli_json_and_story(tmp_path: Path) -> None:
    files = [str(FIX / "torchrun_rank2_oom.log"), str(FIX / "lightning_done.log")]
    res = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "d"), "diagnose", *files, "--json"])
    assert res.exit_code == 0, res.output
    oom, done = json.loads(res.output)
    for key in ("indicator_lines", "first_rank", "first_node", "phase", "step", "secondary_lines",
                "category", "origin", "confidence", "evidence", "story"):
        assert key in oom and key in done
    assert oom["indicator_lines"] == [13] and oom["first_rank"] == 2 and oom["first_node"] == "gpu07"
    assert done["category"] == done["origin"] == "none" and done["indicator_lines"] == []
    human = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "d"), "diagnose", files[0]])
    assert human.exit_code == 0
    assert "rank 2 on gpu07 (named on line 31) failed first" in human.output and "      13 | " in human.output


@pytest.mark.slow
def test_whole_logs_needs_evaluate_and_an_existing_corpus(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    for args, says in (([str(FIX / "lightning_done.log"), "--whole-logs", str(tmp_path)], "--whole-logs goes with --evaluate"),
                       (["--evaluate", "--whole-logs", str(tmp_path / "nope")], "does not exist")):
        proc = subprocess.run([sys.executable, "-m", "gpulens.cli.main", "--data-dir", str(tmp_path / "d"), "diagnose",
                               *args], capture_output=True, text=True, cwd=root)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr


def _fixture_index(tmp_path: Path) -> Path:
    """The fixtures as a two-project whole-log index (the corpus's columns)."""
    idx = tmp_path / "index"
    idx.mkdir()
    cols = ["file", "project", "split", "ended_normally", "category", "origin", "first_rank", "first_node",
            "indicator_lines", "phase", "ambiguous"]
    origins = {"none": "none", "gpu_oom": "user", "preempted": "infrastructure", "cuda_env_error": "user",
               "crash": "framework"}
    with (idx / "index_t.csv").open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, cols)
        w.writeheader()
        for k, r in enumerate(_labels()):
            w.writerow({"file": r["file"], "project": f"p/{k % 2}", "split": "dev" if k % 2 else "holdout",
                        "ended_normally": r["ended_normally"], "category": r["category"],
                        "origin": origins[r["category"]], "first_rank": r["first_rank"], "first_node": r["first_node"],
                        "indicator_lines": r["indicator_lines"], "phase": r["phase"], "ambiguous": "no"})
    return idx


def test_evaluation_scores_the_fixtures_and_keeps_the_rest_of_the_report(tmp_path: Path, clf: Classifier) -> None:
    ev = evaluate_whole(FIX, clf, index_dir=_fixture_index(tmp_path))
    everything = ev.subsets()[0]
    assert everything.n == len(_labels())
    assert everything.normal_called_failed == (0, 2)
    assert everything.healthy_accuracy == (6, 6)
    assert everything.line_recall == (4, 4) and everything.line_precision == (4, 4)
    assert everything.first_rank_node == (3, 3)  # torchrun (rank), Slurm (node), srun (rank)
    held = next(c for c in ev.cases if c.row["split"] == "holdout")
    mine = next(c for c in ev.cases if c.row["split"] == "dev")
    held.row["category"] = mine.row["category"] = "cpu_oom"  # one wrong answer in each split
    report = tmp_path / "eval.md"
    report.write_text("# Excerpts\n\nkept\n", encoding="utf-8")
    write_section(report, render_section(ev, date="2026-11-26", command="test"))
    write_section(report, render_section(ev, date="2026-11-27", command="test"))
    text = report.read_text(encoding="utf-8")
    assert text.startswith("# Excerpts\n\nkept\n") and text.count("## Whole job logs") == 1
    dev = [c for c in ev.cases if c.row["split"] == "dev"]
    got = {name: (n, cat) for name, n, cat, _ in sources(dev, ev.thresholds)}
    assert list(got) == list(SOURCES) and sum(n for n, _ in got.values()) == len(dev)
    assert got["normal end"][0] == sum(1 for c in dev if c.row["ended_normally"] == "yes")
    assert "| split | decided by | logs | category right | origin right |" in text
    assert f"`{mine.row['file']}` | cpu_oom |" in text  # a dev miss is named
    assert held.row["file"] not in text  # a holdout miss is counted, never named
    assert f"| cpu_oom | {held.category(ev.thresholds[held.project])} | 1 |" in text
    assert "2026-11-27" in text and "2026-11-26" not in text


def test_an_answer_is_the_models_only_at_or_above_the_threshold() -> None:
    row = {"project": "p", "category": "gpu_oom", "origin": "user"}

    def case(category: str, method: str, confidence: float) -> Case:
        origin = {"none": "none", "unknown": "unknown"}.get(category, "user")
        return Case(row, WholeDiagnosis(Diagnosis(category, origin, confidence, method=method)))

    assert source_of(case("gpu_oom", "svm", 0.7), 0.6) == "model"
    assert source_of(case("gpu_oom", "svm", 0.5), 0.6) == "unknown"  # a guess below the threshold names no cause
    assert source_of(case("gpu_oom", "rule", 0.5), 0.6) == "rules"  # rules are never thresholded
    assert source_of(case("unknown", "none", 0.0), 0.6) == "unknown"
    assert source_of(case("none", "rule", 0.9), 0.6) == "normal end"


@pytest.mark.slow
def test_job_mode_charges_the_node_that_failed_first_and_keeps_a_passed_log_unknown(store) -> None:  # type: ignore[no-untyped-def]
    """--job / --all: the whole-log reader names the node that failed first; only that node is
    charged as bad-node evidence. A failed attempt whose log shows a normal end is ``unknown``."""
    from gpulens.diagnosis.badnodes import _infra_failures
    from gpulens.diagnosis.jobs import diagnose_job
    from tests.diagnosis.test_jobs import add_job

    add_job(store, "j-seg", [{"status": "failed", "nodes": ["gpu11", "gpu12"], "exit_code": 139}])
    add_job(store, "j-done", [{"status": "failed", "nodes": ["gpu11"], "exit_code": 1}])
    add_job(store, "j-time", [{"status": "failed", "nodes": ["node-16", "node-17.cluster"], "exit_code": 143}])
    for job, fixture in (("j-seg", "srun_label_segv.log"), ("j-done", "lightning_done.log"),
                         ("j-time", "slurm_time_limit.out")):
        (store.logs / f"{job}-0.log").write_text((FIX / fixture).read_text(encoding="utf-8"), encoding="utf-8")
        with store.write() as con:
            con.execute("UPDATE attempts SET log_path = ? WHERE job_id = ?", [f"logs/{job}-0.log", job])
    seg = diagnose_job(store, "j-seg").attempts[0]
    assert seg.category == "crash" and seg.diagnosis.first_node == "gpu12"
    assert seg.to_dict()["indicator_lines"] == [9]
    timed_out = diagnose_job(store, "j-time").attempts[0]
    assert timed_out.category == "preempted" and timed_out.origin.origin == "infrastructure"
    done = diagnose_job(store, "j-done").attempts[0]
    assert done.category == "unknown" and "normal end" in (done.diagnosis.reason or "")
    con = store.connect()
    try:
        row = con.execute("SELECT first_node, first_rank, indicator_lines, phase, story FROM failures "
                          "WHERE job_id = 'j-seg'").fetchone()
        assert row is not None and row[0] == "gpu12" and row[1] == 1 and list(row[2]) == [9]
        assert row[3] == "training" and row[4].startswith("rank 1 on gpu12 (named on line 12) failed first")
        charged = {f.job_id: f.nodes for f in _infra_failures(con)}
    finally:
        con.close()
    assert charged["j-time"] == ["node-17.cluster"]  # the node the cancel line names, not node-16


def test_slurm_appends_jobs_after_a_cancel_and_the_last_one_is_diagnosed(clf: Classifier) -> None:
    first = ["Thu Aug 21 01:53:03 2025", *[f"step {i} loss 1.0" for i in range(5)],
             "slurmstepd: error: *** JOB 266997 ON dgx-15 CANCELLED AT 2025-08-21T01:58:58 ***"]
    second = ["Thu Aug 21 02:36:47 2025", "loading model", "building dataset", "config: lr=1e-4",
              *[f"step {i} loss 1.0" for i in range(3)],
              "slurmstepd: error: *** JOB 267039 ON dgx-06 CANCELLED AT 2025-08-21T02:53:05 ***"]
    w = diagnose_text("\n".join(first + second), clf)
    assert w.attempts == 2 and w.diagnosis.category == "preempted"
    assert w.first_node == "dgx-06" and w.indicator_lines == [len(first) + len(second)]


@pytest.mark.parametrize("line", [
    "`Trainer.fit` stopped: `max_epochs=500` reached.", "Training done", "Training is done.", "Finished Training",
    "finish training", "Training COMPLETE", "Finished after 800000 iterations.", "125 epochs completed in 0.142 hours.",
    "Total training time: 4:49:16", "Training took 01:45:11", "{'train_runtime': 4849.0, 'epoch': 1.0}",
    "[launch.py:351:main] Process 2606 exits successfully.", "Exit code: 0", "Successfully completed.",
    "wandb: Run summary:", "wandb: Synced 6 W&B file(s), 0 media file(s)", "wandb: 🚀 View run x at: https://w",
    "Results saved to runs/detect/train5", "Early stopping triggered after 10 epochs", "EarlyStopping: stop",
    "Signaling Trainer to stop.", "Stopping. Best val: 8.07 at epoch 243", "saving the final model",
    "Saved final checkpoint", "done", "DONE!", "Finished", "Enjoy.", "Best acc: 0.546", "All done",
])
def test_completion_messages_pass_their_prefilter(line: str) -> None:
    from gpulens.diagnosis.logread.end.completion_messages import (
        COMPLETION_KEYS,
        completion_strength,
    )

    assert completion_strength(line) > 0
    assert any(k in line for k in COMPLETION_KEYS)


def test_a_log_that_starts_with_a_traceback_is_one_attempt(clf: Classifier) -> None:
    text = "\n".join(["Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "    f()",
                      "KeyError: 'x'", "", "During handling of the above exception, another exception occurred:", "",
                      "Traceback (most recent call last):", '  File "a.py", line 3, in <module>', "    g()",
                      "ValueError: shapes (640, 3) and (640,) do not broadcast"])
    w = diagnose_text(text, clf)
    assert w.attempts == 1 and w.diagnosis.category == "semantic_error"
    assert w.indicator_lines == [4, 11]  # the first exception and the one that ended the process


def test_each_nohup_launch_appended_to_a_log_is_an_attempt(clf: Classifier) -> None:
    # `nohup python train.py >> train.log 2>&1 &` twice: nohup's stderr line opens each launch; the
    # first launch was killed before its first step, the second after 40 iterations
    first = ["2024-03-02 09:14:07,120 - mmdet - INFO - Environment info:", "sys.platform: linux",
             "2024-03-02 09:14:09,002 - mmdet - INFO - workflow: [('train', 1)], max: 12 epochs",
             "loading annotations into memory...", "index created!", "Killed"]
    again = [ln.replace("09:14", "09:19") for ln in first[:5]]  # its own timestamps: no line repeats
    second = ["nohup: ignoring input", *again,
              *[f"2024-03-02 09:2{k}:01,311 - mmdet - INFO - Epoch [1][{k * 10}/7330]\tlr: 1.0e-03, "
                f"eta: 20:11:03, time: 0.51, loss: 1.{k}041" for k in range(1, 5)], "Killed"]
    w = diagnose_text("\n".join(first + second), clf)
    assert w.attempts == 2
    assert w.indicator_lines == [len(first) + len(second)]  # the last launch's kill, not the first's
    assert w.phase == "training"
    assert attempt_starts(["nohup: ignoring input", *first]) == [0]  # a file's own first line opens nothing new


def _guards() -> list[tuple[str, object]]:
    import importlib
    import pkgutil

    from gpulens.diagnosis import logread, logs
    from gpulens.diagnosis.guarded import Guarded

    # every module of the log reader, so a pattern moved into a new module cannot drop out of the check
    mods = [logs] + [importlib.import_module(m.name)
                     for m in pkgutil.walk_packages(logread.__path__, f"{logread.__name__}.")]
    return [(f"{m.__name__}.{k}", v) for m in mods for k, v in vars(m).items() if isinstance(v, Guarded)]


def test_each_literal_guard_answers_as_its_pattern_on_every_sample_log_line() -> None:
    """The guards' literals are a speed-up only: on every line of sample_logs/ (and on the
    lines with the literal's neighbour cut out, where a guard would wrongly reject them) the
    guarded search finds a match exactly when the bare pattern does."""
    import re

    guards = _guards()
    assert len(guards) >= 9  # the guarded patterns of logs, lines, phase and attempts
    root = Path(__file__).resolve().parents[2] / "sample_logs"
    texts = [p.read_text(errors="replace") for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".csv"]
    found = dict.fromkeys((name for name, _ in guards), 0)
    for text in texts:
        for line in text.split("\n"):
            for name, g in guards:
                want = re.compile(g.pattern).search(line) is not None  # type: ignore[attr-defined]
                got = g.search(line) is not None  # type: ignore[attr-defined]
                assert got == want, (name, line[:200])
                found[name] += want
    assert all(found.values()), found  # each pattern matched some real line: the check is not vacuous


def test_the_rank_patterns_literals_are_in_every_line_they_match() -> None:
    """origin_of skips a pattern when its literal is absent: on every sample log line each
    pattern that matches holds its literal (so the skip never changes an answer)."""
    import re

    from gpulens.diagnosis.logread import ranks

    needs = {rule.rx.pattern: rule.need for rule in ranks._ALL if rule.need is not None}
    assert set(needs.values()) == {"pid=", "rocess ", "global_rank", "process rank ", "RUNNING AT",
                                   "exits with return code", " NCCL ", "Node failure on ",
                                   "failed on node ", "[PG ", "Abort(", "] *** ", "] Signal", "Memory on the node",
                                   "Worker IP address"}
    root = Path(__file__).resolve().parents[2] / "sample_logs"
    matched = 0
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.suffix == ".csv":
            continue
        for line in p.read_text(errors="replace").split("\n"):
            for pattern, need in needs.items():
                if re.search(pattern, line):
                    matched += 1
                    assert need in line, (pattern, line[:200])
    assert matched > 0


def test_the_completion_cover_holds_a_part_of_every_completion_key() -> None:
    """Scanning for the cover finds every line that holds a completion key (a superset that
    ``completion_strength`` filters), so the shorter scan answers as the full one."""
    from gpulens.diagnosis.logread.end.completion_messages import COMPLETION_COVER, COMPLETION_KEYS

    assert len(COMPLETION_COVER) < len(COMPLETION_KEYS)
    assert [k for k in COMPLETION_KEYS if not any(c in k for c in COMPLETION_COVER)] == []
