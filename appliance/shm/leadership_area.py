"""Cluster mode's leadership area: per partition-table slot, this broker's role, the leader,
its epoch, the replicas and the ISR (layout: :data:`appliance.shm.layout.LEADERSHIP_SLOT`).

Written only by the cluster worker, under each record's seqlock; read by the network workers
(is this broker the leader?) and the disk workers (the ISR, for the high watermark and acks=all).
Indexed by the slot of the partition table, so a reader that found the partition there needs no
other lookup.
"""

from __future__ import annotations

import mmap
import struct
from typing import NamedTuple

import posix_ipc

from appliance.shm.layout import LEADERSHIP_SLOT, MAX_REPLICAS, Role
from appliance.shm.mapping import attach_mapped, create_mapped, release_mapped

__all__ = ["LeadershipArea", "Leadership"]

_Q = struct.Struct("=Q")
_i = struct.Struct("=i")
_L = LEADERSHIP_SLOT.offsets  # type: ignore[attr-defined]
_SIZE = LEADERSHIP_SLOT.size
# the cluster worker's part of a record (seq .. isr; the leader throttle rate, set apart, is the
# pad); the positions after it are the disk worker's
_HEAD = struct.Struct("=Qiiiii4x" + f"{MAX_REPLICAS}i" * 2)
_POS = struct.Struct(f"={MAX_REPLICAS}q")
_q = struct.Struct("=q")
assert _HEAD.size == _L["positions"] and _L["caught_up_ms"] == _L["positions"] + _POS.size
assert _L["leader_throttle_rate"] == 28


class Leadership(NamedTuple):
    role: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


NO_LEADERSHIP = Leadership(Role.NONE, -1, -1, (), ())


class LeadershipArea:
    def __init__(self, shm: posix_ipc.SharedMemory, buf: mmap.mmap) -> None:
        self._shm = shm
        self._buf = buf
        self.capacity = len(buf) // _SIZE

    @classmethod
    def create(cls, name: str, capacity: int) -> LeadershipArea:
        return cls(*create_mapped(name, capacity * _SIZE))

    @classmethod
    def attach(cls, name: str) -> LeadershipArea:
        return cls(*attach_mapped(name))

    def close(self) -> None:
        release_mapped(self._shm, self._buf)

    def role(self, slot: int) -> int:
        """The role alone: one aligned 4-byte load, no seqlock (the routing check)."""
        return _i.unpack_from(self._buf, slot * _SIZE + _L["role"])[0]

    def read(self, slot: int) -> Leadership:
        pos = slot * _SIZE
        buf = self._buf
        unpack = _HEAD.unpack_from
        while True:
            s1 = _Q.unpack_from(buf, pos)[0]
            if s1 & 1:
                continue
            v = unpack(buf, pos)
            if _Q.unpack_from(buf, pos)[0] == s1:
                role, leader, epoch, nrep, nisr = v[1:6]
                reps = v[6:6 + MAX_REPLICAS][:nrep]
                isr = v[6 + MAX_REPLICAS:6 + 2 * MAX_REPLICAS][:nisr]
                return Leadership(role, leader, epoch, tuple(reps), tuple(isr))

    def write(self, slot: int, role: int, leader: int, leader_epoch: int,
              replicas: tuple[int, ...] | list[int], isr: tuple[int, ...] | list[int]) -> None:
        """Cluster worker only. Replicas or ISR past MAX_REPLICAS are cut (logged by the caller)."""
        reps = list(replicas)[:MAX_REPLICAS]
        isr = list(isr)[:MAX_REPLICAS]
        pos = slot * _SIZE
        buf = self._buf
        seq = _Q.unpack_from(buf, pos)[0]
        throttle = self.leader_throttle(slot)  # _HEAD's pad covers it: put it back below
        _Q.pack_into(buf, pos, seq + 1)
        _HEAD.pack_into(
            buf, pos, seq + 1, role, leader, leader_epoch, len(reps), len(isr),
            *(reps + [-1] * (MAX_REPLICAS - len(reps))), *(isr + [-1] * (MAX_REPLICAS - len(isr))))
        _i.pack_into(buf, pos + _L["leader_throttle_rate"], throttle)
        _Q.pack_into(buf, pos, seq + 2)

    # -- the leader-side replication throttle (cluster worker writes, network workers read) ---
    def leader_throttle(self, slot: int) -> int:
        """Bytes/s for followers out of the ISR, 0 = not throttled: one aligned 4-byte load."""
        return _i.unpack_from(self._buf, slot * _SIZE + _L["leader_throttle_rate"])[0]

    def set_leader_throttle(self, slot: int, rate: int) -> None:
        _i.pack_into(self._buf, slot * _SIZE + _L["leader_throttle_rate"], max(0, min(rate, 2**31 - 1)))

    # -- follower positions (the leader's disk worker writes, the cluster worker reads) -----
    def set_position(self, slot: int, index: int, log_end_offset: int, caught_up_ms: int | None) -> None:
        pos = slot * _SIZE
        _q.pack_into(self._buf, pos + _L["positions"] + 8 * index, log_end_offset)
        if caught_up_ms is not None:
            _q.pack_into(self._buf, pos + _L["caught_up_ms"] + 8 * index, caught_up_ms)

    def positions(self, slot: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(log end offsets, caught-up times), indexed as the replicas."""
        pos = slot * _SIZE
        return (_POS.unpack_from(self._buf, pos + _L["positions"]),
                _POS.unpack_from(self._buf, pos + _L["caught_up_ms"]))

    # -- where the leader's epoch starts (its disk worker writes, network workers read) ------
    def set_epoch_start(self, slot: int, epoch: int, offset: int) -> None:
        pos = slot * _SIZE
        _q.pack_into(self._buf, pos + _L["epoch_start_offset"], offset)
        _i.pack_into(self._buf, pos + _L["epoch_start_epoch"], epoch)

    def epoch_start(self, slot: int, epoch: int) -> int:
        """The offset leader epoch ``epoch`` began at here, or -1 while its disk worker has not
        stamped it (the value there is an older leadership's)."""
        pos = slot * _SIZE
        if _i.unpack_from(self._buf, pos + _L["epoch_start_epoch"])[0] != epoch:
            return -1
        return _q.unpack_from(self._buf, pos + _L["epoch_start_offset"])[0]

    def reset_positions(self, slot: int, now_ms: int) -> None:
        """A new leadership: no follower seen yet, every one counted caught up now (Kafka
        starts lastCaughtUpTime at the leader change, so the ISR does not shrink at once)."""
        pos = slot * _SIZE
        _POS.pack_into(self._buf, pos + _L["positions"], *([-1] * MAX_REPLICAS))
        _POS.pack_into(self._buf, pos + _L["caught_up_ms"], *([now_ms] * MAX_REPLICAS))

    def clear(self, slot: int) -> None:
        self.write(slot, Role.NONE, -1, -1, (), ())
