"""PCG on a device backend (distsketch.engine.deviceblocks): each iteration's recomputed
kernel blocks and both products on the device, the iterates on the host, the preconditioner
on the host or, from the backend's threshold of landmarks on, on the driver's device
(distsketch.solvers.devicefactor; ``factor`` below: ``Tuning.device_factor_min_m`` sends
these small fits there, tests/test_gpu_factor.py has its parts).

Two ways through the same code, as tests/test_gpu.py: the emulated device (numpy dressed as
CuPy) runs everywhere, and real CuPy where a CUDA device is (``gpu``). The device multiplies
a whole block where the host adds cache-sized tiles, so the two fits differ by the rounding
of float64 sums, ``≈ b·u`` relative per product, which CG at ``tol = 1e-12`` carries into
solutions that differ by about ``κ·tol`` (κ the preconditioned condition number, order 1–10
here): 1e-8 relative with the emulated device (the same block values), and on a GPU the
device's ``exp`` and GEMM rounding on top (CLOSED_FORM_RTOL: 1e-8 in float64, 1e-4 in
float32).
"""

from __future__ import annotations

import numpy as np
import pytest

import distsketch as ds
import distsketch.engine.deviceblocks as deviceblocks
from conftest import CLOSED_FORM_RTOL
from distsketch.backends.base import register_backend
from distsketch.backends.cuda import CupyBackend
from distsketch.engine.sweep import Sweeper
from distsketch.kernels import Gaussian, Linear
from distsketch.solvers.devicefactor import DeviceAlgebra
from distsketch.testing.devices import HostModules
from gpuhelpers import DEVICE_PARAMS, pick_device
from reference.errors import norm_rel_err

EMU = register_backend(CupyBackend(HostModules(), name="cuda-emulated"))
EMULATED_RTOL = 1e-8


@pytest.fixture(params=DEVICE_PARAMS)
def device(request):
    """``(backend, emulated)``."""
    return pick_device(request.param, EMU)


def problem(n=300, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=n)
    return X, y


#: Where the preconditioner is factored and applied: the host (these fits' m is below the
#: backend's threshold) or the driver's device.
FACTOR = {"host": ds.Tuning(), "device": ds.Tuning(device_factor_min_m=1)}


def options(backend, dtype, factor="host"):
    return ds.EngineOptions(block_rows=37, gram_chunk=19, block_dtype=dtype, backend=backend,
                            tuning=FACTOR[factor])


def krr(backend, dtype, store=None, factor="host"):
    return ds.SketchedKRR(Gaussian(gamma=0.3), sketch=ds.SubSampling(40), lam=[1e-2, 1e-4],
                          solver="pcg", tol=1e-12, max_iter=400, random_state=0,
                          options=options(backend, dtype, factor), store=store)


def factored(monkeypatch):
    """Counts of the device's ``K_mm`` factorisations and preconditioners."""
    counts = {"factor": 0, "preconditioner": 0}
    for name in counts:
        real = getattr(DeviceAlgebra, name)

        def spy(self, *a, _real=real, _name=name, **kw):
            counts[_name] += 1
            return _real(self, *a, **kw)

        monkeypatch.setattr(DeviceAlgebra, name, spy)
    return counts


def counted(monkeypatch):
    """How often the device path computed a block (a list of one count)."""
    calls = [0]
    real = deviceblocks.device_block_products

    def spy(*args, **kw):
        out = real(*args, **kw)
        calls[0] += out is not None
        return out

    import distsketch.solvers.conjugate_gradient as cg

    monkeypatch.setattr(cg, "device_block_products", spy)
    return calls


