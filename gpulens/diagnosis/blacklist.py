"""Input blacklisting: inputs that keep breaking jobs, with an audit log.

States of an input (table ``blacklist``)::

    (absent) --evidence--> suspected --enough evidence--> blacklisted
        any  --operator add-------------------------------> blacklisted
        any  --operator remove----------------------------> cleared

Evidence is a failed job attempt classified ``incorrect_input``. The inputs a
failure blames (:func:`blame_inputs`) are the job's declared inputs that the
failure log names (a declared directory covers the files under it); when the
log names none of them, the absolute paths and URIs the log names; when the log
names none (relative paths are ignored: they depend on the job's working
directory), every declared input. When that leaves several candidates, the
ones other jobs read successfully are dropped (a corrupted input fails every
job that reads it), unless that would drop them all.

An input's evidence score is ``jobs + user_weight * (users - 1)``: every
distinct failing job counts once, and every additional distinct user behind
those jobs adds ``user_weight`` (config ``diagnose.blacklist_user_weight``,
default 1.0), because jobs of one user may share that user's bug while
different users' jobs share little but the input. The input is blacklisted when
the score reaches ``k`` (``diagnose.blacklist_min_jobs``, default 2), so ``k``
distinct jobs always suffice and, with ``k = 3``, two jobs of two users do too
while two jobs of one user stay suspected. An input that more jobs used
successfully after its first failure than failed with it stays suspected.

Automatic updates only ever raise the state (never lower a manual entry) and a
cleared input is blacklisted again only by failures from jobs that were not
already part of the evidence when it was cleared. Every change (state or
evidence) is written to ``blacklist_audit`` with who, when and why.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

import duckdb
import pandas as pd

from gpulens.errors import InputError
from gpulens.store import Store
from gpulens.vocab import BLACKLIST_STATES

__all__ = [
    "AUTO_ACTOR",
    "STATES",
    "Transition",
    "add",
    "audit_log",
    "blame_inputs",
    "check",
    "covers",
    "default_actor",
    "evidence_score",
    "is_global",
    "list_entries",
    "normalize_input",
    "remove",
    "update_from_failures",
    "used_by_passing_jobs",
]

STATES = BLACKLIST_STATES
AUTO_ACTOR = "gpulens-auto"
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def normalize_input(value: str) -> str:
    """Canonical spelling of an input: trimmed, quotes removed, paths normalised.

    A trailing ``/`` is kept (it marks a directory entry that covers the files under it).
    """
    text = str(value).strip().strip("'\"`").strip()
    if not text:
        raise InputError("An empty input name was given.", "Pass a path, URI or dataset id.")
    if "\x00" in text or len(text) > 4096:
        raise InputError(f"Input {text[:60]!r} is not a usable name.", "Pass a path, URI or dataset id.")
    slash = text.endswith("/") and len(text) > 1
    if _URI.match(text):
        scheme, rest = text.split("://", 1)
        rest = posixpath.normpath(rest) if rest else rest
        out = f"{scheme.lower()}://{rest}"
    elif text.startswith(("/", "./", "../", "~")):
        out = posixpath.normpath(text)
    else:
        out = text
    if slash and not out.endswith("/"):
        out += "/"
    return out


def covers(entry: str, path: str) -> bool:
    """True when ``entry`` names ``path`` or a directory above it."""
    if entry == path:
        return True
    base = entry.rstrip("/")
    return bool(base) and path.startswith(base + "/")


def is_global(name: str) -> bool:
    """True for names that mean the same thing in every job: absolute paths and URIs.

    A relative path in a log (``data/train.csv``) depends on the job's working
    directory, so two jobs naming it need not share anything.
    """
    return name.startswith("/") or bool(_URI.match(name))


def blame_inputs(
    declared: Iterable[str] | None,
    named: Iterable[str] | None,
    exonerated: Iterable[str] = (),
) -> list[str]:
    """The inputs one failure is evidence against (see the module docstring).

    When several inputs are candidates, those in ``exonerated`` (inputs other
    jobs used successfully) are dropped, unless that would drop them all.
    """
    decl = _norm_all(declared or [])
    logs = [n for n in _norm_all(named or []) if is_global(n)]
    matched = [d for d in decl if any(covers(d, n) for n in logs)]
    cands = matched or logs or decl
    ok = list(exonerated)
    if len(cands) > 1 and ok:
        kept = [c for c in cands if not any(covers(c, u) or covers(u, c) for u in ok)]
        cands = kept or cands
    return cands


def _norm_all(values: Iterable[str]) -> list[str]:
    out: dict[str, None] = {}
    for v in values:
        if v is None:
            continue
        try:
            out.setdefault(normalize_input(v), None)
        except InputError:
            continue
    return list(out)


def evidence_score(jobs: int, users: int, user_weight: float = 1.0) -> float:
    """Evidence against an input: distinct jobs, plus ``user_weight`` per extra distinct user."""
    return float(jobs) + user_weight * max(users - 1, 0)


# ------------------------------------------------------------------ reading
def list_entries(con: duckdb.DuckDBPyConnection, state: str | None = None) -> pd.DataFrame:
    """Blacklist entries (input, state, reason, evidence_jobs, updated_at), newest first."""
    if state is not None and state not in STATES:
        raise InputError(f"Unknown blacklist state {state!r}.", f"Use one of: {', '.join(STATES)}.")
    sql = "SELECT input, state, reason, evidence_jobs, updated_at FROM blacklist"
    params: list[object] = []
    if state is not None:
        sql += " WHERE state = ?"
        params.append(state)
    sql += " ORDER BY updated_at DESC, input"
    return _nones(con.execute(sql, params).df())


def audit_log(con: duckdb.DuckDBPyConnection, input: str | None = None) -> pd.DataFrame:
    """Every change (id, ts, input, old_state, new_state, actor, reason), oldest first."""
    sql = "SELECT id, ts, input, old_state, new_state, actor, reason FROM blacklist_audit"
    params: list[object] = []
    if input is not None:
        sql += " WHERE input = ?"
        params.append(normalize_input(input))
    sql += " ORDER BY id"
    return _nones(con.execute(sql, params).df())


def _nones(df: pd.DataFrame) -> pd.DataFrame:
    """Missing text as None (pandas would show NaN), timestamps kept as timestamps."""
    for col in df.columns:
        if not pd.api.types.is_datetime64_any_dtype(df[col]) and not pd.api.types.is_numeric_dtype(df[col]):
            df[col] = df[col].astype(object).where(df[col].notna(), None)
    return df


def check(con: duckdb.DuckDBPyConnection, inputs: Iterable[str]) -> list[str]:
    """The given inputs that are blacklisted (an entry ending in '/' covers files below it)."""
    rows = con.execute("SELECT input FROM blacklist WHERE state = 'blacklisted'").fetchall()
    entries = [r[0] for r in rows]
    hits: list[str] = []
    for raw in inputs:
        name = normalize_input(raw)
        if any(covers(e, name) for e in entries) and raw not in hits:
            hits.append(raw)
    return hits


# ------------------------------------------------------------------ writing
def _audit(
    con: duckdb.DuckDBPyConnection,
    ts: datetime,
    input: str,
    old: str | None,
    new: str,
    actor: str,
    reason: str,
) -> None:
    con.execute(
        "INSERT INTO blacklist_audit (ts, input, old_state, new_state, actor, reason) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [ts, input, old, new, actor, reason],
    )


def _check_actor_reason(actor: str, reason: str) -> None:
    if not actor or not actor.strip():
        raise InputError("No actor given for the blacklist change.", "Pass --actor NAME (who makes it).")
    if not reason or not reason.strip():
        raise InputError("No reason given for the blacklist change.", "Pass --reason TEXT (why).")


def add(
    store: Store,
    input: str,
    actor: str,
    reason: str,
    *,
    evidence_jobs: Sequence[str] = (),
    clock: Clock = _now,
) -> str:
    """Blacklist ``input`` by hand. Returns the previous state ('' when new)."""
    _check_actor_reason(actor, reason)
    name = normalize_input(input)
    ts = clock()
    with store.write() as con:
        row = con.execute("SELECT state, evidence_jobs FROM blacklist WHERE input = ?", [name]).fetchone()
        old = row[0] if row else None
        jobs = sorted(set(row[1] or []) | set(evidence_jobs)) if row else sorted(set(evidence_jobs))
        if old == "blacklisted":
            return old
        con.execute(
            "INSERT OR REPLACE INTO blacklist (input, state, reason, evidence_jobs, updated_at) "
            "VALUES (?, 'blacklisted', ?, ?, ?)",
            [name, reason, jobs, ts],
        )
        _audit(con, ts, name, old, "blacklisted", actor, reason)
    return old or ""


def remove(store: Store, input: str, actor: str, reason: str, *, clock: Clock = _now) -> str:
    """Clear ``input`` (the entry and its evidence stay, state 'cleared'). Returns the old state."""
    _check_actor_reason(actor, reason)
    name = normalize_input(input)
    ts = clock()
    with store.write() as con:
        row = con.execute("SELECT state FROM blacklist WHERE input = ?", [name]).fetchone()
        if row is None:
            raise InputError(
                f"Input {name!r} is not on the blacklist.",
                "`gpulens blacklist list` shows the entries (names are matched exactly).",
            )
        old = str(row[0])
        if old == "cleared":
            return old
        con.execute(
            "UPDATE blacklist SET state = 'cleared', reason = ?, updated_at = ? WHERE input = ?",
            [reason, ts, name],
        )
        _audit(con, ts, name, old, "cleared", actor, reason)
    return old


@dataclasses.dataclass
class Transition:
    input: str
    old_state: str | None
    new_state: str
    jobs: list[str]
    users: int
    score: float
    reason: str


def used_by_passing_jobs(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Inputs (normalised) declared by at least one job that passed: evidence they are sound."""
    rows = con.execute(
        "SELECT DISTINCT unnest(inputs) FROM jobs WHERE status = 'passed' AND inputs IS NOT NULL"
    ).fetchall()
    return set(_norm_all(r[0] for r in rows))


