"""The ``distsketch`` command line (:mod:`.main`), its TOML configuration (:mod:`.config`) and
the demo job (:mod:`.demo`)."""

from .main import (main)

__all__ = ["main"]
