"""Zero-copy conversion of caller buffers to the 1-D uint8 arrays the kernels take.

These run on every kernel call, so the common cases (bytes, bytearray, uint8 arrays) are
checked first with exact type tests: the wrappers' Python overhead is most of the cost of a
CRC over a small batch.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["as_u8", "byte_range", "u8_range"]

_U8 = np.dtype(np.uint8)
_frombuffer = np.frombuffer
_ndarray = np.ndarray


def as_u8(buf: object) -> np.ndarray:
    """View ``buf`` as a 1-D uint8 array without copying.

    Accepts bytes, bytearray, memoryview, mmap.mmap and C-contiguous numpy arrays (any dtype:
    their bytes are viewed). Raises TypeError for other objects and ValueError for
    non-contiguous buffers (a copy would be needed, which we refuse to do silently).
    """
    t = type(buf)
    if t is bytes or t is bytearray:
        return _frombuffer(buf, _U8)
    if t is _ndarray and buf.dtype is _U8 and buf.ndim == 1 and buf.flags.c_contiguous:
        return buf
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise ValueError("buffer must be C-contiguous")
        return buf.reshape(-1).view(np.uint8)
    if isinstance(buf, (bytes, bytearray, memoryview, mmap.mmap)):
        if isinstance(buf, memoryview) and not buf.c_contiguous:
            raise ValueError("memoryview must be C-contiguous")
        return _frombuffer(buf, _U8)
    raise TypeError(
        f"expected bytes, bytearray, memoryview, mmap or numpy array, got {type(buf).__name__}"
    )


def byte_range(length: int, start: int, end: int) -> tuple[int, int]:
    """Resolve ``start``/``end`` (``end == -1`` meaning ``length``) and check them.

    Raises ValueError unless ``0 <= start <= end <= length``.
    """
    if end == -1:
        end = length
    if not (0 <= start <= end <= length):
        raise ValueError(f"bad byte range start={start} end={end} for a buffer of {length} bytes")
    return start, end


def u8_range(buf: object, start: int, end: int) -> tuple[np.ndarray, int, int]:
    """:func:`as_u8` and :func:`byte_range` in one call (same errors)."""
    a = as_u8(buf)
    n = a.shape[0]
    if end == -1:
        end = n
    if not (0 <= start <= end <= n):
        raise ValueError(f"bad byte range start={start} end={end} for a buffer of {n} bytes")
    return a, start, end
