"""Kernel functions evaluated on row blocks: ``kernel(A, B) -> K`` with ``K[i, j] = k(a_i, b_j)``.

Glossary
--------
A, B       row blocks, shapes (n_a, d) and (n_b, d): dense ndarrays or scipy.sparse
           matrices/arrays (CSR is used internally)
x, x'      one row of A, one row of B
⟨x, x'⟩    inner product; ‖x‖ Euclidean norm; ‖x‖₁ L1 norm
T(x, x')   Tanimoto similarity (below)
γ, c, p    ``gamma``, ``coef0``, ``degree``; ν, ℓ Matérn ``nu`` and ``length_scale``

Formulas (the conventions of scikit-learn's ``pairwise`` kernels and of
``sklearn.gaussian_process.kernels.Matern``)
-------------------------------------------------------------------------
====================  ==============================================================
Gaussian (``rbf``)    exp(−γ ‖x − x'‖²)
Laplacian             exp(−γ ‖x − x'‖₁)
Linear                ⟨x, x'⟩
Polynomial            (γ ⟨x, x'⟩ + c)^p
Matern                r = ‖x − x'‖ / ℓ;  ν = ½: exp(−r);  ν = 3/2: (1 + √3 r) exp(−√3 r);
                      ν = 5/2: (1 + √5 r + 5r²/3) exp(−√5 r)
Tanimoto              T(x, x') = ⟨x, x'⟩ / (‖x‖² + ‖x'‖² − ⟨x, x'⟩), and T = 1 when the
                      denominator is 0, which for real vectors happens only when x = x' = 0
GaussianTanimoto      exp(−γ (2 − 2 T(x, x')))
====================  ==============================================================

On binary fingerprints T is the Jaccard index |x ∩ x'| / |x ∪ x'|. Setting T(0, 0) = 1
keeps k(x, x) = 1 for every row (so ``diag`` is all ones) and keeps the Gram matrix
positive semi-definite: all-zero rows form a block of ones, orthogonal to the other rows.
2 − 2T is the squared feature-space distance of the Tanimoto kernel, so GaussianTanimoto
is a Gaussian kernel on that feature space.

Numerics
--------
Every kernel except Laplacian is computed from one product ``A @ B.T`` plus squared row
norms. A sparse operand stays sparse while its density is at most
``Tuning.sparse_max_density`` (denser blocks are cheaper as dense GEMMs: :func:`_keep_sparse`;
a fit's ``EngineOptions.tuning`` applies through :func:`tuned`); a sparse left operand then
multiplies dense transposed column panels of the right one (:func:`_sparse_panels`), never
a dense copy of the whole right operand; squared distances use
‖x‖² + ‖x'‖² − 2⟨x, x'⟩, clipped at 0. When ``A is B`` the diagonal of the distance matrix
is set to 0 exactly (scikit-learn's ``euclidean_distances`` does the same). Otherwise the
expansion leaves an absolute error of about 1e-16·‖x‖² on the squared distance of
coincident points, which Matern with ν = ½ turns into an error of about 1e-8·‖x‖/ℓ on
k(x, x); the other kernels are second order in that error. Laplacian densifies sparse
blocks (the caller bounds their size) and uses the backend's L1 distances
(``scipy.spatial.distance.cdist`` on the host), which need no (n_a, n_b, d) temporary.

Inputs are computed in float64 (float32 and integer blocks are upcast); outputs are
C-contiguous float64 arrays of shape (n_a, n_b), or are written into a caller's float64 or
float32 array (:meth:`Kernel.fill`, how the pass fills its row blocks).

Backends
--------
Every array operation goes through the namespace of the arrays' compute backend
(:func:`distsketch.backends.backend_of`: numpy for host arrays), so the same kernel code fills
blocks on any registered backend. Every exponential goes through the backend's
:meth:`~distsketch.backends.Backend.exp`, the single place to swap in another ``exp``. Into a
float32 array, the exponential kernels (Gaussian, Laplacian, GaussianTanimoto) evaluate
``exp`` in float32 from the float64 exponent, which numpy runs several times faster than its
float64 ``exp`` (rates: benchmarks/RESULTS.md, "pass"). The exponent ``e`` is rounded to
float32 first, so the relative error of the value is about (|e| + 1)·6e-8: 1.2e-7 where
k = 0.37, 1.3e-6 where k = 1e-9 (tests/test_kernels.py). Sparse blocks (scipy.sparse) are
host-only.

Adding a kernel: docs/design.md, "How to add a kernel".
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, Union

import numpy as np
import scipy.sparse as sp

from .._base import ParamsMixin
from .._registry import Registry
from ..backends.base import Backend, backend_of, dense
from ..tuning import Tuning

__all__ = [
    "KERNELS",
    "CallableKernel",
    "Gaussian",
    "GaussianTanimoto",
    "Kernel",
    "Laplacian",
    "Linear",
    "Matern",
    "Polynomial",
    "Standardized",
    "Tanimoto",
    "check_kernel",
    "kernel_description",
    "kernel_from_config",
    "tuned",
]

Block = Union[np.ndarray, sp.spmatrix, sp.sparray]

#: Kernel classes by registry name (``kernel_from_config``, TOML ``name = ...``); a subclass
#: that defines ``_name`` registers itself.
KERNELS: Registry = Registry("kernel", attribute="_name")

_DIAG_ROWS = 256  # rows per sub-block when CallableKernel.diag evaluates the user function

_SCRATCH = threading.local()
_SCRATCH_BYTES = 4 << 20  # larger work arrays are allocated per call
_TILE_BYTES = 4 << 20  # float64 values per row tile when a kernel writes into out
_TILE_MAX_D = 64  # wider inputs: the GEMM dominates, and tiles would repack B per tile
#: The density rule of sparse operands and the panels of the sparse route come from a
#: :class:`~distsketch.Tuning` (``sparse_max_density``, ``device_sparse_max_density``,
#: ``sparse_panel_bytes``: their measured basis is documented there), set for the block math
#: of this thread by :func:`tuned` (a fit's ``EngineOptions.tuning``, carried to every task by
#: its :class:`~distsketch.features.FeatureMap`); outside it, the defaults.
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
    the block math on any worker: :meth:`FeatureMap.block
    <distsketch.features.FeatureMap.block>` runs its products inside it, with the value the
    feature map carries. The values change only which route computes a kernel block (its
    values agree to rounding)."""
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


