"""The zarr store of one fit: sketched blocks, reduced sums, configuration, completeness.

Layout (one zarr v3 group per fit)::

    <store>/                      attrs["distsketch"] = {format_version, version, status, pass,
                                                         holder, sums: {name: digest}}
        pass/C      (n, m_X)      K_X R_Xᵀ, chunks (block_rows, m_X)
        pass/D      (n, m_Y)      K_Y R_Yᵀ (sketched structured outputs only)
        pass/blocks (n_blocks, 5) uint64 record per block (:data:`RECORD`): the writing fit's
                                  token, fingerprints of the block's input and output/target
                                  rows, CRC-32 of its C and D chunks; written after them, so
                                  a nonzero record means the block is done (chunk (1, 5))
        sums/<name>               the reduced sums the model asked for (float64: G, B, M, E,
                                  b; C, D, Y assembled for an exact side), see
                                  distsketch.engine.sums
        sums/U_rows, sums/U_index unique output rows, first training row (a row-set sum)
        batches/<k>/              rows appended by partial_fit, one pass each, laid out as
                                  the root's pass/ and sums/ (distsketch.engine.batchstore)

``status`` moves ``"pass"`` → ``"pass-complete"`` (all blocks done, sums written)
→ ``"saving-model"`` (a model being written by :mod:`distsketch.io.persist`) → ``"solved"``
(the model is stored). A store written by ``save`` alone, without a pass, starts as
``"model-only"``. Anything else — a run killed or failed mid-way — is an incomplete store: it
resumes when fitted again with the same configuration, and is never read as a finished pass
or loaded as a model.

What a store guarantees — data identity, checksums, one writer, never deleting what distsketch
did not write, never reading or writing outside its directory (a local store holding a
symbolic link is refused when opened:
:func:`~distsketch.engine.storeguard.refuse_links`) — is described in docs/design/store.md,
and README, "What the store guarantees". The store's errors and its lock are in
:mod:`distsketch.engine.storeguard`; the pass's block writes in
:mod:`distsketch.engine.chunkwrite`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
import warnings
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from .._hashing import checksum
from .._version import __version__
from .storeguard import StoreError, StoreLock, refuse_links

__all__ = ["FORMAT_VERSION", "FitStore", "StoreDirectory", "RECORD", "TOKEN", "XFP", "YFP", "CSUM",
           "DSUM", "expected_store_bytes", "new_token", "open_fit_store", "read_records"]

logger = logging.getLogger(__name__)

#: Version of the on-disk layout; a store with another version is refused.
#: 2: per-block records (fit token, data fingerprints, checksums), checksummed sums, a lock.
FORMAT_VERSION = 2
_ATTR = "distsketch"
#: The groups distsketch writes at the root of a fit's store: the pass, its sums, the saved
#: model, solver states, appended batches.
_LAYOUT = ("pass", "sums", "model", "solver", "batches")


#: Columns of ``pass/blocks``, one uint64 row per row block (0 everywhere: not done).
RECORD = ("token", "x", "y", "c", "d")
#: Column indices of :data:`RECORD` (the pass and the Lipschitz routes read the records).
TOKEN, XFP, YFP, CSUM, DSUM = range(len(RECORD))


def read_records(array: zarr.Array, *, location: str) -> np.ndarray:
    """The per-block records of ``pass/blocks`` (n_blocks × len(RECORD), uint64).

    A record whose chunk cannot be read (truncated, or otherwise not decodable) reads as a row
    of zeros: its block is not done, and is computed again. Read in one go; record by record
    (one chunk each) only when that fails.
    """
    try:
        return np.asarray(array[:], dtype=np.uint64)
    except Exception:
        pass
    out = np.zeros((array.shape[0], len(RECORD)), dtype=np.uint64)
    damaged = []
    for i in range(array.shape[0]):
        try:
            out[i] = np.asarray(array[i], dtype=np.uint64)
        except Exception:
            damaged.append(i)
    if damaged:
        logger.warning("store %s: the records of blocks %s cannot be read (damaged); those "
                       "blocks are computed again", location, damaged)
    return out


def new_token() -> int:
    """A fit token: a random nonzero 63-bit integer naming one fit attempt's writes."""
    return int.from_bytes(os.urandom(8), "little") >> 1 or 1


