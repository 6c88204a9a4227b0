"""Round 20 (library sweep G: TensorFlow/Keras, PaddlePaddle, MindSpore, Horovod, mpi4py, Open MPI/MPICH):
messages that end a training job, read from the libraries' sources (keras 3.15.1, horovod 0.28.1, mpi4py 4.1.2,
Open MPI v4.1.8/main help texts; TensorFlow 2.x, PaddlePaddle, MindSpore read on GitHub), each in a small excerpt
written for the test in the library's format (the raise site is named in each case), not copied from a log. The whole
sweep is in docs/library-sweeps/r20-g.csv."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text

#: The traceback head most excerpts share: the job's train.py, from <module> into main().
_MAIN_TB = (
    'Traceback (most recent call last):',
    '  File "/home/u/proj/train.py", line 212, in <module>',
    '    main()',
    '  File "/home/u/proj/train.py", line 150, in main',
)


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


CASES = [
    pytest.param(  # tensorflow: tensorflow/core/kernels/matmul_op_impl.h:MatMulOp::Compute
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            '  12/1875 ━━━━━━━━━━━━━━━━━━━━ 8s 4ms/step - accuracy: 0.5112 - loss: 1.3204',
            *_MAIN_TB,
            '    out = tf.matmul(h, w)',
            '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 100, in quick_execute',
            '    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,',
            'tensorflow.python.framework.errors_impl.InvalidArgumentError: {{function_node __wrapped__MatMul_device_/job:localhost/replica:0/task:0/device:GPU:0}} Matrix size-incompatible: In[0]: [32,784], In[1]: [512,10] [Op:MatMul] name: ',
        ]) + "\n",
        'semantic_error', 'user', id='tf-matmul-size-incompatible'),
    pytest.param(  # tensorflow: tensorflow/core/util/bcast.h (BinaryOp broadcast)
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            '  12/1875 ━━━━━━━━━━━━━━━━━━━━ 8s 4ms/step - accuracy: 0.5112 - loss: 1.3204',
            *_MAIN_TB,
            '    model.fit(train_ds, epochs=20)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 100, in quick_execute',
            '    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,',
            'tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:',
            '',
            'Detected at node mean_squared_error/SquaredDifference defined at (most recent call last):',
            '  File "/home/u/proj/train.py", line 212, in <module>',
            '',
            '  File "/home/u/proj/train.py", line 150, in main',
            '',
            'Incompatible shapes: [32,10] vs. [32,1]',
            '\t [[{{node mean_squared_error/SquaredDifference}}]] [Op:__inference_train_function_5012]',
        ]) + "\n",
        'semantic_error', 'user', id='tf-incompatible-shapes'),
    pytest.param(  # tensorflow: tensorflow/python/data/ops/dataset_ops.py:list_files (Assert)
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    files = tf.data.Dataset.list_files(args.train_pattern)',
            '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/data/ops/dataset_ops.py", line 100, in list_files',
            '    assert_not_empty = control_flow_assert.Assert(',
            "tensorflow.python.framework.errors_impl.InvalidArgumentError: Expected 'tf.Tensor(False, shape=(), dtype=bool)' to be true. Summarized data: b'No files matched pattern: /data/imagenet/train-*'",
        ]) + "\n",
        'incorrect_input', 'data', id='tf-data-no-files-matched'),
    pytest.param(  # tensorflow: tensorflow/python/saved_model/loader_impl.py:parse_saved_model
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model = tf.saved_model.load(args.model_dir)',
            '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/saved_model/load.py", line 100, in load_partial',
            '    loader_impl.parse_saved_model_with_debug_info(export_dir))',
            '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/saved_model/loader_impl.py", line 100, in parse_saved_model',
            '    raise IOError(',
            'OSError: SavedModel file does not exist at: export/resnet50/1/{saved_model.pbtxt|saved_model.pb}',
        ]) + "\n",
        'checkpoint_error', 'user', id='tf-savedmodel-missing'),
    pytest.param(  # tensorflow: xla/service/gpu/llvm_gpu_backend/nvptx_backend (LinkLibdevice)
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            '  12/1875 ━━━━━━━━━━━━━━━━━━━━ 8s 4ms/step - accuracy: 0.5112 - loss: 1.3204',
            *_MAIN_TB,
            '    model.fit(train_ds, epochs=20)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 100, in quick_execute',
            '    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,',
            "2026-11-20 10:01:30.000000: W tensorflow/compiler/xla/service/gpu/llvm_gpu_backend/gpu_backend_lib.cc:521] Can't find libdevice directory ${CUDA_DIR}/nvvm/libdevice. This may result in compilation or runtime failures, if the program we try to run uses routines from libdevice.",
            'tensorflow.python.framework.errors_impl.InternalError: Graph execution error:',
            '',
            'Detected at node StatefulPartitionedCall defined at (most recent call last):',
            'libdevice not found at ./libdevice.10.bc',
            '\t [[{{node StatefulPartitionedCall}}]] [Op:__inference_train_function_1234]',
        ]) + "\n",
        'cuda_env_error', 'user', id='tf-xla-libdevice-missing'),
    pytest.param(  # tensorflow: xla/stream_executor/gpu/asm_compiler.cc (W: Couldn't invoke ptxas) then nvptx_backend
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            '  12/1875 ━━━━━━━━━━━━━━━━━━━━ 8s 4ms/step - accuracy: 0.5112 - loss: 1.3204',
            *_MAIN_TB,
            '    model.fit(train_ds, epochs=20)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 100, in quick_execute',
            '    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,',
            "2026-11-20 10:01:30.000000: W tensorflow/compiler/xla/stream_executor/gpu/asm_compiler.cc:80] Couldn't get ptxas version string: INTERNAL: Couldn't invoke ptxas --version",
            '2026-11-20 10:01:30.100000: W tensorflow/compiler/xla/stream_executor/gpu/redzone_allocator.cc:317] INTERNAL: Failed to launch ptxas',
            'Relying on driver to perform ptx compilation. ',
            'tensorflow.python.framework.errors_impl.InternalError: libdevice not found at ./libdevice.10.bc [Op:__inference_train_function_1234]',
        ]) + "\n",
        'cuda_env_error', 'user', id='tf-xla-ptxas-missing'),
    pytest.param(  # tensorflow: tensorflow/core/kernels/matmul_op_impl.h (cuBLAS gemm)
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            '  12/1875 ━━━━━━━━━━━━━━━━━━━━ 8s 4ms/step - accuracy: 0.5112 - loss: 1.3204',
            *_MAIN_TB,
            '    logits = model(x)',
            '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 100, in quick_execute',
            '    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,',
            'tensorflow.python.framework.errors_impl.InternalError: Blas GEMM launch failed : a.shape=(32, 784), b.shape=(784, 512), m=32, n=512, k=784 [Op:MatMul]',
        ]) + "\n",
        'cuda_error', 'unknown', id='tf-blas-gemm-launch'),
    pytest.param(  # tensorflow: tensorflow/core/common_runtime/base_collective_executor.cc / grpc (MultiWorkerMirrore
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            '  12/1875 ━━━━━━━━━━━━━━━━━━━━ 8s 4ms/step - accuracy: 0.5112 - loss: 1.3204',
            *_MAIN_TB,
            '    model.fit(train_ds, epochs=20)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            '  File "/usr/local/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 100, in quick_execute',
            '    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,',
            'tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:',
            '',
            'Detected at node CollectiveReduceV2 defined at (most recent call last):',
            '  File "/home/u/proj/train.py", line 212, in <module>',
            '',
            '  File "/home/u/proj/train.py", line 150, in main',
            '',
            'Collective ops is aborted by: failed to connect to all addresses',
            'Additional GRPC error information from remote target /job:worker/replica:0/task:1:',
            ':{"created":"@1700000000.000000000","description":"Failed to pick subchannel","grpc_status":14}',
            'The error could be from a previous operation. Restart your program to reset.',
            '\t [[{{node CollectiveReduceV2}}]] [Op:__inference_train_function_5012]',
        ]) + "\n",
        'unknown', 'unknown', id='tf-collective-unavailable'),
    pytest.param(  # keras: keras/src/trainers/data_adapters/data_adapter_utils.py:check_data_cardinality
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model.fit(x_train, y_train, epochs=20)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            "ValueError: Data cardinality is ambiguous. Make sure all arrays contain the same number of samples.'x' sizes: 60000",
            "'y' sizes: 59999",
        ]) + "\n",
        'incorrect_input', 'unknown', id='keras-data-cardinality'),
    pytest.param(  # keras: keras/src/saving/saving_api.py:load_model
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model = keras.models.load_model(args.resume)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            'ValueError: File not found: filepath=checkpoints/best.keras. Please ensure the file is an accessible `.keras` zip file.',
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-load-model-missing'),
    pytest.param(  # keras: keras/src/saving/saving_api.py:load_model
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model = keras.models.load_model(args.resume)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            "ValueError: File format not supported: filepath=export/saved_model. Keras 3 only supports V3 `.keras` files, legacy H5 format files (`.h5` extension). Note that the legacy SavedModel format is not supported by `load_model()` in Keras 3. In order to reload a TensorFlow SavedModel as an inference-only layer in Keras 3, use `keras.layers.TFSMLayer(export/saved_model, call_endpoint='serving_default')` (note that your `call_endpoint` might have a different name).",
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-load-model-format'),
    pytest.param(  # keras: keras/src/saving/saving_api.py:save_weights
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            '  12/1875 ━━━━━━━━━━━━━━━━━━━━ 8s 4ms/step - accuracy: 0.5112 - loss: 1.3204',
            *_MAIN_TB,
            "    model.save_weights(os.path.join(out_dir, 'model.h5'))",
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            'ValueError: The filename must end in `.weights.h5`. Received: filepath=out/run1/model.h5',
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-save-weights-ext'),
    pytest.param(  # keras: keras/src/saving/saving_api.py:save_model
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            '  12/1875 ━━━━━━━━━━━━━━━━━━━━ 8s 4ms/step - accuracy: 0.5112 - loss: 1.3204',
            *_MAIN_TB,
            "    model.save(os.path.join(out_dir, 'final_model'))",
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            'ValueError: Invalid filepath extension for saving. Please add either a `.keras` extension for the native Keras format (recommended) or a `.h5` extension. Use `model.export(filepath)` if you want to export a SavedModel for use with TFLite/TFServing/etc. Received: filepath=out/run1/final_model.',
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-save-ext'),
    pytest.param(  # keras: keras/src/callbacks/model_checkpoint.py:ModelCheckpoint.__init__
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            "    ckpt_cb = keras.callbacks.ModelCheckpoint('ckpt/epoch_{epoch:02d}.h5', save_weights_only=True)",
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/callbacks/model_checkpoint.py", line 100, in __init__',
            '    raise ValueError(',
            'ValueError: When using `save_weights_only=True` in `ModelCheckpoint`, the filepath provided must end in `.weights.h5` (Keras weights format). Received: filepath=ckpt/epoch_{epoch:02d}.h5',
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-modelcheckpoint-ext'),
    pytest.param(  # keras: keras/src/legacy/saving/legacy_h5_format.py:load_weights_from_hdf5_group
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model.load_weights(args.weights)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            'ValueError: Layer count mismatch when loading weights from file. Model expected 4 layers, found 3 saved layers.',
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-layer-count-mismatch'),
    pytest.param(  # keras: keras/src/legacy/saving/legacy_h5_format.py:load_weights_from_hdf5_group
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model.load_weights(args.weights)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            'ValueError: Weight count mismatch for layer #2 (named dense_2 in the current model, dense_1 in the save file). Layer expects 2 weight(s). Received 1 saved weight(s)',
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-weight-count-mismatch'),
    pytest.param(  # keras: keras/src/legacy/saving/legacy_h5_format.py:_set_weights
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model.load_weights(args.weights)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            'ValueError: Shape mismatch in layer #2 (named dense_2)for weight dense_2/kernel. Weight expects shape (128, 10). Received saved weight with shape (128, 5)',
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-h5-shape-mismatch'),
    pytest.param(  # keras: keras/src/saving/saving_lib.py:_raise_loading_failure (layers/layer.py:_check_load_own_var
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model.load_weights(args.weights)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            'ValueError: A total of 2 objects could not be loaded. Example error message for object <Dense name=dense_2, built=True>:',
            '',
            "Layer 'dense_2' expected 2 variables, but received 0 variables during loading. Expected: ['kernel', 'bias']",
            '',
            'List of objects that could not be loaded:',
            '[<Dense name=dense_2, built=True>, <Adam name=adam, built=True>]',
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-objects-not-loaded'),
    pytest.param(  # keras: keras/src/backend/common/variables.py:Variable.assign (via load_own_variables)
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model.load_weights(args.weights)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/layers/layer.py", line 100, in load_own_variables',
            '    v.assign(store[f"{i}"])',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/backend/common/variables.py", line 100, in assign',
            '    raise ValueError(',
            'ValueError: The shape of the target variable and the shape of the target value in `variable.assign(value)` must match. variable.shape=(128, 10), Received: value.shape=(128, 5). Target variable: <KerasVariable shape=(128, 10), dtype=float32, path=sequential/dense_2/kernel>',
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-variable-assign-shape'),
    pytest.param(  # keras: h5py/_hl/files.py:make_fid (keras load_weights of a missing .h5)
        "\n".join([
            '2026-11-20 10:01:02.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78912 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
            'Epoch 1/20',
            *_MAIN_TB,
            '    model.load_weights(args.weights)',
            '  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 100, in error_handler',
            '    raise e.with_traceback(filtered_tb) from None',
            '  File "/usr/local/lib/python3.11/site-packages/h5py/_hl/files.py", line 100, in make_fid',
            '    fid = h5f.open(name, flags, fapl=fapl)',
            '  File "/usr/local/lib/python3.11/site-packages/h5py/h5f.pyx", line 100, in h5py.h5f.open',
            '    ',
            "FileNotFoundError: [Errno 2] Unable to synchronously open file (unable to open file: name = 'weights/best.weights.h5', errno = 2, error message = 'No such file or directory', flags = 0, o_flags = 0)",
        ]) + "\n",
        'checkpoint_error', 'user', id='keras-h5-missing'),
    pytest.param(  # paddle: paddle/framework/io.py:_build_load_path_and_config / load
        "\n".join([
            'W1120 10:01:02.123456  4242 gpu_resources.cc:119] Please NOTE: device: 0, GPU Compute Capability: 8.0, Driver API Version: 12.4, Runtime API Version: 12.3',
            'W1120 10:01:02.125000  4242 gpu_resources.cc:164] device: 0, cuDNN Version: 9.0.',
            *_MAIN_TB,
            '    state = paddle.load(args.resume)',
            '  File "/usr/local/lib/python3.11/site-packages/paddle/framework/io.py", line 100, in load',
            '    model_path, config = _build_load_path_and_config(path, config)',
            '  File "/usr/local/lib/python3.11/site-packages/paddle/framework/io.py", line 100, in _build_load_path_and_config',
            '    raise ValueError(error_msg % path)',
            'ValueError: The ``path`` (output/epoch_10/model.pdparams) to load model not exists.',
        ]) + "\n",
        'checkpoint_error', 'user', id='paddle-load-path-missing'),
    pytest.param(  # paddle: paddle/phi/kernels/gpu/cross_entropy_kernel.cu (PADDLE_ENFORCE, OutOfRange)
        "\n".join([
            'W1120 10:01:02.123456  4242 gpu_resources.cc:119] Please NOTE: device: 0, GPU Compute Capability: 8.0, Driver API Version: 12.4, Runtime API Version: 12.3',
            'W1120 10:01:02.125000  4242 gpu_resources.cc:164] device: 0, cuDNN Version: 9.0.',
            '[2026-11-20 10:01:40] epoch: 1, step: 10/500, loss: 2.3012, lr: 0.000100, ips: 412.3 samples/s',
            *_MAIN_TB,
            '    loss = F.cross_entropy(logits, labels)',
            '  File "/usr/local/lib/python3.11/site-packages/paddle/nn/functional/loss.py", line 100, in cross_entropy',
            '    _, out = _C_ops.cross_entropy_with_softmax(',
            'IndexError: (OutOfRange) label value should less than the shape of axis dimension when label value(10) not equal to ignore_index(-100), But received label value as 10 and shape of axis dimension is 10',
            '  [Hint: Expected ((label_data[i]) < (axis_dim)) == true, but received ((label_data[i]) < (axis_dim)):0 != true:1.] (at /paddle/paddle/phi/kernels/cpu/cross_entropy_kernel.cc:84)',
        ]) + "\n",
        'incorrect_input', 'data', id='paddle-label-out-of-range'),
    pytest.param(  # paddle: paddle/distributed/launch (legacy utils.py watch_local_trainers)
        "\n".join([
            '-----------  Configuration Arguments -----------',
            'gpus: 0,1,2,3',
            '------------------------------------------------',
            'INFO 2026-11-20 10:01:02,000 launch_utils.py:563] Local start 4 processes. First process distributed environment info (Only For Debug): ',
            'ERROR 2026-11-20 11:31:02,000 launch_utils.py:642] ABORT!!! Out of all 4 trainers, the trainer process with rank=[2] was aborted. Please check its log.',
            'INFO 2026-11-20 11:31:05,000 launch_utils.py:346] terminate all the procs',
        ]) + "\n",
        'unknown', 'unknown', id='paddle-launch-abort-alone'),
    pytest.param(  # mindspore: mindspore/train/serialization.py:_update_param (load_param_into_net)
        "\n".join([
            '[INFO] ME(4242:139842,MainProcess):2026-11-20-10:01:02.123.456 [mindspore/train/model.py:1100] Start training.',
            *_MAIN_TB,
            '    ms.load_param_into_net(net, param_dict)',
            '  File "/usr/local/lib/python3.11/site-packages/mindspore/train/serialization.py", line 100, in load_param_into_net',
            '    _update_param(param, new_param, strict_load)',
            '  File "/usr/local/lib/python3.11/site-packages/mindspore/train/serialization.py", line 100, in _update_param',
            '    raise RuntimeError(msg)',
            "RuntimeError: For 'load_param_into_net', fc3.weight in the argument 'net' should have the same shape as fc3.weight in the argument 'parameter_dict'. But got its shape (10, 84) in the argument 'net' and shape (5, 84) in the argument 'parameter_dict'.May you need to check whether the checkpoint you loaded is correct or the batch size and so on in the 'net' and 'parameter_dict' are same.",
        ]) + "\n",
        'checkpoint_error', 'user', id='mindspore-param-shape'),
    pytest.param(  # horovod: horovod/common/util.py:check_installed_version (HorovodVersionMismatchError)
        "\n".join([
            *_MAIN_TB,
            '    import horovod.torch as hvd',
            '  File "/usr/local/lib/python3.11/site-packages/horovod/torch/__init__.py", line 100, in <module>',
            "    check_installed_version('pytorch', torch.__version__)",
            '  File "/usr/local/lib/python3.11/site-packages/horovod/common/util.py", line 100, in check_installed_version',
            '    raise HorovodVersionMismatchError(name, version, installed_version)',
            'horovod.common.exceptions.HorovodVersionMismatchError: Framework pytorch installed with version 2.1.0+cu121 but found version 2.4.1+cu124.',
            '             This can result in unexpected behavior including runtime errors.',
            '             Reinstall Horovod using `pip install --no-cache-dir` to build with the new version.',
        ]) + "\n",
        'import_error', 'user', id='hvd-version-mismatch'),
    pytest.param(  # horovod: horovod/common/util.py:check_extension
        "\n".join([
            *_MAIN_TB,
            '    import horovod.torch as hvd',
            '  File "/usr/local/lib/python3.11/site-packages/horovod/torch/__init__.py", line 100, in <module>',
            "    check_extension('horovod.torch', 'HOROVOD_WITH_PYTORCH',",
            '  File "/usr/local/lib/python3.11/site-packages/horovod/common/util.py", line 100, in check_extension',
            '    raise ImportError(',
            'ImportError: Extension horovod.torch has not been built: /usr/local/lib/python3.11/site-packages/horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so not found',
            'If this is not expected, reinstall Horovod with HOROVOD_WITH_PYTORCH=1 to debug the build error.',
        ]) + "\n",
        'import_error', 'user', id='hvd-extension-not-built'),
    pytest.param(  # horovod: horovod/runner/launch.py:_run_static
        "\n".join([
            'Traceback (most recent call last):',
            '  File "/usr/local/bin/horovodrun", line 8, in <module>',
            '    sys.exit(run_commandline())',
            '  File "/usr/local/lib/python3.11/site-packages/horovod/runner/launch.py", line 837, in run_commandline',
            '    _run(args)',
            '  File "/usr/local/lib/python3.11/site-packages/horovod/runner/launch.py", line 778, in _run_static',
            "    raise ValueError('Neither MPI nor Gloo support has been built. Try reinstalling Horovod ensuring that '",
            'ValueError: Neither MPI nor Gloo support has been built. Try reinstalling Horovod ensuring that either MPI is installed (MPI) or CMake is installed (Gloo).',
        ]) + "\n",
        'import_error', 'user', id='hvd-neither-mpi-gloo'),
    pytest.param(  # horovod: horovod/common/controller.cc:ConstructResponse
        "\n".join([
            '[1,0]<stdout>:Epoch 1/10',
            '[1,0]<stdout>:step 100 loss 1.9021',
            *_MAIN_TB,
            '    optimizer.step()',
            '  File "/usr/local/lib/python3.11/site-packages/horovod/torch/optimizer.py", line 100, in step',
            '    self.synchronize()',
            '  File "/usr/local/lib/python3.11/site-packages/horovod/torch/mpi_ops.py", line 100, in synchronize',
            '    raise HorovodInternalError(e)',
            'horovod.common.exceptions.HorovodInternalError: Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [512, 10], but another rank sent a tensor of shape [512, 5].',
        ]) + "\n",
        'semantic_error', 'user', id='hvd-mismatched-shapes'),
    pytest.param(  # mpi4py: mpi4py/run.py (MPI_Abort on an uncaught exception) after the job's own assert
        "\n".join([
            '[1,0]<stdout>:epoch 1 step 200 loss 0.8123',
            '[1,1]<stdout>:epoch 1 step 200 loss 0.8240',
            '[1,1]<stderr>:Traceback (most recent call last):',
            '[1,1]<stderr>:  File "/usr/local/lib/python3.11/site-packages/mpi4py/run.py", line 208, in run_command_line',
            "[1,1]<stderr>:    run_path(sys.argv[0], run_name='__main__')",
            '[1,1]<stderr>:  File "/home/u/proj/train.py", line 57, in <module>',
            "[1,1]<stderr>:    assert args.global_batch % comm.size == 0, 'global batch must divide by the number of ranks'",
            '[1,1]<stderr>:AssertionError: global batch must divide by the number of ranks',
            '--------------------------------------------------------------------------',
            'MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD',
            'with errorcode 1.',
            '',
            'NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.',
            'You may or may not see output from other processes, depending on',
            'exactly when Open MPI kills them.',
            '--------------------------------------------------------------------------',
        ]) + "\n",
        'semantic_error', 'user', id='mpi4py-abort-after-own-assert'),
    pytest.param(  # mpich: src/pm/hydra/mpiexec/mpiexec.c (BAD TERMINATION banner)
        "\n".join([
            'epoch 1 step 200 loss 0.8123',
            '',
            '===================================================================================',
            '=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES',
            '=   PID 5121 RUNNING AT gpu03',
            '=   EXIT CODE: 9',
            '=   CLEANING UP REMAINING PROCESSES',
            '=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES',
            '===================================================================================',
            'YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)',
            'This typically refers to a problem with your application.',
            'Please see the FAQ page for debugging suggestions',
        ]) + "\n",
        'cpu_oom', 'unknown', id='mpich-bad-termination-9'),
    pytest.param(  # mpi4py: mpi4py/MPI/msgbuffer / Comm.Recv (MPI error class)
        "\n".join([
            '[1,0]<stdout>:epoch 1 step 200 loss 0.8123',
            '[1,1]<stdout>:epoch 1 step 200 loss 0.8240',
            *_MAIN_TB,
            '    comm.Recv(buf, source=0, tag=11)',
            'mpi4py.MPI.Exception: MPI_ERR_TRUNCATE: message truncated',
        ]) + "\n",
        'semantic_error', 'user', id='mpi4py-err-truncate'),
]


@pytest.mark.parametrize(("text", "category", "origin"), CASES)
def test_library_message_category_and_origin(text: str, category: str, origin: str, clf: Classifier) -> None:
    d = diagnose_text(text, clf).diagnosis
    assert (d.category, d.origin) == (category, origin), (d.rule_id, d.reason)
