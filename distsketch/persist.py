"""Saved models: the solved model inside the fit's zarr store, and :func:`load`.

Layout added to a fit's store (see :mod:`distsketch.store`)::

    <store>/model/                attrs["distsketch_model"] = {model_format, class, params,
                                                               state, checksums}
        <array name>              one array per fitted array (sparse ones as data/indices/indptr)

``class`` names the estimator in the model registry (:mod:`distsketch._registry`); ``params``
are the constructor arguments as JSON, converted by the kinds the class declares
(``_param_kinds``: kernels and sketches by config); ``state`` and the arrays are what the
estimator's ``_get_state`` returns (λ path, realised sketches as their support and mixing
arrays, …); ``checksums`` a SHA-256 of every array. The store's status becomes ``"solved"``
only after everything is written; :func:`load` refuses any other status, another format
version, a missing array or a checksum mismatch — an incomplete or tampered store never loads.
This module names no estimator.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr

from ._registry import get_model
from ._version import __version__
from .kernels import CallableKernel, check_kernel, kernel_from_config
from .options import EngineOptions, blas_limit
from .sketches import sketch_from_config
from .store import FORMAT_VERSION, FitStore, StoreDirectory, open_fit_store

__all__ = ["MODEL_FORMAT", "save", "load", "kernel_to_json", "kernel_from_json"]

#: Version of the saved-model layout inside a store.
#: 3: estimator state from the registry's ``_get_state``, realised sketches stored as arrays;
#: 2: the input solution is (T, H[, V, evals]); 1 stored (T, V, evals).
MODEL_FORMAT = 3
_ATTR = "distsketch_model"


# --------------------------------------------------------------------------- values ↔ JSON


def _callable_name(kernel: CallableKernel) -> str:
    f = kernel.func
    return f"{getattr(f, '__module__', '') or ''}:{getattr(f, '__qualname__', '') or ''}"


def check_savable(kernel: Any, *, argument: str) -> None:
    """Refuse, before any pass, a user-function kernel that a saved model cannot name: a
    lambda or a nested function (their names are not unique: two lambdas would share one
    record), or a function of ``__main__`` (no other process can import it)."""
    if not isinstance(kernel, CallableKernel):
        return
    name = _callable_name(kernel)
    module, _, qual = name.partition(":")
    if module == "__main__":
        why = "a function of the __main__ script cannot be imported by another process"
    elif "<" in qual or not module or not qual:
        why = "a lambda or nested function has no unique importable name"
    else:
        return
    raise ValueError(f"{argument}: {kernel._label()} cannot be saved with the model ({why}); "
                     f"define it at module level of an importable module, or fit with "
                     f"store=None")


def kernel_to_json(kernel: Any) -> Any:
    """A kernel as JSON: its config, or ``{\"callable\": \"module:qualname\"}`` for a function."""
    if isinstance(kernel, str) or kernel is None:
        return kernel
    kernel = check_kernel(kernel, name="kernel")
    if isinstance(kernel, CallableKernel):
        check_savable(kernel, argument="kernel")
        return {"callable": _callable_name(kernel)}
    return kernel.to_config()


def kernel_from_json(cfg: Any) -> Any:
    """Inverse of :func:`kernel_to_json`. A user function is imported by name: :func:`load`
    allows that only for a store the caller trusts."""
    if cfg is None or isinstance(cfg, str):
        return cfg
    if "callable" in cfg:
        module, _, qual = cfg["callable"].partition(":")
        obj = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        return CallableKernel(obj)
    return kernel_from_config(cfg)


def _callables(obj: Any) -> list[str]:
    """The user-function names recorded anywhere in saved JSON."""
    if isinstance(obj, dict):
        found = [obj["callable"]] if isinstance(obj.get("callable"), str) else []
        return found + [c for v in obj.values() for c in _callables(v)]
    if isinstance(obj, list):
        return [c for v in obj for c in _callables(v)]
    return []


def _manifest(meta: dict) -> str:
    """SHA-256 of a saved model's JSON (class, format, params, state and the arrays'
    checksums): one digest covering the whole model."""
    body = {k: meta[k] for k in ("model_format", "class", "params", "state", "checksums")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _params_to_json(est) -> dict:
    """Constructor arguments as JSON, each converted by its declared kind."""
    kinds = type(est)._param_kinds
    out = {}
    for name, value in est.get_params(deep=False).items():
        kind = kinds.get(name, "json")
        if kind == "kernel":
            out[name] = {"kernel": kernel_to_json(value)}
        elif kind == "sketch":
            out[name] = {"sketch": None if value is None else value.to_config()}
        elif kind == "options":
            out[name] = {"options": None if value is None else dataclasses.asdict(value)}
        elif kind == "random_state":
            out[name] = value if value is None or isinstance(value, int) else None
        elif kind == "store":
            if isinstance(value, StoreDirectory):
                out[name] = {"store_directory": os.fspath(value.path)}
            else:
                out[name] = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
        elif kind == "lam":
            out[name] = np.asarray(value, dtype=float).tolist()
        elif kind == "loss":
            out[name] = value if isinstance(value, str) else {"loss": value.to_config()}
        elif kind == "matrix":
            out[name] = None if value is None else np.asarray(value, dtype=float).tolist()
        elif isinstance(value, (np.ndarray, tuple)):
            out[name] = np.asarray(value).tolist()
        elif isinstance(value, (np.bool_, np.integer, np.floating)):
            out[name] = value.item()
        else:
            out[name] = value
    return out


def _params_from_json(cls, params: dict) -> dict:
    kinds = cls._param_kinds
    out = {}
    for name, value in params.items():
        kind = kinds.get(name, "json")
        if kind == "kernel":
            out[name] = kernel_from_json(value["kernel"])
        elif kind == "sketch":
            out[name] = None if value["sketch"] is None else sketch_from_config(value["sketch"])
        elif kind == "options":
            out[name] = None if value["options"] is None else EngineOptions(**value["options"])
        elif kind == "store" and isinstance(value, dict):
            out[name] = StoreDirectory(value["store_directory"])
        elif kind == "loss" and isinstance(value, dict):
            from .losses import loss_from_config

            out[name] = loss_from_config(value["loss"])
        else:
            out[name] = value
    return out


# --------------------------------------------------------------------------- arrays


def _put(group: zarr.Group, name: str, value, checksums: dict) -> None:
    if value is None:
        return
    if sp.issparse(value):
        value = sp.csr_array(value)
        parts = {f"{name}.data": value.data, f"{name}.indices": value.indices,
                 f"{name}.indptr": value.indptr, f"{name}.shape": np.asarray(value.shape)}
    else:
        parts = {name: np.asarray(value)}
    for key, arr in parts.items():
        group.create_array(key, data=np.ascontiguousarray(arr), overwrite=True)
        checksums[key] = _sha(arr)


def _get(group: zarr.Group, name: str, checksums: dict):
    def read(key):
        if key not in group:
            raise ValueError(f"store: saved model is missing array {key!r} (incomplete or tampered)")
        arr = np.asarray(group[key][...])
        if _sha(arr) != checksums.get(key):
            raise ValueError(f"store: saved model array {key!r} does not match its recorded checksum "
                             f"(tampered or partially written); refit the model")
        return arr

    if f"{name}.data" in checksums:
        shape = tuple(int(v) for v in read(f"{name}.shape"))
        return sp.csr_array((read(f"{name}.data"), read(f"{name}.indices"), read(f"{name}.indptr")),
                            shape=shape)
    if name not in checksums:
        return None
    return read(name)


def _sha(arr) -> str:
    arr = np.ascontiguousarray(arr)
    h = hashlib.sha256(str(arr.dtype).encode() + repr(arr.shape).encode())
    h.update(memoryview(arr).cast("B"))
    return h.hexdigest()


# --------------------------------------------------------------------------- public


def save(est, store, *, overwrite: bool = False) -> str:
    """Write a fitted estimator into ``store`` and mark it ``"solved"``.

    ``store`` is the fit's own store (the model is added next to the pass; ``fit`` does this
    for a kept store), or a new path (a model-only store). A store that already holds a saved
    model is replaced only with ``overwrite=True``. Returns the store location.
    """
    est._check_fitted()
    arrays, state = est._get_state()
    params = _params_to_json(est)
    json.dumps([params, state])  # fail before writing anything if not serialisable
    if isinstance(store, FitStore):
        return _save(est, store, arrays, params, state, overwrite=overwrite)
    with open_fit_store(store, lock=True) as fs:
        return _save(est, fs, arrays, params, state, overwrite=overwrite)


def _save(est, fs: FitStore, arrays: dict, params: dict, state: dict, *, overwrite: bool) -> str:
    meta = fs.meta
    if not meta:
        fs.group.attrs["distsketch"] = {"format_version": FORMAT_VERSION, "version": __version__,
                                        "status": "model-only"}
    elif meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"store {fs.location!r}: written by store format "
                         f"{meta.get('format_version')}, this is format {FORMAT_VERSION}")
    elif "model" in fs.group and not overwrite:
        raise ValueError(f"store {fs.location!r} already holds a saved model; pass overwrite=True")
    fs.mark("saving-model")  # a crash from here on leaves a store that does not load
    group = fs.group.require_group("model")
    for key in list(group.keys()):
        del group[key]
    checksums: dict[str, str] = {}
    for name, value in arrays.items():
        _put(group, name, value, checksums)
    mmeta = {"model_format": MODEL_FORMAT, "class": type(est).__name__,
             "version": __version__, "params": params, "state": state, "checksums": checksums}
    mmeta["manifest"] = _manifest(mmeta)
    group.attrs[_ATTR] = mmeta
    fs.mark("solved")
    return fs.location


def load(store, *, trusted: bool = False):
    """Load a fitted estimator saved in a store (a path or a zarr group).

    Loading runs no code named by the store: a model whose kernel is a user function (saved as
    ``module:qualname``) is refused unless ``trusted=True``, since loading it imports that
    module. Built-in kernels need no opt-in.

    Parameters
    ----------
    store : path or zarr.Group
    trusted : bool
        Allow importing the user-function kernel a store names (only for stores you trust).

    Raises
    ------
    FileNotFoundError
        If the path does not exist.
    ValueError
        If the store is not a distsketch store, was written by another format version, holds
        an incomplete fit (a pass or save that did not finish), fails its checksums or its
        manifest (edited JSON), or names a user function and ``trusted`` is False.
    """
    if isinstance(store, (str, os.PathLike)):
        if not os.path.isdir(os.fspath(store)):
            raise FileNotFoundError(f"store {os.fspath(store)!r} does not exist")
        location = os.fspath(store)
        try:
            group = zarr.open_group(location, mode="r")
        except Exception as exc:
            raise ValueError(f"store {location!r} is not a distsketch store or its metadata is "
                             f"damaged ({type(exc).__name__}: {exc})") from None
    elif isinstance(store, zarr.Group):
        group, location = store, str(store.store_path)
    else:
        raise ValueError(f"store: expected a path or a zarr.Group, got {store!r}")
    try:
        meta = dict(group.attrs.get("distsketch", {}))
        mmeta = dict(group["model"].attrs.get(_ATTR, {})) if "model" in group else None
    except Exception as exc:
        raise ValueError(f"store {location!r}: its metadata is damaged ({type(exc).__name__}: "
                         f"{exc}); refit the model") from None
    if not meta:
        raise ValueError(f"store {location!r} is not a distsketch store")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"store {location!r} was written with store format "
                         f"{meta.get('format_version')!r} (distsketch {meta.get('version')}); this "
                         f"distsketch {__version__} reads format {FORMAT_VERSION}: refit the model")
    if meta.get("status") != "solved":
        raise ValueError(f"store {location!r} holds an incomplete fit (status {meta.get('status')!r}); "
                         f"fit again on this store to complete it")
    if mmeta is None:
        raise ValueError(f"store {location!r}: saved model is missing (tampered store)")
    mg = group["model"]
    if mmeta.get("model_format") != MODEL_FORMAT:
        raise ValueError(f"store {location!r}: saved model format {mmeta.get('model_format')!r} is not "
                         f"{MODEL_FORMAT}; refit the model")
    try:
        intact = mmeta.get("manifest") == _manifest(mmeta)
    except (KeyError, TypeError):
        intact = False
    if not intact:
        raise ValueError(f"store {location!r}: the saved model's metadata does not match its "
                         f"manifest digest (edited or damaged); refit the model")
    names = _callables([mmeta["params"], mmeta["state"]])
    if names and not trusted:
        raise ValueError(f"store {location!r}: the model's kernel is the Python function "
                         f"{names[0]!r}, which loading would import and run; if you trust this "
                         f"store, load it with distsketch.load(path, trusted=True) "
                         f"(command line: --trusted)")
    checksums = mmeta["checksums"]
    cls = get_model(mmeta.get("class"), what=f"store {location!r}: saved model")
    names = {k.split(".")[0] for k in checksums}
    arrays = {name: _get(mg, name, checksums) for name in names}
    est = cls(**_params_from_json(cls, mmeta["params"]))
    est._set_state(arrays, mmeta["state"])
    with blas_limit():  # the same BLAS threads as fit and set_lam: bitwise the same coefficients
        est._update_coef()
    return est
