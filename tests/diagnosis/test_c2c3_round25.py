"""Reader round 25, C2/C3: a file the job cannot read or write is decided by what the file is (README C2, C3),
read from the traceback's frames (CPython's ``File "<path>", line N, in <function>``) and the path the message
names. Excerpts written by hand in the formats of CPython, transformers, datasets, huggingface_hub and torch."""

from __future__ import annotations

from gpulens.diagnosis.logread.cause.filekind import (
    CONFIG,
    DATA,
    MODEL,
    kind_of_frames,
    kind_of_path,
)
from gpulens.diagnosis.logread.whole import diagnose_text

_SITE = "/opt/env/lib/python3.11/site-packages"


def _tb(frames: list[tuple[str, str, str]], error: str) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for n, (file, func, code) in enumerate(frames):
        lines += [f'  File "{file}", line {10 + n}, in {func}', f"    {code}"]
    return [*lines, error]


def _category(lines: list[str]) -> str:
    return diagnose_text("\n".join(["loading ...", *lines]) + "\n").diagnosis.category


def test_frames_innermost_strong_owner_decides() -> None:
    # numpy's reader inside timm's pretrained loader reads weights; torch.load inside a DataLoader's fetch a sample
    assert kind_of_frames([("train.py", "<module>"), (f"{_SITE}/timm/models/_builder.py", "load_pretrained"),
                           (f"{_SITE}/numpy/lib/npyio.py", "load")]) == MODEL
    assert kind_of_frames([("train.py", "<module>"), (f"{_SITE}/torch/utils/data/_utils/fetch.py", "fetch"),
                           ("/home/u/ds.py", "__getitem__"), (f"{_SITE}/torch/serialization.py", "load")]) == DATA
    assert kind_of_frames([("train.py", "main"), (f"{_SITE}/omegaconf/omegaconf.py", "load")]) == CONFIG
    # torch.save's side says nothing (a tensor of outputs is saved the same way as a model)
    assert kind_of_frames([("train.py", "main"), (f"{_SITE}/torch/serialization.py", "save")]) is None
    assert kind_of_frames([("train.py", "main")]) is None


def test_path_names_decide_only_when_one_kind_speaks() -> None:
    assert kind_of_path("/scratch/ckpt_runs/data/train.jsonl") == DATA
    assert kind_of_path("/data/models/llama/pytorch_model-00001-of-00002.bin") == MODEL
    assert kind_of_path("/work/u/run3/checkpoint-1500/") == MODEL
    assert kind_of_path("configs/sweep/base.yaml") == CONFIG
    assert kind_of_path("data/processed/train.pt") is None  # a split's name with a weight suffix
    assert kind_of_path("outputs/run3/results") is None
    assert kind_of_path("runs/checkpoints/exp4", folders=False) is None


