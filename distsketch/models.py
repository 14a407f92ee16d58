"""Estimators: one sketched pipeline, interchangeable sketches.

- :class:`SISOKR` — input and output kernel, each exact (``None``) or sketched: IOKR,
  SIOKR, ISOKR and SISOKR are the same class with different sketches.
- :class:`SketchedKRR` — sketched kernel ridge regression for scalar or multi-output
  targets (exact KRR with ``sketch=None``).

Both minimise ``(1/n) Σ_i ‖h(x_i) − y_i‖² + λ ‖h‖²`` over the sketched hypothesis space
(see :mod:`distsketch.solve` for the closed forms), fit with one streaming pass
(:mod:`distsketch.accumulate`) and solve any λ from the pass's small sums, with no new
pass: one eigendecomposition of ``H`` for a sketched input side, one Cholesky factorisation
of ``K_X + nλI`` per λ for an exact one (see :mod:`distsketch.solve`).
The estimators only validate, call the module-level functions and keep the small
(``m × m``-sized) fitted state as numpy arrays.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp

from ._base import ParamsMixin
from ._compute import map_local
from .accumulate import _kernel_config, fit_pass
from .candidates import CandidateStore, _check_query_sets, candidate_reader, concatenate_sets
from .decode import Scorer, decode_fixed, decode_ragged
from .kernels import Linear, check_kernel
from .options import EngineOptions, check_options, with_blas_limit
from .rows import RowSource, as_row_source, fingerprint
from .sketches import RealizedSketch, check_sketch, gram_dot
from .solve import (
    EIGEN_PATH_LENGTH,
    InputSolution,
    input_basis,
    krr_coef,
    sisokr_coef,
    sisokr_operator,
    solve_input,
    solve_input_exact,
    whitening,
)

__all__ = ["SISOKR", "SketchedKRR", "NotFittedError"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- validation

try:  # scikit-learn is optional; when present, our error is also its NotFittedError
    from sklearn.exceptions import NotFittedError as _NotFittedBase
except ImportError:  # pragma: no cover - exercised without scikit-learn
    class _NotFittedBase(ValueError, AttributeError):
        pass


class NotFittedError(_NotFittedBase):
    """Raised when a prediction method is called before ``fit`` (a ValueError)."""



def check_lam(lam: Any) -> tuple[float, ...]:
    """λ (a positive float) or a sequence of them; returns the path as a tuple."""
    values = lam if isinstance(lam, (Sequence, np.ndarray)) and not isinstance(lam, str) else [lam]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v) or v <= 0:
            raise ValueError(f"lam: the ridge parameter must be a positive finite number "
                             f"(or a sequence of them), got {lam!r}")
        out.append(float(v))
    if not out:
        raise ValueError("lam: empty sequence; give at least one positive value")
    return tuple(out)


def check_random_state(random_state: Any) -> np.random.Generator:
    """One generator per fit; ``None`` draws fresh entropy (never the global RNG)."""
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state: must be a non-negative integer, got {random_state}")
        return np.random.default_rng(int(random_state))
    raise ValueError(f"random_state: expected None, an int or a numpy Generator, got {random_state!r}")


def _check_xy(X, Y, *, y_name: str, model: str) -> tuple[RowSource, RowSource]:
    if Y is None:
        raise ValueError(f"{y_name}: {model} requires y to be passed, but the target y is None")
    Xs = as_row_source(X, argument="X")
    Ys = as_row_source(Y, argument=y_name, allow_1d=True)
    if Ys.n != Xs.n:
        raise ValueError(f"{y_name}: has {Ys.n} rows but X has {Xs.n}; "
                         f"X and {y_name} must hold the same samples")
    if Xs.n < 2:
        raise ValueError(f"X: at least 2 samples are needed to fit, got n_samples = {Xs.n}")
    Xs.check_finite()
    Ys.check_finite()
    return Xs, Ys


def _solve_input_side(sums: dict, sketch: RealizedSketch, *, n: int, rtol: float,
                      n_lams: int) -> InputSolution:
    if sketch.is_identity:  # H = K_X = C itself
        sol = solve_input_exact(sums["C"], n=n)
    else:
        sol = solve_input(sums["G"], sums["B"], n=n, rtol=rtol)
    # sketched: one eigendecomposition of H for every λ; exact: H + nλI factored per λ
    # unless the λ path is long (solve.EIGEN_PATH_LENGTH explains both)
    return sol.with_eigen() if not sol.exact or n_lams > EIGEN_PATH_LENGTH else sol


def features(kernel, landmarks, P: np.ndarray | None, X, *, options: EngineOptions, argument: str = "X",
             n_features: int | None = None, model: str = "the model", post: np.ndarray | None = None):
    """``k(X, L) P`` row block by row block: ``φ(x) = Pᵀ k(L, x)`` for new points.

    ``P=None`` means the identity (raw kernel features of an exact side). ``post`` (r × k),
    if given, multiplies each block's features: ``k(X, L) P post``, never holding the
    intermediate for all rows. Dask input gives a dask array (lazy); numpy / sparse input
    gives an ndarray.
    """
    width = landmarks.shape[0] if P is None else P.shape[1]
    out_width = width if post is None else post.shape[1]
    src = as_row_source(X, argument=argument)
    if n_features is not None and src.shape[1] != n_features:
        raise ValueError(f"{argument} has {src.shape[1]} features, but {model} is expecting "
                         f"{n_features} features as input")
    X = src.data
    if isinstance(X, da.Array):
        X = X.rechunk({1: -1})
        return X.map_blocks(_features_block, kernel, landmarks, P, options.gram_chunk, post,
                            dtype=np.float64, chunks=(X.chunks[0], (out_width,)))
    if src.lazy:
        return np.asarray(features(kernel, landmarks, P, da.from_zarr(X), options=options,
                                   post=post))
    src.check_finite()
    b = max(1, options.block_memory // (8 * (options.gram_chunk + width + out_width)))
    b = min(b, _FEATURE_ROWS)  # several blocks for the cores; fixed, so results never depend on them
    out = np.empty((src.n, out_width))

    def block(s: int) -> None:
        out[s : s + b] = _features_block(src.data[s : s + b], kernel, landmarks, P,
                                         options.gram_chunk, post)

    map_local(block, list(range(0, src.n, b)))
    return out


_FEATURE_ROWS = 256  # rows per block of features() on in-memory input (BLAS-efficient, many blocks)


def _features_block(block, kernel, landmarks, P, chunk, post=None):
    phi = gram_dot(kernel, block, landmarks, right=P, chunk=chunk)
    return phi if post is None else phi @ post


# --------------------------------------------------------------------------- estimators


class _SketchedBase(ParamsMixin):
    """Shared λ handling of the fitted estimators."""

    @with_blas_limit
    def set_lam(self, lam: float):
        """Switch the active λ without touching the data; returns self.

        Any positive λ is allowed, not only those of the fitted ``lam`` sequence: the
        fit's ``H`` serves every λ (its eigendecomposition, or a Cholesky factorisation of
        ``K_X + nλI`` with an exact input side).
        """
        self._check_fitted()
        (value,) = check_lam(lam)
        self.lam_ = value
        self._update_coef()
        return self

    def save(self, store, *, overwrite: bool = False) -> str:
        """Save the fitted model into a store (path or zarr group); see :func:`distsketch.load`.

        ``fit`` already saves into a kept ``store``; use this for a model fitted with
        ``store=None`` or to copy it elsewhere. Returns the store location.
        """
        from .persist import save

        return save(self, store, overwrite=overwrite)

    def _save_to_fit_store(self) -> None:
        if self.store_ is not None:
            from .persist import save

            save(self, self.store_, overwrite=True)

    def _check_fitted(self):
        if not hasattr(self, "input_solution_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet; "
                                 f"call fit(X, Y) first")

    def _options(self) -> EngineOptions:
        return check_options(self.options)

    def __sklearn_tags__(self):
        """scikit-learn's estimator tags (scikit-learn itself is optional)."""
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(estimator_type=self._estimator_type, target_tags=TargetTags(
            required=True, multi_output=True, single_output=self._estimator_type == "regressor"),
            regressor_tags=RegressorTags() if self._estimator_type == "regressor" else None,
            input_tags=InputTags(sparse=True, allow_nan=False))


