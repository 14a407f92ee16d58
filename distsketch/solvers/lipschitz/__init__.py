"""The Lipschitz-loss machines' solvers: the shared problem (:mod:`.problem`), Newton
(:mod:`.newton`: its directions, :mod:`.direction`, and KKT polishes, :mod:`.polish`), ADMM
(:mod:`.admm`) and their routes (:mod:`.routes`)."""
