"""Saved models: the solved model inside the fit's zarr store, and :func:`load`.

Layout added to a fit's store (see :mod:`distsketch.engine.store`)::

    <store>/model/                attrs["distsketch_model"] = {model_format, class, params,
                                      state, checksums, arrays, token, manifest}
        <array name>              one array per fitted array (sparse ones as data/indices/indptr)

``class`` names the estimator in the model registry (:mod:`distsketch._registry`); ``params``
are the constructor arguments as JSON, converted by the kinds the class declares
(``_param_kinds``: kernels and sketches by config; :mod:`distsketch.io.model_json`);
``state`` and the arrays are what the estimator's ``_get_state`` returns (λ path, realised
sketches as their support and mixing arrays, …); ``checksums`` a SHA-256 of every array;
``arrays`` every array's shape, dtype and whether it is finite; ``token`` names this save;
``manifest`` a SHA-256 of all of these. The store's status becomes ``"solved"`` only after
everything is written.

:func:`load` reads nothing it has not checked: the store holds no symbolic link; the
metadata are complete and match their manifest; every array's declared shape and dtype (its
``zarr.json``) match the record, and all of them fit in the memory the process can take,
before any value is read; the values then match their checksum and are finite where they
were. A model saved before the records were kept (format 3) has its arrays bounded by its own
sizes instead. Every failure is a :class:`~distsketch.engine.storeguard.StoreError` naming the
store, the array and what to do; one that comes from a writer changing the store while it is
read says the store is being written. This module names no estimator.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr

from .._registry import get_model
from .._version import __version__
from ..engine.store import (
    FORMAT_VERSION,
    FitStore,
    StoreError,
    new_token,
    open_fit_store,
    refuse_links,
)
from ..options import blas_limit
from .model_json import callables, params_from_json, params_to_json

__all__ = ["MODEL_FORMAT", "save", "load"]

#: Version of the saved-model layout inside a store.
#: 4: every array's shape, dtype and finiteness recorded (``arrays``), and a token per save;
#: 3: estimator state from the registry's ``_get_state``, realised sketches stored as arrays;
#: 2: the input solution is (T, H[, V, evals]); 1 stored (T, V, evals).
MODEL_FORMAT = 4
_ATTR = "distsketch_model"


#: The keys of a saved model's metadata its manifest covers, by the formats :func:`load` reads.
_MANIFEST_KEYS = {3: ("model_format", "class", "params", "state", "checksums"),
                  4: ("model_format", "class", "params", "state", "checksums", "arrays", "token")}


def _manifest(meta: dict) -> str:
    """SHA-256 of a saved model's JSON (class, format, params, state, the arrays' checksums
    and records, the save's token): one digest covering the whole model."""
    keys = _MANIFEST_KEYS.get(meta.get("model_format"), _MANIFEST_KEYS[MODEL_FORMAT])
    body = {k: meta[k] for k in keys}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# --------------------------------------------------------------------------- arrays


def _record(arr: np.ndarray) -> dict:
    """What a saved model records of a stored array, to check it before reading it: its shape,
    dtype and whether every value is finite."""
    finite = bool(np.isfinite(arr).all()) if arr.dtype.kind in "fc" else True
    return {"shape": [int(v) for v in arr.shape], "dtype": arr.dtype.name, "finite": finite}


def _put(group: zarr.Group, name: str, value, checksums: dict, records: dict) -> None:
    if value is None:
        return
    if sp.issparse(value):
        value = sp.csr_array(value)
        parts = {f"{name}.data": value.data, f"{name}.indices": value.indices,
                 f"{name}.indptr": value.indptr, f"{name}.shape": np.asarray(value.shape)}
    else:
        parts = {name: np.asarray(value)}
    for key, arr in parts.items():
        arr = np.ascontiguousarray(arr)
        group.create_array(key, data=arr, overwrite=True)
        checksums[key] = _sha(arr)
        records[key] = _record(arr)


def _sha(arr) -> str:
    arr = np.ascontiguousarray(arr)
    h = hashlib.sha256(str(arr.dtype).encode() + repr(arr.shape).encode())
    h.update(memoryview(arr).cast("B"))
    return h.hexdigest()


_REFIT = "refit the model (or save the fitted estimator again with overwrite=True)"

#: JSON keys of the saved model's metadata that give sizes (rows, sketch sizes, features, …).
_SIZE_KEYS = frozenset({"n", "m", "n_features_in", "n_outputs", "cv"})


