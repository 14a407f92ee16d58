"""Sparse operands of the kernel products: the density rule and the column-panel route.

A sparse operand of a built-in kernel stays sparse while its density is at most
``Tuning.sparse_max_density`` (denser blocks are cheaper as dense GEMMs: :func:`_keep_sparse`),
and a sparse block of another backend (a device CSR) while it is at most
``Tuning.device_sparse_max_density`` or its backend's threshold (:func:`cheaper_form`); a fit's
``EngineOptions.tuning`` applies through :func:`tuned`. A sparse left operand then multiplies
dense transposed column panels of the right one (:func:`sparse_panels`), never a dense copy of
the whole right operand. :data:`Block` is what a row block may be.

Block math: numpy and scipy only (no dask), run inside a task or on the driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Union

import numpy as np
import scipy.sparse as sp

from ..backends.base import Backend, dense
from ..tuning import Tuning

__all__ = ["Block", "cheaper_form", "sparse_panels", "tuned"]

Block = Union[np.ndarray, sp.spmatrix, sp.sparray]

#: The density rule of sparse operands and the panels of the sparse route come from a
#: :class:`~distsketch.Tuning` (``sparse_max_density``, ``device_sparse_max_density``,
#: ``sparse_panel_bytes``: their measured basis is documented there), set for the block math
#: of this thread by :func:`tuned` (a fit's ``EngineOptions.tuning``, carried to every task by
#: its :class:`~distsketch.engine.features.FeatureMap`); outside it, the defaults.
_TUNING: ContextVar[Tuning | None] = ContextVar("distsketch_kernels_tuning", default=None)
_DEFAULT_TUNING = Tuning()


@contextmanager
def tuned(tuning: Tuning | None) -> Iterator[None]:
    """Context manager: the kernel products computed inside it (in this thread) take the
    density rule and the sparse route's panels from ``tuning``
    (:attr:`~distsketch.Tuning.sparse_max_density`,
    :attr:`~distsketch.Tuning.device_sparse_max_density`,
    :attr:`~distsketch.Tuning.sparse_panel_bytes`); ``None`` leaves the current ones (the
    defaults, or an enclosing :func:`tuned`'s). How a fit's ``EngineOptions.tuning`` reaches
    the block math on any worker: ``distsketch.engine.features.FeatureMap.block`` runs its
    products inside it, with the value the feature map carries. The values change only which
    route computes a kernel block (its values agree to rounding).

    Parameters
    ----------
    tuning : Tuning or None
        The knobs to use inside the block; ``None``: leave the current ones.

    Examples
    --------
    Sparse operands denser than 1% computed as dense blocks:

    >>> import scipy.sparse as sp
    >>> from distsketch import Tuning
    >>> from distsketch.kernels import Gaussian, tuned
    >>> A = sp.random(4, 50, density=0.05, format="csr", random_state=0)
    >>> with tuned(Tuning(sparse_max_density=0.01)):
    ...     K = Gaussian()(A, A)
    >>> K.shape
    (4, 4)
    """
    if tuning is None:
        yield
        return
    token = _TUNING.set(tuning)
    try:
        yield
    finally:
        _TUNING.reset(token)


def _tuning() -> Tuning:
    """The :class:`Tuning` of the block math running now (:func:`tuned`; else the defaults)."""
    current = _TUNING.get()
    return _DEFAULT_TUNING if current is None else current


# ---------------------------------------------------------------------------- block math
# Every helper takes the backend ``be`` of its operands and computes in ``be.xp``.


def _keep_sparse(A: Block, max_density: float | None = None) -> bool:
    """Whether the kernel product of the sparse block ``A`` (n, d) is cheaper sparse than dense.

    Rule: density ``nnz / (n·d) ≤ max_density`` (default: the current
    :attr:`Tuning.sparse_max_density <distsketch.Tuning.sparse_max_density>`, :func:`tuned`;
    stored entries, explicit zeros included). A CSR × dense product costs ``2·nnz·n_b`` flops
    at scipy's single-threaded rate, the dense GEMM ``2·n·d·n_b`` at BLAS's; the ratio of the
    two rates is the crossover density (measured: see :class:`~distsketch.Tuning`). Empty
    blocks stay sparse.
    """
    n, d = A.shape
    limit = _tuning().sparse_max_density if max_density is None else max_density
    return A.nnz <= limit * n * d


def cheaper_form(A: Block, be: Backend) -> Block:
    """The sparse block ``A`` densified where :func:`_keep_sparse` says the dense product is
    cheaper: a scipy.sparse block by ``Tuning.sparse_max_density``, a sparse block of backend
    ``be`` (a device CSR, already copied) by ``Tuning.device_sparse_max_density``, else
    ``be.sparse_max_density``, and densified there (the current :func:`tuned`'s values); dense
    blocks, cheap sparse ones and sparse blocks of a backend without a threshold are returned
    as they are."""
    tuning = _tuning()
    if sp.issparse(A):
        return A if _keep_sparse(A, tuning.sparse_max_density) else dense(A)
    limit = tuning.device_sparse_max_density
    if limit is None:
        limit = be.sparse_max_density
    if limit is not None and be.issparse(A) and not _keep_sparse(A, limit):
        return dense(A)
    return A


def _panels(d: int, n_b: int) -> list[tuple[int, int]]:
    """Column spans of the right operand for :func:`sparse_panels`:
    ``Tuning.sparse_panel_bytes`` (the current :func:`tuned`'s) of float64 per dense
    ``(d + 2, width)`` panel, at least 64 columns; one span holding all ``n_b`` columns when it
    is 0 (the CSR × CSR route)."""
    panel_bytes = _tuning().sparse_panel_bytes
    if panel_bytes <= 0:
        return [(0, n_b)]
    width = max(64, panel_bytes // (8 * (d + 2)))
    return [(c, min(c + width, n_b)) for c in range(0, n_b, width)]


def _dense_t(B: Block, be: Backend, extra: int = 0):
    """``Bᵀ`` as a C-contiguous dense array of shape (d + extra, n_b), the last ``extra`` rows
    zero: the right operand of a CSR × dense product (scipy reads rows of it), written
    straight from a sparse ``B`` (duplicates summed) without a dense ``B`` in between."""
    xp = be.xp
    n_b, d = B.shape
    Bt = xp.zeros((d + extra, n_b))
    if be.issparse(B):
        B.T.toarray(out=Bt[:d])
    else:
        Bt[:d] = B.T
    return Bt


def sparse_panels(S, D, be: Backend, right=None, augment=None):
    """``S @ Dᵀ`` of a CSR block ``S`` (n_s, d') column panel by column panel of ``D`` (n_d, d).

    Yields ``(c, e, P)`` with ``P = S @ [D[c:e], right[c:e]]ᵀ`` of shape (n_s, e − c), a new
    array: each panel of ``D`` is written dense and transposed (:func:`_dense_t`, ``d + k``
    rows with ``k`` columns of ``right`` (n_d, k) appended after D's), so the product reads rows of
    a panel that stays in cache (``Tuning.sparse_panel_bytes``; one panel of the whole ``D``
    costs each stored entry of ``S`` a row of ``n_d`` values from memory: measured 1.3–2.4×
    slower at d = 2 000 from 4 % density on, benchmarks/ENGINE.md "sparse_blocks"). Host
    (scipy.sparse) blocks only. With ``sparse_panel_bytes = 0`` a
    sparse ``D`` is never densified: one CSR × CSR product (``augment(D)`` appends the same
    columns sparsely).
    """
    n_d, d = D.shape
    k = 0 if right is None else right.shape[1]
    csr_only = _tuning().sparse_panel_bytes <= 0
    for c, e in _panels(d, n_d):
        if be.issparse(D) and csr_only:
            Dc = D if augment is None else augment(D)
            yield c, e, dense(S @ Dc.T)
            continue
        Dt = _dense_t(D[c:e], be, extra=k)
        if k:
            Dt[d:] = right[c:e].T
        yield c, e, S @ Dt
