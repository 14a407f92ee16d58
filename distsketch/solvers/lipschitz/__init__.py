"""The Lipschitz-loss machines' solvers: the shared problem (:mod:`.problem`), Newton
(:mod:`.newton`), ADMM (:mod:`.admm`) and their routes (:mod:`.routes`)."""
