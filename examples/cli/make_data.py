"""Write the small regression data set of the command-line example: ``train.csv`` and
``test.csv``.

Five features drawn from a standard normal and a target ``y = sin(x0) + 0.5·x1 + 0.3·noise``,
from one seeded generator, so every run writes the same files (2 000 training rows, 500 test
rows, a header line ``x0,…,x4,y``). Then, from the project directory::

    python examples/cli/make_data.py
    distsketch fit examples/cli/regression.toml
    distsketch evaluate examples/cli/regression.zarr
    distsketch predict examples/cli/regression.zarr --input examples/cli/test.csv --output predictions.csv

``--output DIR`` writes the files elsewhere (copy ``regression.toml`` beside them: its paths
are relative to the config file).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
N_TRAIN, N_TEST, N_FEATURES = 2000, 500, 5


def make_rows(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` rows of the features and the target, as one ``(n, N_FEATURES + 1)`` array."""
    X = rng.normal(size=(n, N_FEATURES))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n)
    return np.column_stack([X, y])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=HERE, help="folder of the CSV files")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generator (default 0)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    header = ",".join([f"x{j}" for j in range(N_FEATURES)] + ["y"])
    args.output.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.csv", N_TRAIN), ("test.csv", N_TEST)):
        path = args.output / name
        np.savetxt(path, make_rows(n, rng), delimiter=",", header=header, comments="", fmt="%.6f")
        print(f"wrote {path} ({n} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
