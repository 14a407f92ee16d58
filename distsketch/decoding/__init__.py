"""Decoding: top-k pre-images over candidate sets (:mod:`.preimage`), a fitted model's decoding
routes (:mod:`.routes`) and candidate stores on disk (:mod:`.candidates`)."""

from .candidates import CandidateStore

__all__ = ["CandidateStore"]
