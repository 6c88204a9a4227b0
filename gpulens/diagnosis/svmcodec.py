"""The diagnosis SVM as plain data (:class:`~gpulens.diagnosis.modelstore.ModelBlob`) and back.

What prediction needs, and nothing that can run code when loaded:

- the Drain3 template tree (nodes, cluster ids, cluster templates) as JSON;
- per feature block, the TF-IDF analyzer parameters and vocabulary as JSON and the idf
  weights as an array; the analyzer is rebuilt here (the same steps as scikit-learn's
  ``build_analyzer`` for the parameters the model uses), so loading a model imports no
  scikit-learn;
- the calibrated linear predictor (per fold: weights, intercepts, class columns, Platt
  ``a``/``b``) as arrays.

:func:`encode` raises :class:`ValueError` for a model it cannot represent exactly (an
uncalibrated model, vectorizer options it does not rebuild); such a model stays in memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gpulens.diagnosis.modelstore import ModelBlob

__all__ = ["CODEC_VERSION", "decode", "encode"]

CODEC_VERSION = 1
_WHITE = re.compile(r"\s\s+")
_DEFAULTS = {"preprocessor": None, "tokenizer": None, "stop_words": None, "strip_accents": None,
             "input": "content", "binary": False}


# ------------------------------------------------------------------ vectorizers
class _VecState:
    """The fitted parts of a TfidfVectorizer that the numpy predictor reads."""

    def __init__(self, params: dict[str, Any], vocabulary: list[str], idf: Any) -> None:
        self.params = params
        self.vocabulary_ = {t: i for i, t in enumerate(vocabulary)}
        self.use_idf = bool(params["use_idf"])
        self.idf_ = idf
        self.sublinear_tf = bool(params["sublinear_tf"])
        self.norm = params["norm"]

    def get_params(self) -> dict[str, Any]:
        return {**_DEFAULTS, **self.params, "ngram_range": tuple(self.params["ngram_range"])}

    def build_analyzer(self) -> Callable[[str], list[str]]:
        lower = bool(self.params["lowercase"])
        lo, hi = (int(x) for x in self.params["ngram_range"])
        if self.params["analyzer"] == "char_wb":
            return lambda doc: _char_wb((doc.lower() if lower else doc), lo, hi)
        findall = re.compile(self.params["token_pattern"]).findall
        return lambda doc: _word_ngrams(findall(doc.lower() if lower else doc), lo, hi)


def _word_ngrams(tokens: list[str], lo: int, hi: int) -> list[str]:
    if hi == 1:
        return tokens
    out = list(tokens) if lo == 1 else []
    n_tok = len(tokens)
    for n in range(max(lo, 2), min(hi + 1, n_tok + 1)):
        for i in range(n_tok - n + 1):
            out.append(" ".join(tokens[i: i + n]))
    return out


def _char_wb(text: str, lo: int, hi: int) -> list[str]:
    out: list[str] = []
    for w in _WHITE.sub(" ", text).split():
        w = " " + w + " "
        w_len = len(w)
        for n in range(lo, hi + 1):
            offset = 0
            out.append(w[offset: offset + n])
            while offset + n < w_len:
                offset += 1
                out.append(w[offset: offset + n])
            if offset == 0:  # a short word counts once
                break
    return out


def _encode_vec(vec: Any) -> tuple[dict[str, Any], Any]:
    params = vec.get_params()
    for key, want in _DEFAULTS.items():
        if params.get(key) != want:
            raise ValueError(f"vectorizer option {key}={params.get(key)!r} is not supported")
    if params["analyzer"] not in ("word", "char_wb") or params["norm"] not in ("l2", None):
        raise ValueError(f"vectorizer analyzer={params['analyzer']!r} norm={params['norm']!r} not supported")
    vocab = [""] * len(vec.vocabulary_)
    for term, i in vec.vocabulary_.items():
        vocab[int(i)] = str(term)
    keep = {k: params[k] for k in ("analyzer", "token_pattern", "lowercase", "sublinear_tf", "use_idf", "norm")}
    keep["ngram_range"] = list(params["ngram_range"])
    return {"params": keep, "vocabulary": vocab}, (vec.idf_ if vec.use_idf else None)


# ------------------------------------------------------------------ templates
def _encode_tree(node: Any) -> dict[str, Any]:
    return {"ids": list(node.cluster_ids),
            "kids": {k: _encode_tree(child) for k, child in node.key_to_child_node.items()}}


def _decode_tree(data: dict[str, Any], node_cls: Any) -> Any:
    node = node_cls()
    node.cluster_ids = [int(i) for i in data["ids"]]
    node.key_to_child_node = {str(k): _decode_tree(v, node_cls) for k, v in data["kids"].items()}
    return node


def _encode_templates(templates: Any) -> dict[str, Any]:
    drain = templates.miner.drain
    if drain.max_clusters is not None or drain.extra_delimiters:
        raise ValueError("Drain3 with max_clusters or extra delimiters is not supported")
    return {
        "sim_th": drain.sim_th, "depth": drain.log_cluster_depth, "max_children": drain.max_children,
        "param_str": drain.param_str, "numeric": drain.parametrize_numeric_tokens,
        "counter": drain.clusters_counter,
        "clusters": [[int(c.cluster_id), list(c.log_template_tokens), int(c.size)] for c in drain.clusters],
        "tree": _encode_tree(drain.root_node),
    }


def _decode_templates(data: dict[str, Any]) -> Any:
    from drain3.drain import LogCluster, Node

    from gpulens.diagnosis.templates import TemplateSet

    ts = TemplateSet(sim_th=float(data["sim_th"]), depth=int(data["depth"]))
    drain = ts.miner.drain
    if (drain.max_children, drain.param_str, drain.parametrize_numeric_tokens) != (
            data["max_children"], data["param_str"], data["numeric"]):
        raise ValueError("stored Drain3 parameters differ from this version's")
    clusters = {}
    for cid, tokens, size in data["clusters"]:
        c = LogCluster([str(t) for t in tokens], int(cid))
        c.size = int(size)
        clusters[int(cid)] = c
    drain.id_to_cluster = clusters
    drain.clusters_counter = int(data["counter"])
    drain.root_node = _decode_tree(data["tree"], Node)
    return ts


# ------------------------------------------------------------------ the model
def encode(model: Any, blocks: list[str]) -> ModelBlob:
    """A calibrated :class:`SvmModel` as arrays + JSON metadata."""
    if model.fast is None or model.templates is None:
        raise ValueError("only a calibrated model can be stored")
    arrays: dict[str, Any] = {}
    vecs = {}
    for k in blocks:
        vecs[k], idf = _encode_vec(model.vec[k])
        if idf is not None:
            arrays[f"idf_{k}"] = idf
    for i, (wt, icpt, cols, a, b) in enumerate(model.fast.parts):
        arrays.update({f"p{i}_wt": wt, f"p{i}_icpt": icpt, f"p{i}_cols": cols, f"p{i}_a": a, f"p{i}_b": b})
    meta = {"codec": CODEC_VERSION, "blocks": list(blocks), "classes": list(model.classes),
            "n_parts": len(model.fast.parts), "vec": vecs, "templates": _encode_templates(model.templates)}
    return ModelBlob(arrays=arrays, meta=meta)


def decode(blob: ModelBlob, blocks: list[str], model_cls: Any, predictor_cls: Any) -> Any:
    """Rebuild the model; raises ValueError/KeyError/TypeError on a blob that does not fit."""
    meta, arrays = blob.meta, blob.arrays
    if meta.get("codec") != CODEC_VERSION or meta.get("blocks") != list(blocks):
        raise ValueError("stored model was written by another version")
    model = model_cls()
    model.classes = [str(c) for c in meta["classes"]]
    model.templates = _decode_templates(meta["templates"])
    model.vec = {}
    for k in blocks:
        v = meta["vec"][k]
        idf = arrays[f"idf_{k}"] if v["params"]["use_idf"] else None
        if idf is not None and idf.shape != (len(v["vocabulary"]),):
            raise ValueError(f"idf of block {k} does not fit its vocabulary")
        model.vec[k] = _VecState(v["params"], v["vocabulary"], idf)
    n_feat = sum(len(v.vocabulary_) for v in model.vec.values())
    fast = predictor_cls.__new__(predictor_cls)
    fast.n = len(model.classes)
    fast.parts = []
    for i in range(int(meta["n_parts"])):
        part = tuple(arrays[f"p{i}_{x}"] for x in ("wt", "icpt", "cols", "a", "b"))
        if part[0].ndim != 2 or part[0].shape[0] != n_feat or int(part[2].max(initial=0)) >= fast.n:
            raise ValueError(f"predictor part {i} does not fit the features")
        fast.parts.append(part)
    model.fast = fast
    return model
