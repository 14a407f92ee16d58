"""The ``distsketch`` command line (:mod:`.commands`), its TOML configuration (:mod:`.config`) and
the demo job (:mod:`.demo`)."""

from .commands import main

__all__ = ["main"]
