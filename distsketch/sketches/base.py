"""Sketch matrices ``R = R_mix · R_sub``: specifications and their realisations.

Glossary (docs/design/math.md)
------------------------------
n        number of training rows (columns of ``R``)
m        sketch size (rows of ``R``)
J        support: the training rows that ``R`` touches (non-null columns), sorted
s'       ``len(J)``
R_sub    the ``s' × n`` selection of the rows ``J``
R_mix    the ``m × s'`` mixing matrix, so that ``R = R_mix R_sub``

A *sketch specification* (``SubSampling(m=500)``) holds only its constructor
arguments. ``spec.realize(n, seed=..., data=None)`` draws a :class:`RealizedSketch`: the
block operations the pass needs, implemented by :class:`SparseSketch` (support and sparse
mixing) and :class:`~distsketch.sketches.tiled.TiledSketch` (dense random matrices generated
in fixed tiles of :data:`~distsketch.sketches.tiled.TILE` columns, tile ``t`` from the
generator ``default_rng([seed, t])``, so any worker can regenerate any block of columns and
the draw never depends on how the training rows are chunked). The shipped sketches are
functions of ``(seed, n)``; ``data`` is there for data-dependent ones. Adding a sketch:
docs/guide/extending.md, "How to add a sketch".

This module holds the two base classes, :class:`SparseSketch`, the registry and the argument
checks; the sketches drawn in one go (:class:`~distsketch.sketches.sampling.Identity`,
``SubSampling``, ``Accumulation``) are in :mod:`distsketch.sketches.sampling`, the sketches
drawn tile by tile (``PSparsified``, ``GaussianSketch``, ``CountSketch``) and ``TiledSketch``
in :mod:`distsketch.sketches.tiled`, ``LeverageScores`` in :mod:`distsketch.sketches.leverage`.

=====================  ==============================  =============================
sketch                 support J                       R_mix
=====================  ==============================  =============================
Identity               all n                           I_n
SubSampling(m)         m rows, uniform, no replacement  sqrt(n/m) I_m
PSparsified(m, p)      non-null columns of a           ±1/sqrt(mp) or N(0,1)/sqrt(mp)
                       Bernoulli(p) mask               on the mask
Accumulation(m, q)     <= m q rows (with replacement)  q signed entries per row,
                                                       ±sqrt(n/(mq))
GaussianSketch(m)      all n                           N(0, 1/m), generated per tile
CountSketch(m)         all n                           one ±1 per column
LeverageScores(m, λ)   m rows ∝ approximate ridge      1/sqrt(m p_j)
                       leverage scores (data-dependent)
=====================  ==============================  =============================

All scalings make ``E[RᵀR] = I_n``; the SISOKR and sketched-KRR estimators are
invariant to a scalar rescaling of ``R``, so the scaling only matters for auditing.

References: El Ahmad, Brogat-Motte, Laforgue, d'Alché-Buc, "Sketch In, Sketch Out",
AISTATS 2024; El Ahmad, Laforgue, d'Alché-Buc, "Fast kernel methods for generic
Lipschitz losses via p-sparsified sketches", TMLR 2023; Chen & Yang, "Accumulations of
projections", AISTATS 2021.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from .._base import ParamsMixin
from .._registry import Registry
from ..backends.base import backend_of

__all__ = [
    "Sketch",
    "RealizedSketch",
    "SparseSketch",
    "SKETCHES",
    "check_sketch",
    "sketch_from_config",
]

#: Sketch specifications by registry name; a subclass that sets ``name`` registers itself.
SKETCHES: Registry = Registry("sketch")


def positive_int(value: Any, *, owner: str, name: str) -> int:
    """``value`` as an int if it is a positive integer (not a bool), else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------- realised


