"""The cluster, the workload and the scheduler of the simulator (everything but samples).

Time is counted in whole minutes from the start of the simulated period. The
plan is built in three steps, each deterministic for a seed:

1. :func:`build_cluster` - servers of 8 GPUs plus some of 2, a few bad nodes.
2. :func:`build_workload` - jobs with sizes, heavy-tailed durations, arrival
   times, planned outcomes (passed / killed / failed and how), inputs, users and
   the planted corrupted datasets.
3. :func:`schedule` - an event-driven scheduler with a priority queue,
   best-fit placement, relaxed locality, retries and node faults, producing
   attempts and per-GPU placements.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math

import numpy as np

from gpulens.ingest.simulate.params import GpuModel, SimParams, planted_util
from gpulens.vocab import DEFAULT_ORIGIN

__all__ = [
    "Attempt",
    "Cluster",
    "Plan",
    "Workload",
    "XidEvent",
    "build_cluster",
    "planted_origin",
    "build_workload",
    "schedule",
]

PLAN_PASS, PLAN_KILL, PLAN_FAIL = 0, 1, 2
PLAN_NAMES = ("passed", "killed", "failed")

#: Origin of each category the simulator plants (ground truth).
TRUE_ORIGIN: dict[str, str] = {
    c: DEFAULT_ORIGIN[c]
    for c in (
        "semantic_error", "gpu_oom", "cpu_oom", "import_error", "syntax_error",
        "incorrect_input", "checkpoint_error", "permission_error", "model_diverged",
        "cuda_error", "crash", "gpu_hardware", "comm_error", "storage_error",
    )
}

#: Categories whose origin follows where the failing code is (the origin convention of
#: docs/diagnosis.md): ``user_code`` -> user, ``framework`` -> framework.
FRAME_CATEGORIES: frozenset[str] = frozenset({"cuda_error", "crash"})


def planted_origin(category: str | None, frame: str | None) -> str:
    """The true origin of a planted failure: by its fault frame for crashes and CUDA errors."""
    if category in FRAME_CATEGORIES and frame is not None:
        return "user" if frame == "user_code" else "framework"
    return TRUE_ORIGIN.get(category or "", "unknown")


_DOMAINS = ("imagenet", "coco", "librispeech", "wmt16", "bookcorpus", "cifar100", "squad", "openwebtext")
_MODELS = ("resnet50", "bert-base", "lstm-lm", "transformer", "vgg16", "seq2seq", "deepspeech", "gpt-small")
_FRAMEWORKS = ("pytorch", "tensorflow", "cntk", "mxnet")
_FRAMEWORK_P = (0.45, 0.33, 0.17, 0.05)


@dataclasses.dataclass
class Cluster:
    names: list[str]
    sizes: np.ndarray  # GPUs per node
    models: list[GpuModel]
    gpu_offset: np.ndarray  # global index of each node's GPU 0
    bad: np.ndarray  # bool per node

    @property
    def total_gpus(self) -> int:
        return int(self.sizes.sum())

    def gpu_node(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.names)), self.sizes)


def build_cluster(gpus: int, params: SimParams, rng: np.random.Generator) -> Cluster:
    """8-GPU servers, the remaining GPUs on 2-GPU servers (an odd GPU is dropped)."""
    n8 = max(1, int(gpus * (1.0 - params.frac_gpus_on_2gpu_servers)) // 8)
    n2 = (gpus - 8 * n8) // 2
    sizes = np.array([8] * n8 + [2] * n2, dtype=np.int64)
    names = [f"sim-n{i:04d}" for i in range(n8)] + [f"sim-s{i:04d}" for i in range(n2)]
    models = [params.gpu_model_8] * n8 + [params.gpu_model_2] * n2
    offset = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    bad = np.zeros(len(sizes), dtype=bool)
    n_bad = min(params.bad_nodes, n8 // 4)
    if n_bad > 0:
        bad[rng.choice(n8, size=n_bad, replace=False)] = True
    return Cluster(names, sizes, models, offset, bad)


@dataclasses.dataclass
class Workload:
    submit: np.ndarray  # minute of submission
    gpus: np.ndarray
    work: np.ndarray  # planned run time, minutes
    plan: np.ndarray  # PLAN_*
    fail_cat: list[str | None]
    fail_after: np.ndarray  # minutes into an attempt when a planned failure happens
    fail_attempts: np.ndarray  # failed attempts before the user gives up
    kill_at: np.ndarray  # minutes of run time after which the user kills it
    relaxed: np.ndarray  # bool: asks for a spread placement
    user: list[str]
    vc: list[str]
    name: list[str]
    framework: list[str]
    inputs: list[list[str]]
    corrupted_input: list[str | None]
    fault_frame: list[str | None]  # user_code | framework for crash / cuda_error failures
    epochs: np.ndarray
    converge_fraction: np.ndarray
    users: list[str]
    datasets: list[str]
    corrupted: list[str]

    def __len__(self) -> int:
        return len(self.submit)

    def subset(self, keep: np.ndarray) -> Workload:
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("users", "datasets", "corrupted"):
                out[f.name] = v
            elif isinstance(v, np.ndarray):
                out[f.name] = v[keep]
            else:
                out[f.name] = [v[int(i)] for i in keep]
        return Workload(**out)  # type: ignore[arg-type]


def _usage_factor(params: SimParams) -> float:
    """Expected share of its planned run time a job actually occupies GPUs."""
    kill = sum(params.kill_fraction) / 2.0
    return params.p_passed + params.p_killed * kill + params.p_failed * 0.05


@dataclasses.dataclass(frozen=True)
class _Sizes:
    """Requested-GPU choices, their probabilities, and the cap (half the cluster, a power of two)."""

    values: np.ndarray
    probs: np.ndarray
    cap: int

    @classmethod
    def of(cls, params: SimParams, n_gpus: int) -> _Sizes:
        probs = np.array(params.job_size_probs, dtype=float)
        return cls(np.array(params.job_sizes, dtype=np.int64), probs / probs.sum(),
                   1 << int(math.floor(math.log2(max(n_gpus // 2, 1)))))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.minimum(rng.choice(self.values, size=n, p=self.probs), self.cap)


@dataclasses.dataclass
class _Outcomes:
    """Per job: size, planned run time and how it is planned to end."""

    gpus: np.ndarray
    work: np.ndarray
    plan: np.ndarray
    fail_cat: list[str | None]
    fail_attempts: np.ndarray
    kill_at: np.ndarray
    relaxed: np.ndarray


@dataclasses.dataclass
class _Owners:
    """Per job: who submitted it, what it is called, its framework and inputs."""

    users: list[str]
    datasets: list[str]
    user: list[str]
    vc: list[str]
    name: list[str]
    framework: list[str]
    inputs: list[list[str]]


def build_workload(cluster: Cluster, minutes: int, params: SimParams, rng: np.random.Generator) -> Workload:
    """The jobs submitted over the period and its warm-up: what they ask for, who owns them, how they end."""
    n_gpus = cluster.total_gpus
    sizes = _Sizes.of(params, n_gpus)
    submit = _submit_minutes(n_gpus, minutes, sizes, params, rng)
    n = len(submit)
    out = _outcomes(n, sizes, params, rng)
    own = _owners(n, n_gpus, params, rng)
    epochs, converge_fraction = _training(n, params, rng)
    fail_after = _fail_after(out.fail_cat, params, rng)
    corrupted = [f"/data/shared/corrupt-{_DOMAINS[(i * 3) % len(_DOMAINS)]}-shard{i:02d}"
                 for i in range(params.corrupted_inputs)]
    corrupted_input: list[str | None] = [None] * n
    if corrupted and n:
        _plant_corrupted(corrupted, corrupted_input, out, own, fail_after, params, rng)
    return Workload(
        submit=submit, gpus=out.gpus, work=out.work, plan=out.plan, fail_cat=out.fail_cat,
        fail_after=fail_after, fail_attempts=out.fail_attempts, kill_at=out.kill_at, relaxed=out.relaxed,
        user=own.user, vc=own.vc, name=own.name, framework=own.framework, inputs=own.inputs,
        corrupted_input=corrupted_input, fault_frame=_fault_frames(out.fail_cat, params, rng), epochs=epochs,
        converge_fraction=converge_fraction, users=own.users, datasets=own.datasets, corrupted=corrupted,
    )


def _submit_minutes(n_gpus: int, minutes: int, sizes: _Sizes, params: SimParams,
                    rng: np.random.Generator) -> np.ndarray:
    """Submission minute of each job: diurnal Poisson arrivals from the warm-up's start."""
    # Arrival rate so expected GPU-time used is offered_load of capacity.
    probe = np.random.default_rng(12345)
    ps = sizes.draw(probe, 200_000)
    pw = _durations(ps, params, probe)
    mean_gpu_min = float((ps * pw).mean()) * _usage_factor(params)
    rate = params.offered_load * n_gpus / mean_gpu_min  # jobs per minute
    warm = int(round(params.warmup_days * 1440))
    t = np.arange(-warm, minutes)
    day_phase = (t % 1440) / 1440.0
    lam = rate * (1.0 + params.diurnal_amplitude * np.sin(2 * np.pi * (day_phase - 0.375)))
    counts = rng.poisson(lam)
    return np.repeat(t, counts).astype(np.int64)


