"""How a coordinator hosted in a disk worker (groups: ``coordinator_host.py``, transactions:
``txn_host.py``) writes a record batch to its partition of the coordinators' topic, and Kafka's
mapping of a failed write to the coordinator errors a client retries on."""

from __future__ import annotations

from typing import Any

from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.requests import NotHere
from appliance.errors import ErrorCode, KafkaError, error_for_code

__all__ = ["coordinator_append"]


def coordinator_append(parts: Partitions, area: Any, replication: Any, epochs: dict[int, int],
                       topic: str, partition: int, batch: bytes) -> tuple[int, int] | None:
    """Append ``batch`` to ``topic``-``partition``. Standalone (``area`` None): appended and
    published, durable as any standalone append; None. Cluster mode: a leader append in the
    epoch the coordinator loaded the partition in (``epochs``); (slot, the offset the high
    watermark must pass for the write to be replicated). Raises NOT_COORDINATOR (not here, not
    led here, leadership moved, its disk failed) or COORDINATOR_NOT_AVAILABLE (any other failed
    write, e.g. the ISR below min.insync.replicas: retriable, the client looks again)."""
    slot = parts.slot_of.get((topic, partition))
    if slot is None or slot not in parts.partitions:
        raise error_for_code(ErrorCode.NOT_COORDINATOR)(f"{topic}-{partition} is not here")
    if area is None:
        p = parts.partitions[slot]
        p.log.append(batch)
        p.advance_alone()
        parts.publish(slot, p.log)
        return None
    if area.read(slot).leader_epoch != epochs.get(partition):
        raise error_for_code(ErrorCode.NOT_COORDINATOR)(f"{topic}-{partition}: leadership moved")
    try:
        return slot, replication.leader_append(slot, batch)
    except NotHere:
        raise error_for_code(ErrorCode.NOT_COORDINATOR)(f"{topic}-{partition} is not led here") from None
    except KafkaError as e:
        if e.code == ErrorCode.KAFKA_STORAGE_ERROR:
            raise error_for_code(ErrorCode.NOT_COORDINATOR)(str(e)) from None
        raise error_for_code(ErrorCode.COORDINATOR_NOT_AVAILABLE)(str(e)) from None
