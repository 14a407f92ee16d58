"""Small pieces shared across the package: parameter handling of estimators, kernels and
sketch specifications (:class:`ParamsMixin`), the ridge-parameter validator used by estimators
and configs (:func:`check_lam`), and :class:`MissingExtra`.

The contract is scikit-learn's, without importing scikit-learn: ``__init__`` stores its
arguments verbatim under the same names, ``get_params`` reads them back from the
signature, ``set_params`` writes them, and ``__repr__`` shows the non-default ones.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

__all__ = ["ParamsMixin", "MissingExtra", "check_lam", "nearest_lams"]


class MissingExtra(ImportError):
    """An optional dependency is missing; the message says which extra installs it."""


class ParamsMixin:
    """``get_params`` / ``set_params`` / ``__repr__`` derived from the ``__init__`` signature."""

    @classmethod
    def _param_names(cls) -> list[str]:
        init = cls.__init__
        if init is object.__init__:
            return []
        sig = inspect.signature(init)
        names = []
        for p in sig.parameters.values():
            if p.name == "self":
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{cls.__name__}.__init__ must not take *args or **kwargs")
            names.append(p.name)
        return sorted(names)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor arguments as a dict.

        Parameters
        ----------
        deep : bool, default True
            Also list the parameters of arguments that have ``get_params`` themselves (a
            kernel or sketch argument), under ``name__param`` keys.

        Returns
        -------
        dict
            Parameter name → value, read from the attributes of the ``__init__`` arguments.
        """
        out: dict[str, Any] = {}
        for name in self._param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                for k, v in value.get_params(deep=True).items():
                    out[f"{name}__{k}"] = v
            out[name] = value
        return out

    def set_params(self, **params: Any) -> Self:
        """Set constructor arguments.

        Parameters
        ----------
        **params
            New values by parameter name; ``name__param`` sets ``param`` of the argument
            ``name`` (a kernel's ``gamma``: ``kernel__gamma``).

        Returns
        -------
        self
            This object, changed in place.

        Raises
        ------
        ValueError
            A name that is not a constructor parameter.
        """
        valid = self._param_names()
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, sep, sub = key.partition("__")
            if name not in valid:
                raise ValueError(
                    f"{type(self).__name__}.set_params: unknown parameter {name!r}; "
                    f"valid parameters are {valid}"
                )
            if sep:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
        for name, sub_params in nested.items():
            getattr(self, name).set_params(**sub_params)
        return self

    def __repr__(self) -> str:
        init = type(self).__init__
        params = [] if init is object.__init__ else inspect.signature(init).parameters.values()
        parts = []
        for p in params:
            if p.name == "self":
                continue
            value = getattr(self, p.name, p.default)
            if p.default is not inspect.Parameter.empty and _same(value, p.default):
                continue
            if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is inspect.Parameter.empty:
                parts.append(repr(value))
            else:
                parts.append(f"{p.name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or a == b)
    except Exception:  # arrays and other objects without a scalar ==
        return a is b


def nearest_lams(fitted, lams) -> list[int]:
    """For each λ of ``lams``, the position of the nearest fitted λ (on a log scale): where a
    re-solve starts each λ of a path from the fitted solutions.

    Parameters
    ----------
    fitted : sequence of float > 0
    lams : sequence of float > 0

    Returns
    -------
    list of int
    """
    logs = np.log(np.asarray(fitted, dtype=np.float64))
    return [int(np.argmin(np.abs(logs - np.log(float(lam))))) for lam in lams]


def check_lam(lam: Any, *, argument: str = "lam") -> tuple[float, ...]:
    """λ (a positive float) or a sequence of them; returns the path as a tuple."""
    values = lam if isinstance(lam, (Sequence, np.ndarray)) and not isinstance(lam, str) else [lam]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v) or v <= 0:
            raise ValueError(f"{argument}: the ridge parameter must be a positive number "
                             f"(finite; or a sequence of them), got {lam!r}")
        out.append(float(v))
    if not out:
        raise ValueError(f"{argument}: empty sequence; give at least one positive value")
    return tuple(out)