def _outcomes(n: int, sizes: _Sizes, params: SimParams, rng: np.random.Generator) -> _Outcomes:
    """Sizes, run times, planned endings (failure category, attempts, kill time) and locality."""
    gpus = sizes.draw(rng, n).astype(np.int64)
    work = _durations(gpus, params, rng)
    status_p = np.array([params.p_passed, params.p_killed, params.p_failed], dtype=float)
    plan = rng.choice(3, size=n, p=status_p / status_p.sum()).astype(np.int64)
    cats = list(params.fail_categories)
    cat_p = np.array(params.fail_category_probs, dtype=float)
    cat_idx = rng.choice(len(cats), size=n, p=cat_p / cat_p.sum())
    fail_cat: list[str | None] = [cats[c] if p == PLAN_FAIL else None for c, p in zip(cat_idx, plan, strict=True)]
    # Failing jobs: attempts until the user gives up (geometric, capped).
    give_up = rng.geometric(params.p_give_up_after_failure, size=n)
    fail_attempts = np.minimum(give_up, params.max_attempts).astype(np.int64)
    kf = rng.uniform(*params.kill_fraction, size=n)
    kill_at = np.maximum(1, np.round(work * kf)).astype(np.int64)
    relaxed = (rng.random(n) < params.p_relaxed_locality) & (gpus >= 2)
    return _Outcomes(gpus, work, plan, fail_cat, fail_attempts, kill_at, relaxed)


