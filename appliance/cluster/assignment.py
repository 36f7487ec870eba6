"""Replica assignment for new topics and partitions, as Kafka's AdminUtils does it (rack unaware).

Leaders go round-robin over the sorted broker list from a random start broker; the followers
of each partition follow the leader at a shift that grows by one after every full round of
partitions, so the followers of one broker's leaders are spread over all other brokers rather
than always landing on its neighbour. With fixed ``start_index`` the result is deterministic
(Kafka's ``fixedStartIndex``), which the tests use to compare with Kafka's published examples.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

__all__ = ["InvalidReplicationFactor", "InvalidPartitions", "assign_replicas"]


class InvalidReplicationFactor(ValueError):
    """Replication factor < 1 or above the number of live brokers (INVALID_REPLICATION_FACTOR)."""


class InvalidPartitions(ValueError):
    """Partition count < 1 (INVALID_PARTITIONS)."""


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign_replicas(brokers: Iterable[int], num_partitions: int, replication_factor: int, *,
                    start_index: int | None = None, start_partition: int = 0,
                    rng: random.Random | None = None) -> dict[int, tuple[int, ...]]:
    """Partition id -> replica list (the first replica is the preferred leader).

    ``start_partition`` numbers the partitions from there (CreatePartitions adds to a topic).

    Raises:
        InvalidReplicationFactor, InvalidPartitions: as Kafka's AdminUtils.
    """
    ids = sorted(set(brokers))
    n = len(ids)
    if num_partitions <= 0:
        raise InvalidPartitions(f"number of partitions must be larger than 0, got {num_partitions}")
    if replication_factor <= 0:
        raise InvalidReplicationFactor(f"replication factor must be larger than 0, got {replication_factor}")
    if replication_factor > n:
        raise InvalidReplicationFactor(
            f"replication factor: {replication_factor} larger than available brokers: {n}")
    rng = rng or random.Random()
    start = start_index if start_index is not None else rng.randrange(n)
    shift = start_index if start_index is not None else rng.randrange(n)
    out: dict[int, tuple[int, ...]] = {}
    pid = max(0, start_partition)
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        replicas = [ids[first]]
        replicas += [ids[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        out[pid] = tuple(replicas)
        pid += 1
    return out
