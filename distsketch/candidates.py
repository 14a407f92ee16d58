"""Candidate stores: decoding candidates on disk, with output features cached per model.

Layout (one zarr v3 group)::

    <store>/                attrs["distsketch_candidates"] = {format_version, kind, n_candidates,
                                                              width, n_sets, token}
        candidates  (n_c, d_Y)        the candidate rows (their own dtype: bool fingerprints stay bool)
        offsets     (n_sets + 1,)     ragged only: set s is rows offsets[s]:offsets[s+1]
        query_sets  (n_queries,)      ragged, optional: the set of each query
        features/<model key>/phi  (n_c, r_Y)   φ_Y of every candidate for one fitted model
        features/<model key>/kyy  (n_c,)       k_Y(y, y)
        features/<model key>/done (n_blocks,)  blocks written; attrs["complete"] when all are

A *fixed* store holds one candidate set shared by all queries; a *ragged* store holds per-query
sets concatenated. Features depend only on the model's output side (kernel, landmarks,
projection: the model's output :class:`~distsketch.features.FeatureMap`), not on λ, so they
are computed once per fitted model (keyed by the feature map's ``key``, ``SISOKR.output_key_``)
and reused by every prediction; a killed feature pass resumes (one engine task per block).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np
import zarr

from . import topk
from .backends import dense
from .decode import candidate_features
from .engine import compute, distributed_client, map_blocks, share
from .features import FeatureMap
from .rows import RowSource

__all__ = ["CandidateStore", "candidate_reader", "concatenate_sets"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
_ATTR = "distsketch_candidates"


def _load_path(item: Any) -> Any:
    """Candidates given as a file: ``.npy`` (memory-mapped), or ``.npz`` / ``.zarr`` / ``.h5``
    holding an array named ``X``."""
    if not isinstance(item, (str, os.PathLike)):
        return item
    if os.fspath(item).endswith(".npy"):
        if not os.path.exists(item):
            raise FileNotFoundError(f"candidates file {os.fspath(item)!r} does not exist")
        return np.load(item, mmap_mode="r")
    from .io import load_dataset

    return load_dataset(item, x_key="X", y_key=None)[0]


def concatenate_sets(sets: Sequence, *, width: int | None = None, argument: str = "candidate_sets"):
    """In-memory ragged collection from a sequence of 2-D arrays (or paths).

    Returns
    -------
    (concatenated, offsets) : ndarray of shape (Σ n_s, d), ndarray of int64 (n_sets + 1,)

    Raises ``ValueError`` naming ``argument`` for an empty sequence, an empty set or a set
    whose width differs.
    """
    if isinstance(sets, (str, bytes)) or not isinstance(sets, Sequence):
        raise ValueError(f"{argument}: expected a sequence of 2-D arrays or a CandidateStore")
    if len(sets) == 0:
        raise ValueError(f"{argument}: no candidate sets given")
    arrays, sizes = [], []
    for i, s in enumerate(sets):
        a = dense(_load_path(s))
        if a.ndim != 2:
            raise ValueError(f"{argument}[{i}]: expected a 2-D array of candidate rows, got {a.ndim}-D")
        if a.shape[0] == 0:
            raise ValueError(f"{argument}[{i}]: empty candidate set; every set needs at least one candidate")
        if width is not None and a.shape[1] != width:
            raise ValueError(f"{argument}[{i}]: rows have {a.shape[1]} columns but the model was "
                             f"fitted on outputs with {width}")
        width = a.shape[1]
        arrays.append(a)
        sizes.append(a.shape[0])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return np.concatenate(arrays), offsets


def candidate_reader(data) -> Any:
    """``read(start, stop)`` → a task argument holding candidate rows ``[start, stop)``.

    In-memory arrays are sliced (and scattered once per block on a distributed client);
    zarr arrays are read inside the task; dask arrays become a dependency.
    """
    client = distributed_client()
    if isinstance(data, da.Array):
        return lambda a, b: data[a:b]
    if type(data).__module__.startswith("zarr"):
        return lambda a, b: ("zarr", data, a, b)
    if client is not None:
        return lambda a, b: client.scatter(data[a:b], hash=False)
    return lambda a, b: data[a:b]


class CandidateStore:
    """A zarr group of decoding candidates: one fixed set, or a ragged collection of sets.

    Build with :meth:`create`, reopen with :meth:`open`; pass it to
    ``SISOKR.predict_topk(X, candidates=store)`` (fixed) or ``candidate_sets=store`` (ragged).
    """

    def __init__(self, group: zarr.Group, *, location: str):
        self.group = group
        self.location = location
        meta = dict(group.attrs.get(_ATTR, {}))
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"candidate store {location!r}: not a distsketch candidate store of "
                             f"format {FORMAT_VERSION} (found {meta.get('format_version')!r})")
        self.kind = meta["kind"]
        self.n_candidates = int(meta["n_candidates"])
        self.width = int(meta["width"])
        self.n_sets = int(meta["n_sets"])
        #: identity of this store's contents (new at every ``create``; None for stores written
        #: before it existed): the key of a model's folded decoding cache
        self.token = meta.get("token")

    def __repr__(self) -> str:
        return (f"CandidateStore({self.location!r}, kind={self.kind!r}, "
                f"n_candidates={self.n_candidates}, n_sets={self.n_sets})")

    # -- construction ---------------------------------------------------------------
    @classmethod
    def create(cls, path, candidates=None, *, sets=None, query_sets=None, chunk_rows: int = 16384,
               overwrite: bool = False) -> "CandidateStore":
        """Write a candidate store.

        Parameters
        ----------
        path : str or os.PathLike
            Directory of the zarr group.
        candidates : array of shape (n_c, d), or a path, optional
            A fixed set (numpy, scipy.sparse, dask or zarr array; or a file readable by
            :func:`distsketch.io.load_dataset`). Written chunk by chunk.
        sets : sequence of arrays (or paths), or ``(concatenated, offsets)``, optional
            A ragged collection of per-query sets.
        query_sets : array of int, shape (n_queries,), optional
            The set of each query (ragged only), kept with the store.
        chunk_rows : int
            Candidate rows per stored chunk (and per decoding task).
        overwrite : bool
            Replace an existing store at ``path``.
        """
        if (candidates is None) == (sets is None):
            raise ValueError("CandidateStore.create: give exactly one of candidates= (a fixed set) "
                             "or sets= (per-query sets)")
        where = os.fspath(path)
        if os.path.exists(where) and os.listdir(where):
            if not overwrite:
                raise ValueError(f"CandidateStore.create: {where!r} exists; pass overwrite=True")
            if not _is_candidate_store(where):  # never delete what distsketch did not write
                raise ValueError(f"CandidateStore.create: {where!r} is not a candidate store; "
                                 f"overwrite=True replaces only a candidate store: use a new "
                                 f"or empty path")
        if candidates is not None:
            src = RowSource(_load_path(candidates), argument="candidates")
            n, width, n_sets, offsets = src.n, src.shape[1], 1, None
        else:
            if isinstance(sets, tuple) and len(sets) == 2 and np.ndim(sets[1]) == 1:
                cat, offsets = sets
                offsets = np.asarray(offsets, dtype=np.int64)
                _check_offsets(offsets, len(cat))
            else:
                cat, offsets = concatenate_sets(sets, argument="sets")
            src = RowSource(cat, argument="sets")
            n, width, n_sets = src.n, src.shape[1], len(offsets) - 1
        group = zarr.open_group(os.fspath(path), mode="w")
        dtype = src.data.dtype
        arr = group.create_array("candidates", shape=(n, width), chunks=(min(chunk_rows, n), width),
                                 dtype=dtype)
        for s in range(0, n, chunk_rows):
            block = src.data[s : s + chunk_rows]
            arr[s : s + chunk_rows] = dense(block.compute() if isinstance(block, da.Array) else block)
        if offsets is not None:
            group.create_array("offsets", data=offsets)
            if query_sets is not None:
                qs = _check_query_sets(query_sets, n_sets)
                group.create_array("query_sets", data=qs)
        group.attrs[_ATTR] = {"format_version": FORMAT_VERSION,
                              "kind": "fixed" if offsets is None else "ragged",
                              "n_candidates": int(n), "width": int(width), "n_sets": int(n_sets),
                              "token": uuid.uuid4().hex}
        return cls(group, location=os.fspath(path))

    @classmethod
    def open(cls, path) -> "CandidateStore":
        """Open an existing store (read-write, so features can be cached)."""
        if not os.path.isdir(os.fspath(path)):
            raise FileNotFoundError(f"candidate store {os.fspath(path)!r} does not exist")
        return cls(zarr.open_group(os.fspath(path), mode="r+"), location=os.fspath(path))

    # -- contents -------------------------------------------------------------------
    @property
    def candidates(self) -> zarr.Array:
        return self.group["candidates"]

    @property
    def offsets(self) -> np.ndarray:
        if self.kind != "ragged":
            return np.array([0, self.n_candidates], dtype=np.int64)
        return np.asarray(self.group["offsets"][:], dtype=np.int64)

    @property
    def query_sets(self) -> np.ndarray | None:
        return np.asarray(self.group["query_sets"][:]) if "query_sets" in self.group else None

    @property
    def chunk_rows(self) -> int:
        return int(self.candidates.chunks[0])

    def rows(self, index: np.ndarray) -> np.ndarray:
        """Candidate rows at global positions ``index`` (each in ``[0, n_candidates)``)."""
        index = np.asarray(index, dtype=np.int64)
        order = np.argsort(index, kind="stable")
        out = np.empty((index.size, self.width), dtype=self.candidates.dtype)
        if index.size:
            out[order] = self.candidates.get_orthogonal_selection((index[order], slice(None)))
        return out

    # -- cached features ------------------------------------------------------------
    def cached_features(self, key: str) -> tuple[zarr.Array, zarr.Array] | None:
        """``(phi, kyy)`` for a model key if completely computed, else None."""
        path = f"features/{key}"
        if path in self.group and self.group[path].attrs.get("complete"):
            g = self.group[path]
            return g["phi"], g["kyy"]
        return None

    def ensure_features(self, fmap: FeatureMap, key: str | None = None, *,
                        progress: bool = False):
        """Compute (or resume, or reuse) the features of every candidate for one model.

        Parameters
        ----------
        fmap : FeatureMap
            The model's output features.
        key : str, optional
            Cache key (default ``fmap.key``).

        Returns
        -------
        (phi, kyy) : zarr arrays of shapes (n_c, r_Y) and (n_c,)
        """
        key = fmap.key if key is None else key
        cached = self.cached_features(key)
        if cached is not None:
            return cached
        rows = self.chunk_rows
        n_blocks = -(-self.n_candidates // rows)
        feats = self.group.require_group("features")
        if key in feats and feats[key].attrs.get("width") == fmap.width:
            g = feats[key]
        else:
            g = feats.create_group(key, overwrite=True)
            g.attrs["width"] = fmap.width
            g.create_array("phi", shape=(self.n_candidates, fmap.width),
                           chunks=(rows, fmap.width), dtype="f8", compressors=None)
            g.create_array("kyy", shape=(self.n_candidates,), chunks=(rows,), dtype="f8")
            g.create_array("done", shape=(n_blocks,), chunks=(1,), dtype=bool, fill_value=False)
        done = np.asarray(g["done"][:])
        client = distributed_client()
        shared = (share(fmap, name="features-map", client=client), self.candidates,
                  g["phi"], g["kyy"], g["done"], topk.SCORE_ROWS)
        items = [(int(i), int(i) * rows, min((int(i) + 1) * rows, self.n_candidates))
                 for i in np.flatnonzero(~done)]
        logger.info("candidate store %s: computing features for %d of %d blocks",
                    self.location, len(items), n_blocks)
        if items:
            compute(map_blocks(_feature_block, items, shared=shared, name="candidate-features"),
                    progress=progress, what="candidate features")
        g.attrs["complete"] = True
        return g["phi"], g["kyy"]


def _feature_block(shared, item, ws) -> int:
    """Features of one block of stored candidates, written with its done flag."""
    fmap, cand, phi, kyy, done, tile = shared
    i, start, stop = item
    rows = cand[start:stop]
    phi[start:stop] = candidate_features(fmap, rows, rows=tile)
    kyy[start:stop] = fmap.diag(rows)
    done[i] = True
    return stop - start


def _is_candidate_store(path: str) -> bool:
    try:
        return _ATTR in zarr.open_group(path, mode="r").attrs
    except Exception:
        return False


def _check_offsets(offsets: np.ndarray, n: int) -> None:
    if offsets.ndim != 1 or offsets.size < 2 or offsets[0] != 0 or offsets[-1] != n:
        raise ValueError(f"sets: offsets must run from 0 to the number of concatenated rows ({n})")
    sizes = np.diff(offsets)
    if (sizes <= 0).any():
        bad = int(np.flatnonzero(sizes <= 0)[0])
        raise ValueError(f"sets: set {bad} is empty (or offsets decrease); every set needs at "
                         f"least one candidate")


def _check_query_sets(query_sets, n_sets: int, *, n_queries: int | None = None) -> np.ndarray:
    qs = np.asarray(query_sets)
    if qs.ndim != 1 or not np.issubdtype(qs.dtype, np.integer):
        raise ValueError("query_sets: expected a 1-D array of integer set numbers, one per query")
    if n_queries is not None and qs.size != n_queries:
        raise ValueError(f"query_sets: has {qs.size} entries but there are {n_queries} queries")
    bad = np.flatnonzero((qs < 0) | (qs >= n_sets))
    if bad.size:
        q = int(bad[0])
        raise ValueError(f"query_sets: query {q} points at set {int(qs[q])}, but there are only "
                         f"{n_sets} candidate sets (0 … {n_sets - 1})")
    return qs.astype(np.int64)
