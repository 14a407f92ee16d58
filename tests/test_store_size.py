"""The store's size: the expected size is logged before a fit and is close to what the fit
writes, and the store guide says when fitting without a store is the better choice."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

from confighelpers import KRR
from distsketch.cli.commands import main

ROOT = Path(__file__).resolve().parents[1]


def test_expected_store_size_is_logged_and_close(tmp_path, caplog):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 5))
    np.savez(tmp_path / "big.npz", X=X, Y=np.sin(X[:, 0]))
    (tmp_path / "fit.toml").write_text(KRR.format(data='train = "big.npz"', store="big.zarr")
                                       .replace("m = 40", "m = 300"))
    with caplog.at_level(logging.INFO, logger="distsketch"):
        assert main(["-q", "-v", "fit", str(tmp_path / "fit.toml")]) == 0
    err = caplog.text
    m = re.search(r"store \S+big\.zarr: expected size about ([\d.]+) (KiB|MiB) \(pass/C ", err)
    assert m, err
    expected = float(m.group(1)) * {"KiB": 2**10, "MiB": 2**20}[m.group(2)]
    actual = sum(f.stat().st_size for f in (tmp_path / "big.zarr").rglob("*") if f.is_file())
    assert 0.8 <= actual / expected <= 1.25, (actual, expected)


def test_store_guide_says_when_to_fit_without_a_store():
    guide = (ROOT / "docs" / "guide" / "store.md").read_text()
    assert "When `store = None` is the better choice" in guide
