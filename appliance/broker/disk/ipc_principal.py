"""Who a local IPC producer is, by the kernel's word rather than the producer's: the principal
its produces are authorized as (``User:<login name>``, Kafka's form; ``User:<uid>`` for a uid
with no name).

A producer claims a channel with an exclusive flock on the channel's shared-memory object
(``shm/ipc_directory.py``), so the kernel's lock table (``/proc/locks``) names the process that
holds it, by the object's device and inode; that process's effective uid is in
``/proc/<pid>/status``. The pid the producer writes into its slot is not trusted. Looked up once
per claim of a channel (the claim number changes with every new producer)."""

from __future__ import annotations

import os
import pwd

__all__ = ["flock_holder", "effective_uid", "user_principal", "ChannelPrincipals"]


def flock_holder(fd: int, locks_path: str = "/proc/locks") -> int | None:
    """The pid holding a FLOCK on the file open as ``fd``, or None when none does."""
    st = os.fstat(fd)
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open(locks_path, encoding="ascii") as f:
            for line in f:
                # "1: FLOCK  ADVISORY  WRITE 4711 00:19:1234 0 EOF" (a blocked waiter: "1: -> FLOCK ...")
                parts = line.split()
                if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want:
                    return int(parts[4])
    except (OSError, ValueError):
        return None
    return None


def effective_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[2])  # real, effective, saved, fs
    except (OSError, ValueError, IndexError):
        return None
    return None


def user_principal(uid: int) -> str:
    try:
        return f"User:{pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"User:{uid}"


class ChannelPrincipals:
    """Each channel's producer's principal, cached per claim (None: it could not be told)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[int, str | None]] = {}  # channel -> (claim, principal)

    def of(self, k: int, claim: int, fd: int) -> str | None:
        hit = self._known.get(k)
        if hit is not None and hit[0] == claim:
            return hit[1]
        pid = flock_holder(fd)
        uid = effective_uid(pid) if pid is not None else None
        principal = user_principal(uid) if uid is not None else None
        self._known[k] = (claim, principal)
        return principal
