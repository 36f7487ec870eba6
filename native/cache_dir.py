"""Where numba keeps the compiled kernels: a directory named by a digest of every kernel source.

numba keys a cached kernel by the stamp (mtime and size) of its own source file only. A kernel
that calls one from another file compiles the callee into itself (the append kernel inlines the
record walk), so after the callee's file changed, the caller's cached code still ran the old
one: measured on a checkout after a merge, the disk worker ran the previous record walk (49 ns
of CPU per 100-byte record over IPC, against 41 with an empty cache). Naming the directory by a
digest of all of ``native/*.py`` makes any change of any kernel a fresh cache; unchanged sources
keep sharing one. Old directories are left for the operator (each is a few MB).

:func:`use_versioned_cache` must run before any kernel module is imported (numba picks a
kernel's cache directory when its decorator runs): ``native/__init__.py`` calls it first.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from numba.core import config
from numba.misc.appdirs import AppDirs

__all__ = ["source_digest", "use_versioned_cache"]

_HERE = Path(__file__).resolve().parent
_PREFIX = "kernels-"
_applied: str | None = None  # the path set by the first call


def source_digest(folder: Path = _HERE) -> str:
    """16 hex digits of SHA-256 over the names and contents of ``folder``'s ``*.py`` files."""
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.py")):
        h.update(f.name.encode())
        h.update(b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _writable(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return True
    except OSError:
        return False


def use_versioned_cache() -> str:
    """Point numba's cache at ``<NUMBA_CACHE_DIR or native/__pycache__>/kernels-<digest>``, or,
    when that cannot be written (a read-only install), at ``kernels-<digest>`` in numba's own
    per-user cache directory (numba's own fall-backs are not versioned). Returns the path; a
    second call changes nothing."""
    global _applied
    if _applied is None:
        name = f"{_PREFIX}{source_digest()}"
        path = str(Path(config.CACHE_DIR or _HERE / "__pycache__") / name)
        if not _writable(path):
            path = str(Path(AppDirs(appname="numba", appauthor=False).user_cache_dir) / name)
        config.CACHE_DIR = path
        _applied = path
    return _applied
