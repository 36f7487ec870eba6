"""Waiting, in tests, for work a broker does on a thread after it has answered."""

from __future__ import annotations

import time
from collections.abc import Callable


def left_after(listing: Callable[[], list[str]], timeout: float = 10) -> list[str]:
    """What ``listing()`` still returns after up to ``timeout`` seconds of polling for it to be
    empty (e.g. directories a log dir's remover thread has yet to remove)."""
    deadline = time.monotonic() + timeout
    while (left := listing()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