@pytest.mark.parametrize("factor", ["host", "device"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_pcg_fit_on_the_device_equals_the_host_fit(device, dtype, factor, monkeypatch):
    be, emulated = device
    X, y = problem()
    host = krr("numpy", dtype).fit(X, y)
    calls = counted(monkeypatch)
    counts = factored(monkeypatch)
    got = krr(be.name, dtype, factor=factor).fit(X, y)
    blocks = -(-len(X) // 37)
    assert calls[0] == blocks * got.n_passes_  # every block of every pass on the device
    # the device factors K_mm (once, or again for the landmarks left out) and builds P per λ
    assert (counts["factor"] >= 1 and counts["preconditioner"] == 2 if factor == "device"
            else counts == {"factor": 0, "preconditioner": 0})
    rtol = EMULATED_RTOL if emulated else CLOSED_FORM_RTOL[dtype]
    for lam in (1e-2, 1e-4):
        assert norm_rel_err(got.set_lam(lam).predict(X), host.set_lam(lam).predict(X)) <= rtol
    # the same preconditioner to rounding: the same iterations, give or take the last one
    assert np.abs(got.n_iters_ - host.n_iters_).max() <= 1


def test_the_host_backend_never_takes_the_device_path(monkeypatch):
    X, y = problem(n=120)
    calls = counted(monkeypatch)
    krr("numpy", "float32").fit(X, y)
    assert calls[0] == 0


@pytest.mark.parametrize("factor", ["host", "device"])
def test_sisokr_and_the_regressor_by_pcg_on_the_device(device, factor, monkeypatch):
    """SISOKR with an intercept (the centred preconditioner) and the regressor."""
    be, emulated = device
    X, y = problem(n=240, seed=3)
    Y = np.c_[y, np.cos(X[:, 3])] + np.array([3.0, -1.0])

    def sisokr(backend):
        return ds.SISOKR(input_kernel=Gaussian(gamma=0.3), output_kernel=Linear(),
                         input_sketch=ds.SubSampling(30), output_sketch=ds.SubSampling(20),
                         lam=[1e-3], solver="pcg", fit_intercept=True, tol=1e-12, max_iter=400,
                         random_state=0, options=options(backend, "float64", factor))

    def regressor(backend):
        return ds.SketchedRegressor(Gaussian(gamma=0.3), sketch=ds.SubSampling(30),
                                    loss="squared", lam=[1e-3], solver="pcg", tol=1e-12,
                                    max_iter=400, random_state=0,
                                    options=options(backend, "float64", factor))

    rtol = EMULATED_RTOL if emulated else CLOSED_FORM_RTOL["float64"]
    for make in (sisokr, regressor):
        calls = counted(monkeypatch)
        counts = factored(monkeypatch)
        got = make(be.name).fit(X, Y)
        assert calls[0] > 0
        assert (counts["preconditioner"] > 0) == (factor == "device")
        assert norm_rel_err(got.predict(X), make("numpy").fit(X, Y).predict(X)) <= rtol
        monkeypatch.undo()


class Killed(KeyboardInterrupt):
    pass


@pytest.mark.parametrize("factor", ["host", "device"])
def test_a_killed_device_fit_resumes_from_its_store(device, factor, tmp_path, monkeypatch):
    """Killed after some iterations (the store keeps each iterate), the same fit on the same
    store resumes and ends with the uninterrupted device fit's model, bitwise (a device's
    factorisation is deterministic for one device and one input)."""
    be, _ = device
    X, y = problem(n=200, seed=4)
    whole = krr(be.name, "float64", store=tmp_path / "whole.zarr", factor=factor).fit(X, y)
    real, seen = Sweeper.__call__, [0]

    def kill_after_six(self, *a, **kw):
        seen[0] += 1
        if seen[0] > 6:
            raise Killed
        return real(self, *a, **kw)

    monkeypatch.setattr(Sweeper, "__call__", kill_after_six)
    with pytest.raises(Killed):
        krr(be.name, "float64", store=tmp_path / "k.zarr", factor=factor).fit(X, y)
    monkeypatch.undo()
    resumed = krr(be.name, "float64", store=tmp_path / "k.zarr", factor=factor).fit(X, y)
    assert resumed.n_passes_ < whole.n_passes_  # continued, not refitted
    np.testing.assert_array_equal(resumed.dual_coef_, whole.dual_coef_)
    np.testing.assert_array_equal(resumed.predict(X), whole.predict(X))
