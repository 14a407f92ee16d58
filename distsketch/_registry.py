"""Registries: how saved models, configs and the command line find a part by name without
importing or naming it. Every kind of interchangeable part — estimators (:data:`MODELS`),
kernels, sketches, losses (each class registers itself when it is defined, by its ``name``) and
compute backends (instances, :func:`distsketch.backends.register_backend`) — is kept in a
:class:`Registry`."""

from __future__ import annotations

__all__ = ["Registry", "MODELS", "register_model", "get_model", "load_builtin_models"]


class Registry(dict):
    """Parts of one kind by name (a ``dict``): a later part of the same name replaces the
    earlier one.

    Parameters
    ----------
    kind : str
        What the parts are (``"kernel"``, ``"sketch"``, ``"loss"``…), for messages.
    attribute : str, optional
        The class attribute holding a part's name, for :meth:`register_class`.
    """

    def __init__(self, kind: str, *, attribute: str = "name"):
        super().__init__()
        self.kind = kind
        self.attribute = attribute

    def register_class(self, cls: type) -> type:
        """Add ``cls`` under the name its class body sets (its own ``attribute``, not an
        inherited one: an intermediate base without a name of its own is not a part).
        Called from the base class's ``__init_subclass__``."""
        name = cls.__dict__.get(self.attribute)
        if name and not cls.__name__.startswith("_"):
            self[name] = cls
        return cls

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {sorted(self)})"

#: Modules whose estimator classes register themselves when imported.
BUILTIN = ("models.sisokr", "models.krr", "model_selection.krr_cv", "model_selection.sisokr_cv",
           "models.regressors", "models.transformers")

#: Estimator classes by class name.
MODELS: Registry = Registry("model")


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
