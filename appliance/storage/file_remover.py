"""Remove deleted partitions' directories and expired ``.deleted`` segment files off a worker's
loop, on a thread of its own: one per log dir in the disk workers, one per network worker for
the segment files its readers close.

Why: dropping the last trace of a file (its last name, or the last descriptor of a file whose
names are gone) frees its page cache and blocks, and that takes time in the kernel in
proportion to the file's size. Done in the loop, deleting a big topic or expiring a segment by
retention stalled every other partition of the disk for that long: in
``perf/bench_delete_stall.py --runs 3`` (1 GB, synced) a one-record produce to another topic
waited 340-377 ms while the topic was deleted, 328-378 ms while retention removed its segments;
off the loop, 8-11 ms. The thread spends its time in unlink(2), which releases the GIL.

When a network worker's readers hold a deleted segment open, the cost is in their last
close(2) instead (314-348 ms, the same benchmark's "delete, read", on the network worker's
loop), so they hand their closes to a FileRemover of their own too (:meth:`FileRemover.call`).

Only names already taken out of the log are given here (``<topic>-<p>.<uuid>-delete`` dirs,
``.deleted`` files, the ``-future`` dir of a replica move that was aborted), so nothing the loop
still uses can go. A crash before the thread is done leaves them for the next start, which
removes them (:class:`~appliance.storage.log_dir.LogDir` and the segment loader look for the
first two, :func:`~appliance.broker.disk.replica_move.sweep_moves` for the third).
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial

__all__ = ["FileRemover", "remove_now"]

log = logging.getLogger(__name__)

_STOP = None  # the queue's end marker


def remove_now(paths: Iterable[str]) -> None:
    """Remove ``paths`` (files, or directories with everything in them) here and now; a missing
    one is fine, another error is logged (what is left goes at the next start)."""
    for path in paths:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("cannot remove %s: %s (the next start tries again)", path, e)


class FileRemover:
    """A thread removing what :meth:`remove` is given and running what :meth:`call` is, in
    order. Thread-safe."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending = 0  # jobs given and not yet done
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._closed = False

    def remove(self, paths: Iterable[str]) -> None:
        """Queue ``paths`` for removal (see :func:`remove_now`); returns at once. After
        :meth:`shutdown` they are removed here and now."""
        self.call(partial(remove_now, list(paths)))

    def call(self, job: Callable[[], object]) -> None:
        """Queue ``job`` (e.g. the close of a deleted segment's last descriptor); returns at
        once. An exception it raises is logged. After :meth:`shutdown` it runs here and now."""
        with self._lock:
            if not self._closed:
                self._pending += 1
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=f"remover {self._name}",
                                                    daemon=True)
                    self._thread.start()
                self._queue.put(job)
                return
        _run_logged(job)

    @property
    def pending(self) -> int:
        """Removals queued and not finished yet."""
        with self._lock:
            return self._pending

    def wait_idle(self, timeout: float) -> bool:
        """Wait until everything queued is removed; False if ``timeout`` seconds passed first."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def shutdown(self, timeout: float) -> bool:
        """Stop taking work and wait up to ``timeout`` seconds for what is queued; False if some
        is left (the next start removes it). Idempotent."""
        with self._lock:
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._queue.put(_STOP)
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            log.info("%s: %d removals left for the next start", self._name, self.pending)
            return False
        return True

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            try:
                _run_logged(job)
            finally:
                with self._idle:
                    self._pending -= 1
                    if not self._pending:
                        self._idle.notify_all()


def _run_logged(job: Callable[[], object]) -> None:
    try:
        job()
    except Exception:  # noqa: BLE001 - a thread's job: nothing above it to raise to
        log.exception("%r failed", job)
