"""Content fingerprints of in-memory arrays (landmarks, projections), recorded with a pass and
used as cache keys of candidate features. numpy and scipy only."""

from __future__ import annotations

import hashlib

import numpy as np
import scipy.sparse as sp

__all__ = ["fingerprint"]


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
