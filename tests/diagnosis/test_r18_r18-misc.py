"""Round 18, library sweep C (Ray, JAX/Flax/Orbax, timm, Ultralytics, MMEngine, torchvision): category and
origin of the messages these libraries raise when a training job dies. Each excerpt is written for the test in the
library's message format (read from the library's source, version in each case's `source`), not copied from a log.
The full sweep, with the messages that were already right, is docs/library-sweeps/r18-misc.csv."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


_START = ['Loading configuration from conf/run.yaml', 'Building model: 12 layers, 768 hidden', 'Starting training', 'Epoch 1/10: step 100/1000 loss=2.314', 'Epoch 1/10: step 200/1000 loss=2.101']

_SP = "/opt/conda/lib/python3.11/site-packages"


def _traceback(body: list[str], pre: list[str] | None = None) -> str:
    return "\n".join([*(_START if pre is None else pre), "Traceback (most recent call last):",
                      '  File "/home/u/proj/train.py", line 88, in <module>', "    main()", *body])


# (case, rule, traceback body after the job's own frame, expected category, expected origin, lines before it)
_CASES = [
    ('ray-object-store-full', 'ray-object-store-full',
     [f'  File "{_SP}/ray/_private/worker.py", line 3050, in put',
     '    object_ref = worker.put_object(value, owner_address=serialize_owner_address)',
     'ray.exceptions.ObjectStoreFullError: Failed to put object 00ffffffffffffffffffffffffffffffffffffff0100000001000000 in object store because it is full. Object size is 12884901888 bytes.',
     'The local object store is full of objects that are still in scope and cannot be evicted. Tip: Use the `ray memory` command to list active objects in the cluster.'],
     'cpu_oom', 'user', None),
    ('ray-out-of-disk', 'ray-out-of-disk',
     [f'  File "{_SP}/ray/_private/auto_init_hook.py", line 22, in auto_init_wrapper',
     '    return fn(*args, **kwargs)',
     f'  File "{_SP}/ray/_private/client_mode_hook.py", line 104, in wrapper',
     '    return func(*args, **kwargs)',
     f'  File "{_SP}/ray/_private/worker.py", line 2967, in get',
     '    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)',
     f'  File "{_SP}/ray/_private/worker.py", line 1015, in get_objects',
     '    raise value.as_instanceof_cause()',
     'ray.exceptions.OutOfDiskError: Local disk is full',
     "The object cannot be created because the local object store is full and the local disk's utilization is over capacity (95% by default).Tip: Use `df` on this node to check disk usage and `ray memory` to check object store memory usage."],
     'storage_error', 'infrastructure', None),
    ('ray-worker-crashed', 'ray-worker-died-no-cause',
     [f'  File "{_SP}/ray/_private/auto_init_hook.py", line 22, in auto_init_wrapper',
     '    return fn(*args, **kwargs)',
     f'  File "{_SP}/ray/_private/client_mode_hook.py", line 104, in wrapper',
     '    return func(*args, **kwargs)',
     f'  File "{_SP}/ray/_private/worker.py", line 2967, in get',
     '    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)',
     f'  File "{_SP}/ray/_private/worker.py", line 1015, in get_objects',
     '    raise value.as_instanceof_cause()',
     'ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task. Check python-core-worker-*.log files for more information.'],
     'unknown', 'unknown', None),
    ('ray-raylet-died', 'ray-worker-died-no-cause',
     [f'  File "{_SP}/ray/_private/auto_init_hook.py", line 22, in auto_init_wrapper',
     '    return fn(*args, **kwargs)',
     f'  File "{_SP}/ray/_private/client_mode_hook.py", line 104, in wrapper',
     '    return func(*args, **kwargs)',
     f'  File "{_SP}/ray/_private/worker.py", line 2967, in get',
     '    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)',
     f'  File "{_SP}/ray/_private/worker.py", line 1015, in get_objects',
     '    raise value.as_instanceof_cause()',
     "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more information."],
     'unknown', 'unknown', None),
    ('ray-train-insufficient', 'ray-train-insufficient-gpus',
     [f'  File "{_SP}/ray/train/v2/api/data_parallel_trainer.py", line 176, in fit',
     '    raise result.error',
     'ray.train.ControllerError: Training failed due to controller error:',
     'Insufficient cluster resources to launch training workers.',
     'The worker group requires {"GPU": 8.0} but the cluster only has a maximum of {"GPU": 4.0} resources.',
     'Please reduce `num_workers`, lower resource requirements, or increase the cluster size.'],
     'cuda_env_error', 'user', None),
    ('ray-train-collective-timeout', 'ray-train-collective-timeout',
     [f'  File "{_SP}/ray/train/v2/api/data_parallel_trainer.py", line 176, in fit',
     '    raise result.error',
     'ray.train.WorkerGroupError: Training failed due to worker errors:',
     '[Rank 0 Error Snippet]:',
     'ray.train.v2._internal.exceptions.BroadcastCollectiveTimeoutError: The collective operation timed out after 1800.31 seconds. The following ranks have not joined the collective operation: [3]',
     'You can set the timeout with the RAY_TRAIN_COLLECTIVE_TIMEOUT_S environment variable (current value: 1800.00 seconds). Disable the timeout by setting the environment variable to `None`.'],
     'comm_error', 'unknown', None),
    ('jax-unknown-backend', 'jax-unknown-gpu-backend',
     [f'  File "{_SP}/jax/_src/xla_bridge.py", line 758, in canonicalize_platform',
     '    raise RuntimeError(f"Unknown backend: \'{platform}\' requested, but no "',
     "RuntimeError: Unknown backend: 'gpu' requested, but no platforms that are instances of gpu are present. Platforms present are: cpu"],
     'cuda_env_error', 'user', None),
    ('jax-backend-failed', 'jax-backend-failed-to-initialize',
     [f'  File "{_SP}/jax/_src/xla_bridge.py", line 958, in _get_backend_uncached',
     '    raise RuntimeError(f"Backend \'{platform}\' failed to initialize: "',
     "RuntimeError: Backend 'cuda' failed to initialize: FAILED_PRECONDITION: No visible GPU devices.. Available backends are ['cpu']"],
     'cuda_env_error', 'infrastructure', None),
    ('flax-param-not-found', 'flax-scope-errors',
     [f'  File "{_SP}/flax/core/scope.py", line 1035, in param',
     '    raise errors.ScopeParamNotFoundError(name, self.path_text)',
     'flax.errors.ScopeParamNotFoundError: Could not find parameter named "kernel" in scope "/encoder/Dense_1". (https://flax.readthedocs.io/en/latest/api_reference/flax.errors.html#flax.errors.ScopeParamNotFoundError)'],
     'semantic_error', 'user', None),
    ('flax-apply-extra-params', 'flax-scope-errors',
     [f'  File "{_SP}/flax/core/scope.py", line 1180, in apply',
     '    raise errors.ApplyScopeInvalidVariablesStructureError(variables)',
     'flax.errors.ApplyScopeInvalidVariablesStructureError: Expect the `variables` (first argument) passed to apply() to be a dict with the structure {"params": ...}, but got a dict with an extra params layer, i.e.  {"params": {"params": ... } }. You should instead pass in your dict\'s ["params"]. (https://flax.readthedocs.io/en/latest/api_reference/flax.errors.html#flax.errors.ApplyScopeInvalidVariablesStructureError)'],
     'semantic_error', 'user', None),
    ('flax-immutable', 'flax-scope-errors',
     [f'  File "{_SP}/flax/core/scope.py", line 980, in put_variable',
     '    raise errors.ModifyScopeVariableError(col, name, self.path_text)',
     'flax.errors.ModifyScopeVariableError: Cannot update variable "mean" in "/BatchNorm_0" because collection "batch_stats" is immutable. (https://flax.readthedocs.io/en/latest/api_reference/flax.errors.html#flax.errors.ModifyScopeVariableError)'],
     'semantic_error', 'user', None),
    ('orbax-no-step-path', 'orbax-no-step-path',
     [f'  File "{_SP}/orbax/checkpoint/_src/path/step.py", line 573, in find_step_path',
     '    raise ValueError(',
     'ValueError: No step path found with name=12000, NameFormat=_StandardNameFormat(step_prefix=None, step_format_fixed_length=None) for step=12000 under /home/u/ckpt.'],
     'checkpoint_error', 'user', None),
    ('timm-unknown-model', 'timm-unknown-model',
     [f'  File "{_SP}/timm/models/_factory.py", line 118, in create_model',
     "    raise RuntimeError('Unknown model (%s)' % model_name)",
     'RuntimeError: Unknown model (vit_base_patch16_2244)'],
     'semantic_error', 'user', None),
    ('timm-no-checkpoint', 'timm-no-checkpoint-found',
     [f'  File "{_SP}/timm/models/_helpers.py", line 315, in resume_checkpoint',
     '    raise FileNotFoundError()',
     'FileNotFoundError'],
     'checkpoint_error', 'user', ['Loading configuration from conf/run.yaml', 'Building model: 12 layers, 768 hidden', 'Starting training', 'Epoch 1/10: step 100/1000 loss=2.314', 'Epoch 1/10: step 200/1000 loss=2.101', "ERROR:timm.models._helpers:No checkpoint found at 'output/train/20260110-vit/last.pth.tar'"]),
    ('timm-invalid-tag', 'timm-unknown-model',
     [f'  File "{_SP}/timm/models/_registry.py", line 427, in get_pretrained_cfg',
     "    raise RuntimeError(f'Invalid pretrained tag ({tag}) for {arch_name}.')",
     'RuntimeError: Invalid pretrained tag (in22k_ft_in1k) for convnext_tiny.'],
     'semantic_error', 'user', None),
    ('yolo-bad-arg', 'ultralytics-config-syntaxerror',
     [f'  File "{_SP}/ultralytics/cfg/__init__.py", line 690, in check_dict_alignment',
     '    raise SyntaxError(string + CLI_HELP_MSG) from e',
     "SyntaxError: 'lr' is not a valid YOLO argument. Similar arguments are i.e. ['lr0=0.01', 'lrf=0.01'].",
     '',
     "    Arguments received: ['yolo', 'train', 'data=coco8.yaml', 'lr=0.01']. Ultralytics 'yolo' commands use the following syntax:"],
     'semantic_error', 'user', None),
    ('yolo-names-missing', 'ultralytics-config-syntaxerror',
     [f'  File "{_SP}/ultralytics/data/utils.py", line 769, in check_det_dataset',
     '    raise SyntaxError(emojis(f"{dataset} key missing ❌.\\n either \'names\' or \'nc\' are required in all data YAMLs."))',
     'SyntaxError: data/custom.yaml key missing ❌.',
     " either 'names' or 'nc' are required in all data YAMLs."],
     'semantic_error', 'user', None),
    ('mm-config-missing', 'openmmlab-config-missing',
     [f'  File "{_SP}/mmengine/config/config.py", line 460, in fromfile',
     '    check_file_exist(filename)',
     f'  File "{_SP}/mmengine/utils/path.py", line 23, in check_file_exist',
     '    raise FileNotFoundError(msg_tmpl.format(filename))',
     'FileNotFoundError: file "/home/u/mmdetection/configs/rtmdet/rtmdet_l_custom.py" does not exist'],
     'semantic_error', 'user', None),
    ('tv-gdown-missing', 'torchvision-gdown-missing',
     [f'  File "{_SP}/torchvision/datasets/utils.py", line 189, in download_file_from_google_drive',
     '    raise RuntimeError(',
     "RuntimeError: To download files from GDrive, 'gdown' is required. You can install it with 'pip install gdown'."],
     'import_error', 'user', None),
]


@pytest.mark.parametrize(("case", "rule", "body", "category", "origin", "pre"), _CASES, ids=[c[0] for c in _CASES])
def test_library_message(case: str, rule: str, body: list[str], category: str, origin: str,
                         pre: list[str] | None, clf: Classifier) -> None:
    d = diagnose_text(_traceback(body, pre), clf).diagnosis
    assert (d.category, d.origin) == (category, origin), (case, d.category, d.origin, d.rule_id, d.method)
    if category != "unknown":
        assert d.rule_id == rule
