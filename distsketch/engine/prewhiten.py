"""Pre-whitening: a landmark sketch whitened on the driver before the pass.

For a realised sketch ``R = R_mix R_sub`` with a small support ``J`` (s' rows), the
sketched Gram matrix of the landmarks alone, ``B0 = R K Rᵀ = R_mix K_JJ R_mixᵀ`` (m × m),
is known before the pass. :func:`prewhitened` computes it in float64, its whitening ``T``
(``Tᵀ B0 T = I_r``, :func:`distsketch.linalg.solve.whitening`) and returns
``R' = Tᵀ R`` (:class:`~distsketch.sketches.whitened.WhitenedSketch`): the pass then sums
``(C T)ᵀ(C T)`` over whitened blocks instead of ``CᵀC`` whitened afterwards (docs/design/math.md,
"Pre-whitening"; ``EngineOptions.prewhiten``). :func:`prewhitens` is the rule that decides
where it applies.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..kernels.sparse import tuned
from ..linalg.solve import sym, whitening
from ..sketches.base import RealizedSketch
from ..sketches.whitened import WhitenedSketch

__all__ = ["PREWHITEN_SUPPORT", "PREWHITEN_COND", "prewhitens", "landmark_gram", "prewhitened"]

logger = logging.getLogger(__name__)

#: ``EngineOptions(prewhiten=None)`` pre-whitens a sketch whose support has at most this many
#: rows per sketch row (``s' <= 2m``): sub-sampling and leverage scores (``s' = m``),
#: accumulation with ``q <= 2`` (``s' <= qm``). The driver then holds ``K_JJ`` (s' × s', at
#: most 4 times the m × m matrices it holds anyway), and the pass's extra product
#: ``k(X_I, X_J) · R_mixᵀ T`` costs ``2·n·s'·r <= 4·n·m²`` flops (sub-sampling: ``2·n·m·r``,
#: twice the sum ``C'ᵀC'``; measured in benchmarks/ENGINE.md, "casp_parity"). Sketches whose
#: support is most rows (Gaussian, CountSketch, dense p-sparsified) would need a kernel matrix
#: of the size of the data on the driver.
PREWHITEN_SUPPORT = 2

#: ``EngineOptions(prewhiten=None)`` whitens only where ``B0 = R K Rᵀ`` is ill-conditioned:
#: its condition number (LAPACK's 1-norm estimate from a Cholesky factor) above this. Below
#: it, the previous order (``CᵀC`` whitened on the driver) loses little: the blocks' rounding
#: (float32: 6e-8 relative) is amplified by at most ``sqrt(cond) = 1e3`` along ``K_JJ``'s
#: small directions, and the pass saves the product by ``T`` (2.4–2.9 times as fast at
#: d = 20, m = 1000, cond ≈ 1e5: benchmarks/ENGINE.md, "compare"). CASP's ``K_JJ`` (cond
#: ≈ 6e11 at m = 1000), where the order costs up to +1 % of test RMSE, is whitened.
PREWHITEN_COND = 1e6


def prewhitens(sketch: RealizedSketch | None, setting: bool | None) -> bool:
    """Whether a side's realised sketch is pre-whitened under ``EngineOptions.prewhiten``.

    Never the identity (an exact side), never a sketch whose support is all ``n`` rows;
    ``None``: a support of at most :data:`PREWHITEN_SUPPORT` ``× m`` rows; ``True``: any
    smaller support; ``False``: never.

    Parameters
    ----------
    sketch : RealizedSketch or None
        None: a side without a sketch (vector targets).
    setting : bool or None

    Returns
    -------
    bool
    """
    if sketch is None or setting is False or sketch.is_identity:
        return False
    if isinstance(sketch, WhitenedSketch) or sketch.support_size >= sketch.n:
        return False
    return setting is True or sketch.support_size <= PREWHITEN_SUPPORT * sketch.m


def landmark_gram(sketch: RealizedSketch, kernel: Any, landmarks: Any, *,
                  tuning: Any = None) -> np.ndarray:
    """``B0 = R_mix k(X_J, X_J) R_mixᵀ`` (m × m, float64): ``R K Rᵀ`` from the landmarks alone.

    Parameters
    ----------
    sketch : RealizedSketch
    kernel : Kernel
    landmarks : ndarray or scipy.sparse of shape (s', d)
        The support rows ``X_J``.
    tuning : Tuning or None
        The fit's ``EngineOptions.tuning`` (the kernel products' density rule).

    Returns
    -------
    ndarray of shape (m, m)
    """
    with tuned(tuning):
        K = sym(np.asarray(kernel(landmarks, landmarks), dtype=np.float64))
    if sketch.scale is not None:  # R_mix = diag(scale)
        s = np.asarray(sketch.scale, dtype=np.float64)
        return (K * s[:, None]) * s[None, :]
    M = sketch.mixing  # (m, s'), scipy.sparse or dense
    MK = np.asarray(M @ K)  # (m, s')
    return np.asarray(M @ MK.T)  # M (M K)ᵀ = M K Mᵀ (K symmetric)


def well_conditioned(B0: np.ndarray) -> bool:
    """Whether ``B0`` is positive definite with a condition number at most
    :data:`PREWHITEN_COND` (Cholesky, then LAPACK's ``dpocon`` 1-norm estimate)."""
    from scipy.linalg.lapack import dpocon, dpotrf

    L, info = dpotrf(B0, lower=1, clean=0)
    if info != 0:
        return False
    rcond, info = dpocon(L, np.abs(B0).sum(axis=0).max(), uplo="L")
    return info == 0 and rcond * PREWHITEN_COND >= 1.0


def prewhitened(sketch: RealizedSketch, kernel: Any, landmarks: Any, *, rtol: float,
                argument: str = "kernel", tuning: Any = None,
                always: bool = True) -> RealizedSketch:
    """``R' = Tᵀ R`` with ``T`` the whitening of :func:`landmark_gram` (``Tᵀ B0 T = I_r``,
    eigenvalues of ``B0`` above ``rtol`` times the largest kept); with ``always=False``
    (``prewhiten=None``), ``sketch`` itself where ``B0`` is :func:`well_conditioned`.

    Parameters
    ----------
    sketch : RealizedSketch
    kernel : Kernel
    landmarks : ndarray or scipy.sparse of shape (s', d)
    rtol : float
        ``EngineOptions.prewhiten_rtol``.
    argument : str
        The estimator argument of the side's kernel, which starts the error messages (a
        kernel that overflows, one with no positive eigenvalue on the landmarks).
    tuning : Tuning or None
    always : bool
        Whiten whatever ``B0``'s conditioning (``prewhiten=True``).

    Returns
    -------
    WhitenedSketch or RealizedSketch

    Raises
    ------
    ValueError
        ``B0`` holds NaN or infinity, or has no positive eigenvalue (naming ``argument``).
    """
    from threadpoolctl import threadpool_limits

    B0 = landmark_gram(sketch, kernel, landmarks, tuning=tuning)
    # one BLAS thread, whatever the machine's load: LAPACK's rounding depends on its thread
    # count, and T (recorded by its fingerprint) must come out the same when a fit resumes
    with threadpool_limits(limits=1, user_api="blas"):
        if not always and np.isfinite(B0).all() and well_conditioned(B0):
            logger.debug("%s: R K Rᵀ well conditioned, not pre-whitened", argument)
            return sketch
        T = whitening(B0, rtol=rtol, argument=argument)
    logger.debug("%s: pre-whitened sketch, %d of %d directions of R K Rᵀ kept (rtol %g)",
                 argument, T.shape[1], B0.shape[0], rtol)
    return WhitenedSketch(sketch, T, rtol=rtol)