def _evidence(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, dict[str, str | None]], dict[str, datetime]]:
    """input -> {job_id: user} of incorrect_input failures, and input -> first failure time."""
    ok = used_by_passing_jobs(con)
    rows = con.execute(
        """
        SELECT f.job_id, j."user", j.inputs, f.inputs, a.end_time
        FROM failures f
        LEFT JOIN jobs j USING (job_id)
        LEFT JOIN attempts a ON a.job_id = f.job_id AND a.attempt = f.attempt
        WHERE f.category = 'incorrect_input'
        """
    ).fetchall()
    jobs: dict[str, dict[str, str | None]] = {}
    first: dict[str, datetime] = {}
    for job_id, user, declared, named, end in rows:
        for name in blame_inputs(declared, named, ok):
            jobs.setdefault(name, {})[job_id] = user
            if end is not None and (name not in first or end < first[name]):
                first[name] = end
    return jobs, first


def _passing_jobs(con: duckdb.DuckDBPyConnection, names: Iterable[str], first: dict[str, datetime]) -> dict[str, int]:
    """Per input, jobs that passed using it after its first failure."""
    rows = con.execute(
        """
        SELECT j.job_id, j.inputs, max(a.end_time)
        FROM jobs j JOIN attempts a USING (job_id)
        WHERE j.status = 'passed' AND j.inputs IS NOT NULL AND len(j.inputs) > 0
        GROUP BY j.job_id, j.inputs
        """
    ).fetchall()
    wanted = set(names)
    out: dict[str, int] = {}
    for _job, declared, end in rows:
        for d in _norm_all(declared or []):
            for name in wanted:
                if covers(name, d) or covers(d, name):
                    t0 = first.get(name)
                    if t0 is None or end is None or end >= t0:
                        out[name] = out.get(name, 0) + 1
    return out