class RealizedSketch(ABC):
    """A drawn sketch ``R`` (m × n): the block operations the streaming pass and the
    estimators need (docs/design/math.md, "Sketches").

    Two implementations ship: :class:`SparseSketch` (support ``J`` and a sparse ``R_mix``,
    for every sketch with few non-zeros) and :class:`TiledSketch` (a dense ``R_mix``
    generated tile by tile from the seed, never whole). A new sketch type usually only
    draws one of them in its :meth:`Sketch.realize`; a new realisation (a structured
    transform, say) subclasses this class and implements the abstract methods.

    Attributes
    ----------
    spec : Sketch
        The specification it was drawn from.
    n, m : int
        Columns and rows of ``R``.
    seed : int or None
        The seed it was drawn from.
    support : ndarray of int64, shape (s',)
        Sorted training rows ``J`` with a non-null column in ``R``.
    scale : ndarray of shape (m,) or None
        Set when ``R_mix`` is diagonal (identity, sub-sampling): ``R_mix = diag(scale)``, so
        each column of ``C = K Rᵀ`` is one scaled kernel column.
    """

    #: Realisations by ``kind`` (what a saved model records); subclasses with a ``kind``
    #: register themselves.
    KINDS: ClassVar[dict[str, type]] = {}
    kind: ClassVar[str] = ""

    spec: "Sketch"
    n: int
    m: int
    seed: int | None
    scale: np.ndarray | None = None
    #: Training rows the sketch was drawn for (``n`` unless :meth:`grown`): the columns of
    #: rows ``drawn..n-1`` are zero.
    drawn: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("kind"):
            RealizedSketch.KINDS[cls.kind] = cls

    # -- description ------------------------------------------------------------
    @property
    @abstractmethod
    def support(self) -> np.ndarray:
        """Sorted non-null columns ``J`` (int64, shape (s',))."""

    @property
    def support_size(self) -> int:
        """``s' = len(J)``."""
        return int(self.support.size)

    @property
    def is_identity(self) -> bool:
        return bool(self.spec.exact)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.spec!r}, n={self.n}, seed={self.seed}, m={self.m}, "
                f"support_size={self.support_size})")

    def to_config(self) -> dict:
        """JSON-serialisable description: specification, n and seed.

        Returns
        -------
        dict
        """
        out = {"spec": self.spec.to_config(), "n": self.n, "seed": self.seed}
        if self.rows_drawn != self.n:  # a grown sketch is not the draw for n rows
            out["drawn"] = self.rows_drawn
        return out

    @property
    def rows_drawn(self) -> int:
        """Training rows the sketch was drawn for: ``n``, or fewer for a :meth:`grown` one."""
        return self.n if self.drawn is None else int(self.drawn)

    def grown(self, n: int) -> "RealizedSketch":
        """The same ``R`` over ``n`` training rows, at least those it was drawn for: ``[R, 0]``
        (``self`` for ``n = self.n``).

        Support, mixing and landmarks are kept, so the blocks ``C_I`` of the rows seen and
        ``B`` do not change; appended rows add their own blocks (docs/design/growing.md).
        Refuses fewer rows, and an exact side (its ``n × n`` system grows with the rows).

        Parameters
        ----------
        n : int

        Returns
        -------
        RealizedSketch
        """
        n = int(n)
        if n < self.rows_drawn:
            raise ValueError(f"sketch: a realised sketch drawn for {self.rows_drawn} rows "
                             f"replays over at least as many rows, got {n}")
        if n == self.n:
            return self
        if self.is_identity:
            raise ValueError("sketch: an exact side (sketch=None or Identity()) cannot take "
                             "appended rows: its n × n system grows with them; give a sketch "
                             "such as SubSampling(m) to append rows")
        return self._grown(n)

    def _grown(self, n: int) -> "RealizedSketch":
        """:meth:`grown` for ``n > self.n`` (a realisation that supports growing)."""
        raise ValueError(f"sketch: the realisation {type(self).__name__} cannot be grown to "
                         f"more rows")

    # -- the block operations -------------------------------------------------------
    @abstractmethod
    def support_spans(self, chunk: int) -> list[tuple[int, int]]:
        """Spans ``[a, b)`` of support positions of about ``chunk`` columns, in order: the
        landmark columns of one kernel block of the pass.

        Parameters
        ----------
        chunk : int
            Columns per span wanted.

        Returns
        -------
        list of (int, int)
            Consecutive spans covering ``range(support_size)``.
        """

    @abstractmethod
    def mixing_t_block(self, start: int, stop: int) -> Any:
        """``R_mix[:, start:stop]ᵀ`` in support coordinates, on the host.

        Parameters
        ----------
        start, stop : int
            Support positions (a span of :meth:`support_spans`).

        Returns
        -------
        scipy.sparse CSR array or ndarray of shape (stop − start, m)
        """

    @abstractmethod
    def left_rows(self, block: Any, start: int, stop: int) -> tuple[np.ndarray, Any]:
        """The non-zero rows of ``R[:, start:stop] @ block`` for a row block of the data: one
        term of ``B = R K Rᵀ = Σ_I R[:, I] C_I``.

        Parameters
        ----------
        block : array of shape (stop − start, k)
            Of any registered backend.
        start, stop : int
            The block's training rows.

        Returns
        -------
        rows : ndarray of int64
            Sorted rows of ``R`` with a non-zero in columns ``start:stop``.
        values : array of shape (len(rows), k)
            Those rows of the product, in the backend of ``block``.
        """

    @abstractmethod
    def transpose_dot(self, T: np.ndarray) -> np.ndarray:
        """``R_mixᵀ T`` on the host: projects landmark kernel columns onto features.

        Parameters
        ----------
        T : ndarray of shape (m, r)

        Returns
        -------
        ndarray of shape (s', r)
        """

    @abstractmethod
    def columns(self, start: int, stop: int) -> Any:
        """``R[:, start:stop]``, for auditing.

        Parameters
        ----------
        start, stop : int
            Training rows (columns of ``R``).

        Returns
        -------
        scipy.sparse CSR array or ndarray of shape (m, stop − start)
        """

    @property
    @abstractmethod
    def mixing(self):
        """``R_mix`` of shape (m, s'): scipy.sparse CSR, or an ndarray."""

    @abstractmethod
    def _state(self) -> tuple[dict[str, Any], dict]:
        """``(arrays, json)`` from which :meth:`_from_state` rebuilds this realisation."""

    @classmethod
    @abstractmethod
    def _from_state(cls, spec: "Sketch", meta: dict, arrays: dict) -> "RealizedSketch":
        """Inverse of :meth:`_state`."""

    # -- derived ------------------------------------------------------------------
    def matrix(self) -> Any:
        """``R`` whole, for auditing.

        Returns
        -------
        scipy.sparse CSR array or ndarray of shape (m, n)
        """
        return self.columns(0, self.n)

    def left_columns(self, block: Any, start: int, stop: int) -> Any:
        """``R[:, start:stop] @ block`` for training rows ``start:stop``.

        Parameters
        ----------
        block : array of shape (stop − start, k)
            Of any registered backend.
        start, stop : int
            The block's training rows.

        Returns
        -------
        array of shape (m, k)
        """
        rows, values = self.left_rows(block, start, stop)
        xp = backend_of(values).xp
        out = xp.zeros((self.m, block.shape[1]))
        out[rows] = values
        return out

    def get_state(self) -> tuple[dict[str, Any], dict]:
        """The realisation as ``(arrays, json)``: what a saved model stores (never a seed to
        redraw from, except for tiled sketches, whose tiles are a pure function of it).

        Returns
        -------
        arrays : dict
            Named arrays (support, mixing, scale; none for a tiled sketch).
        meta : dict
            JSON-serialisable: the realisation's ``kind``, the specification, n, m, seed.
        """
        arrays, meta = self._state()
        return arrays, {"kind": self.kind, "spec": self.spec.to_config(), "n": self.n,
                        "m": self.m, "seed": self.seed, **meta}

    @staticmethod
    def from_state(arrays: dict, meta: dict) -> RealizedSketch:
        """Inverse of :meth:`get_state`.

        Parameters
        ----------
        arrays, meta : dict
            As returned by :meth:`get_state`.

        Returns
        -------
        RealizedSketch

        Raises
        ------
        ValueError
            For an unknown ``kind``, or a tiled sketch whose tiles regenerate differently.
        """
        try:
            cls = RealizedSketch.KINDS[meta["kind"]]
        except KeyError:
            raise ValueError(f"saved sketch: unknown realisation {meta.get('kind')!r}; known: "
                             f"{sorted(RealizedSketch.KINDS)}") from None
        return cls._from_state(sketch_from_config(meta["spec"]), meta, arrays)

    def _support_span(self, start: int, stop: int) -> tuple[int, int]:
        """Positions ``[a, b)`` of the support rows that fall in training rows ``[start, stop)``."""
        return (int(np.searchsorted(self.support, start)), int(np.searchsorted(self.support, stop)))


