"""The CUDA compute backend: block math on one GPU through CuPy.

``EngineOptions(device="cuda")`` (or the dask config key ``distsketch.device: cuda``) runs the
pass's kernel block fills, block products and partial sums, and decoding's scores and top-k,
on the GPU of the process that runs the task: one GPU per dask worker
(``dask_cuda.LocalCUDACluster``, or ``CUDA_VISIBLE_DEVICES`` per worker in ``cluster/``).

What moves (docs/design/engine.md, "The CUDA backend"):

- host → device: a row block, landmarks, the sketch's mixing columns, targets. A plain
  ndarray above :data:`PINNED_MIN_BYTES` is staged through one of two reused page-locked
  (pinned) host buffers of the calling thread and copied on that thread's copy stream; the
  compute stream waits on the copy's event, so the next block's staging overlaps this block's
  kernels, and a buffer is refilled only after its last copy finished. scipy.sparse rows go
  to ``cupyx.scipy.sparse`` CSR (the smaller form to copy); a built-in kernel then densifies
  them on the device above :data:`DEVICE_SPARSE_MAX_DENSITY` (the device's density rule, a
  placeholder until measured on a GPU by ``benchmarks/bench_gpu.py --sparse-only``).
- device → host: the partial sums (``m × m``, float64) and, only when the fit keeps a store,
  the blocks ``C``, ``D`` the I/O thread writes; decoding returns the ``k`` winners per query.
  With ``store=None`` nothing else leaves the device.

Partial sums are float64 (the pass converts float32 blocks to float64 on the device before the
products), added on the host in the fixed tree order, so a GPU fit is the CPU fit up to the
rounding of the device's BLAS and ``exp``: float64 blocks to about 1e-10 relative, float32
blocks to about 1e-4 after the solve's amplification (tests/test_gpu.py).

The class takes its array modules as an argument: :class:`CupyModules` (the default, CuPy
imported on first use) or, in tests, :class:`~distsketch.testing.devices.HostModules`, numpy
dressed as a device (its arrays refuse host ndarrays as CuPy's do, its CSR matrices are not
scipy.sparse matrices), so the whole code path (staging, streams, sparse operands, device
top-k) runs on any machine. Importing this module never imports CuPy.

Glossary: ``xp`` the device array namespace (``cupy``), ``sparse`` its sparse module
(``cupyx.scipy.sparse``).
"""

from __future__ import annotations

import collections
import logging
import os
import threading

import numpy as np
import scipy.sparse as sp

from .base import Backend, BackendUnavailable, register_backend

__all__ = ["CupyBackend", "CupyModules", "CudaUnavailable", "cuda_backend", "GPU_EXTRA",
           "PINNED_MIN_BYTES", "DEVICE_SPARSE_MAX_DENSITY", "DEVICE_FACTOR_MIN_M"]

logger = logging.getLogger(__name__)

#: What to install for the CUDA backend.
GPU_EXTRA = ('pip install "distsketch[gpu]" (CuPy for CUDA 12, cupy-cuda12x) or '
             '"distsketch[gpu-cuda13]" (CUDA 13, cupy-cuda13x); for another CUDA version install '
             'the matching cupy-cudaXXx wheel, https://docs.cupy.dev/en/stable/install.html')

#: Host arrays smaller than this are copied directly (staging costs more than it saves).
PINNED_MIN_BYTES = 1 << 20

