"""Failure signature rules, kept as data in ``signatures.yaml`` (see that file for the format).

Each rule carries a fix hint (``Rule.hint``); :func:`render_hint` fills its ``{group}``
placeholders from the named groups of the match. :data:`CATEGORY_HINTS` holds a default hint
per category, for answers that did not come from a rule (the SVM, or no answer at all).
:func:`gpulens.diagnosis.hints.hint_for` chooses among them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
from pathlib import Path
from typing import Any

import yaml

from gpulens.diagnosis.types import CATEGORIES, ORIGINS
from gpulens.errors import InputError

__all__ = [
    "CATEGORY_HINTS",
    "RULES_FILE",
    "Rule",
    "RuleMatch",
    "best_match",
    "load_rules",
    "match_rules",
    "render_hint",
    "required_literals",
    "rule_by_id",
    "rules_with_context",
]

RULES_FILE = Path(__file__).with_name("signatures.yaml")

#: Rules whose match alone is not conclusive (the SVM may overrule them).
GENERIC_PRIORITY = 45

#: ``{name}`` or ``{name|fallback}`` in a hint: the named group's text, or the fallback (or
#: :data:`MISSING_GROUP`) when the group took no part in the match.
_PLACEHOLDER = re.compile(r"\{(\w+)(?:\|([^{}]*))?\}")
MISSING_GROUP = "?"
#: Longest text a placeholder takes from the log (the rest is cut with an ellipsis).
MAX_GROUP_CHARS = 120

#: What to do when the answer did not come from a rule (the SVM, or no answer).
CATEGORY_HINTS: dict[str, str] = {
    "gpu_oom": "The GPU ran out of memory: reduce the batch size or sequence length, enable mixed "
               "precision or activation checkpointing, shard the model, and check that no other "
               "process holds memory on the same GPU.",
    "cpu_oom": "Host memory ran out (OOM killer, cgroup limit or shared memory): lower DataLoader "
               "workers and prefetching, load data lazily, enlarge /dev/shm in containers, or request "
               "more memory.",
    "syntax_error": "Python could not parse a source file: fix the line the SyntaxError points at, or "
                    "run the code with the Python version it was written for.",
    "import_error": "A module or symbol is missing from the job's environment: install the versions the "
                    "project requires in the environment the job actually runs with.",
    "semantic_error": "The training code raised an exception (shapes, devices, dtypes or API use): read "
                      "the last frames of the traceback and fix the code or configuration there.",
    "incorrect_input": "The input data is missing or malformed: check the data paths, and validate the "
                       "files and labels (ranges, formats) before training.",
    "model_diverged": "Training diverged (NaN/inf loss or fp16 overflow): lower the learning rate, add "
                      "warm-up and gradient clipping, prefer bf16 over fp16, and check the data for bad "
                      "samples.",
    "checkpoint_error": "A checkpoint could not be loaded or saved: use the checkpoint that matches the "
                        "model code and configuration, and check the file is complete.",
    "permission_error": "The job may not read or write a path: point outputs and caches (HOME, HF_HOME, "
                        "WANDB_DIR, TORCH_HOME) to directories the job owns.",
    "cuda_error": "A CUDA kernel or library call failed: rerun with CUDA_LAUNCH_BLOCKING=1 to find the "
                  "failing operation, and check custom CUDA extensions and index ranges.",
    "cuda_env_error": "The CUDA environment does not fit the job (driver, toolkit, libraries or visible "
                      "devices): install a framework build that matches the node's driver and GPU.",
    "gpu_hardware": "The GPU or its links failed: drain the node, reset or replace the GPU, and resubmit "
                    "the job on another node.",
    "comm_error": "Distributed communication failed: check the other ranks' logs for the first error, "
                  "then the network between the nodes and the rendezvous settings.",
    "preempted": "The scheduler or platform stopped the job (time limit, preemption, eviction): make "
                 "training resumable from checkpoints and resubmit with the right limits.",
    "storage_error": "The storage failed (disk full, quota, I/O error, lost mount): free space or move "
                     "the output, and check the mount on that node.",
    "crash": "The process crashed in native code: rerun with python -X faulthandler (or gdb) to find the "
             "library, and check that compiled extensions match the installed framework.",
    "unknown": "The log does not show the root cause: find the first error of the failing process "
               "(per-rank logs, the worker before the launcher's summary) and diagnose that.",
}


@dataclasses.dataclass(frozen=True)
class Rule:
    id: str
    category: str
    origin: str
    priority: int
    pattern: re.Pattern[str]
    example: str
    source: str = ""
    confidence: float = 0.95
    #: Lower-cased literals, at least one of which occurs in any text the pattern matches
    #: (derived from the pattern; None when no such set was found: the rule always runs).
    needles: tuple[str, ...] | None = None
    #: Optional second pattern that must also be found in the text (e.g. "the traceback
    #: reads a data file" for a value-conversion error).
    context: re.Pattern[str] | None = None
    #: What to do about it; ``{group}`` / ``{group|fallback}`` are filled by :func:`render_hint`.
    hint: str = ""
    #: A dev-split log below ``sample_logs/real/`` that this rule matches ("" when none exists).
    real: str = ""
    #: The origin clue (a state of gpulens.diagnosis.origin.CLUES) the rule's evidence gives, when
    #: the clue read from the lines would mislead ("" : read it from the lines).
    clue: str = ""

    @property
    def generic(self) -> bool:
        return self.priority <= GENERIC_PRIORITY

    @property
    def secondary(self) -> bool:
        """A message that names a failure without its cause (a launcher summary): never the answer."""
        return self.category == "unknown"


@dataclasses.dataclass(frozen=True)
class RuleMatch:
    rule: Rule
    line: str  # the (normalized) line the match is on
    position: int  # offset of the match in the text it was searched in
    #: Named groups of the pattern (and context) that took part in the match.
    groups: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)

    @property
    def hint(self) -> str:
        return render_hint(self.rule, self)


def _parse(raw: object, where: str) -> list[Rule]:
    if not isinstance(raw, list):
        raise InputError(f"{where} must hold a list of rules.", "See gpulens/diagnosis/rules/signatures.yaml.")
    rules: list[Rule] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise InputError(f"{where}: rule #{i} is not a mapping.", "Each rule needs id, pattern, category.")
        rid = str(item.get("id", f"#{i}"))
        missing = [k for k in ("id", "category", "origin", "pattern", "example") if k not in item]
        if missing:
            raise InputError(f"{where}: rule {rid} lacks {', '.join(missing)}.", "Add the missing keys.")
        if rid in seen:
            raise InputError(f"{where}: rule id {rid} is used twice.", "Give every rule its own id.")
        seen.add(rid)
        if item["category"] not in CATEGORIES or item["origin"] not in ORIGINS:
            raise InputError(
                f"{where}: rule {rid} has category {item['category']!r} / origin {item['origin']!r}.",
                f"Use one of {', '.join(CATEGORIES)} and {', '.join(ORIGINS)}.",
            )
        flags = re.MULTILINE | (re.IGNORECASE if "i" in str(item.get("flags", "")) else 0)
        try:
            pattern = re.compile(str(item["pattern"]), flags)
        except re.error as exc:
            raise InputError(f"{where}: rule {rid} pattern does not compile ({exc}).",
                             "Fix the regular expression.") from exc
        context = None
        if item.get("context"):
            try:
                context = re.compile(str(item["context"]), flags)
            except re.error as exc:
                raise InputError(f"{where}: rule {rid} context does not compile ({exc}).",
                                 "Fix the regular expression.") from exc
        priority = int(item.get("priority", 50))
        default_conf = 0.95 if priority > GENERIC_PRIORITY else 0.75
        hint = str(item.get("hint", "")).strip()
        _check_placeholders(hint, pattern, context, f"{where}: rule {rid}")
        rules.append(Rule(
            id=rid, category=str(item["category"]), origin=str(item["origin"]), priority=priority,
            pattern=pattern, example=str(item["example"]), source=str(item.get("source", "")),
            confidence=float(item.get("confidence", default_conf)),
            needles=required_literals(str(item["pattern"]), flags), context=context,
            hint=hint, real=str(item.get("real", "") or ""), clue=str(item.get("clue", "") or ""),
        ))
    rules.sort(key=lambda r: -r.priority)
    return rules


def _check_placeholders(hint: str, pattern: re.Pattern[str], context: re.Pattern[str] | None,
                        where: str) -> None:
    names = set(pattern.groupindex) | set(context.groupindex if context is not None else ())
    unknown = sorted({m.group(1) for m in _PLACEHOLDER.finditer(hint)} - names)
    if unknown:
        raise InputError(f"{where}: hint uses {{{unknown[0]}}}, which is not a named group of its pattern.",
                         "Name the group in the pattern ((?P<name>...)) or drop the placeholder.")


# --------------------------------------------------------------------------- fix hints
def render_hint(rule: Rule, match: RuleMatch | re.Match[str] | dict[str, str] | None = None) -> str:
    """The rule's hint with ``{group}`` placeholders filled from ``match``.

    ``match`` may be a :class:`RuleMatch`, a regular-expression match of the rule's pattern, a
    dict of group values, or None (placeholders then take their fallback). A rule without a
    hint gets its category's default (:data:`CATEGORY_HINTS`).
    """
    template = rule.hint or CATEGORY_HINTS.get(rule.category, CATEGORY_HINTS["unknown"])
    if isinstance(match, RuleMatch):
        groups: dict[str, str] = match.groups
    elif isinstance(match, re.Match):
        groups = {k: v for k, v in match.groupdict().items() if v is not None}
    else:
        groups = dict(match or {})

    def fill(m: re.Match[str]) -> str:
        value = groups.get(m.group(1))
        if not value:
            return m.group(2) if m.group(2) is not None else MISSING_GROUP
        value = " ".join(str(value).split())
        return value if len(value) <= MAX_GROUP_CHARS else value[: MAX_GROUP_CHARS - 1] + "\u2026"

    return _PLACEHOLDER.sub(fill, template)


def best_match(matches: list[RuleMatch]) -> RuleMatch | None:
    """The match that decides a log's category: highest priority, the latest in the log among
    equals (what the classifier uses). Secondary-only rules win only when nothing else matched."""
    if not matches:
        return None
    top = max(m.rule.priority for m in matches)
    return max((m for m in matches if m.rule.priority == top), key=lambda m: m.position)


# --------------------------------------------------------------------------- literal prefilter
#: Shortest literal worth checking; a pattern whose alternatives can't all be pinned to
#: literals at least this long gets no prefilter.
MIN_NEEDLE = 3


def required_literals(pattern: str, flags: int = 0, *, fold: bool = True) -> tuple[str, ...] | None:
    """Lower-cased literals of which at least one occurs in every match of ``pattern``.

    Walks the parsed pattern: a sequence needs one of its elements (a run of literal
    characters, or a group/branch/``+``-repeat whose own requirement is known); a branch
    needs one literal of each alternative. Checking ``any(n in text.lower() for n in
    needles)`` before running the regex is then a pure speed-up: it never hides a match
    (comparisons are case-folded, so it holds for ``flags: i`` rules too). Returns None
    when no such set exists (the rule is then always searched).

    ``fold=False``: the literals as the pattern writes them, for ``literal in text`` on the
    text itself (no lower-casing); a case-insensitive pattern, or part of one (``(?i:...)``),
    then gives none.
    """
    try:
        parser: Any = importlib.import_module("re._parser")
        consts: Any = importlib.import_module("re._constants")
        tree = parser.parse(pattern, flags)
    except Exception:  # another Python's internals: no prefilter, same results
        return None
    if not fold and (flags | tree.state.flags) & re.IGNORECASE:
        return None
    found = _seq_literals(list(tree), consts, fold)
    return tuple(dict.fromkeys(found)) if found else None


def _caseless(code: int) -> bool:
    """A non-ASCII character without case (CJK, symbols): lower-casing the text keeps it as is,
    so it can be part of a literal the prefilter looks for."""
    ch = chr(code)
    return ch.lower() == ch == ch.upper() and ch.casefold() == ch


def _seq_literals(items: list[tuple[Any, Any]], c: Any, fold: bool = True) -> list[str] | None:
    candidates: list[list[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            joined = "".join(run)
            candidates.append([joined.lower() if fold else joined])
            run.clear()

    for op, av in items:
        if op is c.LITERAL and (not fold or av < 128 or _caseless(av)):
            run.append(chr(av))
            continue
        flush()
        sub: list[str] | None = None
        if op is c.SUBPATTERN:
            if fold or not av[1] & re.IGNORECASE:  # (?i:...) has no literal of its own case
                sub = _seq_literals(list(av[-1]), c, fold)
        elif op is c.ATOMIC_GROUP:
            sub = _seq_literals(list(av), c, fold)
        elif op is c.BRANCH:
            alts = [_seq_literals(list(b), c, fold) for b in av[1]]
            sub = None if any(a is None for a in alts) else [x for a in alts if a for x in a]
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT) and av[0] >= 1:
            sub = _seq_literals(list(av[2]), c, fold)
        if sub:
            candidates.append(sub)
    flush()
    good = [x for x in candidates if x and all(len(n) >= MIN_NEEDLE for n in x)]
    if not good:
        return None
    return max(good, key=lambda x: (min(len(n) for n in x), -len(x)))


@functools.lru_cache(maxsize=4)
def _load(path: str) -> tuple[Rule, ...]:
    try:
        # libyaml's safe loader when present: the same documents, ten times faster than pure Python
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        raw = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=loader)  # a safe loader
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"Cannot read rules file {path} ({exc}).", "Check the file exists and is YAML.") from exc
    return tuple(_parse(raw, path))


def load_rules(path: str | Path | None = None) -> tuple[Rule, ...]:
    """The rules, highest priority first (cached per file)."""
    return _load(str(path or RULES_FILE))


@functools.lru_cache(maxsize=16)
def _all_needles(rules: tuple[Rule, ...]) -> frozenset[str]:
    return frozenset(n for r in rules for n in (r.needles or ()))


def _alternatives(rule: Rule) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None:
    """The top-level alternatives of the rule's pattern and each one's required literals, when
    every alternative has some, all among the rule's own (else None: the pattern is always
    searched whole)."""
    from gpulens.diagnosis.guarded import top_branches

    if not rule.needles or len(rule.needles) < 2:
        return None
    parts = top_branches(rule.pattern.pattern)
    if parts is None:
        return None
    needles = [required_literals(part, rule.pattern.flags) for part in parts]
    if any(not n or not set(n) <= set(rule.needles) for n in needles):
        return None  # (the plan looks for the rules' own literals only)
    return tuple(parts), tuple(n for n in needles if n)


class _Plan:
    """How :func:`match_rules` reads a text for one tuple of rules.

    ``by_quad``: every literal of four or more bytes (UTF-8) under the four bytes of it that are
    rarest in logs (little-endian), with those bytes' offset in it; ``by_pair``: a shorter one
    under its rarest two bytes; ``used`` marks the first two bytes of each piece, ``used2`` the
    last two of each four: the windows of a text holding marked bytes (numpy, one pass) are the
    few places where a literal may be, each compared there (a literal whose piece the text lacks
    cannot be in it). ``needles``: every literal. ``alts``: per rule id, :func:`_alternatives`,
    read the first time the rule's literals are in a text (parsing every pattern up front would
    cost a short run more than it saves). ``by_needle``: the positions of the rules that need
    each literal; ``always``: those of the rules with no literal (searched in every text).
    """

    __slots__ = ("alts", "always", "by_id", "by_needle", "by_pair", "by_quad", "needles", "rules", "used", "used2",
                 "with_context")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        import numpy as np

        from gpulens.diagnosis.keyscan import rare_piece, rare_window

        self.rules = rules  # kept: its id is not reused while the plan is cached
        self.by_id: dict[str, Rule] | None = None  # :func:`rule_by_id`, built at its first call
        self.with_context: tuple[Rule, ...] | None = None  # :func:`rules_with_context`, likewise
        self.alts: dict[str, tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None] = {}
        self.needles = _all_needles(rules)
        self.by_pair: dict[int, list[str]] = {}
        self.by_quad: dict[int, list[tuple[str, bytes, int]]] = {}
        for needle in sorted(self.needles):
            raw = needle.encode("utf-8", "surrogatepass")
            if len(raw) >= 4:
                o = rare_window(raw.decode("latin-1"), 4)
                self.by_quad.setdefault(int.from_bytes(raw[o:o + 4], "little"), []).append((needle, raw, o))
            else:
                o = rare_piece(raw.decode("latin-1"))
                self.by_pair.setdefault(raw[o] | raw[o + 1] << 8, []).append(needle)
        self.used = np.zeros(1 << 16, dtype=bool)
        self.used[[q & 0xFFFF for q in self.by_quad] + list(self.by_pair)] = True
        self.used2 = np.zeros(1 << 16, dtype=bool)
        self.used2[[q >> 16 for q in self.by_quad]] = True
        self.by_needle: dict[str, list[int]] = {}
        self.always: frozenset[int] = frozenset(k for k, rule in enumerate(rules) if rule.needles is None)
        for k, rule in enumerate(rules):
            for needle in rule.needles or ():
                self.by_needle.setdefault(needle, []).append(k)


#: ``_Plan`` by the identity of the rules tuple (hashing a tuple of rules, as an lru_cache does
#: on every call, costs more than the scan it saves on a short text).
_PLANS: dict[int, _Plan] = {}


def _plan_for(rules: tuple[Rule, ...]) -> _Plan:
    got = _PLANS.get(id(rules))
    if got is None or got.rules is not rules:
        if len(_PLANS) >= 16:
            _PLANS.clear()
        got = _PLANS[id(rules)] = _Plan(rules)
    return got


def rule_by_id(rules: tuple[Rule, ...], rule_id: str | None) -> Rule | None:
    """The first rule of ``rules`` with id ``rule_id`` (a table kept with the tuple's plan), or None."""
    if rule_id is None:
        return None
    plan = _plan_for(rules)
    if plan.by_id is None:
        plan.by_id = {r.id: r for r in reversed(rules)}  # the first rule of an id, as a scan finds it
    return plan.by_id.get(rule_id)


def rules_with_context(rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """The rules of ``rules`` with a ``context`` pattern, in their order, as one tuple per rules tuple (kept with
    its plan: :func:`match_rules` keeps a plan by the tuple's identity). A rule's match does not depend on the
    others, so matching these alone finds the same matches as matching all and keeping theirs."""
    plan = _plan_for(rules)
    if plan.with_context is None:
        plan.with_context = tuple(r for r in rules if r.context is not None)
    return plan.with_context


def _present_needles(low: str, plan: _Plan) -> set[str]:
    """The literals of the plan that ``low`` holds (only those whose rare piece it holds tested)."""
    import numpy as np

    raw = low.encode("utf-8", "surrogatepass")
    data = np.frombuffer(raw, dtype=np.uint8)
    if data.size < 2:
        return set()
    pairs = data[:-1].astype(np.uint32) | data[1:].astype(np.uint32) << 8
    at = np.flatnonzero(plan.used[pairs])
    found: set[str] = set()
    if plan.by_pair:
        short = plan.by_pair
        found.update(n for p in np.unique(pairs[at]).tolist() for n in short.get(p, ()) if n in low)
    at = at[at < pairs.size - 2]  # four bytes from each
    at = at[plan.used2[pairs[at + 2]]]
    by_quad = plan.by_quad
    # a literal's bytes are in the text's bytes exactly where the literal is in the text
    for p, q in zip(at.tolist(), (pairs[at] | pairs[at + 2] << 16).tolist(), strict=True):
        for needle, key, o in by_quad.get(q, ()):
            if p >= o and needle not in found and raw.startswith(key, p - o):
                found.add(needle)
    return found


#: Patterns made of some of a rule's alternatives, by (pattern, the alternatives' positions).
_SUBPATTERNS: dict[tuple[re.Pattern[str], tuple[int, ...]], re.Pattern[str]] = {}


def _pattern_for(rule: Rule, plan: _Plan, present: set[str]) -> re.Pattern[str] | None:
    """The rule's pattern, or the alternation of only those alternatives whose literals the text
    holds (the others match nowhere in it, so every match, its span and groups are the same), or
    None when none can match."""
    try:
        alt = plan.alts[rule.id]
    except KeyError:
        alt = plan.alts[rule.id] = _alternatives(rule)
    if alt is None:
        return rule.pattern
    on = tuple(i for i, needles in enumerate(alt[1]) if not present.isdisjoint(needles))
    if len(on) == len(alt[1]):
        return rule.pattern
    if not on:
        return None
    key = (rule.pattern, on)
    got = _SUBPATTERNS.get(key)
    if got is None:
        if len(_SUBPATTERNS) >= 4096:
            _SUBPATTERNS.clear()
        got = _SUBPATTERNS[key] = re.compile("|".join(alt[0][i] for i in on), rule.pattern.flags)
    return got


def match_rules(text: str, rules: tuple[Rule, ...] | None = None) -> list[RuleMatch]:
    """Every rule that matches ``text`` (its last match), highest priority first."""
    out: list[RuleMatch] = []
    rules = rules if rules is not None else load_rules()
    plan = _plan_for(rules)
    present = _present_needles(text.lower(), plan)  # each distinct literal checked at most once
    # the rules with no literal, and those with one the text holds, in their order
    for k in sorted(plan.always.union(*(plan.by_needle[n] for n in present))):
        rule = rules[k]
        pattern = _pattern_for(rule, plan, present)
        if pattern is None:
            continue
        last = None
        for last in pattern.finditer(text):  # noqa: B007 - we want the last match
            pass
        if last is None:
            continue
        ctx = rule.context.search(text) if rule.context is not None else None
        if rule.context is not None and ctx is None:
            continue
        groups = {k: v for k, v in (ctx.groupdict() if ctx else {}).items() if v is not None}
        groups.update({k: v for k, v in last.groupdict().items() if v is not None})
        pos = last.start()
        ls = text.rfind("\n", 0, pos) + 1
        le = text.find("\n", last.end())
        out.append(RuleMatch(rule, text[ls: le if le >= 0 else len(text)].strip(), pos, groups))
    return out
