"""Content hashes: fingerprints of landmarks and projections (cache keys of candidate
features), of the data each pass block was computed from (its identity), and checksums of
stored blocks and sums (their integrity). numpy, scipy and the standard library only."""

from __future__ import annotations

import hashlib
import zlib

import numpy as np
import scipy.sparse as sp

__all__ = ["fingerprint", "data_fingerprint", "checksum", "row_hash", "rows_digest"]


def row_hash(seed: int, rows: np.ndarray) -> np.ndarray:
    """``splitmix64(i + seed·φ)`` per row index ``i`` (uint64): a pseudo-random value that is a
    pure function of ``(seed, row)``, so draws made from it never depend on chunking."""
    with np.errstate(over="ignore"):
        z = np.asarray(rows).astype(np.uint64) \
            + np.uint64(int(seed) % 2**64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def fingerprint(*arrays) -> str:
    """Short content hash (16 hex digits of SHA-256) of in-memory arrays, ``None`` allowed."""
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            h.update(b"none")
            continue
        if sp.issparse(a):
            a = sp.csr_array(a)
            parts = (a.data, a.indices, a.indptr)
        else:
            parts = (np.ascontiguousarray(a),)
        h.update(repr(tuple(a.shape)).encode())
        for p in parts:
            h.update(str(p.dtype).encode())
            h.update(memoryview(np.ascontiguousarray(p)).cast("B"))
    return h.hexdigest()[:16]


def data_fingerprint(block) -> int:
    """64-bit content hash of a block of rows (BLAKE2b): its dtype, shape and values; sparse
    blocks in canonical CSR form (summed duplicates, sorted indices). Nonzero.

    The identity of the data a pass was computed from: recorded per block, compared when the
    block is resumed or the pass reused.
    """
    h = hashlib.blake2b(digest_size=8)
    if sp.issparse(block):
        a = sp.csr_array(block, copy=True)
        a.sum_duplicates()
        a.sort_indices()
        h.update(f"csr{a.shape}{a.dtype.str}".encode())
        parts = (a.data, a.indices, a.indptr)
    else:
        a = np.ascontiguousarray(block)
        h.update(f"nd{a.shape}{a.dtype.str}".encode())
        parts = (a,)
    for p in parts:
        h.update(memoryview(np.ascontiguousarray(p)).cast("B"))
    return int.from_bytes(h.digest(), "little") or 1


def checksum(array) -> int:
    """CRC-32 of an array's bytes (C order; its own dtype), for integrity of stored blocks and
    sums. Nonzero (a stored 0 means "no record"). zlib releases the GIL while it runs."""
    a = np.ascontiguousarray(array)
    return (zlib.crc32(memoryview(a).cast("B")) + 1) & 0xFFFFFFFFFFFFFFFF


def _row_words(block) -> np.ndarray:
    """Per row, ``Σ_j bits(x_ij) · w_j mod 2⁶⁴`` over the row's values as float64 (``-0.0``
    as ``+0.0``; a sparse row's zeros add nothing, as dense zeros do), ``w_j`` odd
    pseudo-random words per column."""
    if sp.issparse(block):
        a = sp.csr_array(block, copy=True)
        a.sum_duplicates()
        w = row_hash(0x5EED, np.arange(a.shape[1])) | np.uint64(1)
        bits = (a.data.astype(np.float64) + 0.0).view(np.uint64)
        with np.errstate(over="ignore"):
            prod = bits * w[a.indices]
            cs = np.concatenate([np.zeros(1, np.uint64), np.cumsum(prod, dtype=np.uint64)])
            return cs[a.indptr[1:]] - cs[a.indptr[:-1]]
    a = np.asarray(block, dtype=np.float64)
    a = (a.reshape(len(a), -1) + 0.0).view(np.uint64)
    w = row_hash(0x5EED, np.arange(a.shape[1])) | np.uint64(1)
    with np.errstate(over="ignore"):
        return (a * w).sum(axis=1, dtype=np.uint64)


def rows_digest(x, y=None) -> np.uint64:
    """Order-free 64-bit digest of rows ``(x_i, y_i)``: ``Σ_i mix(word(x_i) + mix(word(y_i)))
    mod 2⁶⁴``. A sum over rows, so the digest of a whole data set is the (wrapping) sum of its
    blocks' digests, whatever the blocks: the identity of a batch of appended rows, compared
    with the batches a model already holds. Values compare as float64 (an int or float32
    copy of the same values has the same digest). Not a cryptographic hash.

    Parameters
    ----------
    x : ndarray or scipy.sparse, shape (n, d)
    y : ndarray or scipy.sparse of n rows, optional

    Returns
    -------
    numpy.uint64
    """
    h = _row_words(x)
    if y is not None:
        with np.errstate(over="ignore"):
            h = h + row_hash(0xD16E57, _row_words(y))
    with np.errstate(over="ignore"):
        return np.uint64(row_hash(0, h).sum(dtype=np.uint64))
