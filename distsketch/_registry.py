"""The registry of estimator classes: how saved models, configs and the command line find a
model by name without importing or naming it. A class registers itself by subclassing
:class:`distsketch.estimator.SketchedEstimator`."""

from __future__ import annotations

__all__ = ["MODELS", "register_model", "get_model"]

#: Estimator classes by class name.
MODELS: dict[str, type] = {}


def register_model(cls: type) -> type:
    """Add ``cls`` under its class name (a later class of the same name replaces it)."""
    MODELS[cls.__name__] = cls
    return cls


def get_model(name: str, *, what: str = "model") -> type:
    """The registered class called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"{what}: unknown model type {name!r}; registered models are "
                         f"{sorted(MODELS)}") from None