def _scratch(be: Backend, slot: str, shape: tuple[int, int]):
    """A float64 work array of ``shape`` owned by this thread, contents undefined.

    Kernels writing into ``out`` work in row tiles of about 4 MiB; allocating their temporaries
    anew on every tile costs page faults, worst in ``dask.distributed`` workers, which set
    ``MALLOC_TRIM_THRESHOLD_`` and so turn off glibc's adaptive mmap threshold: every
    allocation above 128 KiB is then a fresh mmap. Arrays above ``_SCRATCH_BYTES`` are not
    kept. The result must not outlive the caller's use of it (the next call reuses it).
    """
    xp = be.xp
    size = math.prod(shape)
    if 8 * size > _SCRATCH_BYTES:
        return xp.empty(shape)
    arrays = _SCRATCH.__dict__
    key = (be.name, slot)
    buf = arrays.get(key)
    if buf is None or buf.size < size:
        buf = arrays[key] = xp.empty(size)
    return buf[:size].reshape(shape)


# ---------------------------------------------------------------------------- block math
# Every helper takes the backend ``be`` of its operands and computes in ``be.xp``.


def _as_block(X: Any, be: Backend) -> Block:
    """``X`` as a 2-D float64 array of backend ``be`` (CSR when sparse; no copy when already one)."""
    if sp.issparse(X):
        X = be.asarray(X.tocsr(), dtype=np.float64)
    else:
        X = be.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D block of rows, got an array of shape {X.shape}")
    return X


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


