"""The device's density rule for sparse row blocks (distsketch.backends.cuda).

scipy.sparse rows cross to the device as CSR (the smaller form to copy); a built-in kernel then
densifies a device CSR operand on the device when its density exceeds the device's threshold,
``distsketch.backends.cuda.DEVICE_SPARSE_MAX_DENSITY`` (``Backend.sparse_max_density``; a fit's
``Tuning.device_sparse_max_density`` overrides it), at the place the host's rule
(``Tuning.sparse_max_density``) applies: ``kernels.sparse.cheaper_form``. Run
through the emulated device (:class:`~distsketch.testing.devices.HostModules`), whose CSR matrices, like
cupyx's, are not scipy.sparse matrices, so the kernels take their device routes. The value and
fit tests also run on real CuPy (marked ``gpu``; skipped with the reason where CuPy or a CUDA
device is missing), within tests/test_gpu.py's tolerances.

Tolerances: a device route that keeps the operands sparse sums each inner product in another
order than the host's dense or panel route, so kernel values differ by the rounding of those
sums, bounded per entry in :func:`route_bound` (Higham's ``γ_n = n·u / (1 − n·u)`` for a sum of
``n`` products); a fit amplifies block differences by its conditioning, bounded as the other
closed-form tests by ``CLOSED_FORM_RTOL`` (tests/conftest.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
import distsketch.backends.cuda as dcuda
import distsketch.kernels.base as dk_base
import distsketch.kernels.sparse as dk
from conftest import CLOSED_FORM_RTOL
from distsketch.backends.base import backend_of, register_backend
from distsketch.backends.cuda import CupyBackend
from distsketch.testing.devices import EmulatedCSR, EmulatedDeviceArray, HostModules
from gpuhelpers import cupy_skip_reason
from reference.errors import norm_rel_err

EMU = CupyBackend(HostModules(), name="cuda-sparse-emulated")
U = np.finfo(np.float64).eps / 2  # unit roundoff of float64

KERNELS = [ds.Gaussian(0.4), ds.Linear(), ds.Polynomial(3, gamma=0.5, coef0=1.0),
           ds.Tanimoto(), ds.GaussianTanimoto(0.7), ds.Matern(1.5), ds.Laplacian(0.3)]
#: the kernels whose route-to-route rounding :func:`route_bound` bounds
BOUNDED = KERNELS[:5]


@pytest.fixture
def be():
    """The emulated device, mapped to its array types for this test (another test module may
    have registered a twin of the same types)."""
    register_backend(EMU)
    EMU.modules.counts.clear()
    return EMU


@pytest.fixture(params=["emulated", pytest.param("cupy", marks=pytest.mark.gpu)])
def device(request, be):
    """``(backend, emulated)``: the emulated device, or real CuPy (skipped with the reason
    where CuPy or a CUDA device is missing)."""
    if request.param == "emulated":
        return be, True
    reason = cupy_skip_reason()
    if reason:
        pytest.skip(reason)
    from distsketch.backends.base import get_backend

    return get_backend("cuda"), False


@pytest.fixture
def routes(monkeypatch):
    """Every ``(input, output)`` of ``kernels.sparse.cheaper_form`` during the test."""
    seen: list = []
    original = dk.cheaper_form

    def spy(A, be):
        out = original(A, be)
        seen.append((A, out))
        return out

    monkeypatch.setattr(dk_base, "cheaper_form", spy)  # where Kernel looks it up
    return seen


def _rows(n, d, density, seed):
    """Non-negative CSR rows of uniform random density (values in [0.5, 2): rows scaled by
    1/std, as the library's default rule for sparse inputs does)."""
    rng = np.random.default_rng(seed)
    return sp.random(n, d, density=density, format="csr", random_state=rng,
                     data_rvs=lambda k: rng.uniform(0.5, 2.0, k))


def _emptied(M, row: int):
    """CSR ``M`` with row ``row`` emptied (no stored entries)."""
    M = sp.csr_matrix(M.multiply((np.arange(M.shape[0]) != row)[:, None]))
    M.eliminate_zeros()
    assert M[row].nnz == 0
    return M


def _gamma(n: int) -> float:
    return n * U / (1 - n * U)


def route_bound(kernel, A, B) -> np.ndarray:
    """Per-entry bound on ``|K₁ − K₂|`` for two float64 evaluations of ``kernel(A, B)`` that
    differ in the order of their inner-product sums (non-negative rows ``A`` (n_a, d), ``B``).

    Each route computes ``G = ⟨a, b⟩`` and the squared norms with error at most
    ``g·‖a‖‖b‖`` and ``g·‖a‖²``, ``g = γ_{d+3}`` (the dense Gaussian route's augmented product
    has ``d + 2`` terms; one more rounding for the final scaling), so two routes differ by
    twice that. Then, with ``S = ‖a‖² + ‖b‖²`` and ``2‖a‖‖b‖ ≤ S``:

    - Linear: ``2g‖a‖‖b‖``;
    - Gaussian ``exp(−γ(S − 2G))``: the exponent differs by at most ``γ·2·(g·S + g·2‖a‖‖b‖)
      ≤ 4γgS·…`` (bounded by ``8γgS``), ``exp`` is ``k``-Lipschitz there, plus 4 ulps of
      ``exp``: ``k·(8γgS + 4u)``;
    - Polynomial ``(γG + c)^p``: ``p·|γG + c|^(p−1)·γ·2g‖a‖‖b‖`` (first order) plus ``p + 2``
      roundings of each route's power: ``2(p + 2)u·|k|``;
    - Tanimoto ``T = G / (S − G)``: ``G ≤ S/2`` so the denominator is at least ``S/2``, and
      for non-negative rows every sum has relative error ``g``: the denominator's relative
      error is at most ``3g``, ``T``'s ``5g`` per route, ``10g·T`` between routes (bounded by
      ``16g·T + 4u``; both-zero rows are exactly 1 on every route);
    - GaussianTanimoto ``exp(2γ(T − 1))``: ``k·(2γ·16g + 4u + 4u·|2γ(T − 1)|)``.
    """
    Ad = A.toarray() if sp.issparse(A) else np.asarray(A)
    Bd = B.toarray() if sp.issparse(B) else np.asarray(B)
    assert (Ad >= 0).all() and (Bd >= 0).all(), "route_bound assumes non-negative rows"
    g = _gamma(Ad.shape[1] + 3)
    na, nb = (Ad * Ad).sum(axis=1), (Bd * Bd).sum(axis=1)
    S = na[:, None] + nb[None, :]
    ab = np.sqrt(na)[:, None] * np.sqrt(nb)[None, :]
    K = np.abs(kernel(Ad, Bd))
    if isinstance(kernel, ds.Linear):
        return 2 * g * ab * 1.01 + 2 * U * K
    if isinstance(kernel, ds.Gaussian):
        return K * (8 * kernel.gamma * g * S + 4 * U) * 1.01
    if isinstance(kernel, ds.Polynomial):
        p, gam, c = kernel.degree, kernel.gamma, kernel.coef0
        base = gam * (Ad @ Bd.T) + abs(c) + gam * 2 * g * ab
        return (p * base ** (p - 1) * gam * 2 * g * ab + 2 * (p + 2) * U * K) * 1.01
    if isinstance(kernel, ds.GaussianTanimoto):
        e = np.abs(np.log(np.maximum(K, np.finfo(float).tiny)))
        return K * (2 * kernel.gamma * 16 * g + 4 * U + 4 * U * e) * 1.01
    if isinstance(kernel, ds.Tanimoto):
        return (16 * g * K + 4 * U) * 1.01
    raise AssertionError(f"no route bound for {kernel!r}")


# --------------------------------------------------------------------------- the emulation


def test_device_csr_is_not_a_scipy_sparse_matrix(be):
    """Like cupyx's CSR: not scipy.sparse (so the host-only scipy routes are never taken on
    the device), owned by the device backend, refusing host operands."""
    A = _rows(12, 9, 0.3, 0)
    dev = be.asarray(A, dtype=np.float64)
    assert isinstance(dev, EmulatedCSR) and not sp.issparse(dev)
    assert be.issparse(dev) and backend_of(dev) is be
    assert dev.shape == A.shape and dev.nnz == A.nnz and dev.dtype == np.float64
    np.testing.assert_array_equal(be.to_numpy(dev), A.toarray())
    np.testing.assert_array_equal(be.to_numpy(dev[3:7]), A[3:7].toarray())
    with pytest.raises(TypeError, match="host ndarray"):
        dev @ np.ones((9, 2))
    with pytest.raises(TypeError, match="host scipy.sparse"):
        dev @ A.T
    d = be.asarray(np.ones((2, 12)))
    assert isinstance(d @ dev, EmulatedDeviceArray)  # numpy defers to the device CSR
    np.testing.assert_array_equal(be.to_numpy(d @ dev), np.ones((2, 12)) @ A.toarray())


# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("keep", [True, False], ids=["kept-sparse", "densified"])
def test_each_branch_of_the_device_rule(be, routes, kernel, keep):
    """Every operand reaches the rule as a device CSR (the sparse arrays were copied); it stays
    one below the device threshold and becomes a device array above it, densified on the
    device; the host threshold, set to the opposite answer, plays no part."""
    A, B = _rows(19, 30, 0.1, 1), _rows(8, 30, 0.1, 2)
    with dk.tuned(ds.Tuning(device_sparse_max_density=1.0 if keep else 0.0,
                            sparse_max_density=0.0 if keep else 1.0)):
        out = kernel.fill(A, B, be.xp.empty((19, 8)))
    assert isinstance(out, EmulatedDeviceArray)
    assert len(routes) >= 2
    for given, used in routes:
        assert isinstance(given, EmulatedCSR)
        assert isinstance(used, EmulatedCSR if keep else EmulatedDeviceArray)
    assert be.modules.counts["staged"] == 0  # no dense host copy of the rows crossed


def test_the_rule_is_density_at_most_the_threshold(be, routes):
    """The boundary: ``nnz ≤ threshold · n · d`` stays sparse, one entry more is densified."""
    n, d = 10, 10
    for nnz, sparse in ((0, True), (5, True), (6, False)):
        A = sp.csr_matrix((np.ones(nnz), (np.arange(nnz), np.arange(nnz))), shape=(n, d))
        routes.clear()
        with dk.tuned(ds.Tuning(device_sparse_max_density=0.05)):
            ds.Linear().fill(A, A, be.xp.empty((n, n)))
        assert [isinstance(used, EmulatedCSR) for _, used in routes] == [sparse]


def test_the_default_device_threshold_applies(be, routes):
    """With the defaults as shipped (the device backend's threshold, the default Tuning's host
    threshold), a block between the device and host thresholds is densified on the device and
    kept sparse on the host."""
    host = ds.Tuning().sparse_max_density
    assert ds.Tuning().device_sparse_max_density is None  # the backend's own threshold
    lo, hi = sorted((dcuda.DEVICE_SPARSE_MAX_DENSITY, host))
    A = _rows(200, 50, (lo + hi) / 2, 3)
    assert lo * 200 * 50 < A.nnz <= hi * 200 * 50
    ds.Gaussian(0.1).fill(A, A, be.xp.empty((200, 200)))
    device_kept = isinstance(routes[-1][1], EmulatedCSR)
    routes.clear()
    ds.Gaussian(0.1).fill(A, A, np.empty((200, 200)))
    host_kept = sp.issparse(routes[-1][1])
    assert device_kept == (A.nnz <= dcuda.DEVICE_SPARSE_MAX_DENSITY * 200 * 50)
    assert host_kept == (A.nnz <= host * 200 * 50)
    assert device_kept != host_kept


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("kernel", BOUNDED, ids=repr)
@pytest.mark.parametrize("keep", [True, False], ids=["kept-sparse", "densified"])
def test_device_sparse_blocks_equal_the_cpu(device, kernel, keep):
    """Kernel blocks (``__call__``, ``fill`` with column scales, ``A is B``) from device CSR
    rows, kept sparse or densified on the device, against the CPU's blocks from the same host
    CSR rows: within :func:`route_bound` on the emulated device (the same numpy arithmetic in
    another summation order); on a GPU within the float64 block tolerance of tests/test_gpu.py, 1e-10
    relative (CUDA's ``exp`` and BLAS round differently from the host's)."""
    be, emulated = device
    # an empty row in each (Tanimoto's both-zero convention: T = 1)
    A, B = _emptied(_rows(23, 40, 0.15, 4), 5), _emptied(_rows(17, 40, 0.15, 5), 6)
    scale = np.random.default_rng(6).uniform(0.5, 2.0, 17)

    def check(got, want, bound):
        if emulated:
            assert (np.abs(got - want) <= bound).all(), np.max(np.abs(got - want) / bound)
        else:
            assert norm_rel_err(got, want) <= 1e-10

    want = kernel(A, B)
    bound = route_bound(kernel, A, B)
    with dk.tuned(ds.Tuning(device_sparse_max_density=1.0 if keep else 0.0)):
        check(be.to_numpy(kernel(be.asarray(A), be.asarray(B))), want, bound)
        got = be.to_numpy(kernel.fill(A, B, be.xp.empty((23, 17)), be.asarray(scale)))
        check(got, want * scale, bound * scale * (1 + 4 * U) + 2 * U * np.abs(got))
        same = be.to_numpy(kernel.fill(A, A, be.xp.empty((23, 23))))
    check(same, kernel(A, A), route_bound(kernel, A, A))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("keep", [True, False], ids=["kept-sparse", "densified"])
def test_sparse_fit_on_the_device_equals_the_cpu(device, keep, dtype):
    """A SketchedKRR fit from CSR rows through the device (landmarks and row blocks copied as
    CSR, then kept sparse or densified there: ``Tuning.device_sparse_max_density``) against
    the CPU fit on the same rows."""
    be, emulated = device
    tuning = ds.Tuning(device_sparse_max_density=1.0 if keep else 0.0)
    X = _rows(120, 30, 0.1, 7)
    y = np.sin(np.asarray(X.sum(axis=1)).ravel())

    def fit(backend):
        return ds.SketchedKRR(ds.Gaussian(0.2), sketch=ds.SubSampling(30), lam=1e-3,
                              random_state=0, options=ds.EngineOptions(
                                  block_rows=25, gram_chunk=11, block_dtype=dtype,
                                  backend=backend, tuning=tuning)).fit(X, y)

    ref = fit("numpy")
    if emulated:
        be.modules.counts.clear()
    got = fit(be.name)
    if emulated:
        assert be.modules.counts["to_host"] >= 120 // 25  # the pass ran on the device
    assert norm_rel_err(got.predict(X), ref.predict(X)) <= CLOSED_FORM_RTOL[dtype]