class SISOKR(_SketchedBase):
    """Sketch-In-Sketch-Out kernel regression for structured outputs (IOKR family).

    Learns ``ĥ(x) = Σ`` over the sketched input space of the projection of the outputs'
    feature maps ``ψ(y)`` onto the sketched output space, and predicts by decoding
    ``argmin_y k_Y(y, y) − 2⟨ĥ(x), ψ(y)⟩`` over candidates (Prop. 1 of El Ahmad et al.,
    AISTATS 2024). ``input_sketch=None`` / ``output_sketch=None`` keep that side exact:

    ======== ================ ================
    model    input_sketch     output_sketch
    ======== ================ ================
    IOKR     None             None
    SIOKR    a sketch         None
    ISOKR    None             a sketch
    SISOKR   a sketch         a sketch
    ======== ================ ================

    Parameters
    ----------
    input_kernel, output_kernel : kernel, str or callable
        See :mod:`distsketch.kernels`. A :class:`~distsketch.kernels.Linear` output kernel
        makes ``predict`` return vectors (multi-output regression, no decoding).
    input_sketch, output_sketch : Sketch or None
    lam : float or sequence of float
        Ridge parameter λ > 0 of ``(1/n) Σ ‖h(x_i) − ψ(y_i)‖² + λ‖h‖²``. A sequence is
        solved from the same pass and the same eigendecomposition (an exact input side
        factors ``K_X + nλI`` per λ unless there are more than 8); the first value is
        active after ``fit`` and :meth:`set_lam` switches.
    random_state : None, int or numpy.random.Generator
        Seeds the sketches (one generator per fit).
    store : None, path or zarr.Group
        Where the pass is written. ``None``: nothing is written (the sums stay in memory;
        an interrupted fit starts over).
        A path is kept, and a fit interrupted there resumes when fitted again with the
        same data, ``random_state`` and options.
    options : EngineOptions or None
        Engine knobs (block rows, dtype, thresholds); they do not change the model.

    Attributes
    ----------
    input_sketch_, output_sketch_ : RealizedSketch
    input_landmarks_ : array of shape (s'_X, d_X)
    output_landmarks_ : array of shape (s'_Y, d_Y)
    input_solution_ : InputSolution
        λ-independent factors of the input side: ``T_X`` and ``H = T_Xᵀ G T_X``, or
        ``H = K_X`` with an exact input side (see :mod:`distsketch.solve`).
    output_whitening_ : ndarray of shape (m_Y, r_Y) or None
        ``None`` for an exact output side (features are ``k_Y(Y, y)`` themselves).
    lam_ : float
        Active λ.
    lams_ : tuple of float
    coef_ : ndarray of shape (r_Y, r_X)
        ``W(λ)`` for the active λ (``r_X = n`` with an exact input side, whose input
        features are ``k_X(X, x)``; ``r_Y = n`` with an exact output side).
    candidates_ : ndarray of shape (n_candidates, d_Y)
        Unique training outputs in order of first appearance (default candidates).
    candidate_index_ : ndarray of int
        Training row of each default candidate's first appearance.
    n_features_in_ : int
    store_ : str or None
        Path of the kept store.
    """

    _estimator_type = None  # structured prediction: neither classifier nor regressor

    def __init__(self, input_kernel="gaussian", output_kernel="gaussian", *, input_sketch=None,
                 output_sketch=None, lam=1e-6, random_state=None, store=None, options=None):
        self.input_kernel = input_kernel
        self.output_kernel = output_kernel
        self.input_sketch = input_sketch
        self.output_sketch = output_sketch
        self.lam = lam
        self.random_state = random_state
        self.store = store
        self.options = options

    @with_blas_limit
    def fit(self, X, Y):
        """Fit on inputs ``X`` (n, d_X) and outputs ``Y`` (n, d_Y); returns self.

        ``X``, ``Y``: numpy, scipy.sparse, dask or zarr arrays with the same rows.
        """
        lams = check_lam(self.lam)
        kx = check_kernel(self.input_kernel, name="input_kernel")
        ky = check_kernel(self.output_kernel, name="output_kernel")
        sx = check_sketch(self.input_sketch, argument="input_sketch")
        sy = check_sketch(self.output_sketch, argument="output_sketch")
        options = self._options()
        rng = check_random_state(self.random_state)
        Xs, Ys = _check_xy(X, Y, y_name="Y", model="SISOKR")
        sx.check(Xs.n, argument="input_sketch")
        sy.check(Xs.n, argument="output_sketch")
        linear = isinstance(ky, Linear)
        res = fit_pass(Xs, Ys, x_kernel=kx, x_sketch=sx, y_kernel=ky, y_sketch=sy,
                       unique_outputs=not linear, rng=rng, store=self.store, options=options,
                       model="SISOKR")
        S = res.sums
        rtol = options.eig_rtol
        self.input_kernel_, self.output_kernel_ = kx, ky
        self.input_sketch_, self.output_sketch_ = res.x_sketch, res.y_sketch
        self.input_landmarks_, self.output_landmarks_ = res.x_landmarks, res.y_landmarks
        sol = self.input_solution_ = _solve_input_side(S, res.x_sketch, n=res.n, rtol=rtol,
                                                       n_lams=len(lams))
        # input features: (T_X V)ᵀ R_X k_X(X, x) in the eigenbasis of H, or k_X(X, x) itself
        # (exact input side, Cholesky route)
        basis = input_basis(sol)
        self.input_projection_ = None if basis is None else res.x_sketch.transpose_dot(basis)
        if res.y_sketch.is_identity:  # exact output: raw features k_Y(Y, y), see solve.py
            self.output_whitening_ = self.output_projection_ = None
            self.operator_ = sisokr_operator(sol, None, S.get("C"))
        else:
            T_Y = self.output_whitening_ = whitening(S["E"], rtol=rtol, argument="output_kernel")
            self.operator_ = sisokr_operator(sol, T_Y, S.get("M"), S.get("D"))
            self.output_projection_ = res.y_sketch.transpose_dot(T_Y)
        if linear:
            self.candidates_ = self.candidate_index_ = None
            L_Y = _as_dense(res.y_landmarks)
            self.output_map_ = L_Y if self.output_projection_ is None else self.output_projection_.T @ L_Y
        else:
            rows, first = S["U"]
            order = np.argsort(first, kind="stable")
            self.candidates_, self.candidate_index_ = rows[order], first[order]
        self.lams_ = lams
        self.lam_ = lams[0]
        self.n_features_in_ = Xs.shape[1]
        self.n_outputs_ = Ys.shape[1]
        self.store_ = res.store
        # identifies the output side (what candidate features depend on), not λ
        self.output_key_ = fingerprint(
            np.frombuffer(repr(_kernel_config(ky)).encode(), dtype=np.uint8),
            res.y_landmarks, self.output_projection_)
        self._candidate_features = None
        self._update_coef()
        self._save_to_fit_store()
        return self

    def _update_coef(self):
        self.coef_ = sisokr_coef(self.input_solution_, self.operator_, self.lam_)

    def _scorer(self) -> Scorer:
        return Scorer(self.output_kernel_, self.output_landmarks_, self.output_projection_,
                      self._options().gram_chunk)

    # -- features ----------------------------------------------------------------
    @with_blas_limit
    def input_features(self, X):
        """``φ_X(x) = T_Xᵀ R_X k_X(X_train, x)`` for each row: shape (n_queries, r_X).

        With an exact input side, ``φ_X(x) = k_X(X_train, x)`` (``r_X = n``).
        """
        self._check_fitted()
        return features(self.input_kernel_, self.input_landmarks_, self.input_projection_, X,
                        options=self._options(), n_features=self.n_features_in_, model="SISOKR")

    @with_blas_limit
    def output_features(self, Y):
        """``φ_Y(y) = T_Yᵀ R_Y k_Y(Y_train, y)`` for each row: shape (n_candidates, r_Y)."""
        self._check_fitted()
        Y = _check_width(Y, self.n_outputs_, "candidates")
        return features(self.output_kernel_, self.output_landmarks_, self.output_projection_, Y,
                        options=self._options(), argument="candidates")

    @with_blas_limit
    def surrogate(self, X) -> np.ndarray:
        """``W(λ) φ_X(x)``: coordinates of ``ĥ(x)`` in the output features, (n_queries, r_Y).

        Computed block by block on all cores (``φ_X`` of a block, then ``W``), never
        holding ``φ_X`` of all queries.
        """
        self._check_fitted()
        return np.asarray(features(self.input_kernel_, self.input_landmarks_,
                                   self.input_projection_, X, options=self._options(),
                                   n_features=self.n_features_in_, model="SISOKR",
                                   post=self.coef_.T))

    # -- decoding ---------------------------------------------------------------
    @with_blas_limit
    def score_candidates(self, X, candidates) -> np.ndarray:
        """Decoding criterion ``k_Y(y, y) − 2⟨ĥ(x), ψ(y)⟩``; smaller is better.

        Parameters
        ----------
        X : array of shape (n_queries, d_X)
        candidates : array of shape (n_candidates, d_Y)

        Returns
        -------
        ndarray of shape (n_queries, n_candidates)
        """
        self._check_fitted()
        cand = _check_width(candidates, self.n_outputs_, "candidates")
        if cand.shape[0] == 0:
            raise ValueError("candidates: empty candidate set")
        g = self.surrogate(X)
        phi = np.asarray(self.output_features(cand))
        kyy = self.output_kernel_.diag(cand)
        return kyy[None, :] - 2.0 * (g @ phi.T)

    @with_blas_limit
    def predict_topk(self, X, candidates=None, *, k: int = 1, candidate_sets=None, query_sets=None):
        """The ``k`` best candidates of each query, by the decoding criterion.

        The score matrix is never materialised: map tasks score (query × candidate) blocks
        into partial top-k results merged by a tree (:mod:`distsketch.decode`).

        Parameters
        ----------
        X : array of shape (n_queries, d_X)
        candidates : array of shape (n_candidates, d_Y), or a fixed CandidateStore, optional
            One candidate set for every query. Default: the unique training outputs.
        k : int
            Number of candidates to return per query.
        candidate_sets : sequence of arrays (n_s, d_Y), or a ragged CandidateStore, optional
            Per-query candidate sets; each query is scored only against its own set.
        query_sets : array of int of shape (n_queries,), optional
            Set number of each query (default: the store's own ``query_sets``).

        Returns
        -------
        indices : ndarray of int64, shape (n_queries, k)
            Rows of ``candidates``, or positions inside each query's set; ``-1`` where a set
            has fewer than ``k`` members. Ties are broken by the lower index.
        scores : ndarray of float64, shape (n_queries, k)
            ``k_Y(y, y) − 2⟨ĥ(x), ψ(y)⟩`` (``+inf`` for padding), ascending.
        """
        idx, scores, _ = self._decode(X, candidates, k, candidate_sets, query_sets)
        return idx, scores

    def _decode(self, X, candidates, k, candidate_sets, query_sets):
        """Validate, decode, and return ``(indices, scores, take)``; ``take(best)`` gives rows."""
        self._check_fitted()
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"k: the number of candidates to return must be a positive integer, got {k!r}")
        if candidates is not None and candidate_sets is not None:
            raise ValueError("candidates / candidate_sets: give one candidate set for all queries "
                             "(candidates=) or per-query sets (candidate_sets=), not both")
        options = self._options()
        scorer = self._scorer()
        if candidate_sets is not None:
            if isinstance(candidate_sets, CandidateStore):
                store = _check_store(candidate_sets, "ragged", self.n_outputs_)
                source, offsets, stored_qs = store, store.offsets, store.query_sets
                read = _cached_reader(store, scorer, self.output_key_, options.progress)
            else:
                source, offsets = concatenate_sets(candidate_sets, width=self.n_outputs_)
                _check_finite(source, "candidate_sets")
                read, stored_qs = candidate_reader(source), None
            if query_sets is None:
                query_sets = stored_qs
            if query_sets is None:
                raise ValueError("query_sets: required with candidate_sets (one set number per query)")
            G = self.surrogate(X)
            qs = _check_query_sets(query_sets, len(offsets) - 1, n_queries=G.shape[0])
            idx, scores = decode_ragged(scorer, G, read, offsets=offsets, query_sets=qs, k=int(k),
                                        block_rows=options.candidate_rows,
                                        split_every=options.split_every, progress=options.progress)
            return idx, scores, lambda best: _take_rows(source, offsets[qs] + best)
        if isinstance(candidates, CandidateStore):
            store = _check_store(candidates, "fixed", self.n_outputs_)
            read, n_c, take = (_cached_reader(store, scorer, self.output_key_, options.progress),
                              store.n_candidates, store.rows)
        elif candidates is None:
            if self.candidates_ is None:
                raise ValueError("candidates: a model with a linear output kernel has no default "
                                 "candidates; pass candidates=")
            if self._candidate_features is None:  # features of the default set, once per fit
                self._candidate_features = (scorer.features(self.candidates_, parallel=True),
                                            scorer.diag(self.candidates_))
            phi, kyy = self._candidate_features
            read, n_c = (lambda a, b: ("cached", phi, kyy, a, b)), len(phi)
            take = self.candidates_.__getitem__
        else:
            src = as_row_source(candidates, argument="candidates")
            if src.shape[1] != self.n_outputs_:
                raise ValueError(f"candidates: rows have {src.shape[1]} columns but the model was "
                                 f"fitted on outputs with {self.n_outputs_}")
            src.check_finite()
            read, n_c = candidate_reader(src.data), src.n
            take = lambda best: _take_rows(src, best)  # noqa: E731
        G = self.surrogate(X)
        idx, scores = decode_fixed(scorer, G, read, n_candidates=n_c, k=int(k),
                                   block_rows=options.candidate_rows, split_every=options.split_every,
                                   progress=options.progress)
        return idx, scores, take

    @with_blas_limit
    def predict(self, X, candidates=None, *, candidate_sets=None, query_sets=None):
        """Best candidate row per query; vectors ``ĥ(x)`` for a linear output kernel.

        Parameters
        ----------
        X : array of shape (n_queries, d_X)
        candidates, candidate_sets, query_sets
            As for :meth:`predict_topk`; default candidates: the unique training outputs
            (``candidates_``).

        Returns
        -------
        ndarray of shape (n_queries, d_Y)
        """
        self._check_fitted()
        if candidates is None and candidate_sets is None and self.candidates_ is None:
            return self.surrogate(X) @ self.output_map_  # linear output kernel: h(x) itself
        idx, _, take = self._decode(X, candidates, 1, candidate_sets, query_sets)
        return _as_dense(take(idx[:, 0]))


