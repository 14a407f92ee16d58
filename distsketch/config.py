"""TOML configuration of a fit: validated up front, every error naming its key.

Example (``distsketch fit bibtex.toml``)::

    [model]
    type = "SISOKR"                 # a registered model: "SISOKR" (the default), "SketchedKRR"
    lam = 1e-5                      # or a grid: [1e-6, 1e-5, 1e-4] (first is active)
    random_state = 0

    [model.input_kernel]            # SketchedKRR: [model.kernel]
    name = "gaussian"
    gamma = 5e-5

    [model.output_kernel]
    name = "gaussian"
    gamma = 5e-5

    [model.input_sketch]            # omit for an exact side; SketchedKRR: [model.sketch]
    name = "subsampling"
    m = 2250

    [model.output_sketch]
    name = "p_sparsified"
    m = 200
    p = "20/n"                      # a number, or "c/n": c over the number of training rows
    kind = "gaussian"

    [data]
    train = "../shared/data/bibtex/bibtex-train.arff"   # .arff .npy .npz .csv .h5 .zarr
    test = "../shared/data/bibtex/bibtex-test.arff"     # used by `distsketch evaluate`
    n_targets = 159                 # ARFF: targets are the last n_targets attributes
    standardize = true              # inputs scaled by training mean / std (kept in the model)

    [store]
    path = "bibtex.zarr"            # default: <config name>.zarr next to the config file
    overwrite = false

    [engine]                        # distsketch.EngineOptions fields
    block_rows = 2048

Relative paths are relative to the config file.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from ._base import check_lam
from ._registry import MODELS
from .kernels import Kernel, kernel_from_config
from .metrics import METRICS
from .options import EngineOptions, check_options
from .sketches import SKETCHES, sketch_from_config

__all__ = ["ConfigError", "FitConfig", "load_config", "load_data"]

_DATA_KEYS = {"train", "test", "n_targets", "target_columns", "x_key", "y_key", "standardize",
              "dense", "delimiter"}


class ConfigError(ValueError):
    """A configuration problem; the message starts with the offending key."""


@dataclasses.dataclass
class FitConfig:
    """A validated configuration."""

    path: Path
    model_type: str
    model_params: dict
    data: dict
    store: Path
    overwrite: bool
    options: EngineOptions
    metrics: list[str] | None
    raw: dict

    def estimator(self, *, n: int, X=None):
        """The estimator, with ``p = "c/n"`` resolved and the input kernel standardised."""
        from .rows import standardized

        cls = MODELS[self.model_type]
        params = dict(self.model_params)
        for key, kind in cls._param_kinds.items():
            if kind == "sketch" and params.get(key) is not None:
                params[key] = _resolve_sketch(params[key], n=n, key=f"model.{key}")
        if self.data.get("standardize") and cls._standardized:
            params[cls._standardized] = standardized(params[cls._standardized], X)
        options = dataclasses.replace(self.options, overwrite=self.overwrite or self.options.overwrite)
        return cls(**params, store=os.fspath(self.store), options=options)


def _err(key: str, msg: str) -> ConfigError:
    return ConfigError(f"{key}: {msg}")


def _table(value: Any, key: str) -> dict:
    if not isinstance(value, dict):
        raise _err(key, f"expected a table ([{key}]), got {type(value).__name__}")
    return value


def _unknown(table: dict, allowed, key: str) -> None:
    for k in table:
        if k not in allowed:
            raise _err(f"{key}.{k}" if key else k, f"unknown key; allowed keys: {sorted(allowed)}")


def _kernel(value: Any, key: str) -> Kernel:
    if isinstance(value, str):
        value = {"name": value}
    table = _table(value, key)
    if "name" not in table:
        raise _err(f"{key}.name", "missing kernel name")
    try:
        return kernel_from_config(table)
    except (ValueError, TypeError) as exc:
        msg = str(exc).replace("kernel_from_config: ", "")
        raise _err(f"{key}.name" if "name" in msg.split(";")[0] else key, msg) from None


def _sketch(value: Any, key: str) -> dict:
    table = dict(_table(value, key))
    name = table.get("name")
    if name not in SKETCHES:
        raise _err(f"{key}.name", f"unknown sketch {name!r}; use one of {sorted(SKETCHES)}")
    params = SKETCHES[name]._param_names()
    _unknown({k: v for k, v in table.items() if k != "name"}, params, key)
    if isinstance(table.get("p"), str):
        _p_over_n(table["p"], f"{key}.p")
    else:
        probe = dict(table)
        try:
            spec = sketch_from_config(probe, argument=key)
            spec.check(10**12, argument=key)  # parameter checks that do not depend on n
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return table


_P_OVER_N = re.compile(r"^\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)\s*/\s*n\s*$")


def _p_over_n(text: str, key: str) -> float:
    m = _P_OVER_N.match(text)
    if not m:
        raise _err(key, f"expected a number or \"c/n\", got {text!r}")
    return float(m.group(1))


def _resolve_sketch(table: dict, *, n: int, key: str):
    table = dict(table)
    if isinstance(table.get("p"), str):
        table["p"] = _p_over_n(table["p"], f"{key}.p") / n
    spec = sketch_from_config(table, argument=key)
    spec.check(n, argument=key)
    return spec


def _lam(value: Any, key: str):
    try:
        values = check_lam(value, argument=key)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return list(values) if isinstance(value, list) else values[0]


def _path(value: Any, base: Path, key: str, *, must_exist: bool = True) -> Path:
    if not isinstance(value, str) or not value:
        raise _err(key, f"expected a file path (string), got {value!r}")
    p = Path(os.path.expanduser(value))
    p = p if p.is_absolute() else base / p
    if must_exist and not p.exists():
        raise _err(key, f"file not found: {p}")
    return p


def load_config(path, *, require_train: bool = True) -> FitConfig:
    """Read and validate a TOML configuration (no store is touched)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path.name}: not valid TOML ({exc})") from None
    base = path.resolve().parent
    _unknown(raw, {"model", "data", "store", "engine", "evaluate"}, "")
    model = _table(raw.get("model", {}), "model")
    types = sorted(name for name, cls in MODELS.items() if cls._configurable)
    default = [name for name, cls in MODELS.items() if cls._configurable == "default"]
    mtype = model.get("type", default[0] if default else None)
    aliases = {alias: name for name, cls in MODELS.items() if cls._configurable
               for alias in cls._aliases}
    mtype = aliases.get(mtype, mtype)
    if mtype not in types:
        raise _err("model.type", f"unknown model type {mtype!r}; use one of "
                                 f"{types + sorted(aliases)}")
    kinds = MODELS[mtype]._param_kinds
    keys = {name for name, kind in kinds.items()
            if kind in ("kernel", "sketch", "lam", "random_state", "loss", "matrix", "json")}
    _unknown(model, {"type", *keys}, "model")
    params: dict[str, Any] = {}
    for k, kind in kinds.items():
        if kind == "kernel":
            if k not in model:
                raise _err(f"model.{k}", "missing kernel table")
            params[k] = _kernel(model[k], f"model.{k}")
    for k, kind in kinds.items():
        if kind == "sketch":
            params[k] = _sketch(model[k], f"model.{k}") if k in model else None
        elif kind == "lam":
            params[k] = _lam(model.get(k, 1e-6), f"model.{k}")
        elif kind == "loss" and k in model:
            from .losses import check_loss

            value = model[k]
            try:  # a name, or a table {type = "huber", kappa = 1.0}
                check_loss(dict(value) if isinstance(value, dict) else value, 1)
            except (ValueError, TypeError) as exc:
                if "one per output" not in str(exc):
                    raise _err(f"model.{k}", str(exc).removeprefix("loss: ")) from None
            params[k] = dict(value) if isinstance(value, dict) else value
            if isinstance(value, dict):
                from .losses import loss_from_config

                params[k] = loss_from_config(dict(value))
        elif kind in ("matrix", "json") and k in model:
            if k == "rank":
                from .solve import check_rank

                try:
                    check_rank(model[k])
                except ValueError as exc:
                    raise _err(f"model.{k}", str(exc).removeprefix("rank: ")) from None
            params[k] = model[k]  # otherwise validated by the estimator when it fits
        elif kind == "random_state":
            rs = model.get(k)
            if rs is not None and (isinstance(rs, bool) or not isinstance(rs, int) or rs < 0):
                raise _err(f"model.{k}", f"expected a non-negative integer, got {rs!r}")
            params[k] = rs

    data = dict(_table(raw.get("data", {}), "data"))
    _unknown(data, _DATA_KEYS, "data")
    if "train" in data or require_train:
        if "train" not in data:
            raise _err("data.train", "missing training data path")
        data["train"] = _path(data["train"], base, "data.train")
    if "test" in data:
        data["test"] = _path(data["test"], base, "data.test", must_exist=False)
    for flag in ("standardize", "dense"):
        if not isinstance(data.get(flag, False), bool):
            raise _err(f"data.{flag}", "expected true or false")

    store = _table(raw.get("store", {}), "store")
    _unknown(store, {"path", "overwrite"}, "store")
    store_path = _path(store.get("path", path.stem + ".zarr"), base, "store.path", must_exist=False)
    overwrite = store.get("overwrite", False)
    if not isinstance(overwrite, bool):
        raise _err("store.overwrite", "expected true or false")

    engine = _table(raw.get("engine", {}), "engine")
    _unknown(engine, {f.name for f in dataclasses.fields(EngineOptions)}, "engine")
    try:
        options = check_options(EngineOptions(**engine))
    except ValueError as exc:
        raise ConfigError(str(exc).replace("options.", "engine.", 1)) from None

    evaluate = _table(raw.get("evaluate", {}), "evaluate")
    _unknown(evaluate, {"metrics"}, "evaluate")
    metrics = evaluate.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, list) or any(m not in METRICS for m in metrics):
            raise _err("evaluate.metrics", f"expected a list of {list(METRICS)}, got {metrics!r}")
    return FitConfig(path=path, model_type=mtype, model_params=params, data=data, store=store_path,
                     overwrite=overwrite, options=options, metrics=metrics, raw=raw)


def load_data(path: Path, data: dict, *, key: str = "data.train", targets: bool = True):
    """``(X, Y)`` from a data file with the format options of a ``[data]`` table."""
    from .io import load_dataset

    path = Path(path)
    if not path.exists():
        raise _err(key, f"file not found: {path}")
    suffix = ".zarr" if path.is_dir() else path.suffix.lower()
    kwargs: dict[str, Any] = {}
    if suffix == ".arff":
        if "n_targets" not in data:
            raise _err("data.n_targets", "required for ARFF files (targets are the last n_targets attributes)")
        kwargs["n_targets"] = data["n_targets"]
    elif suffix == ".csv":
        if "target_columns" not in data:
            raise _err("data.target_columns", "required for CSV files (names or column numbers)")
        kwargs["target_columns"] = data["target_columns"]
        if "delimiter" in data:
            kwargs["delimiter"] = data["delimiter"]
    elif suffix in (".npz", ".h5", ".hdf5", ".zarr"):
        kwargs["x_key"] = data.get("x_key", "X")
        kwargs["y_key"] = data.get("y_key", "Y") if targets else None
    X, Y = load_dataset(path, **kwargs)
    if data.get("dense") and hasattr(X, "toarray"):
        X = X.toarray()
    return X, Y
