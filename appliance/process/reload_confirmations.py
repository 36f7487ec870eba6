"""SIGHUP reload confirmations: each disk worker tells the supervisor it has re-read its configs.

systemd's reload protocol wants READY=1 after RELOADING=1 only once the reload is done, and a
disk worker re-reads its files in its own loop, later than the signal. So the supervisor makes
one datagram socketpair before forking (the disk workers inherit the write end) and waits for
one confirmation per disk worker it told, or :data:`RELOAD_DEADLINE_S`.

A confirmation is one datagram of text: ``"<disk index> <incarnation>"``, then one line per
file the worker kept as it was (the reason it could not use it). The incarnation tells an
answer to this reload from a late one of a worker's earlier life.

Writers: the disk workers (:func:`encode`). Reader: the supervisor
(:class:`ReloadConfirmations`), on its loop's thread only.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Sequence

__all__ = ["ReloadConfirmations", "encode", "decode", "RELOAD_DEADLINE_S", "MAX_DATAGRAM"]

log = logging.getLogger("appliance.supervisor")

# a disk worker confirms a reload within one loop round (<= 0.1 s) plus the re-read; one that is
# stopped or wedged must not hold READY=1 back for ever (the heartbeat check deals with it)
RELOAD_DEADLINE_S = 30.0
# well under what one AF_UNIX datagram may hold (the socket's send buffer); the errors are only logged
MAX_DATAGRAM = 60000


def encode(index: int, incarnation: int, errors: Sequence[str] = ()) -> bytes:
    """A disk worker's confirmation: its index and incarnation, then the files it kept."""
    return "\n".join([f"{index} {incarnation}", *errors]).encode()[:MAX_DATAGRAM]


def decode(data: bytes) -> tuple[int, int, list[str]] | None:
    """(disk index, incarnation, errors), or None if ``data`` is not a confirmation."""
    head, *errors = data.decode(errors="replace").split("\n")
    try:
        index, incarnation = (int(x) for x in head.split())
    except ValueError:
        return None
    return index, incarnation, [e for e in errors if e]


class ReloadConfirmations:
    """The supervisor's side: the socketpair and which disk workers a reload still waits for.

    ``log_dirs`` only names the workers in the log.
    """

    def __init__(self, log_dirs: Sequence[str]) -> None:
        self.log_dirs = log_dirs
        self.replies, self.reply_to = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.replies.setblocking(False)
        self.waiting: dict[int, int] = {}  # disk index -> incarnation told to reload
        self.deadline = 0.0
        self.active = False  # a reload is in progress (READY=1 not yet sent)

    def begin(self, told: dict[int, int]) -> None:
        """A reload was sent; wait for these disk workers (index -> incarnation)."""
        self.drain()  # late answers to an earlier reload count for nothing
        self.waiting = dict(told)
        self.active = True  # over at the next progress() even when nobody was told
        self.deadline = time.monotonic() + RELOAD_DEADLINE_S

    def drain(self) -> list[tuple[int, int, list[str]]]:
        """Every confirmation waiting on the socket: (disk index, incarnation, errors)."""
        out = []
        while True:
            try:
                data = self.replies.recv(65536)
            except (BlockingIOError, InterruptedError):
                return out
            got = decode(data)
            if got is None:
                log.warning("reload: unreadable confirmation %r", data[:200])
                continue
            out.append(got)

    def progress(self, running: dict[int, int]) -> bool:
        """Count the confirmations; True once the reload is over (the caller sends READY=1):
        none is missing, or the deadline passed (naming the ones that did not answer).
        ``running`` is each live disk worker's index -> incarnation: one gone since it was told
        is not waited for (its successor reads the files at start)."""
        replies = self.drain()
        if not self.active:
            return False
        for index, incarnation, errors in replies:
            if self.waiting.get(index) != incarnation:
                continue
            del self.waiting[index]
            for error in errors:
                log.error("SIGHUP: disk worker %d [%s] kept its configs: %s", index,
                          self.log_dirs[index], error)
        for index in [i for i, inc in self.waiting.items() if running.get(i) != inc]:
            del self.waiting[index]
        if self.waiting and time.monotonic() < self.deadline:
            return False
        if self.waiting:
            log.error("SIGHUP: no reload confirmation from disk workers %s in %.0f s; READY=1 "
                      "anyway", ", ".join(str(i) for i in sorted(self.waiting)), RELOAD_DEADLINE_S)
            self.waiting = {}
        self.active = False
        log.info("SIGHUP: reload done")
        return True

    def close_in_child(self, disk_worker: bool) -> None:
        """After the fork: only a disk worker keeps the write end; nobody else reads."""
        self.replies.close()
        if not disk_worker:
            self.reply_to.close()

    def close(self) -> None:
        self.replies.close()
        self.reply_to.close()