def _owners(n: int, n_gpus: int, params: SimParams, rng: np.random.Generator) -> _Owners:
    """Users (Zipf-like activity) in virtual clusters, job names, frameworks and input datasets."""
    n_users = int(np.clip(round(n_gpus / 8 * params.users_per_8_gpus), params.min_users, params.max_users))
    users = [f"u{i:03d}" for i in range(n_users)]
    user_vc = rng.integers(0, params.vcs, size=n_users)
    weights = 1.0 / np.arange(1, n_users + 1) ** 0.9
    uidx = rng.choice(n_users, size=n, p=weights / weights.sum())
    datasets = [f"/data/datasets/{_DOMAINS[i % len(_DOMAINS)]}-v{i // len(_DOMAINS) + 1}" for i in range(params.datasets)]
    dweights = 1.0 / np.arange(1, params.datasets + 1) ** 0.8
    didx = rng.choice(params.datasets, size=n, p=dweights / dweights.sum())
    second = rng.random(n) < 0.25
    didx2 = rng.choice(params.datasets, size=n, p=dweights / dweights.sum())
    model_idx = rng.integers(0, len(_MODELS), size=n)
    fw_idx = rng.choice(len(_FRAMEWORKS), size=n, p=np.array(_FRAMEWORK_P))
    inputs: list[list[str]] = []
    for i in range(n):
        ins = [datasets[didx[i]]]
        if second[i] and didx2[i] != didx[i]:
            ins.append(datasets[didx2[i]])
        inputs.append(ins)
    return _Owners(
        users=users, datasets=datasets, user=[users[u] for u in uidx], vc=[f"vc{user_vc[u]:02d}" for u in uidx],
        name=[f"{_MODELS[m]}-{datasets[d].rsplit('/', 1)[1]}" for m, d in zip(model_idx, didx, strict=True)],
        framework=[_FRAMEWORKS[i] for i in fw_idx], inputs=inputs,
    )