def _target_state(old_state: str | None, enough: bool) -> str:
    """The state an input moves to: automatic updates never lower a state, and a cleared
    input relists only with enough evidence."""
    if old_state == "blacklisted":
        return "blacklisted"
    if old_state == "cleared":
        return "blacklisted" if enough else "cleared"
    return "blacklisted" if enough else "suspected"


def _transition(name: str, by_job: dict[str, str | None], old: tuple[str | None, list[str]], ok: int,
                k: int, user_weight: float) -> Transition | None:
    """What the evidence ``by_job`` (job -> user) does to the input ``name`` in state ``old``
    (state, evidence jobs) with ``ok`` jobs that passed with it since; None when nothing changes."""
    old_state, old_jobs = old
    counted = dict(by_job)
    if old_state == "cleared":  # only evidence that arrived after the clearing counts
        counted = {j: u for j, u in by_job.items() if j not in set(old_jobs)}
    jobs = sorted(by_job)
    users = len({u for u in counted.values() if u is not None} or {None}) if counted else 0
    score = evidence_score(len(counted), users, user_weight)
    target = _target_state(old_state, score >= k and ok < len(counted))
    new_jobs = sorted(set(jobs) - set(old_jobs))
    if target == old_state and (not new_jobs or old_state == "cleared"):
        # a cleared entry keeps the evidence it was cleared with until it relists
        return None
    why = f"incorrect_input in {len(counted)} job(s) from {users} user(s) (score {score:g}, threshold {k})"
    if ok:
        why += f"; {ok} job(s) passed with it since"
    if target == old_state:
        why = f"new evidence job(s) {', '.join(new_jobs)}; " + why
    return Transition(name, old_state, target, sorted(set(jobs) | set(old_jobs)), users, score, why)


def update_from_failures(
    store: Store,
    k: int = 2,
    *,
    user_weight: float = 1.0,
    actor: str = AUTO_ACTOR,
    clock: Clock = _now,
) -> list[Transition]:
    """Move inputs to suspected / blacklisted from the failures table. Returns the changes."""
    if k < 1:
        raise InputError(f"blacklist_min_jobs is {k}; it must be at least 1.", "Set diagnose.blacklist_min_jobs >= 1.")
    ts = clock()
    changes: list[Transition] = []
    with store.write() as con:
        evidence, first = _evidence(con)
        passing = _passing_jobs(con, evidence, first)
        current = {
            r[0]: (r[1], list(r[2] or []))
            for r in con.execute("SELECT input, state, evidence_jobs FROM blacklist").fetchall()
        }
        for name in sorted(evidence):
            change = _transition(name, evidence[name], current.get(name, (None, [])), passing.get(name, 0),
                                 k, user_weight)
            if change is None:
                continue
            con.execute(
                "INSERT OR REPLACE INTO blacklist (input, state, reason, evidence_jobs, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                [name, change.new_state, change.reason, change.jobs, ts],
            )
            _audit(con, ts, name, change.old_state, change.new_state, actor, change.reason)
            changes.append(change)
    return changes


def default_actor() -> str:
    """Who is making a change from the command line: $GPULENS_ACTOR, else the login name."""
    for key in ("GPULENS_ACTOR", "USER", "LOGNAME"):
        value = os.environ.get(key)
        if value:
            return value
    return "unknown"