class SparseSketch(RealizedSketch):
    """A sketch stored as its support ``J`` and sparse mixing matrix ``R_mix``.

    Only O(nnz + s') numbers are held: a sub-sampling sketch of a billion rows is its m
    indices.

    Parameters
    ----------
    spec : Sketch
    n : int
    seed : int or None
    m : int
    support : array of int, shape (s',)
        Sorted non-null columns ``J``.
    mixing : scipy.sparse matrix of shape (m, s')
        ``R_mix``.
    scale : ndarray of shape (m,), optional
        Set when ``R_mix`` is diagonal: ``R_mix = diag(scale)``.
    drawn : int, optional
        Rows the sketch was drawn for when fewer than ``n`` (a :meth:`~RealizedSketch.grown`
        sketch: the support lies among them, the other columns are zero).
    """

    kind = "sparse"

    def __init__(self, spec: Sketch, n: int, seed: int | None, m: int, *, support: Any,
                 mixing: Any, scale: np.ndarray | None = None, drawn: int | None = None) -> None:
        self.spec = spec
        self.n = int(n)
        self.drawn = None if drawn is None or int(drawn) == self.n else int(drawn)
        self.seed = None if seed is None else int(seed)
        self.m = int(m)
        self.scale = scale
        self._support = np.asarray(support, dtype=np.int64)
        self._mix_csc = sp.csc_array(mixing)
        # R_mixᵀ (s' × m), CSR so that row slices over the support are cheap.
        self._mix_t = sp.csr_array(self._mix_csc.T)

    @classmethod
    def from_entries(cls, spec: Sketch, n: int, seed: int | None, m: int, rows: Any, cols: Any,
                     vals: Any, **kw: Any) -> SparseSketch:
        """Build from the non-zeros ``R[rows, cols] += vals`` (duplicates add up).

        Parameters
        ----------
        spec : Sketch
        n, seed, m
            As for the constructor.
        rows, cols : array-like of int
            Positions of the entries (``cols`` among the ``n`` training rows).
        vals : array-like of float
            Their values; entries at the same position add up, columns whose entries cancel
            are dropped from the support.
        **kw
            Keyword arguments of the constructor (``scale``).

        Returns
        -------
        SparseSketch
        """
        support, local = np.unique(np.asarray(cols, dtype=np.int64), return_inverse=True)
        R = sp.coo_array((vals, (rows, local)), shape=(m, support.size)).tocsc()
        R.sum_duplicates()
        R.eliminate_zeros()
        keep = np.flatnonzero(np.diff(R.indptr))  # columns whose entries cancelled are dropped
        if keep.size < support.size:
            support, R = support[keep], R[:, keep]
        return cls(spec, n, seed, m, support=support, mixing=R, **kw)

    @property
    def support(self) -> np.ndarray:
        return self._support

    @property
    def mixing(self):
        return sp.csr_array(self._mix_csc)

    def mixing_t_block(self, start: int, stop: int) -> Any:
        return self._mix_t[start:stop]

    def columns(self, start: int, stop: int) -> Any:
        a, b = self._support_span(start, stop)
        part = self._mix_csc[:, a:b].tocoo()
        cols = self.support[a:b][part.col] - start
        return sp.csr_array((part.data, (part.row, cols)), shape=(self.m, stop - start))

    def support_spans(self, chunk: int) -> list[tuple[int, int]]:
        s, step = self.support_size, max(int(chunk), 1)
        return [(a, min(a + step, s)) for a in range(0, s, step)]

    def left_rows(self, block: Any, start: int, stop: int) -> tuple[np.ndarray, Any]:
        # for a sub-sampling sketch the rows are the few landmarks inside the block, so a
        # partial sum of B stays small
        be = backend_of(block)
        a, b = self._support_span(start, stop)
        sub = sp.csr_array(self._mix_csc[:, a:b])
        rows = np.flatnonzero(np.diff(sub.indptr))
        # R[:, I] block = R_mix[:, J∩I] block[J∩I]: only the support rows of the block
        values = be.xp.asarray(be.operand(sub[rows]) @ block[self.support[a:b] - start])
        return rows.astype(np.int64), values.reshape(rows.size, block.shape[1])

    def transpose_dot(self, T: np.ndarray) -> np.ndarray:
        return np.asarray(self._mix_t @ T)

    def _grown(self, n: int) -> "SparseSketch":
        return SparseSketch(self.spec, n, self.seed, self.m, support=self._support,
                            mixing=self._mix_csc, scale=self.scale, drawn=self.rows_drawn)

    def _state(self):
        meta = {} if self.drawn is None else {"drawn": self.drawn}
        return {"support": self._support, "mixing": self.mixing, "scale": self.scale}, meta

    @classmethod
    def _from_state(cls, spec, meta, arrays):
        return cls(spec, meta["n"], meta["seed"], meta["m"], support=arrays["support"],
                   mixing=arrays["mixing"], scale=arrays.get("scale"), drawn=meta.get("drawn"))


