"""The exactly-once sink's commit decisions: one small file per decided micro-batch, kept in
the query's checkpoint directory (``<checkpointLocation>/appliance-eos/``).

A decision lists the open transactions of a micro-batch (transactional id, producer id,
epoch). Writing it is the batch's commit point: the driver writes it (atomically: a temporary
file, fsync, rename, fsync of the directory) before it ends any transaction, so a driver killed
while committing leaves either no decision (every transaction of the batch is then aborted and
the replayed batch written again) or a decision the next driver completes (the same EndTxn
commits again; the replayed batch writes nothing). Once every transaction committed the file
gets a ``.done`` twin, so a later start does not try to complete a batch whose transactional
ids have since moved on to newer epochs.

Only the driver reads and writes these files (in Spark's planning and commit processes).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

__all__ = ["Decision", "DecisionLog", "SUBDIR"]

SUBDIR = "appliance-eos"
_KEEP = 20  # decisions kept: the last is all a restart needs; a few more for inspection


@dataclass(frozen=True)
class Decision:
    batch_id: int
    txns: tuple[tuple[str, int, int], ...]  # (transactional id, producer id, epoch)
    done: bool = False


class DecisionLog:
    def __init__(self, checkpoint: str) -> None:
        self.dir = os.path.join(checkpoint, SUBDIR)

    def _path(self, batch_id: int) -> str:
        return os.path.join(self.dir, f"{batch_id:020d}.json")

    def latest(self) -> Decision | None:
        """The decision of the highest batch id, or None before the first commit."""
        try:
            names = [n for n in os.listdir(self.dir) if n.endswith(".json")]
        except FileNotFoundError:
            return None
        if not names:
            return None
        name = max(names)
        with open(os.path.join(self.dir, name)) as f:
            doc = json.load(f)
        return Decision(int(doc["batch"]), tuple((t, int(p), int(e)) for t, p, e in doc["txns"]),
                        os.path.exists(os.path.join(self.dir, name + ".done")))

    def write(self, decision: Decision) -> None:
        os.makedirs(self.dir, exist_ok=True)
        path = self._path(decision.batch_id)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"batch": decision.batch_id, "txns": [list(t) for t in decision.txns]}, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        self._sync_dir()

    def mark_done(self, batch_id: int) -> None:
        with open(self._path(batch_id) + ".done", "w"):
            pass
        self._sync_dir()
        self._trim(batch_id)

    def _sync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _trim(self, batch_id: int) -> None:
        for name in os.listdir(self.dir):
            stem = name.split(".", 1)[0]
            if stem.isdigit() and int(stem) <= batch_id - _KEEP:
                os.unlink(os.path.join(self.dir, name))
