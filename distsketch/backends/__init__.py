"""Compute backends: the array namespace block math runs in (numpy; CUDA through CuPy in
:mod:`distsketch.backends.cuda`, loaded on first use)."""

from .base import (
    BACKENDS,
    LAZY_BACKENDS,
    NUMPY,
    Backend,
    BackendUnavailable,
    NumpyBackend,
    backend_of,
    dense,
    get_backend,
    known_backend,
    register_backend,
)

__all__ = ["Backend", "NumpyBackend", "register_backend", "get_backend", "backend_of", "BACKENDS",
           "LAZY_BACKENDS", "BackendUnavailable", "known_backend", "dense", "NUMPY"]
