"""Row-block access to training and test inputs: numpy, scipy.sparse, dask and zarr arrays.

The streaming pass needs two things from an input: its row blocks, each read once, and a
gather of the few rows of the sketch support (the landmarks). :class:`RowSource` gives
both without ever loading a lazy (dask / zarr) input whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from ..kernels.base import Kernel
    from ..kernels.standardized import Standardized

__all__ = ["RowSource", "as_row_source", "check_finite_block", "standardized"]


def _is_zarr_array(x: Any) -> bool:
    mod = type(x).__module__
    return mod.startswith("zarr") and hasattr(x, "shape") and hasattr(x, "chunks")


class RowSource:
    """A 2-D input seen as row blocks.

    Parameters
    ----------
    data : ndarray, scipy.sparse matrix/array, dask.array.Array or zarr.Array
        Shape (n, d); a 1-D input is read as one column.
    argument : str
        Name of the argument, used in error messages (``"X"``, ``"Y"``).
    allow_1d : bool
        Read a 1-D input as one column (targets); otherwise a 1-D input is an error.

    Attributes
    ----------
    kind : {"numpy", "sparse", "dask", "zarr"}
    shape : tuple (n, d)
    native_rows : int or None
        Row chunk of a lazy input, so blocks can be aligned with stored chunks.
    """

    def __init__(self, data: Any, *, argument: str, allow_1d: bool = False) -> None:
        self.argument = argument
        self.input_ndim = getattr(data, "ndim", None)
        if isinstance(data, da.Array):
            kind = "dask"
            if any(np.isnan(c) for dim in data.chunks for c in dim):
                raise ValueError(f"{argument}: a dask array with unknown chunk sizes (shape "
                                 f"{data.shape}); call {argument}.compute_chunk_sizes() first")
        elif _is_zarr_array(data):
            kind = "zarr"
        elif sp.issparse(data):
            kind = "sparse"
            data = sp.csr_array(data)
        else:
            kind = "numpy"
            try:
                data = np.asarray(data)
                if data.dtype == object:
                    data = data.astype(np.float64)
            except (TypeError, ValueError) as exc:  # ragged lists, strings, dicts: keep the type
                if "NAType" in str(exc):  # pandas' missing values: a value problem
                    raise ValueError(f"{argument}: holds missing values (pd.NA); impute or drop "
                                     f"those rows first") from None
                raise type(exc)(f"{argument}: cannot be read as a numeric array ({exc})") from None
        if np.issubdtype(data.dtype, np.complexfloating):
            raise ValueError(f"{argument}: Complex data not supported; got dtype {data.dtype}")
        if not (
            np.issubdtype(data.dtype, np.number) or data.dtype == bool
        ):
            raise ValueError(f"{argument}: expected a real numeric array, got dtype {data.dtype}")
        self.input_ndim = data.ndim
        if data.ndim == 1 and not allow_1d:
            raise ValueError(
                f"{argument}: expected a 2-D array (n_samples, n_features), got 1-D; Reshape your "
                f"data with {argument}.reshape(-1, 1) for one feature or {argument}.reshape(1, -1) "
                f"for one sample"
            )
        if data.ndim == 1:
            data = data.reshape(-1, 1) if kind != "zarr" else da.from_zarr(data)[:, None]
            kind = "dask" if kind == "zarr" else kind
        if data.ndim != 2:
            raise ValueError(
                f"{argument}: expected a 2-D array (n_samples, n_features), got {data.ndim}-D"
            )
        for axis, what in ((0, "sample"), (1, "feature")):
            if data.shape[axis] < 1:
                raise ValueError(f"{argument}: found array with 0 {what}(s) (shape="
                                 f"{tuple(data.shape)}) while a minimum of 1 is required.")
        self.data = data
        self.kind = kind
        self.shape = (int(data.shape[0]), int(data.shape[1]))
        if kind == "dask":
            self.native_rows = int(max(data.chunks[0]))
        elif kind == "zarr":
            self.native_rows = int(data.chunks[0])
        else:
            self.native_rows = None

    @property
    def n(self) -> int:
        return self.shape[0]

    @property
    def lazy(self) -> bool:
        """True when the data are not in memory (values are checked inside the pass)."""
        return self.kind in ("dask", "zarr")

    def check_finite(self) -> None:
        """Eager NaN/inf check for in-memory inputs (lazy ones are checked per block)."""
        if self.lazy:
            return
        values = self.data.data if self.kind == "sparse" else self.data
        if np.issubdtype(values.dtype, np.floating) and not np.isfinite(values).all():
            bad = _first_bad_row(self.data)
            raise ValueError(
                f"{self.argument}: contains NaN or infinity (first at row {bad}); "
                f"impute or drop those rows before fitting"
            )

    def blocks(self, block_rows: int) -> list:
        """One entry per row block ``[i·b, (i+1)·b)``: arrays, or dask Delayed for lazy inputs."""
        n, b = self.n, int(block_rows)
        if self.kind in ("numpy", "sparse"):
            return [self.data[s : min(s + b, n)] for s in range(0, n, b)]
        arr = self.data if self.kind == "dask" else da.from_zarr(self.data)
        arr = arr.rechunk({0: b, 1: -1})
        return list(arr.to_delayed().ravel())

    def take(self, rows: np.ndarray) -> Any:
        """Rows ``rows`` (sorted int array) as an in-memory array (landmark gather)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.kind in ("numpy", "sparse"):
            return self.data[rows]
        # through dask, one stored chunk at a time (zarr's own orthogonal selection holds
        # many decoded chunks at once, which raised the peak RSS of the scaling benchmark)
        arr = self.data if self.kind == "dask" else da.from_zarr(self.data)
        (out,) = dask.compute(arr[rows])
        return np.asarray(out)


