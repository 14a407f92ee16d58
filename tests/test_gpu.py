"""The CUDA backend (distsketch.backends.cuda).

Two ways through the same code: :class:`~distsketch.backends.cuda.CupyBackend` built on
:class:`~distsketch.testing.devices.HostModules` (numpy dressed as a device: its arrays refuse host ndarrays
in ufuncs and products as CuPy's do, "pinned" staging buffers and streams are host stand-ins)
runs everywhere and must give bitwise the numpy backend's results, since it performs the same
numpy operations; the same tests with real CuPy are marked ``gpu`` and skip with the reason
where CuPy or a CUDA device is missing. On a device the tolerances are: kernel
blocks 1e-10 relative in float64 and 1e-4 in float32 (CUDA's ``exp``/``expf`` and GEMM round
differently from the host's), fits as tests/conftest.py's CLOSED_FORM_RTOL (the solve amplifies
block rounding by its conditioning).
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import types

import dask
import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
import distsketch.backends.cuda as dcuda
from conftest import CLOSED_FORM_RTOL
from distsketch.backends.base import BACKENDS, register_backend
from distsketch.backends.cuda import CupyBackend
from distsketch.decoding.preimage import decode_fixed, decode_ragged
from distsketch.engine.features import FeatureMap
from distsketch.linalg import topk
from distsketch.options import check_options
from distsketch.testing.devices import EmulatedCSR, EmulatedDeviceArray, HostModules
from gpuhelpers import DEVICE_PARAMS, cupy_skip_reason, pick_device
from reference.errors import norm_rel_err

EMU = register_backend(CupyBackend(HostModules(), name="cuda-emulated"))


@pytest.fixture(params=DEVICE_PARAMS)
def device(request):
    """``(backend, exact)``: the emulated backend (bitwise the host results) or real CuPy."""
    return pick_device(request.param, EMU)


@pytest.fixture
def cuda_is_emulated(monkeypatch):
    """``device="cuda"`` resolves to an emulated backend named "cuda" for this test."""
    monkeypatch.delitem(BACKENDS, "cuda", raising=False)
    monkeypatch.setattr(dcuda, "_default_modules", HostModules)
    yield
    BACKENDS.pop("cuda", None)
    register_backend(EMU)


def _counts(be):
    """The emulated device's counters, zeroed (an empty counter for a real device)."""
    counts = getattr(be.modules, "counts", None)
    if counts is None:
        return collections.Counter()
    counts.clear()
    return counts


def _host(be, a):
    out = be.to_numpy(a)
    assert type(out) is np.ndarray
    return out


def _close(got, want, exact, rtol):
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        assert norm_rel_err(got, want) <= rtol


BLOCK_RTOL = {"float64": 1e-10, "float32": 1e-4}

KERNELS = [ds.Gaussian(0.4), ds.Laplacian(0.3), ds.Matern(0.5), ds.Matern(1.5), ds.Matern(2.5),
           ds.Linear(), ds.Polynomial(3, gamma=0.5, coef0=1.0), ds.Tanimoto(),
           ds.GaussianTanimoto(0.7)]


# --------------------------------------------------------------------------- the module


