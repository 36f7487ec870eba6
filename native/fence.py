"""A full memory fence callable from Python, for handshakes through shared memory.

The IPC rings' "waiting" flags (appliance/shm/ring.py) follow the store-then-load pattern that
x86 alone does not order: the sleeper stores its flag then loads the ring's position, the waker
stores the position then loads the flag. Without a fence between each pair, both loads can see
the old values and the sleeper misses its wake-up. One call costs the numba dispatch (~0.2 us).
"""

from __future__ import annotations

from numba import njit

from native.intrinsics import full_fence

__all__ = ["memory_fence"]


@njit(cache=True)
def memory_fence() -> None:
    full_fence()
