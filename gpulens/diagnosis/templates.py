"""Log templates: mask variable parts (numbers, hex ids, paths) and mine templates with Drain3.

Two log lines that differ only in a tensor size, a PID or a file name map to the
same template ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (<NUM>x<NUM>
and <NUM>x<NUM>)"), so the SVM learns from message *shapes*, not from the numbers
of one corpus. Paths keep one bit of meaning: ``<DATA>`` (a data file: csv, json,
images, arrays, archives), ``<CKPT>`` (a checkpoint: pt, pth, ckpt, safetensors),
``<SRC>`` (source code) or ``<PATH>`` (anything else), because "the failing line
names a data file" is exactly what separates bad input from a logic bug.

Templates are mined once, when the model is trained; classifying a log only
*matches* its lines against that pre-trained miner (no training per log), and the
line -> template id mapping is memoized, so repeated lines (most of a log) cost a
dictionary lookup.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gpulens.extras import require

__all__ = ["CKPT_EXTS", "DATA_EXTS", "TemplateSet", "mask", "path_kind"]

DATA_EXTS = frozenset(
    "csv tsv json jsonl ndjson txt npy npz jpg jpeg png gif bmp tif tiff webp wav flac mp3 mp4 avi "
    "tar gz tgz zip bz2 xz zst h5 hdf5 parquet arrow feather tfrecord tfrecords record lmdb mdb "
    "idx yaml yml xml arff mat".split()
)
CKPT_EXTS = frozenset("pt pth ckpt safetensors bin pkl pickle msgpack".split())
SRC_EXTS = frozenset("py pyc pyx so cc cpp cu cuh h hpp c".split())

_PATH = re.compile(
    r"(?<![\w.])(?:[A-Za-z]:)?(?:~|\.{1,2})?/[^\s'\",:;()<>\[\]{}]+"        # /abs/path, ./rel, ~/x
    r"|\b[\w.-]+(?:/[\w.-]+)*/[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,11}\b"      # rel/dir/file.ext
    r"|\b[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,11}\b(?=$|[\s'\",:;)\]}])"       # file.ext
)
_OTHER: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<HEX>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b"), "<HEX>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?\b"), "<TS>"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<IP>"),
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"), "<NUM>"),
)


def path_kind(path: str) -> str:
    """``DATA``, ``CKPT``, ``SRC`` or ``PATH`` from a path's extension(s)."""
    name = path.rsplit("/", 1)[-1].lower()
    exts = name.split(".")[1:]
    for ext in reversed(exts):  # train.csv.gz -> DATA, model.pt -> CKPT
        if ext in CKPT_EXTS:
            return "CKPT"
        if ext in DATA_EXTS:
            return "DATA"
        if ext in SRC_EXTS:
            return "SRC"
    return "PATH"


def _path_repl(m: re.Match[str]) -> str:
    text = m.group(0)
    if "/" not in text and "." in text:
        ext = text.rsplit(".", 1)[1].lower()
        if ext not in DATA_EXTS and ext not in CKPT_EXTS and ext not in SRC_EXTS:
            return text  # "torch.load", "np.float32": not a file name
    return f"<{path_kind(text)}>"


def mask(line: str) -> str:
    """Replace paths (by kind), hex ids, timestamps, addresses and numbers by placeholders."""
    line = _PATH.sub(_path_repl, line)
    for pattern, repl in _OTHER:
        line = pattern.sub(repl, line)
    return line


