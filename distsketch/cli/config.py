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
    n_targets = 159                 # ARFF: optional when mulan's bibtex.xml lies next to it
    standardize = true              # inputs scaled by training mean / std (kept in the model)

    [store]
    path = "bibtex.zarr"            # default: <config name>.zarr next to the config file
    overwrite = false

    [engine]                        # distsketch.EngineOptions fields
    block_rows = 2048

Relative paths are relative to the config file.

Schema
------
Every key, by table (anything else is refused, naming the key and the allowed ones):

``[model]``
    ``type``: ``"SISOKR"`` (default), ``"SketchedKRR"``, ``"SketchedKRRCV"``, ``"SISOKRCV"``,
    ``"SketchedRegressor"`` (alias ``"regressor"``), ``"SketchedQuantileRegressor"``
    (``"quantile"``). ``lam``: a positive number or a list (the path; the first is active;
    default 1e-6). ``random_state``: a non-negative integer. Per type:

    - SISOKR: ``[model.input_kernel]``, ``[model.output_kernel]`` (required),
      ``[model.input_sketch]``, ``[model.output_sketch]`` (omitted: exact), ``rank`` (a
      positive integer or a list: reduced rank), ``rank_lam``, ``fit_intercept`` (a linear
      output kernel only; default false), ``solver`` (``"direct"``, the default, ``"pcg"``,
      ``"auto"``), ``tol``, ``max_iter`` (PCG).
    - SketchedKRR: ``[model.kernel]``, ``[model.sketch]``, ``fit_intercept`` (default true:
      the targets are centred and their training mean added back), ``solver`` (``"auto"``,
      ``"direct"``, ``"pcg"``), ``tol``, ``max_iter`` (PCG).
    - SketchedKRRCV: ``kernel``, ``sketch``, ``lams`` (the grid), ``cv`` (folds),
      ``scoring`` (``"neg_mean_squared_error"`` or ``"r2"``), ``fit_intercept``.
    - SISOKRCV: the SISOKR tables, ``lams``, ``ranks``, ``cv``, ``scoring``
      (``"surrogate"``, ``"f1_samples"``, ``"kernel_loss"``, ``"topk_accuracy"``), ``top_k``
      (for ``topk_accuracy``, default 5).
    - SketchedRegressor: ``kernel``, ``sketch``, ``loss`` (``"squared"``, or a table such as
      ``{type = "huber", kappa = 1.0}``, ``{type = "epsilon_insensitive", epsilon = 0.5}``,
      ``{type = "pinball", tau = 0.9}``), ``output_matrix``, ``fit_intercept``, ``tol``,
      ``max_iter``, ``exact_hessian``, ``solver`` (``"newton"``, ``"admm"``, ``"pcg"`` — squared loss —, ``"auto"``).
    - SketchedQuantileRegressor: ``kernel``, ``sketch``, ``quantiles`` (a list in (0, 1)),
      ``quantile_gamma``, ``fit_intercept``, ``tol``, ``max_iter``.

