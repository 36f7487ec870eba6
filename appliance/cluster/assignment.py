"""Replica assignment for new topics and partitions, as Kafka's AdminUtils does it, rack aware
when the brokers have ``broker.rack`` (KIP-36).

Rack unaware: leaders go round-robin over the sorted broker list from a random start broker;
the followers of each partition follow the leader at a shift that grows by one after every full
round of partitions, so the followers of one broker's leaders are spread over all other brokers
rather than always landing on its neighbour.

Rack aware: the same walk over a list that alternates racks (rack a's first broker, rack b's
first, ..., then each rack's second), and a follower is skipped while its rack already holds a
replica and another rack holds none, or while it holds one itself and another broker holds none:
each partition's replicas span min(RF, racks) racks, and the leaders and followers are spread as
evenly as the racks allow.

Some brokers with a rack and some without: Kafka's rule, by mode: ``ENFORCED`` (topic creation,
partition addition, reassignment plans) refuses with "Not all brokers have rack information";
``SAFE`` (auto-created topics) and ``DISABLED`` (``--disable-rack-aware``) assign rack unaware.

With a fixed ``start_index`` the result is deterministic (Kafka's ``fixedStartIndex``), which the
tests use to compare with Kafka's published examples.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

__all__ = ["InvalidReplicationFactor", "InvalidPartitions", "RackInformationMissing", "assign_replicas",
           "ENFORCED", "SAFE", "DISABLED", "rack_alternated"]

ENFORCED, SAFE, DISABLED = "enforced", "safe", "disabled"  # Kafka's RackAwareMode


class InvalidReplicationFactor(ValueError):
    """Replication factor < 1 or above the number of live brokers (INVALID_REPLICATION_FACTOR)."""


class InvalidPartitions(ValueError):
    """Partition count < 1 (INVALID_PARTITIONS)."""


class RackInformationMissing(ValueError):
    """Some brokers have a rack and some do not, and the mode is ENFORCED."""


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """The brokers, racks taken in turn (sorted rack names; each rack's brokers by id)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    names = sorted(by_rack)
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        members = by_rack[names[i % len(names)]]
        depth = i // len(names)
        if depth < len(members):
            out.append(members[depth])
        i += 1
    return out


def assign_replicas(brokers: Iterable[int], num_partitions: int, replication_factor: int, *,
                    start_index: int | None = None, start_partition: int = 0,
                    rng: random.Random | None = None, racks: Mapping[int, str | None] | None = None,
                    mode: str = ENFORCED) -> dict[int, tuple[int, ...]]:
    """Partition id -> replica list (the first replica is the preferred leader).

    ``start_partition`` numbers the partitions from there (CreatePartitions adds to a topic).
    ``racks``: each broker's ``broker.rack`` (None or missing: none).

    Raises:
        InvalidReplicationFactor, InvalidPartitions, RackInformationMissing: as Kafka's AdminUtils.
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
    known = {b: r for b, r in (racks or {}).items() if b in ids and r}
    if known and mode != DISABLED and len(known) < n:
        if mode == ENFORCED:
            missing = sorted(set(ids) - set(known))
            raise RackInformationMissing(
                "Not all brokers have rack information for replica rack aware assignment "
                f"(no broker.rack on {missing}); give every broker one, or ask for an assignment "
                "that ignores racks (--disable-rack-aware)")
        known = {}  # SAFE: as if none had a rack
    if mode == DISABLED:
        known = {}
    rng = rng or random.Random()
    arranged = rack_alternated(known) if known else ids
    start = start_index if start_index is not None else rng.randrange(n)
    shift = start_index if start_index is not None else rng.randrange(n)
    num_racks = len(set(known.values()))
    out: dict[int, tuple[int, ...]] = {}
    pid = max(0, start_partition)
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        if not known:
            replicas = [arranged[first]]
            replicas += [arranged[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            replicas = _rack_aware_followers(arranged, known, first, shift * num_racks, num_racks,
                                             replication_factor)
        out[pid] = tuple(replicas)
        pid += 1
    return out


def _rack_aware_followers(arranged: list[int], racks: Mapping[int, str], first: int, shift: int,
                          num_racks: int, replication_factor: int) -> list[int]:
    n = len(arranged)
    leader = arranged[first]
    replicas = [leader]
    racks_used = {racks[leader]}
    used = {leader}
    k = 0
    for _ in range(replication_factor - 1):
        while True:
            b = arranged[_replica_index(first, shift, k, n)]
            k += 1
            rack = racks[b]
            # skip a broker whose rack has a replica while some rack has none, or which has one
            # itself while some broker has none
            if (rack not in racks_used or len(racks_used) == num_racks) and (b not in used or len(used) == n):
                replicas.append(b)
                racks_used.add(rack)
                used.add(b)
                break
    return replicas
