"""Driver solve: the small ``m × m`` systems of the SISOKR family and sketched KRR.

Glossary (docs/design.md, "Math")
--------------------
C = K_X R_Xᵀ  (n × m_X)        D = K_Y R_Yᵀ  (n × m_Y)
G = CᵀC      = R_X K_X² R_Xᵀ    B = R_X C     = R_X K_X R_Xᵀ
M = DᵀC      = R_Y K_Y K_X R_Xᵀ E = R_Y D     = R_Y K_Y R_Yᵀ
b = Cᵀ Y     (vector targets)
T_X           whitening of B:  B = U diag(s) Uᵀ, T_X = U_r diag(s_r^{-1/2}), s_r > rtol·max(s);
              when B is safely far from that threshold, T_X = L^{-T} for B = L Lᵀ (same model)
H = T_Xᵀ G T_X = V diag(Λ) Vᵀ   Gram of the input features (K_X for an exact input side,
                              factored per λ by Cholesky unless the λ path is long)

Objective normalisation, written once: every model minimises
``(1/n) Σ_i ‖h(x_i) − ψ(y_i)‖² + λ ‖h‖²``, hence the ``n λ`` below.

- SISOKR (Prop. 1 of El Ahmad et al., AISTATS 2024)::

      W(λ) = (T_Yᵀ M T_X) (H + nλI)^{-1} = (T_Yᵀ M T_X) V (Λ + nλ)^{-1} Vᵀ   (r_Y × r_X)
      ⟨ĥ(x), ψ(y)⟩ = φ_Y(y)ᵀ W(λ) φ_X(x),  φ_X(x) = T_Xᵀ R_X k_X(X, x)

  which equals the dense closed form
  ``k_Y(y,Y) R_Yᵀ (R_Y K_Y R_Yᵀ)^† R_Y K_Y K_X R_Xᵀ (R_X K_X² R_Xᵀ + nλ R_X K_X R_Xᵀ)^† R_X k_X(X,x)``.
- Sketched KRR (eq. 3 of Chen & Yang, AISTATS 2021)::

      β(λ) = T_X (H + nλI)^{-1} T_Xᵀ b,   f(x) = (R_X k_X(X, x))ᵀ β(λ)

- Exact input side (``R_X = I``: IOKR, ISOKR, exact KRR), ``H = K_X`` and ``T_X = I``::

      W(λ) = (D T_Y)ᵀ (K_X + nλI)^{-1}    or  (K_X + nλI)^{-1} (exact output),
      β(λ) = (K_X + nλI)^{-1} Y,           φ_X(x) = k_X(X, x)

Symmetrise, factor, threshold relatively (the whitening of sketched sides); no inverse is
formed but IOKR's ``(K_X + nλI)^{-1}`` (exact on both sides), whose coefficients are that
matrix: it comes from the Cholesky factor (``potri``).

The assembly of a model from the pass's sums — which factors, which projections onto the
landmark columns — is here too (:func:`solve_sisokr`, :func:`solve_krr`,
:func:`solve_features`); estimators call one of them. numpy and scipy only, no dask.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky
from scipy.linalg.lapack import dpocon, dpotri, dpstrf, dtrtri

from ..backends.base import dense
from .blocks import distinct_rows
from ..tuning import check_tuning

__all__ = [
    "whitening", "InputSolution", "solve_input", "solve_input_exact", "solve_input_side",
    "input_basis", "sisokr_operator", "sisokr_coef", "krr_coef", "EIGEN_PATH_LENGTH",
    "SisokrSolution", "solve_sisokr", "solve_krr", "solve_features", "sisokr_sums", "krr_sums",
    "feature_sums", "BandReduction", "EigenShifted", "eigen_pays", "factored_directions",
]

logger = logging.getLogger(__name__)


_SYM_TILE = 256


def _sym(A: np.ndarray) -> np.ndarray:
    """``(A + Aᵀ)/2``, a new float64 array; a large square ``A`` by tiles of ``_SYM_TILE``
    (each tile added to its transposed mirror tile, cache-sized: 2250² in 19 ms against 31 ms
    for the whole transposed read), with the same values."""
    A = np.asarray(A, dtype=np.float64)
    m = A.shape[0]
    if A.ndim != 2 or A.shape[1] != m or m <= _SYM_TILE:
        return 0.5 * (A + A.T)
    out, t = np.empty((m, m)), _SYM_TILE
    for i in range(0, m, t):
        for j in range(0, m, t):
            np.add(A[i:i + t, j:j + t], A[j:j + t, i:i + t].T, out=out[i:i + t, j:j + t])
    out *= 0.5
    return out


def _sym_inplace(A: np.ndarray) -> np.ndarray:
    """``A ← (A + Aᵀ)/2`` for a square float64 ``A`` the caller owns, by pairs of tiles of
    :data:`_SYM_TILE` (each pair's mean written to both): the values of :func:`_sym` without
    a second array."""
    m, t = A.shape[0], _SYM_TILE
    for i in range(0, m, t):
        for j in range(i, m, t):
            S = np.add(A[i:i + t, j:j + t], A[j:j + t, i:i + t].T)
            S *= 0.5
            A[i:i + t, j:j + t] = S
            A[j:j + t, i:i + t] = S.T
    return A


def _principal(A: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``A[keep][:, keep]`` (a new array) for sorted ``keep``; copied by contiguous runs of
    ``keep`` when they are few (a few dropped columns: 2247 of 2250 in 9 ms against 20 ms
    for the fancy index)."""
    keep = np.asarray(keep, dtype=np.intp)
    starts = np.flatnonzero(np.diff(keep) != 1) + 1
    if len(starts) > 32:
        return np.asarray(A)[np.ix_(keep, keep)]
    runs = [(int(r[0]), int(r[-1]) + 1) for r in np.split(keep, starts) if len(r)]
    out = np.empty((len(keep), len(keep)), dtype=np.result_type(A))
    r0 = 0
    for a, b in runs:
        c0 = 0
        for c, d in runs:
            out[r0:r0 + b - a, c0:c0 + d - c] = A[a:b, c:d]
            c0 += d - c
        r0 += b - a
    return out


def _check_finite_sum(A: np.ndarray, *, what: str, argument: str) -> None:
    """A pass sum with NaN or infinity means the kernel overflowed on the data (a squared
    norm beyond float64's 1.8e308, say): say so, naming the argument, instead of failing later
    in a factorisation."""
    if not np.isfinite(A).all():
        raise ValueError(
            f"{argument}: {what} holds NaN or infinity: the kernel overflowed on the data (its "
            f"values or squared distances exceed float64's range); scale the inputs (e.g. "
            f"standardize them)")


# The Cholesky whitening is used only when LAPACK's estimate of the reciprocal condition
# number exceeds rtol by this factor. The estimate of ‖B⁻¹‖₁ is a lower bound, rarely off
# by more than 10× (Higham, "Accuracy and Stability of Numerical Algorithms", §15.3), and
# cond₂ ≤ cond₁ for symmetric B, so then every eigenvalue lies above rtol · max(s): the
# eigen-decomposition would have kept every direction, and both whitenings give the same
# model (they differ by a rotation Q, T_chol = T_eig Q, which V absorbs).
_CHOLESKY_MARGIN = 1e3


def whitening(B: np.ndarray, *, rtol: float, argument: str = "kernel") -> np.ndarray:
    """``T`` with ``Tᵀ B T = I_r`` and ``T Tᵀ = B^†`` on the retained eigenspace.

    ``T = U_r diag(s_r^{-1/2})`` for ``B = U diag(s) Uᵀ`` keeping ``s > rtol · max(s)``.
    When ``B`` is well conditioned (every eigenvalue kept, with a margin),
    ``T = L^{-T}`` for the Cholesky factor ``B = L Lᵀ`` instead: the same whitened space
    (``T_chol = T_eig Q`` with ``Q`` orthogonal, which leaves every model unchanged) at
    about a twentieth of the cost of the eigendecomposition.

    Parameters
    ----------
    B : ndarray of shape (m, m)
        Symmetric positive semi-definite (``R K Rᵀ``).
    rtol : float
        Relative eigenvalue threshold.

    Returns
    -------
    ndarray of shape (m, r)
    """
    return _whitening(B, rtol=rtol, argument=argument)[0]


def _whitening(B: np.ndarray, *, rtol: float, argument: str) -> tuple[np.ndarray, str]:
    """:func:`whitening` and the route it took: ``"cholesky"`` or ``"eigen"``."""
    _check_finite_sum(B, what="the sketched Gram matrix R K Rᵀ", argument=argument)
    B = _sym(B)
    T = _cholesky_whitening(B, rtol=rtol)
    if T is not None:
        return T, "cholesky"
    # (no pivoted stage here: the whitened coordinates are visible — the output side's
    # surrogate coordinates, the features of SketchedFeatures — and the eigenbasis keeps them
    # as they were; the input side's generalized form needs no whitening, see solve_input)
    s, U = np.linalg.eigh(B)
    top = s[-1] if s.size else 0.0
    if not np.isfinite(top) or top <= 0.0:
        raise ValueError(
            f"{argument}: the sketched Gram matrix R K Rᵀ has no positive eigenvalue; "
            f"check the kernel (is it positive definite?) and that the sketch is not empty"
        )
    keep = s > rtol * top
    return U[:, keep] / np.sqrt(s[keep]), "eigen"


def _cholesky_whitening(B: np.ndarray, *, rtol: float) -> np.ndarray | None:
    """``L^{-T}`` for ``B = L Lᵀ`` if ``B`` is safely well conditioned, else None."""
    if B.size == 0 or not np.isfinite(B).all():
        return None
    try:
        L = cholesky(B, lower=True, check_finite=False)
    except LinAlgError:
        return None
    rcond, info = dpocon(L, np.abs(B).sum(axis=0).max(), uplo="L")
    if info != 0 or not rcond > _CHOLESKY_MARGIN * rtol:
        return None
    L_inv, info = dtrtri(L, lower=1)
    if info != 0:
        return None
    return np.ascontiguousarray(L_inv.T)


# The input side's generalized form (solve_input) needs no whitening, only the columns of B
# that span the model. Where the rcond test above fails — B rank deficient, as with
# duplicated landmarks (Bibtex's binary inputs: 4 of 2250 sub-sampled rows repeat), or well
# conditioned but with less margin than 1e3 — a pivoted Cholesky factorisation (LAPACK
# pstrf, stopping at its default tolerance m·ε·max diag B, the rounding level of B's
# entries) keeps r columns ``keep`` and is accepted only when it provably keeps the eigen
# threshold's space:
# - dropped: the Schur complement S of the kept block bounds the discarded spectrum,
#   λ_{r+1}(B) ≤ ‖S‖₂ ≤ ‖S‖₁ (Weyl: B minus the rank-r factor is diag(0, S)); ‖S‖₁ below
#   rtol·max diag(B)/2 ≤ rtol·max(s)/2 means the eigen route drops as many directions, and as
#   S is at the rounding level of B, what it drops are the same functions up to rounding (a
#   repeated landmark's kernel column is exactly a kept one);
# - kept: every eigenvalue of the kept block exceeds 2·rtol·‖B‖₁ ≥ 2·rtol·max(s) (so, by
#   interlacing, B's top r eigenvalues do too), certified by a Cholesky factorisation of
#   B_kk − 2·rtol·‖B‖₁·I succeeding (its backward error, ~r·ε·‖B‖, is far below rtol·‖B‖),
#   or by the rcond test above when it passes. One more O(r³/3) factorisation: a tenth of
#   an eigendecomposition (docs/design.md, "Driver routes").
_KEPT_SHIFT = 2.0


def _pivoted_factor(B: np.ndarray, *, rtol: float, norm1: float) -> np.ndarray | None:
    """The columns ``keep`` (in pivot order) of a pivoted Cholesky factorisation of the
    symmetric ``B`` (``norm1 = ‖B‖₁``) when their span is provably the eigen threshold's (see
    the notes above), else None."""
    m = B.shape[0]
    c, piv, rank, info = dpstrf(B, lower=1)
    if info < 0 or rank < 1:
        return None
    piv = np.asarray(piv[:m], dtype=np.intp) - 1  # LAPACK's 1-based pivots
    keep, drop = piv[:rank], piv[rank:]
    if rank < m:
        L21 = c[rank:, :rank]
        S = B[np.ix_(drop, drop)] - L21 @ L21.T
        if not np.abs(S).sum(axis=0).max() <= 0.5 * rtol * B.diagonal().max():
            return None
    B_kk = B[np.ix_(keep, keep)]
    norm_kk = np.abs(B_kk).sum(axis=0).max()
    rcond, info = dpocon(c[:rank, :rank], norm_kk, uplo="L")  # reads the lower triangle only
    if info == 0 and rcond > _CHOLESKY_MARGIN * rtol * norm1 / norm_kk:
        return keep
    B_kk.flat[:: rank + 1] -= _KEPT_SHIFT * rtol * norm1
    try:
        cholesky(B_kk.T, lower=True, overwrite_a=True, check_finite=False)  # symmetric: .T is
        # the matrix in Fortran order, factored in place
    except LinAlgError:
        return None
    return keep


def _distinct_columns(B: np.ndarray) -> np.ndarray:
    """The first of each set of bitwise-equal columns of the symmetric ``B`` (ascending).

    Two equal columns ``j, j'`` make ``B(e_j − e_j') = 0`` exactly: the functions of the two
    columns (a repeated landmark's, Bibtex's repeated binary inputs) are the same function of
    the model's space, and dropping one changes neither that space nor the model. Rows are
    compared as bytes (``B`` is symmetric: rows are columns), ``-0.0`` as ``+0.0``: first by
    their first 8 entries (one sort of ``m`` short keys), then the rows of each group that
    share them in full."""
    A = np.asarray(B, dtype=np.float64)
    m = A.shape[0]
    _, group = distinct_rows(A[:, :8])
    keep = np.ones(m, dtype=bool)
    for g in np.flatnonzero(np.bincount(group) > 1):
        rows = np.flatnonzero(group == g)
        first, _ = distinct_rows(A[rows])
        keep[rows] = False
        keep[rows[first]] = True  # the first occurrence: the lowest row of each set
    return np.flatnonzero(keep)


def _certified_columns(B: np.ndarray, *, rtol: float, distinct: np.ndarray | None = None,
                       scratch: list | None = None) -> np.ndarray | None:
    """The columns of ``B`` whose span is the model's (all of them, in order; the distinct
    ones, :func:`_distinct_columns`, which the caller may pass; or the pivoted
    factorisation's ``keep``), certified as in the notes above; None: eigen route only.
    ``scratch``: a list to which the array the certificate's factorisation wrote (C-ordered,
    ``len(keep)`` square, free to overwrite) is appended when the all- or distinct-columns
    certificate succeeds, for the caller's next factorisation of that order.

    Where no column repeats, a Cholesky factorisation of ``B`` with the rcond test. Where
    some repeat, their exact null directions are dropped and the distinct columns certified
    by the pivoted route's "kept" test alone (a Cholesky factorisation of
    ``B_kk − 2·rtol·‖B‖₁·I`` succeeding: every kept eigenvalue above the eigen threshold):
    one factorisation for Bibtex's ``B`` (3–4 repeated landmarks), where ``pstrf`` and its
    tests took about 8 Cholesky factorisations' time. Else the pivoted factorisation."""
    m = B.shape[0]
    if m == 0 or not np.isfinite(B).all():
        return None
    norm1 = np.abs(B).sum(axis=0).max()
    distinct = _distinct_columns(B) if distinct is None else distinct
    if len(distinct) == m:
        try:  # B symmetric: B.T is B in Fortran order, no transposing copy
            L = cholesky(B.T, lower=True, check_finite=False)
        except LinAlgError:
            L = None
        if L is not None:
            rcond, info = dpocon(L, norm1, uplo="L")
            if info == 0 and rcond > _CHOLESKY_MARGIN * rtol:
                if scratch is not None and L.flags.f_contiguous:
                    scratch.append(L.T)
                return distinct
    else:
        B_kk = _principal(B, distinct)
        B_kk.flat[:: len(distinct) + 1] -= _KEPT_SHIFT * rtol * norm1
        try:
            cholesky(B_kk.T, lower=True, overwrite_a=True, check_finite=False)
        except LinAlgError:
            pass
        else:
            if scratch is not None:
                scratch.append(B_kk)
            return distinct
    keep = _pivoted_factor(B, rtol=rtol, norm1=norm1)
    return None if keep is None else np.sort(keep)


# An exact input side (H = K_X) factors H + nλI by Cholesky per λ: r³/3 flops against the
# ~9r³ of a symmetric eigendecomposition with vectors, and K_X itself carries only rounding
# error. A λ path longer than this shares one eigendecomposition instead.
EIGEN_PATH_LENGTH = 8

# A sketched input side is factored per λ too, with a safety test. H = T_Xᵀ G T_X carries the
# rounding of the pass sum G amplified by ‖T_X‖² = 1/λ_min(B) (up to 1/(rtol·max s)): its
# computed eigenvalues can be negative, far beyond nλ for small λ. The eigen route clips them
# at 0; a Cholesky factor of H + nλI keeps them, which is the same model only while they are
# small against nλ: a λ is solved by Cholesky once a factorisation of H + τ·nλ·I
# (τ = _NOISE_SHIFT) has succeeded, which proves — to the rounding the factorisation itself
# adds, Tᵀ(m·ε·‖G‖)T, the same amplified rounding — that every eigenvalue of H exceeds
# −τ·nλ, so the two routes differ by less than τ/(1 − τ) relative, and only along directions
# where H is rounding noise; otherwise (tiny λ, CASP's small λ) the eigen route. The
# generalized form needs neither T nor H: with B_kk = L Lᵀ on the certified columns ``keep``
# (T = E_keep L^{-T}), T (H + nλI)^{-1} Tᵀ = E_keep (G_kk + nλ B_kk)^{-1} E_keepᵀ and
# Tᵀ(... ) scales congruently, so the test and the solve factor G_kk + c·B_kk instead.
_NOISE_SHIFT = 1e-2

# Path length from which one eigendecomposition beats a Cholesky factorisation per λ on a
# sketched input side, by the r of H: EngineOptions.tuning.eigen_crossover (distsketch.Tuning,
# where its measurements are: `python benchmarks/bench_bibtex.py --driver-crossover`,
# docs/design.md, "Driver routes"). The eigen route costs a generalized symmetric
# eigendecomposition (scipy eigh(H, metric)) and one product Vᵀ R, then O(r·r_Y) per λ; the
# Cholesky route one safety factorisation, then per λ a factorisation and its solve with r_Y
# right-hand sides (one right-hand side, KRR, moves the crossover up 1.2–3.5×). Interpolated
# between the sizes, the end values beyond them.


def eigen_pays(n_lams: int, r: int, *, tuning=None) -> bool:
    """Whether a sketched input side of ``r`` features solves ``n_lams`` values of λ faster
    from one eigendecomposition than by a Cholesky factorisation per λ (the measured crossover
    ``tuning.eigen_crossover``; ``tuning``: the fit's ``options.tuning``, None: the
    defaults)."""
    sizes, lengths = zip(*check_tuning(tuning).eigen_crossover)
    return n_lams > float(np.interp(r, sizes, lengths))


@dataclass(frozen=True)
class InputSolution:
    """λ-independent factors of the input side: ``T_X``, ``H`` and ``n``.

    The model of every λ is the ridge solution ``(H + nλ·metric)^{-1} R`` in the input
    features ``φ_X(x) = T_Xᵀ R_X k_X(X, x)``, whose Gram matrix over the training rows is
    ``H``:

    - sketched input, whitened (``metric=None``, the identity): ``H = T_Xᵀ G T_X``
      (r_X × r_X) with ``T_Xᵀ B T_X = I``;
    - sketched input, generalized form: ``T = E_keep`` selects the certified columns of
      ``B`` (see :func:`solve_input`), ``H = G_kk`` and ``metric = B_kk``: the features are
      ``(R_X k_X(X, x))_keep`` themselves, and no whitening or ``Tᵀ G T`` is formed;
    - exact input (``T=None``, ``φ_X(x) = k_X(X, x)``): ``H = K_X`` (n × n), which gives the
      dense closed forms of IOKR and exact KRR, every direction of ``K_X`` kept (as
      scikit-learn's ``KernelRidge`` solves it).

    Attributes
    ----------
    T : ndarray of shape (m_X, r_X) or None
    H : ndarray of shape (r_X, r_X)
    n : int
    V, evals : ndarray of shape (r_X, r_X) and (r_X,), or None
        ``H = V diag(evals) Vᵀ`` with ``Vᵀ metric V = I`` (eigenvalues clipped at 0), when set
        (:meth:`with_eigen`) every λ is solved from it; otherwise each λ is solved by a
        Cholesky factorisation of ``H + nλ·metric``, or, where the safety test refuses it
        (notes at :data:`_NOISE_SHIFT`), by the eigendecomposition.
    metric : ndarray of shape (r_X, r_X) or None
        ``Tᵀ B T`` when it is not the identity (the generalized form), else None.
    support : ndarray of int or None
        The generalized form's ``keep`` (``T = E_keep``), for products that select columns
        instead of multiplying by ``T``; None otherwise (not saved: ``T`` says the same).
    whitening_route : str
        How ``B`` was handled: ``"cholesky"`` (every column, certified), ``"distinct"``
        (its distinct columns, certified: repeated landmarks dropped), ``"pivoted"``
        (the certified columns of a pivoted factorisation), ``"eigen"`` (eigendecomposition),
        ``"exact"`` (no ``B``), or ``""`` (unknown: a saved model).
    """

    T: np.ndarray | None
    H: np.ndarray
    n: int
    V: np.ndarray | None = None
    evals: np.ndarray | None = None
    metric: np.ndarray | None = None
    support: np.ndarray | None = None
    whitening_route: str = ""

    @property
    def exact(self) -> bool:
        return self.T is None

    def __getstate__(self) -> dict:
        # a pickled model carries no factor cache (an exact side's is n × n) nor scratch buffer
        return {k: v for k, v in self.__dict__.items() if k not in ("_last_factor", "_scratch")}

    @property
    def route(self) -> str:
        """The route the last λ was solved by: ``"eigen"``, ``"cholesky"`` (``H + nλI``) or
        ``"generalized"`` (``G_kk + nλB_kk``); ``""`` before any solve."""
        if self.V is not None:
            return "eigen"
        return self.__dict__.get("_route", "")

    def _note_route(self, route: str, lam: float) -> None:
        object.__setattr__(self, "_route", route)  # a record, not state
        logger.debug("input side, λ = %g: %s route (r = %d)", lam, route, self.H.shape[0])

    def with_eigen(self) -> "InputSolution":
        """The same solution with ``H`` eigen-decomposed once (computed once per object);
        the generalized form by the generalized problem ``H v = μ metric v``."""
        if self.V is not None:
            return self
        cached = self.__dict__.get("_eigen")
        if cached is None:
            if self.metric is None:
                evals, V = np.linalg.eigh(_sym(self.H))
            else:  # metric = B_kk is certified positive definite
                from scipy.linalg import eigh

                evals, V = eigh(_sym(self.H), _sym(self.metric), check_finite=False)
            cached = replace(self, V=V, evals=np.clip(evals, 0.0, None))
            object.__setattr__(self, "_eigen", cached)  # a cache, not state
        return cached

    def _shifted(self, shift: float, work: np.ndarray | None = None) -> np.ndarray:
        """``H + shift·metric`` for a lower Cholesky factorisation in place: the transpose of
        a C-ordered array, new or ``work`` (C-ordered, ``H``'s shape, free to overwrite).
        ``H`` and ``metric`` are symmetric, so that transpose is the matrix itself in
        LAPACK's order, without a transposing copy (the factorisation reads one triangle: no
        symmetrisation)."""
        A = work
        if self.metric is None:
            if A is None:
                A = np.array(self.H, dtype=np.float64, order="C")
            else:
                np.copyto(A, self.H)
            A.flat[:: A.shape[0] + 1] += shift
        else:  # shift·metric + H: the values of H + shift·metric
            A = np.multiply(np.asarray(self.metric, dtype=np.float64), shift, out=A,
                            order="C")
            A += self.H
        return A.T

    def _certified(self, lam: float) -> bool:
        """Whether λ may be solved by Cholesky (a sketched side: every eigenvalue of ``H``
        above ``−τ·nλ``, notes at :data:`_NOISE_SHIFT`; shown once for all λ above it)."""
        return self._certify(lam)[0]

    def _certify(self, lam: float) -> tuple[bool, np.ndarray | None]:
        """:meth:`_certified` and a C-ordered ``r × r`` array free to overwrite (the one its
        factorisation wrote, or the one :func:`solve_input`'s certificate of ``B`` left),
        which :meth:`_factor` reuses instead of a new allocation; None: none."""
        work = self.__dict__.pop("_scratch", None)  # a one-use buffer, not state
        if self.exact:
            return True, work
        low = self.__dict__.get("_certified_down_to")
        if low is not None and lam >= low:
            return True, work
        A = self._shifted(_NOISE_SHIFT * self.n * float(lam), work)
        try:
            cholesky(A, lower=True, overwrite_a=True, check_finite=False)
        except LinAlgError:
            logger.debug("input side, λ = %g: H + τnλ not positive definite, eigen route", lam)
            return False, A.T
        object.__setattr__(self, "_certified_down_to", float(lam))  # a cache, not state
        return True, A.T

    def _factor(self, lam: float) -> np.ndarray | None:
        """Lower Cholesky factor of ``H + nλ·metric``, or None if it is not numerically PD
        or the safety test refuses it. The last λ's factor is kept: switching the rank, or
        solving again at the active λ, costs no new ``O(r³)`` factorisation (an exact side's
        ``r`` is n)."""
        last = self.__dict__.get("_last_factor")
        if last is not None and last[0] == float(lam):
            return last[1]
        certified, work = self._certify(lam)
        if not certified:
            L = None
        else:
            try:
                L = cholesky(self._shifted(self.n * float(lam), work), lower=True,
                             overwrite_a=True, check_finite=False)
            except LinAlgError:
                L = None
        object.__setattr__(self, "_last_factor", (float(lam), L))  # a cache, not state
        return L

    def solve(self, rhs: np.ndarray, lam: float) -> np.ndarray:
        """``(H + nλ·metric)^{-1} rhs`` of shape (r_X, k)."""
        rhs = np.asarray(rhs, dtype=np.float64)
        if self.V is not None:
            return self.V @ ((self.V.T @ rhs) / (self.evals + self.n * float(lam))[:, None])
        L = self._factor(lam)
        if L is None:
            self._note_route("eigen", lam)
            return self.with_eigen().solve(rhs, lam)
        self._note_route("cholesky" if self.metric is None else "generalized", lam)
        return cho_solve((L, True), rhs, check_finite=False)

    def inverse(self, lam: float) -> np.ndarray:
        """``(H + nλ·metric)^{-1}`` of shape (r_X, r_X) (from the Cholesky factor, LAPACK
        ``potri``)."""
        if self.V is not None:
            return (self.V / (self.evals + self.n * float(lam))) @ self.V.T
        L = self._factor(lam)
        if L is None:
            self._note_route("eigen", lam)
            return self.with_eigen().inverse(lam)
        self._note_route("cholesky" if self.metric is None else "generalized", lam)
        inv, info = dpotri(L, lower=1)
        if info != 0:  # pragma: no cover - the factor exists, so potri cannot fail
            raise ValueError(f"lam: inverting H + nλI failed (LAPACK info {info})")
        upper = np.triu_indices_from(inv, 1)
        inv[upper] = inv.T[upper]  # potri fills the lower triangle only
        return inv


def solve_input(G: np.ndarray, B: np.ndarray, *, n: int, rtol: float,
                argument: str = "input_kernel", generalized: bool = True) -> InputSolution:
    """Sketched input side: the generalized form, or whiten ``B`` and form ``H = T_Xᵀ G T_X``.

    ``generalized``: where the columns ``keep`` of ``B`` are certified to span the eigen
    threshold's space (all of them when ``B`` is safely well conditioned; notes at
    :data:`_KEPT_SHIFT`), return ``T = E_keep``, ``H = G_kk``, ``metric = B_kk``: with
    ``B_kk = L Lᵀ`` and the whitening ``T_X = E_keep L^{-T}``,
    ``T_X (Hw + nλI)^{-1} T_Xᵀ = E_keep (G_kk + nλ B_kk)^{-1} E_keepᵀ`` for the whitened
    ``Hw = T_Xᵀ G T_X``: the same model, solved by one Cholesky factorisation per λ with no
    triangular inverse and no ``Tᵀ G T`` product. Otherwise (or ``generalized=False``) the
    whitening of :func:`whitening`.
    """
    _check_finite_sum(G, what="the sum CᵀC", argument=argument)
    _check_finite_sum(B, what="the sketched Gram matrix R K Rᵀ", argument=argument)
    B = _sym(B)
    if generalized:
        m = B.shape[0]
        distinct, scratch = _distinct_columns(B), []
        keep = _certified_columns(B, rtol=rtol, distinct=distinct, scratch=scratch)
        if keep is not None:
            route = ("cholesky" if len(keep) == m else "distinct"
                     if np.array_equal(keep, distinct) else "pivoted")
            logger.debug("input side: B certified on %d of %d columns (%s), generalized form",
                         len(keep), m, route)
            sol = _generalized(G, B, keep, n=n, route=route)
            if scratch:  # the certificate's array serves the first factorisation of H
                object.__setattr__(sol, "_scratch", scratch[0])
            return sol
    T, route = _whitening(B, rtol=rtol, argument=argument)
    return InputSolution(T=T, H=_sym(T.T @ _sym(G) @ T), n=int(n), whitening_route=route)


def _generalized(G: np.ndarray, B: np.ndarray, keep: np.ndarray, *, n: int,
                 route: str) -> InputSolution:
    """The generalized form on the (sorted) columns ``keep`` of the symmetric ``B``:
    ``T = E_keep``, ``H = sym(G)_kk``, ``metric = B_kk`` (every column: no selecting
    copies; the selection symmetrised in place)."""
    m = B.shape[0]
    T = np.zeros((m, len(keep)))
    T[keep, np.arange(len(keep))] = 1.0
    if len(keep) == m:
        H, metric = _sym(G), B
    else:
        H, metric = _sym_inplace(_principal(G, keep)), _principal(B, keep)
    return InputSolution(T=T, H=H, n=int(n), metric=metric, support=keep,
                         whitening_route=route)


def solve_input_exact(K: np.ndarray, *, n: int, argument: str = "input_kernel") -> InputSolution:
    """Exact input side (``R_X = I``): ``H = K_X``, input features ``k_X(X, x)``."""
    _check_finite_sum(K, what="the Gram matrix K_X", argument=argument)
    return InputSolution(T=None, H=np.asarray(K, dtype=np.float64), n=int(n),
                         whitening_route="exact")


def input_basis(sol: InputSolution) -> np.ndarray | None:
    """The map from sketch coordinates to the input features the model uses.

    Eigen route: the eigenbasis of ``H``, ``T_X V`` (sketched) or ``V`` (exact input), so
    that every λ only rescales coordinates (``diag((Λ + nλ)^{-1})``). Cholesky route (exact
    input): ``None``, the features are ``k_X(X, x)`` themselves.
    """
    if sol.V is None:
        return None if sol.exact else sol.T
    if sol.support is not None:  # T = E_keep: the rows keep of V placed, no 2 m r² product
        P = np.zeros((sol.T.shape[0], sol.V.shape[1]))
        P[sol.support] = sol.V
        return P
    return sol.V if sol.exact else sol.T @ sol.V


def sisokr_operator(sol: InputSolution, T_Y: np.ndarray | None, M: np.ndarray | None,
                    D: np.ndarray | None = None) -> np.ndarray | None:
    """``R`` (r_X × r_Y) with ``W(λ)ᵀ = (H + nλI)^{-1} R`` in the input features of
    :func:`input_basis`, see :func:`sisokr_coef`.

    In the coordinates ``φ_X(x) = T_Xᵀ R_X k_X(X, x)`` (``k_X(X, x)`` for an exact input):

    - sketched input, sketched output: ``R = T_Xᵀ Mᵀ T_Y`` (``M = DᵀC``);
    - sketched input, exact output (``T_Y=None``): pass ``M = C = K_X R_Xᵀ`` (n × m_X);
      ``R = T_Xᵀ Cᵀ`` acts on the output features ``k_Y(Y, y)`` directly, because
      ``k_Y(y, Y) K_Y^† K_Y = k_Y(y, Y)``;
    - exact input, sketched output: pass ``D = K_Y R_Yᵀ`` (n × m_Y); ``R = D T_Y``;
    - exact input, exact output: ``R = I_n`` (returned as ``None`` on the Cholesky route).

    On the eigen route the result is ``Vᵀ R``, in the eigenbasis of ``H``.
    """
    if sol.exact:
        R = None if T_Y is None else np.asarray(D, dtype=np.float64) @ T_Y
    else:
        M = np.asarray(M, dtype=np.float64)
        # (r_Y or n) × r_X; the generalized form's T selects columns
        MT = M[:, sol.support] if sol.support is not None else M @ sol.T
        R = (MT if T_Y is None else T_Y.T @ MT).T
    if sol.V is None:
        return R
    return sol.V.T.copy() if R is None else sol.V.T @ R


def sisokr_coef(sol: InputSolution, R: np.ndarray | None, lam: float) -> np.ndarray:
    """``W(λ)`` of shape (r_Y, r_X), ``R`` from :func:`sisokr_operator`.

    Eigen route: ``W(λ) = (diag((Λ + nλ)^{-1}) R)ᵀ``, O(r_X r_Y) per λ. Cholesky route:
    ``W(λ) = ((K_X + nλI)^{-1} R)ᵀ``, i.e. ``(D T_Y)ᵀ (K_X + nλI)^{-1}`` with a sketched
    output side and IOKR's ``(K_X + nλI)^{-1}`` when both sides are exact. Both equal
    Prop. 1's ``(T_Yᵀ M T_X)(H + nλI)^{-1}`` in their feature coordinates.
    """
    if sol.V is not None:
        return (R / (sol.evals + sol.n * float(lam))[:, None]).T
    return sol.inverse(lam) if R is None else sol.solve(R, lam).T


def krr_coef(sol: InputSolution, b: np.ndarray, lam: float) -> np.ndarray:
    """Coefficients of ``f(x) = (R_X k_X(X, x))ᵀ β(λ)``, shape (m_X, t).

    Sketched input: ``β(λ) = T_X (H + nλI)^{-1} T_Xᵀ b`` with ``b = R_X K_X Y``
    (Chen & Yang eq. 3); in the generalized form ``β(λ) = E_keep (G_kk + nλ B_kk)^{-1} b_keep``.
    Exact input: ``β(λ) = (K_X + nλI)^{-1} Y``; pass ``b = Y``.
    """
    b = np.asarray(b, dtype=np.float64)
    basis = input_basis(sol)
    if sol.V is not None:
        return basis @ ((basis.T @ b) / (sol.evals + sol.n * float(lam))[:, None])
    if sol.exact:  # Cholesky route
        return sol.solve(b, lam)
    if sol.support is not None:  # T = E_keep: select and scatter
        beta = np.zeros((sol.T.shape[0],) + b.shape[1:])
        beta[sol.support] = sol.solve(b[sol.support], lam)
        return beta
    return sol.T @ sol.solve(sol.T.T @ b, lam)


# --------------------------------------------------------------------------- assembly
# What each model needs from the pass (names of distsketch.accumulate.SUM_TERMS) and how it is
# assembled from those sums. ``x_exact`` / ``y_exact``: the side's sketch is the identity.


def sisokr_sums(*, x_exact: bool, y_exact: bool, linear_output: bool) -> tuple[str, ...]:
    """Sums of the SISOKR family: ``G, B`` (sketched input) or ``C`` (exact input, ``H = K_X``);
    ``M, E`` (sketched output; ``D, E`` with an exact input, which takes ``D`` itself) or ``C``
    (exact output: ``k_Y(y, Y) K_Y^† K_Y = k_Y(y, Y)``, so the model needs ``C``); ``U``
    (unique training outputs, the default candidates) unless the output kernel is linear."""
    sums = ["C"] if x_exact else ["G", "B"]
    if y_exact:
        if "C" not in sums:
            sums.append("C")
    else:
        sums += ["D", "E"] if x_exact else ["M", "E"]
    if not linear_output:
        sums.append("U")
    return tuple(sums)


def krr_sums(*, x_exact: bool) -> tuple[str, ...]:
    """Sums of sketched KRR: ``G, B, b`` (sketched), or ``C, Y`` (exact: ``(K + nλI)^{-1} Y``)."""
    return ("C", "Y") if x_exact else ("G", "B", "b")


def feature_sums(*, x_exact: bool) -> tuple[str, ...]:
    """Sums of the whitened features: ``B = R K Rᵀ`` alone (``C = K`` when exact)."""
    return ("C",) if x_exact else ("B",)


def solve_input_side(sums: dict, *, exact: bool, n: int, rtol: float, n_lams: int,
                     argument: str = "input_kernel", eigen: bool = False,
                     tuning=None) -> InputSolution:
    """The λ-independent input solution from the pass's sums.

    Exact: ``H + nλI`` factored per λ unless the λ path is longer than
    :data:`EIGEN_PATH_LENGTH`. Sketched: the generalized form where ``B`` is certified (else
    the whitened ``H``), factored per λ behind the safety test, unless the path is long
    enough that one eigendecomposition pays off (:func:`eigen_pays`); this module's notes
    explain both. ``eigen``: the eigen route whatever the path (callers that need the
    eigenbasis). ``tuning``: the fit's ``options.tuning`` (its ``eigen_crossover``; None: the
    defaults).
    """
    if exact:  # H = K_X = C itself
        sol = solve_input_exact(sums["C"], n=n, argument=argument)
        return sol.with_eigen() if eigen or n_lams > EIGEN_PATH_LENGTH else sol
    sol = solve_input(sums["G"], sums["B"], n=n, rtol=rtol, argument=argument)
    pays = eigen_pays(n_lams, sol.H.shape[0], tuning=tuning)
    return sol.with_eigen() if eigen or pays else sol


@dataclass(frozen=True)
class SisokrSolution:
    """Everything λ-independent of a SISOKR-family model (``W(λ)`` from :func:`sisokr_coef`).

    Attributes
    ----------
    input : InputSolution
    input_projection : ndarray of shape (s'_X, r_X) or None
        ``R_Xmixᵀ (T_X V)`` (sketched), ``V`` (exact input, eigen route) or None (exact input,
        Cholesky route: the features are ``k_X(X, x)`` themselves).
    output_whitening : ndarray of shape (m_Y, r_Y) or None
        ``T_Y``; None for an exact output side.
    output_projection : ndarray of shape (s'_Y, r_Y) or None
        ``R_Ymixᵀ T_Y``; None for an exact output side (features ``k_Y(Y, y)``).
    operator : ndarray or None
        See :func:`sisokr_operator`.
    output_map : ndarray of shape (r_Y, d_Y) or None
        Linear output kernel: ``h(x) = output_mapᵀ W φ_X(x)`` (``ψ(y) = y``).
    """

    input: InputSolution
    input_projection: np.ndarray | None
    output_whitening: np.ndarray | None
    output_projection: np.ndarray | None
    operator: np.ndarray | None
    output_map: np.ndarray | None = None


def solve_sisokr(sums: dict, x_sketch, y_sketch, y_landmarks, *, n: int, rtol: float,
                 n_lams: int, linear_output: bool, eigen: bool = False,
                 threads=None, tuning=None) -> SisokrSolution:
    """Assemble a SISOKR-family model (docs/design.md, "Driver solve") from the pass's sums.

    ``x_sketch``, ``y_sketch``: the realised sketches (``transpose_dot`` maps sketch
    coordinates to landmark columns); ``y_landmarks``: the output landmarks (a linear output
    kernel's ``output_map`` is ``(R_Ymixᵀ T_Y)ᵀ Y_J``). ``eigen``: the input side's eigen
    route whatever the λ path (:func:`solve_input_side`). ``threads``: a function of a
    factorisation's order giving the BLAS-thread context it runs in (the estimators pass
    :func:`distsketch.options.driver_threads`); the output side's whitening, of order
    ``m_Y``, takes its own instead of the input side's. ``tuning``: the fit's
    ``options.tuning`` (:func:`solve_input_side`; None: the defaults).
    """
    if threads is None:
        def threads(size: int):
            return contextlib.nullcontext()
    sol = solve_input_side(sums, exact=x_sketch.is_identity, n=n, rtol=rtol, n_lams=n_lams,
                           eigen=eigen, tuning=tuning)
    # input features: (T_X V)ᵀ R_X k_X(X, x) in the eigenbasis of H, T_Xᵀ R_X k_X(X, x) on
    # the Cholesky route ((R_X k_X(X, x))_keep in the generalized form), or k_X(X, x) itself
    # (exact input side, Cholesky route)
    basis = input_basis(sol)
    input_projection = None if basis is None else x_sketch.transpose_dot(basis)
    if y_sketch.is_identity:  # exact output: raw features k_Y(Y, y)
        T_Y = output_projection = None
        operator = sisokr_operator(sol, None, sums.get("C"))
    else:
        with threads(sums["E"].shape[0]):
            T_Y = whitening(sums["E"], rtol=rtol, argument="output_kernel")
        operator = sisokr_operator(sol, T_Y, sums.get("M"), sums.get("D"))
        output_projection = y_sketch.transpose_dot(T_Y)
    output_map = None
    if linear_output:
        L_Y = dense(y_landmarks)
        output_map = L_Y if output_projection is None else output_projection.T @ L_Y
    return SisokrSolution(sol, input_projection, T_Y, output_projection, operator, output_map)


def solve_krr(sums: dict, x_sketch, *, n: int, rtol: float, n_lams: int, tuning=None
              ) -> tuple[InputSolution, np.ndarray]:
    """Sketched KRR's input solution and right-hand side: ``b = R_X K_X Y`` (sketched) or
    ``Y`` itself (exact), for :func:`krr_coef`; ``tuning``: the fit's ``options.tuning``
    (:func:`solve_input_side`; None: the defaults)."""
    sol = solve_input_side(sums, exact=x_sketch.is_identity, n=n, rtol=rtol, n_lams=n_lams,
                           argument="kernel", tuning=tuning)
    return sol, (sums["Y"] if "Y" in sums else sums["b"])


def solve_features(sums: dict, x_sketch, *, rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """Whitened features ``φ(x) = T_Xᵀ R_X k(X, x)``: ``(T_X, R_Xmixᵀ T_X)``.

    ``T_X`` whitens ``B = R_X K R_Xᵀ`` (``K`` itself for an exact side), so the Gram matrix of
    the features on the training rows is ``K R_Xᵀ B^† R_X K``, the sketched kernel.
    """
    B = sums["C"] if x_sketch.is_identity else sums["B"]
    T = whitening(B, rtol=rtol, argument="kernel")  # refuses non-finite sums, naming the kernel
    return T, x_sketch.transpose_dot(T)


# --------------------------------------------------------------------------- reduced rank


def prediction_covariance(sol: InputSolution, W: np.ndarray) -> np.ndarray:
    """``Σ_i g(x_i) g(x_i)ᵀ`` (r_Y × r_Y): n times the uncentred covariance of the training
    predictions' output coordinates ``g(x) = W φ_X(x)`` (Brogat-Motte et al., JMLR 2022).

    ``W F Wᵀ`` with ``F = Σ_i φ_X(x_i) φ_X(x_i)ᵀ`` the Gram of the input features over the
    training rows: ``F = H = T_Xᵀ G T_X`` (sketched input; ``diag(Λ)`` in the eigenbasis, so
    ``W H Wᵀ = Ã diag(Λ/(Λ + nλ)²) Ãᵀ``) or ``F = K_X²`` (exact input, features
    ``k_X(X, x)``; ``diag(Λ²)`` in the eigenbasis).
    """
    W = np.asarray(W, dtype=np.float64)
    if sol.V is not None:
        f = sol.evals * sol.evals if sol.exact else sol.evals
        return _sym((W * f) @ W.T)
    if sol.exact:  # Cholesky route: F = K_X²
        WK = W @ sol.H
        return _sym(WK @ WK.T)
    return _sym(W @ sol.H @ W.T)


def principal_directions(S: np.ndarray, metric: np.ndarray | None = None, *,
                         rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Principal directions of a covariance ``S`` of output coordinates, in H_Y.

    The coordinates ``g`` stand for ``Σ_j g_j e_j`` with ``⟨e_j, e_k⟩ = metric_jk``
    (``None``: orthonormal, a whitened sketched output side; ``K_Y`` for an exact one).
    Returns ``(A, μ)``: ``A`` (r_Y × q) whose columns are the eigenvectors of the covariance
    operator, orthonormal in H_Y (``Aᵀ metric A = I``), in descending order of ``μ`` (q ≤ r_Y:
    the retained dimension of the metric). The rank-p projection of ``g`` is
    ``A_p A_pᵀ metric g``.
    """
    if metric is None:
        mu, Q = np.linalg.eigh(_sym(S))
        return Q[:, ::-1].copy(), mu[::-1].copy()
    s, U = np.linalg.eigh(_sym(metric))
    keep = s > rtol * max(s[-1], 0.0)
    U, r = U[:, keep], np.sqrt(s[keep])
    Z = (U.T @ S @ U) * r[:, None] * r[None, :]  # the covariance in orthonormal coordinates
    mu, V = np.linalg.eigh(_sym(Z))
    return (U / r) @ V[:, ::-1], mu[::-1].copy()


def factored_directions(sol: InputSolution, Q: np.ndarray, lam: float, *,
                        rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """:func:`principal_directions` for a sketched input side and an exact output side
    without any n × n object.

    There ``W(λ) = Rᵀ N`` (n × r_X: ``R`` the operator, r_X × n; ``N = (H + nλ·metric)^{-1}``,
    r_X × r_X, see :func:`sisokr_coef`) and ``S = W F Wᵀ = Φ Φᵀ`` with ``Φ = Rᵀ N L``,
    ``F = L Lᵀ`` (``F = H``; ``diag(Λ)`` on the eigen route). In the metric ``Γ = K_Y`` the
    eigenpairs of the covariance operator with ``μ > 0`` come from an r_X × r_X problem::

        Φᵀ Γ Φ = (N L)ᵀ Q (N L) = V diag(μ) Vᵀ,     Q = R K_Y Rᵀ   (λ-free, r_X × r_X)
        A = Φ V diag(μ)^{-1/2} = Rᵀ E,              E = N L V diag(μ)^{-1/2}

    so that ``Aᵀ Γ A = I`` and ``S Γ A = A diag(μ)``: the columns of ``A`` are those of
    :func:`principal_directions` (up to signs within equal ``μ``), restricted to ``μ`` above
    ``rtol · μ_max`` — the span of the predictions, so a rank past it is the full model.
    Cost: ``O(r_X³)`` here, ``Q`` once per fit (``2n²r_X`` flops from row blocks of
    ``K_Y``), against ``O(n³)`` for the metric's eigendecomposition.

    Returns ``(E, μ)``: ``E`` (r_X × q) by descending ``μ`` (q,).
    """
    if sol.V is not None:
        f = np.maximum(sol.evals, 0.0)
        g = np.sqrt(f) / (f + sol.n * float(lam))  # N L = diag(√Λ / (Λ + nλ))
        Z = Q * g[:, None] * g[None, :]

        def apply(V):  # N L V, N L diagonal
            return g[:, None] * V
    else:
        s, U = np.linalg.eigh(_sym(sol.H))
        NL = sol.solve(U * np.sqrt(np.maximum(s, 0.0)), lam)
        Z = NL.T @ Q @ NL

        def apply(V):
            return NL @ V
    mu, V = np.linalg.eigh(_sym(Z))
    mu, V = mu[::-1], V[:, ::-1]
    keep = mu > rtol * max(float(mu[0]), 0.0) if len(mu) else np.zeros(0, bool)
    mu = mu[keep]
    return apply(V[:, keep]) / np.sqrt(mu), mu.copy()


def check_rank(rank: Any, *, argument: str = "rank") -> tuple[int, ...]:
    """``None`` (full rank), a positive int or a sequence of them; returns the ranks."""
    if rank is None:
        return ()
    values = rank if isinstance(rank, (Sequence, np.ndarray)) and not isinstance(rank, str) \
        else [rank]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{argument}: the rank of the reduced-rank estimator must be None "
                             f"or a positive integer (or a sequence of them), got {rank!r}")
        out.append(int(v))
    if not out:
        raise ValueError(f"{argument}: empty sequence; give at least one rank, or None")
    return tuple(out)


# --------------------------------------------------------------------------- shifted solves


class BandReduction:
    """``A = Q Bd Qᵀ`` with ``Bd`` symmetric banded (bandwidth ``band``) and ``Q`` orthogonal:
    one factorisation serving ``(A + cI)^{-1} X`` for many shifts ``c``.

    Householder band reduction (the first stage of LAPACK's two-stage ``syevd_2stage``;
    Bischof, Lang & Sun, "A framework for symmetric band reduction", ACM TOMS 26, 2000):
    panel ``j`` of ``band`` columns is reduced by a QR factorisation (``geqrt``, compact WY
    ``Q_j = I − V T Vᵀ``) of its rows below the band, and the trailing matrix is updated from
    both sides, ``A₂₂ ← Q_jᵀ A₂₂ Q_j = A₂₂ − V Wᵀ − W Vᵀ`` with ``W = X − ½ V Tᵀ Vᵀ X``,
    ``X = A₂₂ V T`` (BLAS ``symm`` and ``syr2k`` on the lower triangle). All of it is
    matrix–matrix work, ``4r³/3`` flops, against about ``9 r³`` for an eigendecomposition
    with vectors, a third of them memory-bound matrix–vector products (measured with one BLAS
    thread, r = 2247: 0.8 s against 2.5–3 s); a shift then costs a banded Cholesky
    factorisation, ``O(r · band²)``, and its solve ``O(r · band)`` per right-hand side. Backward stable (orthogonal transformations only), so
    ``(A + cI)^{-1} X`` is as accurate as from an eigendecomposition or a dense Cholesky
    factor. Unlike the eigen route nothing is clipped: a shift that leaves ``A + cI``
    numerically indefinite is reported (``solve`` returns None).

    Parameters
    ----------
    A : ndarray of shape (r, r)
        Symmetric (the lower triangle is used after symmetrisation).
    band : int
        Bandwidth of ``Bd`` (the panel width).
    """

    def __init__(self, A: np.ndarray, *, band: int = 64):
        from scipy.linalg.blas import dsymm, dsyr2k
        from scipy.linalg.lapack import dgeqrt

        A = _sym(A)
        r = A.shape[0]
        b = max(1, min(int(band), max(r - 1, 1)))
        self.band, self.r = b, r
        self._reflectors: list[tuple[int, np.ndarray, np.ndarray]] = []
        dense = np.zeros((r, r))
        S = np.asfortranarray(A)  # the trailing matrix, lower triangle valid
        j = 0
        while r - (j + b) >= 2:  # more than one row below the band
            s = j + b
            k = min(b, r - s)
            dense[j:s, j:s] = S[:b, :b]
            qr, t, info = dgeqrt(k, S[b:, :b])
            if info != 0:  # pragma: no cover - geqrt fails only on invalid arguments
                raise ValueError(f"band reduction: LAPACK geqrt info {info}")
            V = np.tril(qr[:, :k], -1)
            V[np.arange(k), np.arange(k)] = 1.0
            T = np.triu(t[:k, :k])
            dense[s:s + k, j:s] = np.triu(qr[:k, :])
            S = np.asfortranarray(S[b:, b:])
            X = dsymm(1.0, S, V @ T, side=0, lower=1)
            Wm = X - 0.5 * (V @ (T.T @ (V.T @ X)))
            S = dsyr2k(-1.0, V, Wm, beta=1.0, c=S, lower=1, overwrite_c=1)
            self._reflectors.append((s, V, T))
            j = s
        dense[j:, j:] = S
        A = np.tril(dense)
        A = A + np.tril(A, -1).T
        self.dense = _sym(A)  # exactly banded: entries beyond the band are zeros
        ab = np.zeros((b + 1, r))
        for d in range(b + 1):
            ab[d, :r - d] = np.diagonal(self.dense, -d)
        self._ab = ab  # LAPACK lower band storage: ab[d, j] = Bd[j + d, j]

    def qt_dot(self, X: np.ndarray) -> np.ndarray:
        """``Qᵀ X`` (a new array)."""
        X = np.array(X, dtype=np.float64)
        for s, V, T in self._reflectors:
            X[s:] -= V @ (T.T @ (V.T @ X[s:]))
        return X

    def q_dot(self, X: np.ndarray) -> np.ndarray:
        """``Q X`` (a new array)."""
        X = np.array(X, dtype=np.float64)
        for s, V, T in reversed(self._reflectors):
            X[s:] -= V @ (T @ (V.T @ X[s:]))
        return X

    def band_dot(self, X: np.ndarray) -> np.ndarray:
        """``Bd X`` from the band alone (block rows of ``band``: O(r · band · k) flops)."""
        X = np.asarray(X, dtype=np.float64)
        out = np.empty((self.r,) + X.shape[1:])
        b, r = self.band, self.r
        for i in range(0, r, b):
            lo, hi = max(0, i - b), min(r, i + 2 * b)
            out[i:i + b] = self.dense[i:i + b, lo:hi] @ X[lo:hi]
        return out

    def solve(self, X: np.ndarray, shift: float) -> np.ndarray | None:
        """``(Bd + shift·I)^{-1} X`` by a banded Cholesky factorisation (LAPACK ``pbtrf``,
        ``pbtrs``); None when ``Bd + shift·I`` is not numerically positive definite."""
        from scipy.linalg.lapack import dpbtrf, dpbtrs

        ab = self._ab.copy()
        ab[0] += float(shift)
        c, info = dpbtrf(ab, lower=1, overwrite_ab=1)
        if info != 0:
            return None
        x, info = dpbtrs(c, np.asarray(X, dtype=np.float64), lower=1)
        if info != 0:  # pragma: no cover - the factor exists
            return None
        return x


class EigenShifted:
    """The interface of :class:`BandReduction` from an eigendecomposition ``A = U diag(h) Uᵀ``
    (eigenvalues clipped at 0, as every sketched input side is solved): the fallback where a
    shift leaves the banded factor numerically indefinite."""

    def __init__(self, A: np.ndarray):
        h, self._U = np.linalg.eigh(_sym(A))
        self._h = np.clip(h, 0.0, None)
        self.r = len(h)

    def qt_dot(self, X: np.ndarray) -> np.ndarray:
        return self._U.T @ X

    def q_dot(self, X: np.ndarray) -> np.ndarray:
        return self._U @ X

    def band_dot(self, X: np.ndarray) -> np.ndarray:
        return self._h[:, None] * X

    def solve(self, X: np.ndarray, shift: float) -> np.ndarray:
        return X / (self._h + float(shift))[:, None]