def _size_limit(mmeta: dict) -> int:
    """The most values one array may hold in a model saved without array records (format 3),
    from the model's own metadata: ``D³`` for ``D`` the largest size it records (training
    rows, sketch sizes, features, outputs, folds, and the length of any list: λ path,
    quantiles, feature names…). A plausibility bound, not a shape: every array a model saves
    has at most three axes, each such a size or a number of targets (``(m, m)``,
    ``(n, d)``, ``(L, m_X, m_Y)``, ``(m, t)``…). Models saved since are checked against
    their exact record."""
    sizes = [1]

    def walk(obj, key=None):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, k)
        elif isinstance(obj, list):
            sizes.append(len(obj))
            for v in obj:
                walk(v)
        elif key in _SIZE_KEYS and isinstance(obj, int) and not isinstance(obj, bool):
            sizes.append(obj)

    walk([mmeta.get("params"), mmeta.get("state")])
    return max(sizes) ** 3


def _meminfo(path: str, fields: tuple[str, ...]) -> dict[str, int]:
    out = {}
    with open(path) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in fields:
                out[key] = int(rest.split()[0]) * 1024
    return out


def _available_memory() -> int | None:
    """Bytes this process can still allocate, as far as the system tells (Linux): the
    address-space limit (``RLIMIT_AS``) less what is mapped, the cgroup's memory limit less
    its use, the available memory and free swap; None where nothing is known."""
    bounds = []
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            bounds.append(soft - _meminfo("/proc/self/status", ("VmSize",))["VmSize"])
    except (ImportError, OSError, KeyError, ValueError):
        pass
    try:
        info = _meminfo("/proc/meminfo", ("MemAvailable", "SwapFree"))
        bounds.append(info["MemAvailable"] + info.get("SwapFree", 0))
    except (OSError, KeyError, ValueError):
        pass
    try:
        with open("/proc/self/cgroup") as f:
            rel = next(line.split("::", 1)[1].strip() for line in f if line.startswith("0::"))
        base = os.path.join("/sys/fs/cgroup", rel.lstrip("/"))
        with open(os.path.join(base, "memory.max")) as f:
            limit = f.read().strip()
        if limit != "max":
            with open(os.path.join(base, "memory.current")) as f:
                bounds.append(int(limit) - int(f.read().strip()))
    except (OSError, StopIteration, ValueError):
        pass
    return min(bounds) if bounds else None


def _describe(shape, dtype) -> str:
    return f"shape {tuple(shape)} {dtype}"