def _training(n: int, params: SimParams, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, converge_fraction) per job: how long it trains and when it converges."""
    epochs = np.clip(
        np.round(rng.lognormal(math.log(params.epochs_median), params.epochs_sigma, size=n)),
        params.epochs_min, params.epochs_max,
    ).astype(np.int64)
    early = rng.random(n) < params.early_converge_share
    f_early = rng.uniform(0.05, params.early_converge_fraction, size=n)
    f_late = rng.uniform(params.early_converge_fraction, 0.97, size=n)
    return epochs, np.where(early, f_early, f_late)


def _fail_after(fail_cat: list[str | None], params: SimParams, rng: np.random.Generator) -> np.ndarray:
    """Minutes into an attempt when each failing job's planned failure happens (0: it does not fail)."""
    fail_after = np.zeros(len(fail_cat), dtype=np.int64)
    for i, cat in enumerate(fail_cat):
        if cat is None:
            continue
        origin = TRUE_ORIGIN[cat]
        med = {"user": params.user_fail_median_min, "data": params.data_fail_median_min}.get(
            origin, params.framework_fail_median_min
        )
        fail_after[i] = max(1, round(rng.lognormal(math.log(med), params.fail_sigma)))
    return fail_after


def _plant_corrupted(corrupted: list[str], corrupted_input: list[str | None], out: _Outcomes, own: _Owners,
                     fail_after: np.ndarray, params: SimParams, rng: np.random.Generator) -> None:
    """Assign the corrupted datasets to jobs, which then fail reading them (edits the arguments)."""
    for i, cat in enumerate(out.fail_cat):
        if cat == "incorrect_input" and rng.random() < params.corrupted_share_of_incorrect_input:
            corrupted_input[i] = corrupted[int(rng.integers(len(corrupted)))]
    order = [int(i) for i in rng.permutation(len(corrupted_input))]
    for ds in corrupted:
        _spread_corrupted(ds, order, corrupted_input, out.fail_cat, own.user, params)
    for i, bad_ds in enumerate(corrupted_input):
        if bad_ds is None:
            if out.fail_cat[i] == "incorrect_input":
                own.inputs[i].append(f"/home/{own.user[i]}/data/{own.name[i]}-{i:06d}.tfrecord")
            continue
        out.plan[i] = PLAN_FAIL
        out.fail_cat[i] = "incorrect_input"
        own.inputs[i].append(bad_ds)
        if fail_after[i] == 0:
            fail_after[i] = max(1, round(rng.lognormal(math.log(params.data_fail_median_min), params.fail_sigma)))


def _spread_corrupted(ds: str, order: list[int], corrupted_input: list[str | None], fail_cat: list[str | None],
                      user: list[str], params: SimParams) -> None:
    """Make sure the corrupted dataset ``ds`` hits enough jobs from 2+ users (edits ``corrupted_input``)."""
    members = [i for i in range(len(corrupted_input)) if corrupted_input[i] == ds]
    for i in order:
        if len(members) >= params.corrupted_min_jobs and len({user[m] for m in members}) >= 2:
            break
        if corrupted_input[i] is not None or fail_cat[i] == "incorrect_input":
            continue
        if members and len({user[m] for m in members}) < 2 and user[i] == user[members[0]]:
            continue
        corrupted_input[i] = ds
        members.append(i)


def _fault_frames(fail_cat: list[str | None], params: SimParams, rng: np.random.Generator) -> list[str | None]:
    """Where each job's deterministic crash / CUDA error happens (drawn once per job)."""
    draws = rng.random(len(fail_cat))
    return [
        ("user_code" if u < params.p_crash_user_code else "framework") if c in FRAME_CATEGORIES else None
        for c, u in zip(fail_cat, draws, strict=True)
    ]


def _durations(gpus: np.ndarray, params: SimParams, rng: np.random.Generator) -> np.ndarray:
    med = params.duration_median_min * gpus.astype(float) ** params.duration_size_exponent
    d = rng.lognormal(np.log(med), params.duration_sigma)
    return np.clip(np.round(d), params.duration_min_min, params.duration_max_min).astype(np.int64)


@dataclasses.dataclass
class Attempt:
    job: int
    attempt: int
    start: int
    end: int | None  # None: still running at the end of the period
    status: str
    category: str | None
    node_fault: bool
    fault_node: int | None
    planted: str | None
    servers: int
    min_servers: int
    util_mean: float  # planted mean utilization of this attempt, 0-1
    gpus: list[tuple[int, int]]  # (node, gpu_index)


