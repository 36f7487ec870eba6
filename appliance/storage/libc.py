"""The libc calls Python's os module lacks (sync_file_range, syncfs, fallocate with flags),
bound once, with their argument types: one place that loads libc for the storage layer."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

__all__ = ["function", "last_errno"]

try:
    _LIBC: Any = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
except OSError:  # no C library to load: every function below is missing
    _LIBC = None


def function(name: str, argtypes: list[Any], restype: Any = ctypes.c_int) -> Any | None:
    """libc's ``name`` taking ``argtypes``, or None where this libc has no such function. A
    call returns what the C function returns; on failure, :func:`last_errno` says why."""
    fn = getattr(_LIBC, name, None) if _LIBC is not None else None
    if fn is None:
        return None
    fn.argtypes = argtypes
    fn.restype = restype
    return fn


def last_errno() -> int:
    """errno as the last call through :func:`function` in this thread left it."""
    return ctypes.get_errno()