@pytest.mark.slow
def test_importing_distsketch_never_imports_cupy():
    code = ("import sys, distsketch as ds, distsketch.backends, distsketch.backends.cuda, distsketch.linalg.topk;"
            "ds.EngineOptions(); assert 'cupy' not in sys.modules and 'cupyx' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_emulation_refuses_host_arrays_as_cupy_does():
    """The property that makes the emulated runs meaningful: a host ndarray that reaches
    device math raises instead of silently computing on the host."""
    d = EMU.xp.ones((3, 2))
    with pytest.raises(TypeError, match="host ndarray"):
        d + np.ones((3, 2))
    with pytest.raises(TypeError, match="host ndarray"):
        d.T @ np.ones((3, 2))
    with pytest.raises(TypeError, match="host ndarray"):
        EMU.operand(sp.eye(2, format="csr")) @ np.ones((2, 2))
    assert isinstance(d * 2.0 + d, EmulatedDeviceArray)


def test_large_host_arrays_are_staged_through_reused_pinned_buffers():
    be = CupyBackend(HostModules(), name="cuda-staging-test")
    rng = np.random.default_rng(0)
    a = rng.normal(size=(300_000,)).astype(np.float32)  # 1.2 MB: above PINNED_MIN_BYTES
    assert a.nbytes >= dcuda.PINNED_MIN_BYTES
    got = [be.asarray(a, dtype=np.float64) for _ in range(4)]
    assert be.modules.counts["pinned"] == 2 and be.modules.counts["staged"] == 4  # reused
    for g in got:
        assert isinstance(g, EmulatedDeviceArray) and g.dtype == np.float64
        np.testing.assert_array_equal(g.view(np.ndarray), a.astype(np.float64))
    small = be.asarray(np.arange(5.0))
    assert be.modules.counts["pinned"] == 2 and isinstance(small, EmulatedDeviceArray)
    csr = sp.random(20, 10, density=0.3, random_state=0, format="csr")
    dev = be.asarray(csr, dtype=np.float64)
    assert be.issparse(dev)
    np.testing.assert_array_equal(be.to_numpy(dev), csr.toarray())


class _FakeCupy(types.ModuleType):
    """CuPy's API as :class:`~distsketch.backends.cuda.CupyModules` calls it, over the emulated
    namespace, logging the staging protocol (pinned allocations, event records, syncs, waits)."""

    def __init__(self, log: list):
        super().__init__("cupy")
        xp, ids = HostModules().xp, {}

        def name(ev):
            return ids.setdefault(id(ev), f"e{len(ids)}")

        class Event:
            def record(self, stream):
                log.append(("record", name(self)))

            def synchronize(self):
                log.append(("sync", name(self)))

        class Stream:
            def __init__(self, non_blocking=False):
                assert non_blocking

            def wait_event(self, ev):
                log.append(("wait", name(ev)))

        self._xp, self.ndarray, self.__version__ = xp, EmulatedDeviceArray, "fake"
        self.cuda = types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
            alloc_pinned_memory=lambda n: (log.append(("pinned", n)), bytearray(n))[1],
            Stream=Stream, Event=Event, get_current_stream=lambda: Stream(non_blocking=True))

    def __getattr__(self, attr):
        return getattr(self._xp, attr)

    def asnumpy(self, a):
        return np.array(a.view(np.ndarray))


def test_cupy_modules_stage_through_pinned_buffers_and_events(monkeypatch):
    """CupyModules against a CuPy stand-in: a buffer is refilled only after the event of its
    previous copy synchronised, the compute stream waits on every copy, and a fit through it
    is the numpy fit."""
    log: list = []
    cupyx, scipy_, sparse_ = (types.ModuleType(n) for n in
                              ("cupyx", "cupyx.scipy", "cupyx.scipy.sparse"))
    cupyx.scipy, scipy_.sparse = scipy_, sparse_
    sparse_.csr_matrix, sparse_.issparse, sparse_.spmatrix = (
        lambda M: EmulatedCSR(sp.csr_matrix(M)),
        lambda a: isinstance(a, EmulatedCSR), EmulatedCSR)
    for mod_name, mod in (("cupy", _FakeCupy(log)), ("cupyx", cupyx), ("cupyx.scipy", scipy_),
                          ("cupyx.scipy.sparse", sparse_)):
        monkeypatch.setitem(sys.modules, mod_name, mod)
    be = CupyBackend(dcuda.CupyModules(), name="cuda-fake")
    big = np.arange(300_000, dtype=np.float64)  # 2.4 MB: staged
    for i in range(3):
        np.testing.assert_array_equal(be.to_numpy(be.asarray(big + i)), big + i)
    assert log == [("pinned", big.nbytes), ("record", "e0"), ("wait", "e0"),
                   ("pinned", big.nbytes), ("record", "e1"), ("wait", "e1"),
                   ("sync", "e0"), ("record", "e0"), ("wait", "e0")]
    register_backend(be)
    try:
        X, _, y = _problem(400)

        def fit(backend):
            return ds.SketchedKRR(ds.Gaussian(0.3), sketch=ds.CountSketch(20), lam=1e-3,
                                  random_state=0, options=ds.EngineOptions(
                                      block_rows=200, gram_chunk=400, backend=backend)).fit(X, y)

        np.testing.assert_array_equal(fit("cuda-fake").predict(X), fit("numpy").predict(X))
    finally:
        BACKENDS.pop("cuda-fake", None)
        register_backend(EMU)


