"""Candidate input kernels for model selection: a list of kernels (names, config tables,
kernels), each crossed with a grid of widths ``gamma`` where it has one; shared by
``distsketch.model_selection.select`` (``[select] kernels``, ``gammas``) and the CV estimators
of ``distsketch.model_selection.krr_cv`` and ``distsketch.model_selection.sisokr_cv``
(``kernels=``, ``gammas=``)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..kernels.base import Kernel

__all__ = ["check_kernels", "has_gamma", "kernel_identity", "describe_kernel",
           "inside_standardization", "with_gamma"]


_KERNELS_FIX = ('a non-empty list of kernels: names ("linear"), tables ({name = "gaussian", '
                'gamma = 0.1}) or distsketch kernels')


def check_kernels(kernels: Sequence, *, gammas: Sequence[float] | None = None,
                  argument: str = "select") -> list:
    """The candidate input kernels of ``kernels`` (validated, before any work).

    Parameters
    ----------
    kernels : sequence
        Each entry a kernel name, a config mapping ``{"name": ..., **params}`` (TOML: a table or
        an inline table), a :class:`~distsketch.kernels.Kernel` or a callable (see
        :func:`~distsketch.kernels.check_kernel`).
    gammas : sequence of float, optional
        The γ grid; it applies to the entries with a ``gamma`` parameter.
    argument : str
        Prefix of the error messages.

    Returns
    -------
    list of Kernel
        One per entry, in order.

    Raises
    ------
    ValueError
        Naming ``argument.kernels[i]`` and the fix: not a list, an empty list, an unknown name
        or parameter, a config table that gives ``gamma`` while ``gammas`` is given (two grids
        for one parameter), ``gammas`` with no entry that has a ``gamma``, or two entries that
        are the same candidate.
    """
    from ..kernels.base import check_kernel

    key = f"{argument}.kernels"
    if isinstance(kernels, (str, bytes)) or not isinstance(kernels, (list, tuple)) or not kernels:
        raise ValueError(f"{key}: expected {_KERNELS_FIX}, got {kernels!r}")
    out = []
    for i, entry in enumerate(kernels):
        if isinstance(entry, Mapping) and "name" not in entry:
            raise ValueError(f"{key}[{i}].name: missing kernel name (e.g. {{name = \"linear\"}}"
                             f" or the bare name \"linear\")")
        try:
            k = check_kernel(entry, name=f"{key}[{i}]")
        except ValueError as exc:
            raise ValueError(str(exc).replace("kernel_from_config: ", "")) from None
        if gammas is not None and isinstance(entry, Mapping) and "gamma" in entry:
            raise ValueError(f"{key}[{i}].gamma: given here and by {argument}.gammas; drop it "
                             f"here (the gammas grid applies to this kernel) or drop "
                             f"{argument}.gammas and list one kernel per width")
        out.append(k)
    if gammas is not None and not any(has_gamma(k) for k in out):
        raise ValueError(f"{argument}.gammas: none of {key} has a width gamma "
                         f"({[describe_kernel(k, False) for k in out]}); drop {argument}.gammas or "
                         f"add a kernel with one (gaussian, laplacian, gaussian_tanimoto, "
                         f"polynomial)")
    seen: dict = {}
    for i, k in enumerate(out):
        for g in (gammas if gammas is not None and has_gamma(k) else [None]):
            cand = with_gamma(k, g) if g is not None else k
            ident = kernel_identity(cand)
            if ident in seen:
                raise ValueError(f"{key}[{i}]: the same candidate as {key}[{seen[ident]}] "
                                 f"({describe_kernel(cand, False)}); list each kernel once")
            seen[ident] = i
    return out


def has_gamma(kernel: Any) -> bool:
    """Whether a kernel (inside its standardisation) has a width parameter ``gamma``."""
    from ..kernels.standardized import Standardized

    if isinstance(kernel, Standardized):
        return has_gamma(kernel.kernel)
    params = kernel.get_params(deep=False) if hasattr(kernel, "get_params") else {}
    return "gamma" in params


def kernel_identity(kernel: Any) -> Hashable:
    """What makes two candidate kernels the same: their parameters' key, or the object."""
    try:
        key = kernel._key()
        hash(key)
        return key
    except TypeError:  # an unhashable parameter: by object
        return id(kernel)


def describe_kernel(kernel: Any, gamma_column: bool) -> str:
    """A short description of a candidate kernel: its name and parameters (``gamma`` left out
    when it has its own column; a standardisation wrapper left out)."""
    from ..kernels.base import kernel_description
    from ..kernels.standardized import Standardized

    if isinstance(kernel, Standardized):
        return describe_kernel(kernel.kernel, gamma_column)
    cfg = dict(kernel_description(kernel))
    name = cfg.pop("name", None) or cfg.pop("callable", "?")
    if gamma_column:
        cfg.pop("gamma", None)
    return name + (f"({', '.join(f'{k}={v!r}' for k, v in cfg.items())})" if cfg else "")


def inside_standardization(base: Kernel, kernel: Kernel) -> Kernel:
    """``kernel`` on the inputs of ``base``: wrapped in ``base``'s standardisation when ``base``
    has one and ``kernel`` has none."""
    from ..kernels.standardized import Standardized

    if isinstance(base, Standardized) and not isinstance(kernel, Standardized):
        return Standardized(kernel, base.mean, base.scale)
    return kernel


def with_gamma(kernel: Kernel, gamma: float) -> Kernel:
    """A copy of ``kernel`` with width ``gamma`` (through :class:`Standardized`)."""
    from ..kernels.standardized import Standardized

    if isinstance(kernel, Standardized):
        return Standardized(with_gamma(kernel.kernel, gamma), kernel.mean, kernel.scale)
    params = kernel.get_params(deep=False) if hasattr(kernel, "get_params") else {}
    if "gamma" not in params:
        raise ValueError(f"select.gammas: the input kernel {kernel!r} has no width gamma")
    return type(kernel)(**{**params, "gamma": float(gamma)})
