"""Driver solve, its block math: the whitening and the input side's λ-independent factors.

Glossary (docs/design/math.md)
------------------------------
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

Here: the whitening of a sketched side (:func:`whitening`), the columns of ``B`` certified for
the generalized form, and the input side's factors with their per-λ solves
(:class:`InputSolution`, :func:`solve_input`, :func:`solve_input_exact`). The closed forms of
each model and their assembly from the pass's sums are :mod:`distsketch.solvers.direct`'s, the
reduced rank :mod:`distsketch.solvers.reduced_rank`'s, solves for many shifts
:mod:`distsketch.linalg.shifted`'s. numpy and scipy only, no dask.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky
from scipy.linalg.lapack import dpocon, dpotri, dpstrf, dtrtri

from .blocks import distinct_rows

__all__ = ["sym", "whitening", "InputSolution", "solve_input", "solve_input_exact"]

logger = logging.getLogger(__name__)


_SYM_TILE = 256


def sym(A: np.ndarray) -> np.ndarray:
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
    :data:`_SYM_TILE` (each pair's mean written to both): the values of :func:`sym` without
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
    B = sym(B)
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
#   an eigendecomposition (docs/design/math.md, "Driver routes").
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
                evals, V = np.linalg.eigh(sym(self.H))
            else:  # metric = B_kk is certified positive definite
                from scipy.linalg import eigh

                evals, V = eigh(sym(self.H), sym(self.metric), check_finite=False)
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
    B = sym(B)
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
    return InputSolution(T=T, H=sym(T.T @ sym(G) @ T), n=int(n), whitening_route=route)


def _generalized(G: np.ndarray, B: np.ndarray, keep: np.ndarray, *, n: int,
                 route: str) -> InputSolution:
    """The generalized form on the (sorted) columns ``keep`` of the symmetric ``B``:
    ``T = E_keep``, ``H = sym(G)_kk``, ``metric = B_kk`` (every column: no selecting
    copies; the selection symmetrised in place)."""
    m = B.shape[0]
    T = np.zeros((m, len(keep)))
    T[keep, np.arange(len(keep))] = 1.0
    if len(keep) == m:
        H, metric = sym(G), B
    else:
        H, metric = _sym_inplace(_principal(G, keep)), _principal(B, keep)
    return InputSolution(T=T, H=H, n=int(n), metric=metric, support=keep,
                         whitening_route=route)


def solve_input_exact(K: np.ndarray, *, n: int, argument: str = "input_kernel") -> InputSolution:
    """Exact input side (``R_X = I``): ``H = K_X``, input features ``k_X(X, x)``."""
    _check_finite_sum(K, what="the Gram matrix K_X", argument=argument)
    return InputSolution(T=None, H=np.asarray(K, dtype=np.float64), n=int(n),
                         whitening_route="exact")