# --------------------------------------------------------------------------- block math


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
def test_kernel_block_fill_equals_numpy(device, kernel, dtype):
    be, exact = device
    rng = np.random.default_rng(2)
    A, B = rng.normal(size=(23, 5)), rng.normal(size=(17, 5))
    if isinstance(kernel, (ds.Tanimoto, ds.GaussianTanimoto)):
        A, B = np.abs(A), np.abs(B)
        A[3] = 0.0
        B[4] = 0.0  # both-zero rows: T = 1 by convention
    scale = rng.normal(size=17)
    want = kernel.fill(A, B, np.empty((23, 17), dtype=dtype), scale)
    out = kernel.fill(A, B, be.xp.empty((23, 17), dtype=dtype), be.asarray(scale))
    assert isinstance(out, be.array_types)
    _close(_host(be, out), want, exact, BLOCK_RTOL[dtype])
    same = kernel.fill(A, A, be.xp.empty((23, 23)))  # A is B: the exact diagonal path
    _close(_host(be, same), kernel(A, A), exact, BLOCK_RTOL["float64"])


@pytest.mark.parametrize("kernel", [ds.Gaussian(0.4), ds.Linear(), ds.Tanimoto(),
                                    ds.GaussianTanimoto(0.7), ds.Laplacian(0.3)], ids=repr)
def test_sparse_block_fill_equals_numpy(device, kernel):
    be, exact = device
    A = sp.random(19, 12, density=0.3, random_state=3, format="csr")
    B = sp.random(8, 12, density=0.3, random_state=4, format="csr")
    out = kernel.fill(A, B, be.xp.empty((19, 8)))
    _close(_host(be, out), kernel(A, B), exact, BLOCK_RTOL["float64"])


# --------------------------------------------------------------------------- fits


def _problem(n=90):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(n, 4))
    Y = (rng.random((n, 6)) < 0.4).astype(float)
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    return X, Y, y


def _opts(backend, dtype, **kw):
    return ds.EngineOptions(block_rows=13, gram_chunk=9, block_dtype=dtype, backend=backend, **kw)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("sketch", [ds.SubSampling(25), ds.GaussianSketch(12),
                                    ds.CountSketch(15), ds.PSparsified(12, p=0.3)], ids=repr)
