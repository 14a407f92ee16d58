"""Engine knobs: how a fit runs, never what it computes (up to float64 rounding).

Model-defining choices (kernels, sketches, λ, seeds) are estimator arguments;
deployment (workers, memory limits, BLAS threads) lives in ``cluster/`` configuration.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, fields, replace

import dask.config

from .backends.base import BACKENDS, LAZY_BACKENDS, BackendUnavailable, get_backend, known_backend
from .tuning import Tuning, check_tuning, tuning_from_dict

__all__ = ["EngineOptions", "Tuning", "check_options", "options_from_dict", "blas_limit"]

# Deployment setting, read from dask's configuration (files, DASK_DISTSKETCH__BLAS_THREADS,
# dask.config.set): BLAS threads while distsketch computes in this process. Parallelism
# comes from dask tasks, one per core; a multi-threaded BLAS underneath oversubscribes the
# cores. It helps only the driver's solve on an idle machine, and hurts it on a busy one
# (the measurements are in cluster/README.md, §9 "BLAS threads per worker").
# ``null`` leaves the BLAS library's own setting alone.
dask.config.update_defaults({"distsketch": {"blas-threads": 1, "worker-wait": 60,
                                            "pass-retries": 3}})
# ``device``: where block math runs when EngineOptions.device is not given ("cpu" or "cuda";
# DASK_DISTSKETCH__DEVICE=cuda on GPU workers' deployments).
dask.config.update_defaults({"distsketch": {"device": "cpu"}})
# ``worker-wait``: seconds a fit waits for a dask cluster that lost its workers to have one
# again before giving up (``pass-retries`` times at most), resending the in-memory blocks and
# resuming from the blocks already stored.


def blas_limit() -> AbstractContextManager:
    """Context manager limiting BLAS threads to ``distsketch.blas-threads`` (dask config).

    Returns
    -------
    contextlib.AbstractContextManager
        A ``threadpoolctl`` limit, or a null context when the key is unset or null (the
        BLAS library's own setting is left alone).

    Examples
    --------
    >>> from distsketch.options import blas_limit
    >>> with blas_limit():
    ...     pass
    """
    n = dask.config.get("distsketch.blas-threads", None)
    if not n:
        return nullcontext()
    return _blas_controller().limit(limits=int(n), user_api="blas")


_CONTROLLER: list = [None, -1]  # [threadpoolctl controller, len(sys.modules) when made]


def _blas_controller():
    """threadpoolctl's controller of the loaded BLAS libraries, made again only when modules
    were imported since (an extension module may load another BLAS): finding the libraries
    reads the process's maps and each library's version at every ``fit`` and ``predict``
    (measured: 0.6–0.7 ms in a bare process; 4.0 ms of CPU per fit and prediction of a Huber
    regressor on 400 rows after a fit had loaded its modules, 10.1 against 6.1 ms), a limit
    from a kept controller 0.02–0.03 ms."""
    import sys

    from threadpoolctl import ThreadpoolController

    if _CONTROLLER[0] is None or _CONTROLLER[1] != len(sys.modules):
        _CONTROLLER[:] = [ThreadpoolController(), len(sys.modules)]
    return _CONTROLLER[0]


def with_blas_limit(method: Callable) -> Callable:
    """Decorator: run an estimator method under :func:`blas_limit`.

    Parameters
    ----------
    method : callable
        The method to wrap.

    Returns
    -------
    callable
        The wrapped method.
    """

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with blas_limit():
            return method(*args, **kwargs)

    return wrapper


@dataclass(frozen=True)
class EngineOptions:
    """Execution options of a fit, passed as ``options=EngineOptions(...)``.

    Parameters
    ----------
    block_rows : int or None
        Training rows per task of the streaming pass. ``None`` derives it from
        ``block_memory`` (and aligns it with the row chunks of a dask / zarr input).
    block_memory : int
        Bytes targeted for the arrays one task holds (kernel block, sketched blocks).
    gram_chunk : int
        Landmark columns per kernel block: a task never holds more than
        ``block_rows × gram_chunk`` kernel values at once.
    block_dtype : {"float32", "float64"}
        Dtype in which the sketched blocks ``C, D`` are computed and stored. The sums are
        float64 sums of exactly the stored values, so a resumed fit is bitwise the
        uninterrupted one and ``store=None`` fits the same model, for either dtype.
        float32 (default) halves the store and its I/O and evaluates the exponentials of
        the Gaussian, Laplacian and GaussianTanimoto kernels in float32 (several times numpy's
        float64 ``exp`` rate: benchmarks/ENGINE.md, "pass"): kernel values to float32
        rounding (relative about 1e-7), which the solve amplifies by its conditioning
        (tests: within 1e-4 of every closed form, the same test error). float64 gives the closed forms to rounding. An exact
        (identity) side always uses float64 blocks: its n × n Gram matrix is factored as
        it is.
    rtol : float or None
        Relative eigenvalue threshold of the whitening of ``R K Rᵀ``. ``None``: 1e-14 for a
        side whitened before the pass (``prewhiten``), 1e-10 otherwise (:attr:`eig_rtol`,
        :attr:`prewhiten_rtol`; their measured basis is in docs/design/math.md,
        "Pre-whitening").
    prewhiten : bool or None
        Whiten a landmark sketch before the pass: ``T`` from the landmarks' own ``B0 = R K Rᵀ
        = R_mix K_JJ R_mixᵀ`` (float64, on the driver), and the pass sums ``(C T)ᵀ(C T)``
        over the blocks ``C T = k(X_I, X_J) R_mixᵀ T`` (kernel values and the product in
        float64, rounded to the block dtype once) instead of ``CᵀC`` whitened afterwards,
        whose rounding (about ε‖CᵀC‖) drowns the directions of ``K_JJ`` with eigenvalues below
        it; the same model in exact arithmetic (docs/design/math.md, "Pre-whitening").
        Measured on CASP at m = 1000, 2000, 4000 against scikit-learn's Nystroem + Ridge at
        the same landmarks: test RMSE within 0.02 % pre-whitened, up to +1.0 % without
        (benchmarks/ENGINE.md, "casp_parity"). It costs float64 kernel values and one more
        product per block (``2·n·s'·r`` flops over the pass, twice those of ``CᵀC``): at
        m = 2000 the pass took 2.05 times as long, the fit 1.32 times (the solve after the
        pass is cheaper).
        ``None`` (default): every sketched side whose support has at most
        ``distsketch.engine.prewhiten.PREWHITEN_SUPPORT × m`` rows and fewer than ``n``
        (sub-sampling, leverage scores, accumulation with ``q <= 2``) and whose ``B0`` is
        ill-conditioned (condition number above
        ``distsketch.engine.prewhiten.PREWHITEN_COND = 1e6``: CASP's, not that of d = 20
        standard normal inputs at γ = 1/(2d)); ``True``: every such side, and also larger supports below
        ``n`` (``K_JJ`` of the support on the driver); ``False``: never (the pass sums ``CᵀC``,
        whitened on the driver). A store records the setting's effect: a pass written with
        one is not resumed with the other (refused, or replaced with ``overwrite=True``).
        The PCG route keeps its input side as drawn (its preconditioner is built in the
        landmarks' own coordinates).
    split_every : int
        Fan-in of the tree reduction of the partial sums.
    overwrite : bool
        Allow a fit to replace a *different* fit found in its store path (a store with
        the same configuration is resumed, never overwritten).
    progress : bool
        Show dask's progress bar (local schedulers) or distributed's progress.
    candidate_rows : int
        Candidates per decoding task (the score block a task holds is queries × 4096).
    direct_io : bool
        Write the sketched blocks to a local store with O_DIRECT, bypassing the page
        cache: a block write then costs a fraction of this process's CPU that filling new
        page-cache pages costs (measured: benchmarks/ENGINE.md, "pass"), and a store
        larger than memory does not evict everything else. (A virtual machine's disk
        emulation may still take CPU from the vCPUs, either way.) False writes through the
        page cache, which is faster only when the disk is much slower than the pass and the
        blocks fit in memory. File systems without O_DIRECT (tmpfs before Linux 6.6) and
        other zarr stores are written the ordinary way either way.
    backend : str
        Compute backend of the block math (kernel blocks, block products, partial sums):
        a name registered in ``distsketch.backends`` (``"numpy"``, the default;
        ``"cuda"``, as ``device="cuda"`` sets it). The driver's small solves always run on
        the host.
    sweep_memory : int
        Bytes of sketched blocks ``C`` that an iterative model (``SketchedRegressor``,
        ``SketchedQuantileRegressor``) fitted without a store (``store=None``) on the local
        scheduler keeps in memory from its pass for its sweeps (8 bytes per value: float64
        copies of the values a store would hold, so the model is the same). Above
        it, or on a distributed cluster, every sweep recomputes the kernel blocks and a
        fit's memory stays that of its tasks. 0: always recompute.
    device : {"cpu", "cuda"} or None
        Where the block math runs. ``"cuda"``: on the GPU of each process running a task
        through CuPy (``distsketch.backends.cuda``; needs ``pip install "distsketch[gpu]"`` and a
        CUDA device, checked when the options are validated, before anything is written).
        ``None``: the dask config key ``distsketch.device`` (default ``"cpu"``); a value
        given here wins. ``device`` picks the backend: ``"cuda"`` sets ``backend="cuda"``
        (``backend`` left at ``"numpy"`` or set to ``"cuda"``; another backend with
        ``device="cuda"`` is refused as contradictory), ``backend="cuda"`` alone implies
        ``device="cuda"``, and ``device="cpu"`` with ``backend="cuda"`` is refused.
        :func:`~distsketch.options.check_options` returns the options with both fields
        resolved.
    tuning : Tuning
        The routes' tuning knobs (:class:`~distsketch.Tuning`: the CV fold route, threads and
        band, the driver's fold budget, the ``solver="auto"`` thresholds, the sparse density
        rule, the eigen crossover), each documented there with its measured basis. Like the
        other options they change how a fit runs, not its model beyond rounding. A store
        records only the density rule's knobs, and only when they are not the defaults (they
        change the pass's blocks to rounding, as ``gram_chunk`` does); any other tuning
        resumes the same store.

    See Also
    --------
    distsketch.Tuning : The routes' tuning knobs.

    Examples
    --------
    >>> from distsketch import EngineOptions
    >>> options = EngineOptions(block_dtype="float64", block_rows=4096)
    >>> options.block_dtype, options.split_every
    ('float64', 4)
    """

    block_rows: int | None = None
    block_memory: int = 128 * 2**20
    gram_chunk: int = 2048
    block_dtype: str = "float32"
    rtol: float | None = None
    prewhiten: bool | None = None
    split_every: int = 4
    overwrite: bool = False
    progress: bool = False
    candidate_rows: int = 16384
    direct_io: bool = True
    backend: str = "numpy"
    sweep_memory: int = 2**30
    device: str | None = None
    tuning: Tuning = field(default_factory=Tuning)

    @property
    def eig_rtol(self) -> float:
        """The driver's whitening threshold: ``rtol``, or 1e-10 when it is None (the sums of a
        pre-whitened side are whitened already, ``R' K R'ᵀ ≈ I``, and keep every direction
        at either threshold)."""
        if self.rtol is not None:
            return float(self.rtol)
        return 1e-10

    @property
    def prewhiten_rtol(self) -> float:
        """The threshold of the whitening before the pass (``prewhiten``): ``rtol``, or
        1e-14 when it is None. ``B0`` comes from float64 kernel values of the landmarks alone,
        accurate to about ε·‖B0‖, so directions down to 1e-14 of its largest eigenvalue are
        resolved; on CASP (m = 2000, 4000) keeping them brings the test RMSE from +0.8 %
        (1e-10) and +0.09 % (1e-12) to within 0.02 % of Nystroem + Ridge, with float32 or
        float64 blocks alike (docs/design/math.md, "Pre-whitening")."""
        if self.rtol is not None:
            return float(self.rtol)
        return 1e-14


def _bad(field: str, msg: str) -> ValueError:
    return ValueError(f"options.{field}: {msg}")


def check_options(options: EngineOptions | None) -> EngineOptions:
    """Validate ``options``; errors name the field.

    Parameters
    ----------
    options : EngineOptions or None
        The options (``None`` gives the defaults).

    Returns
    -------
    EngineOptions
        ``EngineOptions()`` for None; else the options with ``device`` and ``backend``
        resolved (the dask config key ``distsketch.device`` when ``device`` is None) and
        ``tuning`` validated.

    Raises
    ------
    ValueError
        A field out of its range, naming it (``options.<field>``).

    Examples
    --------
    >>> from distsketch import EngineOptions
    >>> from distsketch.options import check_options
    >>> check_options(None) == EngineOptions()
    True
    >>> check_options(EngineOptions(split_every=1))
    Traceback (most recent call last):
        ...
    ValueError: options.split_every: must be at least 2, got 1
    """
    if options is None:
        return EngineOptions()
    if not isinstance(options, EngineOptions):
        raise ValueError(f"options: expected a distsketch.EngineOptions, got {options!r}")
    for f in fields(options):
        v = getattr(options, f.name)
        if f.name in ("block_rows",) and v is None:
            continue
        if f.name in ("block_rows", "block_memory", "gram_chunk", "split_every", "candidate_rows"):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise _bad(f.name, f"must be a positive integer, got {v!r}")
    v = options.sweep_memory
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
        raise _bad("sweep_memory", f"must be a non-negative integer (bytes), got {v!r}")
    for name in ("overwrite", "progress", "direct_io"):
        if not isinstance(getattr(options, name), bool):
            raise _bad(name, f"must be True or False, got {getattr(options, name)!r}")
    if options.split_every < 2:
        raise _bad("split_every", f"must be at least 2, got {options.split_every}")
    if options.block_dtype not in ("float64", "float32"):
        raise _bad("block_dtype", f"must be 'float64' or 'float32', got {options.block_dtype!r}")
    if options.rtol is not None and not (0.0 < float(options.rtol) < 1.0):
        raise _bad("rtol", f"must be in (0, 1), got {options.rtol!r}")
    if options.prewhiten is not None and not isinstance(options.prewhiten, bool):
        raise _bad("prewhiten", f"must be None (landmark sketches), True or False, got "
                                f"{options.prewhiten!r}")
    tuning = check_tuning(options.tuning)
    if tuning is not options.tuning:
        options = replace(options, tuning=tuning)
    return _resolve_device(options)


def options_from_dict(values: Mapping) -> EngineOptions:
    """Options from a mapping of their fields.

    Parameters
    ----------
    values : mapping
        Field name → value (a saved model's JSON, ``dataclasses.asdict`` of options, a TOML
        ``[engine]`` table); a ``tuning`` mapping becomes a :class:`~distsketch.Tuning`
        (absent: the defaults, as options saved before it existed).

    Returns
    -------
    EngineOptions
        The options (not validated: see :func:`check_options`).

    Examples
    --------
    >>> from distsketch.options import options_from_dict
    >>> options_from_dict({"block_rows": 1024, "tuning": {"auto_rank": 100}}).tuning.auto_rank
    100
    """
    values = dict(values)
    if isinstance(values.get("tuning"), Mapping):
        values["tuning"] = tuning_from_dict(values["tuning"])
    return EngineOptions(**values)


_DEVICES = ("cpu", "cuda")


def _resolve_device(options: EngineOptions) -> EngineOptions:
    """``options`` with ``device`` (the option, else the dask config key ``distsketch.device``)
    and ``backend`` resolved and consistent; a CUDA backend is made here, so a missing CuPy or
    device fails before a fit writes anything."""
    device, given = options.device, options.device is not None
    if device is None:
        device = dask.config.get("distsketch.device", None) or "cpu"
        if device not in _DEVICES:
            raise _bad("device", f"the dask config key distsketch.device must be 'cpu' or "
                                 f"'cuda', got {device!r}")
    elif device not in _DEVICES:
        raise _bad("device", f"must be 'cpu', 'cuda' or None (the dask config key "
                             f"distsketch.device), got {device!r}")
    backend = options.backend
    if not known_backend(backend):
        raise _bad("backend", f"unknown backend {backend!r}; registered backends are "
                              f"{sorted(set(BACKENDS) | set(LAZY_BACKENDS))}")
    if device == "cuda" and backend not in ("numpy", "cuda"):
        raise _bad("device", f"device='cuda' runs the block math on the 'cuda' backend, but "
                             f"backend={backend!r}: leave backend at its default or drop device")
    if backend == "cuda" and device == "cpu":
        if given:
            raise _bad("device", "device='cpu' contradicts backend='cuda': drop one of them "
                                 "(backend='cuda' alone means device='cuda')")
        device = "cuda"
    if device == "cuda":
        backend = "cuda"
        try:
            get_backend("cuda")
        except BackendUnavailable as exc:
            raise _bad("device", str(exc)) from exc
    if (device, backend) != (options.device, options.backend):
        options = replace(options, device=device, backend=backend)
    return options


# BLAS threads of the driver's solve, once the pass is over. Its tasks ran one per core on one
# BLAS thread each (distsketch.blas-threads); the driver is one process left with the
# machine, so it may use the cores that are idle NOW — on a machine shared with other work a
# second BLAS thread is far slower than one (measured on this 2-core machine under load:
# Cholesky of 2250² 0.135 s → 1.2 s, eigh 5 s → 20 s). The rule, from the measurements in
# docs/design/math.md ("Driver routes"): below _DRIVER_THREADS_MIN_SIZE one thread (the
# factorisations are too small to share); above, as many threads as cores found idle over a
# _IDLE_WINDOW-second sample of /proc/stat (Linux; elsewhere one thread). Configuration
# ``distsketch.driver-threads`` (dask config): "auto" (this rule, the default) or a number.
_DRIVER_THREADS_MIN_SIZE = 1000
_IDLE_WINDOW = 0.05


def _cpu_sample() -> tuple[float, float, float]:
    """``(idle + iowait jiffies, all jiffies, this process's CPU jiffies)`` now."""
    import os

    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    with open("/proc/stat") as f:
        v = [float(x) for x in f.readline().split()[1:9]]
    t = os.times()
    return v[3] + v[4], sum(v), (t.user + t.system) * tick


def _idle_cores(window: float = _IDLE_WINDOW, start: tuple | None = None) -> float:
    """Cores not used by other processes over ``window`` seconds: the idle + iowait jiffies
    of /proc/stat's first line plus this process's own CPU time (``os.times``: a driver's
    BLAS threads still spinning after its previous factorisation are its own, not another
    user's — without it a second factorisation right after a first one saw one core "busy"),
    as a fraction of all jiffies times the number of CPUs; 0 where /proc/stat cannot be
    read. ``start``: ``(time.monotonic(), _cpu_sample())`` taken earlier (the end of the
    pass, :func:`start_idle_window`): the window runs from then, and only what is missing of
    ``window`` is slept."""
    import os
    import time

    try:
        if start is None:
            t0, (idle0, total0, own0) = time.monotonic(), _cpu_sample()
        else:
            t0, (idle0, total0, own0) = start
        time.sleep(max(0.0, window - (time.monotonic() - t0)))
        idle1, total1, own1 = _cpu_sample()
    except (OSError, ValueError, IndexError):
        return 0.0
    if total1 <= total0:
        return 0.0
    free = (idle1 - idle0) + max(own1 - own0, 0.0)
    return min(1.0, free / (total1 - total0)) * (os.cpu_count() or 1)


_IDLE_SAMPLE = [-float("inf"), 0.0]  # (time.monotonic() of the sample, idle cores)
_IDLE_START: list = []  # [(time.monotonic(), _cpu_sample())] from start_idle_window


def start_idle_window() -> None:
    """Start the idle-core sample of the next driver factorisation now (called when a pass
    ends): the driver's own work before its first factorisation (the sums' assembly, the
    symmetrisations) then runs inside the window — this process's CPU time counts as free —
    instead of a sleep of :data:`_IDLE_WINDOW` seconds. A start older than a second is not
    used."""
    import time

    try:
        _IDLE_START[:] = [(time.monotonic(), _cpu_sample())]
    except (OSError, ValueError, IndexError):
        _IDLE_START.clear()


def driver_blas_threads(size: int) -> int:
    """BLAS threads for a driver factorisation of order ``size`` (the rule above)."""
    import os
    import time

    import dask.config

    setting = dask.config.get("distsketch.driver-threads", "auto")
    if setting != "auto":
        return max(1, int(setting))
    if size < _DRIVER_THREADS_MIN_SIZE:
        return 1
    now = time.monotonic()
    if now - _IDLE_SAMPLE[0] > 1.0:  # one sample serves the calls of the next second
        start = _IDLE_START[0] if _IDLE_START and now - _IDLE_START[0][0] <= 1.0 else None
        _IDLE_START.clear()
        _IDLE_SAMPLE[:] = [now, _idle_cores(start=start)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(int(cores or 1), int(_IDLE_SAMPLE[1] + 0.25)))


def driver_threads(size: int) -> AbstractContextManager:
    """Context manager: BLAS limited to :func:`driver_blas_threads` threads."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=driver_blas_threads(size), user_api="blas")
