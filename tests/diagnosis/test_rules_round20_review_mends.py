"""Review mends of round 20's signature rules: hand-written excerpts in the libraries' formats (TensorFlow, h5py,
Keras, urllib3/wandb, pandas, botocore, Horovod, TensorBoard, CPython) for the cases the first rules got wrong."""

from __future__ import annotations

import time

from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.rules import load_rules

SP = "/usr/local/lib/python3.11/site-packages"
TRAIN = ["epoch 1 step 100 loss 0.9123", "epoch 1 step 200 loss 0.8123", "epoch 1 step 300 loss 0.7741"]


def _log(*lines: str, before: tuple[str, ...] = tuple(TRAIN)) -> str:
    return "\n".join([*before, *lines]) + "\n"


def _tb(*frames: str, last: str) -> tuple[str, ...]:
    return ("Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 88, in <module>',
            "    main()", *frames, last)


def _rule(rid: str):
    return next(r for r in load_rules() if r.id == rid)


TF_TB = ("Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 88, in <module>',
         "    model.fit(ds, epochs=3)", f'  File "{SP}/tensorflow/python/eager/execute.py", line 53, in quick_execute',
         "    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,")
TF_ABORT = ("tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: failed to connect "
            "to all addresses")
TF_OOM = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
          "shape[512,1024,1024] and type float on /job:worker/replica:0/task:1/device:GPU:0 by allocator GPU_0_bfc")


def test_tf_collective_abort_is_secondary_to_the_workers_oom() -> None:
    w = diagnose_text(_log(*TF_TB, TF_OOM, "\t [[{{node CollectiveReduceV2}}]]", *TF_TB, TF_ABORT))
    assert (w.diagnosis.category, w.diagnosis.origin) == ("gpu_oom", "user")
    w = diagnose_text(_log("W tensorflow/core/common_runtime/base_collective_executor.cc:249] "
                           "BaseCollectiveExecutor::StartAbort RESOURCE_EXHAUSTED: OOM when allocating tensor with "
                           "shape[512,1024,1024]", *TF_TB, TF_ABORT))
    assert w.diagnosis.category == "gpu_oom"
    alone = diagnose_text(_log(*TF_TB, TF_ABORT))
    assert (alone.diagnosis.category, alone.diagnosis.origin) == ("unknown", "unknown")


def test_hdf5_eio_pattern_has_no_catastrophic_backtracking() -> None:
    rx = _rule("r20d-hdf5-eio").pattern
    text = "file read failed: time = " + "x" * 20000 + "\n"
    t0 = time.perf_counter()
    assert rx.search(text) is None
    assert time.perf_counter() - t0 < 0.5


def test_triton_out_of_resources_is_one_rule() -> None:
    ids = [r.id for r in load_rules()]
    assert "r20-triton-out-of-resources-limit" not in ids
    r = _rule("triton-out-of-resources")
    m = r.pattern.search("OutOfResources: out of resource: shared memory, Required: 232448, Hardware limit: 101376.")
    assert m and m.group("need") == "232448" and m.group("limit") == "101376"


def test_tf_blas_launch_failed_origin_is_unknown() -> None:
    assert (_rule("r20-tf-blas-launch-failed").category, _rule("r20-tf-blas-launch-failed").origin) == (
        "cuda_error", "unknown")


def test_keras_load_weights_of_h5_without_object_is_checkpoint_error() -> None:
    w = diagnose_text(_log(*_tb(
        '  File "/home/u/proj/train.py", line 60, in main', '    model.load_weights("best.h5")',
        f'  File "{SP}/keras/src/models/model.py", line 361, in load_weights',
        "    saving_api.load_weights(self, filepath)",
        f'  File "{SP}/keras/src/legacy/saving/legacy_h5_format.py", line 357, in load_weights_from_hdf5_group',
        "    weight_values = load_subset_weights_from_hdf5_group(f[name])",
        last="KeyError: \"Unable to synchronously open object (object 'dense_1' doesn't exist)\"")))
    assert (w.diagnosis.category, w.diagnosis.rule_id) == ("checkpoint_error", "r20d-hdf5-keras-weights-missing")


RETRY_LINES = [
    "wandb: Network error (SSLError), entering retry loop. [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
    "failed: unable to get local issuer certificate (_ssl.c:1006)",
    "WARNING:urllib3.connectionpool:Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) "
    "after connection broken by 'NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to "
    "establish a new connection: [Errno 99] Cannot assign requested address')': /api/2.0/mlflow/runs/log-metric",
    "WARNING:urllib3.connectionpool:Retrying (Retry(total=3)) after connection broken by "
    "'ProtocolError('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))': /x",
]


def test_retry_warnings_of_a_run_that_goes_on_leave_killed_to_cpu_oom() -> None:
    for line in RETRY_LINES:
        w = diagnose_text(_log(line, "Killed"))
        assert w.diagnosis.category == "cpu_oom", line


def test_pandas_keyerror_in_the_jobs_own_results_code_is_not_a_data_column() -> None:
    w = diagnose_text(_log(*_tb(
        '  File "/home/u/proj/train.py", line 140, in main', '    best = results_df["val_acc"].max()',
        f'  File "{SP}/pandas/core/frame.py", line 4113, in __getitem__', "    indexer = self.columns.get_loc(key)",
        f'  File "{SP}/pandas/core/indexes/base.py", line 3812, in get_loc', "    raise KeyError(key) from err",
        last="KeyError: 'val_acc'")))
    assert w.diagnosis.rule_id != "r20d-pandas-column-missing"


def test_endpoint_that_is_no_object_store_is_left_to_the_model() -> None:
    w = diagnose_text(_log('botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: '
                           '"http://10.0.0.7:8080/api/push"'))
    assert w.diagnosis.rule_id != "r20d-object-store-unreachable"
    r = _rule("r20d-object-store-unreachable")
    assert r.pattern.search('botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: '
                                '"https://storage.googleapis.com/b/x"')


def test_ptxas_warning_that_is_no_raised_error_does_not_fire() -> None:
    r = _rule("r20-tf-xla-libdevice-missing")
    assert not r.pattern.search("W asm_compiler.cc:111] ValueError-free warning: Error: Couldn't invoke ptxas "
                                    "--version")
    assert r.pattern.search("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Couldn't invoke ptxas --version")


def test_verl_and_keras_cardinality_origins() -> None:
    assert _rule("r20-verl-dataloader-empty").origin == "user"
    assert _rule("r20-keras-data-cardinality").origin == "unknown"


def test_older_horovod_mismatched_mpi_operations() -> None:
    w = diagnose_text(_log("horovod.common.exceptions.HorovodInternalError: Mismatched MPI operations: One rank did "
                           "an allreduce, but another rank did an allgather."))
    assert w.diagnosis.rule_id == "r20-horovod-mismatched-collective"


def test_writer_closed_needs_the_event_file_writer_frame() -> None:
    ctx = _rule("r20d-tensorboard-writer-closed").context
    assert ctx is not None and not ctx.search("--logdir runs/tensorboard")


def test_cross_device_rename_of_a_bin_file_is_not_a_checkpoint() -> None:
    r = _rule("r20d-rename-cross-device-checkpoint")
    assert not r.pattern.search("OSError: [Errno 18] Invalid cross-device link: '/tmp/tmpab12' -> "
                                   "'/root/.cache/huggingface/hub/blobs/model.bin'")
