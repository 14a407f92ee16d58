"""Solver routes (:mod:`.routes`): the direct solve (:mod:`.direct`, its reduced rank
:mod:`.reduced_rank`), Falkon's PCG (:mod:`.pcg`: :mod:`.preconditioner`,
:mod:`.conjugate_gradient`) and the Lipschitz-loss routes (:mod:`.lipschitz`)."""
