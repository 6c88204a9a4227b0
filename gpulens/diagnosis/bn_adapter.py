"""The one place that talks to pgmpy: a small discrete Bayesian network.

Everything else in gpulens sees :class:`BayesNet`, a plain object holding the
structure, every variable's declared states and the learned conditional
probability tables as NumPy arrays. pgmpy does the learning
(``DiscreteBayesianNetwork`` + Bayesian estimation with a BDeu prior, every
state declared up front through ``state_names`` so combinations that never
occur in the history still get non-zero probability) and serves as the
reference inference engine (``VariableElimination``).

Batch inference uses :meth:`BayesNet.posterior`, the same exact variable
elimination written as one ``numpy.einsum`` contraction over the evidence-reduced
factors (barren nodes pruned first), with a memo keyed on the evidence. It
gives the same numbers as pgmpy's ``VariableElimination`` (tests compare the two
on random evidence) at a fraction of the per-query overhead; see
benchmarks/bench_origin.py. pgmpy is imported lazily: it pulls in torch, scipy
and scikit-learn and takes seconds to import.
"""

from __future__ import annotations

import string
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a table is shown or learned (reading one never needs it)
    import pandas as pd

from gpulens.errors import InputError
from gpulens.extras import require

__all__ = ["BayesNet", "fit_bdeu"]

Evidence = Mapping[str, str]


