"""The whole-log reader's model: how its confidence threshold is chosen and what it learns from."""

from __future__ import annotations

from gpulens.diagnosis.logread.evaluate import Case, choose_thresholds
from gpulens.diagnosis.logread.whole import WholeDiagnosis
from gpulens.diagnosis.types import Diagnosis


def _case(project: str, split: str, true: str, said: str, confidence: float) -> Case:
    row = {"project": project, "split": split, "category": true, "origin": "user"}
    return Case(row, WholeDiagnosis(Diagnosis(said, "user", confidence, method="svm")))


def test_holdout_rows_never_choose_the_threshold() -> None:
    # p9 (fold 1) is the project scored; p5 (fold 3) a dev project of another fold, whose model
    # guesses at p=0.65 and p=0.55 are right: a threshold of 0.55 keeps both and is the most cautious
    dev = [_case("p9", "dev", "gpu_oom", "gpu_oom", 0.9), _case("p5", "dev", "gpu_oom", "gpu_oom", 0.65),
           _case("p5", "dev", "gpu_oom", "gpu_oom", 0.55)]
    # p7 (fold 2): wrong guesses at p=0.55 that a threshold of 0.6 would turn into `unknown`
    wrong = [_case("p7", "holdout", "unknown", "cpu_oom", 0.55) for _ in range(2)]
    assert choose_thresholds(dev)["p9"] == 0.55
    assert choose_thresholds(dev + wrong)["p9"] == 0.55  # the holdout rows are not looked at
    as_dev = [_case("p7", "dev", "unknown", "cpu_oom", 0.55) for _ in range(2)]
    assert choose_thresholds(dev + as_dev)["p9"] == 0.6  # the same rows as dev rows would choose 0.6
    assert choose_thresholds(dev + wrong)["p7"] == 0.55  # a holdout row gets its fold's threshold


def test_a_wrong_guess_never_beats_an_unknown_in_the_threshold_choice() -> None:
    # fold 3's dev rows: right gpu_oom answers, a run labelled `unknown` that the rules left
    # unknown, and a model guess at p=0.25 that is wrong. Answering the guess or not leaves the
    # right answers as they are, so the most cautious threshold wins (macro-F1 chose 0.0: the
    # `unknown` answer counted as a false `unknown`, the wrong guess only as one missed gpu_oom).
    rows = [_case("p5", "dev", "gpu_oom", "gpu_oom", 0.9) for _ in range(3)]
    rows.append(Case({"project": "p6", "split": "dev", "category": "unknown", "origin": "unknown"},
                     WholeDiagnosis(Diagnosis("unknown", "unknown", 0.0, method="none"))))
    rows.append(_case("p11", "dev", "gpu_oom", "cpu_oom", 0.25))
    assert choose_thresholds([_case("p9", "dev", "gpu_oom", "gpu_oom", 0.9), *rows])["p9"] == 0.6


def test_a_heavier_example_pulls_the_model_its_way() -> None:
    from gpulens.diagnosis import logs
    from gpulens.diagnosis.svm import SvmModel

    texts = {
        "gpu_oom": [f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {k} GiB" for k in (2, 4, 8)],
        "storage_error": [f"OSError: [Errno 28] No space left on device: '/ckpt/step_{k}'" for k in (1, 2, 3)],
        "comm_error": [f"torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:{k}"
                       for k in (11, 12, 13)],
    }
    # the same message once as a storage failure, once as a memory one (two labellings of one text)
    both = "RuntimeError: failed writing shard 7 to /scratch: quota exceeded while allocating buffer"
    docs = [t for ts in texts.values() for t in ts] + [both, both]
    labels = [c for c, ts in texts.items() for _ in ts] + ["storage_error", "gpu_oom"]
    views = [logs.analyze(t) for t in docs]

    def top(weights: list[float]) -> str:
        p = SvmModel().fit(views, labels, weights=weights).predict_proba([logs.analyze(both)])[0]
        return max(p, key=lambda c: p[c])

    plain = [1.0] * 9
    assert top(plain + [5.0, 1.0]) == "storage_error"
    assert top(plain + [1.0, 5.0]) == "gpu_oom"