#: Row-tile size of the kernels' fills on the device (kernels/families.py tiles host fills at
#: 4 MiB for the CPU caches; a GPU wants few, large launches: 256 MiB is 16 384 rows × 2048
#: columns of float64 exponents, bounding the float64 work array a float32 block is filled
#: through).
DEVICE_TILE_BYTES = 256 << 20
#: Device memory for operands kept between blocks (:meth:`CupyBackend.cached_operand`).
OPERAND_CACHE_BYTES = 512 << 20
#: Density (stored entries / (rows × columns)) above which a device CSR operand of a built-in
#: kernel is densified on the device before its product (:attr:`CupyBackend.sparse_max_density`,
#: applied where the host rule ``Tuning.sparse_max_density`` is: ``kernels.sparse.cheaper_form``;
#: a fit's ``EngineOptions(tuning=Tuning(device_sparse_max_density=…))`` overrides it).
#: The sparse arrays cross the bus (``12·nnz`` bytes against ``8·n·d``) and ``toarray`` runs on
#: the device. A PLACEHOLDER, not measured: no CUDA device was available when it was written.
#: The reasoning behind its size: the dense route is one cuBLAS GEMM of ``2·n·d·n_b`` flops near
#: the GPU's GEMM peak, the sparse one a cuSPARSE product (sparse × sparse when the landmarks
#: are CSR too, as in a pass over sparse rows) bound by irregular memory traffic at a small
#: fraction of that peak, plus the distance expansion's elementwise passes; the crossover
#: ``nnz / (n·d)`` is about the ratio of the two rates, so it is expected at a few percent —
#: below the host's 8 %, where the GEMM is only 6–42× scipy's single-threaded CSR rate
#: (benchmarks/ENGINE.md "sparse_blocks"). The one
#: public data point found (Stack Overflow question 30118673, "Why cuSPARSE is much slower than
#: cuBLAS for sparse matrix multiplication": cusparseScsrmm 1.4 ms against cublasSgemm
#: 0.21 ms at 50 % density, 192 × 2400 by 2400 × 256 on a Titan Black) only says the crossover
#: is far below 50 %. Set it from ``python benchmarks/bench_gpu.py --sparse-only`` on the GPU
#: the fits run on (ENGINE.md section "gpu_sparse": the smallest sparse × sparse crossover
#: over the shapes).
DEVICE_SPARSE_MAX_DENSITY = 0.02
#: Landmarks (m) from which PCG factors ``K_mm`` and applies its preconditioner on the driver's
#: GPU (:attr:`CupyBackend.factor_min_m`; ``distsketch.solvers.devicefactor``); a fit's
#: ``Tuning(device_factor_min_m=…)`` overrides it. A PLACEHOLDER, not measured: no CUDA device
#: was available when it was written. The reasoning behind its size: the host factors ``K_mm``
#: and ``T Tᵀ/m + λI`` once per λ (``≈ m³`` flops in all, near the cores' GEMM rate: about
#: 0.1 s at m = 4096 on 16 cores) and, at every CG iteration, makes four triangular solves
#: and one ``K_mm`` product with a few right-hand sides: reads of ``5·8·m²`` bytes, memory
#: bound (about 50 ms per iteration at m = 4096), where the device needs milliseconds for
#: both, plus one copy of ``K_mm`` over the bus (≈ 10 ms at m = 4096). Set it from
#: ``python benchmarks/bench_gpu.py --factor-only`` (ENGINE.md section "gpu_factor": the
#: smallest m at which the device's factorisation and its iteration both win).
DEVICE_FACTOR_MIN_M = 4096


class CudaUnavailable(BackendUnavailable):
    """``device="cuda"`` asked for where CuPy or a CUDA device is missing."""


# --------------------------------------------------------------------------- array modules


