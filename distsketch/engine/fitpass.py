"""A whole fit's pass: sketches drawn, landmarks gathered, the store opened, blocks chosen.

:func:`fit_pass` draws the sketches of a fit, gathers their landmarks, opens (and locks) the
fit's store, chooses the row blocks (:func:`choose_block_rows`) and the configuration the store
records (:func:`jsonable`), then runs, resumes or reuses the streaming pass
(:func:`distsketch.engine.accumulate.run_pass`); the estimator gets a :class:`PassResult`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._hashing import fingerprint
from ..kernels.base import kernel_description
from ..options import EngineOptions
from ..sketches.base import RealizedSketch, Sketch
from ..sketches.whitened import WhitenedSketch
from ..tuning import store_config
from .accumulate import run_pass, verify_data
from .features import FeatureMap
from .prewhiten import prewhitened, prewhitens
from .rows import RowSource
from .store import FitStore, StoreDirectory, open_fit_store
from .storeguard import DataChanged, StoreError
from .sums import SUM_TERMS, PassPlan, known_sum, sum_term, width_of

__all__ = ["PassResult", "fit_pass", "choose_block_rows", "pass_block_rows", "jsonable", "BLOCK_MULTIPLE",
           "MIN_BLOCK_ROWS"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- a whole fit


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values (numpy scalars as Python numbers, anything else as its
    string): the form a store's recorded configuration is compared in."""
    return json.loads(json.dumps(obj, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


@dataclass
class PassResult:
    """What a pass returns to an estimator: realised sketches, landmarks and the sums.

    ``x_width_sketches``: the input sketch of each further input width (``fit_pass``
    ``x_widths``), the same realisation as ``x_sketch`` whitened for that width's kernel when
    the side is pre-whitened (``EngineOptions.prewhiten``), else ``x_sketch`` itself."""

    n: int
    x_sketch: RealizedSketch
    x_landmarks: Any
    y_sketch: RealizedSketch | None
    y_landmarks: Any
    sums: dict
    store: str | None
    fs: FitStore | None = None  # open (and locked) until the caller closes it
    x_width_sketches: tuple = ()

    def x_sketch_of(self, width: int) -> RealizedSketch:
        """The input sketch of input width ``width`` (0: the fit's own kernel; ``j``: the
        ``j``-th further width, whose sums are named ``"<sum>~<j>"``)."""
        return self.x_sketch if width == 0 else self.x_width_sketches[width - 1]


#: A pass's derived block count (``EngineOptions.block_rows=None``) is rounded up to a
#: multiple of this, in equal blocks: with few blocks, a short last block otherwise runs alone
#: while the other cores idle (Bibtex, n = 4880: 3 blocks of 1924 rows took two rounds of
#: 1924-row blocks on 2 cores; 4 blocks of 1220 take two rounds of 1220). A fixed number, not
#: the machine's core count, so that the blocks, hence the sums' rounding, never depend on the
#: machine (docs/design/engine.md, "The streaming pass").
BLOCK_MULTIPLE = 4
#: The rounding up above stops short of blocks smaller than this (halving the multiple).
MIN_BLOCK_ROWS = 256


def choose_block_rows(options: EngineOptions, n: int, width: int, native: int | None,
                       dtype: np.dtype) -> int:
    """Rows per block: ``options.block_rows``, else the most rows ``options.block_memory``
    allows, split into equal blocks whose count is a multiple of :data:`BLOCK_MULTIPLE`
    (halved while the blocks would fall below :data:`MIN_BLOCK_ROWS`), and aligned with the
    input's stored row chunks (``native``) when blocks span whole chunks."""
    if options.block_rows is not None:
        return min(int(options.block_rows), n)
    itemsize = dtype.itemsize
    per_row = 8 * (options.gram_chunk + width) + itemsize * width
    b = max(64, options.block_memory // per_row)
    k_mem = -(-n // b)  # fewest blocks within the memory bound
    k = -(-k_mem // BLOCK_MULTIPLE) * BLOCK_MULTIPLE
    while k > max(k_mem, n // MIN_BLOCK_ROWS) and k % 2 == 0:
        k //= 2
    b = -(-n // max(k, k_mem))
    if b >= n:  # one block: the same whatever the input's chunks
        return int(n)
    if native and b >= native:  # whole stored chunks per block; smaller blocks split chunks
        b = (b // native) * native
    return int(min(b, n))


def pass_block_rows(options: EngineOptions, X: RowSource, Y: RowSource | None, xs, ys,
                    dtype: np.dtype, *, extra: int = 0) -> int:
    """:func:`choose_block_rows` for a pass over ``X`` (and ``Y``) with the realised sketches
    ``xs`` (and ``ys``; None: vector targets): a row's width is its input and sketched
    columns, its output or target columns twice, and ``extra`` more block columns."""
    width = xs.m + X.shape[1] + extra
    if Y is not None:
        width += (ys.m if ys is not None else Y.shape[1]) + Y.shape[1]
    native = X.native_rows or (Y.native_rows if Y is not None else None)
    return choose_block_rows(options, X.n, width, native, dtype)


def fit_pass(
    X: RowSource,
    Y: RowSource | None,
    *,
    x_kernel,
    x_sketch: Sketch,
    sums: tuple,
    y_kernel=None,
    y_sketch: Sketch | None = None,
    rng: np.random.Generator,
    store: Any,
    options: EngineOptions,
    model: str,
    reuse_seeds: bool = False,
    x_widths: tuple = (),
    seeds: tuple[int, int] | None = None,
    kernel_names: tuple[str, str] = ("kernel", "output_kernel"),
    prewhiten_sides: tuple[str, ...] = ("input", "output"),
) -> PassResult:
    """Draw the sketches, gather landmarks and run (or resume, or reuse) the streaming pass.

    ``y_kernel=None``: ``Y`` holds vector targets (sums ``b``, ``Y``) or is None (input side
    only); otherwise ``Y`` goes through the output kernel (sums ``M, E, D``). ``sums`` names
    the :data:`SUM_TERMS` the model needs. ``store`` is the estimator's ``store`` argument
    (None, a path, a zarr group or a :class:`~distsketch.engine.store.StoreDirectory`): it is opened
    and locked here and returned open in ``PassResult.fs``; the caller saves its model there
    and closes it. ``reuse_seeds`` (a fit without a ``random_state``): take the sketch seeds a
    pass recorded in the store, so that fitting again resumes it. ``x_widths``: further input
    kernels (other widths of ``x_kernel``) over the same sketch and landmarks, whose sums are
    named ``"<sum>~<j>"`` (:attr:`PassPlan.x_widths`): one read of the rows for all of them.
    ``seeds``: the two sketch seeds (input, output) already drawn by the caller, in place of
    the two this call would draw from ``rng`` (a route that draws them itself to find its
    own store's state, :func:`distsketch.solvers.pcg.fit_pcg_sisokr`). ``kernel_names``: the
    estimator arguments of the input and output kernels, for the pre-whitening's messages.
    Where ``options.prewhiten`` applies (:func:`~distsketch.engine.prewhiten.prewhitens`), the
    realised sketch of each side named in ``prewhiten_sides`` is whitened before the pass
    (:func:`~distsketch.engine.prewhiten.prewhitened`; each further input width with its own
    kernel's whitening).
    """
    unknown = {s for s in sums if not known_sum(s) or width_of(s)[1] > len(x_widths)}
    if unknown:
        raise ValueError(f"fit_pass: unknown sums {sorted(unknown)}; known: {sorted(SUM_TERMS)}")
    directory = store if isinstance(store, StoreDirectory) else None
    fs = None if directory is not None else open_fit_store(store, lock=True)
    try:
        return _fit_pass(X, Y, x_kernel=x_kernel, x_sketch=x_sketch, sums=sums,
                         y_kernel=y_kernel, y_sketch=y_sketch, rng=rng, fs=fs,
                         directory=directory, options=options, model=model,
                         reuse_seeds=reuse_seeds, x_widths=tuple(x_widths), seeds=seeds,
                         kernel_names=kernel_names, prewhiten_sides=tuple(prewhiten_sides))
    except BaseException:
        if fs is not None:
            fs.close()
        raise


def _pass_seeds(rng, seeds, *, fs, reuse_seeds) -> list[int]:
    """The two sketch seeds (input, output) of a pass: ``seeds`` if given, else two drawn from
    ``rng``; with ``reuse_seeds``, those the store recorded take their place."""
    seeds = ([int(s) for s in rng.integers(0, 2**63 - 1, size=2)] if seeds is None
             else [int(s) for s in seeds])
    if reuse_seeds and fs is not None:
        found = [fs.recorded_seed(side) for side in ("input", "output")]
        if any(f is not None for f in found):
            seeds = [s if f is None else f for f, s in zip(found, seeds)]
            logger.info("store %s: random_state=None, resuming with the sketch seeds it "
                        "recorded", fs.location)
    return seeds


def _pass_config(X, Y, xs, ys, x_land, y_land, *, x_kernel, y_kernel, sums, model, block_rows,
                 dtype, options, x_widths, x_width_sketches=()) -> dict:
    """The pass's configuration as the store records it (:func:`jsonable`): a stored pass is
    reused only under the same one."""
    needs_d = any(sum_term(s).reads_d for s in sums)
    if Y is None:
        output = None
    elif ys is None:
        output = {"targets": Y.shape}
    else:
        output = {"kernel": kernel_description(y_kernel), "sketch": ys.to_config(),
                  "shape": Y.shape, "landmarks": fingerprint(y_land)}
    return jsonable({
        "model": model,
        "n": X.n,
        "block_rows": block_rows,
        "block_dtype": dtype,
        "gram_chunk": options.gram_chunk,
        "m_x": xs.m,
        "m_y": ys.m if needs_d else None,  # D is stored
        "input": {"kernel": kernel_description(x_kernel), "sketch": xs.to_config(),
                  "shape": X.shape, "landmarks": fingerprint(x_land)},
        "output": output,
        "unique_outputs": "U" in sums,
        # further input widths only where there are some: earlier stores keep their config
        **({"input_widths": [kernel_description(k) for k in x_widths]} if x_widths else {}),
        # each further width's own pre-whitening, where the input side has one
        **({"input_width_whitening": [sk.to_config().get("whitened") for sk in x_width_sketches]}
           if any(isinstance(sk, WhitenedSketch) for sk in x_width_sketches) else {}),
        # the density rule's knobs only where they are not the defaults (the same reason)
        **store_config(options.tuning),
    })


def _check_landmarks(landmarks, support, *, argument: str) -> None:
    """A lazy input is checked for NaN block by block in the pass; its landmarks are read
    before it, by the pre-whitening: refuse a NaN or infinity there as the pass would (naming
    ``argument`` and the row), not as a kernel that overflowed."""
    values = landmarks.toarray() if hasattr(landmarks, "toarray") else np.asarray(landmarks)
    if np.issubdtype(values.dtype, np.floating) and not np.isfinite(values).all():
        row = int(support[np.flatnonzero(~np.isfinite(values).all(axis=1))[0]])
        raise ValueError(f"{argument}: contains NaN or infinity (at row {row}, a landmark of "
                         f"the sketch); impute or drop those rows before fitting")


def _prewhiten(xs, ys, x_land, y_land, *, x_kernel, y_kernel, x_widths, options, kernel_names,
               sides):
    """The realised sketches whitened before the pass where ``options.prewhiten`` applies, on
    the ``sides`` named: ``(xs, ys, x_width_sketches)`` (each further input width whitened for
    its own kernel)."""
    widths = tuple(xs for _ in x_widths)
    kw = {"rtol": options.prewhiten_rtol, "tuning": options.tuning,
          "always": options.prewhiten is True}
    if "input" in sides and prewhitens(xs, options.prewhiten):
        _check_landmarks(x_land, xs.support, argument="X")
        widths = tuple(prewhitened(xs, k, x_land, argument=kernel_names[0], **kw)
                       for k in x_widths)
        xs = prewhitened(xs, x_kernel, x_land, argument=kernel_names[0], **kw)
    if "output" in sides and prewhitens(ys, options.prewhiten):
        _check_landmarks(y_land, ys.support, argument="Y")
        ys = prewhitened(ys, y_kernel, y_land, argument=kernel_names[1], **kw)
    return xs, ys, widths


def _fit_pass(X, Y, *, x_kernel, x_sketch, sums, y_kernel, y_sketch, rng, fs, directory,
              options, model, reuse_seeds, x_widths=(), seeds=None,
              kernel_names=("kernel", "output_kernel"),
              prewhiten_sides=("input", "output")) -> PassResult:
    n = X.n
    seeds = _pass_seeds(rng, seeds, fs=fs, reuse_seeds=reuse_seeds)

    def draw(sketch, seed, data, kernel):
        if getattr(sketch, "needs_kernel", False):  # data-dependent: scores from the rows
            return sketch.realize(n, seed=seed, data=data, kernel=kernel)
        return sketch.realize(n, seed=seed, data=data)

    xs = draw(x_sketch, seeds[0], X, x_kernel)
    ys = draw(y_sketch, seeds[1], Y, y_kernel) if y_kernel is not None else None
    x_land = X.take(xs.support)
    y_land = Y.take(ys.support) if ys is not None else None
    xs, ys, x_width_sketches = _prewhiten(xs, ys, x_land, y_land, x_kernel=x_kernel,
                                          y_kernel=y_kernel, x_widths=x_widths, options=options,
                                          kernel_names=kernel_names, sides=prewhiten_sides)
    # An exact side's blocks are used as they are (the n × n Gram matrix K_X + nλI is
    # factored, or C itself enters the model), where float32 rounding would be amplified by
    # up to 1/(nλ): they stay float64 (small n, where the pass is cheap anyway).
    exact = xs.is_identity or (ys is not None and ys.is_identity)
    dtype = "float64" if exact else options.block_dtype
    # further widths: one more block buffer, reused by every further width
    b = pass_block_rows(options, X, Y, xs, ys, np.dtype(dtype),
                        extra=max((sk.m for sk in x_width_sketches), default=0))
    config = _pass_config(X, Y, xs, ys, x_land, y_land, x_kernel=x_kernel, y_kernel=y_kernel,
                          sums=sums, model=model, block_rows=b, dtype=dtype, options=options,
                          x_widths=x_widths, x_width_sketches=x_width_sketches)
    if directory is not None:
        fs = directory.open(config)
    fs.prepare_pass(config, overwrite=options.overwrite)

    def plan_of():
        C, D, records = fs.pass_arrays()
        return PassPlan(
            n=n, block_rows=b,
            x=FeatureMap(x_kernel, x_land, xs, options.gram_chunk, options.tuning),
            y=(FeatureMap(y_kernel, y_land, ys, options.gram_chunk, options.tuning)
               if ys is not None else None),
            sums=tuple(sums), C=C, D=D, records=records, dtype=np.dtype(dtype),
            check_x=X.lazy, check_y=Y is not None and Y.lazy, direct_io=options.direct_io,
            backend=options.backend, token=0 if fs.temporary else fs.token,
            location=fs.location,
            x_widths=tuple(FeatureMap(k, x_land, sk, options.gram_chunk, options.tuning)
                           for k, sk in zip(x_widths, x_width_sketches)))

    def complete(plan):
        unrecorded = (verify_data(plan, X, Y, progress=options.progress) if fs.pass_complete
                      else [])
        if unrecorded:  # lost records: those blocks are computed again, the others verified
            logger.warning("store %s: blocks %s have no record although the pass is marked "
                           "complete (damaged); computing them again, and the sums",
                           fs.location, unrecorded)
            fs.mark("pass")
        elif fs.pass_complete:
            try:
                result = fs.read_sums()
                missing = [s for s in sums if s not in result]
                if not missing:
                    logger.info("store %s: pass already complete, reusing its sums",
                                fs.location)
                    return result
                # written by a model that needed other sums: add them from the stored blocks,
                # keeping those it stored (the other model reuses them)
                logger.info("store %s: computing the sums %s from the stored blocks",
                            fs.location, missing)
                union = tuple(sums) + tuple(k for k in sorted(result) if k not in sums
                                            and known_sum(k))
                plan = replace(plan, sums=union)
                fs.mark("pass")
            except StoreError as exc:  # damaged sums: recompute them from the verified blocks
                logger.warning("%s; recomputing the sums from the stored blocks", exc)
                fs.mark("pass")
        result = run_pass(plan, X, Y, split_every=options.split_every, progress=options.progress)
        fs.write_sums(result)
        return result

    try:
        result = complete(plan_of())
    except DataChanged as exc:
        if not options.overwrite:
            raise
        logger.warning("%s; overwrite=True: computing the pass afresh", exc)
        fs.reset(config)
        result = complete(plan_of())
    return PassResult(n=n, x_sketch=xs, x_landmarks=x_land, y_sketch=ys, y_landmarks=y_land,
                      sums=result, store=None if fs.temporary else fs.location, fs=fs,
                      x_width_sketches=x_width_sketches)
