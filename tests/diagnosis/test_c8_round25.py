"""Reader round 25, C8: a collective timeout, a store timeout or a lost peer on ranks that waited for
a rank that died of its own error is that error's aftermath (README C1, O2); with no own error before
it, the communication failure is the root. Excerpts written by hand in the formats of CPython's
traceback, torch's ProcessGroupNCCL (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: "Watchdog caught
collective operation timeout: WorkNCCL(SeqNum=N, OpType=X, NumelIn=N, NumelOut=N, Timeout(ms)=T) ran
for N milliseconds before timing out."), c10d's TCPStore ("RuntimeError: Socket Timeout"), Gloo's TCP
pair (gloo/transport/tcp/pair.cc: "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection
closed by peer [10.0.0.2]:41234"), the elastic agent (torch/distributed/elastic/rendezvous/api.py
RendezvousClosedError; multiprocessing/api.py "failed (exitcode: 1) local_rank: 0 (pid: N) of binary")."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import diagnose_text

_STEPS = ["step 100 | loss 2.412 | lr 3.0e-4", "step 200 | loss 2.118 | lr 3.0e-4"]


def _tb(exc: str, prefix: str = "") -> list[str]:
    """A rank's uncaught traceback ending in ``exc``."""
    body = ["Traceback (most recent call last):", '  File "/home/u/proj/train.py", line 88, in <module>', "    main()",
            '  File "/home/u/proj/train.py", line 61, in main', "    loss = step(model, batch)", exc]
    return [prefix + ln for ln in body]


_SHAPE = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x1024 and 768x2)"
_MISSING = "FileNotFoundError: [Errno 2] No such file or directory: '/scratch/u/cache/train_index_doc_idx.npy'"
_WATCHDOG = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5121, OpType=ALLREDUCE, "
             "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.")
_STORE_TIMEOUT = ['  File "/opt/env/lib/python3.10/site-packages/torch/distributed/elastic/agent/server/api.py", '
                  "line 940, in _exit_barrier", "    store_util.barrier(", "RuntimeError: Socket Timeout"]
_GLOO_CLOSED = "RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:41234"
_CLOSED = ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError: The rendezvous "
           "'job_77' is closed.")
_VERDICT = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 4411) "
            "of binary: /opt/env/bin/python")


def _category(lines: list[str]) -> str:
    return diagnose_text("\n".join(lines) + "\n").diagnosis.category


def test_store_timeout_after_a_rank_could_not_find_its_file() -> None:
    lines = [*_STEPS, *_tb(_MISSING), "Traceback (most recent call last):", *_STORE_TIMEOUT]
    assert _category(lines) == "incorrect_input"


def test_gloo_lost_peer_after_a_rank_failed_of_its_own_code() -> None:
    lines = [*_STEPS, *_tb(_SHAPE), *_tb(_GLOO_CLOSED)]
    assert _category(lines) == "semantic_error"


def test_rendezvous_closed_after_a_rank_failed_of_its_own_code() -> None:
    lines = [*_STEPS, *_tb(_SHAPE), _VERDICT, "Traceback (most recent call last):",
             '  File "/opt/env/bin/torchrun", line 8, in <module>', _CLOSED]
    assert _category(lines) == "semantic_error"


def test_own_error_of_the_last_run_before_the_timeout() -> None:
    # an earlier launch died of OOM, the launcher reported it, the next launch failed of a missing file
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 768.00 MiB. GPU 0 has a total capacity of 79.35 GiB"
    lines = [*_STEPS, *_tb(oom), _VERDICT, "launching again",
             *(f"step {k} | loss 2.3 | lr 3.0e-4" for k in range(100, 4100, 100)),
             *_tb(_MISSING), "Traceback (most recent call last):", *_STORE_TIMEOUT]
    assert _category(lines) == "incorrect_input"


def test_a_timeout_with_no_own_error_before_it_is_the_root() -> None:
    lines = [*_STEPS, f"[rank0]:[E1104 08:15:02 ProcessGroupNCCL.cpp:616] {_WATCHDOG}",
             *_tb("torch.distributed.DistBackendError: " + _WATCHDOG[9:], "[rank0]: ")]
    assert _category(lines) == "comm_error"


