"""Parameter handling shared by estimators, kernels and sketch specifications.

The contract is scikit-learn's, without importing scikit-learn: ``__init__`` stores its
arguments verbatim under the same names, ``get_params`` reads them back from the
signature, ``set_params`` writes them, and ``__repr__`` shows the non-default ones.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["ParamsMixin", "MissingExtra"]


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
        """Constructor arguments as a dict (``deep`` includes nested ``name__param`` keys)."""
        out: dict[str, Any] = {}
        for name in self._param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                for k, v in value.get_params(deep=True).items():
                    out[f"{name}__{k}"] = v
            out[name] = value
        return out

    def set_params(self, **params: Any):
        """Set constructor arguments (``name__param`` reaches into nested objects); returns self."""
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
        sig = inspect.signature(type(self).__init__)
        parts = []
        for p in sig.parameters.values():
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
