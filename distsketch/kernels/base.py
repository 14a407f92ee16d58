"""The kernel base class and registry: ``kernel(A, B) -> K`` with ``K[i, j] = k(a_i, b_j)``.

:class:`Kernel` validates its parameters where it is built, evaluates blocks
(``kernel(A, B)``, :meth:`Kernel.fill`, :meth:`Kernel.diag`) on float64 operands of the arrays'
compute backend, and registers each subclass that names itself in :data:`KERNELS`;
:class:`CallableKernel` wraps a user's function. :func:`check_kernel` resolves a user's kernel
argument (an object, a registry name, a config dict or a callable), :func:`kernel_from_config`
and :func:`kernel_description` read and write configs. The shipped kernels, their formulas and
numerics: :mod:`distsketch.kernels.families` and :mod:`distsketch.kernels.standardized`; sparse
operands: :mod:`distsketch.kernels.sparse`.

Block math: numpy and scipy only (no dask). Adding a kernel: docs/guide/extending.md, "How to add a
kernel".
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from .._base import ParamsMixin
from .._registry import Registry
from ..backends.base import Backend, backend_of
from .sparse import Block, cheaper_form

__all__ = [
    "KERNELS",
    "CallableKernel",
    "Kernel",
    "check_kernel",
    "kernel_description",
    "kernel_from_config",
]

#: Kernel classes by registry name (``kernel_from_config``, TOML ``name = ...``); a subclass
#: that defines ``_name`` registers itself.
KERNELS: Registry = Registry("kernel", attribute="_name")

_DIAG_ROWS = 256  # rows per sub-block when CallableKernel.diag evaluates the user function


def _as_block(X: Any, be: Backend) -> Block:
    """``X`` as a 2-D float64 array of backend ``be`` (CSR when sparse; no copy when already one)."""
    if sp.issparse(X):
        X = be.asarray(X.tocsr(), dtype=np.float64)
    else:
        X = be.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D block of rows, got an array of shape {X.shape}")
    return X


def _plain(value: numbers.Real) -> int | float:
    """A JSON-serialisable Python number (numpy scalars are not all serialisable)."""
    return int(value) if isinstance(value, numbers.Integral) else float(value)


# ---------------------------------------------------------------------------- kernels


class Kernel(ParamsMixin):
    """Base class: a picklable value object ``kernel(A, B) -> (n_a, n_b)`` float64 array.

    Unlike estimators, kernels validate their parameters in ``__init__`` (and in
    ``set_params``): they have no ``fit`` where validation could wait, and a bad kernel
    should fail where it is written, not inside a task on a worker.

    Subclasses set ``_name`` (their :data:`KERNELS` registry name: defining the class
    registers it) and implement ``_validate``, ``_compute(A, B, be)`` and ``_diag(A, be)`` on
    float64 blocks of backend ``be``, computing in ``be.xp``; ``_fill(A, B, out, scale, be)``
    where a cheaper path than ``out[...] = _compute(A, B, be)`` exists. See docs/guide/extending.md,
    "How to add a kernel".
    """

    _name: ClassVar[str]
    #: Whether ``k(x, x')`` depends on ``x − x'`` only (so :class:`Standardized` may drop the
    #: mean and keep sparse rows sparse: docs/design/engine.md, "Sparse inputs").
    _translation_invariant: ClassVar[bool] = False
    #: Whether sparse operands go through the density rule (:func:`cheaper_form`): the
    #: built-in kernels, whose products were measured; a user's callable gets its blocks as given.
    _densify_by_density: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        KERNELS.register_class(cls)  # a later class of the same name replaces it

    def __init__(self) -> None:
        """Parameter-free kernels take no arguments; subclasses with parameters override."""

    def __call__(self, A: Block, B: Block, *, out: Any = None) -> Any:
        """Kernel block ``K[i, j] = k(A[i], B[j])``.

        Parameters
        ----------
        A : ndarray or scipy.sparse matrix/array, shape (n_a, d)
        B : ndarray or scipy.sparse matrix/array, shape (n_b, d)
        out : ndarray, shape (n_a, n_b), float64 or float32, optional
            As for :meth:`fill`.

        Returns
        -------
        K : ndarray, shape (n_a, n_b)
            ``out``, or a new C-contiguous float64 array (of A's backend) owned by the caller.
        """
        if out is not None:
            return self.fill(A, B, out)
        be = backend_of(A)
        A, B = self._operands(A, B, be)
        return be.xp.ascontiguousarray(self._compute(A, B, be), dtype=np.float64)

    def _operands(self, A: Block, B: Block, be: Backend) -> tuple[Block, Block]:
        same = A is B
        A = _as_block(A, be)
        B = A if same else _as_block(B, be)
        if self._densify_by_density:
            A = cheaper_form(A, be)
            B = A if same else cheaper_form(B, be)
        if A.shape[1] != B.shape[1]:
            raise ValueError(
                f"{type(self).__name__}: A and B must have the same number of columns, "
                f"got {A.shape[1]} and {B.shape[1]}"
            )
        return A, B

    def fill(self, A: Block, B: Block, out: Any, scale: Any = None) -> Any:
        """Write the kernel block into ``out``: ``out[i, j] = k(A[i], B[j]) · scale[j]``.

        How the streaming pass evaluates its blocks (``distsketch.linalg.blocks.gram_dot``):
        straight into the block it stores, in the compute backend of ``out``.

        Parameters
        ----------
        A : array or scipy.sparse matrix/array, shape (n_a, d)
        B : array or scipy.sparse matrix/array, shape (n_b, d)
        out : array of a registered backend, shape (n_a, n_b), float64 or float32
            Written in place (any strides) and returned. Into float32 the values are rounded
            to float32; the exponential kernels then evaluate ``exp`` in float32 (module
            docstring, "Backends").
        scale : array of shape (n_b,), optional
            Column factors applied after the kernel values (and rounded again): the sketched
            pass's placed columns, ``k(A, X_J) diag(R_mix)``.

        Returns
        -------
        out
        """
        be = backend_of(out)
        if not isinstance(out, be.array_types) or out.dtype not in (np.float64, np.float32):
            raise ValueError(f"{type(self).__name__}: out must be a float64 or float32 "
                             f"ndarray, got {getattr(out, 'dtype', type(out).__name__)}")
        A, B = self._operands(A, B, be)
        if out.shape != (A.shape[0], B.shape[0]):
            raise ValueError(f"{type(self).__name__}: out has shape {out.shape}, expected "
                             f"(len(A), len(B)) = {(A.shape[0], B.shape[0])}")
        self._fill(A, B, out, scale, be)
        return out

    def fill_rows(self, n_b: int, d: int) -> int | None:
        """Rows of the independent tiles of ``fill`` on dense host (numpy) blocks, or None.

        A kernel whose ``fill`` computes a dense ``A`` (n_a × d) against ``n_b`` rows in
        row tiles ``[t·h, min((t+1)·h, n_a))``, each from its own rows alone, returns ``h``:
        then ``fill`` of the rows ``A[r:e]`` (``r`` a multiple of ``h``, ``e − r ≤ h``, ``e``
        a multiple of ``h`` or ``n_a``) makes the same calls as tile ``r/h`` of ``fill(A)``
        and writes bitwise the same values. (A product's rounding may depend on its shape,
        so rows computed in another grouping need not agree.) None (the default): no such
        tiling is promised.

        Parameters
        ----------
        n_b : int
            Rows of ``B`` (columns of the block).
        d : int
            Columns of ``A`` and ``B``.

        Returns
        -------
        int or None
        """
        return None

    def diag(self, A: Block) -> Any:
        """``k(A[i], A[i])`` for every row, without forming the Gram matrix.

        Parameters
        ----------
        A : ndarray or scipy.sparse matrix/array, shape (n_a, d)

        Returns
        -------
        ndarray, shape (n_a,), float64
        """
        be = backend_of(A)
        return self._diag(_as_block(A, be), be)

    def to_config(self) -> dict[str, Any]:
        """JSON-serialisable ``{"name": <registry name>, **params}``; inverse of
        :func:`kernel_from_config`.

        Returns
        -------
        dict
            The registry name under ``"name"`` and the constructor parameters.
        """
        params = {k: _plain(v) for k, v in self.get_params(deep=False).items()}
        return {"name": self._name, **params}

    def set_params(self, **params: Any) -> Kernel:
        """Set parameters and validate them again.

        Parameters
        ----------
        **params
            Constructor parameters by name.

        Returns
        -------
        Kernel
            ``self``.
        """
        super().set_params(**params)
        self._validate()
        return self

    def _key(self) -> tuple:
        return (type(self), tuple(self.get_params(deep=False).items()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Kernel):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid parameter (none by default)."""

    def _compute(self, A: Block, B: Block, be: Backend):
        raise NotImplementedError

    def _fill(self, A: Block, B: Block, out, scale, be: Backend) -> None:
        """:meth:`fill` on checked operands; kernels with a cheaper path override this."""
        out[...] = self._compute(A, B, be)
        if scale is not None:
            out *= scale

    def _diag(self, A: Block, be: Backend):
        return be.xp.ones(A.shape[0])


class CallableKernel(Kernel):
    """Wraps a user function ``func(A, B) -> (n_a, n_b)`` array as a :class:`Kernel`.

    ``func`` receives float64 blocks (ndarray or CSR) and may return a dense array, a
    sparse matrix (densified) or anything ``np.asarray`` accepts; the shape is checked on
    every call. It cannot be written to a config file (``to_config`` raises ``TypeError``)
    and is pickled by reference, so it must be importable on the workers.

    Parameters
    ----------
    func : callable
    """

    _densify_by_density = False

    def __init__(self, func: Callable[[Block, Block], Any]) -> None:
        self.func = func
        self._validate()

    def _validate(self) -> None:
        if not callable(self.func):
            raise ValueError(f"CallableKernel: func must be callable, got {self.func!r}")

    def _label(self) -> str:
        return f"CallableKernel({getattr(self.func, '__name__', repr(self.func))})"

    def to_config(self) -> dict[str, Any]:
        """Always raises: a user callable cannot be written to a config file."""
        raise TypeError(
            f"{self._label()}: a user callable cannot be written to a config file; "
            f"use a registered kernel {sorted(KERNELS)} to save a config"
        )

    def _compute(self, A: Block, B: Block, be: Backend):
        out = self.func(A, B)
        if sp.issparse(out) or be.issparse(out):
            out = out.toarray()
        out = be.xp.array(out, dtype=np.float64)  # a copy: the caller may modify the block
        expected = (A.shape[0], B.shape[0])
        if out.shape != expected:
            raise ValueError(
                f"{self._label()}: func returned an array of shape {out.shape}, "
                f"expected (len(A), len(B)) = {expected}"
            )
        return out

    def _diag(self, A: Block, be: Backend):
        xp = be.xp
        out = xp.empty(A.shape[0])
        for start in range(0, A.shape[0], _DIAG_ROWS):
            rows = A[start : start + _DIAG_ROWS]
            out[start : start + _DIAG_ROWS] = xp.diag(self(rows, rows))
        return out


# ---------------------------------------------------------------------------- registry


def kernel_from_config(cfg: Mapping[str, Any]) -> Kernel:
    """Build a kernel from ``{"name": <registry name>, **params}``; inverse of ``to_config``.

    Parameters
    ----------
    cfg : mapping
        ``name`` is a key of :data:`KERNELS`; the other keys are constructor parameters
        (missing ones take their defaults).

    Returns
    -------
    Kernel

    Raises
    ------
    ValueError
        If the name is missing or unknown, or a parameter is unknown or invalid.

    Examples
    --------
    >>> from distsketch.kernels import kernel_from_config
    >>> kernel_from_config({"name": "gaussian", "gamma": 0.1})
    Gaussian(gamma=0.1)
    """
    params = dict(cfg)
    name = params.pop("name", None)
    if name not in KERNELS:
        raise ValueError(
            f"kernel_from_config: unknown kernel name {name!r}; valid names are {sorted(KERNELS)}"
        )
    cls = KERNELS[name]
    valid = cls._param_names()
    for key in params:
        if key not in valid:
            raise ValueError(
                f"kernel_from_config: unknown parameter {key!r} for kernel {name!r}; "
                f"valid parameters are {valid}"
            )
    return cls(**params)


def kernel_description(kernel: Kernel) -> dict[str, Any]:
    """JSON description of a kernel, for records and keys: :meth:`Kernel.to_config`, or
    ``{"callable": "module.qualname"}`` for a user function (never used to rebuild it).

    Parameters
    ----------
    kernel : Kernel
        A registered kernel or a :class:`CallableKernel`.

    Returns
    -------
    dict
        JSON-serialisable.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.kernels import CallableKernel, Gaussian, kernel_description
    >>> kernel_description(Gaussian(gamma=0.5))
    {'name': 'gaussian', 'gamma': 0.5}
    >>> kernel_description(CallableKernel(np.dot))
    {'callable': 'numpy.dot'}
    """
    try:
        return kernel.to_config()
    except TypeError:
        f = getattr(kernel, "func", kernel)
        return {"callable": f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"}


def check_kernel(kernel: Any, *, name: str) -> Kernel:
    """Resolve a user's kernel argument to a :class:`Kernel`.

    Parameters
    ----------
    kernel : Kernel, str, mapping or callable
        A kernel object (returned as is), a :data:`KERNELS` name (default parameters), a
        config dict (see :func:`kernel_from_config`), or a callable
        ``kernel(A, B) -> (len(A), len(B))`` array (wrapped in :class:`CallableKernel`).
    name : str
        The argument's name, which starts every error message.

    Returns
    -------
    Kernel

    Raises
    ------
    ValueError
        For an unknown name, a bad config or anything else.

    Examples
    --------
    >>> from distsketch.kernels import check_kernel
    >>> check_kernel("laplacian", name="kernel")
    Laplacian()
    >>> check_kernel({"name": "polynomial", "degree": 2}, name="kernel")
    Polynomial(degree=2)
    """
    choices = (
        f"use one of {sorted(KERNELS)}, a config dict, a distsketch.kernels object, "
        "or a callable kernel(A, B) -> (len(A), len(B)) array"
    )
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, str):
        if kernel not in KERNELS:
            raise ValueError(f"{name}: unknown kernel {kernel!r}; {choices}")
        return KERNELS[kernel]()
    if isinstance(kernel, Mapping):
        try:
            return kernel_from_config(kernel)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    if callable(kernel) and not isinstance(kernel, type):
        return CallableKernel(kernel)
    raise ValueError(
        f"{name}: cannot use {kernel!r} (type {type(kernel).__name__}) as a kernel; {choices}"
    )