# --------------------------------------------------------------------------- specs


class Sketch(ParamsMixin):
    """Base class of sketch specifications (constructor arguments only).

    A subclass sets ``name`` (its :data:`SKETCHES` registry name, used by configs and saved
    models: defining the class registers it), stores its arguments in ``__init__``, validates
    them in :meth:`check` and draws a :class:`RealizedSketch` in :meth:`realize` — usually a
    :class:`SparseSketch` (``SparseSketch.from_entries``) or a :class:`TiledSketch` (then it
    implements :meth:`tile`). docs/guide/extending.md, "How to add a sketch".
    """

    name: str = ""
    #: ``realize`` also takes ``kernel=`` (the side's kernel): data-dependent sketches
    needs_kernel: ClassVar[bool] = False
    #: The realised sketch picks landmarks: a support of m training rows and a diagonal
    #: ``R_mix``, so ``C = K_nm diag(r)`` is a scaled kernel block recomputable from the rows
    #: and ``B = diag(r) K_mm diag(r)`` the landmarks' own Gram matrix (what the PCG route's
    #: preconditioner is built from: ``distsketch.solvers.pcg``). Mixing sketches (Gaussian,
    #: p-sparsified, accumulation, CountSketch) make ``B`` a mix of many rows' kernel values.
    selects_landmarks: ClassVar[bool] = False
    #: The sketch is the identity (an exact side: ``R = I_n``).
    exact: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        SKETCHES.register_class(cls)  # a later class of the same name replaces it

    def check(self, n: int, *, argument: str) -> None:
        """Raise ``ValueError`` naming ``argument`` if the sketch cannot be drawn for ``n`` rows.

        Parameters
        ----------
        n : int
        argument : str
            The estimator argument holding the sketch, which starts the error message.
        """

    def realize(self, n: int, *, seed: int, data: Any = None) -> RealizedSketch:
        """Draw the sketch for ``n`` training rows from ``seed``.

        Parameters
        ----------
        n : int
        seed : int
        data : RowSource, optional
            The training rows of this side (``distsketch.engine.rows.RowSource``), for
            data-dependent sketches (leverage scores); the sketches shipped here do not read
            it. A realisation that depends on the data is saved with the model
            (:meth:`RealizedSketch.get_state`), never redrawn.

        Returns
        -------
        RealizedSketch
        """
        raise NotImplementedError

    def tile(self, seed: int, t: int, m: int, width: int) -> np.ndarray:
        """Columns ``[t·TILE, t·TILE + width)`` of a :class:`TiledSketch`'s ``R_mix``, a pure
        function of its arguments (sketches realised as a :class:`TiledSketch` only).

        Parameters
        ----------
        seed, t, m : int
            The realisation's seed, the tile's number and the rows of ``R``.
        width : int
            Columns of the tile (:data:`TILE`, fewer for the last one).

        Returns
        -------
        ndarray of shape (m, width)
        """
        raise NotImplementedError

    def deterministic(self, n: int) -> bool:
        """Whether the drawn matrix for ``n`` rows is the same for every seed (no randomness
        left: the identity, sub-sampling every row).

        Parameters
        ----------
        n : int

        Returns
        -------
        bool
        """
        return False

    def to_config(self) -> dict:
        return {"name": self.name, **self.get_params(deep=False)}

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.get_params() == other.get_params()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.get_params().items()))))

    def _m(self) -> int:
        return positive_int(self.m, owner=type(self).__name__, name="m")

    def _check_rows(self, n: int, *, argument: str) -> None:
        """``m`` a positive integer of at most ``n``: a sketch of ``n`` rows has rank at most
        ``n``, so more rows only add cost (``m × m`` driver matrices), and would allocate them
        before anything else could fail."""
        try:
            m = self._m()
        except ValueError as exc:
            raise ValueError(f"{argument}: {exc}") from None
        if m > n:
            raise ValueError(f"{argument}: {type(self).__name__}(m={m}) needs m <= n_samples = "
                             f"{n}; use a smaller m or Identity() for the exact model")


