"""Rows a fit store keeps for a re-solve over every batch: the targets (and inputs) as written.

An iterative route re-solves an appended model over all its rows (the sweeps of
:mod:`distsketch.solvers.lipschitz` read each row's targets beside its stored block ``C_I``;
PCG recomputes the kernel blocks from the inputs). The data of earlier batches is never read
again, so a store whose model can take appended rows keeps what the route reads of them, in
the fit's group (batch 0) and in each batch's group (:mod:`distsketch.engine.batchstore`)::

    rows/<name>   (n, w) float64, chunks of ``block_rows`` rows; attrs["distsketch_rows"] =
                  {"crcs": CRC-32 of each chunk (:func:`~distsketch._hashing.checksum`),
                   "ndim": the input's ndim}

:func:`keep_batch_rows` writes them one block at a time (the driver holds one block);
:func:`kept_rows` reads them back as a :class:`~distsketch.engine.rows.RowSource` after
checking every chunk against its checksum (one read of the rows, no kernel).
"""

from __future__ import annotations

import logging
from typing import Any

import dask
import numpy as np

from .._hashing import checksum, rows_digest
from ..backends.base import dense
from .rows import RowSource, as_row_source
from .storeguard import StoreError

__all__ = ["ROWS", "keep_batch_rows", "kept_rows"]

logger = logging.getLogger(__name__)

#: The group of a fit store (or batch group) that holds kept rows.
ROWS = "rows"
_ATTR = "distsketch_rows"


def _created(group: Any, name: str, source: RowSource, b: int):
    n, w = source.shape
    return group.require_group(ROWS).create_array(
        name, shape=(n, w), chunks=(b, w), dtype="float64", fill_value=0.0, compressors=None,
        overwrite=True)


def _computed(*blocks):
    """The blocks in memory (a lazy input's computed together)."""
    if any(dask.is_dask_collection(blk) for blk in blocks):
        return dask.compute(*blocks)
    return blocks


def keep_batch_rows(group: Any, names: tuple, X: RowSource, Y: RowSource | None, *,
                    block_rows: int) -> str:
    """Keep the rows ``names`` (``"X"``, ``"Y"``) of a batch in ``group`` as ``rows/<name>``
    (float64, replacing rows kept there before), one block of each at a time with its CRC-32,
    and return the batch's digest
    (16 hex digits, ``Σ_blocks rows_digest(X_I, Y_I) mod 2⁶⁴``: the pass's ``"digest"``
    sum, whatever the blocks) from the same reads.

    Parameters
    ----------
    group : zarr.Group
    names : tuple of str
    X, Y : RowSource (Y: or None)
    block_rows : int

    Returns
    -------
    str
    """
    b = int(block_rows)
    kept = [(name, src) for name, src in (("X", X), ("Y", Y))
            if name in names and src is not None]
    arrays = {name: _created(group, name, src, b) for name, src in kept}
    crcs: dict = {name: [] for name, _ in kept}
    xs = X.blocks(b)
    ys = Y.blocks(b) if Y is not None else [None] * len(xs)
    total = 0
    for i, pair in enumerate(zip(xs, ys)):
        xb, yb = _computed(*pair)
        total = (total + int(rows_digest(xb, yb))) % 2**64
        for name, src in kept:
            values = np.ascontiguousarray(dense(xb if name == "X" else yb),
                                          dtype=np.float64).reshape(-1, src.shape[1])
            arrays[name][i * b: i * b + values.shape[0]] = values
            crcs[name].append(int(checksum(values)))
    for name, src in kept:
        arrays[name].attrs[_ATTR] = {"crcs": crcs[name], "ndim": int(src.input_ndim or 2),
                                     "block_rows": b}
    logger.debug("kept %s: %d rows in %d blocks", names, X.n, len(xs))
    return f"{total:016x}"


def kept_rows(group: Any, name: str, *, location: str, rows: int | None = None) -> RowSource:
    """The rows :func:`keep_batch_rows` wrote, each block checked against its CRC-32 first.

    Parameters
    ----------
    group : zarr.Group
    name : str
    location : str
        The store's location (error messages).
    rows : int, optional
        The rows expected (the batch's).

    Returns
    -------
    RowSource
        Over the stored array (lazy: the sweeps read it block by block).

    Raises
    ------
    StoreError
        Rows missing, of another length, or not matching their checksums.
    """
    try:
        arr = group[f"{ROWS}/{name}"]
        meta = dict(arr.attrs[_ATTR])
    except KeyError:
        raise StoreError(f"store {location!r}: keeps no rows/{name}, which re-solving the "
                         f"model over its batches needs; fit again with the store") from None
    n, b = int(arr.shape[0]), int(meta["block_rows"])
    if rows is not None and n != int(rows):
        raise StoreError(f"store {location!r}: rows/{name} holds {n} rows, the batch {rows}; "
                         f"the store is damaged: fit again")
    crcs = list(meta["crcs"])
    if len(crcs) != -(-n // b):
        raise StoreError(f"store {location!r}: rows/{name} has an incomplete record; fit again")
    for i, crc in enumerate(crcs):
        values = np.ascontiguousarray(arr[i * b: min(i * b + b, n)], dtype=np.float64)
        if int(checksum(values)) != int(crc):
            raise StoreError(f"store {location!r}: rows/{name}, rows {i * b}..{min(i * b + b, n) - 1}"
                             f" do not match their checksum (damaged); fit again")
    return as_row_source(arr, argument=name, allow_1d=True)