class _Model:
    """Reads the arrays of one saved model: each array's declared metadata checked against the
    saved model's record (shape, dtype) and its sizes before anything is read, then its values
    against their checksum and finiteness."""

    def __init__(self, group: zarr.Group, location: str, mmeta: dict):
        self.group, self.location, self.mmeta = group, location, mmeta
        self.checksums = mmeta["checksums"]
        self.records = mmeta.get("arrays")  # None: a model saved before records were kept
        self.limit = None if self.records is not None else _size_limit(mmeta)
        self.opened: dict[str, tuple] = {}

    def _where(self, key: str) -> str:
        return f"store {self.location!r}: saved model array {key!r}"

    def open_all(self) -> None:
        """Open every recorded array (metadata only) and check what it declares; then check
        that all of them together fit in the memory this process can still take."""
        for key in sorted(self.checksums):
            self.opened[key] = self._open(key)
        total = sum(math.prod(shape) * dtype.itemsize for _, shape, dtype in self.opened.values())
        available = _available_memory()
        if available is not None and total > available:
            key, (_, shape, dtype) = max(self.opened.items(),
                                         key=lambda kv: math.prod(kv[1][1]) * kv[1][2].itemsize)
            raise StoreError(
                f"store {self.location!r}: the saved model's arrays declare {total / 2**30:.2f} "
                f"GiB (the largest, {key!r}: {_describe(shape, dtype)}), more than the "
                f"{max(available, 0) / 2**30:.2f} GiB this process can allocate; nothing was "
                f"read. Load it where more memory is free; if it should be smaller, its "
                f"metadata are damaged or were edited: {_REFIT}")

    def _open(self, key: str) -> tuple:
        where = self._where(key)
        try:
            node = self.group[key] if key in self.group else None
        except Exception as exc:  # unreadable zarr.json
            raise StoreError(f"{where}: its metadata (zarr.json) cannot be read "
                             f"({type(exc).__name__}: {exc}); the store is damaged: "
                             f"{_REFIT}") from None
        if not isinstance(node, zarr.Array):
            raise StoreError(f"store {self.location!r}: the saved model is missing array "
                             f"{key!r} (its zarr.json is deleted or damaged); the store is "
                             f"damaged: {_REFIT}")
        try:
            shape = tuple(int(v) for v in node.shape)
            dtype = np.dtype(node.dtype)
            chunks = tuple(int(v) for v in node.chunks)
        except Exception as exc:
            raise StoreError(f"{where}: its metadata cannot be interpreted ({type(exc).__name__}: "
                             f"{exc}); the store is damaged: {_REFIT}") from None
        if self.records is not None:
            rec = self.records.get(key)
            want = (tuple(rec["shape"]), rec["dtype"]) if isinstance(rec, dict) else None
            if want != (shape, dtype.name):
                raise StoreError(
                    f"{where} declares {_describe(shape, dtype.name)}, but the saved model "
                    f"records {_describe(*want) if want else 'no such array'}: its zarr.json is "
                    f"damaged or was edited (nothing was read); {_REFIT}")
        if dtype.kind not in "biuf" or dtype.itemsize > 8:
            raise StoreError(f"{where} declares dtype {dtype.name}, which a saved model never "
                             f"holds: its zarr.json is damaged or was edited; {_REFIT}")
        if len(chunks) != len(shape) or any(c < 1 or c > max(s, 1) for c, s in zip(chunks, shape)):
            raise StoreError(f"{where} declares chunks {chunks} that do not fit its "
                             f"{_describe(shape, dtype.name)}: its zarr.json is damaged or was "
                             f"edited (nothing was read); {_REFIT}")
        if self.limit is not None and math.prod(shape) > self.limit:
            raise StoreError(
                f"{where} declares {_describe(shape, dtype.name)} ({math.prod(shape):,} values), "
                f"more than the {self.limit:,} the model's own sizes allow (rows, sketch "
                f"sizes, features, outputs): its zarr.json is damaged or was edited (nothing "
                f"was read); {_REFIT}")
        return node, shape, dtype

    def read(self, key: str) -> np.ndarray:
        node, shape, dtype = self.opened[key]
        where = self._where(key)
        try:
            arr = np.asarray(node[...])
        except Exception as exc:  # a truncated or damaged chunk: zarr's codecs raise anything
            raise StoreError(f"{where} cannot be read ({type(exc).__name__}: {exc}): its "
                             f"chunks are damaged or truncated; {_REFIT}") from None
        if arr.shape != shape or arr.dtype != dtype or _sha(arr) != self.checksums[key]:
            raise StoreError(f"{where} does not match its recorded checksum (damaged, partially "
                             f"written or edited); {_REFIT}")
        rec = (self.records or {}).get(key, {})
        if arr.dtype.kind == "f" and rec.get("finite", True) and not np.isfinite(arr).all():
            bad = int(arr.size - np.isfinite(arr).sum())
            raise StoreError(f"{where} holds {bad} NaN or infinite value(s), where the saved "
                             f"model was finite: the store is damaged or was edited; {_REFIT}")
        return arr

    def get(self, name: str):
        if f"{name}.data" in self.checksums:
            parts = [self.read(f"{name}.{p}") for p in ("shape", "data", "indices", "indptr")]
            shape = tuple(int(v) for v in parts[0])
            try:
                return sp.csr_array(tuple(parts[1:]), shape=shape)
            except Exception as exc:
                raise StoreError(f"{self._where(name)}: its sparse parts do not form a matrix "
                                 f"({exc}); the store is damaged or was edited; "
                                 f"{_REFIT}") from None
        return self.read(name) if name in self.checksums else None


# --------------------------------------------------------------------------- public


def _directory(group: zarr.Group) -> str | None:
    """The local directory of a zarr group (None for other stores)."""
    if isinstance(group.store, zarr.storage.LocalStore):
        return os.path.join(str(group.store.root), group.path)
    return None


