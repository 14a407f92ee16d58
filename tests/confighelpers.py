"""TOML configs shared by the tests that drive a fit from a config file (the command line,
tuning tables, HPC scripts): the SISOKR config they fit and the toy data it reads, a
SketchedKRR config template with a regression CSV for it, and the command line run in a
subprocess.

Kept apart from the :mod:`reference` package: a config is an input of a test, not a formula
its results are checked against."""

import os
import subprocess
import sys
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


#: A SketchedKRR config: ``{data}`` is the body of its [data] table, ``{store}`` its store path.
KRR = """
[model]
type = "SketchedKRR"
lam = 1e-3
random_state = 0

[model.kernel]
name = "gaussian"
gamma = 0.2

[model.sketch]
name = "subsampling"
m = 40

[data]
{data}

[store]
path = "{store}"
"""


def regression_csv(path: Path, n: int = 150, *, seed: int = 0, header: bool = True,
                   nan_at: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A CSV of ``n`` rows: three inputs ``a, b, c`` and a smooth ``target`` (a NaN at
    ``nan_at`` when given); returns the inputs and the targets written."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    if nan_at is not None:
        X[nan_at] = np.nan
    A = np.column_stack([X, y])
    with open(path, "w") as f:
        if header:
            f.write("a,b,c,target\n")
        f.writelines(",".join("nan" if np.isnan(v) else repr(float(v)) for v in row) + "\n" for row in A)
    return X, y


def run_cli(*args, cwd, stdout=subprocess.PIPE):
    """The CLI in a subprocess: its exit status and streams are what users see."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "distsketch", *map(str, args)], cwd=cwd,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=300, check=False)