class TemplateSet:
    """Drain3 templates mined from a set of (masked) log lines; maps new lines to template ids."""

    CACHE_MAX = 50_000

    def __init__(self, sim_th: float = 0.5, depth: int = 4) -> None:
        drain3 = require("drain3")
        from drain3.template_miner_config import TemplateMinerConfig

        config = TemplateMinerConfig()
        config.masking_instructions = []  # lines are masked by mask() before they get here
        config.drain_sim_th = sim_th
        config.drain_depth = depth
        config.profiling_enabled = False
        config.parametrize_numeric_tokens = False
        self.miner: Any = drain3.TemplateMiner(config=config)
        self._cache: dict[str, int | None] = {}
        self._leaves: dict[int, _Leaf] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}
        state["_leaves"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_cache", {})
        self.__dict__.setdefault("_leaves", {})

    def fit(self, masked_lines: Iterable[str]) -> TemplateSet:
        for line in masked_lines:
            line = line.strip()
            if line:
                self.miner.add_log_message(line[:300])
        self._cache = {}
        self._leaves = {}
        return self

    def template_id(self, masked_line: str) -> int | None:
        """Id of the mined template that ``masked_line`` fits, or None (memoized)."""
        line = masked_line.strip()[:300]
        if not line:
            return None
        try:
            return self._cache[line]
        except KeyError:
            pass
        tid = self._match(line.split())
        if len(self._cache) >= self.CACHE_MAX:
            self._cache.clear()
        self._cache[line] = tid
        return tid

    def _match(self, tokens: list[str]) -> int | None:
        """``miner.match(line, full_search_strategy="never")``'s cluster id for the line's tokens
        (Drain3's tree search to a leaf, then, among the leaf's clusters whose every non-wildcard
        token is the line's, the one with the most wildcards, the first on ties), read from an
        index of the leaf built once (:class:`_Leaf`) instead of comparing every cluster's tokens:
        the same answer (tests/diagnosis/test_templates.py compares them)."""
        node = _leaf(self.miner.drain, tokens)
        if node is None:
            return None
        leaf = self._leaves.get(id(node))
        if leaf is None or leaf.node is not node:
            leaf = self._leaves[id(node)] = _Leaf(node, self.miner.drain)
        return leaf.match(tokens)

    def tokens(self, masked_lines: Iterable[str]) -> str:
        """Space-separated template tokens ("t12 t40 ...") for the feature vectorizer."""
        ids = (self.template_id(ln) for ln in masked_lines)
        return " ".join(f"t{i}" for i in ids if i is not None)

    def templates(self) -> dict[int, str]:
        return {int(c.cluster_id): c.get_template() for c in self.miner.drain.clusters}


def _leaf(drain: Any, tokens: list[str]) -> Any:
    """The leaf of Drain3's prefix tree that ``Drain.tree_search`` compares ``tokens`` with
    (children by token count, then by the first tokens, a wildcard child where no token's), or
    None where it finds none."""
    count = len(tokens)
    node = drain.root_node.key_to_child_node.get(str(count))
    if node is None or count == 0:
        return None  # (no line reaches here without a token)
    depth = 1
    for token in tokens:
        if depth >= drain.max_node_depth or depth == count:
            break
        children = node.key_to_child_node
        node = children.get(token)
        if node is None:
            node = children.get(drain.param_str)
        if node is None:
            return None
        depth += 1
    return node


class _Leaf:
    """A Drain3 leaf's clusters grouped by where their templates hold wildcards: within a group,
    by the template's other tokens. A line matches a cluster exactly when the line's tokens at
    those other places are the template's; of the matches, ``Drain.fast_match`` (similarity 1.0
    required, wildcards counted as matching) keeps the one with the most wildcards, the first
    in the leaf's order on ties."""

    __slots__ = ("groups", "node")

    def __init__(self, node: Any, drain: Any) -> None:
        self.node = node
        wild = drain.param_str
        by_places: dict[tuple[int, ...], dict[tuple[str, ...], tuple[int, int, int]]] = {}
        for order, cid in enumerate(node.cluster_ids):
            cluster = drain.id_to_cluster.get(cid)
            if cluster is None:
                continue
            template = cluster.log_template_tokens
            fixed = tuple(k for k, t in enumerate(template) if t != wild)
            # (wildcards, order, id): a group's first cluster with a key is its best there (same wildcards)
            by_places.setdefault(fixed, {}).setdefault(tuple(template[k] for k in fixed),
                                                        (len(template) - len(fixed), order, int(cid)))
        self.groups = list(by_places.items())

    def match(self, tokens: list[str]) -> int | None:
        best: tuple[int, int, int] | None = None
        for fixed, keyed in self.groups:
            got = keyed.get(tuple([tokens[k] for k in fixed]))
            if got is not None and (best is None or got[0] > best[0] or got[0] == best[0] and got[1] < best[1]):
                best = got
        return None if best is None else best[2]
