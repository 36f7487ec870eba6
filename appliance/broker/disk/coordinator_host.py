"""The group coordinator inside a disk worker: it coordinates every group whose
``__consumer_offsets`` partition this disk holds, appends its records there, and answers the
group requests the network workers route to it through the rings."""

from __future__ import annotations

from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.ring_intake import RingIntake
from appliance.config import BrokerConfig
from appliance.coordinator.coordinator import GroupCoordinator
from appliance.coordinator.routing import OFFSETS_TOPIC
from appliance.errors import ErrorCode, error_for_code
from appliance.protocol.registry import API_BY_KEY
from appliance.records.batch import decode_records
from appliance.shm.layout import COMPLETION, GROUP_HEADER
from appliance.shm.partition_index import PartitionIndex

__all__ = ["CoordinatorHost"]

_COMP = COMPLETION.struct  # type: ignore[attr-defined]
_GROUP = GROUP_HEADER.struct  # type: ignore[attr-defined]


class CoordinatorHost:
    def __init__(self, config: BrokerConfig, partitions: Partitions, rings: RingIntake) -> None:
        self.partitions = partitions
        self.rings = rings  # where held answers go
        self._index = PartitionIndex(partitions.table)
        self.coordinator = GroupCoordinator(
            config, int(config["offsets.topic.num.partitions"]),
            append=self._append_offsets, respond=self._respond_later,
            partition_exists=lambda t, p: self._index.lookup(t, p) is not None)
        partitions.created_hooks.append(self._partition_created)

    def load(self) -> None:
        """Read the groups' state back from the offsets partitions this disk holds."""
        if self.partitions.log_dir is None:  # an offline log dir: no groups load from it
            return
        for (topic, partition), plog in self.partitions.log_dir.partitions.items():
            if topic == OFFSETS_TOPIC:
                self.coordinator.load(partition, _records(plog))

    def poll(self) -> int:
        """Run due timers (session expiry, rebalance deadlines); when the next one is due (ms)."""
        return self.coordinator.poll()

    def _partition_created(self, topic: str, partition: int) -> None:
        if topic == OFFSETS_TOPIC:
            self.coordinator.load(partition, ())

    def _append_offsets(self, partition: int, batch: bytes) -> None:
        parts = self.partitions
        slot = parts.slot_of.get((OFFSETS_TOPIC, partition))
        if slot is None:
            raise error_for_code(ErrorCode.NOT_COORDINATOR)(f"{OFFSETS_TOPIC}-{partition} is not here")
        plog = parts.logs[slot]
        plog.append(batch)
        plog.high_watermark = plog.log_end_offset
        parts.publish(slot, plog)

    def _respond_later(self, token: tuple, body: dict) -> None:
        """Answer a group request the coordinator held (a JoinGroup waiting for a rebalance)."""
        n, request_id, api_key, api_version = token
        data = API_BY_KEY[api_key].encode_response(api_version, body)
        self.rings.complete(n, _COMP.pack(request_id, -1, -1, -1, -1, 0) + data)
        self.rings.ring_bells((n,))

    def handle_group(self, n: int | None, request_id: int, slot: int, body: memoryview) -> tuple | None:
        """A group request (the handler of MsgType.GROUP): its encoded answer rides after the
        completion; None when the coordinator holds it (answered by _respond_later)."""
        api_key, api_version, cid_len, host_len = _GROUP.unpack_from(body, 0)
        pos = GROUP_HEADER.size
        client_id = bytes(body[pos:pos + cid_len]).decode(errors="replace")
        pos += cid_len
        client_host = bytes(body[pos:pos + host_len]).decode(errors="replace")
        pos += host_len
        api = API_BY_KEY[api_key]
        request = api.decode_request(api_version, bytes(body[pos:]))
        token = (n, request_id, api_key, api_version)
        answer = self.coordinator.handle(api_key, api_version, request, token, client_id, client_host)
        if answer is None:
            return None
        return -1, -1, -1, api.encode_response(api_version, answer)


def _records(plog):
    """Every record of a partition, oldest first."""
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read_bytes(offset, 4 << 20, max_offset=plog.log_end_offset)
        if not data:
            break
        batch = decode_records(data)
        yield from batch
        offset = max(offset + 1, batch[-1].offset + 1) if batch else plog.log_end_offset
