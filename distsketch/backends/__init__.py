"""Compute backends: the array namespace block math runs in (numpy; CUDA through CuPy in
:mod:`distsketch.backends.cuda`, loaded on first use)."""

from .base import (Backend, NumpyBackend, register_backend, get_backend, backend_of, BACKENDS,
    LAZY_BACKENDS, BackendUnavailable, known_backend, dense, NUMPY)

__all__ = ["Backend", "NumpyBackend", "register_backend", "get_backend", "backend_of", "BACKENDS",
           "LAZY_BACKENDS", "BackendUnavailable", "known_backend", "dense", "NUMPY"]
