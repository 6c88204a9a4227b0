"""The completion messages of trainers, launchers, schedulers and experiment trackers: the lines a
job prints when it finishes, and how surely each says the run ended normally.

Only the words are read here; whether what comes after a message undoes it is asked elsewhere
(``completion``, ``shutdown``).
"""

from __future__ import annotations

import re

from gpulens.diagnosis.guarded import Prefiltered, contains_any

__all__ = ["AT_EXIT", "COMPLETION_COVER", "COMPLETION_KEYS", "STRONG_END", "completion_strength", "is_completion"]

#: Literal keys (``str.find`` prefilter) of the completion messages below: every message the
#: patterns accept holds one of them (tests/diagnosis/test_logread.py checks the examples).
COMPLETION_KEYS: tuple[str, ...] = (
    "reached", "raining done", "raining complete", "raining COMPLETE", "raining finished", "raining is",
    "inished training", "inished Training", "inish training", "inish Training", "inished after",
    "raining took", "raining time", "otal training time", "train_runtime", "exits successfully",
    "Exit code: 0", "xit status 0", "Successfully completed", "Run summary", "Synced ", "View run",
    "Results saved to", "epochs completed in", "arly stopping", "arly Stopping", "arlyStopping", "Signaling Trainer to stop",
    "Stopping. Best", "aving final", "aving the final", "aved final", "final model", "done", "Done", "DONE",
    "All done", "completed successfully", "Finished", "finished", "FINISHED", "Best acc", "Enjoy",
    "Job Finished", "End of training", "Run finished", "Training stops.",
    "done training", "Done training", "Loss for final step", "train metrics", "Best metric", "exiting program at iteration",
    "xit code", "xit status", "xited with code", "xited with status", "xit Code", "xit Status", "Exit_status",
    "ExitCode", "COMPLETED", "succeeded", "inal validation metrics", "inal Validation Metrics",
)
#: ``any(k in line for k in COMPLETION_KEYS)``, one ``or`` chain (speed: asked of many lines)
_has_completion_key = contains_any(COMPLETION_KEYS)

#: Fewer, shorter literals one of which every key above holds: scanning a block for these finds
#: every line holding a key (and a few more, which ``completion_strength`` then turns down)
#: in less than half the passes (tests/diagnosis/test_logread.py checks the cover).
COMPLETION_COVER: tuple[str, ...] = (
    "raining", "inish", "FINISHED", "done", "Done", "DONE", "xit", "complet", "reached", "train_runtime",
    "Run summary", "Synced ", "View run", "Results saved to", "arly", "Signaling Trainer to stop", "Stopping. Best",
    "final", "Best acc", "Enjoy", "train metrics", "Best metric", "COMPLETED", "succeeded", "inal validation metrics",
    "inal Validation Metrics",
)

#: Lines trackers print at process exit whatever the outcome (wandb's summary and sync, MLflow's
#: run link): a completion only when no failure line comes before them.
AT_EXIT: tuple[str, ...] = ("wandb: Synced", "wandb: Run summary", "wandb: 🚀 View run", "wandb: View run", "🏃 View run")

