"""Candidate stores: decoding candidates on disk, with output features cached per model.

Layout (one zarr v3 group)::

    <store>/                attrs["distsketch_candidates"] = {format_version, kind, n_candidates,
                                                              width, n_sets, token}
        candidates  (n_c, d_Y)        the candidate rows (their own dtype: bool fingerprints stay bool)
        offsets     (n_sets + 1,)     ragged only: set s is rows offsets[s]:offsets[s+1]
        query_sets  (n_queries,)      ragged, optional: the set of each query
        features/<model key>/phi    (n_c, r_Y)   φ_Y of every candidate for one fitted model
        features/<model key>/kyy    (n_c,)       k_Y(y, y)
        features/<model key>/blocks (n_blocks, 3) uint64 record per candidate chunk
                                     (:data:`FEATURE_RECORD`): BLAKE2b-64 fingerprint of the
                                     chunk's candidate rows, CRC-32 of its phi and kyy chunks;
                                     written after them, so a nonzero record means the chunk
                                     is done (chunk (1, 3))
        features/<model key>/done   (n_blocks,)  written after the record (for readers of the
                                     layout without records; the records decide);
                                     attrs["complete"] when all chunks were written once

A *fixed* store holds one candidate set shared by all queries; a *ragged* store holds per-query
sets concatenated. Features depend only on the model's output side (kernel, landmarks,
projection: the model's output :class:`~distsketch.engine.features.FeatureMap`), not on λ, so they
are computed once per fitted model (keyed by the feature map's ``key``, ``SISOKR.output_key_``)
and reused by every prediction; a killed feature pass resumes (one engine task per block).

Cached features are trusted only as far as their records: every use
(:meth:`CandidateStore.ensure_features`) reads each candidate chunk and its cached features
back, recomputes the chunk's fingerprint and checksums and compares them with the record. A
chunk whose features fail their checksums (damaged, truncated or deleted), or whose candidate
rows changed since its features were computed, is recomputed with a warning naming it, so the
features of other candidates are never used. A store holding a symbolic link is refused.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import time
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np
import zarr
from zarr.codecs import BytesCodec
from zarr.storage import LocalStore

from .._hashing import checksum, data_fingerprint
from ..backends.base import dense
from ..engine.chunkwrite import write_rows
from ..engine.features import FeatureMap
from ..engine.mapreduce import map_blocks, share
from ..engine.rows import RowSource
from ..engine.schedulers import compute, distributed_client
from ..engine.storeguard import StoreError, refuse_links
from ..linalg import topk
from .preimage import candidate_features

__all__ = ["CandidateStore", "candidate_reader", "concatenate_sets", "check_query_sets"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
_ATTR = "distsketch_candidates"

#: Columns of ``features/<key>/blocks``, one uint64 row per candidate chunk (0 everywhere: not
#: computed): fingerprint of the chunk's candidate rows, CRC-32 of its phi and kyy chunks.
FEATURE_RECORD = ("candidates", "phi", "kyy")
_CANDFP, _PHISUM, _KYYSUM = range(len(FEATURE_RECORD))
#: Chunks named in one warning (the rest are counted).
_NAMED = 5


def _load_path(item: Any) -> Any:
    """Candidates given as a file: ``.npy`` (memory-mapped), or ``.npz`` / ``.zarr`` / ``.h5``
    holding an array named ``X``."""
    if not isinstance(item, (str, os.PathLike)):
        return item
    if os.fspath(item).endswith(".npy"):
        if not os.path.exists(item):
            raise FileNotFoundError(f"candidates file {os.fspath(item)!r} does not exist")
        return np.load(item, mmap_mode="r")
    from ..io.loaders import load_dataset

    return load_dataset(item, x_key="X", y_key=None)[0]


def concatenate_sets(sets: Sequence, *, width: int | None = None, argument: str = "candidate_sets"
                     ) -> tuple[np.ndarray, np.ndarray]:
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


def candidate_reader(data: Any) -> Any:
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
    The store also caches each model's candidate features, verified chunk by chunk
    (:meth:`ensure_features`).

    Parameters
    ----------
    group : zarr.Group
        The store's group, written by :meth:`create`.
    location : str
        Its path, for messages.

    Attributes
    ----------
    kind : {"fixed", "ragged"}
        One set for every query, or one set per query.
    n_candidates : int
        Candidate rows in all (every set together).
    width : int
        Columns of a candidate row.
    n_sets : int
        Number of sets (1 for a fixed set).

    Examples
    --------
    >>> import os
    >>> import tempfile
    >>> import numpy as np
    >>> from distsketch import CandidateStore
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     store = CandidateStore.create(os.path.join(tmp, "candidates"),
    ...                                   sets=[np.eye(3), np.ones((2, 3))])
    ...     print(store.kind, store.n_candidates, store.width, store.n_sets)
    ...     print(CandidateStore.open(store.location).rows([4, 0]))
    ragged 5 3 2
    [[1. 1. 1.]
     [1. 0. 0.]]
    """

    def __init__(self, group: zarr.Group, *, location: str) -> None:
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
        #: identity of this store's contents (new at every ``create``, and whenever
        #: :meth:`ensure_features` finds candidates changed since their features were cached;
        #: re-read by it; None for stores written before it existed): the key of a model's
        #: folded decoding cache
        self.token = meta.get("token")

    def __repr__(self) -> str:
        return (f"CandidateStore({self.location!r}, kind={self.kind!r}, "
                f"n_candidates={self.n_candidates}, n_sets={self.n_sets})")

    # -- construction ---------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike, candidates: Any = None, *, sets: Any = None,
               query_sets: Any = None, chunk_rows: int = 16384,
               overwrite: bool = False) -> CandidateStore:
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

        Returns
        -------
        CandidateStore
            The new store, open.
        """
        if (candidates is None) == (sets is None):
            raise ValueError("CandidateStore.create: give exactly one of candidates= (a fixed set) "
                             "or sets= (per-query sets)")
        where = os.fspath(path)
        refuse_links(where, location=where, what="candidate store")
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
                qs = check_query_sets(query_sets, n_sets)
                group.create_array("query_sets", data=qs)
        group.attrs[_ATTR] = {"format_version": FORMAT_VERSION,
                              "kind": "fixed" if offsets is None else "ragged",
                              "n_candidates": int(n), "width": int(width), "n_sets": int(n_sets),
                              "token": uuid.uuid4().hex}
        return cls(group, location=os.fspath(path))

    @classmethod
    def open(cls, path: str | os.PathLike) -> CandidateStore:
        """Open an existing store (read-write, so features can be cached).

        Parameters
        ----------
        path : str or os.PathLike
            Directory of the store.

        Returns
        -------
        CandidateStore
            The store.

        Raises
        ------
        FileNotFoundError
            No directory at ``path``.
        """
        where = os.fspath(path)
        if not os.path.isdir(where):
            raise FileNotFoundError(f"candidate store {where!r} does not exist")
        refuse_links(where, location=where, what="candidate store")
        return cls(zarr.open_group(where, mode="r+"), location=where)

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
        """Candidate rows at global positions (every set's rows numbered together).

        Parameters
        ----------
        index : array-like of int
            Positions, each in ``[0, n_candidates)``.

        Returns
        -------
        ndarray of shape (len(index), width)
            The rows, in the order of ``index``.
        """
        index = np.asarray(index, dtype=np.int64)
        order = np.argsort(index, kind="stable")
        out = np.empty((index.size, self.width), dtype=self.candidates.dtype)
        if index.size:
            out[order] = self.candidates.get_orthogonal_selection((index[order], slice(None)))
        return out

    # -- cached features ------------------------------------------------------------
    def cached_features(self, key: str) -> tuple[zarr.Array, zarr.Array] | None:
        """A model's cached candidate features, if computed for every chunk and intact.

        Every chunk is checked against its record (the fingerprint of its candidate rows, the
        checksums of its features): a damaged chunk, or one whose candidates changed since,
        makes the answer None (:meth:`ensure_features` recomputes it).

        Parameters
        ----------
        key : str
            The model's cache key (``output_key_``).

        Returns
        -------
        tuple of zarr.Array or None
            ``(phi, kyy)``, or None.
        """
        g = self._feature_group(key)
        if g is None or not g.attrs.get("complete"):
            return None
        results = self._run_blocks(None, key, g)
        if any(status != "ok" for _, status, _ in results):
            return None
        return g["phi"], g["kyy"]

    def ensure_features(self, fmap: FeatureMap, key: str | None = None, *,
                        progress: bool = False) -> tuple[zarr.Array, zarr.Array]:
        """Compute (or resume, or reuse) the features of every candidate for one model.

        Cached chunks are verified first (one task per chunk: the candidate rows' fingerprint
        and the features' checksums compared with the chunk's record); a chunk that was never
        written is computed, one that fails its checksums or whose candidates changed is
        recomputed with a warning naming it. Changed candidates also give the store a new
        :attr:`token`, so nothing folded from the old candidates is reused.

        Parameters
        ----------
        fmap : FeatureMap
            The model's output features.
        key : str, optional
            Cache key (default ``fmap.key``).
        progress : bool, default False
            Show dask's progress bar.

        Returns
        -------
        phi : zarr.Array of shape (n_c, r_Y)
            The candidates' features.
        kyy : zarr.Array of shape (n_c,)
            ``k_Y(y, y)`` of each candidate.
        """
        key = fmap.key if key is None else key
        g = self._feature_group(key, width=fmap.width)
        results = self._run_blocks(fmap, key, g, progress=progress)
        self._report(key, results)
        if not g.attrs.get("complete"):
            g.attrs["complete"] = True
        meta = dict(self.group.attrs.get(_ATTR, {}))
        if any(status == "changed" for _, status, _ in results):
            # the contents changed: what was derived from the old ones (a model's folded
            # candidates, keyed by the token) must not be reused
            meta["token"] = uuid.uuid4().hex
            self.group.attrs[_ATTR] = meta
        self.token = meta.get("token")
        return g["phi"], g["kyy"]

    def _feature_group(self, key: str, *, width: int | None = None) -> zarr.Group | None:
        """The group of a model's features: opened when its arrays have the expected layout;
        with ``width`` (a writer) created (replacing one of another layout), else None."""
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", key):
            raise ValueError(f"candidate store {self.location!r}: feature cache key {key!r} is "
                             f"not a plain name (letters, digits, '_', '.', '-')")
        rows = self.chunk_rows
        n_blocks = -(-self.n_candidates // rows)
        path = f"features/{key}"
        g = None
        if path in self.group:
            try:
                g = self.group[path]
                w = g.attrs.get("width") if width is None else width
                ok = (g.attrs.get("width") == w
                      and g["phi"].shape == (self.n_candidates, w)
                      and g["phi"].chunks == (rows, w)
                      and g["kyy"].shape == (self.n_candidates,) and g["kyy"].chunks == (rows,)
                      and g["blocks"].shape == (n_blocks, len(FEATURE_RECORD))
                      and g["done"].shape == (n_blocks,))
            except Exception as exc:  # missing or unreadable array metadata
                logger.info("candidate store %s: features %s unreadable (%s)", self.location,
                            path, exc)
                ok = False
            if ok:
                return g
            if width is not None and g is not None and "blocks" in g and \
                    g.attrs.get("width") == width:
                warnings.warn(f"candidate store {self.location!r}: cached features {path!r} are "
                              f"damaged (their arrays do not have the layout of this store); "
                              f"recomputing all of them", RuntimeWarning, stacklevel=4)
        if width is None:
            return None
        feats = self.group.require_group("features")
        g = feats.create_group(key, overwrite=True)
        g.attrs["width"] = width
        g.create_array("phi", shape=(self.n_candidates, width), chunks=(rows, width),
                       dtype="f8", compressors=None)
        g.create_array("kyy", shape=(self.n_candidates,), chunks=(rows,), dtype="f8")
        g.create_array("blocks", shape=(n_blocks, len(FEATURE_RECORD)),
                       chunks=(1, len(FEATURE_RECORD)), dtype="uint64", fill_value=0,
                       compressors=None)
        g.create_array("done", shape=(n_blocks,), chunks=(1,), dtype=bool, fill_value=False)
        return g

    def _run_blocks(self, fmap: FeatureMap | None, key: str, g: zarr.Group, *,
                    progress: bool = False) -> list:
        """One task per candidate chunk: verify its record, and (with ``fmap``) compute what
        is missing, damaged or stale. Returns ``[(chunk, status, detail)]`` in chunk order."""
        rows = self.chunk_rows
        n_blocks = -(-self.n_candidates // rows)
        records = _read_records(g["blocks"], n_blocks)
        items = [(i, i * rows, min((i + 1) * rows, self.n_candidates),
                  tuple(int(v) for v in records[i])) for i in range(n_blocks)]
        todo = int((records[:, _CANDFP] == 0).sum())
        if fmap is not None:
            logger.info("candidate store %s: computing features for %d of %d blocks, "
                        "verifying %d", self.location, todo, n_blocks, n_blocks - todo)
        client = distributed_client()
        fref = None if fmap is None else share(fmap, name="features-map", client=client)
        shared = (fref, self.candidates, g["phi"], g["kyy"], g["blocks"], g["done"],
                  topk.SCORE_ROWS, self.location)
        if not items:
            return []
        return compute(map_blocks(_feature_block, items, shared=shared,
                                  name="candidate-features"),
                       progress=progress, what="candidate features")

    def _report(self, key: str, results: list) -> None:
        """Warn about chunks recomputed because they were damaged or their candidates
        changed (in chunk order)."""
        rows = self.chunk_rows
        for cause, text in (
                ("damaged", "fail their checksums (damaged, truncated or deleted)"),
                ("changed", "belong to candidate rows that changed since the features were "
                            "computed")):
            bad = [(i, detail) for i, status, detail in results if status == cause]
            if not bad:
                continue
            named = "; ".join(
                f"{detail} (chunk {i}, candidate rows {i * rows}–"
                f"{min((i + 1) * rows, self.n_candidates) - 1})" for i, detail in bad[:_NAMED])
            more = f" and {len(bad) - _NAMED} more chunks" if len(bad) > _NAMED else ""
            warnings.warn(f"candidate store {self.location!r}: cached features of model key "
                          f"{key!r} {text}: {named}{more}; recomputed from the candidates",
                          RuntimeWarning, stacklevel=3)


def _chunk_name(array: zarr.Array, i: int) -> str:
    """Path of chunk ``i`` (along rows) of a stored array, inside the store."""
    index = (i,) + (0,) * (array.ndim - 1)
    return f"{array.path}/{array.metadata.encode_chunk_key(index)}"


def _read_records(blocks: zarr.Array, n_blocks: int) -> np.ndarray:
    """The per-chunk records; an unreadable record (a truncated file) reads as 0: not done."""
    try:
        return np.asarray(blocks[:], dtype=np.uint64).reshape(n_blocks, len(FEATURE_RECORD))
    except Exception:
        out = np.zeros((n_blocks, len(FEATURE_RECORD)), dtype=np.uint64)
        for i in range(n_blocks):
            try:
                out[i] = np.asarray(blocks[i], dtype=np.uint64)
            except Exception as exc:
                logger.info("features record %d unreadable (%s): recomputing it", i, exc)
        return out


def _stored_damage(phi: zarr.Array, kyy: zarr.Array, i: int, start: int, stop: int,
                   record: tuple) -> str | None:
    """None when chunk ``i`` of the cached features has its recorded checksums, else the name
    of the first chunk file that fails."""
    for array, column in ((phi, _PHISUM), (kyy, _KYYSUM)):
        try:
            ok = _chunk_checksum(array, i, start, stop) == record[column]
        except Exception as exc:  # a truncated or unreadable chunk
            logger.debug("chunk %s unreadable: %s", _chunk_name(array, i), exc)
            ok = False
        if not ok:
            return _chunk_name(array, i)
    return None


def _chunk_checksum(array: zarr.Array, i: int, start: int, stop: int) -> int:
    """:func:`checksum` of rows ``[start, stop)`` (chunk ``i``) as stored.

    An uncompressed little-endian chunk of a local store (``phi``) is checksummed in place
    from its file, memory-mapped (no copy; its leading bytes are the rows, a partial last
    chunk being stored at full size); any other chunk, or a chunk without a file (never
    written because it held only the fill value), is read through zarr.
    """
    store, serializer = array.store, array.serializer
    if (isinstance(store, LocalStore) and not array.compressors and not array.filters
            and array.shards is None and isinstance(serializer, BytesCodec)
            and getattr(serializer.endian, "value", None) in ("little", None)):
        dtype = np.dtype(array.dtype)
        row_bytes = dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
        full = array.chunks[0] * row_bytes
        try:
            f = open(os.path.join(str(store.root), _chunk_name(array, i)), "rb")
        except FileNotFoundError:
            f = None
        if f is not None:
            with f:
                if os.fstat(f.fileno()).st_size != full:
                    raise ValueError("chunk file has the wrong size (truncated?)")
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    view = np.frombuffer(mm, dtype=np.uint8, count=(stop - start) * row_bytes)
                    try:
                        return checksum(view)
                    finally:
                        del view
    return checksum(np.asarray(array[start:stop]))


#: Chunks verified by this process, by the state of their files: ``(record, (inode, size,
#: mtime, ctime) of the candidate, phi and kyy chunk files)``. A chunk whose files are in a
#: state already verified (or written) here is not read again: a decode from cached features
#: reads them once, not twice. Any write to a file changes its ctime (which no user call can
#: set back), so an edited or replaced chunk is verified again; a fresh process verifies
#: every chunk once.
_VERIFIED: set = set()
_VERIFIED_MAX = 1 << 20
#: File timestamps may advance by clock ticks (4 ms on some kernels): a file verified within
#: this long of its last change is not remembered as verified.
_RACY_NS = 50_000_000


def _file_state(array: zarr.Array, i: int) -> tuple | None:
    """``(inode, size, mtime_ns, ctime_ns)`` of chunk ``i``'s file in a local store; None
    when the chunk has no file (never written, or not a local store: always verified)."""
    if not isinstance(array.store, LocalStore):
        return None
    try:
        st = os.stat(os.path.join(str(array.store.root), _chunk_name(array, i)))
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _chunk_state(arrays, i: int, record: tuple, location: str) -> tuple | None:
    """The verification key of chunk ``i`` (None: its files cannot be identified)."""
    states = tuple(_file_state(a, i) for a in arrays)
    if any(st is None for st in states):
        return None
    return os.path.abspath(location), i, tuple(record), states


def _remember(state: tuple | None) -> None:
    if state is None:
        return
    if len(_VERIFIED) >= _VERIFIED_MAX:
        _VERIFIED.clear()
    _VERIFIED.add(state)


def _feature_block(shared, item, ws) -> tuple[int, str, str]:
    """Verify one chunk of cached features against its record; with a feature map, compute
    it when it is missing, damaged or stale: the features, then the record (so a chunk killed
    mid-write has no record), then its done flag.

    Returns ``(chunk, status, detail)``: status ``"ok"`` (verified), ``"missing"`` (never
    written), ``"damaged"`` (detail: the failing chunk file) or ``"changed"`` (detail: the
    candidate chunk whose rows differ from those the features were computed from).
    """
    fmap, cand, phi, kyy, blocks, done, tile, location = shared
    i, start, stop, record = item
    if record[_CANDFP] and _chunk_state((cand, phi, kyy), i, record, location) in _VERIFIED:
        return i, "ok", ""
    try:
        rows = np.asarray(cand[start:stop])
    except Exception as exc:  # the candidates themselves: nothing to recompute them from
        raise StoreError(f"candidate store {location!r}: candidate chunk {_chunk_name(cand, i)!r} "
                         f"(rows {start}–{stop - 1}) cannot be read ({type(exc).__name__}: "
                         f"{exc}); the candidates are damaged: create the store again from "
                         f"the source data") from None
    fp = data_fingerprint(rows)
    if not record[_CANDFP]:
        status, detail = "missing", ""
    elif record[_CANDFP] != fp:
        status, detail = "changed", _chunk_name(cand, i)
    else:
        state = _chunk_state((cand, phi, kyy), i, record, location)  # before reading
        detail = _stored_damage(phi, kyy, i, start, stop, record)
        if detail is None:
            if state is not None and time.time_ns() - max(st[3] for st in state[3]) > _RACY_NS:
                _remember(state)  # (a file changed within a clock tick of the stat may not
            return i, "ok", ""    # show it in its ctime: verified again next time)
        status = "damaged"
    if fmap is None:
        return i, status, detail
    if any(record):
        blocks[i] = np.zeros(len(FEATURE_RECORD), dtype=np.uint64)  # not done while rewritten
    F = np.ascontiguousarray(candidate_features(fmap, rows, rows=tile), dtype=np.float64)
    K = np.ascontiguousarray(fmap.diag(rows), dtype=np.float64)
    write_rows(phi, start, F)
    kyy[start:stop] = K
    new_record = np.array([fp, checksum(F), checksum(K)], dtype=np.uint64)
    blocks[i] = new_record
    done[i] = True
    _remember(_chunk_state((cand, phi, kyy), i, tuple(int(v) for v in new_record), location))
    return i, status, detail


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


def check_query_sets(query_sets: Any, n_sets: int, *, n_queries: int | None = None) -> np.ndarray:
    """``query_sets`` as an integer array, one set number in ``[0, n_sets)`` per query (and
    ``n_queries`` entries when given); anything else is refused with a ``ValueError``."""
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