``[model.*_kernel]`` / ``[model.kernel]`` (or a bare name: ``kernel = "linear"``)
    ``name`` and its parameters: ``gaussian`` / ``rbf``, ``laplacian``,
    ``gaussian_tanimoto``: ``gamma``; ``polynomial``: ``degree`` (3), ``gamma`` (1.0),
    ``coef0`` (1.0), i.e. ``(gamma ⟨x, x'⟩ + coef0) ** degree``; ``matern``: ``nu``,
    ``length_scale``; ``linear``, ``tanimoto``: none.

``[model.*_sketch]`` / ``[model.sketch]``
    ``name`` and its parameters: ``identity``; ``subsampling``, ``gaussian``, ``count``:
    ``m``; ``p_sparsified``: ``m``, ``p`` (a number or ``"c/n"``), ``kind``
    (``"gaussian"`` or ``"rademacher"``); ``accumulation``: ``m``, ``q``;
    ``leverage_scores``: ``m``, ``lam``, ``dictionary``.

``[data]``
    ``train`` (required): a file, a glob pattern (``"gt_201[1-3].csv"``) or a list of them, of
    one format; their rows are concatenated (the columns must agree). ``test``: the same,
    for ``distsketch evaluate``. Formats by extension: ``.arff`` (mulan, dense or sparse),
    ``.npy`` (X only), ``.npz`` / ``.h5`` / ``.zarr`` (named arrays), ``.csv``.

    - ``n_targets`` (ARFF): the targets are the last ``n_targets`` attributes. Optional when
      mulan's XML label file lies next to the ARFF file (``bibtex.xml`` for
      ``bibtex-train.arff``): its labels are the targets, and a given ``n_targets`` is checked
      against it.
    - ``target_columns`` (CSV, required): names (header) or positions of the target columns.
    - ``drop_columns``: columns left out of the inputs (identifiers, other targets): names
      or positions of the file's columns (CSV, ARFF), positions of X's columns (arrays).
    - ``delimiter`` (CSV): the field separator, default ``","``.
    - ``x_key``, ``y_key`` (``.npz``, ``.h5``, ``.zarr``): array names, default ``"X"`` and
      ``"Y"`` (``"x"``, ``"y"`` are found too).
    - ``dense``: read sparse inputs (sparse ARFF) into a dense array, default false.
    - ``standardize``: scale inputs by the training mean and standard deviation (kept in the
      model, applied to new inputs), default false.
    - ``missing``: what to do with missing values (NaN, ARFF's ``?``): ``"error"`` (default:
      the message names the file, column and row), ``"drop"`` (rows with a missing input or
      target are left out; ``predict`` refuses such rows), ``"impute-mean"`` (a missing input
      becomes the training mean of its column; the means are stored with the model and used
      for new data; a missing target is an error). Data read lazily (``.zarr``) supports
      ``"error"`` only (checked block by block by the fit).

``[store]``
    ``path``: the fit's store directory (default ``<config name>.zarr`` next to the config;
    ``distsketch fit --store`` overrides it). ``overwrite``: replace a distsketch store that
    holds a different fit (default false; never anything distsketch did not write).
    ``[engine] overwrite`` is a deprecated spelling of it (a ``FutureWarning``).

``[engine]``
    :class:`distsketch.EngineOptions` fields: ``block_rows``, ``block_memory``,
    ``gram_chunk``, ``block_dtype``, ``rtol``, ``prewhiten``, ``split_every``, ``progress``,
    ``candidate_rows``, ``direct_io``, ``backend``, ``sweep_memory``, ``device``
    (``"cpu"`` or ``"cuda"``; default: the dask config key ``distsketch.device``), and
    ``tuning``, written as a table ``[engine.tuning]`` of :class:`distsketch.Tuning` fields
    (``fold_route``, ``fold_threads``, ``auto_rank``, ``sparse_max_density``, …; errors name
    ``engine.tuning.<field>``).

``[evaluate]``
    ``metrics``: the names ``distsketch evaluate`` reports by default (a list of
    :data:`distsketch.metrics.METRICS` names; default by task).