class CupyModules:
    """CuPy and cupyx, imported here (the first CUDA fit of the process), with the device
    operations the backend needs: pinned host memory, streams, events, copies."""

    def __init__(self):
        try:
            import cupy
            import cupyx.scipy.sparse as cusparse
        except ImportError as exc:
            raise CudaUnavailable(f"device='cuda' needs CuPy, which is not importable here "
                                  f"({exc}): {GPU_EXTRA}") from exc
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDARuntimeError: no driver, no device
            raise CudaUnavailable(f"device='cuda': CuPy is installed but finds no usable CUDA "
                                  f"device ({exc}); check the driver and CUDA_VISIBLE_DEVICES="
                                  f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}") from exc
        if count == 0:
            raise CudaUnavailable(f"device='cuda': CuPy is installed but sees no CUDA device "
                                  f"(CUDA_VISIBLE_DEVICES="
                                  f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}); run "
                                  f"on a GPU node or use device='cpu'")
        self.cupy = cupy
        self.xp = cupy
        self.stable_kind = None  # CuPy's sorts are always stable and accept no other kind
        self.sparse = cusparse
        # device sparse matrices: the base class of sparse arrays and matrices (CuPy ≥ 14,
        # ``_spbase``), else of matrices (CuPy 13, ``spmatrix``); issparse regardless
        base = getattr(cusparse, "_spbase", None) or getattr(cusparse, "spmatrix", None)
        self.array_types = (cupy.ndarray,) + ((base,) if isinstance(base, type) else ())

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        """A page-locked host buffer of ``nbytes`` bytes (uint8), kept alive by the array."""
        mem = self.cupy.cuda.alloc_pinned_memory(nbytes)
        return np.frombuffer(mem, np.uint8, nbytes)

    def stream(self):
        return self.cupy.cuda.Stream(non_blocking=True)

    def event(self):
        return self.cupy.cuda.Event()

    def copy_to_device(self, host: np.ndarray, stream):
        """A device copy of the (pinned) ``host`` array, enqueued on ``stream``."""
        out = self.cupy.empty(host.shape, dtype=host.dtype)
        out.set(host, stream=stream)
        return out

    def record(self, event, stream) -> None:
        event.record(stream)

    def wait(self, event) -> None:
        """Make the calling thread's current (compute) stream wait for ``event``."""
        self.cupy.cuda.get_current_stream().wait_event(event)

    def to_host(self, a) -> np.ndarray:
        return self.cupy.asnumpy(a)

    def cholesky(self, M):
        """``L`` lower-triangular with ``L Lᵀ = M`` (cuSOLVER's ``potrf``); raises
        ``numpy.linalg.LinAlgError`` where ``M`` is not positive definite (CuPy reports
        ``potrf``'s failure only under ``errstate(linalg="raise")``)."""
        import cupyx

        with cupyx.errstate(linalg="raise"):
            return self.cupy.linalg.cholesky(M)

    def solve_triangular(self, A, B, *, lower: bool, trans: bool):
        """``A^{-1} B`` (``A^{-T} B`` with ``trans``) for a triangular device ``A``."""
        from cupyx.scipy.linalg import solve_triangular

        return solve_triangular(A, B, lower=lower, trans="T" if trans else "N",
                                check_finite=False)


# --------------------------------------------------------------------------- the backend


class _Staging(threading.local):
    """A thread's copy stream and its two pinned buffers (with the event of each one's last
    copy): a buffer is refilled only after that copy finished."""

    def __init__(self):
        self.stream = None
        self.buffers: list = [None, None]
        self.events: list = [None, None]
        self.next = 0