def _cheaper_form(A: Block, be: Backend) -> Block:
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
    """Column spans of the right operand for :func:`_sparse_panels`:
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


def _sparse_panels(S, D, be: Backend, right=None, augment=None):
    """``S @ Dᵀ`` of a CSR block ``S`` (n_s, d') column panel by column panel of ``D`` (n_d, d).

    Yields ``(c, e, P)`` with ``P = S @ [D[c:e], right[c:e]]ᵀ`` of shape (n_s, e − c), a new
    array: each panel of ``D`` is written dense and transposed (:func:`_dense_t`, ``d + k``
    rows with ``k`` columns of ``right`` (n_d, k) appended after D's), so the product reads rows of
    a panel that stays in cache (``Tuning.sparse_panel_bytes``; one panel of the whole ``D``
    costs each stored entry of ``S`` a row of ``n_d`` values from memory: measured 1.3–2.4×
    slower at d = 2 000 from 4 % density on, benchmarks/RESULTS.md "sparse_blocks"). Host
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


def _dot(A: Block, B: Block, be: Backend):
    """Dense ``A @ B.T`` of shape (n_a, n_b), a new array; a scipy.sparse ``A`` multiplies
    column panels of ``B`` (:func:`_sparse_panels`), a scipy.sparse ``B`` and dense ``A`` the
    transpose; other backends' sparse blocks form the product and densify it."""
    if not (sp.issparse(A) or sp.issparse(B)):
        return dense(A @ B.T)
    S, D = (A, B) if sp.issparse(A) else (B, A)
    out = be.xp.empty((S.shape[0], D.shape[0]))
    for c, e, P in _sparse_panels(S, D, be):
        out[:, c:e] = P
    return out if S is A else be.xp.ascontiguousarray(out.T)


def _sq_norms(A: Block, be: Backend):
    """Squared Euclidean row norms, shape (n_a,)."""
    xp = be.xp
    if be.issparse(A):
        return xp.asarray(A.multiply(A).sum(axis=1)).ravel()
    return xp.einsum("ij,ij->i", A, A)


def _sq_dists(A: Block, B: Block, be: Backend):
    """‖a_i − b_j‖² = ‖a_i‖² + ‖b_j‖² − 2⟨a_i, b_j⟩ clipped at 0, shape (n_a, n_b)."""
    xp = be.xp
    na = _sq_norms(A, be)
    nb = na if A is B else _sq_norms(B, be)
    D = _dot(A, B, be)
    D *= -2.0
    D += na[:, None]
    D += nb[None, :]
    xp.maximum(D, 0.0, out=D)
    if A is B:
        xp.fill_diagonal(D, 0.0)
    return D


def _augment_left(A, gamma: float, be: Backend, out=None):
    """``[2γ a, −γ‖a‖², 1]`` per row, shape (n_a, d + 2)."""
    xp = be.xp
    d = A.shape[1]
    Aa = xp.empty((A.shape[0], d + 2)) if out is None else out
    xp.multiply(A, 2.0 * gamma, out=Aa[:, :d])
    Aa[:, d] = _sq_norms(A, be)
    Aa[:, d] *= -gamma
    Aa[:, d + 1] = 1.0
    return Aa


def _augment_sparse(A, first, second, be: Backend):
    """CSR ``[A, first, second]``: two dense columns of shape (n_a,) appended to a CSR block."""
    extra = be.xp.empty((A.shape[0], 2))
    extra[:, 0] = first
    extra[:, 1] = second
    return sp.hstack([A, sp.csr_array(extra)], format="csr")


def _gaussian_sparse_into(A, B, gamma: float, out, be: Backend, *, apply_exp: bool, same: bool = False):
    """``exp(−γ ‖a_i − b_j‖²)`` (or, without ``apply_exp``, the clipped exponent) into ``out``
    (n_a, n_b) when ``A`` or ``B`` is a scipy.sparse (CSR) block.

    The augmented product of :func:`_neg_scaled_sq_dists` with the sparse operand ``S`` on the
    left, ``⟨[2γ s, −γ‖s‖², 1], [t, 1, −γ‖t‖²]⟩``, one CSR × dense product per column panel of
    the other operand (:func:`_sparse_panels`), each panel clipped at 0 and sent through
    ``exp`` into its columns of ``out`` while in cache: no (n_a, n_b) temporary, two
    elementwise passes fewer than :func:`_sq_dists`. A dense ``A`` against a sparse ``B``
    writes the transposed block (``B`` on the left) into ``out.T``. Rounding as
    :func:`_neg_scaled_sq_dists`; ``same`` (``A is B``) sets the diagonal's exponent to 0.
    """
    xp = be.xp
    S, D, dst = (A, B, out) if sp.issparse(A) else (B, A, out.T)
    Sa = _augment_sparse(S * (2.0 * gamma), -gamma * _sq_norms(S, be), 1.0, be)
    right = xp.empty((D.shape[0], 2))
    right[:, 0] = 1.0
    right[:, 1] = _sq_norms(D, be)
    right[:, 1] *= -gamma
    for c, e, P in _sparse_panels(Sa, D, be, right=right,
                                  augment=lambda M: _augment_sparse(M, right[:, 0], right[:, 1], be)):
        xp.minimum(P, 0.0, out=P)
        if same:
            idx = xp.arange(c, min(e, P.shape[0]))
            P[idx, idx - c] = 0.0
        if apply_exp:
            be.exp(P, out=dst[:, c:e])
        else:
            dst[:, c:e] = P
    return out


def _augment_right(B, gamma: float, be: Backend):
    """``[b, 1, −γ‖b‖²]`` per row, shape (n_b, d + 2)."""
    xp = be.xp
    d = B.shape[1]
    Ba = xp.empty((B.shape[0], d + 2))
    Ba[:, :d] = B
    Ba[:, d] = 1.0
    Ba[:, d + 1] = _sq_norms(B, be)
    Ba[:, d + 1] *= -gamma
    return Ba


def _neg_scaled_sq_dists(A, B, gamma: float, be: Backend):
    """``−γ ‖a_i − b_j‖²`` for dense blocks from one GEMM, clipped at 0, shape (n_a, n_b).

    ``−γ‖a − b‖² = ⟨[2γ a, −γ‖a‖², 1], [b, 1, −γ‖b‖²]⟩``: the product of two
    (·, d + 2) augmented blocks yields the scaled distances directly, so the block is
    touched by one clip after the GEMM instead of the four elementwise passes of
    :func:`_sq_dists` (the dominant cost for small ``d``). The rounding error is that
    of the expansion in :func:`_sq_dists`, about 1e-16·γ(‖a‖² + ‖b‖²); the diagonal
    of ``A is B`` is set to 0 exactly.
    """
    return _neg_scaled_sq_dists_into(A, _augment_right(B, gamma, be), gamma,
                                     be.xp.empty((A.shape[0], B.shape[0])), be,
                                     0 if A is B else None)


def _neg_scaled_sq_dists_into(A, Ba, gamma: float, T, be: Backend, diagonal: int | None = None):
    """:func:`_neg_scaled_sq_dists` of rows ``A`` against augmented rows ``Ba``
    (:func:`_augment_right`) into ``T`` (C-contiguous float64); ``diagonal``: the column of
    A's first row in ``Ba`` when A's rows are among Ba's (``A is B``), where the distance
    is set to 0 exactly. A's augmented rows go to this thread's work array."""
    xp = be.xp
    Aa = _augment_left(A, gamma, be, out=_scratch(be, "a", (A.shape[0], Ba.shape[1])))
    xp.matmul(Aa, Ba.T, out=T)
    xp.minimum(T, 0.0, out=T)
    if diagonal is not None:
        idx = xp.arange(T.shape[0])
        T[idx, idx + diagonal] = 0.0
    return T


def _tanimoto(A: Block, B: Block, be: Backend):
    """T(a_i, b_j), with T = 1 where both rows are all-zero, shape (n_a, n_b)."""
    na = _sq_norms(A, be)
    nb = na if A is B else _sq_norms(B, be)
    G = _dot(A, B, be)
    den = na[:, None] + nb[None, :]
    den -= G
    both_zero = den == 0.0
    G[both_zero] = 1.0
    den[both_zero] = 1.0
    G /= den
    return G


# ---------------------------------------------------------------------------- validation


def _is_real(value: Any) -> bool:
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _check_positive(owner: str, name: str, value: Any) -> None:
    if not (_is_real(value) and value > 0):
        raise ValueError(f"{owner}: {name} must be a positive float, got {value!r}")


def _plain(value: numbers.Real) -> int | float:
    """A JSON-serialisable Python number (numpy scalars are not all serialisable)."""
    return int(value) if isinstance(value, numbers.Integral) else float(value)


# ---------------------------------------------------------------------------- kernels


class Kernel(ParamsMixin):
    """Base class: a picklable value object ``kernel(A, B) -> (n_a, n_b)`` float64 array.

    Unlike estimators, kernels validate their parameters in ``__init__`` (and in
    ``set_params``): they have no ``fit`` where validation could wait, and a bad kernel
    should fail where it is written, not inside a task on a worker.

    Subclasses set ``_name`` (their :data:`KERNELS` registry name: defining the class
    registers it) and implement ``_validate``, ``_compute(A, B, be)`` and ``_diag(A, be)`` on
    float64 blocks of backend ``be``, computing in ``be.xp``; ``_fill(A, B, out, scale, be)``
    where a cheaper path than ``out[...] = _compute(A, B, be)`` exists. See docs/design.md,
    "How to add a kernel".
    """

    _name: ClassVar[str]
    #: Whether ``k(x, x')`` depends on ``x − x'`` only (so :class:`Standardized` may drop the
    #: mean and keep sparse rows sparse: docs/design.md, "Sparse inputs").
    _translation_invariant: ClassVar[bool] = False
    #: Whether sparse operands go through the density rule (:func:`_cheaper_form`): the
    #: built-in kernels, whose products were measured; a user's callable gets its blocks as given.
    _densify_by_density: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        KERNELS.register_class(cls)  # a later class of the same name replaces it

    def __init__(self) -> None:
        """Parameter-free kernels take no arguments; subclasses with parameters override."""

    def __call__(self, A: Block, B: Block, *, out=None):
        """Kernel block ``K[i, j] = k(A[i], B[j])``.

        Parameters
        ----------
        A : ndarray or scipy.sparse matrix/array, shape (n_a, d)
        B : ndarray or scipy.sparse matrix/array, shape (n_b, d)
        out : ndarray, shape (n_a, n_b), float64 or float32, optional
            As for :meth:`fill`.

        Returns
        -------
        K : ndarray, shape (n_a, n_b)
            ``out``, or a new C-contiguous float64 array (of A's backend) owned by the caller.
        """
        if out is not None:
            return self.fill(A, B, out)
        be = backend_of(A)
        A, B = self._operands(A, B, be)
        return be.xp.ascontiguousarray(self._compute(A, B, be), dtype=np.float64)

    def _operands(self, A: Block, B: Block, be: Backend) -> tuple[Block, Block]:
        same = A is B
        A = _as_block(A, be)
        B = A if same else _as_block(B, be)
        if self._densify_by_density:
            A = _cheaper_form(A, be)
            B = A if same else _cheaper_form(B, be)
        if A.shape[1] != B.shape[1]:
            raise ValueError(
                f"{type(self).__name__}: A and B must have the same number of columns, "
                f"got {A.shape[1]} and {B.shape[1]}"
            )
        return A, B

    def fill(self, A: Block, B: Block, out, scale=None):
        """Write the kernel block into ``out``: ``out[i, j] = k(A[i], B[j]) · scale[j]``.

        How the streaming pass evaluates its blocks (:func:`distsketch.blocks.gram_dot`):
        straight into the block it stores, in the compute backend of ``out``.

        Parameters
        ----------
        A : array or scipy.sparse matrix/array, shape (n_a, d)
        B : array or scipy.sparse matrix/array, shape (n_b, d)
        out : array of a registered backend, shape (n_a, n_b), float64 or float32
            Written in place (any strides) and returned. Into float32 the values are rounded
            to float32; the exponential kernels then evaluate ``exp`` in float32 (module
            docstring, "Backends").
        scale : array of shape (n_b,), optional
            Column factors applied after the kernel values (and rounded again): the sketched
            pass's placed columns, ``k(A, X_J) diag(R_mix)``.

        Returns
        -------
        out
        """
        be = backend_of(out)
        if not isinstance(out, be.array_types) or out.dtype not in (np.float64, np.float32):
            raise ValueError(f"{type(self).__name__}: out must be a float64 or float32 "
                             f"ndarray, got {getattr(out, 'dtype', type(out).__name__)}")
        A, B = self._operands(A, B, be)
        if out.shape != (A.shape[0], B.shape[0]):
            raise ValueError(f"{type(self).__name__}: out has shape {out.shape}, expected "
                             f"(len(A), len(B)) = {(A.shape[0], B.shape[0])}")
        self._fill(A, B, out, scale, be)
        return out

    def diag(self, A: Block):
        """``k(A[i], A[i])`` for every row, without forming the Gram matrix.

        Parameters
        ----------
        A : ndarray or scipy.sparse matrix/array, shape (n_a, d)

        Returns
        -------
        ndarray, shape (n_a,), float64
        """
        be = backend_of(A)
        return self._diag(_as_block(A, be), be)

    def to_config(self) -> dict[str, Any]:
        """JSON-serialisable ``{"name": <registry name>, **params}``; inverse of
        :func:`kernel_from_config`."""
        params = {k: _plain(v) for k, v in self.get_params(deep=False).items()}
        return {"name": self._name, **params}

    def set_params(self, **params: Any) -> Kernel:
        """Set parameters and validate them again; returns self."""
        super().set_params(**params)
        self._validate()
        return self

    def _key(self) -> tuple:
        return (type(self), tuple(self.get_params(deep=False).items()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Kernel):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid parameter (none by default)."""

    def _compute(self, A: Block, B: Block, be: Backend):
        raise NotImplementedError

    def _fill(self, A: Block, B: Block, out, scale, be: Backend) -> None:
        """:meth:`fill` on checked operands; kernels with a cheaper path override this."""
        out[...] = self._compute(A, B, be)
        if scale is not None:
            out *= scale

    def _diag(self, A: Block, be: Backend):
        return be.xp.ones(A.shape[0])


class _ExponentialKernel(Kernel):
    """A kernel ``exp(e(A, B))``: subclasses implement ``_exponent`` (a new float64 array)."""

    def _exponent(self, A: Block, B: Block, be: Backend):
        raise NotImplementedError

    def _compute(self, A: Block, B: Block, be: Backend):
        return be.exp(self._exponent(A, B, be))

    def _fill(self, A: Block, B: Block, out, scale, be: Backend) -> None:
        be.exp(self._exponent(A, B, be), out=out)
        if scale is not None:
            out *= scale


class Gaussian(_ExponentialKernel):
    """Gaussian (RBF) kernel ``k(x, x') = exp(−gamma ‖x − x'‖²)``.

    Parameters
    ----------
    gamma : float > 0
        Inverse squared length scale, scikit-learn's ``rbf_kernel`` convention
        (``gamma = 1 / (2σ²)``).
    """

    _name = "gaussian"
    _translation_invariant = True

    def __init__(self, gamma: float = 1.0):
        self.gamma = gamma
        self._validate()

    def _validate(self) -> None:
        _check_positive("Gaussian", "gamma", self.gamma)

    def _exponent(self, A: Block, B: Block, be: Backend):
        if sp.issparse(A) or sp.issparse(B):
            return _gaussian_sparse_into(A, B, self.gamma, be.xp.empty((A.shape[0], B.shape[0])), be,
                                         apply_exp=False, same=A is B)
        if be.issparse(A) or be.issparse(B):  # another backend's sparse blocks
            D = _sq_dists(A, B, be)
            D *= -self.gamma
            return D
        return _neg_scaled_sq_dists(A, B, self.gamma, be)

    def _compute(self, A: Block, B: Block, be: Backend):
        if sp.issparse(A) or sp.issparse(B):
            return _gaussian_sparse_into(A, B, self.gamma, be.xp.empty((A.shape[0], B.shape[0])), be,
                                         apply_exp=True, same=A is B)
        return super()._compute(A, B, be)

    def _fill(self, A: Block, B: Block, out, scale, be: Backend) -> None:
        """Dense blocks in row tiles of about ``_TILE_BYTES`` (small ``d``): the GEMM, clip,
        ``exp``, rounding and scaling of a tile run while it is in cache, the augmented
        ``B`` is built once, the tile temporaries are this thread's work arrays. With
        ``d > _TILE_MAX_D`` the GEMM dominates and one tile takes the whole block."""
        if sp.issparse(A) or sp.issparse(B):
            _gaussian_sparse_into(A, B, self.gamma, out, be, apply_exp=True, same=A is B)
            if scale is not None:
                out *= scale
            return
        if be.issparse(A) or be.issparse(B):  # another backend's sparse blocks
            super()._fill(A, B, out, scale, be)
            return
        n_a, n_b = out.shape
        d = A.shape[1]
        same = A is B
        Ba = _augment_right(B, self.gamma, be)
        tile = be.tile_bytes or _TILE_BYTES  # a GPU backend fills far larger tiles
        rows = max(n_a, 1) if d > _TILE_MAX_D else max(8, tile // (8 * max(n_b, 1)))
        for r in range(0, n_a, rows):
            e = min(r + rows, n_a)
            dst = out[r:e]
            # the exponent straight into a float64 tile, else into a work array
            direct = dst.dtype == np.float64 and dst.flags.c_contiguous
            T = dst if direct else _scratch(be, "exponent", (e - r, n_b))
            _neg_scaled_sq_dists_into(A[r:e], Ba, self.gamma, T, be, r if same else None)
            be.exp(T, out=dst)
            if scale is not None:
                dst *= scale


class Laplacian(_ExponentialKernel):
    """Laplacian kernel ``k(x, x') = exp(−gamma ‖x − x'‖₁)`` (L1 distance).

    scikit-learn's ``laplacian_kernel`` convention. Sparse blocks are densified.

    Parameters
    ----------
    gamma : float > 0
    """

    _name = "laplacian"
    _translation_invariant = True

    def __init__(self, gamma: float = 1.0):
        self.gamma = gamma
        self._validate()

    def _validate(self) -> None:
        _check_positive("Laplacian", "gamma", self.gamma)

    def _exponent(self, A: Block, B: Block, be: Backend):
        D = be.cityblock(dense(A), dense(B))
        D *= -self.gamma
        return D


class Linear(Kernel):
    """Linear kernel ``k(x, x') = ⟨x, x'⟩``; ``diag`` is the squared row norms."""

    _name = "linear"

    def _compute(self, A: Block, B: Block, be: Backend):
        return _dot(A, B, be)

    def _diag(self, A: Block, be: Backend):
        return _sq_norms(A, be)


class Polynomial(Kernel):
    """Polynomial kernel ``k(x, x') = (gamma ⟨x, x'⟩ + coef0) ** degree``.

    Positive semi-definite for ``coef0 >= 0``.

    Parameters
    ----------
    degree : int >= 1
    gamma : float > 0
    coef0 : float
    """

    _name = "polynomial"

    def __init__(self, degree: int = 3, gamma: float = 1.0, coef0: float = 1.0):
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self._validate()

    def _validate(self) -> None:
        d = self.degree
        if not (isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1):
            raise ValueError(f"Polynomial: degree must be a positive int, got {d!r}")
        _check_positive("Polynomial", "gamma", self.gamma)
        if not _is_real(self.coef0):
            raise ValueError(f"Polynomial: coef0 must be a finite float, got {self.coef0!r}")

    def _compute(self, A: Block, B: Block, be: Backend):
        return self._transform(_dot(A, B, be), be)

    def _diag(self, A: Block, be: Backend):
        return self._transform(_sq_norms(A, be), be)

    def _transform(self, G, be: Backend):
        G *= self.gamma
        G += self.coef0
        return be.xp.power(G, int(self.degree), out=G)


class Matern(Kernel):
    """Matérn kernel with ``nu`` in {0.5, 1.5, 2.5}, scikit-learn's ``Matern`` convention.

    With ``r = ‖x − x'‖ / length_scale``::

        nu = 0.5:  exp(−r)
        nu = 1.5:  (1 + √3 r) exp(−√3 r)
        nu = 2.5:  (1 + √5 r + 5 r² / 3) exp(−√5 r)

    Parameters
    ----------
    nu : {0.5, 1.5, 2.5}
        Smoothness; other values would need Bessel functions and are not supported.
    length_scale : float > 0

    Notes
    -----
    Distances come from the expansion ‖x‖² + ‖x'‖² − 2⟨x, x'⟩; for ``nu = 0.5`` a
    coincident pair in two different blocks gets k ≈ 1 − 1e-8·‖x‖/ℓ rather than 1
    (see the module notes). ``kernel(A, A)`` with the same object has an exact diagonal.
    """

    _name = "matern"
    _translation_invariant = True

    def __init__(self, nu: float = 1.5, length_scale: float = 1.0):
        self.nu = nu
        self.length_scale = length_scale
        self._validate()

    def _validate(self) -> None:
        if not (_is_real(self.nu) and self.nu in (0.5, 1.5, 2.5)):
            raise ValueError(f"Matern: nu must be one of 0.5, 1.5, 2.5, got {self.nu!r}")
        _check_positive("Matern", "length_scale", self.length_scale)

    def _compute(self, A: Block, B: Block, be: Backend):
        xp = be.xp
        s = _sq_dists(A, B, be)
        s *= 2.0 * self.nu / self.length_scale**2
        xp.sqrt(s, out=s)  # s = √(2ν) r: r, √3 r or √5 r
        if self.nu == 0.5:
            s *= -1.0
            return be.exp(s)
        e = be.exp(-s)
        if self.nu == 1.5:
            poly = s + 1.0  # 1 + √3 r
        else:
            poly = s * s
            poly /= 3.0
            poly += s
            poly += 1.0  # 1 + √5 r + 5r²/3 = 1 + s + s²/3
        poly *= e
        return poly


class Tanimoto(Kernel):
    """Tanimoto kernel ``T(x, x') = ⟨x, x'⟩ / (‖x‖² + ‖x'‖² − ⟨x, x'⟩)``.

    On binary fingerprints this is the Jaccard index. Convention: ``T = 1`` when the
    denominator is 0, i.e. when both rows are all-zero, so ``k(x, x) = 1`` for every row.
    """

    _name = "tanimoto"

    def _compute(self, A: Block, B: Block, be: Backend):
        return _tanimoto(A, B, be)


class GaussianTanimoto(_ExponentialKernel):
    """Gaussian kernel on the Tanimoto feature space: ``exp(−gamma (2 − 2 T(x, x')))``.

    ``T`` is the :class:`Tanimoto` kernel, with its convention ``T(0, 0) = 1``.

    Parameters
    ----------
    gamma : float > 0
    """

    _name = "gaussian_tanimoto"

    def __init__(self, gamma: float = 1.0):
        self.gamma = gamma
        self._validate()

    def _validate(self) -> None:
        _check_positive("GaussianTanimoto", "gamma", self.gamma)

    def _exponent(self, A: Block, B: Block, be: Backend):
        T = _tanimoto(A, B, be)
        T -= 1.0
        T *= 2.0 * self.gamma  # −γ(2 − 2T) = 2γ(T − 1)
        return T


class CallableKernel(Kernel):
    """Wraps a user function ``func(A, B) -> (n_a, n_b)`` array as a :class:`Kernel`.

    ``func`` receives float64 blocks (ndarray or CSR) and may return a dense array, a
    sparse matrix (densified) or anything ``np.asarray`` accepts; the shape is checked on
    every call. It cannot be written to a config file (``to_config`` raises ``TypeError``)
    and is pickled by reference, so it must be importable on the workers.

    Parameters
    ----------
    func : callable
    """

    _densify_by_density = False

    def __init__(self, func: Callable[[Block, Block], Any]):
        self.func = func
        self._validate()

    def _validate(self) -> None:
        if not callable(self.func):
            raise ValueError(f"CallableKernel: func must be callable, got {self.func!r}")

    def _label(self) -> str:
        return f"CallableKernel({getattr(self.func, '__name__', repr(self.func))})"

    def to_config(self) -> dict[str, Any]:
        """Always raises: a user callable cannot be written to a config file."""
        raise TypeError(
            f"{self._label()}: a user callable cannot be written to a config file; "
            f"use a registered kernel {sorted(KERNELS)} to save a config"
        )

    def _compute(self, A: Block, B: Block, be: Backend):
        out = self.func(A, B)
        if sp.issparse(out) or be.issparse(out):
            out = out.toarray()
        out = be.xp.array(out, dtype=np.float64)  # a copy: the caller may modify the block
        expected = (A.shape[0], B.shape[0])
        if out.shape != expected:
            raise ValueError(
                f"{self._label()}: func returned an array of shape {out.shape}, "
                f"expected (len(A), len(B)) = {expected}"
            )
        return out

    def _diag(self, A: Block, be: Backend):
        xp = be.xp
        out = xp.empty(A.shape[0])
        for start in range(0, A.shape[0], _DIAG_ROWS):
            rows = A[start : start + _DIAG_ROWS]
            out[start : start + _DIAG_ROWS] = xp.diag(self(rows, rows))
        return out


class Standardized(Kernel):
    """``k'(x, x') = k((x − mean) / scale, (x' − mean) / scale)``: a kernel on standardised inputs.

    Standardisation belongs to the model, so a saved model predicts from raw inputs. When
    ``kernel`` depends on ``x − x'`` only (Gaussian, Laplacian, Matern), the mean cancels::

        (x − mean)/scale − (x' − mean)/scale = x/scale − x'/scale

    so sparse blocks stay sparse, columns scaled by ``1/scale`` (``A diag(1/scale)``, the same
    kernel values up to the rounding of the distance expansion, about
    1e-16·γ(‖a‖² + ‖b‖²) on the exponent); for other kernels sparse blocks are densified
    (blocks are bounded by the caller). Build it from training data with
    :func:`distsketch.rows.standardized` (what the TOML ``standardize = true`` does) or
    :meth:`from_data` for in-memory data.

    Parameters
    ----------
    kernel : Kernel or config dict
        The kernel applied to the standardised rows.
    mean : array-like of shape (d,)
    scale : array-like of shape (d,), > 0
    """

    _name = "standardized"

    def __init__(self, kernel: Any, mean: Any, scale: Any):
        self.kernel = kernel
        self.mean = mean
        self.scale = scale
        self._validate()

    def _validate(self) -> None:
        if isinstance(self.kernel, Mapping):
            self.kernel = kernel_from_config(self.kernel)
        if not isinstance(self.kernel, Kernel):
            raise ValueError(f"Standardized: kernel must be a distsketch kernel, got {self.kernel!r}")
        self._mean = np.asarray(self.mean, dtype=np.float64).ravel()
        self._scale = np.asarray(self.scale, dtype=np.float64).ravel()
        if self._mean.shape != self._scale.shape:
            raise ValueError("Standardized: mean and scale must have the same length")
        if not (np.isfinite(self._scale).all() and (self._scale > 0).all()):
            raise ValueError("Standardized: scale must be finite and positive")

    @classmethod
    def from_moments(cls, kernel: Kernel, mean, var) -> "Standardized":
        """From column means and variances; zero-variance columns get scale 1 (scikit-learn's
        ``StandardScaler``)."""
        mean = np.asarray(mean, dtype=np.float64).ravel()
        var = np.asarray(var, dtype=np.float64).ravel()
        bad = np.flatnonzero(~(np.isfinite(mean) & np.isfinite(var)))
        if bad.size:
            cols = ", ".join(map(str, bad[:5])) + (", …" if bad.size > 5 else "")
            raise ValueError(
                f"Standardized: X holds NaN or infinity in {bad.size} column(s) ({cols}), so "
                f"their mean and standard deviation are not finite; impute or drop the missing "
                f"values first (the CLI: [data] missing = \"impute-mean\" or \"drop\")")
        std = np.sqrt(np.clip(var, 0.0, None))
        std[std == 0] = 1.0
        return cls(kernel, mean, std)

    @classmethod
    def from_data(cls, kernel: Kernel, X) -> "Standardized":
        """Mean and standard deviation of the columns of in-memory ``X`` (numpy or sparse);
        zero-variance columns get scale 1. For dask or zarr data use
        :func:`distsketch.rows.standardized` (one reduction pass)."""
        if sp.issparse(X):
            X = sp.csr_array(X)
            mean = np.asarray(X.mean(axis=0)).ravel()
            var = np.asarray(X.multiply(X).mean(axis=0)).ravel() - mean**2
        elif isinstance(X, np.ndarray):
            mean, var = X.mean(axis=0), X.var(axis=0)
        else:
            raise ValueError(f"Standardized.from_data: X must be a numpy or scipy.sparse array, got "
                             f"{type(X).__name__}; use distsketch.rows.standardized(kernel, X) "
                             f"for dask or zarr data")
        return cls.from_moments(kernel, mean, var)

    @property
    def _translation_invariant(self) -> bool:  # k'(x, x') is a function of (x − x')/scale
        return self.kernel._translation_invariant

    def _transform(self, A: Block, be: Backend):
        if A.shape[1] != self._mean.size:
            raise ValueError(f"Standardized: rows have {A.shape[1]} columns, the scaling {self._mean.size}")
        if sp.issparse(A) and self.kernel._translation_invariant:
            A = A.tocsr()  # the mean cancels in x − x': columns scaled, sparsity kept
            inv = 1.0 / self._scale
            return sp.csr_array((A.data * inv[A.indices], A.indices, A.indptr), shape=A.shape)
        A = dense(A)
        return (A - be.asarray(self._mean)) / be.asarray(self._scale)

    def _compute(self, A: Block, B: Block, be: Backend):
        TA = self._transform(A, be)
        return self.kernel(TA, TA if B is A else self._transform(B, be))

    def _fill(self, A: Block, B: Block, out, scale, be: Backend) -> None:
        TA = self._transform(A, be)
        self.kernel.fill(TA, TA if B is A else self._transform(B, be), out, scale)

    def _diag(self, A: Block, be: Backend):
        return self.kernel.diag(self._transform(A, be))

    def to_config(self) -> dict[str, Any]:
        return {"name": self._name, "kernel": self.kernel.to_config(),
                "mean": self._mean.tolist(), "scale": self._scale.tolist()}

    def _key(self) -> tuple:
        return (type(self), self.kernel._key(), tuple(self._mean), tuple(self._scale))

    def __repr__(self) -> str:
        return f"Standardized({self.kernel!r}, d={self._mean.size})"


# ---------------------------------------------------------------------------- registry

KERNELS["rbf"] = Gaussian  # scikit-learn's name


def kernel_from_config(cfg: Mapping[str, Any]) -> Kernel:
    """Build a kernel from ``{"name": <registry name>, **params}``; inverse of ``to_config``.

    Parameters
    ----------
    cfg : mapping
        ``name`` is a key of :data:`KERNELS`; the other keys are constructor parameters
        (missing ones take their defaults).

    Returns
    -------
    Kernel

    Raises
    ------
    ValueError
        If the name is missing or unknown, or a parameter is unknown or invalid.
    """
    params = dict(cfg)
    name = params.pop("name", None)
    if name not in KERNELS:
        raise ValueError(
            f"kernel_from_config: unknown kernel name {name!r}; valid names are {sorted(KERNELS)}"
        )
    cls = KERNELS[name]
    valid = cls._param_names()
    for key in params:
        if key not in valid:
            raise ValueError(
                f"kernel_from_config: unknown parameter {key!r} for kernel {name!r}; "
                f"valid parameters are {valid}"
            )
    return cls(**params)


def kernel_description(kernel: Any) -> dict[str, Any]:
    """JSON description of a kernel, for records and keys: :meth:`Kernel.to_config`, or
    ``{"callable": "module.qualname"}`` for a user function (never used to rebuild it)."""
    try:
        return kernel.to_config()
    except TypeError:
        f = getattr(kernel, "func", kernel)
        return {"callable": f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"}


def check_kernel(kernel: Any, *, name: str) -> Kernel:
    """Resolve a user's kernel argument to a :class:`Kernel`.

    Parameters
    ----------
    kernel : Kernel, str, mapping or callable
        A kernel object (returned as is), a :data:`KERNELS` name (default parameters), a
        config dict (see :func:`kernel_from_config`), or a callable
        ``kernel(A, B) -> (len(A), len(B))`` array (wrapped in :class:`CallableKernel`).
    name : str
        The argument's name, which starts every error message.

    Returns
    -------
    Kernel

    Raises
    ------
    ValueError
        For an unknown name, a bad config or anything else.
    """
    choices = (
        f"use one of {sorted(KERNELS)}, a config dict, a distsketch.kernels object, "
        "or a callable kernel(A, B) -> (len(A), len(B)) array"
    )
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, str):
        if kernel not in KERNELS:
            raise ValueError(f"{name}: unknown kernel {kernel!r}; {choices}")
        return KERNELS[kernel]()
    if isinstance(kernel, Mapping):
        try:
            return kernel_from_config(kernel)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    if callable(kernel) and not isinstance(kernel, type):
        return CallableKernel(kernel)
    raise ValueError(
        f"{name}: cannot use {kernel!r} (type {type(kernel).__name__}) as a kernel; {choices}"
    )
