"""What a store refuses: its errors, a second writer, and any path out of its directory.

:class:`StoreError` (and :class:`DataChanged`: other training data than a stored pass's) names
the store and what to do. :class:`StoreLock` lets one fit at a time write a local store;
:func:`refuse_links` refuses a store directory holding a symbolic link (or anything neither a
file nor a directory) before anything is read or written. What a store guarantees:
docs/design/store.md.
"""

from __future__ import annotations

import errno
import logging
import os

__all__ = ["StoreError", "DataChanged", "StoreLock", "refuse_links"]

logger = logging.getLogger(__name__)


class StoreError(ValueError):
    """A store that cannot be used as asked: damaged, held by another fit, or not ours.
    The message names the store and what to do."""


class DataChanged(StoreError):
    """The training data differ from those a stored pass was computed from."""


class StoreLock:
    """An advisory lock on a local store: ``fcntl.flock`` on the store's directory, held by
    one fit from opening to its saved model (the holder is named in the store's metadata).
    The directory itself is locked, so the store holds no file zarr does not know."""

    def __init__(self, directory: str):
        self.directory = directory
        self._fd: int | None = None

    def acquire(self, *, location: str, holder) -> None:
        """Take the lock or raise :class:`StoreError`; ``holder()`` names the current holder."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock
            logger.warning("store %s: no file locking on this platform", location)
            return
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(self.directory, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StoreError(
                    f"store {location!r} is being written by another fit ({holder()}); wait "
                    f"for it to finish, or fit into another store path") from None
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def refuse_links(directory: str | os.PathLike, *, location: str, what: str = "store") -> None:
    """Refuse a store directory holding a symbolic link (or any entry that is neither a plain
    file nor a directory: a FIFO, a device), anywhere below its root.

    Every path a store reads or writes must resolve inside the store's root: a link could send
    a resumed fit's block writes, an overwrite's new arrays or a load's reads into a user's
    files or another store. The walk follows no link; it is called before anything is read
    or written. The root itself may be a link (the user named it).

    Raises
    ------
    StoreError
        Naming the first offending entry (in sorted order, relative to the root) and the fix.
    """
    root = os.fspath(directory)
    if not os.path.isdir(root):
        return
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            entries = sorted(os.scandir(os.path.join(root, rel)), key=lambda e: e.name)
        except FileNotFoundError:
            if rel:  # removed since it was listed (a writer's reset): it holds no link
                continue
            raise StoreError(f"{what} {location!r}: its directory was removed while it was "
                             f"being opened; open it again") from None
        except OSError as exc:
            raise StoreError(f"{what} {location!r}: {os.path.join(rel, '') or 'its root'} "
                             f"cannot be listed ({exc}); check its permissions or use a new "
                             f"path") from None
        subdirs = []
        for entry in entries:
            name = os.path.join(rel, entry.name)
            if entry.is_symlink():
                try:
                    target = os.readlink(entry.path)
                except OSError:
                    target = "?"
                raise StoreError(
                    f"{what} {location!r} contains a symbolic link {name!r} (to {target!r}); "
                    f"distsketch never reads or writes outside a store's directory: remove the "
                    f"link (copy what it points to into the store if it belongs there) or use "
                    f"a new path")
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(name)
            elif not entry.is_file(follow_symlinks=False):
                raise StoreError(
                    f"{what} {location!r} contains {name!r}, which is neither a file nor a "
                    f"directory; remove it or use a new path")
        pending.extend(reversed(subdirs))
