"""Falkon's preconditioner for PCG, and the landmarks it is built from.

Landmarks (:func:`select_landmarks`): PCG solves in the distinct, numerically independent
landmarks — repeated rows merged exactly (equal rows, equal kernel columns: the same
functions, every prediction unchanged; a repeated landmark's coefficient on its first copy,
0 on the others), and where ``K_mm``'s factor shows a landmark within rounding of the span
of the others, a pivoted Cholesky factorisation keeps those above the rounding level
``u·m·max diag K_mm`` (as the direct route's pivoted stage) — so that ``K_mm`` is safely
positive definite: with a singular ``K_mm`` the preconditioner amplifies the rounding of its
null directions until CG diverges. The coefficients of the landmarks left out are 0.

Falkon's preconditioner is built from ``K_mm`` alone: ``T`` upper-triangular with
``TᵀT = K_mm + εI`` (a small jitter ε, raised until the Cholesky factorisation succeeds), ``A``
upper-triangular with ``AᵀA = T Tᵀ/m + λI``, and ``P = n^{-1/2} T^{-1} A^{-1}``, so that
``P Pᵀ = ((n/m) K_mm² + nλ K_mm)^{-1}`` up to ε: the inverse of ``H`` under the Nyström
approximation ``K_nmᵀ K_nm ≈ (n/m) K_mm²`` (:class:`Preconditioner`). ``K_mm`` is held on the
driver, or recomputed for each product when large (:class:`LandmarkGram`). The problem and its
glossary are :mod:`distsketch.solvers.pcg`'s, the iterations
:mod:`distsketch.solvers.conjugate_gradient`'s.
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp
from scipy.linalg import LinAlgError, cholesky, solve_triangular
from scipy.linalg.lapack import dpstrf

from ..linalg.blocks import distinct_rows
from ..options import driver_threads
from .devicefactor import device_algebra

__all__ = ["JITTER", "KMM_MEMORY", "Preconditioner", "LandmarkGram", "GRAM_BLOCK", "upper_gram",
           "factor_kmm", "distinct_landmarks", "select_landmarks"]

logger = logging.getLogger(__name__)

#: Jitter of the preconditioner's Cholesky factor: ``ε = JITTER · m · mean(diag K_mm)``, raised
#: 100-fold until the factorisation succeeds (Falkon's ``ε · M``).
JITTER = 1e-13
#: ``K_mm`` is held on the driver while it takes at most this many bytes (m ≤ 11 585), else
#: recomputed for each product (:class:`LandmarkGram`).
KMM_MEMORY = 2**30


# --------------------------------------------------------------------------- the preconditioner


class Preconditioner:
    """Falkon's ``P = n^{-1/2} T^{-1} A^{-1}`` for one λ (see the module's notes).

    Parameters
    ----------
    Kmm : ndarray (m, m) or LandmarkGram
        The landmarks' kernel matrix (float64, symmetric); only read when ``T`` is not given.
    lam : float
    n : int
    centre : bool
        Precondition the centred system of an unpenalised intercept,
        ``K_nmᵀ K_nm − s sᵀ/n + nλ K_mm`` (``s = K_nmᵀ 1``): its Nyström approximation is
        ``(n/m) K_mm (I − 11ᵀ/m) K_mm + nλ K_mm``, so ``AᵀA = T (I − 11ᵀ/m) Tᵀ/m + λI``.
        (The deflation ``s sᵀ/n`` removes the data term's direction of the constant function,
        which the uncentred preconditioner still counts.) Measured on 3000 Gaussian rows,
        m = 300, γ = 0.5, tol = 1e-9: 13 / 66 / 397 iterations at λ = 1e-2 / 1e-4 / 1e-6,
        against 16 / 81 / 543 with the uncentred ``A``.
    """

    def __init__(self, Kmm, lam: float, n: int, *, T: np.ndarray | None = None,
                 centre: bool = False):
        m = Kmm.m if isinstance(Kmm, LandmarkGram) else Kmm.shape[0]
        self.n, self.m = n, m
        self.T = factor_kmm(Kmm) if T is None else T
        M = upper_gram(self.T)  # T Tᵀ's upper triangle, factored in place below
        if centre:
            w = self.T.sum(axis=1) / np.sqrt(float(m))  # T 1 / √m
            for s in range(0, m, LandmarkGram.CHUNK):
                e = min(s + LandmarkGram.CHUNK, m)
                M[s:e, s:] -= np.outer(w[s:e], w[s:])
        M /= m
        M[np.diag_indices(m)] += lam
        self.A = cholesky(M, lower=False, overwrite_a=True, check_finite=False)
        self._root = np.sqrt(float(n))

    def apply(self, u: np.ndarray) -> np.ndarray:
        """``P u = n^{-1/2} T^{-1} A^{-1} u``."""
        v = solve_triangular(self.A, u, lower=False, check_finite=False)
        return solve_triangular(self.T, v, lower=False, check_finite=False) / self._root

    def apply_t(self, v: np.ndarray) -> np.ndarray:
        """``Pᵀ v = n^{-1/2} A^{-T} T^{-T} v``."""
        w = solve_triangular(self.T, v, lower=False, trans="T", check_finite=False)
        return solve_triangular(self.A, w, lower=False, trans="T", check_finite=False) / self._root

    def inverse(self, a: np.ndarray) -> np.ndarray:
        """``P^{-1} a = n^{1/2} A T a`` (a warm start's ``u``)."""
        return self._root * (self.A @ (self.T @ a))


class LandmarkGram:
    """``K_mm = k(X_J, X_J)`` of a landmark feature map ``FeatureMap(kernel, X_J, None)``, held
    (float64) while it takes at most :data:`KMM_MEMORY`, else recomputed in row chunks for
    each product (``m² `` kernel values per iteration, about m/n of a pass), so that the
    driver holds two m × m arrays (``T`` and ``A``), not three.

    ``on_device``: a :class:`~distsketch.solvers.devicefactor.DeviceAlgebra` (None: the host)
    that factors ``K_mm`` (:func:`factor_kmm`), builds the preconditioner and computes
    :meth:`dot` on the driver's device."""

    CHUNK = 1024

    def __init__(self, fmap, *, hold: bool | None = None, on_device=None):
        self.fmap = fmap
        self.on_device = on_device
        self.m = m = fmap.landmarks.shape[0]
        self.hold = m * m * 8 <= KMM_MEMORY if hold is None else bool(hold)
        self._K = None
        if self.hold:  # C order, symmetrised in place: no further m × m array
            K = np.empty((m, m))
            for s in range(0, m, self.CHUNK):
                K[s:s + self.CHUNK] = self._rows(s, min(s + self.CHUNK, m))
            self._K = symmetrize(K)

    def _rows(self, s: int, e: int) -> np.ndarray:
        return np.asarray(self.fmap.block(self.fmap.landmarks[s:e], dtype=np.float64))

    def _full(self) -> np.ndarray:
        K = np.empty((self.m, self.m), order="F")
        for s in range(0, self.m, self.CHUNK):
            K[s:s + self.CHUNK] = self._rows(s, min(s + self.CHUNK, self.m))
        return K

    def matrix(self) -> np.ndarray:
        """A fresh Fortran-ordered copy (the caller may factor it in place); of the held,
        exactly symmetric ``K_mm`` its transpose's bytes, copied as they lie."""
        return np.array(self._K.T, order="F") if self._K is not None else self._full()

    def dot(self, v: np.ndarray) -> np.ndarray:
        """``K_mm v``."""
        if self.on_device is not None:
            return self.on_device.dot(self, v)
        if self._K is not None:
            return self._K @ v
        out = np.empty((self.m, v.shape[1]))
        for s in range(0, self.m, self.CHUNK):
            e = min(s + self.CHUNK, self.m)
            out[s:e] = self._rows(s, e) @ v
        return out


def symmetrize(K: np.ndarray) -> np.ndarray:
    """``½(K + Kᵀ)`` of a square ``K`` in place, tile by tile (the same values as the
    expression: each entry is ``½(K_ij + K_ji)``, and floating-point addition commutes, so
    the result is exactly symmetric), without the two m × m temporaries of the expression —
    each a fresh allocation whose pages are faulted in (at m = 10 000, 800 MB and seconds
    each on the 2-core machine). Returns ``K``."""
    m = K.shape[0]
    step = LandmarkGram.CHUNK
    for i in range(0, m, step):
        i1 = min(i + step, m)
        for j in range(i, m, step):
            j1 = min(j + step, m)
            upper = K[i:i1, j:j1] + K[j:j1, i:i1].T
            upper *= 0.5
            K[i:i1, j:j1] = upper
            K[j:j1, i:i1] = upper.T
    return K


#: Rows per block of :func:`upper_gram` (blocks of GEMMs, each large enough for its rate).
GRAM_BLOCK = 1024


def upper_gram(T: np.ndarray) -> np.ndarray:
    """``T Tᵀ`` of an upper-triangular ``T`` (m × m) into a fresh Fortran-ordered array: its
    upper triangle (what an upper Cholesky factorisation reads; below it the diagonal blocks
    hold their mirror image and the rest is 0).

    Block ``(i, j)``, ``i ≤ j``, is ``T[i, j:] T[j, j:]ᵀ`` (the zeros left of the diagonal
    skipped): ``≈ m³/3`` flops in GEMMs of :data:`GRAM_BLOCK` rows, against ``2m³`` for the
    plain product. Measured at m = 4000 (2 cores): 0.40 s against 2.10 s for ``T @ T.T``,
    0.90 s for ``dsyrk`` and 2.15 s for LAPACK's ``dlauum`` (OpenBLAS).
    """
    m = T.shape[0]
    edges = list(range(0, m, GRAM_BLOCK)) + [m]
    out = np.zeros((m, m), order="F")
    for a in range(len(edges) - 1):
        i0, i1 = edges[a], edges[a + 1]
        for b in range(a, len(edges) - 1):
            j0, j1 = edges[b], edges[b + 1]
            out[i0:i1, j0:j1] = T[i0:i1, j0:] @ T[j0:j1, j0:].T
    return out


def factor_kmm(Kmm) -> np.ndarray:
    """``T`` upper-triangular with ``TᵀT = K_mm + εI``, ε the smallest of
    ``JITTER · m · mean(diag) · 100^k`` for which the factorisation succeeds (``Kmm``: an
    ndarray or a :class:`LandmarkGram`; factored in place of a fresh copy, or on the device
    of a gram's ``on_device``)."""
    device = getattr(Kmm, "on_device", None)
    if device is not None:
        eps = JITTER * Kmm.m * (float(np.mean(device.diag(Kmm))) or 1.0)
        for _ in range(8):
            T = device.factor(Kmm, eps)
            if T is not None:
                return T
            eps *= 100.0
        raise _not_psd(eps)
    fresh = Kmm.matrix if isinstance(Kmm, LandmarkGram) else (
        lambda: np.array(Kmm, dtype=np.float64, order="F"))
    K = fresh()
    m = K.shape[0]
    scale = float(np.mean(np.diag(K))) or 1.0
    eps = JITTER * m * scale
    for attempt in range(8):
        if attempt:
            K = fresh()
        K[np.diag_indices(m)] += eps
        try:
            return cholesky(K, lower=False, overwrite_a=True, check_finite=False)
        except LinAlgError:
            eps *= 100.0
    raise _not_psd(eps)


def _not_psd(eps: float) -> ValueError:
    return ValueError("kernel: the landmarks' kernel matrix K_mm is not positive semi-definite "
                      "(its Cholesky factorisation fails even with a jitter of "
                      f"{eps / 100:.3g}); check the kernel or use solver='direct'")


def distinct_landmarks(landmarks) -> tuple[np.ndarray, np.ndarray] | None:
    """``(first, inverse)`` of the landmark rows (dense or scipy.sparse, m × d) compared
    exactly (as :func:`~distsketch.linalg.blocks.distinct_rows`: ``first`` each distinct row's first
    position, ascending; ``inverse`` (m,) every row's index into ``first``), or None when no
    row repeats."""
    if sp.issparse(landmarks):  # canonical CSR rows (sorted, no explicit zeros) as bytes
        A = sp.csr_array(landmarks, dtype=np.float64, copy=True)
        A.sum_duplicates()
        A.eliminate_zeros()
        A.sort_indices()
        seen: dict = {}
        inverse = np.empty(A.shape[0], dtype=np.int64)
        for i in range(A.shape[0]):
            a, b = A.indptr[i], A.indptr[i + 1]
            key = (A.indices[a:b].astype(np.int64).tobytes(), (A.data[a:b] + 0.0).tobytes())
            inverse[i] = seen.setdefault(key, len(seen))
        first = np.unique(inverse, return_index=True)[1]
    else:
        first, inverse = distinct_rows(np.asarray(landmarks))
    return None if len(first) == landmarks.shape[0] else (first, inverse)


def select_landmarks(kernel, landmarks, *, chunk: int = 2048, what: str = "PCG", tuning=None,
                     backend=None):
    """The landmarks PCG solves in, their :class:`LandmarkGram` and its factor ``T``
    (:func:`factor_kmm`): ``(keep, Kmm, T)``, ``keep`` the positions in ``landmarks`` (m × d)
    of those solved in (ascending), or None for all of them.

    With repeated or numerically dependent landmarks ``K_mm`` is singular (to rounding) and
    ``H = K_nmᵀ K_nm + nλ K_mm`` with it: α is not unique, only the function
    ``f = k(·, X_J) α`` is, and the preconditioner, built from ``K_mm``, amplifies the rounding
    of its null directions until CG diverges. So PCG solves in a subset ``L_S`` spanning the
    same functions, and the caller maps α back with zeros elsewhere (``distsketch.solvers.pcg._expand``):

    1. repeated rows are merged exactly (:func:`distinct_landmarks`, as
       :class:`~distsketch.engine.features.FeatureMap` merges them): equal rows give equal columns
       of ``K_nm`` and ``K_mm``, so the function space, the minimiser ``f`` and every
       prediction are those of the full system; a repeated landmark's coefficient sits on
       its first copy;
    2. the distinct ones are factored, ``TᵀT = K_uu + ε₀ I`` (:func:`factor_kmm`'s first
       jitter); where that fails, or a pivot may show a landmark within rounding of the
       span of the earlier ones (``T_ii² ≤ 2ε₀ + u·m·max diag K_uu``, ``u`` the float64 unit
       roundoff: with the jitter on the earlier landmarks too, ``T_ii² = S_i + ε₀(1 + θ)``,
       ``0 ≤ θ ≤ 1``, ``S_i`` the unjittered Schur complement),
       a pivoted Cholesky factorisation (LAPACK ``pstrf`` at its default tolerance
       ``u·m·max diag``, as the direct route's pivoted stage, :mod:`distsketch.linalg.solve`)
       keeps the landmarks whose Schur complement is above the rounding level and drops the
       others: a dropped landmark's feature lies within ``√(u·m·max diag)`` of the kept ones'
       span (RKHS norm), so the function space changes by rounding only.

    Landmarks that are distinct and numerically independent are kept in full and factored as
    before (the same ``T``, the same iterations, bitwise). ``tuning``: the fit's
    ``options.tuning``, carried by the landmarks' feature map (its kernel products' density
    rule, in every sweep; None: the defaults). ``backend``: the fit's compute backend; a
    device backend factors on the driver's device from its threshold on
    (:func:`~distsketch.solvers.devicefactor.device_algebra`).
    """
    from ..engine.features import FeatureMap

    m = landmarks.shape[0]
    merged = distinct_landmarks(landmarks)
    keep = None if merged is None else merged[0]
    sub = landmarks if keep is None else landmarks[keep]
    Kmm = LandmarkGram(FeatureMap(kernel, sub, None, chunk, tuning),
                       on_device=device_algebra(backend, sub.shape[0], tuning))
    with driver_threads(Kmm.m):  # the driver's factorisation on idle cores
        T, dependent = _factor_checked(Kmm)
        if dependent:
            K = Kmm.matrix()
            c, piv, rank, info = dpstrf(K, lower=0)
            if info < 0 or rank < 1:
                raise ValueError("kernel: the landmarks' kernel matrix K_mm is not positive "
                                 "semi-definite; check the kernel or use solver='direct'")
            if rank < Kmm.m:
                kept = np.sort(np.asarray(piv[:rank], dtype=np.int64) - 1)
                keep = kept if keep is None else keep[kept]
                Kmm = LandmarkGram(FeatureMap(kernel, landmarks[keep], None, chunk, tuning),
                                   on_device=device_algebra(backend, len(keep), tuning))
            T = factor_kmm(Kmm)
    if keep is not None:
        logger.info("%s: %d landmarks, %d distinct, %d numerically independent: PCG solves in "
                    "those (the others' coefficients 0, a repeated landmark's on its first "
                    "copy)", what, m, m if merged is None else len(merged[0]), len(keep))
    return keep, Kmm, T


def _factor_checked(Kmm) -> tuple[np.ndarray | None, bool]:
    """``(T, dependent)``: :func:`factor_kmm`'s factor with its first jitter ``ε₀`` and
    whether a landmark may be numerically dependent on the earlier ones (the factorisation
    fails, or a pivot ``T_ii² ≤ 2ε₀ + u·m·max diag K_mm``); ``T`` None when so."""
    device = Kmm.on_device
    if device is not None:
        diag, m = device.diag(Kmm), Kmm.m
        eps = JITTER * m * (float(np.mean(diag)) or 1.0)
        T = device.factor(Kmm, eps)
        if T is None:
            return None, True
    else:
        K = Kmm.matrix()
        m = K.shape[0]
        diag = np.diag(K).copy()
        eps = JITTER * m * (float(np.mean(diag)) or 1.0)
        K[np.diag_indices(m)] += eps
        try:
            T = cholesky(K, lower=False, overwrite_a=True, check_finite=False)
        except LinAlgError:
            return None, True
    # a landmark j with Schur complement S_j (unjittered) has the pivot
    # T_jj² = S_j + ε₀ (1 + θ), 0 ≤ θ ≤ 1 (ε₀ on the earlier landmarks too): 2ε₀ + u·m·max diag
    # bounds the pivots of landmarks within rounding of the earlier ones' span
    floor = 2.0 * eps + np.finfo(np.float64).eps * m * float(diag.max())
    if np.min(np.diag(T) ** 2) <= floor:
        return None, True
    return T, False
