"""Who a collective's or a rendezvous' timeout is owed to: a process that died first of its own
error (its cause), a store whose host closed it or a timeout that names no peer (origin unknown),
a process still preparing the data set while its peers waited, or every node's launcher started
with node rank 0 (the user's)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.bars import bar_updates
from gpulens.diagnosis.logread.cause.answers import (
    cause_of,
    reorigin,
)
from gpulens.diagnosis.logread.indicators.runs import split_runs
from gpulens.diagnosis.rules import Rule, RuleMatch, match_rules, rule_by_id
from gpulens.diagnosis.types import Diagnosis

__all__ = ["died_before_timeout", "preparing_data", "unattributed_timeout", "wait_kind"]


#: Rules whose evidence is a wait that timed out: a peer did not arrive at a collective or at the
#: rendezvous in time (NCCL's watchdog, Gloo, c10d's store, JAX's barrier).
_TIMEOUT_RULES = frozenset({"nccl-watchdog-timeout", "collective-timeout", "gloo-recv-timeout", "jax-barrier-timeout"})
#: The rendezvous rule's timeout messages (c10d TCPStore/elastic: "Socket Timeout", "Timed out after
#: 900 seconds waiting for clients", "The client socket has timed out", RendezvousTimeoutError).
#: Also TCPStore::wait's "wait timeout after 300000ms, keys: /broadcast_from/0/3" (pytorch/pytorch
#: torch/csrc/distributed/c10d/TCPStore.cpp at b874478480be06eab07db7ecd307883fb286fb8a).
_TIMED_OUT = re.compile(r"Socket Timeout|Timed out after|has timed out|RendezvousTimeoutError|wait timeout after \d+ ?ms")


#: The elastic agent's report that the rendezvous store it had joined went away mid-run
#: (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py / dynamic_rendezvous.py:
#: "RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for
#: details."), with the inner error of a connection the store's host closed (TCPStore.cpp "Failed to
#: recv, got 0 bytes. Connection was likely closed.", "Broken pipe", "Connection reset by peer"):
#: the host process ended, and why is not in the log (README O2: a peer gone, cause unshown).
_STORE_GONE = re.compile(r"The connection to the C10d store has failed")
_CLOSED_BY_HOST = re.compile(r"Broken pipe|Connection reset by peer|got 0 bytes|Connection was likely closed")


def _store_closed(evidence: Sequence[str]) -> bool:
    """Whether the rendezvous evidence says the store's connection was closed by its host."""
    return _STORE_GONE.search(evidence[0]) is not None and any(_CLOSED_BY_HOST.search(e) for e in evidence)


#: Categories of a rank's own failure (README C1): every category but a communication failure
#: (the waiting itself), a stop from outside (kills.py reads those) and no answer. A process that
#: died of one leaves its peers waiting at their next collective until it times out, or sees them
#: lose the connection to it: the timeout or the lost peer is that failure's aftermath.
_OWN_FAILURES = frozenset({"cpu_oom", "gpu_oom", "gpu_hardware", "cuda_error", "cuda_env_error", "storage_error", "crash",
                           "semantic_error", "incorrect_input", "checkpoint_error", "import_error", "syntax_error",
                           "permission_error", "model_diverged"})
#: Rules of a peer lost mid-run or a transport that failed, which say only that the other side did
#: not answer: Gloo's pair "Connection closed by peer" (gloo/transport/tcp/pair.cc), NCCL's
#: ncclRemoteError ("remote process exited or there was a network error", nccl src/nccl.h.in) and
#: ncclSystemError as torch's ProcessGroupNCCL C10D_NCCL_CHECK prints them ("NCCL error in: <file>,
#: <reason>"), NCCL's socket and IB transport warnings (src/transport/net_socket.cc, net_ib.cc: "Got
#: completion from peer ... with error 12" when the peer's queue pair is gone), its proxy's failed
#: operation, c10d's store and rendezvous (TCPStore.cpp "Failed to recv,
#: got 0 bytes", DistNetworkError, RendezvousClosedError: another node's agent closed it after its
#: workers failed), Horovod's "Horovod has been shut down. This was caused by an exception on one of
#: the ranks" (horovod/common/operations.cc), JAX's coordination service stopping, a client that lost
#: its server (gRPC's UNAVAILABLE, httpx's or openai's connection error: a server the job started
#: itself, an inference engine, dies of its own error first). A process that died
#: of its own error first leaves its peers with exactly these (README C1, O2). A bare socket errno
#: (socket-connection-errors) is not among them: earlier.py reads it where a DataLoader worker that
#: shared a tensor is gone.
_LOST_PEER_RULES = frozenset({"gloo-connection-closed", "nccl-remote-error", "horovod-shut-down", "nccl-error-in",
                              "nccl-error-short-form", "nccl-unhandled-system-error", "nccl-socket-failure",
                              "nccl-ib-completion-error", "nccl-proxy-failed", "rendezvous",
                              "jax-cluster-registration-failed", "client-connection-failed"})
#: torch's report that the communicator was aborted (ProcessGroupNCCL.cpp: "NCCL communicator was
#: aborted on rank N", raised on the ranks whose watchdog aborted it after a peer failed).
_LOST_PEER = re.compile(r"NCCL communicator was aborted")


