"""Decoding routes of a fitted model: candidate checks, route choice and fold caches.

Glossary (docs/design/decoding.md)
----------------------------------
g(x) = W φ_X(x)          query surrogate, shape (r_Y,) — :class:`Surrogate`
φ_Y(y)                   candidate output features (the model's output :class:`FeatureMap`)
score(x, y) = k_Y(y, y) − 2 φ_Y(y)ᵀ g(x)    smaller is better

:meth:`SISOKR.predict <distsketch.SISOKR.predict>`, ``predict_topk`` and ``score_candidates``
are functions of four things: the output map ``φ_Y``, the :class:`Surrogate` (``φ_X``, ``W``
and the folds cached for this ``W``), the candidates, and the engine options. This module
validates the candidates (an array, a dask or zarr array, a
:class:`~distsketch.decoding.candidates.CandidateStore`, per-query sets), chooses the route
(:func:`distsketch.decoding.preimage.fold_route`: unfolded, or ``W`` / the candidates folded once)
and hands the block work to :func:`distsketch.decoding.preimage.decode_fixed` /
:func:`~distsketch.decoding.preimage.decode_ragged`. It is a module of its own, above
:mod:`distsketch.decoding.candidates`: it needs
:class:`~distsketch.decoding.candidates.CandidateStore`, and :mod:`distsketch.decoding.candidates`
imports :mod:`distsketch.decoding.preimage` (candidate features), so the routes inside ``decode``
would close an import cycle; ``decode`` stays the block work.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..backends.base import dense
from ..engine.features import FeatureMap
from ..engine.rows import as_row_source
from ..options import EngineOptions, driver_threads
from .candidates import CandidateStore, candidate_reader, check_query_sets, concatenate_sets
from .preimage import (
    candidate_features,
    decode_fixed,
    decode_ragged,
    fold_candidates,
    fold_costs,
    fold_route,
    local_tile,
)

__all__ = ["Surrogate", "FixedSet", "decode", "fixed_set", "ragged_sets", "candidate_scores",
           "default_features", "centred", "check_width", "take_rows"]


@dataclasses.dataclass(frozen=True)
class Surrogate:
    """``g(x) = W φ_X(x)`` of a fitted model and the folds of its decoding.

    ``φ_X(x) = Pᵀ k_X(L, x)`` (``P``: the input map's projection, or none). ``cache`` holds
    the folded matrices ``{(source, route): (Z, kyy)}`` (``(None, "coef"): (M, None)``) and
    must be valid for ``coef``: the model keeps it and empties it whenever ``W`` or the output
    map changes. ``fold``: ``None`` (the cost rule of
    :func:`distsketch.decoding.preimage.fold_route`) or a route to force. The rule and the fold
    (:func:`~distsketch.decoding.preimage.fold_candidates`) are looked up in this module when called
    (where a test spies on them).
    """

    input_map: FeatureMap
    coef: np.ndarray
    cache: dict
    block_memory: int
    fold: str | None = None

    def _transform(self, X, *, projected: bool = True, post=None) -> np.ndarray:
        qmap = self.input_map if projected else dataclasses.replace(self.input_map,
                                                                    projection=None)
        return np.asarray(qmap.transform(X, post=post, block_memory=self.block_memory,
                                         model="SISOKR"))

    def __call__(self, X, route: str = "unfolded") -> np.ndarray:
        """``g(x)`` (n_queries, r_Y): ``W φ_X(x)`` (``"unfolded"``), or ``Mᵀ k_X(L, x)`` with
        ``M = P Wᵀ`` folded once (``"coef"``)."""
        if route == "unfolded":
            return self._transform(X, post=self.coef.T)
        M, _ = self.folded("coef", None, None)
        return self._transform(X, projected=False, post=M)

    def queries(self, X: Any, route: str) -> np.ndarray:
        """What a route scores against its candidates: ``g(x)`` (``"unfolded"``, ``"coef"``),
        ``φ_X(x)`` (``"features"``) or ``k_X(L, x)`` (``"kernel"``)."""
        if route in ("unfolded", "coef"):
            return self(X, route)
        return self._transform(X, projected=route != "kernel")

    def ragged_route(self, n_queries: int) -> str:
        """``"unfolded"`` or ``"coef"`` for per-query sets: the candidate-free part of
        :func:`distsketch.decoding.preimage.fold_costs` (the scoring ``n_c·r_Y`` is the same on
        both)."""
        if self.input_map.projection is None:
            return "unfolded"
        if self.fold is not None:
            return "coef" if self.fold in ("coef", "kernel") else "unfolded"
        costs = fold_costs(n_queries=n_queries, n_candidates=0,
                           n_landmarks=self.input_map.landmarks.shape[0],
                           r_x=self.coef.shape[1], r_y=self.coef.shape[0], projected=True,
                           cached=[r for (_, r) in self.cache])
        return "coef" if costs["coef"] < costs["unfolded"] else "unfolded"

    def fixed_route(self, n_queries: int, n_candidates: int, source: Any, *,
                    foldable: bool = True) -> str:
        """The decoding route for a fixed set (:func:`distsketch.decoding.preimage.fold_route`);
        ``foldable=False``: the candidates cannot be folded (a dask or zarr array)."""
        P = self.input_map.projection
        if self.fold is not None:
            route = self.fold
            if P is None and route in ("coef", "kernel"):  # no projection to fold
                route = "unfolded" if route == "coef" else "features"
            if not foldable and route in ("features", "kernel"):
                route = "unfolded"
            return route
        return fold_route(n_queries=n_queries, n_candidates=n_candidates,
                          n_landmarks=self.input_map.landmarks.shape[0],
                          r_x=self.coef.shape[1], r_y=self.coef.shape[0],
                          projected=P is not None, memory=None if foldable else 0,
                          cached=[r for (s, r) in self.cache if s == source or r == "coef"])

    def folded(self, route: str, source: Any, features: Callable
               ) -> tuple[np.ndarray, np.ndarray | None]:
        """``(Z, kyy)``: ``Z = φ_Y(C) W`` (n_c × r_X, ``"features"``) or ``φ_Y(C) W Pᵀ``
        (n_c × s_X, ``"kernel"``), so that ``⟨ĥ(x), ψ(c)⟩ = (Z φ_X(x))_c`` or
        ``(Z k_X(L, x))_c``; cached per candidate source (``None``: not cached).
        ``features()`` gives ``(φ_Y(C), k_Y(c, c))``. ``"coef"``: ``(M, None)`` with
        ``M = P Wᵀ`` (s_X × r_Y), ``g(x) = Mᵀ k_X(L, x)``, for any candidates."""
        cache = self.cache
        if route == "coef":
            if (None, "coef") not in cache:
                P = np.asarray(self.input_map.projection)
                with driver_threads(P.shape[0]):
                    cache[(None, "coef")] = (P @ self.coef.T, None)
            return cache[(None, "coef")]
        if source is not None and (source, route) in cache:
            return cache[(source, route)]
        phi, kyy = features()
        # "kernel": W Pᵀ = Mᵀ of the "coef" fold (computed once for both)
        M = self.coef if route != "kernel" else self.folded("coef", None, None)[0].T
        Z = fold_candidates(phi, M)  # tiles on all local cores
        out = (Z, np.asarray(kyy[:], dtype=np.float64))
        if source is not None:
            cache[(source, route)] = out
        return out


# --------------------------------------------------------------------------- candidates


class FixedSet(NamedTuple):
    """One candidate set for every query, ready to decode."""

    read: Callable    #: ``read(start, stop)`` → a task argument (:func:`decode_fixed`)
    n: int            #: number of candidates
    take: Callable    #: ``take(index)`` → candidate rows
    source: Any       #: cache key of its folds; ``None``: folds not kept
    features: Callable | None  #: ``() → (φ_Y(C), k_Y(c, c))``; ``None``: cannot be folded


def check_width(Y: Any, width: int, argument: str) -> Any:
    """``Y`` as a 2-D array-like of rows of ``width`` columns (a 1-D row or column reshaped)."""
    if isinstance(Y, (list, tuple)):
        Y = np.asarray(Y)
    if getattr(Y, "ndim", None) == 1:
        Y = Y.reshape(-1, 1) if width == 1 else Y.reshape(1, -1)
    if getattr(Y, "ndim", None) != 2:
        raise ValueError(f"{argument}: expected a 2-D array of output rows")
    if Y.shape[1] != width:
        raise ValueError(f"{argument}: rows have {Y.shape[1]} columns but the model was fitted "
                         f"on outputs with {width}")
    return Y


def centred(Y: Any, offset: np.ndarray | None) -> Any:
    """Output rows as the model sees them: ``y − ȳ`` with an intercept ``offset`` (dense), else
    as given; a :class:`CandidateStore` is refused with an intercept."""
    if offset is None or Y is None:
        return Y
    if isinstance(Y, CandidateStore):
        raise ValueError("candidates: a CandidateStore caches features of the outputs as "
                         "stored, but this model was fitted with fit_intercept=True (on "
                         "centred outputs); pass the candidates as an array")
    return np.asarray(dense(Y), dtype=np.float64) - offset


def default_features(fmap: FeatureMap, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(φ_Y(C), k_Y(c, c))`` of a model's default candidates, in tiles sized to the set on all
    local cores (a model computes them once per fit)."""
    return (candidate_features(fmap, candidates, parallel=True, rows=local_tile(len(candidates))),
            fmap.diag(candidates))


def candidate_scores(fmap: FeatureMap, surrogate: Surrogate, X: Any, candidates: Any
                     ) -> np.ndarray:
    """The dense decoding criterion ``k_Y(y, y) − 2⟨g(x), φ_Y(y)⟩`` (n_queries, n_candidates)
    of rows ``candidates`` (as the model sees them), in the fixed-shape tiles of decoding: the
    scores :func:`decode` ranks, bitwise."""
    if candidates.shape[0] == 0:
        raise ValueError("candidates: empty candidate set")
    g = surrogate(X)
    phi = candidate_features(fmap, as_row_source(candidates, argument="candidates").data)
    return fmap.diag(candidates)[None, :] - 2.0 * (g @ phi.T)


def _check_store(store: CandidateStore, kind: str, width: int) -> CandidateStore:
    if store.kind != kind:
        right = "candidates=" if store.kind == "fixed" else "candidate_sets="
        raise ValueError(f"candidates: this CandidateStore holds {'one fixed set' if store.kind == 'fixed' else 'per-query sets'}; "
                         f"pass it as {right}")
    if store.width != width:
        raise ValueError(f"candidates: the store's rows have {store.width} columns but the model "
                         f"was fitted on outputs with {width}")
    return store


def _cached_reader(store: CandidateStore, fmap: FeatureMap, key: str, progress: bool = False):
    phi, kyy = store.ensure_features(fmap, key, progress=progress)
    return lambda a, b: ("cached", phi, kyy, a, b)


def _check_finite(a: np.ndarray, argument: str) -> None:
    if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
        raise ValueError(f"{argument}: contain NaN or infinity")


def take_rows(candidates: Any, index: np.ndarray) -> np.ndarray:
    """Rows ``index`` (any order) of a candidate array, RowSource or store."""
    if isinstance(candidates, CandidateStore):
        return candidates.rows(index)
    src = as_row_source(candidates, argument="candidates")
    order = np.argsort(index, kind="stable")
    out = dense(src.take(index[order]))
    result = np.empty_like(out)
    result[order] = out
    return result


def fixed_set(candidates: Any, fmap: FeatureMap, *, width: int, key: str, default: Callable,
              progress: bool = False) -> FixedSet:
    """Check one candidate set for every query: a fixed :class:`CandidateStore` (features
    cached under ``key``), ``None`` (``default(fmap)`` → ``(rows, φ_Y, kyy)``, the model's
    default candidates), or an array (numpy, dask, zarr, sparse) of ``width`` columns."""
    if isinstance(candidates, CandidateStore):
        store = _check_store(candidates, "fixed", width)
        n_c = store.n_candidates
        return FixedSet(_cached_reader(store, fmap, key, progress), n_c, store.rows,
                        ("store", os.path.abspath(store.location), store.token, n_c),
                        lambda: store.ensure_features(fmap, key))
    if candidates is None:
        rows, phi, kyy = default(fmap)
        return FixedSet(lambda a, b: ("cached", phi, kyy, a, b), len(phi), rows.__getitem__,
                        ("default",), lambda: (phi, kyy))
    src = as_row_source(candidates, argument="candidates")
    if src.shape[1] != width:
        raise ValueError(f"candidates: rows have {src.shape[1]} columns but the model was "
                         f"fitted on outputs with {width}")
    src.check_finite()
    features = None  # a dask or zarr array is not folded
    if isinstance(src.data, np.ndarray):
        features = lambda: (candidate_features(fmap, src.data, parallel=True),  # noqa: E731
                            fmap.diag(src.data))
    # source None: not cached, a fold is paid by this call's queries
    return FixedSet(candidate_reader(src.data), src.n, lambda best: take_rows(src, best), None,
                    features)


def ragged_sets(candidate_sets: Any, fmap: FeatureMap, *, width: int, key: str,
                progress: bool = False) -> tuple:
    """Check per-query sets (a ragged :class:`CandidateStore` or a sequence of arrays):
    ``(source, offsets, read, stored_query_sets)``; ``source`` gives the rows back
    (:func:`take_rows`)."""
    if isinstance(candidate_sets, CandidateStore):
        store = _check_store(candidate_sets, "ragged", width)
        return (store, store.offsets, _cached_reader(store, fmap, key, progress),
                store.query_sets)
    source, offsets = concatenate_sets(candidate_sets, width=width)
    _check_finite(source, "candidate_sets")
    return source, offsets, candidate_reader(source), None


# --------------------------------------------------------------------------- decoding


def _n_queries(X) -> int:
    return X.shape[0] if hasattr(X, "shape") else len(X)


def _decode_sets(fmap: FeatureMap, surrogate: Surrogate, X, candidate_sets, query_sets,
                 options: EngineOptions, *, k: int, width: int, key: str):
    """Top-k of each query over its own set: ``(indices, scores, take)``."""
    source, offsets, read, stored_qs = ragged_sets(candidate_sets, fmap, width=width, key=key,
                                                   progress=options.progress)
    if query_sets is None:
        query_sets = stored_qs
    if query_sets is None:
        raise ValueError("query_sets: required with candidate_sets (one set number per query)")
    G = surrogate(X, surrogate.ragged_route(_n_queries(X)))
    qs = check_query_sets(query_sets, len(offsets) - 1, n_queries=G.shape[0])
    idx, scores = decode_ragged(fmap, G, read, offsets=offsets, query_sets=qs, k=k,
                                block_rows=options.candidate_rows,
                                split_every=options.split_every, progress=options.progress,
                                backend=options.backend)
    return idx, scores, lambda best: take_rows(source, offsets[qs] + best)


def _decode_fixed(fmap: FeatureMap, surrogate: Surrogate, X, candidates,
                  options: EngineOptions, *, k: int, width: int, key: str, default: Callable):
    """Top-k over one set for every query: ``(indices, scores, take)``, on the route of
    :meth:`Surrogate.fixed_route` (the folded ones score ``φ_X(x)ᵀ Z`` or ``k_X(L, x)ᵀ Z``)."""
    cands = fixed_set(candidates, fmap, width=width, key=key, default=default,
                      progress=options.progress)
    route = surrogate.fixed_route(_n_queries(X), cands.n, cands.source,
                                  foldable=cands.features is not None)
    read = cands.read
    if route not in ("unfolded", "coef"):  # Z folded once (distsketch.decoding.preimage.fold_costs)
        Z, kyy_c = surrogate.folded(route, cands.source, cands.features)
        read = lambda a, b: ("cached", Z, kyy_c, a, b)  # noqa: E731
    G = surrogate.queries(X, route)
    idx, scores = decode_fixed(fmap, G, read, n_candidates=cands.n, k=k,
                               block_rows=options.candidate_rows, split_every=options.split_every,
                               progress=options.progress, backend=options.backend)
    return idx, scores, cands.take


def decode(fmap: FeatureMap, surrogate: Surrogate, X: Any, candidates: Any,
           options: EngineOptions, *, k: int, candidate_sets: Any = None,
           query_sets: Any = None, width: int, key: str, default: Callable,
           offset: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, Callable]:
    """Validate and decode: ``(indices, scores, take)``; ``take(best)`` gives the rows.

    Parameters
    ----------
    fmap : FeatureMap
        The output map ``φ_Y`` (with the options' ``gram_chunk``).
    surrogate : Surrogate
    X : array of shape (n_queries, d_X)
    candidates, candidate_sets, query_sets, k
        As for :meth:`SISOKR.predict_topk <distsketch.SISOKR.predict_topk>`.
    options : EngineOptions
    width : int
        Columns of an output row.
    key : str
        The output map's key: the cache key of features in a :class:`CandidateStore`.
    default : callable
        ``default(fmap)`` → ``(rows, φ_Y(rows), k_Y(y, y))``: the candidates when none are
        given.
    offset : ndarray or None
        The intercept ``ȳ``: the centred rows are decoded and ``take`` returns the rows as
        given.
    """
    if offset is not None:  # decode the centred rows; return the rows as given
        candidates = centred(candidates, offset)
        if isinstance(candidate_sets, CandidateStore):
            centred(candidate_sets, offset)  # refused
        elif candidate_sets is not None:
            candidate_sets = [centred(c, offset) for c in candidate_sets]
        idx, scores, take = decode(fmap, surrogate, X, candidates, options, k=k,
                                   candidate_sets=candidate_sets, query_sets=query_sets,
                                   width=width, key=key, default=default)
        return idx, scores, lambda best: np.asarray(dense(take(best))) + offset
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k: the number of candidates to return must be a positive integer, got {k!r}")
    if candidates is not None and candidate_sets is not None:
        raise ValueError("candidates / candidate_sets: give one candidate set for all queries "
                         "(candidates=) or per-query sets (candidate_sets=), not both")
    if candidate_sets is not None:
        return _decode_sets(fmap, surrogate, X, candidate_sets, query_sets, options, k=int(k),
                            width=width, key=key)
    return _decode_fixed(fmap, surrogate, X, candidates, options, k=int(k), width=width, key=key,
                         default=default)
