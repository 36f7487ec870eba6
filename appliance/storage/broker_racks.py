"""``broker-racks.json`` in the first log dir: the live brokers' ``broker.rack``, as the
controller's last UpdateMetadata said. The cluster worker writes it (atomically, only when it
changes); the network workers read it for follower fetching (KIP-392:
``broker/replica_selector.py``), re-reading it at most every RECHECK_S when its stamp moved, as
they read ``acls.json``."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping

__all__ = ["RACKS_FILE", "write_broker_racks", "BrokerRacks"]

RACKS_FILE = "broker-racks.json"
RECHECK_S = 0.2


def write_broker_racks(log_dir: str, racks: Mapping[int, str | None]) -> bool:
    """Write ``{broker id: rack}`` (brokers without a rack left out) unless it holds that
    already. True when written."""
    path = os.path.join(log_dir, RACKS_FILE)
    wanted = {str(b): r for b, r in sorted(racks.items()) if r}
    try:
        with open(path, encoding="utf-8") as f:
            if json.load(f) == wanted:
                return False
    except (OSError, ValueError):
        pass
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(wanted, f)
    os.replace(tmp, path)
    return True


class BrokerRacks:
    """A reader's view of the file: ``rack_of(broker id)``, None when it has none."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, RACKS_FILE)
        self._racks: dict[int, str] = {}
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0

    def rack_of(self, broker_id: int) -> str | None:
        now = time.monotonic()
        if now - self._checked >= RECHECK_S:
            self._checked = now
            self._reload()
        return self._racks.get(broker_id)

    def _reload(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._racks, self._stamp = {}, None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                self._racks = {int(b): str(r) for b, r in json.load(f).items()}
        except (OSError, ValueError):
            return  # mid-replace: next look
        self._stamp = stamp