def check_sketch(sketch: Sketch | dict | None, *, argument: str) -> Sketch:
    """Resolve a sketch argument: ``None`` means :class:`Identity` (exact).

    Parameters
    ----------
    sketch : Sketch, RealizedSketch, dict or None
        A specification (returned as is), a fitted model's realised sketch (replayed:
        :class:`~distsketch.sketches.fixed.Fixed`), a config dict (:func:`sketch_from_config`)
        or ``None``; anything else (or a bad config) raises ``ValueError``.
    argument : str
        The argument's name, which starts every error message.

    Returns
    -------
    Sketch

    Examples
    --------
    >>> from distsketch.sketches import Identity, check_sketch
    >>> check_sketch({"name": "subsampling", "m": 5}, argument="sketch")
    SubSampling(5)
    >>> isinstance(check_sketch(None, argument="sketch"), Identity)
    True
    """
    if sketch is None:
        return SKETCHES["identity"]()
    if isinstance(sketch, Sketch):
        return sketch
    if isinstance(sketch, RealizedSketch):  # a fitted model's, replayed: sketches.fixed
        return SKETCHES["fixed"](sketch)
    if isinstance(sketch, dict):
        return sketch_from_config(sketch, argument=argument)
    raise ValueError(
        f"{argument}: expected None (exact) or a distsketch.sketches object such as "
        f"SubSampling(m=...), got {sketch!r}"
    )


def sketch_from_config(cfg: dict, *, argument: str = "sketch") -> Sketch:
    """A sketch specification from ``{"name": <registry name>, **params}``.

    Parameters
    ----------
    cfg : dict
        ``name`` is a key of :data:`SKETCHES`; the other keys are constructor parameters.
    argument : str
        The argument's name, which starts every error message.

    Returns
    -------
    Sketch

    Raises
    ------
    ValueError
        For an unknown name or bad parameters.

    Examples
    --------
    >>> from distsketch.sketches import sketch_from_config
    >>> sketch_from_config({"name": "p_sparsified", "m": 50, "p": 0.1})
    PSparsified(50, 0.1)
    """
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    if name not in SKETCHES:
        raise ValueError(f"{argument}: unknown sketch {name!r}; use one of {sorted(SKETCHES)}")
    try:
        return SKETCHES[name](**cfg)
    except TypeError as exc:
        raise ValueError(f"{argument}: bad parameters for sketch {name!r}: {exc}") from None
