import os
from pathlib import Path

import numpy as np
import pytest

import distsketch as ds

#: Real data sets live next to the project (../shared/data); tests skip when absent.
DATA = Path(os.environ.get("DISTSKETCH_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))


def data_dir(name: str) -> Path:
    path = DATA / name
    if not path.is_dir():
        pytest.skip(f"data set {name!r} not found under {DATA} (set DISTSKETCH_DATA)")
    return path


def data_path(*parts: str) -> Path:
    """A file or folder of the shared data sets; the test skips with the path when absent."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data set not available: {path} (set DISTSKETCH_DATA)")
    return path


#: THE list of sketch types every sketch-parametrised test runs on: one line per sketch, a
#: factory of the sketch size m (``None`` for a sketch without one). A new sketch type is one
#: line here (docs/guide/extending.md, "How to add a sketch").
SKETCH_TYPES = {
    "identity": lambda m: ds.Identity(),
    "subsampling": lambda m: ds.SubSampling(m),
    "psparse_rademacher": lambda m: ds.PSparsified(m, p=0.15, kind="rademacher"),
    "psparse_gaussian": lambda m: ds.PSparsified(m, p=0.15, kind="gaussian"),
    "accumulation": lambda m: ds.Accumulation(m, q=3),
    "gaussian": lambda m: ds.GaussianSketch(m),
    "count": lambda m: ds.CountSketch(m),
}


def all_sketches(n: int, m: int | None = None):
    """One instance of every sketch type of :data:`SKETCH_TYPES` for n rows, sketch size m
    (default 3n/8), plus sub-sampling with m = n (ids for parametrize)."""
    m = max(2, (3 * n) // 8) if m is None else m
    out = {name: make(m) for name, make in SKETCH_TYPES.items()}
    out["subsampling_m_eq_n"] = ds.SubSampling(n)
    return out


def random_sketches(m: int):
    """Every sketch type that draws at random (all but the identity), size m."""
    return {name: make(m) for name, make in SKETCH_TYPES.items() if name != "identity"}


@pytest.fixture
def small_problem():
    """Distinct inputs, distinct binary label vectors, new queries and candidates."""
    rng = np.random.default_rng(12345)
    n, d, L = 40, 3, 8
    X = rng.normal(size=(n, d))
    Y = np.unique((rng.random((3 * n, L)) < 0.4).astype(float), axis=0)[:n]
    rng.shuffle(Y)
    Xq = rng.normal(size=(7, d))
    Yc = np.unique((rng.random((30, L)) < 0.4).astype(float), axis=0)[:11]
    return X, Y, Xq, Yc


#: Bound on ``rel_err(model, dense closed form)`` by block dtype. float64 blocks give the
#: closed form to rounding. float32 blocks (the default) carry kernel values rounded to
#: float32 (relative about 1e-7, distsketch.kernels "Numerics"), which the small solves
#: amplify by their conditioning; on these problems (n = 40, λ down to 1e-6) that stays below
#: the bound given here (largest measured: 3.8e-5, exact input side at λ = 1e-6).
CLOSED_FORM_RTOL = {"float64": 1e-8, "float32": 1e-4}


@pytest.fixture(params=["float64", "float32"])
def block_dtype(request):
    """Each closed-form test once with float64 and once with float32 (default) blocks."""
    return request.param


def dtype_options(block_dtype: str, **kw) -> "ds.EngineOptions":
    return ds.EngineOptions(block_dtype=block_dtype, **kw)


@pytest.fixture
def feature_rows(monkeypatch):
    """``start()``: from then on, the row count of every block whose features
    ``FeatureMap.tiles`` computes (candidate and output features), in a list it returns."""
    from distsketch.engine.features import FeatureMap

    def start() -> list[int]:
        seen: list[int] = []
        original = FeatureMap.tiles

        def spy(self, Y, **kw):
            seen.append(len(Y))
            return original(self, Y, **kw)

        monkeypatch.setattr(FeatureMap, "tiles", spy)
        return seen

    return start


@pytest.fixture(scope="module")
def cli_fit(tmp_path_factory):
    """A directory with the command line's toy data, its config ``fit.toml`` and the store
    ``fit.zarr`` that ``distsketch fit`` wrote (one fit per test module)."""
    from confighelpers import toy_data
    from distsketch.cli.commands import main

    work = toy_data(tmp_path_factory.mktemp("fitted"))
    assert main(["-q", "fit", str(work / "fit.toml")]) == 0
    return work
