"""A realised sketch given back as a specification: a fresh fit with a fitted model's ``R``.

``SketchedKRR(sketch=model.sketch_)`` fits with the very matrix ``R`` the fitted model drew
(its landmarks, its mixing, its scaling), over the same rows or more: rows beyond those it
was drawn for get zero columns (:meth:`RealizedSketch.grown`). That is what appending rows to
a fitted model (``partial_fit``) keeps fixed, so a fresh fit on every row with the fitted
model's sketch is the model ``partial_fit`` must equal (docs/design/growing.md).

:func:`~distsketch.sketches.base.check_sketch` wraps a realised sketch given as a ``sketch``
argument in :class:`Fixed`. Its configuration holds the realisation itself (support, mixing,
scaling; for a sketch drawn tile by tile, its seed and two tiles' fingerprints), so a model
fitted with it saves and loads like any other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .base import RealizedSketch, Sketch

__all__ = ["Fixed"]


def _encode(value: Any) -> Any:
    """An array of a realisation's state as JSON values (exact: floats by their ``repr``)."""
    if value is None:
        return None
    if sp.issparse(value):
        csr = sp.csr_array(value)
        return {"csr": [list(csr.shape), csr.indptr.tolist(), csr.indices.tolist(),
                        csr.data.tolist()]}
    a = np.asarray(value)
    return {"array": a.tolist(), "dtype": a.dtype.str, "shape": list(a.shape)}


def _decode(value: Any) -> Any:
    if value is None:
        return None
    if "csr" in value:
        shape, indptr, indices, data = value["csr"]
        return sp.csr_array((np.asarray(data, dtype=np.float64),
                             np.asarray(indices, dtype=np.int64),
                             np.asarray(indptr, dtype=np.int64)), shape=tuple(shape))
    return np.asarray(value["array"], dtype=np.dtype(value["dtype"])).reshape(value["shape"])


class Fixed(Sketch):
    """The realised sketch ``R`` of a fitted model, replayed: ``realize(n)`` is ``[R, 0]``.

    Parameters
    ----------
    sketch : RealizedSketch or dict
        A fitted model's realised sketch (``model.sketch_``, ``model.input_sketch_``), or
        the configuration ``to_config()`` wrote.

    Notes
    -----
    ``realize(n, seed=...)`` ignores the seed and returns ``sketch.grown(n)``: the same
    support, mixing and scaling, the columns of the rows beyond those it was drawn for zero. It
    refuses fewer rows than the sketch was drawn for, and an exact side (the identity).

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.sketches import Fixed, SubSampling
    >>> R = SubSampling(3).realize(10, seed=0)
    >>> G = Fixed(R).realize(12, seed=99)
    >>> np.array_equal(G.support, R.support), G.n, G.matrix()[:, 10:].nnz
    (True, 12, 0)
    """

    name = "fixed"

    def __init__(self, sketch: RealizedSketch | dict) -> None:
        self.sketch = sketch

    @property
    def selects_landmarks(self) -> bool:  # a class attribute of the other sketches
        """Whether the replayed sketch picks landmarks: a diagonal ``R_mix`` (its ``scale``;
        a sub-sampling draw, not pre-whitened), which the PCG route takes."""
        R = self._realised()
        return R.scale is not None and not R.is_identity

    def _realised(self, *, argument: str = "sketch") -> RealizedSketch:
        sketch = self.sketch
        if isinstance(sketch, RealizedSketch):
            return sketch
        if isinstance(sketch, dict) and {"meta", "arrays"} <= set(sketch):
            try:
                arrays = {k: _decode(v) for k, v in sketch["arrays"].items()}
                return RealizedSketch.from_state(arrays, sketch["meta"])
            except (KeyError, TypeError) as exc:
                raise ValueError(f"{argument}: Fixed: a damaged realised-sketch configuration "
                                 f"({exc!r})") from None
        raise ValueError(f"{argument}: Fixed expects a fitted model's realised sketch "
                         f"(model.sketch_), got {type(sketch).__name__}")

    @property
    def m(self) -> int:
        return self._realised().m

    @property
    def is_exact(self) -> bool:
        """Whether the replayed sketch is the identity (an exact side)."""
        return self._realised().is_identity

    def check(self, n: int, *, argument: str) -> None:
        """Refuse fewer rows than the sketch was realised for, and a realisation that
        cannot be replayed over more.

        Parameters
        ----------
        n : int
        argument : str
        """
        R = self._realised(argument=argument)
        if n < R.rows_drawn:
            raise ValueError(f"{argument}: the realised sketch was drawn for {R.rows_drawn} "
                             f"rows and replays over at least as many; got n_samples = {n}")
        if R.is_identity:
            raise ValueError(f"{argument}: the realised sketch is an exact side (Identity), "
                             f"which has nothing to fix: give sketch=None")

    def deterministic(self, n: int) -> bool:
        return True

    def realize(self, n: int, *, seed: int, data: Any = None) -> RealizedSketch:
        """``[R, 0]`` over ``n`` rows (:meth:`RealizedSketch.grown`); ``seed`` and ``data``
        are not read.

        Parameters
        ----------
        n : int
        seed : int
        data : RowSource, optional

        Returns
        -------
        RealizedSketch
        """
        return self._realised().grown(n)

    def get_params(self, deep: bool = True) -> dict:
        return {"sketch": self.sketch}

    def to_config(self) -> dict:
        arrays, meta = self._realised().get_state()
        return {"name": self.name,
                "sketch": {"meta": meta, "arrays": {k: _encode(v) for k, v in arrays.items()}}}

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_config() == other.to_config()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._realised().n, self._realised().m))

    def __repr__(self) -> str:
        R = self._realised()
        return f"Fixed({type(R.spec).__name__}, n={R.n}, m={R.m})"