class CupyBackend(Backend):
    """Block math on a CUDA device through CuPy (or on
    :class:`~distsketch.testing.devices.HostModules` in tests).

    Parameters
    ----------
    modules : CupyModules or distsketch.testing.devices.HostModules, optional
        The array modules; default :class:`CupyModules` (imports CuPy, checks for a device,
        raises :class:`CudaUnavailable` naming the ``gpu`` extra otherwise).
    name : str
        Registry name (``"cuda"``; tests register emulated instances under other names).
    """

    name = "cuda"
    tile_bytes = DEVICE_TILE_BYTES

    @property
    def sparse_max_density(self) -> float:
        """The device density rule's default threshold, :data:`DEVICE_SPARSE_MAX_DENSITY`; a
        fit's ``Tuning.device_sparse_max_density`` (``EngineOptions.tuning``) overrides it."""
        return DEVICE_SPARSE_MAX_DENSITY

    @property
    def factor_min_m(self) -> int:
        """The landmarks from which PCG's preconditioner is factored and applied on the device,
        :data:`DEVICE_FACTOR_MIN_M`; a fit's ``Tuning.device_factor_min_m`` overrides it."""
        return DEVICE_FACTOR_MIN_M

    def __init__(self, modules=None, *, name: str = "cuda"):
        self.modules = _default_modules() if modules is None else modules
        self.name = name
        self.xp = self.modules.xp
        self.array_types = tuple(self.modules.array_types)
        self._staging = _Staging()
        self._operands: collections.OrderedDict = collections.OrderedDict()
        self._operand_lock = threading.Lock()

    # -- data movement ---------------------------------------------------------------
    def asarray(self, a, dtype=None):
        """``a`` on the device: device arrays as they are (cast if ``dtype`` differs),
        scipy.sparse as device CSR, host arrays copied (through a pinned buffer above
        :data:`PINNED_MIN_BYTES`) in their own dtype and cast on the device."""
        if isinstance(a, self.array_types) or self.issparse(a):
            return a if dtype is None or a.dtype == np.dtype(dtype) else a.astype(dtype)
        if sp.issparse(a):
            a = a.tocsr()
            if dtype is not None:
                a = a.astype(dtype, copy=False)
            return self.modules.sparse.csr_matrix(a)
        a = np.asarray(a)
        if a.dtype == object:
            raise TypeError(f"{self!r}: cannot move an object array to the device")
        if a.nbytes < PINNED_MIN_BYTES:
            d = self.xp.asarray(np.ascontiguousarray(a))
        else:
            d = self._staged_copy(a)
        return d if dtype is None or d.dtype == np.dtype(dtype) else d.astype(dtype)

    def _staged_copy(self, a: np.ndarray):
        """Host → device through this thread's next pinned buffer, on its copy stream."""
        m, st = self.modules, self._staging
        if st.stream is None:
            st.stream = m.stream()
        j = st.next
        st.next = 1 - j
        if st.events[j] is not None:
            st.events[j].synchronize()  # the buffer's previous copy has finished
        buf = st.buffers[j]
        if buf is None or buf.nbytes < a.nbytes:
            # grow by half again, so slowly growing blocks do not reallocate every time
            size = max(a.nbytes, 0 if buf is None else buf.nbytes * 3 // 2)
            buf = st.buffers[j] = m.pinned_empty(size)
        host = buf[:a.nbytes].view(a.dtype).reshape(a.shape)
        np.copyto(host, a)
        d = m.copy_to_device(host, st.stream)
        if st.events[j] is None:
            st.events[j] = m.event()
        m.record(st.events[j], st.stream)
        m.wait(st.events[j])  # the compute stream uses d only after the copy
        return d

    def to_numpy(self, a) -> np.ndarray:
        if self.issparse(a):
            a = a.toarray()
        if isinstance(a, self.array_types):
            return self.modules.to_host(a)
        return np.asarray(a)

    def issparse(self, a) -> bool:
        return bool(self.modules.sparse.issparse(a))

    # -- operations ----------------------------------------------------------------
    def argsort_stable(self, a, axis: int = -1):
        return self.xp.argsort(a, axis=axis, kind=self.modules.stable_kind)

    def exp(self, a, out=None):
        """``exp(a)`` on the device into ``a`` or ``out``; into float32 the float32 ``exp``
        runs on the exponent rounded to float32 (as on the host: relative 6e-8 of the
        exponent plus a few float32 ulps of CUDA's ``expf``)."""
        if out is None:
            out = a
        if out.dtype == a.dtype:
            return self.xp.exp(a, out=out)
        return self.xp.exp(a, out=out, dtype=out.dtype)

    def operand(self, M):
        """Sketch mixing columns on the device: scipy.sparse as device CSR, dense as float64 in
        the host matrix's layout — a transposed (Fortran-ordered) view, such as a dense
        sketch's ``R_mixᵀ`` block, stays one — so the block product is the BLAS call the host
        makes (another layout takes another kernel, whose rounding differs on some CPUs)."""
        if not sp.issparse(M):
            M = np.asarray(M)
            if M.ndim == 2 and M.flags.f_contiguous and not M.flags.c_contiguous:
                return self.asarray(M.T, dtype=np.float64).T
        return self.asarray(M, dtype=np.float64)

    def cached_operand(self, owner, key, make):
        """The device copy of ``make()`` kept between blocks (least recently used first out,
        at most :data:`OPERAND_CACHE_BYTES` on the device): a sketch's mixing columns and a
        feature map's projection cross the bus once per process instead of once per block.
        Entries hold a weak reference to ``owner``, so a freed owner's entry (or a new object
        at its address) is never served."""
        import weakref

        ident = (id(owner), key)
        with self._operand_lock:  # held while copying: two threads never copy one span twice
            hit = self._operands.get(ident)
            if hit is not None and hit[0]() is owner:
                self._operands.move_to_end(ident)
                return hit[1]
            M = self.operand(make())
            size = _nbytes(M)
            if size > OPERAND_CACHE_BYTES:
                return M
            try:
                ref = weakref.ref(owner)
            except TypeError:  # an owner without weak references: not cached
                return M
            self._operands[ident] = (ref, M, size)
            self._operands.move_to_end(ident)
            total = sum(e[2] for e in self._operands.values())
            while total > OPERAND_CACHE_BYTES:
                _, (_, _, freed) = self._operands.popitem(last=False)
                total -= freed
        return M

    def cholesky_upper(self, M):
        """``U`` upper-triangular (on the device) with ``UᵀU = M``, ``M`` a symmetric device
        array; raises ``numpy.linalg.LinAlgError`` where ``M`` is not positive definite."""
        L = self.modules.cholesky(M)
        d = self.xp.diagonal(L)
        if not bool(self.xp.all(d > 0)):  # NaN or a zero pivot: not positive definite
            raise np.linalg.LinAlgError("cholesky: the matrix is not positive definite")
        return L.T

    def solve_triangular(self, U, B, *, trans: bool = False):
        """``U^{-1} B`` (``U^{-T} B`` with ``trans``) for an upper-triangular device ``U`` and
        a device ``B`` (m,) or (m, k)."""
        return self.modules.solve_triangular(U, B, lower=False, trans=trans)

    def cityblock(self, A, B):
        """``Σ_k |a_ik − b_jk|`` (n_a, n_b), float64, in row tiles of about 256 MiB of
        temporaries; each pair sums in the order k = 0 … d−1 (as scipy's ``cdist``)."""
        xp = self.xp
        A, B = self.asarray(A, dtype=np.float64), self.asarray(B, dtype=np.float64)
        n_a, n_b, d = A.shape[0], B.shape[0], A.shape[1]
        out = xp.zeros((n_a, n_b))
        rows = max(1, (256 << 20) // (8 * max(n_b, 1)))
        for r in range(0, n_a, rows):
            e = min(r + rows, n_a)
            acc = out[r:e]
            for k in range(d):
                acc += xp.abs(A[r:e, k][:, None] - B[:, k][None, :])
        return out


def _default_modules():
    """The array modules of a ``CupyBackend()`` built without any: CuPy (tests patch this)."""
    return CupyModules()


def cuda_backend() -> CupyBackend:
    """The ``"cuda"`` backend of this process, made and registered on first use
    (:func:`distsketch.backends.get_backend` calls it); raises :class:`CudaUnavailable` naming
    the ``gpu`` extra where CuPy or a device is missing."""
    be = register_backend(CupyBackend())
    logger.info("CUDA backend: %s", be.modules.xp.__name__ if hasattr(be.modules.xp, "__name__")
                else type(be.modules).__name__)
    return be


def _nbytes(M) -> int:
    """Device bytes of a dense array or of a CSR matrix's three arrays."""
    if hasattr(M, "nbytes"):
        return int(M.nbytes)
    return int(sum(getattr(M, a).nbytes for a in ("data", "indices", "indptr")))