def _check_store(store: CandidateStore, kind: str, width: int) -> CandidateStore:
    if store.kind != kind:
        right = "candidates=" if store.kind == "fixed" else "candidate_sets="
        raise ValueError(f"candidates: this CandidateStore holds {'one fixed set' if store.kind == 'fixed' else 'per-query sets'}; "
                         f"pass it as {right}")
    if store.width != width:
        raise ValueError(f"candidates: the store's rows have {store.width} columns but the model "
                         f"was fitted on outputs with {width}")
    return store


def _cached_reader(store: CandidateStore, scorer: Scorer, key: str, progress: bool = False):
    phi, kyy = store.ensure_features(scorer, key, progress=progress)
    return lambda a, b: ("cached", phi, kyy, a, b)


def _check_finite(a: np.ndarray, argument: str) -> None:
    if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
        raise ValueError(f"{argument}: contain NaN or infinity")


def _take_rows(candidates, index: np.ndarray) -> np.ndarray:
    """Rows ``index`` (any order) of a candidate array, RowSource or store."""
    if isinstance(candidates, CandidateStore):
        return candidates.rows(index)
    src = as_row_source(candidates, argument="candidates")
    order = np.argsort(index, kind="stable")
    out = _as_dense(src.take(index[order]))
    result = np.empty_like(out)
    result[order] = out
    return result


