"""Solver routes (:mod:`.routes`): the direct solve, Falkon's PCG (:mod:`.pcg`) and the
Lipschitz-loss routes (:mod:`.lipschitz`)."""
