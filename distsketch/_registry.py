"""The registry of estimator classes: how saved models, configs and the command line find a
model by name without importing or naming it. A class registers itself by subclassing
:class:`distsketch.estimator.SketchedEstimator`."""

from __future__ import annotations

__all__ = ["MODELS", "register_model", "get_model", "load_builtin_models"]

#: Modules whose estimator classes register themselves when imported.
BUILTIN = ("models", "cv", "regressors", "transformers")

#: Estimator classes by class name.
MODELS: dict[str, type] = {}


def register_model(cls: type) -> type:
    """Add ``cls`` under its class name (a later class of the same name replaces it)."""
    MODELS[cls.__name__] = cls
    return cls


def load_builtin_models() -> dict[str, type]:
    """Import the package's estimator modules (``import distsketch`` is lazy, so they may not
    be loaded yet); returns :data:`MODELS`."""
    import importlib

    for mod in BUILTIN:
        importlib.import_module(f"{__package__}.{mod}")
    return MODELS


def get_model(name: str, *, what: str = "model") -> type:
    """The registered class called ``name``; ``ValueError`` naming the known ones otherwise."""
    if name not in MODELS:
        load_builtin_models()
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"{what}: unknown model type {name!r}; registered models are "
                         f"{sorted(MODELS)}") from None