_STRONG = re.compile(
    r"`?Trainer\.fit`? stopped: `?max_(?:epochs|steps)=\d+`? reached"
    r"|[Tt]raining (?:is )?(?:done|complete[d]?|COMPLETE|finished)\b|[Ff]inish(?:ed)? [Tt]raining"
    r"|[Ff]inished after \d+ (?:iterations|steps|epochs)|\bepochs completed in\b"
    r"|[Tt]otal training time|[Tt]raining took\b|[Tt]raining time\b|'train_runtime'|\btrain_runtime\b"
    r"|Process \d+ exits successfully|Successfully completed\."
    # wandb's footer (wandb_run.py ``_footer_sync_info``: "🚀 View run NAME at: URL"), not its
    # header at ``wandb.init`` ("🚀 View run at URL", ``_header_run_info``)
    r"|wandb: (?:Run summary|Synced \d+ W&B file)|wandb: 🚀 View run (?!at )|\bResults saved to\b"
    # an early stop, not the patience count printed on each epoch without improvement (the pytorchtools
    # EarlyStopping class: "EarlyStopping counter: 3 out of 10"; copies spell it "Early Stopping counter")
    r"|[Ee]arly [Ss]topping(?! [Cc]ounter)(?: triggered)?|EarlyStopping(?! counter)|Signaling Trainer to stop|Stopping\. Best"
    # victoresque pytorch-template base/base_trainer.py ``train``, its early stop (and R2Gen's, and
    # the trainers built on it): "Validation performance didn't improve for 10 epochs. Training stops."
    r"|\bdidn't improve for \d+ epochs\. Training stops\."
    r"|[Ss]aving (?:the )?final (?:model|checkpoint)|final model|[Ss]aved final"
    r"|\bcompleted successfully\b|\bAll done\b|\bJob Finished\b|\bEnd of training\b|\bRun finished\b"
    # fairseq, TF Estimator, HF Trainer's metrics block, timm, Megatron's planned exit
    r"|\b[Dd]one training\b|\bLoss for final step\b|\*{3,} train metrics \*{3,}|\*\*\* Best metric:"
    r"|\bexiting program at iteration\b"
    # a zero exit reported by a launcher, an IDE, a scheduler's epilogue (Slurm, PBS), Ray's job client
    r"|[Ee]xit(?:ed)?(?: with)? (?:[Cc]ode|[Ss]tatus)\s*[:=]?\s*0(?![\d.:])|\bExit_status=0\b|\bExitCode[=: ]+0:0\b"
    r"|\bState:\s*COMPLETED\b|\bJobState=COMPLETED\b|\bJob '[^']+' succeeded\b"
    # torchrun's elastic agent when every worker exited 0 (torch/distributed/elastic/agent/server/
    # api.py ``_invoke_run``: "[default] worker group successfully finished. Waiting 300 seconds for
    # other agents to finish."; torch 1.9's "Local worker group finished (SUCCEEDED)"), and SkyPilot's
    # footer of a job that exited 0 (sky/jobs, ux_utils.finishing_message: "Job finished (status: SUCCEEDED).")
    r"|\bworker group successfully finished\b|\bLocal worker group finished \((?:WorkerState\.)?SUCCEEDED\)"
    r"|\bJob finished \(status: (?:ManagedJobStatus\.)?SUCCEEDED\)"
    r"|🏃 View run"
    # verl's RayPPOTrainer.fit at its last step ("Final validation metrics: {...}", pprint may
    # wrap it in parentheses), and the same header other training scripts print after their last epoch
    r"|\bFinal [Vv]alidation [Mm]etrics:"
    # pytorch/examples fast_neural_style (neural_style/neural_style.py ``train``, copied by the style-transfer
    # repositories built on it): after its last epoch it saves the model and prints "Done, trained model saved at PATH"
    r"|\bDone, trained model saved at\b"
)
#: _STRONG searched alternative by alternative where their literals are (the same answers)
_STRONG_FAST = Prefiltered(_STRONG)
_WEAK = re.compile(
    r"^\W*(?:done|Done|DONE|finished|Finished|FINISHED|Enjoy)[.!]?\W*$|\bBest acc\b|^\s*Finished\b"
)


#: A configuration line that names the early-stopping setting with its value, as scripts print their config
#: before training ("Early stopping patience: 20", "early stopping min_delta = 0.001", "Early stopping: patience=3",
#: "early_stopping: True"; Keras' ``EarlyStopping(patience, min_delta, monitor, mode)``, HF's
#: ``EarlyStoppingCallback(early_stopping_patience, early_stopping_threshold)``): no stop happened (phase rule P10: the
#: end of training is the loop's end or an early-stopping message, not its setting).
_STOP_KEYS = r"(?:patience|min_delta|delta|threshold|monitor|mode|rounds|metric)"
_STOP_SETTING = re.compile(rf"(?i)\bearly[ _-]?stopping(?:[ _]{_STOP_KEYS}\s*[:=]|\s*[:=]\s*(?:{_STOP_KEYS}\s*[:=]"
                           r"|(?:true|false|enabled|disabled)\b))")


def completion_strength(line: str) -> float:
    """How surely a line says the run ended normally: 0 (not a completion line, or an early-stopping
    setting printed with the config: :data:`_STOP_SETTING`), 0.8 (a weak word such as a bare ``done.``),
    0.95 (a trainer/launcher/scheduler completion message)."""
    if not _has_completion_key(line) or _STOP_SETTING.search(line):
        return 0.0
    if _STRONG_FAST.matches(line):
        return 0.95
    if _WEAK.search(line):
        return 0.8
    return 0.0


def is_completion(line: str) -> bool:
    """Whether a line is a completion message (strong or weak)."""
    return completion_strength(line) > 0


#: Completion strength a message needs to outrank a shutdown's errors after it (a trainer's or
#: a launcher's own words, not a bare "done").
STRONG_END = 0.95
