"""What importing costs: ``import distsketch`` loads no heavy module (a lazy package whose names
all resolve), fits never import scikit-learn, ``distsketch --help`` imports neither the package's
models nor dask, and a fit without a cluster never imports ``distributed``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import distsketch as ds

_IMPORT_PROBE = """
import sys
import distsketch as ds
after_import = sorted(m for m in ("sklearn", "dask.array", "zarr", "distributed") if m in sys.modules)
import numpy as np
rng = np.random.default_rng(0)
X, y = rng.normal(size=(80, 2)), rng.normal(size=80)
ds.SketchedKRR(ds.Gaussian(), sketch=ds.SubSampling(10), lam=1e-3, random_state=0).fit(X, y)
ds.SketchedRegressor(ds.Gaussian(), loss="huber", sketch=ds.SubSampling(10), lam=1e-3,
                     random_state=0).fit(X, y).predict(X)
print(",".join(after_import))
print("sklearn" in sys.modules)
"""


@pytest.mark.slow
def test_import_and_fits_do_not_import_scikit_learn():
    """``import distsketch`` loads no heavy module (lazy package), and fits never import
    scikit-learn (≈ 0.6 s): only NotFittedError / ConvergenceWarning, when used, do."""
    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True,
                         timeout=300, check=True)
    after_import, sklearn_after_fit = out.stdout.rstrip("\n").split("\n")[-2:]
    assert after_import == ""
    assert sklearn_after_fit == "False"


def test_lazy_names_resolve_and_not_fitted_error_is_scikit_learns():
    from sklearn.exceptions import NotFittedError

    assert set(ds.__all__) <= set(dir(ds))
    for name in ds.__all__:
        assert getattr(ds, name) is not None
    assert issubclass(ds.NotFittedError, NotFittedError)
    with pytest.raises(NotFittedError):
        ds.SketchedKRR().predict(np.zeros((2, 2)))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ds.nope  # noqa: B018


_PROBE = """
import sys, time
t = time.perf_counter()
from distsketch.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
print(time.perf_counter() - t, file=sys.stderr)
heavy = sorted(m for m in ("dask.array", "zarr", "sklearn", "scipy", "distributed") if m in sys.modules)
print(",".join(heavy), file=sys.stderr)
"""


def test_help_and_version_do_not_import_the_package():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "usage: distsketch" in out.stdout
    _, heavy = out.stderr.split("\n")[-3:-1]  # the last two lines (the second may be empty)
    assert heavy == "", f"`distsketch --help` imported {heavy}"


_FIT_PROBE = """
import sys
import numpy as np
import dask
import distsketch as ds
X = np.random.default_rng(0).normal(size=(200, 3)); Y = (X > 0).astype(float)
if len(sys.argv) > 1:
    dask.config.set(scheduler=sys.argv[1])
m = ds.SISOKR(ds.Gaussian(0.3), ds.Gaussian(0.5), input_sketch=ds.SubSampling(30),
              output_sketch=ds.SubSampling(20), lam=1e-3, random_state=0).fit(X, Y)
m.predict(X[:20])
print("distributed" in sys.modules)
"""


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", [None, "threads", "sync"])
def test_a_local_fit_does_not_import_distributed(scheduler):
    """Without a cluster nothing imports ``distributed`` (dask's own scheduler lookup would:
    0.16 s of a first fit, benchmarks/bench_import.py; engine.local_scheduler)."""
    args = [sys.executable, "-c", _FIT_PROBE] + ([scheduler] if scheduler else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# The start-up times themselves are measured by benchmarks/bench_import.py (RESULTS.md).