@dataclasses.dataclass
class XidEvent:
    minute: int
    second: int
    node: int
    gpu_index: int
    xid: int


@dataclasses.dataclass
class Plan:
    cluster: Cluster
    workload: Workload
    minutes: int
    attempts: list[Attempt]
    job_status: list[str]
    job_epochs_done: np.ndarray  # epochs the last attempt completed (for metric curves)
    xids: list[XidEvent]


#: A candidate ending of an attempt: (minutes, status, category, node_fault, fault_node, planted).
_Ending = tuple[float, str, str | None, bool, int | None, str | None]


class _Sched:
    def __init__(self, cluster: Cluster, wl: Workload, minutes: int, params: SimParams,
                 rng: np.random.Generator) -> None:
        self.c, self.wl, self.T, self.p, self.rng = cluster, wl, minutes, params, rng
        n_nodes = len(cluster.sizes)
        self.busy = np.zeros((n_nodes, 8), dtype=bool)
        for i, s in enumerate(cluster.sizes):
            self.busy[i, s:] = True  # slots that do not exist are permanently busy
        self.free = cluster.sizes.copy()
        self.is8 = cluster.sizes == 8
        n = len(wl)
        self.attempt_no = np.zeros(n, dtype=np.int64)
        self.failures = np.zeros(n, dtype=np.int64)
        self.planned_failures = np.zeros(n, dtype=np.int64)
        self.excluded: dict[int, set[int]] = {}
        self.queued_since = wl.submit.copy()
        self.status = ["queued"] * n
        self.epochs_done = np.zeros(n, dtype=np.int64)
        self.attempts: list[Attempt] = []
        self.xids: list[XidEvent] = []
        self.queue: list[tuple[int, int]] = []  # (submit minute, job) sorted
        self.events: list[tuple[int, int, int]] = []  # (minute, seq, attempt row)
        self.seq = 0
        self.res_job: int | None = None
        self.res_nodes = np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------- placement
    def _place(self, j: int, now: int) -> list[tuple[int, int]] | None:
        g = int(self.wl.gpus[j])
        free = self.free.copy()
        for node in self.excluded.get(j, ()):
            free[node] = 0
        if self.res_job is not None and j != self.res_job:
            free[self.res_nodes] = 0  # nodes draining for the reserved job
        if free.sum() < g:
            return None
        k_min = 1 if g <= 8 else g // 8
        options = [k for k in (1, 2, 4, 8, 16, 32, 64) if k_min <= k <= g and g % k == 0]
        tries: list[tuple[int, bool]] = []
        if self.wl.relaxed[j] and len(options) > 1:
            tries.append((int(self.rng.choice(options[1:])), True))
        tries.append((k_min, False))
        if g >= 2 and now - self.queued_since[j] >= self.p.relax_after_min:
            tries += [(k, True) for k in options[1:]]
        for k, spread in tries:
            share = g // k
            elig = np.flatnonzero(free >= share)
            if share > 2:
                elig = elig[self.is8[elig]]
            if len(elig) < k:
                continue
            if spread:
                chosen = self.rng.choice(elig, size=k, replace=False)
            else:  # best fit: the fullest servers that still fit the share
                chosen = elig[np.argsort(free[elig], kind="stable")[:k]]
            out: list[tuple[int, int]] = []
            for node in sorted(int(x) for x in chosen):
                idx = np.flatnonzero(~self.busy[node])[:share]
                out += [(node, int(i)) for i in idx]
            return out
        return None

    # ---------------------------------------------------------------- attempt
    def _start(self, j: int, now: int, gpus: list[tuple[int, int]]) -> None:
        """Start job ``j``'s next attempt on ``gpus``: draw how and when it ends, and queue that end."""
        for node, gi in gpus:
            self.busy[node, gi] = True
            self.free[node] -= 1
        nodes = sorted({n for n, _ in gpus})
        g = int(self.wl.gpus[j])
        k_min = 1 if g <= 8 else g // 8
        dur, status, end_cat, fault, fnode, planted = min(self._endings(j, nodes), key=lambda c: c[0])
        dur_i = max(1, int(round(dur)))
        m = planted_util(self.p, g, len(nodes), k_min) / 100.0
        kappa = self.p.util_job_concentration
        util_mean = float(self.rng.beta(m * kappa, (1 - m) * kappa))
        row = Attempt(j, int(self.attempt_no[j]), now, now + dur_i, status, end_cat, fault, fnode, planted,
                      len(nodes), k_min, util_mean, gpus)
        self.attempt_no[j] += 1
        self.attempts.append(row)
        self.status[j] = "running"
        if fault and fnode is not None:
            self._node_fault_xid(now + dur_i - 1, fnode, gpus)
        heapq.heappush(self.events, (now + dur_i, self.seq, len(self.attempts) - 1))
        self.seq += 1

    def _endings(self, j: int, nodes: list[int]) -> list[_Ending]:
        """Candidate endings of an attempt of job ``j`` on ``nodes``: its plan, bad nodes' faults, transients."""
        p, rng = self.p, self.rng
        cands = [self._planned_ending(j)]
        horizon = cands[0][0]
        for node in nodes:
            if self.c.bad[node]:
                tf = rng.exponential(p.bad_node_mttf_min)
                if tf < horizon:
                    cands.append((max(1.0, tf), "failed", "gpu_hardware", True, node, "bad_node"))
        if len(nodes) > 1 and rng.random() < p.p_transient_comm_multi_server:
            cands.append((rng.uniform(1, max(horizon, 1.0)), "failed", "comm_error", False, None, "transient"))
        if rng.random() < p.p_transient_storage:
            cands.append((rng.uniform(1, max(horizon, 1.0)), "failed", "storage_error", False, None, "transient"))
        return cands

    def _planned_ending(self, j: int) -> _Ending:
        """How job ``j``'s attempt ends as planned: passed, killed, or its planned failure."""
        wl = self.wl
        plan = int(wl.plan[j])
        if plan == PLAN_PASS:
            return (float(wl.work[j]), "passed", None, False, None, None)
        if plan == PLAN_KILL:
            return (float(wl.kill_at[j]), "killed", None, False, None, None)
        jitter = self.rng.uniform(0.9, 1.1)
        cat = wl.fail_cat[j]
        tag = "corrupt_input" if wl.corrupted_input[j] else (
            "user_repeat" if planted_origin(cat, wl.fault_frame[j]) == "user" else "repeat")
        return (max(1.0, wl.fail_after[j] * jitter), "failed", cat, False, None, tag)

    def _node_fault_xid(self, minute: int, node: int, gpus: list[tuple[int, int]]) -> None:
        """Record the XID a node fault raises on one of the attempt's GPUs on ``node``."""
        on_node = [gi for n, gi in gpus if n == node]
        xid = int(self.rng.choice([79, 48, 64], p=[0.5, 0.3, 0.2]))
        self.xids.append(XidEvent(minute, int(self.rng.integers(0, 60)), node, int(self.rng.choice(on_node)), xid))

    def _finish(self, a: Attempt, now: int) -> None:
        for node, gi in a.gpus:
            self.busy[node, gi] = False
            self.free[node] += 1
        j = a.job
        wl = self.wl
        if a.status in ("passed", "killed"):
            self.status[j] = a.status
            done = wl.work[j] if a.status == "passed" else wl.kill_at[j]
            self.epochs_done[j] = int(wl.epochs[j] * min(1.0, done / max(wl.work[j], 1)))
            return
        self.failures[j] += 1
        if a.category == wl.fail_cat[j] and not a.node_fault:
            self.planned_failures[j] += 1
        if self.planned_failures[j] >= wl.fail_attempts[j] or self.attempt_no[j] >= self.p.max_attempts:
            self.status[j] = "failed"
            return
        if a.node_fault and a.fault_node is not None:
            self.excluded.setdefault(j, set()).add(a.fault_node)
        self.status[j] = "queued"
        self.queued_since[j] = now
        bisect.insort(self.queue, (int(wl.submit[j]), j))

    def _drain_set(self, j: int) -> np.ndarray:
        """The emptiest servers that together hold the reserved job."""
        g = int(self.wl.gpus[j])
        cand = np.flatnonzero(self.is8) if g > 2 else np.arange(len(self.free))
        cand = np.array([c for c in cand if c not in self.excluded.get(j, ())], dtype=np.int64)
        order = cand[np.argsort(-self.free[cand], kind="stable")]
        sizes = np.cumsum(self.c.sizes[order])
        return order[: int(np.searchsorted(sizes, g)) + 1]

    def _schedule(self, now: int) -> None:
        if not self.queue:
            return
        total_free = int(self.free.sum())
        if total_free == 0:
            return
        started: list[int] = []
        for pos, (_, j) in enumerate(self.queue):
            if total_free == 0:
                break
            g = int(self.wl.gpus[j])
            placed = self._place(j, now) if g <= total_free else None
            if placed is None:
                if self.res_job is None and now - self.queued_since[j] >= self.p.reserve_after_min:
                    # Reserve: drain the emptiest servers for a job that waited too long.
                    self.res_job, self.res_nodes = j, self._drain_set(j)
                continue
            if j == self.res_job:
                self.res_job, self.res_nodes = None, np.zeros(0, dtype=np.int64)
            self._start(j, now, placed)
            total_free -= g
            started.append(pos)
        for pos in reversed(started):
            del self.queue[pos]

    def run(self) -> None:
        wl = self.wl
        order = np.argsort(wl.submit, kind="stable")
        ai = 0
        n = len(order)
        while True:
            t_arr = int(wl.submit[order[ai]]) if ai < n else self.T
            t_end = self.events[0][0] if self.events else self.T
            now = min(t_arr, t_end)
            if now >= self.T:
                break
            while self.events and self.events[0][0] == now:
                _, _, row = heapq.heappop(self.events)
                self._finish(self.attempts[row], now)
            while ai < n and int(wl.submit[order[ai]]) == now:
                j = int(order[ai])
                bisect.insort(self.queue, (int(wl.submit[j]), j))
                ai += 1
            self._schedule(now)
        # Attempts still running at the end of the period.
        for _, _, row in self.events:
            a = self.attempts[row]
            a.end, a.status, a.category, a.node_fault, a.fault_node, a.planted = None, "running", None, False, None, None
            j = a.job
            elapsed = self.T - a.start
            self.epochs_done[j] = int(wl.epochs[j] * min(1.0, elapsed / max(wl.work[j], 1)))
            self.status[j] = "running"
        # Node faults that happen after the end are not real.
        self.xids = [x for x in self.xids if 0 <= x.minute < self.T]