def save(est, store, *, overwrite: bool = False) -> str:
    """Write a fitted estimator into ``store`` and mark it ``"solved"``.

    ``store`` is the fit's own store (the model is added next to the pass; ``fit`` does this
    for a kept store), or a new path (a model-only store). A store that already holds a saved
    model is replaced only with ``overwrite=True``. Returns the store location.

    Raises
    ------
    StoreError
        If the store holds a symbolic link, is being written by another fit, or holds a saved
        model and ``overwrite`` is False.
    OSError
        If writing fails (a full disk), naming the store; the store is then left incomplete
        (it does not load) until the model is saved again.
    """
    est._check_fitted()
    arrays, state = est._get_state()
    params = params_to_json(est)
    json.dumps([params, state])  # fail before writing anything if not serialisable
    if isinstance(store, FitStore):
        return _save(est, store, arrays, params, state, overwrite=overwrite)
    with open_fit_store(store, lock=True) as fs:
        return _save(est, fs, arrays, params, state, overwrite=overwrite)


def _save(est, fs: FitStore, arrays: dict, params: dict, state: dict, *, overwrite: bool) -> str:
    directory = _directory(fs.group)
    if directory is not None:  # the store may have changed since it was opened (a long pass)
        refuse_links(directory, location=fs.location)
    meta = fs.meta
    if meta and meta.get("format_version") != FORMAT_VERSION:
        raise StoreError(f"store {fs.location!r}: written by store format "
                         f"{meta.get('format_version')}, this is format {FORMAT_VERSION}")
    if meta and "model" in fs.group and not overwrite:
        raise StoreError(f"store {fs.location!r} already holds a saved model; pass overwrite=True")
    writing = "its metadata"
    try:
        if not meta:
            fs.group.attrs["distsketch"] = {"format_version": FORMAT_VERSION,
                                            "version": __version__, "status": "model-only"}
        fs.mark("saving-model")  # a crash from here on leaves a store that does not load
        group = fs.group.require_group("model")
        for key in list(group.keys()):
            del group[key]
        checksums: dict[str, str] = {}
        records: dict[str, dict] = {}
        for name, value in arrays.items():
            writing = f"array {name!r}"
            _put(group, name, value, checksums, records)
        writing = "its metadata"
        mmeta = {"model_format": MODEL_FORMAT, "class": type(est).__name__,
                 "version": __version__, "params": params, "state": state,
                 "checksums": checksums, "arrays": records, "token": new_token()}
        mmeta["manifest"] = _manifest(mmeta)
        group.attrs[_ATTR] = mmeta
        fs.mark("solved")
    except OSError as exc:
        raise OSError(exc.errno, f"store {fs.location!r}: writing the saved model ({writing}) "
                                 f"failed: {exc.strerror or exc}; the store is left incomplete "
                                 f"and does not load: free space (or fix the cause) and save "
                                 f"again with overwrite=True") from exc
    return fs.location


def _open_group(store) -> tuple[zarr.Group, str, str | None]:
    """``(group, location, directory)`` of the store to load, refusing links before opening."""
    if isinstance(store, (str, os.PathLike)):
        location = os.fspath(store)
        if os.path.exists(location) and not os.path.isdir(location):
            raise StoreError(f"store {location!r} is a file, not a store (a directory written "
                             f"by a fit or save); give the store's directory")
        if not os.path.isdir(location):
            raise FileNotFoundError(f"store {location!r} does not exist")
        directory = os.path.abspath(location)
        _refuse_links(directory, location)
        try:
            group = zarr.open_group(directory, mode="r")
        except Exception as exc:
            raise StoreError(f"store {location!r} is not a distsketch store or its metadata is "
                             f"damaged ({type(exc).__name__}: {exc})") from None
        return group, location, directory
    if isinstance(store, zarr.Group):
        directory = _directory(store)
        location = str(store.store_path)
        if directory is not None:
            _refuse_links(directory, location)
        return store, location, directory
    raise StoreError(f"store: expected a path or a zarr.Group, got {store!r}")


def _refuse_links(directory: str, location: str) -> None:
    """:func:`~distsketch.engine.storeguard.refuse_links`, once more after a moment if it fails:
    a writer deleting arrays while the walk lists them is not a link (the status then tells)."""
    for attempt in range(3):
        try:
            refuse_links(directory, location=location)
            return
        except StoreError:
            if attempt == 2:
                status = None
                if not os.path.islink(os.path.join(directory, "zarr.json")):  # read nothing outside
                    try:
                        status = zarr.open_group(directory, mode="r").attrs["distsketch"]["status"]
                    except Exception:
                        pass
                if status not in (None, "solved"):
                    raise StoreError(_being_written(location, f"its status is {status!r}")) from None
                if _writer_holds(directory):
                    raise StoreError(_being_written(location, "a writer holds its lock")) from None
                raise
            time.sleep(0.05)