def wait_kind(rule_id: str | None, text: str) -> str | None:
    """``"timeout"`` for a line that says a wait for a peer timed out (a collective's, the rendezvous'),
    ``"lost_peer"`` for one that says a peer or its connection is gone, else None; ``rule_id``: the rule
    that matched the line, if any."""
    if rule_id in _TIMEOUT_RULES or _TIMED_OUT.search(text):
        return "timeout"
    if rule_id in _LOST_PEER_RULES or _LOST_PEER.search(text) or _CLOSED_BY_HOST.search(text):
        return "lost_peer"
    return None


def _waiting_rule(d: Diagnosis, rules: tuple[Rule, ...]) -> Rule | None:
    """The rule of ``d`` when its evidence is a wait that timed out or a peer that went away
    (README O2), else None."""
    rule = rule_by_id(rules, d.rule_id)
    if rule is None or rule.category != "comm_error":
        return None
    said = d.evidence[0] if d.evidence else ""
    if rule.id in _TIMEOUT_RULES or rule.id in _LOST_PEER_RULES or _LOST_PEER.search(said):
        return rule
    return None


def died_before_timeout(d: Diagnosis, lines: Sequence[str], floor: int, failures: Sequence[int],
                        rules: tuple[Rule, ...]) -> Diagnosis:
    """For a collective or store timeout or a lost peer (``d``, :func:`_waiting_rule`), the rank's
    own failure printed before the first such line, among the attempt's terminal failure lines
    (``failures``, from ``floor``): an OOM kill, a CUDA out-of-memory, a crash, a shape error, a
    missing file (README C1, O1: the root error decides). The ranks that time out waited for that
    process at their next collective (NCCL's watchdog fires Timeout(ms) after its peer died), so
    the timeout says nothing of its own. Of several such failures, the first of the last run that
    printed them (a launcher's verdict between two ends a run, :func:`runs.split_runs`); else ``d``."""
    rule = _waiting_rule(d, rules)
    if rule is None:
        return d
    first = next((i for i in failures if i >= floor and rule.pattern.search(logs.normalize_line(lines[i]))), None)
    if first is None:
        return d
    before = [i for i in failures if floor <= i < first][-_OWN_READ:]
    own = {i: m for i in before if (m := _own_failure(lines[i], rules)) is not None}
    if not own:
        return d
    cause = own[split_runs(lines, sorted(own), floor)[-1][0]]
    return cause_of(d, cause, f"a process failed first of its own error ({cause.rule.id}); the other ranks' "
                               "timeout or lost connection waiting for it is its aftermath")


#: Failure lines read above the first timeout or lost-peer line (the nearest ones: a log of many
#: ranks repeats each rank's traceback).
_OWN_READ = 400


def _own_failure(line: str, rules: tuple[Rule, ...]) -> RuleMatch | None:
    """The best rule match on ``line`` when it is a rank's own failure (:data:`_OWN_FAILURES`): a
    specific rule's, or a generic one's of the job's own code (:data:`_OWN_GENERIC`: a Python
    exception such as ``KeyError`` or ``ValueError`` that ended the rank), and no communication
    rule reads the line better."""
    found = [m for m in match_rules(ranks.strip_prefix(logs.normalize_line(line)), rules)
             if not m.rule.secondary and not logs.is_weak(m.line)]
    best = max(found, key=lambda m: m.rule.priority) if found else None
    if best is None or best.rule.category not in _OWN_FAILURES:
        return None
    return best if not best.rule.generic or best.rule.category in _OWN_GENERIC else None


#: Categories of the generic rules (priority <= 45) that read a rank's own failure: an uncaught
#: Python exception of the job's code (python-logic-exception, a DataLoader worker's re-raised
#: error) or an import (README C4, C9). The generic crash, kill and signal rules are not: the abort
#: of a waiting rank's watchdog and a launcher's exit line read as those.
_OWN_GENERIC = frozenset({"semantic_error", "incorrect_input", "import_error"})


def unattributed_timeout(d: Diagnosis) -> Diagnosis:
    """Origin ``unknown`` for a communication failure that is only a timeout or a peer gone (no
    other cause was found in the log): a peer that did not arrive in time, or closed the connection,
    says nothing of why (a rank still busy with its own work or dead of its own error elsewhere, a
    hang, a misconfigured launch, the network: README O2)."""
    if d.category != "comm_error" or d.origin == "unknown":
        return d
    said = d.evidence[0] if d.evidence else ""
    timed_out = d.rule_id in _TIMEOUT_RULES or (d.rule_id == "rendezvous" and said
                                                 and (_TIMED_OUT.search(said) or _store_closed(d.evidence)))
    if not timed_out and not (d.rule_id in _LOST_PEER_RULES and _PEER_GONE.search(said)):
        return d
    why = "a timeout waiting for a peer, or a peer or store host that went away, names no cause"
    return reorigin(d, "unknown", why)


