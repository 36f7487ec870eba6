"""Reading one partition's records back for a campaign's checks (tests/faults/kill_campaign.py,
tests/network/cluster.py): confluent-kafka, from an offset to at least an end."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, TopicPartition

__all__ = ["read_partition"]


def read_partition(c: Consumer, topic: str, p: int, start: int, end: int,
                   on_error: Callable[[KafkaError], bool] | None = None,
                   timeout: float = 60.0) -> list[tuple[int, bytes]]:
    """(offset, value) of ``topic``-``p`` from ``start`` until the partition's end (reached at an
    end-of-partition event past ``end``) or ``timeout``. A message error other than the end of
    the partition goes to ``on_error`` (True: noted, go on) and otherwise raises AssertionError."""
    c.assign([TopicPartition(topic, p, start)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        eof = False
        for m in c.consume(5000, 0.5):
            err = m.error()
            if err is None:
                out.append((m.offset(), m.value()))
            elif err.code() == KafkaError._PARTITION_EOF:
                eof = True
            elif on_error is None or not on_error(err):
                raise AssertionError(f"reading p{p}: {err}")
        if eof and (out[-1][0] + 1 if out else start) >= end:
            break
    c.unassign()
    return out
