"""Row maps: a row function over an input's rows, stacked (dask in → dask out).

:func:`transform_rows` is how predictions and transforms run over new rows
(``distsketch.engine.features.FeatureMap.transform``): a lazy ``map_blocks`` over a dask
input's row chunks, or fixed blocks of at most :data:`TRANSFORM_ROWS` rows of an in-memory
input on the local thread pool (:func:`~distsketch.engine.mapreduce.map_local`), so the
result never depends on the number of threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np

from .mapreduce import map_local
from .rows import as_row_source

__all__ = ["transform_rows", "TRANSFORM_ROWS"]


# --------------------------------------------------------------------------- row maps

#: Rows per block of :func:`transform_rows` on in-memory input (BLAS-efficient, many blocks).
TRANSFORM_ROWS = 256


def transform_rows(func: Callable, X: Any, *, width: int, post: Any = None, row_bytes: int,
                   block_memory: int, argument: str = "X", n_features: int | None = None,
                   model: str = "the model") -> Any:
    """``func(block, post)`` over the rows of ``X``, stacked.

    Dask input gives a lazy dask array (``map_blocks`` over its row chunks); zarr input is
    read through dask and computed; numpy and scipy.sparse input is computed in fixed blocks
    of at most :data:`TRANSFORM_ROWS` rows on the local thread pool (:func:`map_local`), so the
    result never depends on the number of threads.

    Parameters
    ----------
    func : callable
        ``func(block, post)``: an array of shape (rows, width) for a block of rows.
    X : array-like of shape (n, n_features)
        The rows: a numpy, scipy.sparse, dask or zarr array.
    width : int
        Columns of the result.
    post : object, optional
        Passed to every call.
    row_bytes : int
        Bytes a block holds per row (with ``block_memory``, bounds the block).
    block_memory : int
        Bytes a block may hold.
    argument : str, default "X"
        The argument's name in error messages.
    n_features : int or None, default None
        Columns ``X`` must have (checked).
    model : str, default "the model"
        The model's name in error messages.

    Returns
    -------
    ndarray or dask array of shape (n, width)
        Lazy for dask input.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.engine import transform_rows
    >>> def norms(block, post):
    ...     return np.linalg.norm(block, axis=1, keepdims=True)
    >>> transform_rows(norms, np.array([[3.0, 4.0], [6.0, 8.0]]), width=1, row_bytes=16,
    ...                block_memory=2**20)
    array([[ 5.],
           [10.]])
    """
    src = as_row_source(X, argument=argument)
    if n_features is not None and src.shape[1] != n_features:
        raise ValueError(f"{argument} has {src.shape[1]} features, but {model} is expecting "
                         f"{n_features} features as input")
    data = src.data
    if isinstance(data, da.Array):
        data = data.rechunk({1: -1})
        return data.map_blocks(func, post, dtype=np.float64, chunks=(data.chunks[0], (width,)))
    if src.lazy:
        return np.asarray(transform_rows(func, da.from_zarr(data), width=width, post=post,
                                         row_bytes=row_bytes, block_memory=block_memory,
                                         argument=argument))
    src.check_finite()
    b = max(1, block_memory // max(row_bytes, 1))
    b = min(b, TRANSFORM_ROWS)  # several blocks for the cores; fixed, so results never depend on them
    out = np.empty((src.n, width))

    def block(s: int) -> None:
        out[s:s + b] = func(src.data[s:s + b], post)

    map_local(block, list(range(0, src.n, b)))
    return out
