"""Rows a fit store keeps for a re-solve over every batch: the targets (and inputs) as written.

An iterative route re-solves an appended model over all its rows (the sweeps of
:mod:`distsketch.solvers.lipschitz` read each row's targets beside its stored block ``C_I``;
PCG recomputes the kernel blocks from the inputs). The data of earlier batches is never read
again, so a store whose model can take appended rows keeps what the route reads of them, in
the fit's group (batch 0) and in each batch's group (:mod:`distsketch.engine.batchstore`)::

    rows/<name>   (n, w) float64, chunks of ``block_rows`` rows; attrs["distsketch_rows"] =
                  {"crcs": CRC-32 of each chunk (:func:`~distsketch._hashing.checksum`),
                   "ndim": the input's ndim}

:func:`keep_rows` writes them one block at a time (the driver holds one block);
:func:`kept_rows` reads them back as a :class:`~distsketch.engine.rows.RowSource` after
checking every chunk against its checksum (one read of the rows, no kernel).
"""

from __future__ import annotations

import logging
from typing import Any

import dask
import numpy as np

from .._hashing import checksum
from ..backends.base import dense
from .rows import RowSource, as_row_source
from .storeguard import StoreError

__all__ = ["ROWS", "keep_rows", "kept_rows", "has_kept_rows"]

logger = logging.getLogger(__name__)

#: The group of a fit store (or batch group) that holds kept rows.
ROWS = "rows"
_ATTR = "distsketch_rows"


def keep_rows(group: Any, name: str, source: RowSource, *, block_rows: int) -> None:
    """Write ``source``'s rows into ``group`` as ``rows/<name>`` (float64), with the CRC-32
    of each block of ``block_rows`` rows (replacing rows kept there before).

    Parameters
    ----------
    group : zarr.Group
        A fit store's group, or a batch's.
    name : str
        ``"Y"`` (targets) or ``"X"`` (inputs).
    source : RowSource
        The rows, shape (n, w).
    block_rows : int
        Rows per chunk (the pass's blocks).
    """
    n, w = source.shape
    b = int(block_rows)
    grp = group.require_group(ROWS)
    arr = grp.create_array(name, shape=(n, w), chunks=(b, w), dtype="float64",
                           fill_value=0.0, compressors=None, overwrite=True)
    crcs = []
    for i, block in enumerate(source.blocks(b)):
        if dask.is_dask_collection(block):
            (block,) = dask.compute(block)
        values = np.ascontiguousarray(dense(block), dtype=np.float64)
        arr[i * b: i * b + values.shape[0]] = values
        crcs.append(int(checksum(values)))
    arr.attrs[_ATTR] = {"crcs": crcs, "ndim": int(source.input_ndim or 2),
                        "block_rows": b}
    logger.debug("kept %s: %d rows × %d in %d blocks", name, n, w, len(crcs))


def has_kept_rows(group: Any, name: str) -> bool:
    """Whether ``group`` keeps rows ``name`` (:func:`keep_rows`)."""
    try:
        return _ATTR in group[f"{ROWS}/{name}"].attrs
    except KeyError:
        return False


def kept_rows(group: Any, name: str, *, location: str, rows: int | None = None) -> RowSource:
    """The rows :func:`keep_rows` wrote, each block checked against its CRC-32 first.

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