def _being_written(location: str, change: str) -> str:
    return (f"store {location!r} is being written by another fit or save ({change}); load it "
            f"again after the writer finishes")


def _stamp(group: zarr.Group, directory: str | None) -> tuple:
    """What says which save a store holds, read afresh: (status, model token, manifest)."""
    try:
        fresh = (zarr.open_group(directory, mode="r") if directory is not None
                 else zarr.open_group(store=group.store, path=group.path, mode="r"))
    except Exception:
        return ("unreadable",)
    out = []
    try:
        out.append(dict(fresh.attrs.get("distsketch", {})).get("status"))
    except Exception:
        out.append("unreadable")
    try:
        model = dict(fresh["model"].attrs.get(_ATTR, {})) if "model" in fresh else {}
        out += [model.get("token"), model.get("manifest")]
    except Exception:
        out.append("unreadable")
    return tuple(out)


def _writer_holds(directory: str) -> bool:
    """Whether a writer holds the store's lock (:class:`~distsketch.engine.storeguard.StoreLock`),
    read from the system's lock table (Linux) without taking the lock: a reader must never make
    a writer fail."""
    try:
        st = os.stat(directory)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in lines:
        fields = line.split()
        if "FLOCK" not in fields:
            continue
        for field in fields:
            parts = field.split(":")
            if len(parts) == 3:
                try:
                    if (int(parts[0], 16), int(parts[1], 16), int(parts[2])) == want:
                        return True
                except ValueError:
                    pass
    return False


def _change(group: zarr.Group, directory: str | None, start: tuple) -> str | None:
    """How the store changed since ``start`` (its stamp when the load began), or None: a
    failure then comes from the store itself, not from a writer. Looked at twice, a moment
    apart: a writer may have deleted what it rewrites before it changes the status."""
    for attempt in range(2):
        now = _stamp(group, directory)
        if now != start:
            return (f"its status is now {now[0]!r}" if now[0] != "solved"
                    else "its saved model was replaced while it was read")
        if directory is not None and _writer_holds(directory):
            return "a writer holds its lock"
        if attempt == 0:
            time.sleep(0.1)
    return None


def load(store: str | os.PathLike | zarr.Group, *, trusted: bool = False) -> Any:
    """Load a fitted estimator saved in a store (a path or a zarr group).

    Loading runs no code named by the store: a model whose kernel is a user function (saved as
    ``module:qualname``) is refused unless ``trusted=True``, since loading it imports that
    module. Built-in kernels need no opt-in. Nothing is read before it is checked: the store
    holds no symbolic link, and every array's declared shape and dtype match the saved
    model's record (and fit in memory) before its values are read; then its values match their
    checksum and are finite.

    Parameters
    ----------
    store : str, path or zarr.Group
        Where the model was saved (by ``fit`` with a kept ``store``, or ``save``).
    trusted : bool
        Allow importing the user-function kernel a store names (only for stores you trust).

    Returns
    -------
    estimator
        The fitted estimator, of the class that saved it (:class:`~distsketch.SISOKR`,
        :class:`~distsketch.SketchedKRR`, ...), with its fitted attributes; it predicts
        without the training data.

    Raises
    ------
    FileNotFoundError
        If the path does not exist.
    StoreError
        (a ``ValueError``) naming the store, the array where one is at fault, and what to
        do: if the store is not a distsketch store, was written by another format version,
        holds an incomplete fit (a pass or save that did not finish), is being written while
        it is read, holds a symbolic link, fails a check (declared shape or dtype, checksum,
        finiteness, manifest: damaged or edited), or names a user function and ``trusted`` is
        False.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> import distsketch
    >>> from distsketch import SketchedKRR
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(60, 2)), rng.normal(size=60)
    >>> model = SketchedKRR(lam=1e-3).fit(X, y)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     location = model.save(Path(tmp) / "model.zarr")
    ...     loaded = distsketch.load(location)
    >>> np.allclose(loaded.predict(X[:5]), model.predict(X[:5]))
    True
    """
    group, location, directory = _open_group(store)
    try:
        meta = dict(group.attrs.get("distsketch", {}))
    except Exception as exc:
        raise StoreError(f"store {location!r}: its metadata is damaged ({type(exc).__name__}: "
                         f"{exc}); {_REFIT}") from None
    if not meta:
        raise StoreError(f"store {location!r} is not a distsketch store")
    if meta.get("format_version") != FORMAT_VERSION:
        raise StoreError(f"store {location!r} was written with store format "
                         f"{meta.get('format_version')!r} (distsketch {meta.get('version')}); "
                         f"this distsketch {__version__} reads format {FORMAT_VERSION}: refit "
                         f"the model")
    if meta.get("status") != "solved":
        raise StoreError(f"store {location!r} holds an incomplete fit (status "
                         f"{meta.get('status')!r}): if a fit or save is writing it, load it "
                         f"again after it finishes; otherwise fit again on this store to "
                         f"complete it")
    mmeta: dict = {}
    try:
        if "model" in group:
            found = group["model"].attrs.get(_ATTR, {})
            mmeta = dict(found) if isinstance(found, dict) else {"": None}
        return _load(group, location, mmeta, trusted=trusted)
    except Exception as exc:
        change = _change(group, directory, ("solved", mmeta.get("token"), mmeta.get("manifest")))
        if change is not None:
            raise StoreError(_being_written(location, change)) from None
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"store {location!r}: the saved model cannot be rebuilt from what the "
                         f"store holds ({type(exc).__name__}: {exc}); the store is damaged or "
                         f"was edited: {_REFIT}") from None


