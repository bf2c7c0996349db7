"""Files written whole: a reader sees the old file or the new one, never half."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path


def atomic_write(
    path: Path,
    data: bytes,
    *,
    exclusive: bool = False,
    follow_link: bool = True,
    durable: bool = True,
) -> None:
    """Write ``data`` to ``path`` through a temporary file in its directory and a rename.

    A symlink at ``path`` is written through (the file it points at is replaced), unless
    ``follow_link`` is False: then it is refused (``OSError`` ELOOP) and nothing is written,
    for a file someone else may have swapped for a link (a story file). ``durable``: synced
    to the disk (a power loss keeps it); without, it outlives the process alone (a kill -9),
    for a write that is repeated often and made durable at the next step anyway."""
    if not follow_link and os.path.islink(path):
        raise OSError(errno.ELOOP, "is a symlink; hero does not write through it", str(path))
    target = Path(os.path.realpath(path))  # a symlinked file: write where it points
    try:
        mode: int | None = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
    if exclusive and mode is not None:
        raise FileExistsError(errno.EEXIST, "file exists", str(path))
    fd, tmp = _temp_file(target)
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if exclusive:
            os.link(tmp, target)  # fails, atomically, if the file appeared meanwhile
            os.unlink(tmp)
        else:
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(target.parent)


def _temp_file(target: Path) -> tuple[int, str]:
    """A new dot-file beside ``target``, created with the umask's permissions."""
    while True:
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # not every filesystem can sync a directory; the rename is done either way
    finally:
        os.close(fd)
