"""Round 18 (library sweep A, Hugging Face stack): messages that end a training or fine-tuning job,
read from the libraries' sources (transformers 5.24.0, accelerate 1.15.0, datasets 5.2.0, trl 1.16.0,
huggingface_hub 2.4.0), each in a small excerpt written for the test in the library's format (the
raise site is named in each case), not copied from a log. The whole sweep is in
docs/library-sweeps/r18-hf.csv."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


_SP = "/usr/local/lib/python3.11/site-packages"
_START = ["2026-11-20 10:01:02 - INFO - __main__ - Training/evaluation parameters TrainingArguments(output_dir=out/run1)",
          "2026-11-20 10:01:03 - INFO - __main__ - Loading model and tokenizer"]


def _excerpt(call: str, frames: list[tuple[str, str, str]], error: list[str]) -> str:
    lines = [*_START, "Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 212, in <module>',
             "    main()", '  File "/home/u/proj/train.py", line 150, in main', f"    {call}"]
    for path, func, code in frames:
        lines += [f'  File "{_SP}/{path}", line 100, in {func}', f"    {code}"]
    return "\n".join([*lines, *error]) + "\n"


_LDS = ("datasets/load.py", "load_dataset", "builder_instance = load_dataset_builder(")
_LDB = ("datasets/load.py", "load_dataset_builder", "dataset_module = dataset_module_factory(")
_AUTO = ("transformers/models/auto/auto_factory.py", "from_pretrained", "return model_class.from_pretrained(")

CASES = [
    pytest.param(  # datasets load.py dataset_module_factory: RepositoryNotFoundError -> DatasetNotFoundError
        _excerpt("ds = load_dataset(args.dataset_name, split='train')", [_LDS, _LDB],
                 ["datasets.exceptions.DatasetNotFoundError: Dataset 'tatsu-lab/alpaca-cleaned' doesn't exist on the "
                  "Hub or cannot be accessed."]),
        "incorrect_input", "user", id="datasets-hub-name-missing"),
    pytest.param(  # datasets load.py dataset_module_factory: GatedRepoError -> DatasetNotFoundError
        _excerpt("ds = load_dataset(args.dataset_name, split='train')", [_LDS, _LDB],
                 ["datasets.exceptions.DatasetNotFoundError: Dataset 'bigcode/the-stack-v2' is a gated dataset on the "
                  "Hub. You must be authenticated to access it."]),
        "permission_error", "user", id="datasets-gated"),
    pytest.param(  # datasets builder.py _create_builder_config
        _excerpt("ds = load_dataset('glue', args.task_name)",
                 [_LDS, _LDB, ("datasets/builder.py", "_create_builder_config", "raise ValueError(")],
                 ["ValueError: BuilderConfig 'sst-2' not found. Available: ['cola', 'sst2', 'mrpc', 'qqp', 'stsb', "
                  "'mnli', 'qnli', 'rte', 'wnli', 'ax']"]),
        "incorrect_input", "user", id="datasets-builder-config-not-found"),
    pytest.param(  # datasets builder.py _create_builder_config
        _excerpt("ds = load_dataset('wikitext')",
                 [_LDS, _LDB, ("datasets/builder.py", "_create_builder_config", "raise ValueError(")],
                 ["ValueError: Config name is missing.",
                  "Please pick one among the available configs: ['wikitext-103-raw-v1', 'wikitext-2-raw-v1']",
                  "Example of usage:", "\t`load_dataset('wikitext', 'wikitext-103-raw-v1')`"]),
        "incorrect_input", "user", id="datasets-config-name-missing"),
    pytest.param(  # datasets builder.py _build_single_dataset
        _excerpt("ds = load_dataset(args.dataset_name, split=args.split)",
                 [_LDS, ("datasets/builder.py", "_build_single_dataset", "raise ValueError(")],
                 ["ValueError: Bad split: test. Available splits: ['train', 'validation']"]),
        "incorrect_input", "user", id="datasets-bad-split"),
    pytest.param(  # datasets table.py array_cast
        _excerpt("ds = ds.cast(features)", [("datasets/arrow_dataset.py", "cast", "dataset = dataset.map("),
                                            ("datasets/table.py", "array_cast", "raise TypeError(")],
                 ["TypeError: Couldn't cast array of type string to int64"]),
        "incorrect_input", "data", id="datasets-cast-array"),
    pytest.param(  # transformers modeling_utils.py _flash_attn_import_error (via _check_and_adjust_attn_implementation)
        _excerpt("model = AutoModelForCausalLM.from_pretrained(path, attn_implementation='flash_attention_2')",
                 [_AUTO, ("transformers/modeling_utils.py", "_check_and_adjust_attn_implementation",
                          "self._flash_attn_can_dispatch(flash_attn_version=fa_version, is_init_check=is_init_check)"),
                  ("transformers/modeling_utils.py", "_flash_attn_can_dispatch",
                   "self._flash_attn_import_error(**FLASH_ATTENTION_COMPATIBILITY_MATRIX[flash_attn_version])"),
                  ("transformers/modeling_utils.py", "_flash_attn_import_error", "raise ImportError(")],
                 ["ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
                  "FlashAttention2 requires compute capability >= 8, but found (7, 5) with compute capability 7.x"]),
        "cuda_env_error", "user", id="flash-attn-compute-capability"),
    pytest.param(  # transformers trainer.py Trainer.train (resume_from_checkpoint=True)
        _excerpt("trainer.train(resume_from_checkpoint=True)", [("transformers/trainer.py", "train", "raise ValueError(")],
                 ["ValueError: No valid checkpoint found in output directory (out/run1)"]),
        "checkpoint_error", "user", id="trainer-no-checkpoint-to-resume"),
    pytest.param(  # accelerate accelerator.py Accelerator.load_state
        _excerpt("accelerator.load_state(args.resume_from_checkpoint)",
                 [("accelerate/accelerator.py", "load_state", "raise ValueError(")],
                 ["ValueError: Tried to find /scratch/u/run3/checkpoint_12 but folder does not exist"]),
        "checkpoint_error", "user", id="accelerate-load-state-missing"),
    pytest.param(  # accelerate accelerator.py Accelerator.__init__ (supported_device is a tuple in 1.15.0)
        _excerpt("accelerator = Accelerator(mixed_precision='fp16')",
                 [("accelerate/accelerator.py", "__init__", "raise ValueError(")],
                 ["ValueError: fp16 mixed precision requires a device in ('xpu', 'cuda', 'npu', 'xla', 'mlu', 'musa', "
                  "'hpu', 'sdaa', 'mps') (not 'cpu')."]),
        "cuda_env_error", "user", id="accelerate-fp16-needs-device"),
    pytest.param(  # huggingface_hub utils/_http.py: OfflineModeIsEnabled
        _excerpt("path = snapshot_download(repo_id=args.repo)",
                 [("huggingface_hub/_snapshot_download.py", "snapshot_download", "repo_info = api.repo_info(repo_id)"),
                  ("huggingface_hub/utils/_http.py", "handle_request", "raise OfflineModeIsEnabled(")],
                 ["huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/Qwen/"
                  "Qwen2.5-7B/revision/main: offline mode is enabled. To disable it, please unset the `HF_HUB_OFFLINE` "
                  "environment variable."]),
        "checkpoint_error", "user", id="hub-offline-mode"),
    pytest.param(  # transformers utils/hub.py cached_files: RevisionNotFoundError -> OSError
        _excerpt("model = AutoModelForCausalLM.from_pretrained(path, revision=args.revision)",
                 [_AUTO, ("transformers/utils/hub.py", "cached_files", "raise OSError(")],
                 ["OSError: v2.0 is not a valid git identifier (branch name, tag name or commit id) that exists for this "
                  "model name. Check the model page at 'https://huggingface.co/Qwen/Qwen2.5-7B' for available revisions."]),
        "checkpoint_error", "user", id="model-revision-not-found"),
    pytest.param(  # trl trainer/sft_trainer.py SFTTrainer.__init__
        _excerpt("trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, peft_config=lora)",
                 [("trl/trainer/sft_trainer.py", "__init__", "raise ValueError(")],
                 ["ValueError: You passed `peft_config` but the `peft` library is not installed. Install it with "
                  "`pip install trl[peft]`."]),
        "import_error", "user", id="trl-peft-not-installed"),
    pytest.param(  # trl generation/vllm_client.py VLLMClient.__init__
        _excerpt("trainer = GRPOTrainer(model=model, args=cfg, reward_funcs=rewards, train_dataset=ds)",
                 [("trl/trainer/grpo_trainer.py", "__init__", "self.vllm_client = VLLMClient(base_url=base_url)"),
                  ("trl/generation/vllm_client.py", "__init__", "raise ImportError(")],
                 ["ImportError: vLLM is not installed. Please install it with `pip install trl[vllm]`."]),
        "import_error", "user", id="trl-vllm-not-installed"),
]


@pytest.mark.parametrize(("text", "category", "origin"), CASES)
def test_library_message_category_and_origin(text: str, category: str, origin: str, clf: Classifier) -> None:
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.origin) == (category, origin), (d.rule_id, d.reason)
