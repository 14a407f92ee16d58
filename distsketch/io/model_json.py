"""A saved model's values as JSON: kernels (a user function by its importable name) and
constructor parameters, each converted by the kind its estimator declares (``_param_kinds``).

:func:`kernel_to_json` / :func:`kernel_from_json`, :func:`params_to_json` /
:func:`params_from_json` (what :func:`distsketch.io.persist.save` records and
:func:`~distsketch.io.persist.load` rebuilds), :func:`check_savable` (a user-function kernel a
saved model can name) and :func:`callables` (the user functions a saved model names, which
loading would import). This module names no estimator.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any

import numpy as np

from ..engine.store import StoreDirectory
from ..engine.sums import fold_spec
from ..kernels.base import CallableKernel, check_kernel, kernel_from_config
from ..options import options_from_dict
from ..sketches.base import check_sketch, sketch_from_config

__all__ = ["callables", "check_savable", "kernel_from_json", "kernel_to_json", "params_from_json",
           "params_to_json"]


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
    """Inverse of :func:`kernel_to_json`. A user function is imported by name: :func:`distsketch.load`
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


def callables(obj: Any) -> list[str]:
    """The user-function names recorded anywhere in saved JSON."""
    if isinstance(obj, dict):
        found = [obj["callable"]] if isinstance(obj.get("callable"), str) else []
        return found + [c for v in obj.values() for c in callables(v)]
    if isinstance(obj, list):
        return [c for v in obj for c in callables(v)]
    return []


def params_to_json(est) -> dict:
    """Constructor arguments as JSON, each converted by its declared kind."""
    kinds = type(est)._param_kinds
    out = {}
    for name, value in est.get_params(deep=False).items():
        kind = kinds.get(name, "json")
        if kind == "kernel":
            out[name] = {"kernel": kernel_to_json(value)}
        elif kind == "sketch":
            # a fitted model's realised sketch is saved as the Fixed specification it replays
            out[name] = {"sketch": None if value is None
                         else check_sketch(value, argument=name).to_config()}
        elif kind == "options":
            out[name] = {"options": None if value is None else dataclasses.asdict(value)}
        elif kind == "random_state":
            out[name] = value if value is None or isinstance(value, int) else None
        elif kind == "store":
            if isinstance(value, StoreDirectory):
                out[name] = {"store_directory": os.fspath(value.path)}
            else:
                out[name] = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
        elif kind == "folds":  # a KFold-like splitter as its fold spec: the same folds
            out[name] = value if value is None or isinstance(value, (int, str)) \
                else fold_spec(value, argument=name)
        elif kind == "lam":
            out[name] = np.asarray(value, dtype=float).tolist()
        elif kind == "loss":
            out[name] = value if isinstance(value, str) else {"loss": value.to_config()}
        elif kind == "matrix":
            out[name] = None if value is None else np.asarray(value, dtype=float).tolist()
        elif kind == "solver":  # a route's name, or a route object by its registered name
            out[name] = value if value is None or isinstance(value, str) else \
                {"route": value.to_config()}
        elif isinstance(value, (np.ndarray, tuple)):
            out[name] = np.asarray(value).tolist()
        elif isinstance(value, (np.bool_, np.integer, np.floating)):
            out[name] = value.item()
        else:
            out[name] = value
    return out


def params_from_json(cls, params: dict) -> dict:
    kinds = cls._param_kinds
    out = {}
    for name, value in params.items():
        kind = kinds.get(name, "json")
        if kind == "kernel":
            out[name] = kernel_from_json(value["kernel"])
        elif kind == "sketch":
            out[name] = None if value["sketch"] is None else sketch_from_config(value["sketch"])
        elif kind == "options":
            out[name] = (None if value["options"] is None
                         else options_from_dict(value["options"]))
        elif kind == "store" and isinstance(value, dict):
            out[name] = StoreDirectory(value["store_directory"])
        elif kind == "loss" and isinstance(value, dict):
            from ..losses.base import loss_from_config

            out[name] = loss_from_config(value["loss"])
        elif kind == "solver" and isinstance(value, dict):
            from ..solvers.routes import route_from_config

            out[name] = route_from_config(value["route"])
        else:
            out[name] = value
    return out
