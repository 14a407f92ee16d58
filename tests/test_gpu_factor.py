"""PCG's preconditioner on the driver's device (distsketch.solvers.devicefactor): ``K_mm``'s
factor, Falkon's ``A`` and each iteration's products with them on a device backend, from the
backend's threshold of landmarks on (``Tuning.device_factor_min_m`` overrides it).

The emulated device (numpy dressed as CuPy) runs everywhere, real CuPy where a CUDA device is
(``gpu``); whole fits factored on the device are tests/test_gpu_pcg.py's (``factor``). The
device's Cholesky factorisation is another LAPACK/cuSOLVER call than the
host's, so the factors agree to rounding only: a Cholesky factor is backward stable
(``‖TᵀT − K‖ ≤ c·m·u·‖K‖``) and its forward error is bounded by ``κ(K)·u`` times a small
constant. The tolerances below are those bounds with a constant of 64, computed from the
matrices' condition numbers.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import distsketch as ds
import distsketch.solvers.devicefactor as devicefactor
from distsketch.backends.base import register_backend
from distsketch.backends.cuda import CudaUnavailable, CupyBackend
from distsketch.engine.features import FeatureMap
from distsketch.kernels import Gaussian
from distsketch.solvers.devicefactor import DeviceAlgebra, device_algebra
from distsketch.solvers.preconditioner import LandmarkGram, Preconditioner, factor_kmm
from distsketch.testing.devices import HostModules
from gpuhelpers import DEVICE_PARAMS, pick_device
from reference.errors import norm_rel_err

EMU = register_backend(CupyBackend(HostModules(), name="cuda-emulated"))
U64 = np.finfo(np.float64).eps
ON_DEVICE = ds.Tuning(device_factor_min_m=1)


@pytest.fixture(params=DEVICE_PARAMS)
def device(request):
    """``(backend, emulated)``."""
    return pick_device(request.param, EMU)


def gram(m=60, d=3, gamma=0.5, seed=0, on_device=None):
    X = np.random.default_rng(seed).normal(size=(m, d))
    return LandmarkGram(FeatureMap(Gaussian(gamma=gamma), X, None, 16, None),
                        on_device=on_device)


class FakeGram:
    """What factor_kmm reads of a LandmarkGram: ``m``, ``matrix()``, ``on_device``."""

    def __init__(self, K, on_device=None):
        self.K, self.m, self.on_device = K, K.shape[0], on_device

    def matrix(self):
        return np.array(self.K, order="F")


# --------------------------------------------------------------------------- the factor


def test_the_device_factor_is_the_host_factor_to_rounding(device):
    be, _ = device
    host, dev = gram(), gram(on_device=DeviceAlgebra(be))
    K = host.matrix()
    T_host, T_dev = factor_kmm(host), factor_kmm(dev)
    assert isinstance(T_dev, np.ndarray) and T_dev.flags.f_contiguous  # scipy's layout
    assert np.array_equal(T_dev, np.triu(T_dev)) and np.all(np.diag(T_dev) > 0)
    m = K.shape[0]
    eps = devicefactor_jitter(K)
    shifted = K + eps * np.eye(m)
    assert np.linalg.norm(T_dev.T @ T_dev - shifted) <= 64 * m * U64 * np.linalg.norm(shifted)
    kappa = np.linalg.cond(shifted)
    assert norm_rel_err(T_dev, T_host) <= 64 * kappa * U64


def devicefactor_jitter(K):
    """factor_kmm's first jitter, ``JITTER · m · mean(diag K)``."""
    from distsketch.solvers.preconditioner import JITTER

    return JITTER * K.shape[0] * float(np.mean(np.diag(K)))


def test_the_device_raises_the_jitter_as_the_host_does(device):
    """``K_mm`` indefinite by 150 first jitters: both factorisations fail at ε₀ and 100 ε₀
    and succeed at 10⁴ ε₀; a matrix far from positive semi-definite is refused by both,
    naming K_mm."""
    be, _ = device
    B = np.random.default_rng(1).normal(size=(20, 20))
    K = B @ B.T + 20 * np.eye(20)
    K = 0.5 * (K + K.T)
    eps0 = devicefactor_jitter(K)
    K_bad = K - (np.linalg.eigvalsh(K)[0] + 150 * eps0) * np.eye(20)
    eps0 = devicefactor_jitter(K_bad)
    for T in (factor_kmm(K_bad), factor_kmm(FakeGram(K_bad, DeviceAlgebra(be)))):
        jitter = np.diag(T.T @ T - K_bad)
        np.testing.assert_allclose(jitter, 1e4 * eps0, rtol=1e-6,
                                   atol=64 * 20 * U64 * np.abs(K_bad).max())
    for Kmm in (-np.eye(5), FakeGram(-np.eye(5), DeviceAlgebra(be))):
        with pytest.raises(ValueError, match="K_mm is not positive semi-definite"):
            factor_kmm(Kmm)


@pytest.mark.parametrize("centre", [False, True])
def test_the_device_preconditioner_is_the_host_one_to_rounding(device, centre):
    be, _ = device
    host = gram()
    T = factor_kmm(host)
    lam, n = 1e-3, 5000
    P = Preconditioner(host, lam, n, T=T, centre=centre)
    D = DeviceAlgebra(be).preconditioner(T, lam, n, centre=centre)
    # the solves' forward error: κ(T)·κ(A)·u (a constant of 64)
    bound = 64 * np.linalg.cond(T) * np.linalg.cond(P.A) * U64
    rng = np.random.default_rng(3)
    for t in (1, 3):
        u = rng.normal(size=(T.shape[0], t))
        assert norm_rel_err(D.apply(u), P.apply(u)) <= bound
        assert norm_rel_err(D.apply_t(u), P.apply_t(u)) <= bound
        assert norm_rel_err(D.inverse(u), P.inverse(u)) <= 64 * T.shape[0] * U64
    algebra = DeviceAlgebra(be)
    for g in (host, gram(seed=1), host):  # one copy of K_mm per gram, never another's
        np.testing.assert_allclose(algebra.dot(g, u), g.matrix() @ u,
                                   rtol=0, atol=64 * T.shape[0] * U64 * np.abs(u).max())


# --------------------------------------------------------------------------- where it runs


def test_the_threshold_and_its_override():
    assert device_algebra("numpy", 10**6, ON_DEVICE) is None  # the host backend: never
    assert device_algebra(None, 10**6) is None
    limit = EMU.factor_min_m
    assert limit == ds.backends.cuda.DEVICE_FACTOR_MIN_M
    assert device_algebra(EMU.name, limit - 1) is None
    assert isinstance(device_algebra(EMU.name, limit), DeviceAlgebra)
    assert isinstance(device_algebra(EMU.name, 2, ON_DEVICE), DeviceAlgebra)
    assert device_algebra(EMU.name, 10**6, ds.Tuning(device_factor_min_m=10**7)) is None


def test_a_driver_without_the_device_factors_on_the_host(monkeypatch, caplog):
    """Workers with GPUs, a driver without one: the driver's factorisation stays on the host
    (logged), the fit goes on."""
    def unavailable(name):
        raise CudaUnavailable("device='cuda': CuPy is installed but sees no CUDA device")

    monkeypatch.setattr(devicefactor, "get_backend", unavailable)
    with caplog.at_level(logging.INFO, logger="distsketch.solvers.devicefactor"):
        assert device_algebra("cuda", 10**6, ON_DEVICE) is None
    assert "factored on the host" in caplog.text and "no CUDA device" in caplog.text