def _background_xids(cluster: Cluster, minutes: int, params: SimParams,
                     rng: np.random.Generator) -> list[XidEvent]:
    out: list[XidEvent] = []
    for node in np.flatnonzero(cluster.bad):
        k = rng.poisson(params.bad_node_xid_per_hour * minutes / 60.0)
        for m in np.sort(rng.integers(0, minutes, size=k)):
            out.append(XidEvent(int(m), int(rng.integers(0, 60)), int(node),
                                int(rng.integers(0, cluster.sizes[node])),
                                int(rng.choice([63, 92, 94]))))
    return out


def schedule(cluster: Cluster, wl: Workload, minutes: int, params: SimParams,
             rng: np.random.Generator) -> Plan:
    s = _Sched(cluster, wl, minutes, params, rng)
    s.run()
    xids = sorted(s.xids + _background_xids(cluster, minutes, params, rng),
                  key=lambda x: (x.minute, x.second, x.node, x.gpu_index))
    # Warm-up: the period opens on a busy cluster. Attempts that ended before
    # minute 0 are dropped, attempts running at minute 0 are clipped to start
    # there, and jobs with nothing left in the period are dropped.
    attempts: list[Attempt] = []
    active = np.zeros(len(wl), dtype=bool)
    active[wl.submit >= 0] = True
    for a in s.attempts:
        if a.end is not None and a.end <= 0:
            continue
        if a.start < 0:
            a.start = 0
        attempts.append(a)
        active[a.job] = True
    for j, st in enumerate(s.status):
        if st == "queued":
            active[j] = True
    keep = np.flatnonzero(active)
    remap = np.full(len(wl), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    for a in attempts:
        a.job = int(remap[a.job])
    attempts.sort(key=lambda a: (a.job, a.attempt))
    wl2 = wl.subset(keep)
    return Plan(cluster, wl2, minutes, attempts, [s.status[j] for j in keep], s.epochs_done[keep], xids)