def as_row_source(data: Any, *, argument: str, allow_1d: bool = False) -> RowSource:
    if isinstance(data, RowSource):
        return data
    return RowSource(data, argument=argument, allow_1d=allow_1d)


def _first_bad_row(x) -> int:
    if sp.issparse(x):
        x = sp.csr_array(x)
        bad = np.flatnonzero(~np.isfinite(x.data))[0]
        return int(np.searchsorted(x.indptr, bad, side="right") - 1)
    return int(np.flatnonzero(~np.isfinite(x).all(axis=1))[0])


def check_finite_block(block: Any, *, argument: str, start: int) -> None:
    """Raise ``ValueError`` naming ``argument`` if a row block holds NaN or infinity."""
    values = block.data if sp.issparse(block) else np.asarray(block)
    if np.issubdtype(values.dtype, np.floating) and not np.isfinite(values).all():
        raise ValueError(
            f"{argument}: contains NaN or infinity (first at row {start + _first_bad_row(block)}); "
            f"impute or drop those rows before fitting"
        )


def standardized(kernel: Kernel | str, X: Any) -> Standardized:
    """A kernel on standardised inputs: the column means and standard deviations of ``X``.

    Zero-variance columns get scale 1 (scikit-learn's ``StandardScaler``). Pass the result
    as an estimator's kernel to standardise its inputs inside the kernel, without a copy of
    the data.

    Parameters
    ----------
    kernel : Kernel or str
        The kernel on the standardised inputs.
    X : array-like of shape (n_samples, n_features)
        The training inputs: numpy, scipy.sparse, dask or zarr (lazy inputs in one
        reduction pass).

    Returns
    -------
    distsketch.kernels.Standardized
        ``kernel`` with the means and scales of ``X``.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch import standardized
    >>> from distsketch.kernels import Gaussian
    >>> X = np.array([[1.0, 10.0], [3.0, 10.0]])
    >>> k = standardized(Gaussian(gamma=0.5), X)
    >>> k.mean.tolist(), k.scale.tolist()
    ([2.0, 10.0], [1.0, 1.0])
    """
    from ..kernels.standardized import Standardized

    if sp.issparse(X) or isinstance(X, np.ndarray):
        return Standardized.from_data(kernel, X)
    arr = X if isinstance(X, da.Array) else da.from_zarr(X)
    arr = arr.astype(np.float64)
    mean, var = dask.compute(arr.mean(axis=0), arr.var(axis=0))
    return Standardized.from_moments(kernel, mean, var)