def _pgmpy() -> tuple[Any, Any, Any]:
    """(DiscreteBayesianNetwork, estimator factory, VariableElimination), imported lazily."""
    require("pgmpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        from pgmpy.inference import VariableElimination
        from pgmpy.models import DiscreteBayesianNetwork

        try:  # pgmpy >= 1.1
            from pgmpy.parameter_estimator import DiscreteBayesianEstimator
        except ImportError:  # pragma: no cover - pgmpy 1.0
            DiscreteBayesianEstimator = None
    return DiscreteBayesianNetwork, DiscreteBayesianEstimator, VariableElimination


@dataclass
class BayesNet:
    """A fitted discrete Bayesian network.

    ``cpts[v]`` has shape ``(card(v), card(p1), card(p2), ...)`` for
    ``parents[v] = [p1, p2, ...]`` and sums to one over axis 0.
    """

    states: dict[str, list[str]]
    parents: dict[str, list[str]]
    cpts: dict[str, np.ndarray]
    _memo: dict[tuple[str, tuple[tuple[str, str], ...]], np.ndarray] = field(
        default_factory=dict, repr=False, compare=False
    )
    _pgmpy_model: Any = field(default=None, repr=False, compare=False)

    # ----------------------------------------------------------------- basics
    @property
    def variables(self) -> list[str]:
        return list(self.states)

    @property
    def edges(self) -> list[tuple[str, str]]:
        return [(p, v) for v, ps in self.parents.items() for p in ps]

    def children(self, var: str) -> list[str]:
        return [v for v, ps in self.parents.items() if var in ps]

    def cpd(self, var: str) -> pd.DataFrame:
        """The table of ``var`` as a DataFrame: rows = states, columns = parent states."""
        import pandas as pd

        table = self.cpts[var]
        rows = self.states[var]
        ps = self.parents[var]
        if not ps:
            return pd.DataFrame({"p": table}, index=rows)
        cols: pd.Index = (
            pd.Index(self.states[ps[0]], name=ps[0])
            if len(ps) == 1
            else pd.MultiIndex.from_product([self.states[p] for p in ps], names=ps)
        )
        return pd.DataFrame(table.reshape(len(rows), -1), index=rows, columns=cols)

    def _check(self, evidence: Evidence) -> None:
        for var, state in evidence.items():
            if var not in self.states:
                raise InputError(
                    f"Evidence variable {var!r} is not in the network.",
                    f"Use one of: {', '.join(self.states)}.",
                )
            if state not in self.states[var]:
                raise InputError(
                    f"Evidence {var}={state!r} is not a declared state.",
                    f"States of {var}: {', '.join(self.states[var])}.",
                )

    # -------------------------------------------------------------- inference
    def posterior(self, target: str, evidence: Evidence) -> dict[str, float]:
        """P(target | evidence) by exact variable elimination (NumPy einsum, memoised)."""
        return dict(zip(self.states[target], self.posterior_array(target, evidence).tolist(), strict=True))

    def posterior_array(self, target: str, evidence: Evidence) -> np.ndarray:
        key = (target, tuple(sorted(evidence.items())))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        self._check(evidence)
        if target in evidence:
            out = np.zeros(len(self.states[target]))
            out[self.states[target].index(evidence[target])] = 1.0
        else:
            out = self._eliminate(target, evidence)
        if len(self._memo) > 200_000:
            self._memo.clear()
        self._memo[key] = out
        return out

    def _relevant(self, target: str, evidence: Evidence) -> set[str]:
        """Ancestors of the target and the evidence: every other node is barren."""
        keep: set[str] = set()
        stack = [target, *evidence]
        while stack:
            v = stack.pop()
            if v in keep:
                continue
            keep.add(v)
            stack.extend(self.parents[v])
        return keep

    def _eliminate(self, target: str, evidence: Evidence) -> np.ndarray:
        keep = self._relevant(target, evidence)
        letters = dict(zip(self.states, string.ascii_letters, strict=False))
        operands: list[Any] = []
        for var in self.states:
            if var not in keep:
                continue
            table = self.cpts[var]
            axes = [var, *self.parents[var]]
            index: list[Any] = []
            sub = []
            for ax in axes:
                if ax in evidence:
                    index.append(self.states[ax].index(evidence[ax]))
                else:
                    index.append(slice(None))
                    sub.append(letters[ax])
            operands.append(table[tuple(index)])
            operands.append([string.ascii_letters.index(c) for c in sub])
        operands.append([string.ascii_letters.index(letters[target])])
        free = [v for v in keep if v not in evidence]
        size = int(np.prod([len(self.states[v]) for v in free], dtype=float))
        # a direct contraction beats planning one for the small spaces here
        result = np.einsum(*operands, optimize="greedy" if size > 100_000 else False)
        total = float(result.sum())
        if not total > 0.0:
            raise InputError(
                f"Evidence {dict(evidence)} has probability zero in the network.",
                "Refit the network with a BDeu prior (equivalent_sample_size > 0).",
            )
        return np.asarray(result / total, dtype=float)

    def leave_one_out(self, target: str, evidence: Evidence) -> dict[str, np.ndarray]:
        """P(target | evidence without v) for every evidence variable v.

        For a leaf whose only parent is the target, the answer is the full
        posterior divided by P(v = state | target), renormalised (exact, since
        P(target, e) = P(target, e without v) P(v | target)); other variables
        need a new elimination.
        """
        full = self.posterior_array(target, evidence)
        out: dict[str, np.ndarray] = {}
        for var, state in evidence.items():
            if self.parents[var] == [target] and not self.children(var):
                lik = self.cpts[var][self.states[var].index(state)]
                p = full / lik
                out[var] = p / p.sum()
            else:
                out[var] = self.posterior_array(target, {k: v for k, v in evidence.items() if k != var})
        return out

    def posterior_pgmpy(self, target: str, evidence: Evidence) -> dict[str, float]:
        """The same query answered by pgmpy's VariableElimination (reference engine)."""
        self._check(evidence)
        _, _, variable_elimination = _pgmpy()
        model = self.to_pgmpy()
        engine = variable_elimination(model)
        factor = engine.query([target], evidence=dict(evidence), show_progress=False)
        names = factor.state_names[target]
        values = np.asarray(factor.values, dtype=float)
        got = dict(zip(names, values.tolist(), strict=True))
        return {s: got[s] for s in self.states[target]}

    def to_pgmpy(self) -> Any:
        """A pgmpy ``DiscreteBayesianNetwork`` with these CPDs (built once)."""
        if self._pgmpy_model is not None:
            return self._pgmpy_model
        dbn, _, _ = _pgmpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            from pgmpy.factors.discrete import TabularCPD

            model = dbn(self.edges)
            model.add_nodes_from(self.variables)
            for var in self.variables:
                ps = self.parents[var]
                table = self.cpts[var].reshape(len(self.states[var]), -1)
                model.add_cpds(
                    TabularCPD(
                        var,
                        len(self.states[var]),
                        table,
                        evidence=ps or None,
                        evidence_card=[len(self.states[p]) for p in ps] or None,
                        state_names={v: list(self.states[v]) for v in [var, *ps]},
                    )
                )
            model.check_model()
        self._pgmpy_model = model
        return model

    # ------------------------------------------------------------- (de)serial
    def to_dict(self) -> dict[str, Any]:
        return {
            "states": self.states,
            "parents": self.parents,
            "cpts": {v: t.tolist() for v, t in self.cpts.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BayesNet:
        states = {str(k): [str(s) for s in v] for k, v in data["states"].items()}
        parents = {str(k): [str(p) for p in v] for k, v in data["parents"].items()}
        cpts = {str(k): np.asarray(v, dtype=float) for k, v in data["cpts"].items()}
        return cls(states=states, parents=parents, cpts=cpts)


def fit_bdeu(
    edges: Sequence[tuple[str, str]],
    states: Mapping[str, Sequence[str]],
    data: pd.DataFrame,
    *,
    equivalent_sample_size: float = 10.0,
    sample_weight: Sequence[float] | None = None,
) -> BayesNet:
    """Learn every CPD of the DAG ``edges`` from ``data`` with pgmpy (BDeu prior).

    ``states`` declares every state of every variable up front. ``data`` has one
    column per variable; a missing value (None/NaN) leaves that row out of the
    counts of the tables that need the variable. Values outside the declared
    states are rejected.
    """
    pgmpy = _pgmpy()  # first: without pgmpy, that is the error to report
    state_names = {v: [str(s) for s in ss] for v, ss in states.items()}
    frame = _categorical_history(data, state_names)
    parents: dict[str, list[str]] = {v: [] for v in state_names}
    for p, c in edges:
        parents[c].append(p)
    model = _learn_pgmpy(pgmpy, edges, state_names, frame, equivalent_sample_size, sample_weight)
    cpts = {cpd.variable: _cpt_in_declared_order(cpd, parents[cpd.variable], state_names)
            for cpd in model.get_cpds()}
    net = BayesNet(states=state_names, parents=parents, cpts=cpts)
    net._pgmpy_model = model
    return net


def _categorical_history(data: pd.DataFrame, state_names: Mapping[str, list[str]]) -> pd.DataFrame:
    """The network's columns of ``data`` as categoricals over the declared states.

    Raises InputError for a missing column or a value outside its declared states.
    """
    import pandas as pd

    missing = [v for v in state_names if v not in data.columns]
    if missing:
        raise InputError(
            f"Training history lacks the column(s) {', '.join(missing)}.",
            "Give one column per network variable (None where unobserved).",
        )
    frame = data.loc[:, list(state_names)].copy()
    for var, ss in state_names.items():
        col = frame[var]
        bad = col.notna() & ~col.astype("object").isin(ss)
        if bool(bad.any()):
            raise InputError(
                f"Training history has state {col[bad].iloc[0]!r} for {var}, which is not declared.",
                f"States of {var}: {', '.join(ss)}.",
            )
        frame[var] = pd.Categorical(col.astype("object"), categories=ss)
    return frame


def _learn_pgmpy(
    pgmpy: tuple[Any, Any, Any],
    edges: Sequence[tuple[str, str]],
    state_names: dict[str, list[str]],
    frame: pd.DataFrame,
    equivalent_sample_size: float,
    sample_weight: Sequence[float] | None,
) -> Any:
    """A checked pgmpy ``DiscreteBayesianNetwork`` whose CPDs pgmpy learned from ``frame`` (BDeu)."""
    dbn, estimator_cls, _ = pgmpy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = dbn(list(edges))
        model.add_nodes_from(list(state_names))
        if estimator_cls is not None:
            est = estimator_cls(
                state_names=state_names,
                prior_type="BDeu",
                equivalent_sample_size=equivalent_sample_size,
            )
            est.fit(model, frame, sample_weight=sample_weight)
            cpds = est.parameters_
        else:  # pragma: no cover - pgmpy 1.0
            from pgmpy.estimators import BayesianEstimator

            cpds = BayesianEstimator(model, frame, state_names=state_names).get_parameters(
                prior_type="BDeu", equivalent_sample_size=equivalent_sample_size
            )
        model.add_cpds(*cpds)
        model.check_model()
    return model


def _cpt_in_declared_order(cpd: Any, parents: list[str], state_names: Mapping[str, list[str]]) -> np.ndarray:
    """A pgmpy CPD's values with axes ``[variable, *parents]`` and states in the declared order."""
    # pgmpy orders a CPD's parents its own way; reorder the axes to ours.
    table = np.asarray(cpd.values, dtype=float)  # shape (card, *cards of cpd.variables[1:])
    order = list(cpd.variables)  # [var, *pgmpy parent order]
    names = cpd.state_names
    # Re-index states to the declared order (pgmpy keeps them, but be explicit).
    for axis, v in enumerate(order):
        idx = [names[v].index(s) for s in state_names[v]]
        table = np.take(table, idx, axis=axis)
    perm = [order.index(v) for v in [cpd.variable, *parents]]
    return np.transpose(table, perm)