# -- README C8: a transfer that failed, in the formats of urllib3, requests, huggingface_hub, datasets and aiohttp

def _load_tb(*exc: str) -> list[str]:
    """The job's model or data loading, failing in a network library with ``exc``."""
    return ["Traceback (most recent call last):", '  File "/home/u/proj/finetune.py", line 40, in <module>',
            "    model = load(args.model_name)",
            '  File "/opt/env/lib/python3.11/site-packages/requests/adapters.py", line 700, in send',
            "    raise ConnectTimeout(e, request=request)", *exc]


def _answer(lines: list[str]) -> tuple[str, str]:
    d = diagnose_text("\n".join(lines) + "\n").diagnosis
    return d.category, d.rule_id or ""


_MAX_RETRY = ("urllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='models.example.org', port=443): Max retries "
              "exceeded with url: /org/vit-small/resolve/main/weights.bin (Caused by ConnectTimeoutError("
              "<urllib3.connection.HTTPSConnection object at 0x7fa1>, 'Connection to models.example.org timed out. "
              "(connect timeout=10)'))")


def test_urllib3_retries_exhausted_is_a_failed_transfer() -> None:
    assert _answer(["Loading backbone", *_load_tb(_MAX_RETRY)]) == ("comm_error", "http-transfer-failed")


def test_aiohttp_cannot_connect_is_a_failed_transfer() -> None:
    exc = ("aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host data.example.org:443 ssl:default "
           "[Temporary failure in name resolution]")
    assert _answer(_load_tb(exc)) == ("comm_error", "http-transfer-failed")


def test_datasets_could_not_reach_the_hub() -> None:
    exc = "ConnectionError: Couldn't reach 'someorg/some_corpus' on the Hub (ConnectTimeout)"
    assert _answer(_load_tb(exc)) == ("comm_error", "http-transfer-failed")


def test_datasets_offline_mode_is_not_a_failed_transfer() -> None:
    exc = "ConnectionError: Couldn't reach 'someorg/some_corpus' on the Hub (OfflineModeIsEnabled)"
    assert _answer(_load_tb(exc))[1] != "http-transfer-failed"


_COULDNT_CONNECT = ("OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in "
                    "the cached files and it looks like someorg/tiny-lm is not the path to a directory containing a "
                    "file named config.json.")


def test_hub_miss_after_a_failed_head_call_is_a_failed_transfer() -> None:
    lines = _load_tb(_MAX_RETRY, "", "The above exception was the direct cause of the following exception:", "",
                     "Traceback (most recent call last):",
                     '  File "/opt/env/lib/python3.11/site-packages/transformers/utils/hub.py", line 402, in cached_file',
                     "    resolved_file = hf_hub_download(",
                     "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file "
                     "on the Hub and we cannot find the requested files in the local cache. Please check your "
                     "connection and try again or make sure your Internet connection is on.", "",
                     "The above exception was the direct cause of the following exception:", "",
                     "Traceback (most recent call last):",
                     '  File "/home/u/proj/finetune.py", line 41, in <module>', "    tok = AutoTokenizer.from_pretrained(name)",
                     _COULDNT_CONNECT)
    assert _answer(lines)[0] == "comm_error"


def test_hub_miss_in_offline_mode_stays_the_files_category() -> None:
    lines = ["Traceback (most recent call last):",
             '  File "/opt/env/lib/python3.11/site-packages/transformers/utils/hub.py", line 402, in cached_file',
             "    resolved_file = hf_hub_download(",
             "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache and "
             "outgoing traffic has been disabled. To enable hf.co look-ups and downloads online, set "
             "'local_files_only' to False.", "",
             "The above exception was the direct cause of the following exception:", "",
             "Traceback (most recent call last):", '  File "/home/u/proj/finetune.py", line 41, in <module>',
             "    tok = AutoTokenizer.from_pretrained(name)", _COULDNT_CONNECT]
    assert _answer(lines)[0] == "checkpoint_error"


