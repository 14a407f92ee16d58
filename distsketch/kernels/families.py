"""The kernel families, on row blocks: ``kernel(A, B) -> K`` with ``K[i, j] = k(a_i, b_j)``.

Gaussian, Laplacian, Linear, Polynomial, Matern, Tanimoto and GaussianTanimoto, and the block
math they are computed from (products, squared norms and distances). Their base class and
registry: :mod:`distsketch.kernels.base`; kernels on standardised inputs:
:mod:`distsketch.kernels.standardized`.

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
``Tuning.sparse_max_density`` (denser blocks are cheaper as dense GEMMs; a fit's
``EngineOptions.tuning`` applies through :func:`~distsketch.kernels.sparse.tuned`); a sparse
left operand then multiplies dense transposed column panels of the right one
(:func:`~distsketch.kernels.sparse.sparse_panels`), never a dense copy of the whole right
operand (:mod:`distsketch.kernels.sparse`); squared distances use
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
float64 ``exp`` (rates: benchmarks/ENGINE.md, "pass"). The exponent ``e`` is rounded to
float32 first, so the relative error of the value is about (|e| + 1)·6e-8: 1.2e-7 where
k = 0.37, 1.3e-6 where k = 1e-9 (tests/test_kernels.py). Sparse blocks (scipy.sparse) are
host-only.

Adding a kernel: docs/guide/extending.md, "How to add a kernel".
"""

from __future__ import annotations

import math
import numbers
import threading
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..backends.base import Backend, dense
from .base import KERNELS, Kernel
from .sparse import Block, sparse_panels

__all__ = [
    "Gaussian",
    "GaussianTanimoto",
    "Laplacian",
    "Linear",
    "Matern",
    "Polynomial",
    "Tanimoto",
]

_SCRATCH = threading.local()
_SCRATCH_BYTES = 4 << 20  # larger work arrays are allocated per call
_TILE_BYTES = 4 << 20  # float64 values per row tile when a kernel writes into out
_TILE_MAX_D = 64  # wider inputs: the GEMM dominates, and tiles would repack B per tile


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


def _dot(A: Block, B: Block, be: Backend):
    """Dense ``A @ B.T`` of shape (n_a, n_b), a new array; a scipy.sparse ``A`` multiplies
    column panels of ``B`` (:func:`sparse_panels`), a scipy.sparse ``B`` and dense ``A`` the
    transpose; other backends' sparse blocks form the product and densify it."""
    if not (sp.issparse(A) or sp.issparse(B)):
        return dense(A @ B.T)
    S, D = (A, B) if sp.issparse(A) else (B, A)
    out = be.xp.empty((S.shape[0], D.shape[0]))
    for c, e, P in sparse_panels(S, D, be):
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
    the other operand (:func:`sparse_panels`), each panel clipped at 0 and sent through
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
    for c, e, P in sparse_panels(Sa, D, be, right=right,
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


# ---------------------------------------------------------------------------- kernels


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


def _fill_tile_rows(n_b: int, d: int, tile_bytes: int | None) -> int | None:
    """Rows per tile of ``Gaussian.fill`` on dense blocks of ``d`` columns against ``n_b``
    landmarks (``tile_bytes`` of float64 exponent per tile; None: ``_TILE_BYTES``), or None
    where one tile takes the whole block (``d > _TILE_MAX_D``)."""
    if d > _TILE_MAX_D:
        return None
    return max(8, (tile_bytes or _TILE_BYTES) // (8 * max(n_b, 1)))


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

    def __init__(self, gamma: float = 1.0) -> None:
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

    def fill_rows(self, n_b: int, d: int) -> int | None:
        """Rows per tile of ``fill`` on dense host blocks: ``max(8, 4 MiB / (8 n_b))``, or
        None for ``d > 64`` (one tile takes the whole block; see ``Kernel.fill_rows``).

        Parameters
        ----------
        n_b : int
            Landmark rows (columns of the block).
        d : int
            Input columns.

        Returns
        -------
        int or None
        """
        return _fill_tile_rows(n_b, d, None)

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
        # a GPU backend fills far larger tiles
        rows = _fill_tile_rows(n_b, d, be.tile_bytes) or max(n_a, 1)
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

    def __init__(self, gamma: float = 1.0) -> None:
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

    def __init__(self, degree: int = 3, gamma: float = 1.0, coef0: float = 1.0) -> None:
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

    def __init__(self, nu: float = 1.5, length_scale: float = 1.0) -> None:
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

    def __init__(self, gamma: float = 1.0) -> None:
        self.gamma = gamma
        self._validate()

    def _validate(self) -> None:
        _check_positive("GaussianTanimoto", "gamma", self.gamma)

    def _exponent(self, A: Block, B: Block, be: Backend):
        T = _tanimoto(A, B, be)
        T -= 1.0
        T *= 2.0 * self.gamma  # −γ(2 − 2T) = 2γ(T − 1)
        return T


# ---------------------------------------------------------------------------- registry

KERNELS["rbf"] = Gaussian  # scikit-learn's name
