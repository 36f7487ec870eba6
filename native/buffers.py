"""Zero-copy conversion of caller buffers to the 1-D uint8 arrays the kernels take."""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["as_u8", "byte_range"]


def as_u8(buf: object) -> np.ndarray:
    """View ``buf`` as a 1-D uint8 array without copying.

    Accepts bytes, bytearray, memoryview, mmap.mmap and C-contiguous numpy arrays (any dtype:
    their bytes are viewed). Raises TypeError for other objects and ValueError for
    non-contiguous buffers (a copy would be needed, which we refuse to do silently).
    """
    if isinstance(buf, np.ndarray):
        if buf.dtype == np.uint8 and buf.ndim == 1:
            if buf.strides[0] != 1 and buf.size > 1:
                raise ValueError("buffer must be contiguous")
            return buf
        if not buf.flags.c_contiguous:
            raise ValueError("buffer must be C-contiguous")
        return buf.reshape(-1).view(np.uint8)
    if isinstance(buf, (bytes, bytearray, memoryview, mmap.mmap)):
        if isinstance(buf, memoryview) and not buf.contiguous:
            raise ValueError("memoryview must be contiguous")
        return np.frombuffer(buf, dtype=np.uint8)
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
    return int(start), int(end)
