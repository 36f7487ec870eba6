"""Garbage-collector policy of the broker's processes.

A full (gen 2) collection walks every tracked object: in a worker, the ~110,000 objects of its
imports (numba, the protocol schemas) and of its opened logs. Measured: 50 ms per full collection
on the test machine, and under 10,000 produce requests/s one came every few seconds, each one a
50-130 ms stall of every request in flight (the p99 latency). Objects that exist once a process
has started live as long as it does, so they go to the permanent generation: collections then
walk only what was made since. Done before each fork as well, so the children share those pages
copy-on-write instead of dirtying them with collector bookkeeping."""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_objects", "freeze_before_fork"]


def freeze_startup_objects() -> None:
    """Collect once, then move every surviving object out of the collector's sight."""
    gc.collect()
    gc.freeze()


def freeze_before_fork() -> None:
    """The parent's objects become permanent in the child too (no collection: forks are on
    the start-up path and a worker's restart)."""
    gc.freeze()
