"""Data that grows: ``partial_fit`` appends a batch of rows, ``forget`` drops one.

A fitted model keeps, beside its solution, what a direct solve needs to take more rows
(:class:`Growth`): its realised sketches, landmarks and fitted kernels, and each batch's own
pass sums (``m × m``). ``partial_fit(X, Y)`` runs the pass over the new rows only, with the
sketches grown over them (:meth:`~distsketch.sketches.base.RealizedSketch.grown`: their
columns there are zero, so the landmarks stay those of the fit), adds the batches' sums in
batch order and solves again — every λ (and rank) from the new totals. The model equals a
fresh fit on all the rows with the fitted model's realised sketch
(``sketch=model.sketch_``, replayed by :class:`~distsketch.sketches.fixed.Fixed`), to
rounding. ``forget(k)`` re-adds every other batch's sums (no subtraction) and solves again.
With a kept store each batch is a pass of its own in the store and the model is saved there
again (:func:`append_in_store`; :mod:`distsketch.engine.batchstore`). docs/design/growing.md
has the rules and what they cost; docs/design/store.md, "Appended batches", the store's part.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from .._base import check_lam
from ..engine.accumulate import run_pass
from ..engine.batches import add_batches, batch_plan, local_sums, not_appendable
from ..engine.batchstore import (
    batch_digest,
    batch_group,
    batch_groups,
    batch_reference,
    drop_batch_group,
    held_in_store,
    kept_batch,
    record_batches,
    referenced_sums,
    stored_batch,
)
from ..engine.fitpass import PassResult
from ..engine.keptrows import keep_batch_rows
from ..engine.store import open_fit_store
from ..engine.storeguard import StoreError
from ..engine.sums import width_of
from ..io import persist
from ..options import with_blas_limit
from ..solvers.routes import get_route
from .base import FitSpec, check_data, check_feature_names
from .widths import widths_from_state, widths_state

__all__ = ["DICTIONARY_SUMS", "GROWTH_PREFIX", "growth_state", "growth_from_state", "Growing",
           "Growth", "growth_sums", "start_growth", "partial_fit", "forget", "kept_store",
           "append_in_store"]

logger = logging.getLogger(__name__)

#: Sums over the sketches' own rows, not over the training rows: ``B = R K Rᵀ`` and
#: ``E = R_Y K_Y R_Yᵀ`` involve the landmarks (the rows the sketch was drawn on) only.
DICTIONARY_SUMS = ("B", "E")


@dataclass
class Growth:
    """What a fitted model keeps to take more rows, and the batches it holds.

    Attributes
    ----------
    kernels : dict
        The fitted kernels by parameter name (a standardised kernel keeps its fit's
        statistics: appended rows are scaled as the first batch was).
    x_sketch, y_sketch : RealizedSketch (y: or None)
        The realised sketches as drawn by the fit (``drawn`` rows).
    x_landmarks, y_landmarks : array
        The rows of their supports.
    x_widths : tuple of (Kernel, RealizedSketch)
        The further input kernels of a kernel grid (the sums ``"<sum>~<j>"`` are the ``j``-th's)
        with their realised sketches as the fit's pass drew them (pre-whitened for their own
        kernel where the input side is): their landmarks are ``x_landmarks``.
    sums : tuple of str
        The pass sums the model's solve reads, and ``"digest"``.
    parts : list of dict
        Each batch's own sums (``U``'s positions counted from the batch's first row).
    batches : list of dict
        Per batch: ``batch`` (its number: 0 the fit, then 1, 2, … in order of
        ``partial_fit``, never reused), ``rows``, ``digest`` (16 hex digits,
        :func:`~distsketch._hashing.rows_digest`) and ``added`` (UTC, ISO 8601).
    numbered : int
        Batches numbered so far (the next batch's number).
    dictionary : dict
        The sums over the sketches' own rows (``B = R K Rᵀ``, ``E``) of forgotten batches:
        the landmarks stay the model's dictionary when their rows leave the training sum.
    """

    kernels: dict
    x_sketch: Any
    x_landmarks: Any
    y_sketch: Any
    y_landmarks: Any
    sums: tuple
    y_ndim: int | None = None
    y_width: int | None = None
    parts: list = field(default_factory=list)
    batches: list = field(default_factory=list)
    numbered: int = 0
    dictionary: dict = field(default_factory=dict)
    x_widths: tuple = ()

    @property
    def rows(self) -> int:
        return int(sum(b["rows"] for b in self.batches))

    def add(self, sums: dict, *, rows: int, offset: int) -> dict:
        """Record a batch (its sums as a pass over rows ``offset..`` gave them)."""
        digest = np.asarray(sums.pop("digest")).reshape(-1)[0]
        number, self.numbered = self.numbered, self.numbered + 1
        record = {"batch": number, "rows": int(rows), "digest": f"{int(digest):016x}",
                  "added": _now()}
        self.parts.append(local_sums(sums, offset))
        self.batches.append(record)
        return record

    @property
    def next_position(self) -> int:
        """Where the sketches place the next batch's rows: after the rows held, and never
        among the rows they were drawn from (whose columns are the landmarks'), which stay
        there when the fit's batch is forgotten."""
        return max(self.rows, self.x_sketch.rows_drawn)

    def result(self) -> PassResult:
        """The pass result of all the batches held: totals, grown sketches, landmarks."""
        n = self.rows
        totals = add_batches(self.parts, [b["rows"] for b in self.batches])
        for key, value in self.dictionary.items():
            totals[key] = value + totals[key]
        grow = max(n, self.x_sketch.rows_drawn)
        return PassResult(n=n, x_sketch=self.x_sketch.grown(grow), x_landmarks=self.x_landmarks,
                          y_sketch=None if self.y_sketch is None else self.y_sketch.grown(grow),
                          y_landmarks=self.y_landmarks, sums=totals, store=None,
                          x_width_sketches=tuple(sk.grown(grow) for _, sk in self.x_widths))

    def drop(self, k: int) -> None:
        """Forget the ``k``-th batch held: its row sums go, its sums over the sketches' own
        rows (:data:`DICTIONARY_SUMS`, of every input width) stay in :attr:`dictionary`."""
        part = self.parts[k]
        for key in part:
            if width_of(key)[0] in DICTIONARY_SUMS:
                kept = self.dictionary.get(key)
                self.dictionary[key] = (np.array(part[key], dtype=np.float64, copy=True)
                                        if kept is None else kept + part[key])
        del self.parts[k], self.batches[k]


#: Prefix of a saved model's arrays that hold its batches' sums.
GROWTH_PREFIX = "growth__"


def growth_state(growth: Growth, *, references: dict | None = None) -> tuple[dict, dict]:
    """The batches' sums as a saved model's ``(arrays, json)``: each part's and the
    dictionary's arrays (``U`` as its rows and positions), the batch records. A batch in
    ``references`` (by number: :func:`~distsketch.engine.batchstore.batch_reference`, the
    model saved in the store that holds its sums) is recorded by reference, not copied."""
    references = references or {}
    arrays, parts = {}, []
    for k, part in enumerate(list(growth.parts) + [growth.dictionary]):
        number = growth.batches[k]["batch"] if k < len(growth.parts) else None
        if number in references:
            parts.append({"stored": references[number]})
            continue
        names = []
        for name, value in part.items():
            key = f"{GROWTH_PREFIX}{k}__{name}"
            if name == "U":
                arrays[key + "__rows"], arrays[key + "__first"] = value
            else:
                arrays[key] = np.asarray(value)
            names.append(name)
        parts.append(names)
    state = {"batches": [dict(b) for b in growth.batches], "numbered": growth.numbered,
             "y_ndim": growth.y_ndim, "y_width": growth.y_width, "sums": list(growth.sums),
             "parts": parts}
    if growth.x_widths:  # a kernel grid: the model's own side is its chosen width's
        more, state["widths"] = widths_state(growth.kernels, growth.x_sketch, growth.x_widths,
                                             prefix=GROWTH_PREFIX)
        arrays.update(more)
    return arrays, state


def growth_from_state(est, arrays: dict, state: dict) -> Growth:
    """Inverse of :func:`growth_state` on a restored model: its sides (fitted kernels,
    realised sketches, landmarks) are read from its attributes, named after its parameters
    (``kernel_``, ``sketch_``, ``landmarks_``; ``input_…``, ``output_…``), a kernel grid's
    input kernels and sketches from the state; a batch recorded by reference is read from
    the store the model was loaded from (``store_``)."""
    def side(pair):
        if pair is None:
            return None, None, None
        kernel, sketch = pair
        land = sketch.replace("sketch", "landmarks")
        return getattr(est, kernel + "_"), getattr(est, sketch + "_"), getattr(est, land + "_")

    kx, sx, lx = side(est._input)
    ky, sy, ly = side(est._output)
    kernels = {est._input[0]: kx, **({est._output[0]: ky} if est._output else {})}
    stored = []
    for k, names in enumerate(state["parts"]):
        if isinstance(names, dict):
            location = getattr(est, "store_", None)
            if not isinstance(location, str):
                raise StoreError(f"{type(est).__name__}: the saved model refers to batch "
                                 f"{names['stored']['batch']}'s sums in its store, which is "
                                 f"not known here; load the model from its store")
            stored.append(referenced_sums(location, names["stored"]))
            continue
        part = {}
        for name in names:
            key = f"{GROWTH_PREFIX}{k}__{name}"
            part[name] = ((np.asarray(arrays[key + "__rows"]),
                           np.asarray(arrays[key + "__first"], dtype=np.int64))
                          if name == "U" else np.asarray(arrays[key]))
        stored.append(part)
    x_widths, widths = (), state.get("widths")
    if widths:  # a kernel grid: each width's own kernel and sketch, not the chosen one's
        kernels, sx, x_widths = widths_from_state(arrays, widths, prefix=GROWTH_PREFIX)
    return Growth(kernels=kernels, x_sketch=sx, x_landmarks=lx, y_sketch=sy, y_landmarks=ly,
                  sums=tuple(state["sums"]), y_ndim=state["y_ndim"], y_width=state["y_width"],
                  parts=stored[:-1], batches=[dict(b) for b in state["batches"]],
                  numbered=int(state["numbered"]), dictionary=stored[-1], x_widths=x_widths)


def _refusal(est, spec: FitSpec, route) -> str | None:
    """Why the fit ``spec`` of ``est`` by ``route`` (None: not known yet) cannot take appended
    rows, or None."""
    if route is not None and not route.appends:
        return (f"the {route.name!r} route cannot re-solve appended rows; fit with a route "
                f"that can (solver='direct')")
    why = None if route is None else route.growth_refusal(est)
    if why is not None:
        return why
    if route is not None and route.iterative and est.store is None:
        return (f"the {route.name or 'sweeps'!r} route re-solves over every row (their blocks or "
                f"inputs, and targets), which only a kept store keeps: fit with store=... "
                f"(a path) to append rows to this model")
    sketches = [est._input[1]] + ([est._output[1]] if est._output else [])
    for name in sketches:
        if spec.exact(name):
            return (f"an exact side ({name}=None or Identity()) holds the n × n Gram matrix, "
                    f"which new rows enlarge; give {name} a sketch such as SubSampling(m)")
    return est._growth_refusal(spec)


def growth_sums(est, spec: FitSpec, sums: tuple) -> tuple:
    """The sums a fit computes: ``sums``, and the rows' digest where the fit can grow."""
    if _refusal(est, spec, None) is not None:
        return sums
    if not_appendable(sums):
        return sums
    return tuple(sums) + ("digest",)


def start_growth(est, spec: FitSpec, route, fitted) -> None:
    """Keep on ``est`` what appending rows needs, after a fit (``est._growth``), or why it
    cannot (``est._growth_refusal_``). A kept store also keeps the rows the route re-solves
    from (:attr:`~distsketch.Route.kept_rows`); a route without a pass per batch
    (:attr:`~distsketch.Route.batch_pass`) records the batch by their digest alone."""
    est._growth = None
    est._growth_refused = _refusal(est, spec, route)
    if est._growth_refused is not None:
        return
    fs = getattr(fitted, "fs", None)
    kept = fs is not None and not fs.temporary and bool(route.kept_rows)
    digest = None
    if kept:  # what its re-solve reads (the digest from the same reads)
        digest = keep_batch_rows(fs.group, route.kept_rows, spec.X, spec.Y,
                                 block_rows=int(fs.meta["pass"]["block_rows"]))
    res = fitted.result
    if not route.batch_pass and digest is not None:  # the route's own sums (SISOKR's M, E)
        res = PassResult(n=spec.X.n, x_sketch=fitted.x_sketch, x_landmarks=fitted.x_landmarks,
                         y_sketch=getattr(res, "y_sketch", None),
                         y_landmarks=getattr(res, "y_landmarks", None), store=None,
                         sums={**dict(getattr(res, "sums", None) or {}),
                               "digest": np.array([int(digest, 16)], dtype=np.uint64)})
    if not (isinstance(res, PassResult) and "digest" in res.sums):
        est._growth_refused = "the fit's pass sums do not add over rows"
        return
    further, width_sketches = tuple(est._x_widths(spec)), tuple(res.x_width_sketches)
    if len(further) != len(width_sketches):
        est._growth_refused = "the fit's pass has no realised sketch of every input kernel"
        return
    sums = dict(res.sums)
    growth = Growth(kernels=dict(spec.kernels), x_sketch=res.x_sketch,
                    x_landmarks=res.x_landmarks, y_sketch=res.y_sketch,
                    y_landmarks=res.y_landmarks, sums=tuple(k for k in sums if k != "digest")
                    + ("digest",), y_ndim=None if spec.Y is None else spec.Y.input_ndim,
                    y_width=None if spec.Y is None else spec.Y.shape[1],
                    x_widths=tuple(zip(further, width_sketches)))
    growth.add(sums, rows=res.n, offset=0)
    est._growth = growth
    if fs is not None and not fs.temporary:  # a new model: batches of an earlier one go
        for k in batch_groups(fs):
            drop_batch_group(fs, k)
            logger.info("store %s: removed batch %d of the model fitted before", fs.location, k)
        record_batches(fs, growth.batches, fresh=True)


def _batch_rows(est, X, Y):
    """Row sources of an appended batch, checked against the fit (one row is enough)."""
    check_feature_names(est, X)
    Xs, Ys = check_data(X, Y, y_name=est._targets, model=type(est).__name__, min_rows=1)
    y_name = est._targets
    growth = est._growth
    if Ys is not None and Ys.shape[1] != growth.y_width:
        raise ValueError(f"{y_name}: has {Ys.shape[1]} columns, but {type(est).__name__} was "
                         f"fitted with {growth.y_width}")
    if Xs.shape[1] != est.n_features_in_:
        raise ValueError(f"X has {Xs.shape[1]} features, but {type(est).__name__} is "
                         f"expecting {est.n_features_in_} features as input")
    return Xs, Ys


def partial_fit(est, X: Any, Y: Any = None, *, repeat: bool = False):
    """``est.partial_fit``: append the batch ``(X, Y)`` to a fitted model (or fit it).

    With a kept store the batch is a pass of its own in the store
    (:func:`append_in_store`); otherwise its blocks are not kept.

    Parameters
    ----------
    est : SketchedEstimator
    X : array-like of shape (n_new, n_features)
    Y : array-like of shape (n_new,) or (n_new, n_targets), optional
    repeat : bool, default False
        Append rows whose digest equals a batch's the model holds (otherwise refused).

    Returns
    -------
    est
    """
    if not hasattr(est, "n_features_in_"):
        return est.fit(X, Y)
    growth = est._held_growth()
    if growth is None:
        why = getattr(est, "_growth_refused", None) or "the model holds no batch sums"
        raise ValueError(f"partial_fit: {type(est).__name__} cannot take appended rows: {why}")
    Xs, Ys = _batch_rows(est, X, Y)
    Ys = est._growth_targets(Ys)
    offset = growth.next_position
    spec = _spec(est, growth)
    n = offset + Xs.n
    kx, sx = est._input
    out = est._output
    plan = batch_plan(Xs, Ys, x_kernel=growth.kernels[kx],
                      x_sketch=growth.x_sketch.grown(n), x_landmarks=growth.x_landmarks,
                      y_kernel=growth.kernels[out[0]] if out else None,
                      y_sketch=None if growth.y_sketch is None else growth.y_sketch.grown(n),
                      y_landmarks=growth.y_landmarks, sums=growth.sums, offset=offset,
                      options=spec.options,
                      x_widths=tuple((k, sk.grown(n)) for k, sk in growth.x_widths))
    location = kept_store(est)
    if location is not None:
        record = append_in_store(est, growth, plan, Xs, Ys, location=location, repeat=repeat)
    else:
        options = spec.options
        sums = run_pass(plan, Xs, Ys, split_every=options.split_every,
                        progress=options.progress)
        _refuse_repeat(growth, f"{int(np.asarray(sums['digest']).reshape(-1)[0]):016x}",
                       repeat)
        record = growth.add(sums, rows=Xs.n, offset=offset)
        _resolve(est, _spec(est, growth), growth)
    logger.info("partial_fit: batch %d, %d rows appended (%d in all)", record["batch"],
                record["rows"], growth.rows)
    return est


def _refuse_repeat(growth: Growth, digest: str, repeat: bool) -> None:
    same = [b["batch"] for b in growth.batches if b["digest"] == digest]
    if same and not repeat:
        raise ValueError(f"X: these rows are those of batch {same[0]} already (same digest "
                         f"{digest}); give repeat=True to append them again")


def kept_store(est) -> Any:
    """The kept store a model's batches live in (None: no store): the one it was fitted or
    loaded from (``store_``; a zarr group argument itself)."""
    if est.store is None or getattr(est, "store_", None) is None:
        return None
    return est.store if hasattr(est.store, "attrs") else est.store_


def _open_held(est, location, growth: Growth):
    """The model's store, opened and locked, after checking that its saved model holds the
    batches ``growth`` holds (a model of other batches is never appended to)."""
    fs = open_fit_store(location, lock=True)
    try:
        held = held_in_store(fs)
        if held != growth.batches:
            saved = "no saved model that holds batches" if held is None else \
                f"a saved model of batches {[b['batch'] for b in held]}"
            raise StoreError(
                f"store {fs.location!r} holds {saved} (status {fs.meta.get('status')!r}), this "
                f"{type(est).__name__} holds batches {[b['batch'] for b in growth.batches]}: "
                f"load the model from the store (distsketch.load) and append to it, or fit "
                f"again")
        for k in batch_groups(fs):  # forgotten batches whose group a killed forget left
            if k < growth.numbered and k not in [b["batch"] for b in held]:
                drop_batch_group(fs, k)
                logger.info("store %s: removed the group of forgotten batch %d", fs.location, k)
    except BaseException:
        fs.close()
        raise
    return fs


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _save_in_store(est, fs, growth: Growth) -> None:
    """Save the model in its store again, the appended batches' sums by reference to their
    groups there (:func:`~distsketch.engine.batchstore.batch_reference`)."""
    groups = set(batch_groups(fs))
    est._saving_references = {b["batch"]: batch_reference(fs, b["batch"])
                              for b in growth.batches if b["batch"] in groups}
    try:
        persist.save(est, fs, overwrite=True)
    finally:
        del est._saving_references


def append_in_store(est, growth: Growth, plan, Xs, Ys, *, location, repeat: bool) -> dict:
    """Append a batch through the model's kept store; the batch's record.

    The rows' digest is computed first (one read of them, no kernel) and a repeat refused
    before anything is written. Under the store's lock: the store's saved model must hold the
    batches the model holds; the batch is recorded ``pending`` in the store's batch list, its
    pass runs (or resumes, or is reused) in ``batches/<k>``
    (:func:`~distsketch.engine.batchstore.stored_batch`), the model is solved from the
    batches' sums and saved into the store again, and the batch recorded ``complete``. A
    kill before the save leaves the saved model of the earlier batches (it loads), the batch
    ``pending``: the same rows appended again resume it bitwise.
    """
    options = est._options()
    digest = batch_digest(plan, Xs, Ys, progress=options.progress)
    _refuse_repeat(growth, digest, repeat)
    with _open_held(est, location, growth) as fs:
        k = growth.numbered
        record_batches(fs, growth.batches,
                       pending={"batch": k, "rows": int(Xs.n), "digest": digest,
                                "added": _now()})
        route = _fitted_route(est)
        if route.batch_pass:
            sums = stored_batch(fs, plan, Xs, Ys, batch=k, digest=digest,
                                split_every=options.split_every, progress=options.progress)
            if route.kept_rows:  # what the route re-solves from, beside the batch's blocks
                keep_batch_rows(batch_group(fs, k).group, route.kept_rows, Xs, Ys,
                                block_rows=plan.block_rows)
        else:  # the route keeps the batch's rows only (no blocks, no sums but the digest)
            sums = kept_batch(fs, plan, Xs, Ys, batch=k, digest=digest, names=route.kept_rows,
                              split_every=options.split_every, progress=options.progress)
        record = growth.add(dict(sums), rows=Xs.n, offset=plan.row_offset)
        _resolve(est, _spec(est, growth), growth, fs)
        _save_in_store(est, fs, growth)
        record_batches(fs, growth.batches)
    return record


def forget(est, batch: int):
    """``est.forget``: drop batch ``batch`` and solve from the other batches' sums (and the
    dictionary sums of the batches forgotten, :meth:`Growth.drop`). With a kept store the
    model is saved there again, the batch recorded ``forgotten`` and an appended batch's
    group deleted (after the save)."""
    growth = est._held_growth()
    if growth is None:
        raise ValueError(f"batch: {type(est).__name__} holds no batches to forget "
                         f"(fit it, then append with partial_fit)")
    numbers = [b["batch"] for b in growth.batches]
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) \
            or int(batch) not in numbers:
        raise ValueError(f"batch: expected one of the batches held {numbers}, got {batch!r}")
    if len(numbers) == 1:
        raise ValueError(f"batch: batch {numbers[0]} is the only one held; forgetting it "
                         f"leaves no rows to fit")
    location = kept_store(est)
    if location is None:
        growth.drop(numbers.index(int(batch)))
        _resolve(est, _spec(est, growth), growth)
    else:
        with _open_held(est, location, growth) as fs:
            if drop_batch_group(fs, growth.numbered):
                logger.warning("store %s: the unfinished append of batch %d is dropped (the "
                               "rows after a forgotten batch move)", fs.location,
                               growth.numbered)
            record = dict(growth.batches[numbers.index(int(batch))])
            growth.drop(numbers.index(int(batch)))
            _resolve(est, _spec(est, growth), growth, fs)
            _save_in_store(est, fs, growth)
            record_batches(fs, growth.batches, forgotten=record)
            drop_batch_group(fs, int(batch))
    logger.info("forget: batch %d dropped (%d rows left)", int(batch), growth.rows)
    return est


def _resolve(est, spec: FitSpec, growth: Growth, fs=None) -> None:
    """Solve the model again over every batch held, by the route that fitted it
    (:meth:`~distsketch.Route.resolve`: the direct route from the batches' sums, an
    iterative one over the rows ``fs``, the open store, keeps)."""
    _fitted_route(est).resolve(est, spec, growth, fs)
    est._update_coef()


def _fitted_route(est):
    """The route object of a fitted model (its ``solver_``)."""
    return get_route(getattr(est, "solver_", None) or "direct")()


def _spec(est, growth: Growth) -> FitSpec:
    """The fit specification a re-solve reads: the current λ path and options, the fitted
    kernels, and the shapes of all the rows held (sources without data: a re-solve reads
    sums only)."""
    path = next((p for p in ("lam", "lams") if p in est._param_kinds), None)  # CV: lams
    lams = check_lam(getattr(est, path), argument=path) if path else ()
    n = growth.rows
    X = SimpleNamespace(n=n, shape=(n, int(est.n_features_in_)), input_ndim=2)
    Y = None if growth.y_width is None else SimpleNamespace(
        n=n, shape=(n, growth.y_width), input_ndim=growth.y_ndim)
    return FitSpec(X, Y, dict(growth.kernels), {}, est._options(), np.random.default_rng(0),
                   lams)


def _exact(sketch) -> bool:
    """Whether a sketch argument is the exact side: None, the identity, or its realisation."""
    return sketch is None or getattr(sketch, "exact", False) is True \
        or getattr(sketch, "is_identity", False) is True


class _IfAppends:
    """A method present only where the model can take appended rows: a class whose
    ``_appends`` is true, with a sketch (not the exact side) for each sketch parameter and
    parameters that allow it (``_appending_refusal``; scikit-learn's ``available_if``:
    ``hasattr(est, "partial_fit")`` says so)."""

    def __init__(self, fn):
        self.fn = fn
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__

    def __get__(self, obj, cls=None):
        cls = type(obj) if cls is None else cls
        if not getattr(cls, "_appends", False):
            raise AttributeError(f"{cls.__name__} has no {self.fn.__name__}: it does not take "
                                 f"appended rows")
        if obj is None:
            return self.fn
        names = [obj._input[1]] + ([obj._output[1]] if obj._output else [])
        exact = [n for n in names if _exact(getattr(obj, n, None))]
        if exact:
            raise AttributeError(f"{cls.__name__} with {exact[0]}=None (exact) has no "
                                 f"{self.fn.__name__}: the exact model's n × n system grows "
                                 f"with the rows; give {exact[0]} a sketch")
        why = obj._appending_refusal()
        if why is not None:
            raise AttributeError(f"{cls.__name__} has no {self.fn.__name__}: {why}")
        return self.fn.__get__(obj, cls)


class Growing:
    """Mixin of the estimators that take appended rows: ``partial_fit``, ``forget`` and
    ``batches_`` (module docstring; docs/design/growing.md). A subclass that cannot sets
    ``_appends = False`` and has none of them."""

    _appends = True

    @_IfAppends
    @with_blas_limit
    def partial_fit(self, X: Any, Y: Any = None, *, repeat: bool = False):
        """Append the rows ``(X, Y)`` to the fitted model (or fit on them, unfitted).

        The pass runs over the new rows only, with the fit's realised sketches (their
        landmarks and mixing kept: the new rows' columns of ``R`` are zero) and fitted
        kernels (a standardised kernel keeps its fit's statistics); the model is then solved
        from the sums of every batch (every λ, rank), with the current ``lam``. The result
        equals a fresh fit on all the rows, in batch order, with ``sketch=`` the fitted
        realised sketch (:class:`~distsketch.sketches.Fixed`), to rounding.

        Parameters
        ----------
        X : array-like of shape (n_new, n_features)
            The new rows (numpy, scipy.sparse, dask or zarr; one row is enough).
        Y : array-like of shape (n_new,) or (n_new, n_targets), optional
            Their targets or outputs, for a model that has them (as many columns as at fit).
        repeat : bool, default False
            Append rows whose digest is that of a batch the model holds (refused otherwise:
            the same rows twice double their weight).

        Returns
        -------
        self
        """
        return partial_fit(self, X, Y, repeat=repeat)

    @_IfAppends
    @with_blas_limit
    def forget(self, batch: int):
        """Drop a batch of rows and solve from the others' sums (added in batch order, no
        subtraction): the model of a fresh fit without those rows, to rounding.

        Forgetting the fit's batch (0) keeps its landmarks as the model's dictionary: the
        rows leave the training sums, ``B = R K Rᵀ`` (the landmarks' own Gram matrix) stays,
        so the model is the Nyström estimator of the remaining rows on those landmarks
        (docs/design/growing.md, "Forgetting").

        Parameters
        ----------
        batch : int
            The batch's number in :attr:`batches_`.

        Returns
        -------
        self
        """
        return forget(self, batch)

    @property
    def batches_(self) -> list[dict]:
        """The batches the model holds, in order: ``batch`` (0: the fit's), ``rows``,
        ``digest`` and ``added`` (UTC). Only on a model that takes appended rows."""
        growth = self._held_growth()
        if growth is None:
            raise AttributeError(f"{type(self).__name__} holds no batches: "
                                 f"{getattr(self, '_growth_refused', None) or 'not fitted'}")
        return [dict(b) for b in growth.batches]

    def _get_state(self):
        arrays, state = super()._get_state()
        growth = self._held_growth()
        if growth is not None:
            try:
                more, state["growth"] = growth_state(
                    growth, references=getattr(self, "_saving_references", None))
            except ValueError as exc:  # a grid's kernel that cannot be named (a lambda)
                logger.warning("the batches are not saved: %s", exc)
                state["growth_refused"] = f"the batches were not saved: {exc}"
                return arrays, state
            arrays.update(more)
        return arrays, state

    def _set_state(self, arrays, state):
        super()._set_state(arrays, state)
        self._growth = None
        saved = state.get("growth")  # models saved before partial_fit existed have none
        self._growth_saved = None if saved is None else (
            {k: v for k, v in arrays.items() if k.startswith(GROWTH_PREFIX)}, saved)
        self._growth_refused = None if saved is not None else state.get(
            "growth_refused",
            "the saved model holds no batch sums (saved by a fit that could not take rows)")

    def _held_growth(self) -> Growth | None:
        """The batches held: kept by the fit, or rebuilt from a saved model's state (the
        model's own sides — kernels, realised sketches, landmarks — restored by then)."""
        growth = getattr(self, "_growth", None)
        saved = getattr(self, "_growth_saved", None)
        if growth is None and saved is not None:
            growth = self._growth = growth_from_state(self, *saved)
            self._growth_saved = None
        return growth

    def _pass_sums(self, spec: FitSpec) -> tuple[str, ...]:
        sums = self._sums(spec)
        return growth_sums(self, spec, sums) if type(self)._appends else sums

    def _first_pass_sums(self, sums: tuple[str, ...]) -> tuple[str, ...]:
        """The sums of the first pass of a route without a pass per batch (SISOKR's PCG:
        ``M``, ``E``, ``U``), with what a growing fit adds to them (centred outputs: their
        intercept's sums)."""
        return sums

    def _after_fit(self, spec: FitSpec, route: Any, fitted: Any) -> None:
        super()._after_fit(spec, route, fitted)
        if type(self)._appends:
            start_growth(self, spec, route, fitted)

    def _appending_refusal(self) -> str | None:
        """Why a model with these parameters cannot take appended rows, decided from the
        parameters alone (then it has no ``partial_fit`` nor ``forget``), or None."""
        return None

    def _growth_targets(self, Y: Any) -> Any:
        """An appended batch's target or output rows as its pass takes them (as given)."""
        return Y

    def _growth_result(self, growth: Growth) -> PassResult:
        """The pass result a re-solve reads: the batches' totals (:meth:`Growth.result`)."""
        return growth.result()

    def _growth_refusal(self, spec: FitSpec) -> str | None:
        """Why this model's fit cannot take appended rows beyond the common reasons (an
        iterative route, an exact side, centred outputs), or None."""
        return None