#: The lost-peer messages that name no transport failure (README O2): Gloo's "Connection closed by
#: peer", NCCL's ncclRemoteError ("remote process exited or there was a network error": either),
#: the elastic agent's RendezvousClosedError, an aborted communicator. NCCL's own transport errors
#: (NET/IB "Got completion ... with error", NET/Socket connect failures) do name one: infrastructure.
_PEER_GONE = re.compile(r"Connection closed by peer|remote process exited or there was a network error|ncclRemoteError"
                        r"|RendezvousClosedError|NCCL communicator was aborted")


#: A Hugging Face datasets progress bar (its tqdm unit is " examples": "Generating train split: 7
#: examples [15:03, 79.25s/ examples]", "Map (num_proc=8):  45%|... [00:31<00:40, 310.2 examples/s]";
#: huggingface/datasets src/datasets/builder.py at 28b5e24344d99599b4bb4ef6ec5551d3a8ba9998 and
#: arrow_dataset.py's map/filter).
_PREPARING = re.compile(r"\d examples \[|examples/s\]|s/ examples\]")
#: Non-blank lines above the first timeout line read for it.
_PREPARING_SPAN = 4
#: Lines above the first timeout line searched for that progress bar (before this split, the bare
#: crash's lookback of the same 400 lines was read here).
_PREPARING_LOOKBACK = 400


def preparing_data(d: Diagnosis, lines: Sequence[str], floor: int, failures: Sequence[int],
                   rules: tuple[Rule, ...]) -> Diagnosis:
    """Origin ``user`` for a collective timeout whose origin no failure explains (``d`` made
    ``unknown`` by :func:`unattributed_timeout`) when the last output before the first timeout line
    is a data set being prepared (a datasets progress bar): one process was still tokenizing or
    generating its split while its peers waited at the collective until the timeout; the job's
    own work made them wait (README "Origin: rules", O2). Likewise when the job script started
    every node's launcher as node 0 (:func:`_fixed_node_rank`)."""
    rule = rule_by_id(rules, d.rule_id)
    if d.category != "comm_error" or d.origin != "unknown" or rule is None:
        return d
    first = next((i for i in failures if i >= floor and rule.pattern.search(logs.normalize_line(lines[i]))), None)
    if first is None:
        return d
    if _fixed_node_rank(lines, floor, first):
        return reorigin(d, "user", "the job script starts every node's launcher with the same node rank 0, so "
                                    "the nodes never form one group")
    seen = 0
    for k in range(first - 1, max(floor, first - _PREPARING_LOOKBACK) - 1, -1):
        text = lines[k].strip()
        if not text:
            continue
        if _PREPARING.search(text[-_PREPARING_TAIL:]):
            if _bar_done(text):
                return d  # its bar had ended: the data was ready, the wait was for something else
            return reorigin(d, "user", "a process was still preparing the data set while its peers waited")
        seen += 1
        if seen >= _PREPARING_SPAN:
            break
    return d


#: A Slurm srun line (as a job script's "set -x" trace or echo prints it) that starts a
#: multi-node launcher on several tasks or nodes: torchrun / torch.distributed.run|launch
#: ("--nnodes N --node_rank R"), accelerate launch ("--num_machines N --machine_rank R"),
#: deepspeed ("--num_nodes N --node_rank R"). With R written as the literal 0 every task starts
#: as node 0 and the rendezvous or store waits for the others until it times out.
_SRUN_LAUNCH = re.compile(r"\bsrun\b.*\b(?:torchrun|torch\.distributed\.(?:run|launch)|accelerate launch|deepspeed)\b")
_SRUN_TASKS = re.compile(r"\bsrun\b.*?(?:--ntasks[= ]|--nodes[= ]|\s-n\s?|\s-N\s?)(\d+)\b")
_NNODES = re.compile(r"--(?:nnodes|num_machines|num_nodes)[= ](\d+)\b")
_RANK_ZERO = re.compile(r"--(?:node_rank|machine_rank)[= ]0(?:\s|$)")


def _fixed_node_rank(lines: Sequence[str], floor: int, stop: int) -> bool:
    """Whether an srun line in ``lines[floor:stop]`` starts a launcher for several nodes on several
    tasks with its node rank written as 0 (README "Origin: rules", O2: a launch the job script got
    wrong)."""
    for i in find_keys(lines, ("srun ",), floor, stop):
        line = lines[i]
        if not _SRUN_LAUNCH.search(line) or not _RANK_ZERO.search(line):
            continue
        nodes, tasks = _NNODES.search(line), _SRUN_TASKS.search(line)
        if nodes and tasks and int(nodes.group(1)) > 1 and int(tasks.group(1)) > 1:
            return True
    return False


#: Characters at the end of a line read for a progress bar (a tqdm line holds every update).
_PREPARING_TAIL = 400


def _bar_done(line: str) -> bool:
    """Whether the last state of a progress bar's line (after its last ``\\r``) shows it at its end
    (100 %, or a count at its total)."""
    shown = line[line.rfind("\r") + 1:] if "\r" in line else line
    if "100%|" in shown:
        return True
    last = next(reversed(list(bar_updates(shown))), None)
    return last is not None and int(last.group(1)) >= int(last.group(2))
