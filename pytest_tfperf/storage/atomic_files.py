"""Atomic replacement of files and an advisory lock on the directory that holds them.

Baselines, results and history are shared by every process of a run
(pytest-xdist workers, parallel CI jobs on one checkout). A reader must never
see half a file, and two writers doing read-modify-write on the same file must
not lose each other's changes, so:

- a file is written to a temporary file in the same directory, flushed to disk,
  then moved over the target with ``os.replace`` (atomic on POSIX and Windows);
- read-modify-write runs under ``DirectoryLock``: an exclusive ``flock`` on
  the directory itself, so no lock file ends up in the user's git tree.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

# Where flock on a directory is refused (some network file systems), this file
# is locked instead.
FALLBACK_LOCK_NAME = ".tfperf.lock"

_umask: int | None = None


def _file_mode() -> int:
    # mkstemp creates files readable by the owner only; a baseline must get the
    # mode any other file the user creates would get. Reading the umask means
    # setting it, so do it once.
    global _umask
    if _umask is None:
        _umask = os.umask(0o022)
        os.umask(_umask)
    return 0o666 & ~_umask


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) so that readers see the old or the new file, never a mix."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        mode = path.stat().st_mode & 0o777 if path.exists() else _file_mode()
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable across a power cut; not possible on
    # every platform, and losing it only loses durability, not atomicity.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class DirectoryLock:
    """An exclusive advisory lock on a directory (which must exist), held between ``acquire`` and ``release``.

    Also a context manager. Without ``fcntl`` (Windows) no lock is taken:
    files stay whole thanks to ``atomic_write_text``, but two processes
    updating the same file at the same moment may lose one update.
    """

    __slots__ = ("directory", "_fd")

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Block until the lock is held; raises ``OSError`` if the directory cannot be opened."""
        if fcntl is None or self._fd is not None:
            return
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            fd = self._lock_file()
        self._fd = fd

    def _lock_file(self) -> int:
        assert fcntl is not None
        fd = os.open(self.directory / FALLBACK_LOCK_NAME, os.O_RDWR | os.O_CREAT, _file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def release(self) -> None:
        if self._fd is not None:
            # Closing the descriptor releases the lock.
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DirectoryLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def why_unwritable(path: str | Path, *, directory: bool = False, in_place: bool = False) -> str | None:
    """Why a file at ``path`` (with ``directory``: files in the directory ``path``) cannot be written, or None.

    Found by trying, in the nearest folder that exists: a temporary file is
    created there and removed at once. Mode bits cannot tell (root passes every
    ``os.access`` check, yet cannot create a file in ``/proc``), and a session
    must learn this before it measures for an hour, not when it writes. Missing
    parent folders are not created here: the writers create them. ``in_place``:
    the file is opened and written where it is (not replaced), so an existing
    one must itself be writable.
    """
    path = Path(path)
    if not directory and path.is_dir():
        return "it is a directory"
    folder = path if directory else path.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        fd, name = tempfile.mkstemp(dir=existing, prefix=".tfperf-write-check.", suffix=".tmp")
    except OSError as exc:
        return f"creating a file in {existing} failed: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(name)
    if in_place and not directory and path.exists():
        try:
            with open(path, "a", encoding="utf-8"):  # appending nothing leaves the file as it was
                pass
        except OSError as exc:
            return f"opening it failed: {exc.strerror or exc}"
    return None