def test_sketched_krr_fit_equals_cpu(device, sketch, dtype):
    be, exact = device
    X, _, y = _problem()

    def fit(backend):
        return ds.SketchedKRR(ds.Gaussian(0.3), sketch=sketch, lam=1e-3, random_state=0,
                              options=_opts(backend, dtype)).fit(X, y)

    ref = fit("numpy")
    counts = _counts(be)
    got = fit(be.name)
    if exact:  # it ran on the emulated device: kernel exps there, one partial sum back per block
        assert counts["xp.empty"] >= 7 and counts["to_host"] >= -(-90 // 13)
    _close(got.predict(X), ref.predict(X), exact, CLOSED_FORM_RTOL[dtype])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_sisokr_fit_pass_sums_and_topk_equal_cpu(device, dtype, tmp_path):
    """SISOKR with both sides sketched and a store: the stored pass sums (the blocks went
    device → host for the store writes), the surrogate and the decoded top-k."""
    be, exact = device
    X, Y, _ = _problem()
    Xq = np.random.default_rng(6).normal(size=(7, 4))

    def fit(backend, path):
        return ds.SISOKR(ds.Gaussian(0.4), ds.Gaussian(0.3), input_sketch=ds.SubSampling(30),
                         output_sketch=ds.CountSketch(10), lam=1e-3, random_state=0,
                         store=str(path), options=_opts(backend, dtype)).fit(X, Y)

    ref = fit("numpy", tmp_path / "cpu")
    counts = _counts(be)
    got = fit(be.name, tmp_path / "gpu")
    if exact:  # per block: C and D to the host for the store, and the partial sums
        assert counts["to_host"] >= 3 * -(-90 // 13)
    from distsketch.engine.store import open_fit_store

    want, have = open_fit_store(str(tmp_path / "cpu")).read_sums(), \
        open_fit_store(str(tmp_path / "gpu")).read_sums()
    assert set(have) == set(want)
    for name in want:
        if isinstance(want[name], tuple):  # U: unique output rows, found on the host
            for h, w in zip(have[name], want[name], strict=True):
                np.testing.assert_array_equal(h, w)
        else:
            _close(np.asarray(have[name]), np.asarray(want[name]), exact, BLOCK_RTOL[dtype])
    _close(got.surrogate(Xq), ref.surrogate(Xq), exact, CLOSED_FORM_RTOL[dtype])
    if exact:
        np.testing.assert_array_equal(got.predict_topk(Xq, k=3)[1], ref.predict_topk(Xq, k=3)[1])


def test_a_fitted_models_decoding_runs_on_its_options_device():
    """``predict`` and ``predict_topk`` (a fixed set, per-query sets, the reduced-rank form)
    rank on the device of the model's options — the emulated device counts its ``argsort``
    calls — and return the CPU model's indices and scores bitwise."""
    X, Y, _ = _problem()
    Y = (Y > np.median(Y, axis=0)).astype(float)
    Xq, rng = X[:11], np.random.default_rng(3)
    cands = (rng.random((40, Y.shape[1])) < 0.4).astype(float)
    sets = [cands[:7], cands[7:30], cands[30:]]
    qs = np.array([2, 0, 1, 1, 0, 2, 2, 0, 1, 0, 2])

    def fit(backend, rank=None):
        return ds.SISOKR(ds.Gaussian(0.4), ds.Gaussian(0.3), input_sketch=ds.SubSampling(30),
                         output_sketch=ds.CountSketch(10), lam=1e-3, rank=rank,
                         random_state=0, options=_opts(backend, "float64")).fit(X, Y)

    register_backend(EMU)
    for rank in (None, 3):
        ref, got = fit("numpy", rank), fit(EMU.name, rank)
        for decode in (lambda m: (m.predict(Xq),),
                       lambda m: m.predict_topk(Xq, cands, k=4),
                       lambda m: m.predict_topk(Xq, k=2, candidate_sets=sets, query_sets=qs)):
            counts = _counts(EMU)
            have = decode(got)
            on_device = counts["xp.argsort"]
            assert on_device >= 1  # ranked on the device
            want = decode(ref)
            assert counts["xp.argsort"] == on_device  # the CPU model's decoding stays on the host
            for h, w in zip(have, want, strict=True):
                np.testing.assert_array_equal(h, w)


def test_device_cuda_fits_through_the_cuda_backend(cuda_is_emulated):
    X, _, y = _problem()
    opts = ds.EngineOptions(block_rows=13, device="cuda")
    assert check_options(opts).backend == "cuda"
    got = ds.SketchedKRR(ds.Gaussian(0.3), sketch=ds.SubSampling(20), lam=1e-3, random_state=0,
                         options=opts).fit(X, y)
    ref = ds.SketchedKRR(ds.Gaussian(0.3), sketch=ds.SubSampling(20), lam=1e-3, random_state=0,
                         options=ds.EngineOptions(block_rows=13)).fit(X, y)
    assert isinstance(BACKENDS["cuda"], CupyBackend)
    np.testing.assert_array_equal(got.predict(X), ref.predict(X))


def test_mixing_and_projections_cross_to_the_device_once(monkeypatch):
    """A sketch's mixing columns (and a feature map's projection) are copied to the device
    once per span, not once per block; freed owners and the byte budget are honoured; the
    model is bitwise the host's (emulated device)."""
    import gc

    import distsketch.backends.cuda
    from distsketch.sketches.base import SparseSketch
    from distsketch.sketches.tiled import TiledSketch

    X, _, y = _problem()
    calls = collections.Counter()
    for cls in (SparseSketch, TiledSketch):
        orig = cls.mixing_t_block

        def counted(self, a, c, _orig=orig):
            calls[(id(self), a, c)] += 1
            return _orig(self, a, c)

        monkeypatch.setattr(cls, "mixing_t_block", counted)
    be = CupyBackend(HostModules(), name="cuda-emulated-cache")
    register_backend(be)
    try:
        for sketch in (ds.GaussianSketch(12), ds.PSparsified(12, p=0.3)):
            calls.clear()
            opts = _opts(be.name, "float64")  # 13-row blocks: 7 blocks, 9-column spans
            got = ds.SketchedKRR(ds.Gaussian(0.3), sketch=sketch, lam=1e-3, random_state=0,
                                 options=opts).fit(X, y)
            assert calls and max(calls.values()) == 1  # each span once, over 7 blocks
            ref = ds.SketchedKRR(ds.Gaussian(0.3), sketch=sketch, lam=1e-3, random_state=0,
                                 options=_opts("numpy", "float64")).fit(X, y)
            np.testing.assert_array_equal(got.predict(X), ref.predict(X))
        # a projection: cached while its owner lives, never served to a new owner
        def cache_one():
            P = np.arange(12.0).reshape(6, 2)
            first = be.cached_operand(P, ("rows", 0, 6), lambda: P)
            assert be.cached_operand(P, ("rows", 0, 6), lambda: 1 / 0) is first
            return id(P)

        key = cache_one()  # P is freed on return
        gc.collect()
        Q = np.ones((6, 2))
        if id(Q) == key:  # the address reused: the dead owner's entry must not be served
            assert be.to_numpy(be.cached_operand(Q, ("rows", 0, 6), lambda: Q)).sum() == 12
        # over the budget: made each time, nothing kept
        monkeypatch.setattr(distsketch.backends.cuda, "OPERAND_CACHE_BYTES", 64)
        big = np.ones((10, 10))
        made = []
        for _ in range(2):
            be.cached_operand(big, ("rows", 0, 10), lambda: made.append(1) or big)
        assert len(made) == 2
    finally:
        BACKENDS.pop(be.name, None)


@pytest.mark.cluster
def test_two_workers_give_the_one_worker_model(device):
    """One GPU per worker: a LocalCluster of two workers (threads in this process, so they see
    this process's backends) fits the single-process model — the partial sums are added in the
    same fixed tree order."""
    from distributed import Client, LocalCluster

    be, exact = device
    X, _, y = _problem()

    def fit():
        return ds.SketchedKRR(ds.Gaussian(0.3), sketch=ds.GaussianSketch(12), lam=1e-3,
                              random_state=0, options=_opts(be.name, "float32")).fit(X, y)

    one = fit().predict(X)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster):
        two = fit().predict(X)
    _close(two, one, exact, CLOSED_FORM_RTOL["float32"])


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("pad", [True, False])
@pytest.mark.parametrize("k", [1, 4, 40])
def test_device_score_topk_equals_host(device, k, pad, monkeypatch):
    """Tiles of 8 candidates, exact duplicates (ties resolved by the lower index), k larger
    than a tile and than the candidate count."""
    be, exact = device
    rng = np.random.default_rng(7)
    F = rng.normal(size=(30, 5))
    F[[11, 23, 29]] = F[4]  # duplicates of candidate 4
    G, kyy = rng.normal(size=(6, 5)), rng.random(30)
    kyy[[11, 23, 29]] = kyy[4]
    index = np.arange(100, 130, dtype=np.int64)
    want = topk.score_topk(G, F, kyy, k, index, pad=pad, rows=8)
    counts = _counts(be)
    got = topk.score_topk(G, F, kyy, k, index, pad=pad, rows=8, backend=be.name)
    if exact:  # scored on the emulated device; only the winners came back
        assert counts["to_host"] == 2 and counts["xp.argsort"] >= 1
    if exact:
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    else:
        np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-10)


