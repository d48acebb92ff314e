"""A directory made read-only for the tests, the way a state volume is: no
entry can be created, renamed or removed in it and no file in it written,
whoever the process is.

Root passes every permission check, so a mode of 0555 proves nothing as
root.  ``read_only`` therefore uses, in order: a read-only bind mount of the
directory over itself (what a read-only volume is; mount(2) through libc,
since the unit tier starts no process), else the immutable attribute on the
directory and its files (``chattr +i``, for root without CAP_SYS_ADMIN),
else, for anyone else, modes 0555 and 0444.  It says which it used.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

__all__ = ["read_only"]

_MS_RDONLY: Final = 1
_MS_REMOUNT: Final = 32
_MS_BIND: Final = 4096
_FS_IOC_GETFLAGS: Final = 0x80086601
_FS_IOC_SETFLAGS: Final = 0x40086602
_FS_IMMUTABLE_FL: Final = 0x10


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)  # the libc this interpreter runs on (find_library starts ldconfig)


def _mount_read_only(directory: Path) -> bool:
    """Bind-mount ``directory`` read-only over itself; return False if this process may not mount."""
    libc, target = _libc(), os.fsencode(directory)
    if libc.mount(target, target, None, _MS_BIND, None) != 0:
        return False
    if libc.mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None) != 0:
        _unmount(directory)
        return False
    return True


def _unmount(directory: Path) -> None:
    if _libc().umount2(os.fsencode(directory), 0) != 0:
        raise OSError(ctypes.get_errno(), f"umount {directory}")


def _set_immutable(path: Path, *, on: bool) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
        wanted = flags[0] | _FS_IMMUTABLE_FL if on else flags[0] & ~_FS_IMMUTABLE_FL
        fcntl.ioctl(fd, _FS_IOC_SETFLAGS, array.array("i", [wanted]))
    finally:
        os.close(fd)


@contextlib.contextmanager
def _immutable(directory: Path) -> Iterator[None]:
    paths = [*(p for p in directory.iterdir() if p.is_file()), directory]
    done: list[Path] = []
    try:
        for path in paths:
            _set_immutable(path, on=True)
            done.append(path)
        yield
    finally:
        for path in done:
            _set_immutable(path, on=False)


@contextlib.contextmanager
def _modes(directory: Path) -> Iterator[None]:
    files = [p for p in directory.iterdir() if p.is_file()]
    for path in files:
        path.chmod(0o444)
    directory.chmod(0o555)
    try:
        yield
    finally:
        directory.chmod(0o755)
        for path in files:
            path.chmod(0o644)


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[str]:
    """Make ``directory`` read-only while the block runs; yield how ("bind mount", "immutable" or "modes")."""
    if os.geteuid() != 0:
        with _modes(directory):
            yield "modes"
    elif _mount_read_only(directory):
        try:
            yield "bind mount"
        finally:
            _unmount(directory)
    else:
        with _immutable(directory):
            yield "immutable"
