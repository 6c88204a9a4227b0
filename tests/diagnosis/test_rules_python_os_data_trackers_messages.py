"""Round 20 (library sweep D: the Python runtime, the OS, files, data loading, trackers): messages that
end a training job outside the DL frameworks, read from the libraries' sources (CPython 3.11.7, h5py 3.16.0,
Pillow 13.0.0, opencv-python-headless 5.0.0.93, numpy 2.4.6, pandas 3.1.1, pyarrow 26.0.1, wandb 0.31.0,
tensorboard 2.21.0, tensorboardX 2.6.5, mlflow-skinny 3.17.2, requests 2.34.2, urllib3 2.8.0, botocore 1.44.8,
s3fs/fsspec 2026.9.0, gcsfs 2026.10.1, google-cloud-storage 3.17.1), each in a small excerpt written for the test in
the library's format (the raise site is named in each case), not copied from a log. The whole sweep is in
docs/library-sweeps/r20-d.csv."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


_SP = "/usr/local/lib/python3.11/site-packages"


def _log(*lines: str) -> str:
    """An excerpt: the lines joined, with the site-packages prefix written as {SP}."""
    return "\n".join(ln.replace("{SP}", _SP) for ln in lines) + "\n"


#: Most excerpts: a few steps of training, then a traceback from the job's train() (its next line: the call).
_CRASH_IN_TRAIN = (
    '2026-11-20 10:01:02 | INFO | train | world_size=1 batch_size=32 lr=3e-4',
    '2026-11-20 10:04:12 | INFO | train | epoch 1 step 100/5000 loss 2.3412',
    '2026-11-20 10:07:40 | INFO | train | epoch 1 step 200/5000 loss 2.1187',
    'Traceback (most recent call last):',
    '  File "/home/u/proj/train.py", line 212, in <module>',
    '    main()',
    '  File "/home/u/proj/train.py", line 150, in train',
)


CASES = [
    pytest.param(  # cpython RecursionError (pickle) (model-save-raised)
        _log(
            *_CRASH_IN_TRAIN,
            "    torch.save(model, 'ckpt/model.pt')",
            '  File "{SP}/torch/serialization.py", line 100, in _save',
            '    pickler.dump(obj)',
            'RecursionError: maximum recursion depth exceeded while calling a Python object',
        ),
        'checkpoint_error', 'user', id='cpython-model-save-raised-11'),
    pytest.param(  # cpython pickle lambda (r20d-pickling-error)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/usr/local/lib/python3.11/multiprocessing/reduction.py", line 100, in dump',
            '    ForkingPickler(file, protocol).dump(obj)',
            "_pickle.PicklingError: Can't pickle <function <lambda> at 0x7f3a2c1d5e40>: attribute lookup <lambda> on __main__ failed",
        ),
        'semantic_error', 'user', id='cpython-pickling-error-13'),
    pytest.param(  # cpython multiprocessing/context.py:set_start_method (r20d-mp-context-already-set)
        _log(
            *_CRASH_IN_TRAIN,
            "    mp.set_start_method('spawn')",
            '  File "/usr/local/lib/python3.11/multiprocessing/context.py", line 100, in set_start_method',
            "    raise RuntimeError('context has already been set')",
            'RuntimeError: context has already been set',
        ),
        'semantic_error', 'user', id='cpython-mp-context-already-set-17'),
    pytest.param(  # cpython ssl (cert verify) (r20d-ssl-certificate-verify-failed)
        _log(
            *_CRASH_IN_TRAIN,
            '    urllib.request.urlretrieve(URL, dst)',
            '  File "/usr/local/lib/python3.11/urllib/request.py", line 100, in do_open',
            '    raise URLError(err)',
            'urllib.error.URLError: <urlopen error [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate (_ssl.c:1006)>',
        ),
        'comm_error', 'infrastructure', id='cpython-ssl-certificate-verify-failed-19'),
    pytest.param(  # cpython urllib (HTTPError 403) (r20d-http-access-denied)
        _log(
            *_CRASH_IN_TRAIN,
            '    train_set = torchvision.datasets.MNIST(root, download=True)',
            '  File "{SP}/torchvision/datasets/utils.py", line 100, in download_url',
            '    _urlretrieve(url, fpath)',
            '  File "/usr/local/lib/python3.11/urllib/request.py", line 100, in http_error_default',
            '    raise HTTPError(req.full_url, code, msg, hdrs, fp)',
            'urllib.error.HTTPError: HTTP Error 403: Forbidden',
        ),
        'permission_error', 'user', id='cpython-http-access-denied-21'),
    pytest.param(  # h5py h5o.open (object missing) (r20d-hdf5-object-missing)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            "    y = self.f['labels'][i]",
            '  File "{SP}/h5py/_hl/group.py", line 100, in __getitem__',
            '    oid = h5o.open(self.id, self._e(name), lapl=self._lapl)',
            '  File "{SP}/h5py/h5o.pyx", line 100, in h5py.h5o.open',
            '    ',
            'KeyError: "Unable to synchronously open object (object \'labels\' doesn\'t exist)"',
        ),
        'incorrect_input', 'data', id='h5py-hdf5-object-missing-31'),
    pytest.param(  # h5py h5d.read (inflate) (r20d-hdf5-read-failed)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            "    x = self.f['images'][i]",
            '  File "{SP}/h5py/_hl/dataset.py", line 100, in __getitem__',
            '    self.id.read(mspace, fspace, arr, mtype, dxpl=self._dxpl)',
            '  File "{SP}/h5py/h5d.pyx", line 100, in h5py.h5d.DatasetID.read',
            '    ',
            '  File "{SP}/h5py/_proxy.pyx", line 100, in h5py._proxy.dset_rw',
            '    ',
            "OSError: Can't synchronously read data (inflate() failed)",
        ),
        'incorrect_input', 'data', id='h5py-hdf5-read-failed-32'),
    pytest.param(  # h5py h5d.read (EIO) (r20d-hdf5-eio)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            "    x = self.f['images'][i]",
            '  File "{SP}/h5py/_hl/dataset.py", line 100, in __getitem__',
            '    self.id.read(mspace, fspace, arr, mtype, dxpl=self._dxpl)',
            '  File "{SP}/h5py/h5d.pyx", line 100, in h5py.h5d.DatasetID.read',
            '    ',
            '  File "{SP}/h5py/_proxy.pyx", line 100, in h5py._proxy.dset_rw',
            '    ',
            "OSError: [Errno 5] Can't synchronously read data (file read failed: time = Fri Nov 20 10:08:01 2026",
            ", filename = '/mnt/lustre/data/train.h5', file descriptor = 7, errno = 5, error message = 'Input/output error', buf = 0x7f1b2c000000, total read size = 602112, bytes this sub-read = 602112, bytes actually read = 18446744073709551615, offset = 0)",
        ),
        'storage_error', 'infrastructure', id='h5py-hdf5-eio-33'),
    pytest.param(  # pillow JpegImagePlugin.py:_save (r20d-pil-cannot-write-mode)
        _log(
            *_CRASH_IN_TRAIN,
            "    img.save(os.path.join(out_dir, f'{i:05d}.jpg'))",
            '  File "{SP}/PIL/Image.py", line 100, in save',
            '    save_handler(self, fp, filename)',
            '  File "{SP}/PIL/JpegImagePlugin.py", line 100, in _save',
            '    raise OSError(msg) from e',
            'OSError: cannot write mode RGBA as JPEG',
        ),
        'semantic_error', 'user', id='pillow-pil-cannot-write-mode-39'),
    pytest.param(  # pillow PngImagePlugin.py:_safe_zlib_decompress (r20d-pil-png-text-chunk)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            "    img = Image.open(path).convert('RGB')",
            '  File "{SP}/PIL/PngImagePlugin.py", line 100, in _safe_zlib_decompress',
            '    raise ValueError(msg)',
            'ValueError: Decompressed data too large for PngImagePlugin.MAX_TEXT_CHUNK',
        ),
        'incorrect_input', 'data', id='pillow-pil-png-text-chunk-40'),
    pytest.param(  # pillow Image.py:_getdecoder (r20d-pil-codec-not-available)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            "    img = Image.open(path).convert('RGB')",
            '  File "{SP}/PIL/ImageFile.py", line 100, in load',
            '    decoder = Image._getdecoder(',
            '  File "{SP}/PIL/Image.py", line 100, in _getdecoder',
            '    raise OSError(msg) from e',
            'OSError: decoder jpeg2k not available',
        ),
        'import_error', 'user', id='pillow-pil-codec-not-available-41'),
    pytest.param(  # opencv core alloc.cpp:OutOfMemoryError (r20d-opencv-insufficient-memory)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            '    img = cv2.resize(img, (w * 8, h * 8))',
            "cv2.error: OpenCV(4.10.0) /io/opencv/modules/core/src/alloc.cpp:73: error: (-4:Insufficient memory) Failed to allocate 3732480000 bytes in function 'OutOfMemoryError'",
        ),
        'cpu_oom', 'user', id='opencv-opencv-insufficient-memory-46'),
    pytest.param(  # opencv imread overload (bad arg) (r20d-opencv-bad-argument)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            '    img = cv2.imread(self.items[i])',
            "cv2.error: OpenCV(4.10.0) :-1: error: (-5:Bad argument) in function 'imread'",
            '> Overload resolution failed:',
            ">  - Can't convert object to 'str' for 'filename'",
        ),
        'semantic_error', 'user', id='opencv-opencv-bad-argument-47'),
    pytest.param(  # numpy __init__.py:__getattr__ (former alias) (r20d-numpy-alias-in-job-code)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            '    mask = mask.astype(np.bool)',
            '  File "{SP}/numpy/__init__.py", line 100, in __getattr__',
            '    raise AttributeError(__former_attrs__[attr], name=None)',
            "AttributeError: module 'numpy' has no attribute 'bool'.",
            '`np.bool` was a deprecated alias for the builtin `bool`. To avoid this error in existing code, use `bool` by itself. Doing this will not modify any behavior and is safe. If you specifically wanted the numpy scalar type, use `np.bool_` here.',
            'The aliases was originally deprecated in NumPy 1.20; for more details and guidance see the original release note at:',
            '    https://numpy.org/devdocs/release/1.20.0-notes.html#deprecations',
        ),
        'semantic_error', 'user', id='numpy-numpy-alias-in-job-code-49'),
    pytest.param(  # numpy __init__.py:__getattr__ (expired in 2.0) (r20d-numpy-alias-in-job-code)
        _log(
            *_CRASH_IN_TRAIN,
            '    loss = loss if np.isfinite(loss) else np.NaN',
            '  File "{SP}/numpy/__init__.py", line 100, in __getattr__',
            '    raise AttributeError(',
            'AttributeError: `np.NaN` was removed in the NumPy 2.0 release. Use `np.nan` instead.',
        ),
        'semantic_error', 'user', id='numpy-numpy-alias-in-job-code-50'),
    pytest.param(  # numpy mmap (np.load mmap_mode) (r20d-mmap-file-too-short)
        _log(
            *_CRASH_IN_TRAIN,
            "    tokens = np.load(args.train_bin, mmap_mode='r')",
            '  File "{SP}/numpy/lib/_npyio_impl.py", line 100, in load',
            '    return format.open_memmap(file, mode=mmap_mode,',
            '  File "{SP}/numpy/_core/memmap.py", line 100, in __new__',
            '    mm = mmap.mmap(fid.fileno(), bytes, access=acc, offset=start)',
            'ValueError: mmap length is greater than file size',
        ),
        'incorrect_input', 'data', id='numpy-mmap-file-too-short-55'),
    pytest.param(  # pandas core/indexes/base.py:get_loc (missing column) (r20d-pandas-column-missing)
        _log(
            '2026-11-20 10:01:02 | INFO | train | world_size=1 batch_size=32 lr=3e-4',
            '2026-11-20 10:01:05 | INFO | train | reading /data/meta/train.csv',
            'Traceback (most recent call last):',
            '  File "/home/u/proj/train.py", line 212, in <module>',
            '    main()',
            '  File "/home/u/proj/train.py", line 150, in train',
            '    for x, y in loader:',
            '  File "/home/u/proj/data.py", line 40, in __getitem__',
            "    return self.df['label'].values[i]",
            '  File "{SP}/pandas/core/frame.py", line 100, in __getitem__',
            '    indexer = self.columns.get_loc(key)',
            '  File "{SP}/pandas/core/indexes/base.py", line 100, in get_loc',
            '    raise KeyError(key) from err',
            "KeyError: 'label'",
        ),
        'incorrect_input', 'data', id='pandas-pandas-column-missing-59'),
    pytest.param(  # pyarrow memory_pool.cc (malloc) (r20d-pyarrow-malloc-failed)
        _log(
            *_CRASH_IN_TRAIN,
            '    table = pq.read_table(args.train_parquet)',
            '  File "{SP}/pyarrow/parquet/core.py", line 100, in read_table',
            '    dataset = ParquetDataset(',
            '  File "{SP}/pyarrow/error.pxi", line 100, in pyarrow.lib.pyarrow_internal_check_status',
            '    ',
            '  File "{SP}/pyarrow/error.pxi", line 100, in pyarrow.lib.check_status',
            '    ',
            'pyarrow.lib.ArrowMemoryError: malloc of size 34359738368 failed',
        ),
        'cpu_oom', 'user', id='pyarrow-pyarrow-malloc-failed-66'),
    pytest.param(  # pyarrow s3fs.cc (AWS access denied) (r20d-http-access-denied)
        _log(
            *_CRASH_IN_TRAIN,
            "    dataset = ds.dataset(args.train_uri, format='parquet')",
            '  File "{SP}/pyarrow/dataset.py", line 100, in dataset',
            '    return _filesystem_dataset(source, **kwargs)',
            '  File "{SP}/pyarrow/_fs.pyx", line 100, in pyarrow._fs.FileSystem.get_file_info',
            '    ',
            '  File "{SP}/pyarrow/error.pxi", line 100, in pyarrow.lib.check_status',
            '    ',
            "OSError: When getting information for key 'train/part-00000.parquet' in bucket 'ml-datasets': AWS Error ACCESS_DENIED during HeadObject operation: No response body.",
        ),
        'permission_error', 'user', id='pyarrow-http-access-denied-69'),
    pytest.param(  # pyarrow s3fs.cc (AWS network) (r20d-object-store-unreachable)
        _log(
            *_CRASH_IN_TRAIN,
            "    dataset = ds.dataset(args.train_uri, format='parquet')",
            '  File "{SP}/pyarrow/dataset.py", line 100, in dataset',
            '    return _filesystem_dataset(source, **kwargs)',
            '  File "{SP}/pyarrow/_fs.pyx", line 100, in pyarrow._fs.FileSystem.get_file_info',
            '    ',
            '  File "{SP}/pyarrow/error.pxi", line 100, in pyarrow.lib.check_status',
            '    ',
            "OSError: When reading information for key 'train/part-00000.parquet' in bucket 'ml-datasets': AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 28, Timeout was reached",
        ),
        'storage_error', 'infrastructure', id='pyarrow-object-store-unreachable-70'),
    pytest.param(  # wandb sdk/lib/wbauth/authenticate.py:authenticate_session (r20d-wandb-no-api-key)
        _log(
            *_CRASH_IN_TRAIN,
            '    wandb.init(project=args.project, config=vars(args))',
            '  File "{SP}/wandb/sdk/wandb_init.py", line 100, in init',
            '    wi.maybe_login(init_settings)',
            '  File "{SP}/wandb/sdk/wandb_login.py", line 100, in _login',
            '    wlogin.login_or_prompt()',
            '  File "{SP}/wandb/sdk/lib/wbauth/authenticate.py", line 100, in authenticate_session',
            '    raise UsageError(',
            'wandb.errors.errors.UsageError: No API key configured. Use `wandb login` to log in.',
        ),
        'permission_error', 'user', id='wandb-wandb-no-api-key-71'),
    pytest.param(  # wandb sdk/wandb_config.py:_sanitize (r20d-wandb-config-value-change)
        _log(
            *_CRASH_IN_TRAIN,
            "    wandb.config.update({'lr': scheduler.get_last_lr()[0]})",
            '  File "{SP}/wandb/sdk/wandb_config.py", line 100, in update',
            '    sanitized = self._update(d, allow_val_change)',
            '  File "{SP}/wandb/sdk/wandb_config.py", line 100, in _sanitize',
            '    raise config_util.ConfigError(',
            'wandb.sdk.lib.config_util.ConfigError: Attempted to change value of key "lr" from 0.0003 to 0.00015',
            'If you really want to do this, pass allow_val_change=True to config.update()',
        ),
        'semantic_error', 'user', id='wandb-wandb-config-value-change-75'),
    pytest.param(  # torch.utils.tensorboard torch/utils/tensorboard/__init__.py (old setuptools/distutils) (r20d-library-import-module-attribute)
        _log(
            '2026-11-20 10:01:02 | INFO | train | world_size=1 batch_size=32 lr=3e-4',
            'Traceback (most recent call last):',
            '  File "/home/u/proj/train.py", line 14, in <module>',
            '    from torch.utils.tensorboard import SummaryWriter',
            '  File "{SP}/torch/utils/tensorboard/__init__.py", line 4, in <module>',
            '    LooseVersion = distutils.version.LooseVersion',
            "AttributeError: module 'distutils' has no attribute 'version'",
        ),
        'import_error', 'user', id='torch-utils-tensorboard-library-import-module-attribute-80'),
    pytest.param(  # tensorboard summary/writer/event_file_writer.py:_AsyncWriter.write (r20d-tensorboard-writer-closed)
        _log(
            *_CRASH_IN_TRAIN,
            "    writer.add_scalar('val/acc', acc, epoch)",
            '  File "{SP}/torch/utils/tensorboard/writer.py", line 100, in add_scalar',
            '    self._get_file_writer().add_summary(summary, global_step, walltime)',
            '  File "{SP}/tensorboard/summary/writer/event_file_writer.py", line 100, in write',
            '    raise IOError("Writer is closed")',
            'OSError: Writer is closed',
        ),
        'semantic_error', 'user', id='tensorboard-tensorboard-writer-closed-81'),
    pytest.param(  # mlflow utils/rest_utils.py:http_request (exception) (r20d-mlflow-request-failed)
        _log(
            *_CRASH_IN_TRAIN,
            "    mlflow.log_metric('loss', loss.item(), step=step)",
            '  File "{SP}/mlflow/tracking/fluent.py", line 100, in log_metric',
            '    return MlflowClient().log_metric(',
            '  File "{SP}/mlflow/store/tracking/rest_store.py", line 100, in log_metric',
            '    self._call_endpoint(LogMetric, req_body)',
            '  File "{SP}/mlflow/utils/rest_utils.py", line 100, in http_request',
            '    raise MlflowException(f"API request to {url} failed with exception {e}")',
            "mlflow.exceptions.MlflowException: API request to http://mlflow.internal:5000/api/2.0/mlflow/runs/log-metric failed with exception HTTPConnectionPool(host='mlflow.internal', port=5000): Max retries exceeded with url: /api/2.0/mlflow/runs/log-metric (Caused by ResponseError('too many 503 error responses'))",
        ),
        'comm_error', 'infrastructure', id='mlflow-mlflow-request-failed-83'),
    pytest.param(  # mlflow utils/rest_utils.py:http_request (timeout) (r20d-mlflow-request-failed)
        _log(
            *_CRASH_IN_TRAIN,
            "    mlflow.log_metric('loss', loss.item(), step=step)",
            '  File "{SP}/mlflow/tracking/fluent.py", line 100, in log_metric',
            '    return MlflowClient().log_metric(',
            '  File "{SP}/mlflow/store/tracking/rest_store.py", line 100, in log_metric',
            '    self._call_endpoint(LogMetric, req_body)',
            '  File "{SP}/mlflow/utils/rest_utils.py", line 100, in http_request',
            '    raise MlflowException(',
            "mlflow.exceptions.MlflowException: API request to http://mlflow.internal:5000/api/2.0/mlflow/runs/log-metric failed with timeout exception HTTPConnectionPool(host='mlflow.internal', port=5000): Read timed out. (read timeout=120). To increase the timeout, set the environment variable MLFLOW_HTTP_REQUEST_TIMEOUT to a larger value.",
        ),
        'comm_error', 'infrastructure', id='mlflow-mlflow-request-failed-84'),
    pytest.param(  # mlflow utils/rest_utils.py:verify_rest_response (401) (r20d-mlflow-request-denied)
        _log(
            *_CRASH_IN_TRAIN,
            '    mlflow.set_experiment(args.experiment)',
            '  File "{SP}/mlflow/tracking/fluent.py", line 100, in set_experiment',
            '    experiment = client.get_experiment_by_name(experiment_name)',
            '  File "{SP}/mlflow/utils/rest_utils.py", line 100, in verify_rest_response',
            '    raise MlflowException(',
            "mlflow.exceptions.MlflowException: API request to endpoint /api/2.0/mlflow/experiments/get-by-name failed with error code 401 != 200. Response body: 'You are not authenticated. Please see https://www.mlflow.org/docs/latest/auth/index.html#authenticating-to-mlflow on how to authenticate.'",
        ),
        'permission_error', 'user', id='mlflow-mlflow-request-denied-85'),
    pytest.param(  # mlflow utils/rest_utils.py:verify_rest_response (403) (r20d-mlflow-request-denied)
        _log(
            *_CRASH_IN_TRAIN,
            '    mlflow.start_run(run_name=args.run_name)',
            '  File "{SP}/mlflow/tracking/fluent.py", line 100, in start_run',
            '    active_run_obj = client.create_run(',
            '  File "{SP}/mlflow/utils/rest_utils.py", line 100, in verify_rest_response',
            '    raise MlflowException(',
            "mlflow.exceptions.MlflowException: API request to endpoint /api/2.0/mlflow/runs/create failed with error code 403 != 200. Response body: 'Permission denied'",
        ),
        'permission_error', 'user', id='mlflow-mlflow-request-denied-86'),
    pytest.param(  # mlflow utils/rest_utils.py:verify_rest_response (503) (r20d-mlflow-request-failed)
        _log(
            *_CRASH_IN_TRAIN,
            "    mlflow.log_metric('loss', loss.item(), step=step)",
            '  File "{SP}/mlflow/tracking/fluent.py", line 100, in log_metric',
            '    return MlflowClient().log_metric(',
            '  File "{SP}/mlflow/store/tracking/rest_store.py", line 100, in log_metric',
            '    self._call_endpoint(LogMetric, req_body)',
            '  File "{SP}/mlflow/utils/rest_utils.py", line 100, in verify_rest_response',
            '    raise MlflowException(',
            "mlflow.exceptions.MlflowException: API request to endpoint /api/2.0/mlflow/runs/log-metric failed with error code 503 != 200. Response body: 'upstream connect error or disconnect/reset before headers. reset reason: connection failure'",
        ),
        'comm_error', 'infrastructure', id='mlflow-mlflow-request-failed-87'),
    pytest.param(  # mlflow store/tracking (param changed, RestException) (r20d-mlflow-request-rejected)
        _log(
            *_CRASH_IN_TRAIN,
            '    mlflow.log_params(vars(args))',
            '  File "{SP}/mlflow/tracking/fluent.py", line 100, in log_params',
            '    MlflowClient().log_batch(run_id=run_id, metrics=[], params=params_arr, tags=[], synchronous=synchronous)',
            '  File "{SP}/mlflow/utils/rest_utils.py", line 100, in verify_rest_response',
            '    raise RestException(json.loads(response.text))',
            "mlflow.exceptions.RestException: INVALID_PARAMETER_VALUE: Changing param values is not allowed. Param with key='lr' was already logged with value='0.0003' for run ID='5f1c2d9a8b7e4f60a1b2c3d4e5f60718'. Attempted logging new value '0.0001'.",
        ),
        'semantic_error', 'user', id='mlflow-mlflow-request-rejected-88'),
    pytest.param(  # mlflow store/tracking (run not found, RestException) (r20d-mlflow-request-rejected)
        _log(
            *_CRASH_IN_TRAIN,
            '    mlflow.start_run(run_id=args.resume_run_id)',
            '  File "{SP}/mlflow/tracking/fluent.py", line 100, in start_run',
            '    active_run_obj = client.get_run(existing_run_id)',
            '  File "{SP}/mlflow/utils/rest_utils.py", line 100, in verify_rest_response',
            '    raise RestException(json.loads(response.text))',
            "mlflow.exceptions.RestException: RESOURCE_DOES_NOT_EXIST: Run '5f1c2d9a8b7e4f60a1b2c3d4e5f60718' not found",
        ),
        'semantic_error', 'user', id='mlflow-mlflow-request-rejected-89'),
    pytest.param(  # requests adapters.py:send (SSLError) (r20d-ssl-certificate-verify-failed)
        _log(
            *_CRASH_IN_TRAIN,
            '    resp = requests.get(args.data_url, timeout=30)',
            '  File "{SP}/requests/api.py", line 100, in get',
            '    return request("get", url, params=params, **kwargs)',
            '  File "{SP}/requests/sessions.py", line 100, in send',
            '    r = adapter.send(request, **kwargs)',
            '  File "{SP}/requests/adapters.py", line 100, in send',
            '    raise SSLError(e, request=request)',
            "requests.exceptions.SSLError: HTTPSConnectionPool(host='data.example.org', port=443): Max retries exceeded with url: /shards/train-0001.tar (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate (_ssl.c:1006)')))",
        ),
        'comm_error', 'infrastructure', id='requests-ssl-certificate-verify-failed-95'),
    pytest.param(  # requests models.py:iter_content (IncompleteRead) (r20d-http-connection-broken)
        _log(
            *_CRASH_IN_TRAIN,
            '    for chunk in resp.iter_content(chunk_size=1 << 20):',
            '  File "{SP}/requests/models.py", line 100, in generate',
            '    raise ChunkedEncodingError(e)',
            "requests.exceptions.ChunkedEncodingError: ('Connection broken: IncompleteRead(10485760 bytes read, 4194304 more expected)', IncompleteRead(10485760 bytes read, 4194304 more expected))",
        ),
        'comm_error', 'infrastructure', id='requests-http-connection-broken-98'),
    pytest.param(  # urllib3 connectionpool.py:urlopen (ProtocolError) (r20d-http-connection-broken)
        _log(
            *_CRASH_IN_TRAIN,
            "    resp = http.request('GET', url)",
            '  File "{SP}/urllib3/connectionpool.py", line 100, in urlopen',
            '    raise new_e',
            "urllib3.exceptions.ProtocolError: ('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))",
        ),
        'comm_error', 'infrastructure', id='urllib3-http-connection-broken-102'),
    pytest.param(  # botocore credentials (NoCredentialsError) (r20d-cloud-credentials-missing)
        _log(
            *_CRASH_IN_TRAIN,
            '    s3.download_file(bucket, key, local)',
            '  File "{SP}/boto3/s3/inject.py", line 100, in download_file',
            '    return transfer.download_file(',
            '  File "{SP}/botocore/auth.py", line 100, in add_auth',
            '    raise NoCredentialsError()',
            'botocore.exceptions.NoCredentialsError: Unable to locate credentials',
        ),
        'permission_error', 'user', id='botocore-cloud-credentials-missing-103'),
    pytest.param(  # botocore exceptions.py:ClientError (NoSuchKey data) (r20d-object-store-key-missing)
        _log(
            *_CRASH_IN_TRAIN,
            '    obj = s3.get_object(Bucket=bucket, Key=key)',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            '    obj = self.s3.get_object(Bucket=self.bucket, Key=self.keys[i])',
            '  File "{SP}/botocore/client.py", line 100, in _make_api_call',
            '    raise error_class(parsed_response, operation_name)',
            'botocore.exceptions.ClientError: An error occurred (NoSuchKey) when calling the GetObject operation: The specified key does not exist.',
        ),
        'incorrect_input', 'data', id='botocore-object-store-key-missing-106'),
    pytest.param(  # botocore exceptions.py:ClientError (404 HeadObject checkpoint) (r20d-object-store-checkpoint-missing)
        _log(
            '2026-11-20 10:01:02 | INFO | train | world_size=1 batch_size=32 lr=3e-4',
            '2026-11-20 10:01:03 | INFO | train | resuming from s3://ml-ckpt/ckpt/step_12000.pt',
            'Traceback (most recent call last):',
            '  File "/home/u/proj/train.py", line 212, in <module>',
            '    main()',
            '  File "/home/u/proj/train.py", line 150, in train',
            "    s3.download_file(bucket, f'ckpt/{args.resume}.pt', '/tmp/resume.pt')",
            '  File "{SP}/boto3/s3/inject.py", line 100, in download_file',
            '    return transfer.download_file(',
            '  File "{SP}/botocore/client.py", line 100, in _make_api_call',
            '    raise error_class(parsed_response, operation_name)',
            'botocore.exceptions.ClientError: An error occurred (404) when calling the HeadObject operation: Not Found',
        ),
        'checkpoint_error', 'user', id='botocore-object-store-checkpoint-missing-107'),
    pytest.param(  # botocore exceptions.py:ClientError (ExpiredToken) (r20d-cloud-credentials-missing)
        _log(
            *_CRASH_IN_TRAIN,
            '    s3.upload_file(local, bucket, key)',
            '  File "{SP}/boto3/s3/inject.py", line 100, in upload_file',
            '    return transfer.upload_file(',
            '  File "{SP}/botocore/client.py", line 100, in _make_api_call',
            '    raise error_class(parsed_response, operation_name)',
            'botocore.exceptions.ClientError: An error occurred (ExpiredToken) when calling the PutObject operation: The provided token has expired.',
        ),
        'permission_error', 'user', id='botocore-cloud-credentials-missing-108'),
    pytest.param(  # botocore exceptions.py:ClientError (SlowDown, retries) (r20d-object-store-server-error)
        _log(
            *_CRASH_IN_TRAIN,
            '    s3.upload_file(local, bucket, key)',
            '  File "{SP}/boto3/s3/inject.py", line 100, in upload_file',
            '    return transfer.upload_file(',
            '  File "{SP}/botocore/client.py", line 100, in _make_api_call',
            '    raise error_class(parsed_response, operation_name)',
            'botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject operation (reached max retries: 4): Please reduce your request rate.',
        ),
        'comm_error', 'infrastructure', id='botocore-object-store-server-error-109'),
    pytest.param(  # botocore exceptions.py:EndpointConnectionError (r20d-object-store-unreachable)
        _log(
            *_CRASH_IN_TRAIN,
            '    s3.download_file(bucket, key, local)',
            '  File "{SP}/boto3/s3/inject.py", line 100, in download_file',
            '    return transfer.download_file(',
            '  File "{SP}/botocore/httpsession.py", line 100, in send',
            '    raise EndpointConnectionError(endpoint_url=request.url, error=e)',
            'botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "https://ml-data.s3.us-east-1.amazonaws.com/train/shard-0001.tar"',
        ),
        'storage_error', 'infrastructure', id='botocore-object-store-unreachable-110'),
    pytest.param(  # botocore exceptions.py:ReadTimeoutError (r20d-object-store-unreachable)
        _log(
            *_CRASH_IN_TRAIN,
            '    s3.download_file(bucket, key, local)',
            '  File "{SP}/boto3/s3/inject.py", line 100, in download_file',
            '    return transfer.download_file(',
            '  File "{SP}/botocore/httpsession.py", line 100, in send',
            '    raise ReadTimeoutError(endpoint_url=request.url, error=e)',
            'botocore.exceptions.ReadTimeoutError: Read timeout on endpoint URL: "https://ml-data.s3.us-east-1.amazonaws.com/train/shard-0001.tar"',
        ),
        'storage_error', 'infrastructure', id='botocore-object-store-unreachable-111'),
    pytest.param(  # botocore exceptions.py:NoRegionError (r20d-botocore-no-region)
        _log(
            *_CRASH_IN_TRAIN,
            "    s3 = boto3.client('s3')",
            '  File "{SP}/boto3/__init__.py", line 100, in client',
            '    return _get_default_session().client(*args, **kwargs)',
            '  File "{SP}/botocore/regions.py", line 100, in _get_regional_endpoint',
            '    raise NoRegionError()',
            'botocore.exceptions.NoRegionError: You must specify a region.',
        ),
        'semantic_error', 'user', id='botocore-botocore-no-region-112'),
    pytest.param(  # botocore exceptions.py:ProfileNotFound (r20d-cloud-credentials-missing)
        _log(
            *_CRASH_IN_TRAIN,
            '    session = boto3.Session(profile_name=args.aws_profile)',
            '  File "{SP}/botocore/session.py", line 100, in _get_profile_config',
            '    raise ProfileNotFound(profile=profile_name)',
            'botocore.exceptions.ProfileNotFound: The config profile (ml-train) could not be found',
        ),
        'permission_error', 'user', id='botocore-cloud-credentials-missing-113'),
    pytest.param(  # google-auth google/auth/_default.py:default (r20d-cloud-credentials-missing)
        _log(
            *_CRASH_IN_TRAIN,
            '    client = storage.Client()',
            '  File "{SP}/google/cloud/storage/client.py", line 100, in __init__',
            '    super(Client, self).__init__(',
            '  File "{SP}/google/auth/_default.py", line 100, in default',
            '    raise exceptions.DefaultCredentialsError(_CLOUD_SDK_MISSING_CREDENTIALS)',
            'google.auth.exceptions.DefaultCredentialsError: Your default credentials were not found. To set up Application Default Credentials, see https://cloud.google.com/docs/authentication/external/set-up-adc for more information.',
        ),
        'permission_error', 'user', id='google-auth-cloud-credentials-missing-121'),
    pytest.param(  # google-cloud-storage api_core exceptions (404 data) (r20d-object-store-key-missing)
        _log(
            *_CRASH_IN_TRAIN,
            '    blob.download_to_filename(local)',
            '  File "{SP}/google/cloud/storage/blob.py", line 100, in download_to_filename',
            '    self._handle_filename_and_download(',
            '  File "{SP}/google/cloud/storage/blob.py", line 100, in _prep_and_do_download',
            '    _raise_from_invalid_response(exc)',
            "google.api_core.exceptions.NotFound: 404 GET https://storage.googleapis.com/download/storage/v1/b/ml-data/o/train%2Fshard-0001.tar?alt=media: No such object: ml-data/train/shard-0001.tar: ('Request failed with status code', 404, 'Expected one of', <HTTPStatus.OK: 200>, <HTTPStatus.PARTIAL_CONTENT: 206>)",
        ),
        'incorrect_input', 'data', id='google-cloud-storage-object-store-key-missing-123'),
    pytest.param(  # google-cloud-storage api_core exceptions (503) (r20d-object-store-server-error)
        _log(
            *_CRASH_IN_TRAIN,
            '    blob.upload_from_filename(local)',
            '  File "{SP}/google/cloud/storage/blob.py", line 100, in upload_from_filename',
            '    self._handle_filename_and_upload(',
            '  File "{SP}/google/cloud/storage/blob.py", line 100, in _prep_and_do_upload',
            '    _raise_from_invalid_response(exc)',
            "google.api_core.exceptions.ServiceUnavailable: 503 POST https://storage.googleapis.com/upload/storage/v1/b/ml-ckpt/o?uploadType=resumable: We encountered an internal error. Please try again.: ('Request failed with status code', 503, 'Expected one of', <HTTPStatus.OK: 200>, <HTTPStatus.CREATED: 201>)",
        ),
        'comm_error', 'infrastructure', id='google-cloud-storage-object-store-server-error-124'),
    pytest.param(  # h5py h5f.open (truncated, a data file named .h5 in the log) (data-malformed)
        _log(
            '2026-11-20 10:01:02 | INFO | train | world_size=1 batch_size=32 lr=3e-4',
            '2026-11-20 10:01:03 | INFO | data | loading /data/train_07.h5',
            'Traceback (most recent call last):',
            '  File "/home/u/proj/train.py", line 212, in <module>',
            '    main()',
            '  File "/home/u/proj/train.py", line 150, in train',
            '    train_set = H5Dataset(args.train_h5)',
            '  File "/home/u/proj/data.py", line 100, in __init__',
            "    self.f = h5py.File(path, 'r')",
            '  File "{SP}/h5py/_hl/files.py", line 100, in __init__',
            '    fid = make_fid(name, mode, userblock_size, fapl, fcpl, swmr=swmr)',
            '  File "{SP}/h5py/_hl/files.py", line 100, in make_fid',
            '    fid = h5f.open(name, flags, fapl=fapl)',
            '  File "{SP}/h5py/_objects.pyx", line 100, in h5py._objects.with_phil.wrapper',
            '    ',
            '  File "{SP}/h5py/h5f.pyx", line 100, in h5py.h5f.open',
            '    ',
            'OSError: Unable to synchronously open file (truncated file: eof = 2097152, sblock->base_addr = 0, stored_eof = 9011232)',
        ),
        'incorrect_input', 'data', id='h5py-data-malformed-125'),
    pytest.param(  # cpython pickle lambda in torch.save (C3) (model-save-raised)
        _log(
            *_CRASH_IN_TRAIN,
            "    torch.save(model, f'ckpt/model_{epoch}.pt')",
            '  File "{SP}/torch/serialization.py", line 100, in save',
            '    _save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)',
            '  File "{SP}/torch/serialization.py", line 100, in _save',
            '    pickler.dump(obj)',
            "_pickle.PicklingError: Can't pickle <function <lambda> at 0x7f3a2c1d5e40>: attribute lookup <lambda> on __main__ failed",
        ),
        'checkpoint_error', 'user', id='cpython-model-save-raised-126'),
    pytest.param(  # numpy __init__.py:__getattr__ (former alias, raised inside an installed library) (r20d-numpy-alias-in-job-code)
        _log(
            *_CRASH_IN_TRAIN,
            '    for batch in loader:',
            '  File "/home/u/proj/data.py", line 100, in __getitem__',
            '    img = self.aug(image=img)',
            '  File "{SP}/imgaug/augmenters/meta.py", line 100, in augment_image',
            '    return self.augment_images([image])[0]',
            '  File "{SP}/numpy/__init__.py", line 100, in __getattr__',
            '    raise AttributeError(__former_attrs__[attr], name=None)',
            "AttributeError: module 'numpy' has no attribute 'bool'.",
            '`np.bool` was a deprecated alias for the builtin `bool`. To avoid this error in existing code, use `bool` by itself. Doing this will not modify any behavior and is safe. If you specifically wanted the numpy scalar type, use `np.bool_` here.',
            'The aliases was originally deprecated in NumPy 1.20; for more details and guidance see the original release note at:',
            '    https://numpy.org/devdocs/release/1.20.0-notes.html#deprecations',
        ),
        'semantic_error', 'user', id='numpy-numpy-alias-in-job-code-127'),
    pytest.param(  # numpy __init__.py:__getattr__ (former alias at a library's import) (numpy2-removed-alias)
        _log(
            '2026-11-20 10:01:02 | INFO | train | world_size=1 batch_size=32 lr=3e-4',
            'Traceback (most recent call last):',
            '  File "/home/u/proj/train.py", line 9, in <module>',
            '    import imgaug.augmenters as iaa',
            '  File "{SP}/imgaug/imgaug.py", line 45, in <module>',
            '    NP_FLOAT_TYPES = set(np.sctypes["float"])',
            '  File "{SP}/numpy/__init__.py", line 397, in __getattr__',
            '    raise AttributeError(',
            'AttributeError: `np.sctypes` was removed in the NumPy 2.0 release. Access dtypes explicitly instead.',
        ),
        'import_error', 'user', id='numpy-numpy2-removed-alias-128'),
    pytest.param(  # numpy __init__.py:__getattr__ (expired, at the job script's module level) (r20d-numpy-alias-in-job-code)
        _log(
            '2026-11-20 10:01:02 | INFO | train | world_size=1 batch_size=32 lr=3e-4',
            'Traceback (most recent call last):',
            '  File "/home/u/proj/train.py", line 31, in <module>',
            '    EPS = np.finfo(np.float_).eps',
            '  File "{SP}/numpy/__init__.py", line 400, in __getattr__',
            '    raise AttributeError(',
            'AttributeError: `np.float_` was removed in the NumPy 2.0 release. Use `np.float64` instead.',
        ),
        'semantic_error', 'user', id='numpy-numpy-alias-in-job-code-129'),
    pytest.param(  # cpython os.rename (EXDEV) (r20d-rename-cross-device-checkpoint)
        _log(
            *_CRASH_IN_TRAIN,
            '    os.rename(tmp_path, final_path)',
            "OSError: [Errno 18] Invalid cross-device link: '/tmp/ckpt_tmp.pt' -> '/mnt/ckpt/step_1000.pt'",
        ),
        'checkpoint_error', 'user', id='cpython-rename-cross-device-checkpoint-132'),
    pytest.param(  # cpython socket bind (EADDRNOTAVAIL) (r20d-bind-address-not-available)
        _log(
            *_CRASH_IN_TRAIN,
            '    server = HTTPServer((args.host, args.port), Handler)',
            '  File "/usr/local/lib/python3.11/socketserver.py", line 100, in server_bind',
            '    self.socket.bind(self.server_address)',
            'OSError: [Errno 99] Cannot assign requested address',
        ),
        'comm_error', 'user', id='cpython-bind-address-not-available-134'),
    pytest.param(  # cpython pickle (> 4 GiB bytes, protocol < 4) in torch.save (model-save-raised)
        _log(
            *_CRASH_IN_TRAIN,
            "    torch.save(state, 'ckpt/last.pt', pickle_protocol=2)",
            '  File "{SP}/torch/serialization.py", line 100, in save',
            '    _save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)',
            '  File "{SP}/torch/serialization.py", line 100, in _save',
            '    pickler.dump(obj)',
            'OverflowError: cannot serialize a bytes object larger than 4 GiB',
        ),
        'checkpoint_error', 'user', id='cpython-model-save-raised-137'),
    pytest.param(  # h5py h5f.create (file already open) (r20d-hdf5-file-already-open)
        _log(
            *_CRASH_IN_TRAIN,
            "    with h5py.File(args.cache, 'w') as f:",
            '  File "{SP}/h5py/_hl/files.py", line 100, in __init__',
            '    fid = make_fid(name, mode, userblock_size, fapl, fcpl, swmr=swmr)',
            '  File "{SP}/h5py/_hl/files.py", line 100, in make_fid',
            '    fid = h5f.create(name, h5f.ACC_TRUNC, fapl=fapl, fcpl=fcpl)',
            '  File "{SP}/h5py/h5f.pyx", line 100, in h5py.h5f.create',
            '    ',
            'OSError: Unable to synchronously create file (unable to truncate a file which is already open)',
        ),
        'semantic_error', 'user', id='h5py-hdf5-file-already-open-138'),
    pytest.param(  # requests models.py:prepare_url (MissingSchema) (r20d-requests-bad-url)
        _log(
            *_CRASH_IN_TRAIN,
            '    resp = requests.get(args.data_url, timeout=30)',
            '  File "{SP}/requests/api.py", line 100, in get',
            '    return request("get", url, params=params, **kwargs)',
            '  File "{SP}/requests/models.py", line 100, in prepare_url',
            '    raise MissingSchema(',
            "requests.exceptions.MissingSchema: Invalid URL 'None': No scheme supplied. Perhaps you meant https://None?",
        ),
        'semantic_error', 'user', id='requests-requests-bad-url-140'),
    pytest.param(  # mlflow utils/validation.py:_validate_length_limit (r20d-mlflow-request-rejected)
        _log(
            *_CRASH_IN_TRAIN,
            '    mlflow.log_params(vars(args))',
            '  File "{SP}/mlflow/tracking/fluent.py", line 100, in log_params',
            '    MlflowClient().log_batch(run_id=run_id, metrics=[], params=params_arr, tags=[], synchronous=synchronous)',
            '  File "{SP}/mlflow/utils/validation.py", line 100, in _validate_length_limit',
            '    raise MlflowException(',
            "mlflow.exceptions.MlflowException: 'Param value' exceeds the maximum length of 6000 characters",
        ),
        'semantic_error', 'user', id='mlflow-mlflow-request-rejected-141'),
    pytest.param(  # cpython os.rename (EXDEV, a results file) (r20d-rename-cross-device)
        _log(
            *_CRASH_IN_TRAIN,
            "    os.rename(tmp_preds, os.path.join(args.output_dir, 'preds.json'))",
            "OSError: [Errno 18] Invalid cross-device link: '/tmp/preds.json' -> '/mnt/out/preds.json'",
        ),
        'semantic_error', 'user', id='cpython-rename-cross-device-142'),
    pytest.param(  # urllib3 connection.py:_new_conn (EADDRNOTAVAIL on connect) (r20d-address-not-available)
        _log(
            *_CRASH_IN_TRAIN,
            '    resp = requests.post(args.reward_url, json=batch, timeout=30)',
            '  File "{SP}/requests/api.py", line 100, in get',
            '    return request("get", url, params=params, **kwargs)',
            '  File "{SP}/requests/adapters.py", line 100, in send',
            '    raise ConnectionError(e, request=request)',
            "requests.exceptions.ConnectionError: HTTPConnectionPool(host='10.0.0.5', port=8000): Max retries exceeded with url: /v1/score (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f9c1e2b3d90>: Failed to establish a new connection: [Errno 99] Cannot assign requested address'))",
        ),
        'comm_error', 'unknown', id='urllib3-address-not-available-143'),
]


@pytest.mark.parametrize(("text", "category", "origin"), CASES)
def test_library_message_category_and_origin(text: str, category: str, origin: str, clf: Classifier) -> None:
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.origin) == (category, origin), (d.rule_id, d.reason)