def _check_meta(mmeta: dict, location: str) -> None:
    """The saved model's own metadata: present, complete, of the right types, and matching
    their manifest digest."""
    where = f"store {location!r}: the saved model's metadata (model/zarr.json)"
    if not mmeta:
        raise StoreError(f"{where} are missing: the store is damaged; {_REFIT}")
    fmt = mmeta.get("model_format")
    if fmt not in _MANIFEST_KEYS:
        raise StoreError(f"store {location!r}: saved model format {fmt!r} is not one this "
                         f"distsketch {__version__} reads ({sorted(_MANIFEST_KEYS)}); refit the "
                         f"model")
    missing = [k for k in (*_MANIFEST_KEYS[fmt], "manifest") if k not in mmeta]
    if missing:
        raise StoreError(f"{where} lack {missing}: damaged or edited; {_REFIT}")
    checksums, records = mmeta["checksums"], mmeta.get("arrays")
    kinds_ok = (isinstance(mmeta["class"], str) and isinstance(mmeta["params"], dict)
                and isinstance(mmeta["state"], dict) and isinstance(checksums, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in checksums.items()))
    if kinds_ok and records is not None:
        kinds_ok = (isinstance(records, dict) and set(records) == set(checksums) and all(
            isinstance(r, dict) and isinstance(r.get("dtype"), str)
            and isinstance(r.get("finite"), bool) and isinstance(r.get("shape"), list)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                    for v in r["shape"]) for r in records.values()))
    if not kinds_ok:
        raise StoreError(f"{where} are malformed (a class name, params, state, checksums and "
                         f"array records of the wrong kind): damaged or edited; {_REFIT}")
    if mmeta["manifest"] != _manifest(mmeta):
        raise StoreError(f"store {location!r}: the saved model's metadata does not match its "
                         f"manifest digest (edited or damaged); {_REFIT}")


def _load(group: zarr.Group, location: str, mmeta: dict, *, trusted: bool):
    _check_meta(mmeta, location)
    names = callables([mmeta["params"], mmeta["state"]])
    if names and not trusted:
        raise StoreError(f"store {location!r}: the model's kernel is the Python function "
                         f"{names[0]!r}, which loading would import and run; if you trust this "
                         f"store, load it with distsketch.load(path, trusted=True) "
                         f"(command line: --trusted)")
    try:
        cls = get_model(mmeta["class"], what=f"store {location!r}: saved model")
    except ValueError as exc:
        raise StoreError(str(exc)) from None
    model = _Model(group["model"], location, mmeta)
    model.open_all()  # every array's declared metadata checked before any is read
    arrays = {name: model.get(name) for name in sorted({k.split(".")[0] for k in model.checksums})}
    est = cls(**params_from_json(cls, mmeta["params"]))
    est._set_state(arrays, mmeta["state"])
    if getattr(est, "store_", None) is not None and _directory(group) is not None:
        # a model fitted with a kept store lives where it is loaded from: appends go there
        est.store_ = location if os.path.isdir(location) else _directory(group)
    with blas_limit():  # the same BLAS threads as fit and set_lam: bitwise the same coefficients
        est._update_coef()
    return est