``[select]`` (model selection over ``model.lam``, ``model.rank``, ``kernels`` and ``gammas``;
:mod:`distsketch.model_selection.select`)
    ``cv``: K-fold cross-validation, any model (SketchedKRR and SISOKR with a metric their
    CV estimators score — ``rmse`` / ``r2``, ``surrogate_mse`` / ``f1_samples`` /
    ``kernel_loss`` — from one pass; SketchedRegressor, the quantile model and other metrics
    by one fit per fold with the whole λ path, then the refit), or ``validation``: a held-out
    fraction of the training rows (any model); ``metric``: a metric name (default ``rmse``;
    quantiles ``pinball``; SISOKR the task's metric where decoding is affordable,
    ``f1_samples`` for binary outputs, else ``kernel_loss``, and ``surrogate_mse`` with a
    warning beyond ``[engine.tuning] auto_decode_budget``, see
    :func:`distsketch.model_selection.scoring.auto_scoring`); ``gammas``: widths of the input
    kernel to try;
    ``kernels``: input kernels to try in place of ``[model.kernel]`` /
    ``[model.input_kernel]``, each a name or a kernel table as those take
    (``kernels = ["gaussian", "linear", {name = "polynomial", degree = 2}]``; standardised
    like the model's kernel with ``standardize = true``); ``gammas`` then applies to each
    kernel that has a ``gamma`` (a kernel table naming its own ``gamma`` besides ``gammas`` is
    refused), the others are tried once (``cv`` from one pass: every kernel × γ in that one
    pass; otherwise one fit per kernel × γ and per fold); ``seed``: the seed of the hold-out
    split and of the shuffled folds (default 0); ``shuffle``: ``cv`` folds by a seeded hash
    of the row index (default true: a file sorted by a column still gives representative
    folds; false: contiguous folds, the behaviour before). A chosen λ, γ or rank at an edge
    of its grid is named in a warning (extend the grid). ``distsketch fit``
    prints every candidate's score and saves the model refitted at the chosen values.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import re
import tomllib
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from .._base import check_lam
from .._registry import load_builtin_models
from ..kernels.base import Kernel, kernel_from_config
from ..metrics import METRICS
from ..options import EngineOptions, check_options, options_from_dict
from ..sketches.base import SKETCHES, sketch_from_config

MODELS = load_builtin_models()  # the registered estimators, by class name

__all__ = ["ConfigError", "DataSet", "FitConfig", "load_config", "load_data", "read_data"]

_DATA_KEYS = {"train", "test", "n_targets", "target_columns", "x_key", "y_key", "standardize",
              "dense", "delimiter", "missing", "drop_columns"}

logger = logging.getLogger(__name__)


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
    select: dict | None = None

    def estimator(self, *, n: int, X=None):
        """The estimator, with ``p = "c/n"`` resolved and the input kernel standardised."""
        from ..engine.rows import standardized

        cls = MODELS[self.model_type]
        params = dict(self.model_params)
        for key, kind in cls._param_kinds.items():
            if kind == "sketch" and params.get(key) is not None:
                params[key] = _resolve_sketch(params[key], n=n, key=f"model.{key}")
        if self.data.get("standardize") and cls._standardized:
            try:
                params[cls._standardized] = standardized(params[cls._standardized], X)
            except ValueError as exc:
                raise _err("data.standardize", _nan_message(X, self.data.get("train"), exc)) from None
        options = dataclasses.replace(self.options, overwrite=self.overwrite or self.options.overwrite)
        return cls(**params, store=os.fspath(self.store), options=options)


def _nan_message(X, source, exc: Exception) -> str:
    """Why the column means / deviations of ``X`` are not finite, with the first NaN's row."""
    import numpy as np
    import scipy.sparse as sp

    try:
        if isinstance(X, np.ndarray):
            bad = np.isnan(X).any(axis=1)
        elif sp.issparse(X):
            bad = np.zeros(X.shape[0], bool)
            coo = sp.coo_matrix(X)
            bad[coo.row[np.isnan(coo.data)]] = True
        else:
            import dask.array as da

            arr = X if isinstance(X, da.Array) else da.from_zarr(X)
            bad = da.isnan(arr).any(axis=1).compute()
        rows = np.flatnonzero(bad)
    except Exception:  # noqa: BLE001 - best effort; the original error is reported
        rows = np.zeros(0, int)
    if rows.size == 0:
        return f"{source}: the inputs cannot be standardised ({exc})"
    return (f"{source}: missing value (NaN) in the inputs at row {int(rows[0])} (counting data "
            f"rows from 0; {rows.size} rows have one), so they cannot be standardised: fill them, "
            f"or read the data into memory with [data] missing = \"drop\" or \"impute-mean\"")


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
    _unknown(raw, {"model", "data", "store", "engine", "evaluate", "select"}, "")
    model = _table(raw.get("model", {}), "model")
    mtype = _model_type(model)
    params = _model_params(model, MODELS[mtype]._param_kinds)

    data = dict(_table(raw.get("data", {}), "data"))
    _unknown(data, _DATA_KEYS, "data")
    if "train" in data or require_train:
        if "train" not in data:
            raise _err("data.train", "missing training data path")
        data["train"] = _data_paths(data["train"], base, "data.train")
    if "test" in data:
        data["test"] = _data_paths(data["test"], base, "data.test", must_exist=False)
    _check_data(data)

    store = _table(raw.get("store", {}), "store")
    _unknown(store, {"path", "overwrite"}, "store")
    store_path = _path(store.get("path", path.stem + ".zarr"), base, "store.path", must_exist=False)
    overwrite = store.get("overwrite", False)
    if not isinstance(overwrite, bool):
        raise _err("store.overwrite", "expected true or false")

    engine = dict(_table(raw.get("engine", {}), "engine"))
    if "overwrite" in engine:  # one key for one setting: [store] overwrite
        if not isinstance(engine["overwrite"], bool):
            raise _err("engine.overwrite", "expected true or false (and write it as [store] overwrite)")
        if "overwrite" in store and store["overwrite"] != engine["overwrite"]:
            raise _err("engine.overwrite", f"contradicts store.overwrite = "
                                           f"{str(store['overwrite']).lower()}; keep only [store] overwrite")
        warnings.warn("engine.overwrite is deprecated: write overwrite = "
                      f"{str(engine['overwrite']).lower()} under [store] instead "
                      f"({path.name})", FutureWarning, stacklevel=2)
        overwrite = overwrite or engine.pop("overwrite")
    _unknown(engine, {f.name for f in dataclasses.fields(EngineOptions)} - {"overwrite"}, "engine")
    try:
        options = check_options(options_from_dict(engine))
    except ValueError as exc:
        raise ConfigError(str(exc).replace("options.", "engine.", 1)) from None

    evaluate = _table(raw.get("evaluate", {}), "evaluate")
    _unknown(evaluate, {"metrics"}, "evaluate")
    metrics = evaluate.get("metrics")
    if metrics is not None:
        if isinstance(metrics, str):
            metrics = [metrics]
        if not isinstance(metrics, list) or any(m not in METRICS for m in metrics):
            raise _err("evaluate.metrics", f"expected a list of {list(METRICS)}, got {metrics!r}")
    select = _select(raw.get("select"), mtype)
    return FitConfig(path=path, model_type=mtype, model_params=params, data=data, store=store_path,
                     overwrite=overwrite, options=options, metrics=metrics, raw=raw,
                     select=select)


def _model_type(model: dict) -> str:
    """The registered model type ``[model] type`` names (aliases resolved; the default
    configurable model where it is absent)."""
    types = sorted(name for name, cls in MODELS.items() if cls._configurable)
    default = [name for name, cls in MODELS.items() if cls._configurable == "default"]
    mtype = model.get("type", default[0] if default else None)
    aliases = {alias: name for name, cls in MODELS.items() if cls._configurable
               for alias in cls._aliases}
    mtype = aliases.get(mtype, mtype)
    if mtype not in types:
        raise _err("model.type", f"unknown model type {mtype!r}; use one of "
                                 f"{types + sorted(aliases)}")
    return mtype


def _model_params(model: dict, kinds: dict) -> dict[str, Any]:
    """The estimator's arguments from the ``[model]`` table, each validated by its kind
    (``kinds``: the model's declared parameter kinds); unknown keys are refused."""
    keys = {name for name, kind in kinds.items()
            if kind in ("kernel", "sketch", "lam", "rank", "random_state", "loss", "matrix",
                        "solver", "json", "folds")}
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
            from ..losses.base import check_loss

            value = model[k]
            try:  # a name, or a table {type = "huber", kappa = 1.0}
                check_loss(dict(value) if isinstance(value, dict) else value, 1)
            except (ValueError, TypeError) as exc:
                if "one per output" not in str(exc):
                    raise _err(f"model.{k}", str(exc).removeprefix("loss: ")) from None
            params[k] = dict(value) if isinstance(value, dict) else value
            if isinstance(value, dict):
                from ..losses.base import loss_from_config

                params[k] = loss_from_config(dict(value))
        elif kind == "rank" and k in model:
            from ..solvers.reduced_rank import check_rank

            try:
                check_rank(model[k])
            except ValueError as exc:
                raise _err(f"model.{k}", str(exc).removeprefix("rank: ")) from None
            params[k] = model[k]
        elif kind in ("matrix", "solver", "json", "folds") and k in model:
            params[k] = model[k]  # validated by the estimator when it fits (a route's name)
        elif kind == "random_state":
            rs = model.get(k)
            if rs is not None and (isinstance(rs, bool) or not isinstance(rs, int) or rs < 0):
                raise _err(f"model.{k}", f"expected a non-negative integer, got {rs!r}")
            params[k] = rs
    return params


def _select(value: Any, mtype: str) -> dict | None:
    """The validated ``[select]`` table as keyword arguments of
    :func:`distsketch.model_selection.select.select`."""
    if value is None:
        return None
    from ..model_selection.select import check_selection

    table = dict(_table(value, "select"))
    _unknown(table, {"cv", "validation", "metric", "gammas", "kernels", "seed", "shuffle"},
             "select")
    if "lams" in MODELS[mtype]._param_kinds:
        raise _err("select", f"model.type = {mtype!r} cross-validates by itself; drop [select] "
                             f"or use the plain model type")
    seed = table.pop("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise _err("select.seed", f"expected a non-negative integer, got {seed!r}")
    shuffle = table.pop("shuffle", True)
    if not isinstance(shuffle, bool):
        raise _err("select.shuffle", f"expected true or false, got {shuffle!r}")
    if "kernels" in table and not MODELS[mtype]._standardized:
        raise _err("select.kernels", f"model.type = {mtype!r} has no input kernel to vary; "
                                     f"drop select.kernels")
    try:
        check_selection(**table)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return {**table, "random_state": seed, "shuffle": shuffle}


def _data_paths(value: Any, base: Path, key: str, *, must_exist: bool = True) -> Path | list[Path]:
    """A data path, a glob pattern (``"gt_*.csv"``) or a list of them: one Path or a list."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise _err(key, "an empty list; give a file path, a glob pattern or a list of them")
    out: list[Path] = []
    for item in items:
        if isinstance(item, str) and glob.has_magic(item):
            pattern = Path(os.path.expanduser(item))
            pattern = pattern if pattern.is_absolute() else base / pattern
            found = sorted(Path(p) for p in glob.glob(os.fspath(pattern)))
            if not found:
                raise _err(key, f"no file matches the pattern {item!r} (in {pattern.parent})")
            out.extend(found)
        else:
            out.append(_path(item, base, key, must_exist=must_exist))
    if len(set(out)) != len(out):
        raise _err(key, f"a file is listed twice: {[str(p) for p in out]}")
    suffixes = {".zarr" if p.is_dir() else p.suffix.lower() for p in out}
    if len(suffixes) > 1:
        raise _err(key, f"files of different formats {sorted(suffixes)}; give files of one format")
    return out if isinstance(value, list) or len(out) > 1 else out[0]


def _check_data(data: dict) -> None:
    """Types of the ``[data]`` format keys (the files are read later)."""
    from ..io.tables import MISSING

    for flag in ("standardize", "dense"):
        if not isinstance(data.get(flag, False), bool):
            raise _err(f"data.{flag}", "expected true or false")
    if data.get("missing", "error") not in MISSING:
        raise _err("data.missing", f"expected one of {list(MISSING)}, got {data['missing']!r}")
    for k in ("target_columns", "drop_columns"):
        if k in data:
            v = data[k]
            items = v if isinstance(v, list) else [v]
            if not items or any(isinstance(t, bool) or not isinstance(t, (int, str)) for t in items):
                raise _err(f"data.{k}", f"expected column names or positions (a list of strings "
                                        f"or integers), got {v!r}")
    if "n_targets" in data:
        n = data["n_targets"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise _err("data.n_targets", f"expected a positive integer, got {n!r}")
    for k in ("x_key", "y_key", "delimiter"):
        if k in data and (not isinstance(data[k], str) or not data[k]):
            raise _err(f"data.{k}", f"expected a non-empty string, got {data[k]!r}")


class DataSet(NamedTuple):
    """Data read for a fit or a prediction, with what the files say about their columns."""

    X: Any
    Y: Any
    feature_names: list[str] | None
    target_names: list[str] | None
    impute_means: Any  # the means imputed with ([data] missing = "impute-mean"), else None


def read_data(path: Path | list[Path], data: dict, *, key: str = "data.train", targets: bool = True,
              n_features: int | None = None, impute_means=None) -> DataSet:
    """Read one data file or several (their rows concatenated) with a ``[data]`` table's options.

    Parameters
    ----------
    path : Path or list of Path
        ``.arff``, ``.npy``, ``.npz``, ``.csv``, ``.h5`` files or ``.zarr`` directories, of one
        format.
    data : dict
        The ``[data]`` table (format keys: ``n_targets``, ``target_columns``, ``drop_columns``,
        ``x_key``, ``y_key``, ``delimiter``, ``dense``, ``missing``).
    key : str
        The key or option naming the files, in messages.
    targets : bool
        Read the targets. Without them (``predict``), a CSV or ARFF file may hold the features
        only (``n_features`` columns, after ``drop_columns``) or the training layout (the
        targets are then left out).
    n_features : int, optional
        The fitted model's number of inputs: checked, and how a file without targets is told.
    impute_means : ndarray, optional
        The training means, for ``missing = "impute-mean"`` on new data.

    Returns
    -------
    DataSet
    """
    from ..io.tables import handle_missing

    paths = list(path) if isinstance(path, (list, tuple)) else [Path(path)]
    tables = [_read_one(Path(p), data, key=key, targets=targets, n_features=n_features)
              for p in paths]
    X, Y, fnames, tnames = tables[0]
    if len(tables) > 1:
        X, Y, fnames, tnames = _concat(tables, paths, key)
    sources = [(str(p), t.X.shape[0]) for p, t in zip(paths, tables)]
    try:
        X, Y, means = handle_missing(X, Y, data.get("missing", "error"), sources=sources,
                                     feature_names=fnames, target_names=tnames, means=impute_means,
                                     argument="data.missing")
    except ValueError as exc:
        raise ConfigError(str(exc) if str(exc).startswith("data.missing") else f"{key}: {exc}") from None
    if data.get("dense") and hasattr(X, "toarray"):
        X = X.toarray()
    if n_features is not None and X.shape[1] != n_features:
        raise _err(key, f"{_names(paths)} has {X.shape[1]} input columns; the model was fitted "
                        f"on {n_features}")
    n_targets = None if Y is None else (1 if Y.ndim == 1 else Y.shape[1])
    logger.info("%s: %s: %d rows; X: %d features, Y: %s", key, _names(paths), X.shape[0], X.shape[1],
                "none" if Y is None else f"{n_targets} targets"
                + (f" ({', '.join(map(str, tnames[:5]))}{', ...' if len(tnames) > 5 else ''})"
                   if tnames else ""))
    return DataSet(X, Y, fnames, tnames, means)


def load_data(path: Path | list[Path], data: dict, *, key: str = "data.train", targets: bool = True):
    """``(X, Y)`` from data files with the format options of a ``[data]`` table
    (:func:`read_data` without the column names)."""
    ds = read_data(path, data, key=key, targets=targets)
    return ds.X, ds.Y


def _names(paths: list[Path]) -> str:
    return str(paths[0]) if len(paths) == 1 else f"{len(paths)} files ({paths[0].name}, ...)"


def _read_one(path: Path, data: dict, *, key: str, targets: bool, n_features: int | None):
    """One file's :class:`distsketch.io.Table`, messages prefixed with ``key``."""
    from ..io.arff import mulan_labels
    from ..io.loaders import count_columns, load_table

    if not path.exists():
        raise _err(key, f"file not found: {path}")
    suffix = ".zarr" if path.is_dir() else path.suffix.lower()
    kwargs: dict[str, Any] = {"drop_columns": data.get("drop_columns")}
    features_only = not targets
    if suffix in (".arff", ".csv") and not targets:
        # a file of the features only, or of the training layout (its targets left out)?
        width = count_columns(path, delimiter=data.get("delimiter", ","))
        n_drop = len(data["drop_columns"]) if isinstance(data.get("drop_columns"), list) else \
            int("drop_columns" in data)
        if n_drop and width == n_features:  # exactly the model's inputs: nothing to drop
            kwargs["drop_columns"] = None
        features_only = n_features is None or width in (n_features, n_features + n_drop)
        if not features_only:  # the training layout, or neither
            try:
                return _read_one(path, data, key=key, targets=True, n_features=None)._replace(
                    Y=None, target_names=None)
            except ConfigError:
                raise _err(key, f"{path} has {width} columns; the model was fitted on "
                                f"{n_features} inputs: give a file of its {n_features} input "
                                f"columns, or one laid out as the training file") from None
    if suffix == ".arff" and not features_only:
        if "n_targets" in data:
            kwargs["n_targets"] = data["n_targets"]
        elif mulan_labels(path) is None:
            raise _err("data.n_targets", "required for ARFF files without mulan's XML label file "
                                         "next to them (targets are the last n_targets attributes)")
    elif suffix == ".csv":
        if not features_only:
            if "target_columns" not in data:
                raise _err("data.target_columns", "required for CSV files (names or column numbers)")
            kwargs["target_columns"] = data["target_columns"]
        if "delimiter" in data:
            kwargs["delimiter"] = data["delimiter"]
    elif suffix in (".npz", ".h5", ".hdf5", ".zarr"):
        kwargs["x_key"] = data.get("x_key", "X")
        kwargs["y_key"] = data.get("y_key", "Y")
    if kwargs["drop_columns"] is None:
        del kwargs["drop_columns"]
    try:
        table = load_table(path, features_only=features_only, **kwargs)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if not targets:
        table = table._replace(Y=None, target_names=None)
    return table


def _concat(tables, paths: list[Path], key: str):
    """Rows of several files, which must agree on their columns."""
    import numpy as np
    import scipy.sparse as sp

    first = tables[0]
    for p, t in zip(paths[1:], tables[1:]):
        if t.X.shape[1:] != first.X.shape[1:] or (t.Y is None) != (first.Y is None) or (
                t.Y is not None and t.Y.shape[1:] != first.Y.shape[1:]):
            raise _err(key, f"{p} has X {t.X.shape[1:]}, Y {None if t.Y is None else t.Y.shape[1:]} "
                            f"per row, but {paths[0]} has X {first.X.shape[1:]}, Y "
                            f"{None if first.Y is None else first.Y.shape[1:]}")
        for what, a, b in (("feature", first.feature_names, t.feature_names),
                           ("target", first.target_names, t.target_names)):
            if a is not None and b is not None and [s.strip() for s in a] != [s.strip() for s in b]:
                raise _err(key, f"{p} has the {what} columns {b}, {paths[0]} has {a}")
    lazy = [not (isinstance(t.X, np.ndarray) or sp.issparse(t.X)) for t in tables]
    if any(lazy):
        import dask.array as da

        def lazy_of(a):
            return a if isinstance(a, da.Array) else da.from_zarr(a) if not isinstance(a, np.ndarray) \
                else da.from_array(a)
        X = da.concatenate([lazy_of(t.X) for t in tables])
        Y = None if first.Y is None else da.concatenate([lazy_of(t.Y) for t in tables])
    else:
        X = (sp.vstack([t.X for t in tables], format="csr") if any(sp.issparse(t.X) for t in tables)
             else np.concatenate([t.X for t in tables]))
        Y = None if first.Y is None else np.concatenate([np.asarray(t.Y) for t in tables])
    return X, Y, first.feature_names, first.target_names
