"""What the broker at ``kafka.bootstrap.servers`` says: topics, partitions, readable ranges.

With ``kafka.bootstrap.servers`` set, the driver plans from the cluster (Metadata for every
partition's leader, replicas and ISR, then ListOffsets to each leader for the log start and
the high watermark) instead of the log dirs, so executors that do not sit on a broker's host
read the same ranges, and no range reaches past the high watermark. Leadership moving while
the driver plans (NOT_LEADER_OR_FOLLOWER, a dead leader, no leader yet) makes it plan again
from fresh metadata. When ``log.dirs`` is given too, every log dir must belong to a broker of
that cluster (:func:`spark.replicas.dir_owner`; a live broker or a replica Metadata names), and
a partition with an in-sync replica among them keeps its directory as ``path``.

Thread-safety: a :class:`BrokerView` is used by one thread (a driver call); it owns its client.
"""

from __future__ import annotations

import logging
import os
import time

from appliance.client.cluster import Cluster, check_error
from appliance.client.connection import KafkaConnectionError
from appliance.client.errors import LeaderNotAvailableError
from appliance.client.fetching import EARLIEST, LATEST, list_offsets_body
from appliance.errors import (
    InvalidConfigError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from spark.catalog import Catalog, PartitionState, _scan_log_dir, _shm_name_from
from spark.replicas import table_broker_id

__all__ = ["BrokerView", "broker_catalog", "local_broker_id", "BrokerUnreachableError"]

log = logging.getLogger(__name__)

LIST_OFFSETS = 2
METADATA = 3
#: connection attempts to a bootstrap server are retried for at most this long
CONNECT_TIMEOUT_MS = 10000
_PLAN_AGAIN = (UnknownTopicOrPartitionError, NotLeaderOrFollowerError, LeaderNotAvailableError,
               KafkaConnectionError)


class BrokerUnreachableError(KafkaConnectionError):
    """No server of ``kafka.bootstrap.servers`` answered within the bounded retries."""


class BrokerView:
    """A short-lived client of the broker at ``bootstrap`` for planning (closed by :meth:`close`)."""

    def __init__(self, bootstrap: str, timeout_ms: int = 30000) -> None:
        self.bootstrap = bootstrap
        self.broker_ids: tuple[int, ...] = ()  # as of the last metadata()
        self.cluster = Cluster(bootstrap, client_id="appliance-spark", request_timeout_ms=timeout_ms,
                               connect_timeout_ms=min(timeout_ms, CONNECT_TIMEOUT_MS),
                               allow_auto_create=False)

    def metadata(self):
        """The Metadata answer for every topic. Raises BrokerUnreachableError naming the address."""
        try:
            md = self.cluster.refresh(None, auto_create=False)
        except KafkaConnectionError as e:
            raise BrokerUnreachableError(
                f"kafka.bootstrap.servers={self.bootstrap}: no broker answered ({e})") from None
        self.broker_ids = tuple(sorted(b.node_id for b in md.brokers))
        return md

    def list_offsets(self, wanted: list[tuple[str, int, int]],
                     read_committed: bool = False) -> dict[tuple[str, int], int]:
        """(topic, partition, timestamp or -1/-2) -> offset (-1: no record that recent);
        ``read_committed``: latest (-1) is the last stable offset."""
        by_leader: dict[int, list[tuple[str, int, int]]] = {}
        for t, p, ts in wanted:
            by_leader.setdefault(self.cluster.leader_of(t, p), []).append((t, p, ts))
        out: dict[tuple[str, int], int] = {}
        for node, items in by_leader.items():
            resp = self.cluster.node_connection(node).request(LIST_OFFSETS,
                                                              list_offsets_body(items, int(read_committed)))
            for t in resp.topics:
                for p in t.partitions:
                    check_error(p.error_code, f"offsets of {t.name}-{p.partition_index}")
                    out[(t.name, p.partition_index)] = p.offset
        return out

    def offset_for_timestamp(self, topic: str, partition: int, ts: int) -> int | None:
        off = self.list_offsets([(topic, partition, ts)]).get((topic, partition), -1)
        return None if off < 0 else off

    def close(self) -> None:
        self.cluster.close()


def local_broker_id(log_dirs: tuple[str, ...], shm_name: str | None) -> tuple[int, str] | None:
    """(broker id, shm name) of the broker whose shared partition table the log dirs name, or
    None when it cannot be attached here (broker stopped, or another host)."""
    name = shm_name or _shm_name_from(log_dirs)
    if not name:
        return None
    broker = table_broker_id(name)
    return None if broker is None else (broker, name)


def _known_ids(md) -> set[int]:
    """Live brokers and every replica Metadata names (a dead broker's id stays a replica)."""
    ids = {b.node_id for b in md.brokers}
    for t in md.topics:
        for p in t.partitions or ():
            ids.update(p.replica_nodes or ())
    return ids


def _check_dirs_belong(md, bootstrap: str, log_dirs: tuple[str, ...],
                       shm_name: str | None) -> None:
    """Refuse log dirs owned by a broker the cluster at ``bootstrap`` does not know."""
    from spark.replicas import dir_owner

    known = _known_ids(md)
    owners: dict[str, int] = {}
    for d in log_dirs:
        owner = dir_owner(d) if os.path.isdir(d) else None
        if owner is not None:
            owners[d] = owner
    if not owners:
        # A broker-less host (no shared table, no meta.properties): trust kafka.bootstrap.servers.
        local = local_broker_id(log_dirs, shm_name)
        if local is None:
            log.info("cannot tell which broker log.dirs %s belong to (no live partition table, "
                     "no meta.properties); trusting kafka.bootstrap.servers", ",".join(log_dirs))
            return
        owners = {d: local[0] for d in log_dirs}
    for d, owner in owners.items():
        if owner not in known:
            from appliance.client.ipc import SHM_NAME_FILE

            name = _shm_name_from([d]) or "?"
            raise InvalidConfigError(
                f"log.dirs {d} belong to broker id {owner} (shared memory {name}, named in "
                f"{SHM_NAME_FILE}), but kafka.bootstrap.servers={bootstrap} is cluster "
                f"{md.cluster_id!r} with broker id(s) "
                f"{', '.join(map(str, sorted(known)))}: point both options at the same cluster")


def _partitions(md) -> list[tuple[str, int]]:
    return [(t.name, p.partition_index) for t in md.topics if t.error_code == 0
            for p in t.partitions]


def broker_catalog(view: BrokerView, log_dirs: tuple[str, ...] = (),
                   shm_name: str | None = None, read_committed: bool = False) -> Catalog:
    """Every partition the broker has, with [log start, high watermark) from ListOffsets (and,
    ``read_committed``, the last stable offset: ListOffsets latest with isolation level 1).

    Partitions also present in ``log_dirs`` (on this host) carry their directory as ``path``;
    the others have ``path=""``. Raises BrokerUnreachableError, InvalidConfigError (log dirs of
    another broker), KafkaStorageError (a log dir that is not one).
    """
    md = view.metadata()
    if log_dirs:
        for d in log_dirs:
            if os.path.isdir(d):
                _scan_log_dir(d)  # raises KafkaStorageError for a dir that is no log dir
        _check_dirs_belong(md, view.bootstrap, log_dirs, shm_name)
    parts = _partitions(md)
    deadline = time.monotonic() + view.cluster.request_timeout
    while True:
        try:
            starts = view.list_offsets([(t, p, EARLIEST) for t, p in parts])
            ends = view.list_offsets([(t, p, LATEST) for t, p in parts])
            stable = (view.list_offsets([(t, p, LATEST) for t, p in parts], read_committed=True)
                      if read_committed else {})
            break
        except _PLAN_AGAIN:
            # A topic deleted between Metadata and ListOffsets, or leadership moving (cluster
            # mode: a leader died, an election is under way): plan again from fresh metadata.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            view.cluster.invalidate()
            md = view.metadata()
            parts = _partitions(md)
    info = {(t.name, p.partition_index): p for t in md.topics if t.error_code == 0
            for p in t.partitions}
    out = {}
    for tp in parts:
        a, b = starts[tp], ends[tp]
        p = info[tp]
        isr = tuple(p.isr_nodes or ())
        replicas = tuple(p.replica_nodes or ())
        lso = min(max(a, stable[tp]), max(a, b)) if read_committed else None
        out[tp] = PartitionState(tp[0], tp[1], _driver_path(log_dirs, tp, isr, p.leader_id,
                                                            len(replicas)),
                                 a, max(a, b), p.leader_id, isr, replicas, lso)
    return Catalog(out, f"broker {view.bootstrap}")


def _driver_path(log_dirs: tuple[str, ...], tp: tuple[str, int], isr: tuple[int, ...],
                 leader: int, rf: int) -> str:
    """The partition's directory on the driver's host that a task there may read ("": none);
    planning uses it for segment-aligned cuts and timestamp look-ups."""
    if not log_dirs:
        return ""
    from spark.replicas import choose_replica, local_replicas

    r = choose_replica(local_replicas(log_dirs, *tp), isr, leader, rf)
    return r.path if r else ""
