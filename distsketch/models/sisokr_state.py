"""SISOKR's state outside the class: the reduced rank's cached output metric, operator Gram
and principal directions, and the arrays and JSON state of a saved SISOKR.

Functions of the estimator (the thin-estimator habit, STYLE.md): each reads or fills a
:class:`~distsketch.SISOKR`'s attributes and caches (``_principal``, ``_metric``,
``_opgram``).
"""

from __future__ import annotations

import numpy as np

from ..engine.features import FeatureMap
from ..solvers.reduced_rank import factored_directions, principal_directions
from .centring import centring_from_state, centring_state
from .ridge import SisokrClosedForm, with_metric

__all__ = ["OUTPUT_GRAM_BYTES", "output_metric", "operator_gram", "principal_at", "sisokr_state",
           "set_sisokr_state"]

#: Bytes of one row block of ``K_Y`` when the reduced rank of an exact output side forms
#: ``R K_Y Rᵀ`` (:func:`operator_gram`).
OUTPUT_GRAM_BYTES = 64 * 2**20


# --------------------------------------------------------------------------- SISOKR's parts
# Module-level functions of a SISOKR (the thin-estimator habit): the reduced rank (which reads
# and fills the estimator's caches _principal, _metric and _opgram) and the saved state.


def output_metric(est) -> np.ndarray | None:
    """Gram of the output coordinates' basis in H_Y: None (whitened: orthonormal) or
    ``K_Y`` over the training outputs (exact output side), computed once."""
    if est._output_base.projection is not None:
        return None
    if getattr(est, "_metric", None) is None:
        fmap = est._feature_map(est._output_base)
        L = fmap.landmarks
        est._metric = np.asarray(fmap.kernel(L, L), dtype=np.float64)
    return est._metric


def operator_gram(est) -> np.ndarray:
    """``Q = R K_Y Rᵀ`` (r_X × r_X; ``R`` = ``operator_``, r_X × n) over the training
    outputs, from row blocks of ``K_Y`` of at most :data:`OUTPUT_GRAM_BYTES` (never the
    n × n matrix), summed in row order; computed once per operator."""
    R = est.operator_
    cached = getattr(est, "_opgram", None)
    if cached is not None and cached[0] is R:
        return cached[1]
    fmap = est._feature_map(est._output_base)
    L = fmap.landmarks
    n = L.shape[0]
    b = max(1, OUTPUT_GRAM_BYTES // (8 * n))
    RT = np.ascontiguousarray(R.T)
    Q = np.zeros((R.shape[0], R.shape[0]))
    for s in range(0, n, b):
        e = min(s + b, n)
        K = np.asarray(fmap.kernel(L[s:e], L), dtype=np.float64)  # K_Y rows s..e (b × n)
        Q += R[:, s:e] @ (K @ RT)
    Q = 0.5 * (Q + Q.T)
    est._opgram = (R, Q)
    return Q


def principal_at(est, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """``(A, μ)`` of :func:`~distsketch.solvers.reduced_rank.principal_directions` for ``W(lam)``
    (cached: one eigendecomposition per λ serves every rank); on the factored route
    (:meth:`SISOKR._factored_rank`) ``(E, μ)`` of
    :func:`~distsketch.solvers.reduced_rank.factored_directions` (``A = Rᵀ E``)."""
    factored = est._factored_rank()
    if est._principal is None or est._principal[0] != (lam, factored):
        if factored:
            est._principal = ((lam, True), *factored_directions(
                est.input_solution_, operator_gram(est), lam))
            return est._principal[1], est._principal[2]
        S = est.path_.covariance(lam)
        est._principal = ((lam, False), *principal_directions(S, output_metric(est)))
    return est._principal[1], est._principal[2]


def sisokr_state(est, arrays: dict, state: dict) -> tuple[dict, dict]:
    """``SISOKR._get_state``: the arrays and JSON state a fitted SISOKR saves (either route),
    added to its base class's ``arrays`` and ``state``."""
    if est.path_.any_lam:
        arrays.update(input_metric=est.input_solution_.metric)
    fi, fo = est.input_feature_map_, est._output_base
    est._put_side("input", fi.kernel, est.input_sketch_, fi.landmarks, arrays, state)
    est._put_side("output", fo.kernel, est.output_sketch_, fo.landmarks, arrays, state)
    arrays.update(input_projection=fi.projection, output_projection=fo.projection,
                  output_whitening=est.output_whitening_, operator=est.operator_,
                  candidates=est.candidates_, candidate_index=est.candidate_index_,
                  output_map=est._output_map_base)
    arrays.update(intercept=est.intercept_, **centring_state(getattr(est, "_centring", None)))
    state.update(n_outputs=est.n_outputs_, ranks=list(est.ranks_), rank=est.rank_,
                 rank_lam=est.rank_lam_)
    return arrays, state


def set_sisokr_state(est, arrays, state) -> None:
    """``SISOKR._set_state``, after its base class's: a saved SISOKR's fitted attributes from
    :func:`sisokr_state`'s arrays and state (caches emptied)."""
    if est.path_ is None:  # the closed form
        est.input_solution_ = with_metric(est.input_solution_, arrays)
        est.path_ = SisokrClosedForm(est.input_solution_, arrays.get("operator"))
    options = est._options()
    chunk, tuning = options.gram_chunk, options.tuning
    kx, est.input_sketch_, lx = est._get_side("input", arrays, state)
    ky, est.output_sketch_, ly = est._get_side("output", arrays, state)
    est.input_feature_map_ = FeatureMap(kx, lx, arrays.get("input_projection"), chunk, tuning)
    est._output_base = FeatureMap(ky, ly, arrays.get("output_projection"), chunk, tuning)
    est.output_feature_map_ = est._output_base
    est.output_whitening_ = arrays.get("output_whitening")
    est.operator_ = arrays.get("operator")
    est.candidates_ = arrays.get("candidates")
    est.candidate_index_ = arrays.get("candidate_index")
    est._output_map_base = arrays.get("output_map")
    est.n_outputs_ = int(state["n_outputs"])
    est.ranks_ = tuple(int(p) for p in state.get("ranks", ()))
    est.rank_ = None if state.get("rank") is None else int(state["rank"])
    est.rank_lam_ = None if state.get("rank_lam") is None else float(state["rank_lam"])
    intercept = arrays.get("intercept")
    est.intercept_ = None if intercept is None else np.asarray(intercept, dtype=np.float64)
    est._offset = est.intercept_  # the intercept a re-solve replaces (partial_fit, forget)
    est._centring = centring_from_state(arrays)
    est._principal = est._metric = est._opgram = None
    est._caches = {}