class SketchedKRR(_SketchedBase):
    """Sketched kernel ridge regression, scalar or multi-output (exact with ``sketch=None``).

    ``f(x) = (R k(X, x))ᵀ β(λ)`` with ``β(λ) = (R K² Rᵀ + nλ R K Rᵀ)^† R K Y`` (eq. 3 of
    Chen & Yang, JMLR 2021; El Ahmad et al., TMLR 2023), minimising
    ``(1/n) Σ ‖f(x_i) − y_i‖² + λ‖f‖²``.

    Parameters
    ----------
    kernel : kernel, str or callable
    sketch : Sketch or None
    lam, random_state, store, options
        As for :class:`SISOKR`.

    Attributes
    ----------
    sketch_ : RealizedSketch
    landmarks_ : array of shape (s', d)
    input_solution_ : InputSolution
    dual_coef_ : ndarray of shape (s', n_targets)
        ``R_mixᵀ β(λ)``: ``f(x) = k(x, landmarks_) @ dual_coef_``.
    lam_, lams_, n_features_in_, store_
        As for :class:`SISOKR`.
    """

    _estimator_type = "regressor"

    def __init__(self, kernel="gaussian", *, sketch=None, lam=1e-6, random_state=None, store=None,
                 options=None):
        self.kernel = kernel
        self.sketch = sketch
        self.lam = lam
        self.random_state = random_state
        self.store = store
        self.options = options

    @with_blas_limit
    def fit(self, X, y):
        """Fit on ``X`` (n, d) and targets ``y`` (n,) or (n, n_targets); returns self."""
        lams = check_lam(self.lam)
        k = check_kernel(self.kernel, name="kernel")
        s = check_sketch(self.sketch, argument="sketch")
        options = self._options()
        rng = check_random_state(self.random_state)
        Xs, Ys = _check_xy(X, y, y_name="y", model="SketchedKRR")
        s.check(Xs.n, argument="sketch")
        res = fit_pass(Xs, Ys, x_kernel=k, x_sketch=s, rng=rng, store=self.store, options=options,
                       model="SketchedKRR")
        self.kernel_ = k
        self.sketch_ = res.x_sketch
        self.landmarks_ = res.x_landmarks
        self.input_solution_ = _solve_input_side(res.sums, res.x_sketch, n=res.n,
                                                 rtol=options.eig_rtol, n_lams=len(lams))
        # right-hand side of the solve: b = R_X K_X Y (sketched input), Y itself (exact)
        self._b = res.sums["Y"] if "Y" in res.sums else res.sums["b"]
        self._y_1d = Ys.input_ndim == 1
        self.lams_ = lams
        self.lam_ = lams[0]
        self.n_features_in_ = Xs.shape[1]
        self.store_ = res.store
        self._update_coef()
        self._save_to_fit_store()
        return self

    def _update_coef(self):
        beta = krr_coef(self.input_solution_, self._b, self.lam_)
        self.dual_coef_ = self.sketch_.transpose_dot(beta)

    @with_blas_limit
    def predict(self, X):
        """``f(x) = k(x, landmarks_) @ dual_coef_``: shape (n,) or (n, n_targets).

        A dask array input gives a lazy dask array.
        """
        self._check_fitted()
        out = features(self.kernel_, self.landmarks_, self.dual_coef_, X, options=self._options(),
                       n_features=self.n_features_in_, model="SketchedKRR")
        return out[:, 0] if self._y_1d else out

    def score(self, X, y) -> float:
        """Coefficient of determination R² of ``predict(X)`` (uniform average over targets)."""
        y = np.asarray(y, dtype=np.float64)
        pred = np.asarray(self.predict(X), dtype=np.float64).reshape(y.shape)
        ss_res = ((y - pred) ** 2).sum(axis=0)
        ss_tot = ((y - y.mean(axis=0)) ** 2).sum(axis=0)
        return float(np.mean(1.0 - ss_res / ss_tot))


def _as_dense(a):
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def _check_width(Y, width: int, argument: str):
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
