"""Kernels on standardised inputs: ``k((x − mean) / scale, (x' − mean) / scale)``.

Standardisation belongs to the model, so a saved model predicts from raw inputs; when the
inner kernel depends on ``x − x'`` only, the mean cancels and sparse rows stay sparse.

Block math: numpy and scipy only (no dask).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..backends.base import Backend, dense
from .base import Kernel, kernel_from_config
from .sparse import Block

__all__ = ["Standardized"]


class Standardized(Kernel):
    """``k'(x, x') = k((x − mean) / scale, (x' − mean) / scale)``: a kernel on standardised inputs.

    Standardisation belongs to the model, so a saved model predicts from raw inputs. When
    ``kernel`` depends on ``x − x'`` only (Gaussian, Laplacian, Matern), the mean cancels::

        (x − mean)/scale − (x' − mean)/scale = x/scale − x'/scale

    so sparse blocks stay sparse, columns scaled by ``1/scale`` (``A diag(1/scale)``, the same
    kernel values up to the rounding of the distance expansion, about
    1e-16·γ(‖a‖² + ‖b‖²) on the exponent); for other kernels sparse blocks are densified
    (blocks are bounded by the caller). Build it from training data with
    :func:`distsketch.standardized` (what the TOML ``standardize = true`` does) or
    :meth:`from_data` for in-memory data.

    Parameters
    ----------
    kernel : Kernel or config dict
        The kernel applied to the standardised rows.
    mean : array-like of shape (d,)
    scale : array-like of shape (d,), > 0
    """

    _name = "standardized"

    def __init__(self, kernel: Any, mean: Any, scale: Any) -> None:
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
    def from_moments(cls, kernel: Kernel, mean: Any, var: Any) -> Standardized:
        """From column means and variances; zero-variance columns get scale 1 (scikit-learn's
        ``StandardScaler``).

        Parameters
        ----------
        kernel : Kernel
            The kernel applied to the standardised rows.
        mean, var : array-like of shape (d,)
            Column means and variances (finite; negative variances count as 0).

        Returns
        -------
        Standardized
            With ``scale = sqrt(var)``, 1 where the variance is 0.

        Examples
        --------
        >>> from distsketch.kernels import Gaussian, Standardized
        >>> Standardized.from_moments(Gaussian(), mean=[0.0, 1.0], var=[4.0, 0.0]).scale
        array([2., 1.])
        """
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
    def from_data(cls, kernel: Kernel, X: Any) -> Standardized:
        """Mean and standard deviation of the columns of in-memory ``X`` (numpy or sparse);
        zero-variance columns get scale 1. For dask or zarr data use
        :func:`distsketch.standardized` (one reduction pass).

        Parameters
        ----------
        kernel : Kernel
            The kernel applied to the standardised rows.
        X : ndarray or scipy.sparse matrix of shape (n, d)

        Returns
        -------
        Standardized

        Examples
        --------
        >>> import numpy as np
        >>> from distsketch.kernels import Gaussian, Standardized
        >>> X = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
        >>> k = Standardized.from_data(Gaussian(gamma=0.5), X)
        >>> k
        Standardized(Gaussian(gamma=0.5), d=2)
        >>> k.mean
        array([2., 3.])
        """
        if sp.issparse(X):
            X = sp.csr_array(X)
            mean = np.asarray(X.mean(axis=0)).ravel()
            var = np.asarray(X.multiply(X).mean(axis=0)).ravel() - mean**2
        elif isinstance(X, np.ndarray):
            mean, var = X.mean(axis=0), X.var(axis=0)
        else:
            raise ValueError(f"Standardized.from_data: X must be a numpy or scipy.sparse array, got "
                             f"{type(X).__name__}; use distsketch.standardized(kernel, X) "
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

    def fill_rows(self, n_b: int, d: int) -> int | None:
        """The wrapped kernel's (the scaling is elementwise, row by row).

        Parameters
        ----------
        n_b : int
            Rows of ``B``.
        d : int
            Columns of ``A`` and ``B``.

        Returns
        -------
        int or None
        """
        return self.kernel.fill_rows(n_b, d)

    def _diag(self, A: Block, be: Backend):
        return self.kernel.diag(self._transform(A, be))

    def to_config(self) -> dict[str, Any]:
        return {"name": self._name, "kernel": self.kernel.to_config(),
                "mean": self._mean.tolist(), "scale": self._scale.tolist()}

    def _key(self) -> tuple:
        return (type(self), self.kernel._key(), tuple(self._mean), tuple(self._scale))

    def __repr__(self) -> str:
        return f"Standardized({self.kernel!r}, d={self._mean.size})"
