"""Round 18, library sweep B (PyTorch 2.13, Lightning 2.6.6, DeepSpeed 0.19.8): messages these libraries raise
that end a training job, read from the libraries' sources, and the category/origin gpulens must give them.
Each excerpt is written for the test in the library's format (the raise site is named in each case), not copied
from a log; docs/library-sweeps/r18-torch.csv records every message checked."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.rules import load_rules

RULES_BY_ID = {r.id: r for r in load_rules()}


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


_START = ["Loading configuration from conf/train.yaml", "Building model: 12 layers, 768 hidden", "Starting training",
          "Epoch 1/10: 100%|##########| 500/500 [02:11<00:00, 3.80it/s, loss=2.31]",
          "Epoch 2/10:  12%|#2        | 60/500 [00:15<01:55, 3.81it/s, loss=2.02]"]


def _excerpt(frames: list[tuple[str, int, str, str]], error: list[str]) -> str:
    if not frames:
        return "\n".join([*_START, *error]) + "\n"
    lines = [*_START, "Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 212, in <module>',
             "    main()", '  File "/home/u/proj/train.py", line 180, in main', "    trainer.fit(model)"]
    for path, line, func, code in frames:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return "\n".join([*lines, *error]) + "\n"


# (raise site, rule expected to decide, traceback frames below the job's own, error lines, category, origin)
CASES = [
    ('torch 2.13.0 utils/data/dataloader.py:_try_get_data (timeout)', 'r18-dataloader-timeout',
     [('/opt/py/site-packages/torch/utils/data/dataloader.py', 1275, '_try_get_data', 'raise RuntimeError(')],
     ['RuntimeError: DataLoader timed out after 120 seconds'],
     'unknown', 'unknown'),
    ('torch 2.13.0 utils/data/_utils/collate.py:collate', 'r18-default-collate-bad-type',
     [('/opt/py/site-packages/torch/utils/data/_utils/collate.py', 240, 'collate', 'raise TypeError(default_collate_err_msg_format.format(elem_type))')],
     ["TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found <class 'NoneType'>"],
     'incorrect_input', 'data'),
    ('torch 2.13.0 utils/data/_utils/collate.py:collate (PIL image: no ToTensor in the job\'s transform, C5)', 'r18-default-collate-pil-image',
     [('/opt/py/site-packages/torch/utils/data/_utils/collate.py', 240, 'collate', 'raise TypeError(default_collate_err_msg_format.format(elem_type))')],
     ["TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found <class 'PIL.JpegImagePlugin.JpegImageFile'>"],
     'incorrect_input', 'user'),
    ('torch 2.13.0 amp/autocast_mode.py:autocast.__init__ (bf16 unsupported)', 'torch-autocast-bf16-unsupported',
     [('/opt/py/site-packages/torch/amp/autocast_mode.py', 330, '__init__', 'raise RuntimeError(')],
     ['RuntimeError: Current CUDA Device does not support bfloat16. Please switch dtype to float16.'],
     'cuda_env_error', 'user'),  # C7: the job's own autocast dtype
    ('torch 2.13.0 serialization.py:_open_zipfile_writer_file (parent dir)', 'r18-torch-save-checkpoint-missing-dir',
     [('/home/u/proj/utils/ckpt.py', 31, 'save_checkpoint', 'torch.save(model.state_dict(), os.path.join(out_dir, f"epoch_{epoch}.pt"))'), ('/opt/py/site-packages/torch/serialization.py', 964, 'save', 'with _open_zipfile_writer(f) as opened_zipfile:'), ('/opt/py/site-packages/torch/serialization.py', 813, '__init__', 'torch._C.PyTorchFileWriter(')],
     ['RuntimeError: Parent directory checkpoints/run3 does not exist.'],
     'checkpoint_error', 'user'),
    ('torch 2.13.0 _dynamo/exc.py:TorchRuntimeError', 'r18-dynamo-fake-tensor-run-failed',
     [('/opt/py/site-packages/torch/_dynamo/utils.py', 3290, 'run_node', 'raise RuntimeError(make_error_message(e)).with_traceback(')],
     ["torch._dynamo.exc.TorchRuntimeError: Dynamo failed to run FX node with fake tensors: call_function <built-in function linear>(*(FakeTensor(..., device='cuda:0', size=(32, 512)), Parameter(FakeTensor(..., device='cuda:0', size=(10, 768), requires_grad=True))), **{}): got RuntimeError('a and b must have same reduction dim, but got [32, 512] X [768, 10].')"],
     'semantic_error', 'user'),
    ('torch 2.13.0 _dynamo/convert_frame.py:_compile (FailOnRecompileLimitHit, fullgraph=True)', 'r18-dynamo-recompile-limit-fullgraph',
     [('/opt/py/site-packages/torch/_dynamo/convert_frame.py', 2026, '_compile', 'raise_unimplemented_cache_limit_exceeded()'), ('/opt/py/site-packages/torch/_dynamo/exc.py', 727, 'unimplemented', 'raise Unsupported(msg, gb_type, skip_frame)')],
     ['torch._dynamo.exc.Unsupported: Dynamo recompile limit exceeded', '  Explanation: Dynamo attempted to recompile the code object too many times, exceeding the recompile_limit cache size limit (currently set to 8). Excessive recompilations can degrade performance due to the compilation overhead of each recompilation.', '  Hint: To monitor recompilations, enable TORCH_LOGS=recompiles. If recompilations are expected, consider increasing torch._dynamo.config.recompile_limit to an appropriate value.', '', '  Developer debug context: Limit type: recompile_limit', '', 'The above exception was the direct cause of the following exception:', '', 'Traceback (most recent call last):', '  File "/home/u/proj/train.py", line 180, in main', '    loss = compiled_step(batch)', '  File "/opt/py/site-packages/torch/_dynamo/convert_frame.py", line 2031, in _compile', '    raise FailOnRecompileLimitHit(', 'torch._dynamo.exc.FailOnRecompileLimitHit: Hard failure due to fullgraph=True'],
     'semantic_error', 'user'),
    ('torch 2.13.0 _dynamo/convert_frame.py:_compile (FailOnRecompileLimitHit, config.fail_on_recompile_limit_hit)', 'r18-dynamo-recompile-limit-fullgraph',
     [('/opt/py/site-packages/torch/_dynamo/convert_frame.py', 2027, '_compile', 'raise FailOnRecompileLimitHit(')],
     ['torch._dynamo.exc.FailOnRecompileLimitHit: Hard failure due to fail_on_recompile_limit_hit'],
     'semantic_error', 'user'),
    ('earlier torch 2.x _dynamo/convert_frame.py:_compile (FailOnRecompileLimitHit, f"{limit_type} reached with one_graph=True")', 'r18-dynamo-recompile-limit-fullgraph',
     [('/opt/py/site-packages/torch/_dynamo/convert_frame.py', 1028, '_compile', 'raise FailOnRecompileLimitHit(')],
     ['torch._dynamo.exc.FailOnRecompileLimitHit: recompile_limit reached with one_graph=True. Excessive recompilations can degrade performance due to the compilation overhead of each recompilation. To monitor recompilations, enable TORCH_LOGS=recompiles. If recompilations are expected, consider increasing torch._dynamo.config.cache_size_limit to an appropriate value.'],
     'semantic_error', 'user'),
    ('torch 2.13.0 _inductor/exc.py:InductorError (C++ compile)', 'r18-inductor-cpp-compile-toolchain',
     [('/opt/py/site-packages/torch/_inductor/codecache.py', 2390, 'compile', 'raise exc.CppCompileError(cmd, e.output) from e')],
     ['torch._inductor.exc.InductorError: CppCompileError: C++ compile error', '', 'Command:', 'g++ /tmp/torchinductor_u/ab/cab.cpp -D TORCH_INDUCTOR_CPP_WRAPPER -shared -fPIC -O3 -o /tmp/torchinductor_u/ab/cab.so', '', 'Output:', '/tmp/torchinductor_u/ab/cab.cpp:2:10: fatal error: Python.h: No such file or directory', '    2 | #include <Python.h>', '      |          ^~~~~~~~~~', 'compilation terminated.'],
     'import_error', 'user'),  # a missing build tool/header, as torch-extension-needs-ninja
    ('lightning 2.6.6 pytorch/trainer/connectors/checkpoint_connector.py:restore_optimizers_and_schedulers', 'r18-lightning-optimizer-state-missing',
     [('/opt/py/site-packages/lightning/pytorch/trainer/connectors/checkpoint_connector.py', 376, 'restore_optimizers_and_schedulers', 'raise KeyError(')],
     ["KeyError: 'Trying to restore optimizer state but checkpoint contains only the model. This is probably due to `ModelCheckpoint.save_weights_only` being set to `True`.'"],
     'checkpoint_error', 'user'),
    ('lightning 2.6.6 pytorch/strategies/deepspeed.py:_load_config', 'r18-lightning-deepspeed-config-path',
     [('/opt/py/site-packages/lightning/pytorch/strategies/deepspeed.py', 819, '_load_config', 'raise MisconfigurationException(')],
     ['lightning.fabric.utilities.exceptions.MisconfigurationException: You passed in a path to a DeepSpeed config but the path does not exist: configs/ds_zero3.json'],
     'semantic_error', 'user'),
    ('deepspeed 0.19.8 runtime/engine.py:load_checkpoint (universal, no latest)', 'r18-deepspeed-universal-latest-missing',
     [('/opt/py/site-packages/deepspeed/runtime/engine.py', 4435, 'load_checkpoint', "raise ValueError(f'Invalid for universal checkpoint: {latest_path} does not exist')")],
     ['ValueError: Invalid for universal checkpoint: output/ckpt/latest does not exist'],
     'checkpoint_error', 'user'),
    ('deepspeed 0.19.8 op_builder/builder.py:jit_load (ninja)', 'torch-extension-needs-ninja',
     [('/opt/py/site-packages/deepspeed/ops/op_builder/builder.py', 577, 'jit_load', 'raise RuntimeError(f"Unable to JIT load the {self.name} op due to ninja not being installed.") from e')],
     ['RuntimeError: Unable to JIT load the fused_adam op due to ninja not being installed.'],
     'import_error', 'user'),
    ('deepspeed 0.19.8 op_builder/builder.py:jit_load (not compatible)', 'r18-deepspeed-op-not-compatible',
     [('/opt/py/site-packages/deepspeed/ops/op_builder/builder.py', 571, 'jit_load', 'raise RuntimeError(')],
     ['RuntimeError: Unable to JIT load the evoformer_attn op due to it not being compatible due to hardware/software issue. Please specify environment variable $CUTLASS_PATH'],
     'cuda_env_error', 'user'),
    ('deepspeed 0.19.8 launcher/runner.py:main (ssh check)', 'r18-deepspeed-hostfile-ssh-unreachable',
     [('/opt/py/site-packages/deepspeed/launcher/runner.py', 491, 'main', 'raise RuntimeError(')],
     ['RuntimeError: Using hostfile at /job/hostfile but host=worker-1 was not reachable via ssh. If you are running with a single node please remove /job/hostfile or setup passwordless ssh.'],
     'comm_error', 'unknown'),  # O1: the ssh check's stderr goes to DEVNULL; a missing key and a down host read alike
    ('torch 2.13.0 distributed/checkpoint/default_planner.py:create_default_local_load_plan (missing key)', 'r18-dcp-missing-key',
     [('/opt/py/site-packages/torch/distributed/checkpoint/state_dict_loader.py', 218, '_load_state_dict', 'central_plan: LoadPlan = distW.reduce_scatter("plan", local_step, global_step)'), ('/opt/py/site-packages/torch/distributed/checkpoint/utils.py', 289, 'reduce_scatter', 'raise CheckpointException(step, node_failures)')],
     ['torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([0, 1])', 'Traceback (most recent call last): (RANK 0)', '  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/checkpoint/default_planner.py", line 495, in create_default_local_load_plan', '    raise RuntimeError(f"Missing key in checkpoint state_dict: {fqn}.")', 'RuntimeError: Missing key in checkpoint state_dict: model.lm_head.weight.'],
     'checkpoint_error', 'user'),
    ('torch 2.13.0 nn/parallel/distributed.py:_verify_param_shape_across_processes', 'r18-ddp-model-differs-across-ranks',
     [('/opt/py/site-packages/torch/nn/parallel/distributed.py', 835, '__init__', '_verify_param_shape_across_processes(self.process_group, parameters)'), ('/opt/py/site-packages/torch/distributed/utils.py', 301, '_verify_param_shape_across_processes', 'return dist._verify_params_across_processes(process_group, tensors, logger)')],
     ['RuntimeError: DDP expects same model across all ranks, but Rank 1 has 120 params, while rank 0 has inconsistent 122 params.'],
     'semantic_error', 'user'),
]


@pytest.mark.parametrize(("site", "rule", "frames", "error", "category", "origin"), CASES, ids=[c[1] for c in CASES])
def test_library_message_category_and_origin(clf: Classifier, site: str, rule: str, frames: list[tuple[str, int, str, str]],
                                             error: list[str], category: str, origin: str) -> None:
    d = diagnose_text(_excerpt(frames, error), clf).diagnosis
    assert (d.category, d.origin, d.rule_id) == (category, origin, rule), site


def test_torch_save_of_predictions_into_a_missing_folder_stays_semantic(clf: Classifier) -> None:
    """C3: torch.save of something that is not model state (predictions) into a missing folder is the job's
    own output, semantic_error: the checkpoint rule needs a model/state save in the traceback."""
    frames = [("/home/u/proj/eval.py", 88, "dump", "torch.save(preds, 'outputs/run1/preds.pt')"),
              ("/opt/py/site-packages/torch/serialization.py", 964, "save", "with _open_zipfile_writer(f) as opened_zipfile:")]
    d = diagnose_text(_excerpt(frames, ["RuntimeError: Parent directory outputs/run1 does not exist."]), clf).diagnosis
    assert d.category == "semantic_error"


def test_inductor_compile_error_without_a_toolchain_line_stays_a_compiler_failure(clf: Classifier) -> None:
    """A CppCompileError whose compiler output shows a code error (not a missing header or compiler) is not
    the environment: the toolchain rule needs the missing-file line."""
    err = ["torch._inductor.exc.InductorError: CppCompileError: C++ compile error", "", "Output:",
           "/tmp/torchinductor_u/ab/cab.cpp:10:3: error: 'foo' was not declared in this scope"]
    d = diagnose_text(_excerpt([], err), clf).diagnosis
    assert d.rule_id != "r18-inductor-cpp-compile-toolchain"


def test_inductor_toolchain_rule_does_not_read_nvcc_as_cc(clf: Classifier) -> None:
    """"nvcc: not found" is no missing C compiler: the compiler name starts at a word boundary."""
    err = ["torch._inductor.exc.InductorError: CppCompileError: C++ compile error", "", "Output:",
           "sh: 1: nvcc: not found"]
    d = diagnose_text(_excerpt([], err), clf).diagnosis
    assert d.rule_id != "r18-inductor-cpp-compile-toolchain"
    err[-1] = "sh: 1: g++: not found"
    ctx = RULES_BY_ID["r18-inductor-cpp-compile-toolchain"].context
    assert ctx is not None and ctx.search("\n".join(err)) is not None
    assert ctx.search("sh: 1: nvcc: not found") is None