def test_decode_on_the_device_equals_host(device):
    be, exact = device
    rng = np.random.default_rng(8)
    L = rng.normal(size=(12, 3))
    fmap = FeatureMap(ds.Gaussian(0.5), L, rng.normal(size=(12, 4)))
    cands = rng.normal(size=(50, 3))
    G = rng.normal(size=(9, 4))

    def read(a, b):
        return cands[a:b]

    kw = dict(n_candidates=50, k=5, block_rows=16)
    want = decode_fixed(fmap, G, read, **kw)
    got = decode_fixed(fmap, G, read, backend=be.name, **kw)
    offsets = np.array([0, 7, 30, 50])
    qs = np.array([2, 0, 1, 1, 0, 2, 2, 0, 1])
    rw = decode_ragged(fmap, G, read, offsets=offsets, query_sets=qs, k=5, block_rows=16)
    rg = decode_ragged(fmap, G, read, offsets=offsets, query_sets=qs, k=5, block_rows=16,
                       backend=be.name)
    for g, w in ((got, want), (rg, rw)):
        if exact:
            np.testing.assert_array_equal(g[0], w[0])
            np.testing.assert_array_equal(g[1], w[1])
        else:
            np.testing.assert_allclose(g[1], w[1], rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- options


def test_device_and_backend_resolve_and_contradictions_are_refused(cuda_is_emulated):
    assert check_options(ds.EngineOptions()).device == "cpu"
    assert check_options(ds.EngineOptions(backend="cuda")).device == "cuda"
    with dask.config.set({"distsketch.device": "cuda"}):
        o = check_options(ds.EngineOptions())
        assert (o.device, o.backend) == ("cuda", "cuda")
        o = check_options(ds.EngineOptions(device="cpu"))  # the option wins over the config
        assert (o.device, o.backend) == ("cpu", "numpy")
    with dask.config.set({"distsketch.device": "tpu"}):
        with pytest.raises(ValueError, match=r"^options.device: the dask config key "):
            check_options(ds.EngineOptions())
    with pytest.raises(ValueError, match=r"^options.device: device='cpu' contradicts"):
        check_options(ds.EngineOptions(device="cpu", backend="cuda"))
    with pytest.raises(ValueError, match=r"^options.device: .*backend='cuda-emulated'"):
        check_options(ds.EngineOptions(device="cuda", backend="cuda-emulated"))
    with pytest.raises(ValueError, match=r"^options.device: must be 'cpu', 'cuda' or None"):
        check_options(ds.EngineOptions(device="gpu"))


def _fit_refused(tmp_path, match):
    X, _, y = _problem(30)
    path = tmp_path / "never"
    with pytest.raises(ValueError, match=match) as info:
        ds.SketchedKRR(ds.Gaussian(0.3), sketch=ds.SubSampling(10), random_state=0,
                       store=str(path), options=ds.EngineOptions(device="cuda")).fit(X, y)
    assert not path.exists()  # refused before anything was written
    return str(info.value)


def test_device_cuda_without_cupy_names_the_gpu_extra(tmp_path, monkeypatch):
    monkeypatch.delitem(BACKENDS, "cuda", raising=False)
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    msg = _fit_refused(tmp_path, r"^options.device: device='cuda' needs CuPy")
    assert 'pip install "distsketch[gpu]"' in msg and "cupy-cuda12x" in msg
    assert '"distsketch[gpu-cuda13]"' in msg and "cupy-cuda13x" in msg
    assert "cuda" not in BACKENDS


def test_device_cuda_without_a_device_says_so(tmp_path, monkeypatch):
    monkeypatch.delitem(BACKENDS, "cuda", raising=False)
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 0))
    cupyx, scipy_, sparse_ = (types.ModuleType(n) for n in
                              ("cupyx", "cupyx.scipy", "cupyx.scipy.sparse"))
    cupyx.scipy, scipy_.sparse = scipy_, sparse_
    for name, mod in (("cupy", fake), ("cupyx", cupyx), ("cupyx.scipy", scipy_),
                      ("cupyx.scipy.sparse", sparse_)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    msg = _fit_refused(tmp_path, r"^options.device: device='cuda': CuPy is installed but sees "
                                 r"no CUDA device")
    assert "CUDA_VISIBLE_DEVICES=''" in msg



@pytest.mark.slow
def test_bench_gpu_quick_runs_and_records_nothing_without_a_gpu(tmp_path):
    if cupy_skip_reason() is None:
        pytest.skip("a GPU is present: the quick run would measure it (run it by hand)")
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    results = bench / "RESULTS.md"
    had_section = results.exists() and "<!-- gpu -->" in results.read_text()
    out = subprocess.run([sys.executable, str(bench / "bench_gpu.py"), "--quick"],
                         capture_output=True, text=True, timeout=600, cwd=bench)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "NOT a GPU" in out.stdout and "nothing recorded" in out.stdout
    assert "PASS" not in out.stdout and "FAIL" not in out.stdout
    assert had_section or not (results.exists() and "<!-- gpu -->" in results.read_text())
    full = subprocess.run([sys.executable, str(bench / "bench_gpu.py"), "--n", "1000"],
                          capture_output=True, text=True, timeout=600, cwd=bench)
    assert full.returncode == 2 and "nothing measured, nothing written" in full.stdout
    # the preconditioner's host-against-device comparison, on the stand-in
    path = tmp_path / "factor.json"
    factor = subprocess.run([sys.executable, str(bench / "bench_gpu.py"), "--factor-only",
                             "--quick", "--json", str(path)],
                            capture_output=True, text=True, timeout=600, cwd=bench)
    assert factor.returncode == 0, factor.stderr[-3000:]
    assert "NOT a GPU" in factor.stdout and "nothing recorded" in factor.stdout
    got = json.loads(path.read_text())
    assert got["complete"] and got["emulated"] and [r["m"] for r in got["factor"]] == [300, 600]
    for row in got["factor"]:
        assert all(row[f"{w}_{k}_s"] > 0 for w in ("host", "device")
                   for k in ("factor", "preconditioner", "iteration"))