def test_a_data_file_under_a_checkpoint_named_folder_is_input_data() -> None:
    path = "/scratch/u/ckpt_stage2/corpus/train.jsonl"
    lines = _tb([("sft.py", "<module>", "ds = load_dataset('json', data_files=args.data)"),
                 (f"{_SITE}/datasets/load.py", "load_dataset", "builder = load_dataset_builder(...)"),
                 (f"{_SITE}/datasets/data_files.py", "resolve_pattern", "raise FileNotFoundError(error_msg)")],
                f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'")
    assert _category(lines) == "incorrect_input"


def test_a_model_folder_missing_under_from_pretrained_is_model_state() -> None:
    lines = _tb([("finetune.py", "<module>", "model = AutoModel.from_pretrained(args.base)"),
                 (f"{_SITE}/transformers/models/auto/auto_factory.py", "from_pretrained", "return cls.from_pretrained("),
                 (f"{_SITE}/transformers/modeling_utils.py", "from_pretrained", "names = os.listdir(folder)")],
                "FileNotFoundError: [Errno 2] No such file or directory: '/lustre/u/base-llm-13b/'")
    assert _category(lines) == "checkpoint_error"


def test_a_tokenizer_vocab_missing_is_model_state() -> None:
    lines = _tb([("eval.py", "<module>", "tok = BertTokenizer.from_pretrained(args.model_dir)"),
                 (f"{_SITE}/transformers/tokenization_utils_base.py", "from_pretrained", "return cls._from_pretrained("),
                 (f"{_SITE}/transformers/models/bert/tokenization_bert.py", "load_vocab", "with open(vocab_file) as r:")],
                "FileNotFoundError: [Errno 2] No such file or directory: '/lustre/u/bert-zh/vocab.txt'")
    assert _category(lines) == "checkpoint_error"


def test_a_repo_id_refused_while_loading_a_data_set_is_input_data() -> None:
    lines = _tb([("prep.py", "<module>", "ds = load_dataset(args.dataset_dir)"),
                 (f"{_SITE}/datasets/load.py", "dataset_module_factory", "hf_api.dataset_info(path)"),
                 (f"{_SITE}/huggingface_hub/utils/_validators.py", "validate_repo_id", "raise HFValidationError(")],
                "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
                "'namespace/repo_name': '/scratch/u/corpora/wiki_zh'. Use `repo_type` argument if needed.")
    assert _category(lines) == "incorrect_input"


def test_torch_save_into_a_missing_folder_by_a_trainer_s_checkpoint_save_is_checkpoint_error() -> None:
    lines = _tb([("train.py", "<module>", "trainer.train()"),
                 (f"{_SITE}/transformers/trainer.py", "_save_checkpoint", "self._save_optimizer_and_scheduler(out)"),
                 (f"{_SITE}/torch/serialization.py", "save", "with _open_zipfile_writer(f) as opened_zipfile:")],
                "RuntimeError: Parent directory runs/exp4/step_900 does not exist.")
    assert _category(lines) == "checkpoint_error"
    # the folder's name alone does not say what torch.save wrote (an output tensor is saved the same way)
    own = _tb([("train.py", "<module>", "torch.save(payload, out_path)"),
               (f"{_SITE}/torch/serialization.py", "save", "with _open_zipfile_writer(f) as opened_zipfile:")],
              "RuntimeError: Parent directory runs/checkpoints/exp4 does not exist.")
    assert _category(own) == "semantic_error"


def test_a_write_of_model_weights_into_a_missing_folder_is_checkpoint_error() -> None:
    lines = _tb([("train.py", "<module>", "export(model, args.out)"),
                 ("/home/u/proj/export.py", "export", "with open(path, 'wb') as fh:")],
                "FileNotFoundError: [Errno 2] No such file or directory: 'exports/run2/model_final.safetensors'")
    assert _category(lines) == "checkpoint_error"


def test_a_plot_or_table_write_stays_the_jobs_own_error() -> None:
    plot = _tb([("train.py", "<module>", "plt.savefig('figs/run2/loss.png')"),
                (f"{_SITE}/PIL/Image.py", "save", "fp = builtins.open(filename, \"w+b\")")],
               "FileNotFoundError: [Errno 2] No such file or directory: 'figs/run2/loss.png'")
    assert _category(plot) == "semantic_error"


def test_frames_and_path_that_disagree_keep_the_answer() -> None:
    # torch.load of a feature file inside a Dataset run by a DataLoader: the frames say data, the name a weight file
    lines = _tb([("train.py", "<module>", "for batch in loader:"),
                 (f"{_SITE}/torch/utils/data/_utils/fetch.py", "fetch", "data = [self.dataset[idx] for idx in idx]"),
                 ("/home/u/proj/ds.py", "__getitem__", "feat = torch.load(self.paths[i])"),
                 (f"{_SITE}/torch/serialization.py", "load", "with _open_file_like(f, 'rb') as opened_file:")],
                "FileNotFoundError: [Errno 2] No such file or directory: '/scratch/u/feats/clip_000123.pt'")
    assert _category(lines) == "checkpoint_error"


def test_a_sharded_checkpoint_index_missing_is_model_state() -> None:
    lines = _tb([("serve.py", "<module>", "model = AutoModelForCausalLM.from_pretrained(path)"),
                 (f"{_SITE}/transformers/modeling_utils.py", "from_pretrained", "with open(index_file) as f:")],
                "FileNotFoundError: [Errno 2] No such file or directory: "
                "'/lustre/u/llm-70b/model.safetensors.index.json'")
    got = diagnose_text("\n".join(["loading ...", *lines]) + "\n").diagnosis
    assert (got.category, got.origin) == ("checkpoint_error", "user")


def test_a_hub_cache_miss_offline_while_loading_a_data_set_is_input_data() -> None:
    # README C8: a cache miss with the network switched off is the file's category by C2
    lines = _tb([("prep.py", "<module>", "ds = load_dataset('some-org/some-corpus')"),
                 (f"{_SITE}/datasets/load.py", "load_dataset", "builder_instance = load_dataset_builder("),
                 (f"{_SITE}/huggingface_hub/file_download.py", "hf_hub_download", "raise LocalEntryNotFoundError(")],
                "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache "
                "and outgoing traffic has been disabled. To enable hf.co look-ups and downloads online, set "
                "'local_files_only' to False.")
    got = diagnose_text("\n".join(["loading ...", *lines]) + "\n").diagnosis
    assert (got.category, got.origin) == ("incorrect_input", "data")


def test_a_damaged_tensor_file_read_by_a_data_loader_is_input_data() -> None:
    lines = _tb([("train.py", "<module>", "for batch in loader:"),
                 (f"{_SITE}/torch/utils/data/_utils/fetch.py", "fetch", "data = [self.dataset[idx] for idx in idx]"),
                 ("/home/u/proj/ds.py", "__getitem__", "x = torch.load(self.files[i])"),
                 (f"{_SITE}/torch/serialization.py", "load", "with _open_zipfile_reader(opened_file) as zf:")],
                "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory")
    assert _category(lines) == "incorrect_input"


def test_a_deepspeed_json_the_job_names_is_its_configuration() -> None:
    lines = _tb([("train.py", "<module>", "engine, *_ = deepspeed.initialize(config=args.ds)"),
                 (f"{_SITE}/deepspeed/runtime/engine.py", "_configure_with_arguments", "self._config = DeepSpeedConfig("),
                 (f"{_SITE}/deepspeed/runtime/config.py", "__init__", "with open(config, 'r') as f:")],
                "FileNotFoundError: [Errno 2] No such file or directory: 'configs/z3_offload.json'")
    assert _category(lines) == "semantic_error"


def test_an_image_missing_in_a_resumed_run_s_data_loader_is_input_data() -> None:
    # the resume call in the outermost frame is no checkpoint read: the DataLoader's fetch opened the file
    lines = _tb([("train.py", "<module>", "trainer.train(resume_from_checkpoint=args.resume)"),
                 (f"{_SITE}/torch/utils/data/_utils/fetch.py", "fetch", "data = [self.dataset[idx] for idx in idx]"),
                 ("/home/u/proj/ds.py", "__getitem__", "img = Image.open(self.paths[i]).convert('RGB')"),
                 (f"{_SITE}/PIL/Image.py", "open", "fp = builtins.open(filename, \"rb\")")],
                "FileNotFoundError: [Errno 2] No such file or directory: '/scratch/u/coco/images/000000139.jpg'")
    assert _category(lines) == "incorrect_input"


def test_keras_weight_files_are_model_state() -> None:
    assert kind_of_path("/scratch/u/run2/best_model.h5") == MODEL
    assert kind_of_path("exports/classifier.keras") == MODEL
    assert kind_of_path("/scratch/u/features/train_feats.h5") == DATA


def test_token_bin_files_of_a_corpus_are_not_model_state() -> None:
    assert kind_of_path("/scratch/u/owt/val.bin") == DATA  # nanoGPT's token file of a split
    assert kind_of_path("/scratch/u/pile/pile_text_document.bin") is None
    assert kind_of_path("/scratch/u/run/checkpoint-500/optimizer.bin") == MODEL
    assert kind_of_path("/models/llama/pytorch_model.bin.index.json") == MODEL
