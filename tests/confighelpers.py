"""TOML configs shared by the tests that drive a fit from a config file (the command line,
tuning tables, HPC scripts): the SISOKR config they fit and the toy data it reads.

Kept apart from the :mod:`reference` package: a config is an input of a test, not a formula
its results are checked against."""

from pathlib import Path

import numpy as np

CONFIG = """
[model]
type = "SISOKR"
lam = [1e-3, 1e-2]
random_state = 0

[model.input_kernel]
name = "gaussian"
gamma = 0.5

[model.output_kernel]
name = "gaussian"
gamma = 0.5

[model.input_sketch]
name = "subsampling"
m = 60

[model.output_sketch]
name = "p_sparsified"
m = 25
p = "20/n"
kind = "gaussian"

[data]
train = "train.npz"
test = "test.npz"
standardize = true

[store]
path = "fit.zarr"

[engine]
block_rows = 64      # 4 row blocks: the pass really is spread over the workers
"""


def toy_data(folder: Path) -> Path:
    """train.npz (200 rows), test.npz (40 rows) of a 4-feature, 6-label problem and fit.toml
    (:data:`CONFIG`) in ``folder``; returns ``folder``."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 4)) * [1, 3, 0.5, 2]
    Y = (rng.random((240, 6)) < 0.4).astype(float)
    np.savez(folder / "train.npz", X=X[:200], Y=Y[:200])
    np.savez(folder / "test.npz", X=X[200:], Y=Y[200:])
    (folder / "fit.toml").write_text(CONFIG)
    return folder