def test_a_retry_warning_is_not_the_failure() -> None:
    warn = ("'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: "
            "/org/m/resolve/main/config.json (Caused by NameResolutionError(...))\"), '(Request ID: 1f2e)')' thrown "
            "while requesting HEAD https://huggingface.co/org/m/resolve/main/config.json")
    lines = [warn, "Retrying in 1s [Retry 1/5].", *_STEPS, *_tb(_SHAPE)]
    assert _answer(lines)[0] == "semantic_error"


# -- NCCL's own classification of a failed call (nccl.h ncclResult_t), as torch's ProcessGroupNCCL prints it

def _nccl(reason: str, *last: str) -> list[str]:
    return [*_STEPS, *_tb("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                          f"ProcessGroupNCCL.cpp:1970, {reason}, NCCL version 2.19.3"), *last]


def test_nccl_unhandled_cuda_error_is_a_cuda_error() -> None:
    d = diagnose_text("\n".join(_nccl("unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                                      "ncclUnhandledCudaError: Call to CUDA function failed.")) + "\n").diagnosis
    assert (d.category, d.origin) == ("cuda_error", "unknown")


def test_nccl_cuda_out_of_memory_stays_gpu_oom() -> None:
    lines = _nccl("unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                  "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:", "Cuda failure 'out of memory'")
    assert _category(lines) == "gpu_oom"


def test_nccl_invalid_usage_is_the_callers() -> None:
    d = diagnose_text("\n".join(_nccl("invalid usage (run with NCCL_DEBUG=WARN for details)",
                                      "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.")) + "\n"
                      ).diagnosis
    assert (d.category, d.origin) == ("comm_error", "user")


def test_nccl_system_error_stays_comm_error() -> None:
    lines = _nccl("unhandled system error (run with NCCL_DEBUG=INFO for details)",
                  "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.")
    assert _category(lines) == "comm_error"


def test_nccl_remote_error_after_a_rank_failed_of_its_own_code() -> None:
    lines = [*_STEPS, *_tb(_SHAPE), *_tb("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
                                         "c10d/NCCLUtils.hpp:275, remote process exited or there was a network error, "
                                         "NCCL version 2.18.1"),
             "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."]
    assert _category(lines) == "semantic_error"


def test_ib_completion_error_after_a_rank_could_not_find_its_file() -> None:
    lines = [*_STEPS, *_tb(_MISSING),
             "node02:4411:4502 [1] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<44012> with error 12, "
             "opcode 32753, len 0, vendor err 129 (Recv)",
             *_tb("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
                  "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1")]
    assert _category(lines) == "incorrect_input"


def test_ib_completion_error_with_no_own_error_is_the_root() -> None:
    lines = [*_STEPS, "node02:4411:4502 [1] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<44012> with error 12, "
             "opcode 32753, len 0, vendor err 129 (Recv)",
             *_tb("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
                  "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1")]
    assert _category(lines) == "comm_error"


def test_watchdog_abort_after_an_untagged_rank_failed_of_its_own_code() -> None:
    # rank 1's traceback and rank 0's watchdog, as a launcher without per-rank prefixes prints them
    abort = ["terminate called after throwing an instance of 'c10::DistBackendError'",
             f"  what():  [PG 0 Rank 0] Process group watchdog thread terminated with exception: {_WATCHDOG}",
             "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 "
             "(most recent call first):", _VERDICT.replace("exitcode: 1", "exitcode: -6")]
    lines = [*_STEPS, *_tb(_SHAPE), f"[E1104 08:15:02.123456 ProcessGroupNCCL.cpp:616] {_WATCHDOG}", *abort]
    assert _category(lines) == "semantic_error"


def test_watchdog_after_a_rank_raised_a_plain_python_error() -> None:
    # a KeyError in the job's own code (a generic rule's) on one rank, the watchdog on another
    lines = [*_STEPS, *_tb("KeyError: 'attention_mask'"), f"[E1104 08:15:02.123456 ProcessGroupNCCL.cpp:616] {_WATCHDOG}",
             *_tb("torch.distributed.DistBackendError: " + _WATCHDOG[9:])]
    assert _category(lines) == "semantic_error"


def test_a_watchdog_abort_is_not_an_own_failure_of_the_waiting_rank() -> None:
    # the waiting rank's own abort after its timeout reads as a crash: the timeout stays the answer
    lines = [*_STEPS, f"[E1104 08:15:02.123456 ProcessGroupNCCL.cpp:616] {_WATCHDOG}",
             "terminate called after throwing an instance of 'c10::DistBackendError'",
             f"  what():  [PG 0 Rank 0] Process group watchdog thread terminated with exception: {_WATCHDOG}",
             "Fatal Python error: Aborted"]
    assert _category(lines) == "comm_error"


def _client_tb(*exc: str) -> list[str]:
    """The job's call of a server through a client library, failing in the library with ``exc``."""
    return ["Scoring batch 3/40", "Traceback (most recent call last):", '  File "/home/u/proj/score.py", line 70, in <module>',
            "    reply = client.chat.completions.create(**req)",
            '  File "/opt/env/lib/python3.11/site-packages/openai/_base_client.py", line 1002, in request',
            "    raise APIConnectionError(request=request) from err", *exc]


def test_openai_client_connection_error_is_a_failed_transfer() -> None:
    assert _answer(_client_tb("openai.APIConnectionError: Connection error.")) == ("comm_error", "client-connection-failed")


def test_httpx_server_disconnected_is_a_failed_transfer() -> None:
    exc = "httpx.RemoteProtocolError: Server disconnected without sending a response."
    assert _answer(_client_tb(exc)) == ("comm_error", "client-connection-failed")


def test_grpc_unavailable_is_a_failed_transfer() -> None:
    exc = ["grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:",
           "\tstatus = StatusCode.UNAVAILABLE",
           '\tdetails = "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.1.2.3:50051: Connection refused"',
           ">"]
    assert _answer(_client_tb(*exc))[0] == "comm_error"


def test_client_connection_error_after_the_server_process_failed_of_its_own_error() -> None:
    # the job's own inference server dies of a plain Python error; the scoring client then loses it
    lines = ["INFO: server listening on 0.0.0.0:8000", *_tb("ValueError: max_model_len (32768) is larger than the model"),
             *_client_tb("openai.APIConnectionError: Connection error.")]
    assert _category(lines) == "semantic_error"


def test_datasets_hub_miss_that_does_not_say_why_is_not_a_failed_transfer() -> None:
    # datasets' "(LocalEntryNotFoundError)": offline mode or a failed call, the line does not tell
    exc = "ConnectionError: Couldn't reach 'someorg/some_corpus' on the Hub (LocalEntryNotFoundError)"
    assert _answer(_load_tb(exc))[1] != "http-transfer-failed"


# -- README O2: a peer gone with nothing else in the log names no cause; NCCL's transport errors do

def _origin(lines: list[str]) -> tuple[str, str]:
    d = diagnose_text("\n".join(lines) + "\n").diagnosis
    return d.category, d.origin


def test_gloo_lost_peer_alone_has_no_known_origin() -> None:
    assert _origin([*_STEPS, *_tb(_GLOO_CLOSED)]) == ("comm_error", "unknown")


def test_nccl_remote_error_alone_has_no_known_origin() -> None:
    lines = _nccl("remote process exited or there was a network error",
                  "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.")
    assert _origin(lines) == ("comm_error", "unknown")


def test_rendezvous_closed_alone_has_no_known_origin() -> None:
    lines = [*_STEPS, "Traceback (most recent call last):", '  File "/opt/env/bin/torchrun", line 8, in <module>', _CLOSED]
    assert _origin(lines) == ("comm_error", "unknown")


def test_nccl_ib_completion_error_is_the_transport() -> None:
    lines = _nccl("remote process exited or there was a network error",
                  "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
                  "Last error:", "NET/IB : Got completion from peer 10.0.0.3<44012> with error 12, opcode 32753, len 0, "
                  "vendor err 129 (Recv)")
    assert _origin(lines) == ("comm_error", "infrastructure")