class FitStore:
    """Handle on the zarr group of one fit.

    Use :func:`open_fit_store` to create one; as a context manager it releases the store's
    lock (:meth:`close`) on exit.

    Attributes
    ----------
    token : int
        This handle's fit token, written with every block it writes (``pass/blocks``), so
        that blocks written by another fit (or by orphaned workers of a dead one) are never
        counted as this fit's.
    """

    def __init__(self, group: zarr.Group, *, location: str, temporary: bool,
                 lock: StoreLock | None = None, directory: str | None = None):
        self.group = group
        self.location = location
        self.temporary = temporary
        self.lock = lock
        #: the store's local directory (None: in memory, or a store zarr reaches otherwise)
        self.directory = directory
        self.token = new_token()

    def __enter__(self) -> "FitStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- metadata -----------------------------------------------------------------
    @property
    def meta(self) -> dict:
        try:
            meta = self.group.attrs.get(_ATTR, {})
        except Exception as exc:  # unreadable zarr.json
            raise StoreError(f"store {self.location!r}: its metadata cannot be read ({exc}); "
                             f"fit again with EngineOptions(overwrite=True) to start it afresh, "
                             f"or use a new path") from None
        if not isinstance(meta, dict):
            raise StoreError(f"store {self.location!r}: its metadata is damaged (distsketch "
                             f"attributes are not a mapping); fit again with "
                             f"EngineOptions(overwrite=True) to start it afresh, or use a new "
                             f"path")
        return dict(meta)

    def meta_or_none(self) -> dict | None:
        """:attr:`meta`, or None where it is damaged (a fit with ``overwrite=True`` replaces it:
        :meth:`prepare_pass`)."""
        try:
            return self.meta
        except StoreError:
            return None

    def recorded_seed(self, side: str) -> int | None:
        """The sketch seed the recorded pass drew for ``side`` (``"input"``, ``"output"``), or
        None where there is none or the record is damaged (no seed source: the store is
        refused, or with ``overwrite=True`` replaced, when the pass is prepared)."""
        recorded = (self.meta_or_none() or {}).get("pass")
        entry = recorded.get(side) if isinstance(recorded, dict) else None
        sketch = entry.get("sketch") if isinstance(entry, dict) else None
        seed = sketch.get("seed") if isinstance(sketch, dict) else None
        return seed if isinstance(seed, int) and not isinstance(seed, bool) else None

    def _set_meta(self, **updates: Any) -> None:
        self.update_meta(**updates)

    def update_meta(self, **updates: Any) -> None:
        """Set entries of the store's distsketch attributes (the others kept)."""
        meta = self.meta
        meta.update(updates)
        self.group.attrs[_ATTR] = meta

    @property
    def status(self) -> str | None:
        return self.meta.get("status")

    @property
    def pass_complete(self) -> bool:
        """Whether the sums of the recorded pass are stored (status ``pass-complete``,
        ``saving-model`` or ``solved``)."""
        meta = self.meta
        return "sums" in meta and meta.get("status") in ("pass-complete", "saving-model",
                                                          "solved")

    # -- the pass -----------------------------------------------------------------
    def prepare_pass(self, config: dict, *, overwrite: bool) -> bool:
        """Create the pass arrays for ``config``, or keep them if they match (resume).

        Returns True when an existing pass with the same configuration was found, its arrays
        intact (:meth:`_pass_damage`). Raises :class:`StoreError` if the store holds a different
        fit (or a saved model without a pass), another store format, or damaged metadata,
        and ``overwrite`` is False, before anything is written; with ``overwrite`` the store
        is started afresh (:meth:`reset`).
        """
        try:
            meta = self.meta
        except StoreError as exc:
            if not overwrite:
                raise
            logger.warning("%s; overwrite=True: computing the pass afresh", exc)
            self.reset(config)
            return False
        if meta:
            version = meta.get("format_version")
            existing = meta.get("pass")
            if version != FORMAT_VERSION:
                if not overwrite:
                    raise StoreError(
                        f"store {self.location!r} was written with store format {version}, "
                        f"this is distsketch {__version__} (format {FORMAT_VERSION}); refit "
                        f"into a new store, or with EngineOptions(overwrite=True) to replace it")
                logger.info("store %s: overwriting a store of format %s", self.location, version)
            elif existing == config:
                damage = self._pass_damage(config)
                if damage is None:
                    logger.info("store %s: resuming the pass recorded there", self.location)
                    return True
                if not overwrite:
                    raise StoreError(
                        f"store {self.location!r}: the stored pass is damaged: {damage}; fit "
                        f"again with EngineOptions(overwrite=True) to compute it afresh, or "
                        f"use a new path")
                logger.warning("store %s: the stored pass is damaged: %s; overwrite=True: "
                               "computing it afresh", self.location, damage)
            elif not overwrite:
                what = ("a saved model" if existing is None
                        else "a fit whose recorded configuration is damaged (not a mapping)"
                        if not isinstance(existing, dict)
                        else f"a fit with a different configuration (differs in "
                             f"{_differences(existing, config)}{_hint(existing, config)})")
                raise StoreError(
                    f"store: {self.location!r} already holds {what}; to resume a fit, fit "
                    f"with the same data, random_state and options, otherwise use a new path "
                    f"or EngineOptions(overwrite=True)")
            else:
                logger.info("store %s: overwriting a different fit", self.location)
        self.reset(config)
        return False

    def _pass_damage(self, config: dict) -> str | None:
        """What is wrong with the stored pass arrays of ``config`` (None: their metadata is
        what ``config`` makes: present, of its shapes, chunks and dtypes). Their contents are
        checked block by block by the pass (checksums)."""
        if self.temporary:
            return None
        n, b = config["n"], config["block_rows"]
        expected = {}
        for name, m in (("C", config["m_x"]), ("D", config.get("m_y"))):
            if m:
                expected[name] = ((n, m), (b, m), np.dtype(config["block_dtype"]))
        expected["blocks"] = ((-(-n // b), len(RECORD)), (1, len(RECORD)), np.dtype("uint64"))
        try:
            grp = self.group["pass"]
        except KeyError:
            return "the group 'pass' is missing (no pass/zarr.json)"
        except Exception as exc:
            return f"the group 'pass' cannot be read ({_brief(exc)})"
        if not isinstance(grp, zarr.Group):
            return "'pass' is not a group"
        for name, want in expected.items():
            try:
                arr = grp[name]
                if not isinstance(arr, zarr.Array):
                    return f"'pass/{name}' is not an array"
                have = (tuple(arr.shape), tuple(arr.chunks), np.dtype(arr.dtype))
            except KeyError:
                return f"the array 'pass/{name}' is missing (no pass/{name}/zarr.json)"
            except Exception as exc:
                return f"the array 'pass/{name}' cannot be read ({_brief(exc)})"
            if have != want:
                return (f"the array 'pass/{name}' has shape {have[0]}, chunks {have[1]} and "
                        f"dtype {have[2]}, where this fit needs {want[0]}, {want[1]} and "
                        f"{want[2]}")
        return None

    def reset(self, config: dict) -> None:
        """Start the pass of ``config`` afresh: the store's arrays replaced by empty ones.

        What is deleted is the store's zarr members and the groups distsketch writes there
        (:data:`_LAYOUT`, also where their metadata is lost), never what a link points to: a
        local store holding a link is refused first (:func:`refuse_links`)."""
        if self.directory is not None:
            refuse_links(self.directory, location=self.location)
        try:
            with warnings.catch_warnings():
                # zarr warns of a directory without metadata (a damaged member): it goes too
                warnings.simplefilter("ignore", UserWarning)
                names = set(self.group.keys())
        except Exception:  # a member's metadata is unreadable: the layout's groups still go
            names = set()
        if self.directory is not None:
            names |= {name for name in _LAYOUT
                      if os.path.isdir(os.path.join(self.directory, name))}
        for name in sorted(names):
            del self.group[name]
        self.group.attrs[_ATTR] = {
            "format_version": FORMAT_VERSION,
            "version": __version__,
            "status": "pass",
            "pass": config,
            "holder": _holder(self.token),
        }
        if self.temporary:  # nothing to resume from: the blocks are not written
            return
        n, b = config["n"], config["block_rows"]
        n_blocks = -(-n // b)
        grp = self.group.require_group("pass")
        dtype = config["block_dtype"]
        for name, m in (("C", config["m_x"]), ("D", config.get("m_y"))):
            if m:
                grp.create_array(name, shape=(n, m), chunks=(b, m), dtype=dtype,
                                 fill_value=0.0, compressors=None)
        grp.create_array("blocks", shape=(n_blocks, len(RECORD)), chunks=(1, len(RECORD)),
                         dtype="uint64", fill_value=0, compressors=None)

    def pass_arrays(self) -> tuple[zarr.Array | None, zarr.Array | None, zarr.Array | None]:
        """``C``, ``D`` (or None) and the per-block records ``pass/blocks``; all None for a
        temporary fit, whose pass keeps only its sums."""
        if self.temporary:
            return None, None, None
        grp = self.group["pass"]
        return grp["C"], (grp["D"] if "D" in grp else None), grp["blocks"]

    def records(self) -> np.ndarray:
        """The per-block records (n_blocks × len(RECORD), uint64; a row of zeros: not done)."""
        return read_records(self.group["pass/blocks"], location=self.location)

    def done_blocks(self) -> np.ndarray:
        """Which row blocks are stored (their record is written)."""
        return self.records()[:, TOKEN] != 0

    def write_sums(self, sums: dict[str, Any]) -> None:
        """Store the reduced sums with their checksums and mark the pass complete.

        A value is an array (float sums are stored as float64) or a pair ``(rows, index)`` of
        a row set (unique output rows and their first training row), stored as
        ``<name>_rows`` and ``<name>_index``; a uint64 sum (the rows' digest) stays uint64.
        """
        if self.temporary:  # never read back
            self._set_meta(status="pass-complete", sums={})
            return
        grp = self.group.require_group("sums")
        digests = {}
        for key, value in sums.items():
            if isinstance(value, tuple):
                rows, index = value
                arrays = {f"{key}_rows": np.asarray(rows),
                          f"{key}_index": np.asarray(index, dtype=np.int64)}
            else:  # a digest (uint64) kept exact
                arr = np.asarray(value)
                arrays = {key: arr if arr.dtype == np.uint64 else arr.astype(np.float64)}
            for name, arr in arrays.items():
                grp.create_array(name, data=arr, overwrite=True)
                digests[name] = _array_digest(arr)
        self._set_meta(status="pass-complete", sums=digests)

    def read_sums(self) -> dict[str, Any]:
        """The sums of a complete pass, by name (row sets as ``(rows, index)`` pairs), each
        checked against its recorded checksum."""
        if not self.pass_complete:
            raise StoreError(f"store {self.location!r}: the pass is not complete")
        digests = self.meta["sums"]
        if not isinstance(digests, dict):
            raise StoreError(f"store {self.location!r}: the record of its sums is damaged (not "
                             f"a mapping); fit again with EngineOptions(overwrite=True)")
        arrays = {}
        for name, digest in digests.items():
            try:
                arr = np.asarray(self.group["sums"][name][...])
            except Exception as exc:
                raise StoreError(f"store {self.location!r}: sums/{name} cannot be read "
                                 f"({_brief(exc)}); fit again with "
                                 f"EngineOptions(overwrite=True)") from None
            if _array_digest(arr) != digest:
                raise StoreError(f"store {self.location!r}: sums/{name} does not match its "
                                 f"checksum (damaged); fit again with "
                                 f"EngineOptions(overwrite=True)")
            arrays[name] = arr
        out: dict[str, Any] = {}
        for key in sorted(arrays):
            if key.endswith("_rows") and f"{key[:-5]}_index" in arrays:
                out[key[:-5]] = (arrays[key], arrays[f"{key[:-5]}_index"])
            elif not (key.endswith("_index") and f"{key[:-6]}_rows" in arrays):
                out[key] = arrays[key]
        return out

    def mark(self, status: str) -> None:
        self._set_meta(status=status)

    def close(self) -> None:
        """Release the store's lock (and forget a temporary store, which lives in memory)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if self.temporary:
            self.group = None

    discard = close


def _array_digest(arr: np.ndarray) -> str:
    """CRC-32 of an array with its dtype and shape, as stored in the metadata."""
    return f"{np.dtype(arr.dtype).str}{tuple(arr.shape)}:{checksum(arr):x}"


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two JSON-like configurations differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _differences(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def _hint(a: dict, b: dict) -> str:
    """What a difference in the recorded pre-whitening means, or ``""``."""
    diffs = [d for d in _differences(a, b) if "whiten" in d]
    if any(d.endswith(".whitened") for d in diffs):
        return ("; a pass whitened before it and one that is not differ in their blocks: "
                "fit with the EngineOptions.prewhiten the store was written with (False for "
                "a store without 'whitened' in its recorded sketch)")
    if diffs:
        return ("; the whitening computed before the pass differs from the recorded one (its "
                "threshold EngineOptions.rtol, or another BLAS library or CPU, whose rounding "
                "differs)")
    return ""


def _is_distsketch(group: zarr.Group) -> bool:
    try:
        return _ATTR in group.attrs
    except Exception:
        return False


def _refuse_foreign(group: zarr.Group | None, location: str, directory: str | None) -> None:
    """Never write into what distsketch did not write: a non-empty directory that is not a
    zarr group, or a zarr group with content that is not a distsketch store."""
    if directory is not None and os.path.isdir(directory):
        entries = os.listdir(directory)
        if entries and not os.path.exists(os.path.join(directory, "zarr.json")):
            raise StoreError(
                f"store: {location!r} is a non-empty directory that is not a distsketch store "
                f"(it holds {sorted(entries)[:3]}); distsketch never deletes what it did not "
                f"write: use a new or empty path")
    if group is not None and not _is_distsketch(group):
        members = sorted(group.keys())
        if members or dict(group.attrs):
            raise StoreError(
                f"store: {location!r} is a zarr group that is not a distsketch store (it holds "
                f"{members[:3] or 'attributes'}); distsketch never deletes what it did not "
                f"write, overwrite=True or not: use a new or empty path (a distsketch store "
                f"whose root metadata lost its attributes is refused too: delete it, or move "
                f"it aside, yourself)")


def open_fit_store(store: Any, *, lock: bool = False) -> FitStore:
    """Open (or create) the group of a fit, refusing what is not a distsketch store.

    Parameters
    ----------
    store : None, str, os.PathLike or zarr.Group
        ``None``: a temporary fit, its metadata and sums in a zarr ``MemoryStore`` and
        no pass blocks written anywhere (nothing could resume from them);
        a path (kept) is opened with zarr's local store.
    lock : bool
        Take the store's fit lock (local stores), released by ``close``: a second writer is
        refused with an error naming the holder. Writers (a fit, ``save``) take it; without
        it the store is opened read-only (it must exist), for inspection.
    """
    if store is None:
        group = zarr.open_group(zarr.storage.MemoryStore(), mode="a")
        return FitStore(group, location="<memory>", temporary=True)
    if isinstance(store, zarr.Group):
        directory = (str(store.store.root / store.path) if isinstance(store.store, LocalStore)
                     else None)
        location = str(store.store_path)
        group = store
    elif isinstance(store, (str, os.PathLike)):
        path = os.fspath(store)
        if not path.strip():
            raise StoreError("store: an empty path; give a directory path for the fit's store, "
                             "or store=None to keep nothing")
        if os.path.exists(path) and not os.path.isdir(path):
            raise StoreError(f"store: {path!r} exists and is not a directory")
        # absolute: the arrays are pickled into tasks, which may run on workers started in
        # another working directory
        directory, location, group = os.path.abspath(path), path, None
    else:
        raise ValueError(f"store: expected None, a directory path or a zarr.Group, got {store!r}")
    _refuse_foreign(group, location, directory)
    store_lock = None
    try:
        if lock and directory is not None:
            # the lock first (it writes nothing in the store): a second writer is told who
            # holds the store, rather than tripping over the first one's writes
            store_lock = StoreLock(directory)
            store_lock.acquire(location=location, holder=lambda: _recorded_holder(directory))
        if directory is not None:
            # before anything is read or written: no path of the store leaves its directory
            refuse_links(directory, location=location)
        if group is None:
            if not lock and not os.path.isdir(directory):
                raise FileNotFoundError(f"store {location!r} does not exist")
            try:
                # a reader (no lock) never creates or changes a store
                group = zarr.open_group(directory, mode="a" if lock else "r")
            except Exception as exc:
                raise StoreError(
                    f"store {location!r}: cannot be opened as a zarr group: its root metadata "
                    f"(zarr.json) is damaged or missing ({_brief(exc)}), so distsketch cannot "
                    f"tell whether it wrote this directory and will neither rewrite nor delete "
                    f"it, overwrite=True or not: if it is a distsketch store, delete it (or "
                    f"move it aside) and fit again; otherwise use a new path") from None
            _refuse_foreign(group, location, None)
        fs = FitStore(group, location=location, temporary=False, directory=directory)
        if store_lock is not None:
            fs.lock = store_lock
            if fs.meta_or_none():
                fs._set_meta(holder=_holder(fs.token))
    except BaseException:
        if store_lock is not None:
            store_lock.release()
        raise
    return fs


def _recorded_holder(directory: str) -> str:
    """The holder named in a store's root metadata (read without following a link), for the
    message refusing a second writer; "unknown" where it cannot be read."""
    try:
        fd = os.open(os.path.join(directory, "zarr.json"),
                     os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            holder = json.load(f)["attributes"][_ATTR]["holder"]
        return holder if isinstance(holder, str) else "unknown"
    except Exception:
        return "unknown"


def _brief(exc: BaseException) -> str:
    """An exception as ``Type: message`` (a bare ``KeyError`` says only the key)."""
    return f"{type(exc).__name__}: {exc}"


class StoreDirectory:
    """A directory of fit stores, one per pass configuration: ``store=StoreDirectory(path)``.

    For estimators that are cloned and fitted many times — ``GridSearchCV``,
    ``cross_val_score``, a λ or kernel search — with stores kept: each fit opens (resumes,
    reuses) the store ``path/<key>`` of its own pass, ``key`` a hash of the pass configuration
    (model, kernels, realised sketches with their seeds, landmarks, data shape, block layout),
    so folds never collide and a refit of the same configuration resumes or reuses its store
    (its data verified block by block). Give a ``random_state``: without one every fit draws
    new sketches, hence a new store. Each store holds its own blocks: mind the disk.
    ``store_`` of a fitted estimator is the store it used.

    Parameters
    ----------
    path : str or os.PathLike
        The directory (created on the first fit).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"StoreDirectory({os.fspath(self.path)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, StoreDirectory) and os.fspath(other.path) == os.fspath(self.path)

    def __hash__(self) -> int:
        return hash(os.fspath(self.path))

    def location(self, config: dict) -> str:
        """The store path of a pass configuration.

        Parameters
        ----------
        config : dict
            The pass configuration (JSON-serialisable; its ``"model"`` names the store).

        Returns
        -------
        str
            ``path/<model>-<key>.zarr``, ``key`` a hash of ``config``.
        """
        key = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
        return os.path.join(os.fspath(self.path), f"{config.get('model', 'fit')}-{key}.zarr")

    def open(self, config: dict) -> FitStore:
        """Open (and lock) the store of ``config``, creating the directory if needed.

        Parameters
        ----------
        config : dict
            The pass configuration, as for :meth:`location`.

        Returns
        -------
        FitStore
            The store at :meth:`location`, locked for this fit.

        Raises
        ------
        StoreError
            If the path is empty or not a directory, or the store's place is a symbolic link
            or not a directory.
        """
        path = os.fspath(self.path)
        if not path.strip():
            raise StoreError("store: StoreDirectory of an empty path; give a directory path")
        if os.path.exists(path) and not os.path.isdir(path):
            raise StoreError(f"store: StoreDirectory {path!r} exists and is not a directory")
        os.makedirs(path, exist_ok=True)
        location = self.location(config)
        if os.path.islink(location) or (os.path.exists(location)
                                        and not os.path.isdir(location)):
            what = "a symbolic link" if os.path.islink(location) else "not a directory"
            raise StoreError(
                f"store {location!r} (of {self!r}) is {what}; distsketch never reads or writes "
                f"outside a store's directory: remove it, or use another StoreDirectory")
        return open_fit_store(location, lock=True)


def _holder(token: int) -> str:
    return (f"pid {os.getpid()} on host {socket.gethostname()} since "
            f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}, fit token {token:x}")


def expected_store_bytes(n: int, m_x: int, m_y: int | None = None,
                         block_dtype: str = "float32") -> dict[str, int]:
    """The bytes a fit's store will hold, by part, before anything is written.

    The pass stores ``C = K_X R_Xᵀ`` (n × m_X) and, with a sketched output side, ``D = K_Y R_Yᵀ``
    (n × m_Y) in ``block_dtype`` (float64 when a side is exact: ``m_X = n``); the sums are
    float64 ``m × m`` matrices (``G``, ``M``, ``E``), plus the assembled ``C`` of an exact input
    side, and the saved model (a few ``m × m`` arrays). The arrays are uncompressed: for a
    large ``n`` the estimate is what ``du`` reports to a few per cent; small stores carry
    more metadata than this counts.

    Parameters
    ----------
    n : int
        Training rows.
    m_x, m_y : int
        Sketch sizes of the input side (``n`` for an exact side) and of a sketched output side
        (None: no ``D`` is stored).
    block_dtype : str
        The dtype of the stored blocks (``EngineOptions.block_dtype``).

    Returns
    -------
    dict
        ``{"pass/C": bytes, "pass/D": bytes (with m_y), "sums and model": bytes}``.
    """
    item = np.dtype(block_dtype).itemsize
    out = {"pass/C": n * m_x * item}
    if m_y:
        out["pass/D"] = n * m_y * item
    # float64 m × m arrays: the sums G, B (M, E with a sketched output side) and the model's
    # eigenvectors and projections; measured on SketchedKRR and SISOKR stores (2026-11-23)
    sums = 8 * (5 * m_x * m_x + (m_x * m_x + 2 * m_x * m_y + 4 * m_y * m_y if m_y else 0))
    if m_x == n:  # an exact input side: C itself is a sum
        sums += 8 * n * n
    out["sums and model"] = sums
    return out
