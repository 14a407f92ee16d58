"""The config file's schema: the docstring of distsketch.cli.config lists every key a config
can hold (data, store, engine, model and each shipped kernel and sketch), and the deprecated
``engine.overwrite`` warns and defers to ``store.overwrite``."""

from __future__ import annotations

import re

import pytest

from confighelpers import CONFIG
from distsketch.cli import config
from distsketch.cli.config import ConfigError, load_config


def test_config_schema_lists_every_key():
    import dataclasses

    from distsketch._registry import MODELS
    from distsketch.kernels.base import KERNELS
    from distsketch.options import EngineOptions
    from distsketch.sketches.base import SKETCHES

    doc = config.__doc__
    keys = set(config._DATA_KEYS) | {"path", "overwrite", "metrics", "type", "lam", "random_state"}
    keys |= {f.name for f in dataclasses.fields(EngineOptions)}
    def shipped(cls) -> bool:  # other tests register their own kernels, sketches, models
        return cls.__module__.startswith("distsketch.")

    for cls in MODELS.values():
        if cls._configurable and shipped(cls):
            keys |= {k for k, kind in cls._param_kinds.items() if kind not in ("store", "options")}
    for name, cls in KERNELS.items():
        if name != "standardized" and shipped(cls):  # written as [data] standardize = true
            keys |= {name, *cls._param_names()}
    for name, cls in SKETCHES.items():
        if name != "fixed" and shipped(cls):  # a fitted model's realised sketch: no config
            keys |= {name, *cls._param_names()}
    missing = sorted(k for k in keys if not re.search(rf"``[^`]*\b{re.escape(k)}\b[^`]*``", doc))
    assert not missing, f"distsketch/config.py's schema does not list {missing}"


def test_engine_overwrite_is_deprecated_for_store_overwrite(cli_fit, tmp_path):
    text = CONFIG.replace("block_rows = 64", "block_rows = 64\noverwrite = true")
    (tmp_path / "train.npz").write_bytes((cli_fit / "train.npz").read_bytes())
    (tmp_path / "a.toml").write_text(text)
    with pytest.warns(FutureWarning, match=r"engine.overwrite is deprecated: write overwrite = true under \[store\]"):
        cfg = load_config(tmp_path / "a.toml")
    assert cfg.overwrite is True
    (tmp_path / "b.toml").write_text(text.replace('path = "fit.zarr"', 'path = "fit.zarr"\noverwrite = false'))
    with pytest.raises(ConfigError, match=r"^engine.overwrite: contradicts store.overwrite = false"):
        load_config(tmp_path / "b.toml")
