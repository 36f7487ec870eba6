"""Every shared-memory layout of the broker, declared once, with its version number.

The supervisor, the disk workers, the network workers and the local mmap readers (Spark, tools)
all map the same POSIX shared-memory objects. Their byte layouts live here and nowhere else: each
is a :class:`Layout` — an ordered list of (field, struct code) — from which offsets and sizes are
derived. Bump :data:`LAYOUT_VERSION` whenever any of them changes; a process that finds another
version in an existing object refuses to attach rather than misread it.

Byte order is native (these objects never leave the host). Every 8-byte field sits on an 8-byte
boundary so that a single aligned store publishes it whole (x86-64 keeps aligned 8-byte stores
atomic and does not reorder stores with stores, which the seqlock and the rings rely on).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LAYOUT_VERSION", "NO_COMPLETION_AT_ACKS_0", "Layout", "TABLE_HEADER", "WORKER_SLOT", "PARTITION_SLOT", "RING_HEADER",
    "RING_MESSAGE", "REQUEST", "COMPLETION", "GROUP_HEADER", "SPARE_PRODUCER_ID", "TXN_MARKER_BODY", "DELETE_RECORDS_BODY", "TRUNCATE_BODY", "TRUNCATE_FULLY_BODY", "EPOCH_BODY", "EPOCH_RESULT", "HANDOFF_RESULT", "MAX_WORKERS", "TOPIC_NAME_MAX", "SlotState",
    "WorkerState", "MsgType", "TABLE_MAGIC", "RING_MAGIC", "table_size", "shm_names",
    "IPC_CHANNELS", "IPC_DIR_HEADER", "IPC_SLOT", "IPC_MAGIC", "ipc_dir_name", "ipc_channel_name",
    "disk_wake_address", "LEADERSHIP_SLOT", "MAX_REPLICAS", "Role", "leaders_name", "cluster_address",
    "METADATA_HEADER", "METADATA_TOPIC", "METADATA_PARTITION", "METADATA_MAGIC", "METADATA_VERSION",
    "METADATA_BYTES", "metadata_name",
    "REPLICA_APPEND_HEADER", "FOLLOWER_FETCH_BODY", "DataWanted",
]

# 3: partition slots carry the topic id; 4: RING_HEADER.waiting; 5: REPLICA_APPEND_HEADER carries
# the leader's log start offset; 6: FOLLOWER_FETCH_BODY carries the follower's log start offset;
# 7: TRUNCATE carries the leader's epoch answer (TRUNCATE_BODY), LATEST_EPOCH, EPOCH_RESULT;
# 8: LEADERSHIP_SLOT carries where the leader's epoch starts (epoch_start_offset, KIP-207);
# 9: TABLE_HEADER holds the broker's producer id block (producer_id_next/_last, its refill claim);
# 10: PARTITION_SLOT carries the last stable offset, MsgType.WRITE_TXN_MARKER (TXN_MARKER_BODY),
# PRODUCER_ENTRY the producer's open transaction and coordinator epoch
LAYOUT_VERSION = 10
TABLE_MAGIC = 0x41504C54  # "APLT"
RING_MAGIC = 0x41504C52  # "APLR"
MAX_WORKERS = 64  # disk + network workers per broker; far above what a box has disks/cores for
TOPIC_NAME_MAX = 249  # Kafka's limit on topic name length


@dataclass(frozen=True)
class Layout:
    """A fixed-size record: field names and struct codes, in order, native byte order."""

    name: str
    fields: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        fmt = "=" + "".join(code for _, code in self.fields)
        object.__setattr__(self, "struct", struct.Struct(fmt))
        offsets, pos = {}, 0
        for fname, code in self.fields:
            size = struct.calcsize("=" + code)
            if code in ("q", "Q", "d") and pos % 8:
                raise TypeError(f"{self.name}.{fname} is not 8-byte aligned (offset {pos})")
            offsets[fname] = pos
            pos += size
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "size", pos)

    def offset(self, field: str) -> int:
        return self.offsets[field]  # type: ignore[attr-defined]

    def pack_into(self, buf: Any, base: int, **values: int) -> None:
        """Write the whole record at ``base``: the named fields, every other one zero (pads
        take no value), so a field added to the declaration needs no change at the callers."""
        args = [values.pop(f, 0) for f, code in self.fields if not code.endswith("x")]
        if values:
            raise KeyError(f"{self.name} has no field(s) {sorted(values)}")
        self.struct.pack_into(buf, base, *args)  # type: ignore[attr-defined]


# -- the partition table ---------------------------------------------------------------------
# One object per broker: a header, MAX_WORKERS worker slots, then `capacity` partition slots.

TABLE_HEADER = Layout("table_header", (
    ("magic", "I"),
    ("version", "I"),
    ("capacity", "I"),            # number of partition slots
    ("broker_id", "i"),
    ("supervisor_pid", "q"),      # who created it: a later broker reclaims it only if this is dead
    ("generation", "q"),          # bumped on every slot allocation or release: readers re-index
    ("controller_id", "i"),
    ("num_disks", "i"),
    ("started_ms", "q"),
    ("port", "i"),                # the listener port: local producers find their broker by it
    ("pad", "4x"),
    # InitProducerId's current block (ids next..last; next > last: used up) and the monotonic
    # time until which one worker's refill of it holds the others off: all under the table lock
    ("producer_id_next", "q"),
    ("producer_id_last", "q"),
    ("producer_id_refill_until", "d"),
    ("reserved", "16x"),
))

WORKER_SLOT = Layout("worker_slot", (
    ("pid", "q"),
    ("heartbeat", "d"),           # time.monotonic() of the worker's last loop (same host clock)
    ("state", "i"),               # WorkerState
    ("kind", "i"),                # 0 disk, 1 network
    ("incarnation", "q"),         # bumped by the supervisor at every (re)spawn of this slot
))

PARTITION_SLOT = Layout("partition_slot", (
    ("seq", "Q"),                 # seqlock: odd while the owning disk worker writes the slot
    ("state", "i"),               # SlotState
    ("disk", "i"),                # index of the log.dir (= disk worker) that holds the partition
    ("partition", "i"),
    ("num_partitions", "i"),      # partitions of the topic, so metadata needs no other lookup
    ("log_end_offset", "q"),
    ("high_watermark", "q"),
    ("log_start_offset", "q"),
    ("last_stable_offset", "q"),  # below the first open transaction's first offset, <= the HW
    ("topic_id", "16s"),          # KIP-516 topic id (a UUID's 16 bytes), the same in every slot
    ("topic_len", "H"),
    ("topic", f"{TOPIC_NAME_MAX}s"),
    ("pad", "5x"),
))


class SlotState:
    FREE = 0
    CREATING = 1   # allocated by a network worker, not yet opened by its disk worker
    ONLINE = 2
    OFFLINE = 3    # its disk worker is down or recovering
    DELETING = 4
    STORAGE_ERROR = 5  # its log dir failed (KIP-112): KAFKA_STORAGE_ERROR until the disk is back


class WorkerState:
    EMPTY = 0
    STARTING = 1
    READY = 2
    STOPPING = 3
    DEAD = 4


def table_size(capacity: int) -> int:
    return TABLE_HEADER.size + MAX_WORKERS * WORKER_SLOT.size + capacity * PARTITION_SLOT.size


# -- request rings ---------------------------------------------------------------------------
# One object per (network worker, disk worker) pair holding two single-producer single-consumer
# rings: requests (network -> disk) and completions (disk -> network). head is written only by the
# consumer, tail only by the producer; each on its own cache line so the two sides don't false-share.

RING_HEADER = Layout("ring_header", (
    ("magic", "I"),
    ("version", "I"),
    ("capacity", "Q"),            # bytes of the data area (a multiple of 8)
    ("pad0", "48x"),
    ("head", "Q"),                # consumer position (monotonic byte count)
    # nonzero while the consumer sleeps (or is about to): the producer wakes it after publishing
    # a message only then (IPC channels; Ring.prepare_to_wait / Ring.consumer_waiting)
    ("waiting", "Q"),
    # written by the consumer too: on a completion ring, the DataWanted bits of the long-poll
    # fetches its network worker has waiting, so a disk worker rings only the workers that wait
    # for what changed. (0 means "ring me for completions only")
    ("data_wanted", "Q"),
    ("pad1", "40x"),
    ("tail", "Q"),                # producer position (monotonic byte count)
    ("pad2", "56x"),
))


class DataWanted:
    """Bits of RING_HEADER.data_wanted: which published changes wake a network worker's long
    polls. A follower's fetch reads up to the log end offset, so only its growth can answer it
    (Kafka's DelayedFetch: a high watermark move does not complete a follower's fetch); a
    consumer's reads up to the high watermark, so any published change may."""
    LOG_END = 1  # followers' fetches wait: ring when a log end offset grew
    ANY = 2      # consumers' fetches wait: ring when any offset was published


# Every message starts with this frame; a length of 0 with type PAD means "skip to the ring's start".
RING_MESSAGE = Layout("ring_message", (
    ("length", "I"),              # bytes after this frame header
    ("type", "I"),                # MsgType
))


class MsgType:
    PAD = 0
    PRODUCE = 1
    CREATE_PARTITION = 2
    DELETE_PARTITION = 3
    ALTER_CONFIG = 4
    DELETE_RECORDS = 5
    GROUP = 6            # a consumer-group API request for the coordinator in the disk worker
    ALTER_BROKER_CONFIG = 7  # reload the dynamic broker configs (appliance/dynamic_config.py)
    REPLICA_MOVE = 8     # a step of moving a partition between log dirs (broker/disk/replica_move.py)
    REPLICA_APPEND = 9   # cluster mode: a follower's fetched batches, offsets kept (REPLICA_APPEND_HEADER first)
    TRUNCATE = 10        # cluster mode: a follower cuts its log where the leader's epoch answer says (TRUNCATE_BODY)
    FOLLOWER_FETCH = 11  # cluster mode: a follower's fetch position reached the leader (FOLLOWER_FETCH_BODY)
    EPOCH_END = 12       # cluster mode: where a leader epoch ends here (EPOCH_BODY; answer: EPOCH_RESULT)
    BECOME_LEADER = 13   # cluster mode: this broker now leads (int32 epoch): stamp it at the LEO
    TRUNCATE_FULLY = 14  # cluster mode: a follower below the leader's log start: start empty at (TRUNCATE_FULLY_BODY)
    DESCRIBE_PRODUCERS = 15  # a partition's producer state: PRODUCER_ENTRY records follow the completion
    COMPLETION = 16
    TOPIC_ID = 17        # cluster mode: the partition's topic id from ZooKeeper (16 bytes): slot and partition.metadata
    LATEST_EPOCH = 18    # cluster mode: a follower's latest leader epoch (no body; answer: EPOCH_RESULT)
    ISR_CHANGED = 19     # cluster mode: a led partition's ISR changed in the leadership area (no body): HW rule
    WRITE_TXN_MARKER = 20  # the leader writes a transaction marker (TXN_MARKER_BODY); answered once replicated


# Message types that get no completion when sent with acks=0: an acks=0 produce, and a
# follower's fetch position (nobody waits on it; its completion only woke the network worker)
NO_COMPLETION_AT_ACKS_0 = frozenset((MsgType.PRODUCE, MsgType.FOLLOWER_FETCH))


# The fixed part of a request; produce payloads (record batches) or JSON (control) follow it.
REQUEST = Layout("request", (
    ("request_id", "Q"),
    ("slot", "i"),
    ("acks", "h"),
    ("flags", "h"),
    ("timeout_ms", "i"),
    # CLOCK_MONOTONIC microseconds mod 2**32 when the network worker put a request it times (the
    # metrics' one in 16) on the ring, 0 otherwise: the disk worker times its ring queue wait.
    # Was a zero pad, and 0 still means "untimed": no LAYOUT_VERSION bump needed
    ("stamp_us", "I"),
))

# Follows REQUEST in a GROUP message; then client_id, client_host, and the encoded request body.
GROUP_HEADER = Layout("group_header", (
    ("api_key", "h"),
    ("api_version", "h"),
    ("client_id_len", "H"),
    ("client_host_len", "H"),
))

# In a GROUP message carrying InitProducerId, before the encoded body: an id the network worker
# took from the broker's block for the transaction coordinator (broker/disk/txn_host.py).
SPARE_PRODUCER_ID = Layout("spare_producer_id", (
    ("producer_id", "q"),
))

# Follows REQUEST in a WRITE_TXN_MARKER message: the marker ending one producer's transaction
TXN_MARKER_BODY = Layout("txn_marker_body", (
    ("producer_id", "q"),
    ("coordinator_epoch", "i"),
    ("producer_epoch", "h"),
    ("commit", "B"),             # 1 COMMIT, 0 ABORT
    ("pad", "x"),
))

# Follows REQUEST in a DELETE_RECORDS message; the answer's log_start_offset is the new one.
DELETE_RECORDS_BODY = Layout("delete_records_body", (
    ("offset", "q"),             # the new log start offset; -1 = the high watermark
))
# TRUNCATE: the follower asked its leader where ``asked_epoch`` (its latest) ends; the leader's
# answer (-1, -1: it knows no epochs, or was not asked) and the follower's own epochs decide
# where its log is cut (KIP-101/279), in the disk worker that holds them
TRUNCATE_BODY = Layout("truncate_body", (
    ("asked_epoch", "i"),
    ("leader_epoch", "i"),
    ("leader_end_offset", "q"),
))
# TRUNCATE_FULLY: the leader's log start offset, where the emptied log starts
TRUNCATE_FULLY_BODY = Layout("truncate_fully_body", (
    ("offset", "q"),
))
# BECOME_LEADER (the new leadership's epoch) and EPOCH_END (the epoch asked about)
EPOCH_BODY = Layout("epoch_body", (
    ("leader_epoch", "i"),
))
# Follows the completion of REPLICA_MOVE's handoff: the offsets the destination opens the log with
HANDOFF_RESULT = Layout("handoff_result", (
    ("log_end_offset", "q"),
    ("log_start_offset", "q"),
))
# Follows the completion of EPOCH_END (the largest epoch <= the one asked, where it ends here)
# and LATEST_EPOCH (the latest epoch, the log end offset); -1, -1 when the log knows no epoch
EPOCH_RESULT = Layout("epoch_result", (
    ("leader_epoch", "i"),
    ("pad", "4x"),
    ("end_offset", "q"),
))

# DESCRIBE_PRODUCERS' answer: one record per active producer of the partition, after the completion.
PRODUCER_ENTRY = Layout("producer_entry", (
    ("producer_id", "q"),
    ("last_offset", "q"),         # of its last batch in the log (-1: none retained)
    ("producer_epoch", "i"),
    ("last_sequence", "i"),
    ("current_txn_start_offset", "q"),  # its open transaction's first offset (-1: none)
    ("coordinator_epoch", "i"),   # of its last marker (-1: none)
    ("pad", "4x"),
))
__all__ += ["PRODUCER_ENTRY"]

# A completion may be followed by an encoded response body (GROUP requests).
COMPLETION = Layout("completion", (
    ("request_id", "Q"),
    ("base_offset", "q"),
    ("log_append_time", "q"),
    ("log_start_offset", "q"),
    ("slot", "i"),
    ("error_code", "h"),
    ("reserved", "2x"),
))


# -- local IPC producers ---------------------------------------------------------------------
# Per disk worker: a directory object with IPC_CHANNELS slots, and one Channel per slot
# (requests from the producer, completions back). A producer claims slot k by taking an exclusive
# flock on channel k's object (the kernel drops it if the producer dies) and then stamps the slot.

IPC_CHANNELS = 8  # producers that can attach to one disk worker at once
IPC_DIR_HEADER = Layout("ipc_dir_header", (
    ("magic", "I"),
    ("version", "I"),
    ("channels", "I"),
    ("disk", "i"),
    ("worker_incarnation", "q"),  # the disk worker that last drained these channels
))
IPC_SLOT = Layout("ipc_slot", (
    ("owner_pid", "q"),           # 0 = free
    ("claim", "q"),               # bumped at every claim; request ids carry it in their top bits
    ("wake_len", "i"),            # the producer's abstract socket name, to wake it on completions
    ("pad", "4x"),
    ("wake_name", "104s"),
))
IPC_MAGIC = 0x41504C49  # "APLI"


def shm_names(base: str, num_net: int, num_disk: int) -> dict[str, object]:
    """POSIX names of one broker's objects, all derived from its base name."""
    return {
        "table": f"/{base}-table",
        "rings": {(n, d): f"/{base}-ring-n{n}-d{d}" for n in range(num_net) for d in range(num_disk)},
        "ipc_dirs": {d: ipc_dir_name(base, d) for d in range(num_disk)},
        "ipc_channels": {(d, k): ipc_channel_name(base, d, k)
                         for d in range(num_disk) for k in range(IPC_CHANNELS)},
    }


def ipc_dir_name(base: str, disk: int) -> str:
    return f"/{base}-ipc-d{disk}"


def ipc_channel_name(base: str, disk: int, k: int) -> str:
    return f"/{base}-ipc-d{disk}-c{k}"


def disk_wake_address(base: str, disk: int) -> bytes:
    """The abstract Unix datagram socket a disk worker listens on for IPC producers' doorbells."""
    return f"\0{base}-disk{disk}".encode()


# -- metrics counters ------------------------------------------------------------------------
# One object per broker (`/<base>-metrics`), made only when metrics are on: a header, then one
# slab of uint64 words per worker slot (the partition table's worker slot numbers). Each worker
# writes only its own slab, so a plain add is safe (one writer per word); the exporter sums the
# slabs. Per-partition words are indexed by partition-table slot. Histograms are HIST_WORDS words:
# HIST_BUCKETS counts (bucket k: under 2**k microseconds, the last one unbounded), then the sum
# in microseconds. Bump COUNTERS_VERSION when any of this changes.

__all__ += [
    "COUNTERS_VERSION", "COUNTERS_MAGIC", "COUNTERS_HEADER", "COUNTER_SLAB", "COUNTER_API_KEYS",
    "COUNTER_ERROR_CODES", "COUNTER_PARTITIONS", "HIST_BUCKETS", "HIST_WORDS", "counters_name",
]

COUNTERS_VERSION = 6  # 5: failed SASL authentications and TLS handshakes; 6: authorization denials
COUNTERS_MAGIC = 0x41504C4D  # "APLM"
COUNTER_API_KEYS = 80        # Kafka API keys 0..79 (the highest in use is below 75)
COUNTER_ERROR_CODES = 128    # error code + 1 (UNKNOWN_SERVER_ERROR is -1); Kafka's are below 120
COUNTER_PARTITIONS = 32768   # = the partition table's default capacity (appliance.max.partitions);
                             # slots beyond it (a larger table) are not counted per partition
HIST_BUCKETS = 27            # < 1 us, < 2 us, ..., < 2**25 us (33 s), then everything longer
HIST_WORDS = HIST_BUCKETS + 1

COUNTERS_HEADER = Layout("counters_header", (
    ("magic", "I"),
    ("version", "I"),
    ("partitions", "I"),
    ("workers", "I"),
    ("slab_bytes", "Q"),
    ("reserved", "40x"),
))

COUNTER_SLAB = Layout("counter_slab", (
    ("requests", f"{COUNTER_API_KEYS}Q"),                         # network: per API key
    ("errors", f"{COUNTER_API_KEYS * COUNTER_ERROR_CODES}Q"),     # network: (API key, code + 1)
    ("total_time", f"{COUNTER_API_KEYS * HIST_WORDS}Q"),          # network: per API key
    ("local_time", f"{COUNTER_API_KEYS * HIST_WORDS}Q"),          # disk (Produce), network (others)
    ("queue_time", f"{COUNTER_API_KEYS * HIST_WORDS}Q"),          # disk (Produce's ring), network
    ("remote_time", f"{COUNTER_API_KEYS * HIST_WORDS}Q"),         # network: Fetch's long-poll wait
    ("response_queue_time", f"{COUNTER_API_KEYS * HIST_WORDS}Q"), # network: ready -> write starts
    ("response_send_time", f"{COUNTER_API_KEYS * HIST_WORDS}Q"),  # network: write -> last byte out
    ("rejected_connections", "Q"),                                # network: over max.connections.per.ip
    ("delayed_accepts", "Q"),                                     # network: accepts paused, max.connections
    ("muted_reads", "Q"),                                         # network: queued.max.request.bytes hit
    ("request_memory", "Q"),                                      # network: gauge, bytes of requests held
    ("flush_time", f"{HIST_WORDS}Q"),                             # disk: fsyncs of segments
    ("failed_produce", "Q"),                                      # network: partitions refused
    ("failed_fetch", "Q"),                                        # network: partitions refused
    ("isr_shrinks", "Q"),                                         # cluster worker (0 standalone)
    ("isr_expands", "Q"),                                         # cluster worker
    ("active_controller", "Q"),                                   # cluster worker: gauge, 1 or 0
    ("failed_authentications", "Q"),                              # network: SASL exchanges that failed
    ("failed_handshakes", "Q"),                                   # network: TLS handshakes that failed
    ("authorization_denials", "Q"),                               # network, disk (IPC): ACL refusals
    ("reserved", "28Q"),
    # disk: per partition slot, its log-end offset + 1 when this broker first opened or created
    # it (0: not yet); messages in = log-end offset now - (leo_base - 1), with no add per append
    ("leo_base", f"{COUNTER_PARTITIONS}Q"),
    ("bytes_in", f"{COUNTER_PARTITIONS}Q"),                       # disk: per partition slot
    ("bytes_out", f"{COUNTER_PARTITIONS}Q"),                      # network: per partition slot
))


def counters_name(base: str) -> str:
    return f"/{base}-metrics"


# -- connection counts -----------------------------------------------------------------------
# One object per broker (`/<base>-conns`), always made: per network worker index a region of
# CONN_REGION_WORDS uint64 words that only that worker writes: its open connections (word 0),
# then CONN_IP_SLOTS entries of (address high 64 bits, low 64 bits, connections) for the client
# addresses it holds connections from (IPv4 as ::ffff:a.b.c.d; count 0 = free entry). The other
# workers read them to apply max.connections / max.connections.per.ip across the broker. A
# respawned worker zeroes its region (its predecessor's sockets died with it).

__all__ += ["CONN_VERSION", "CONN_MAGIC", "CONN_HEADER", "CONN_IP_SLOTS", "CONN_REGION_WORDS",
            "conns_name"]

CONN_VERSION = 1
CONN_MAGIC = 0x41504C43  # "APLC"
CONN_IP_SLOTS = 4096     # distinct client addresses per network worker (more: not limited per IP)
CONN_REGION_WORDS = 8 + 3 * CONN_IP_SLOTS  # count, 7 reserved, then the address entries

CONN_HEADER = Layout("conn_header", (
    ("magic", "I"),
    ("version", "I"),
    ("ip_slots", "I"),
    ("workers", "I"),
    ("reserved", "48x"),
))


def conns_name(base: str) -> str:
    return f"/{base}-conns"


# -- cluster mode: leadership per partition slot -----------------------------------------------
# A second object beside the partition table (only in cluster mode), one record per partition
# slot, written only by the cluster worker under the record's own seqlock (the partition slot
# keeps its single writer, the disk worker). Read by network workers (routing) and disk workers
# (ISR for the high watermark and acks=all).

MAX_REPLICAS = 8  # replicas per partition we can describe; Kafka clusters rarely go past 5

LEADERSHIP_SLOT = Layout("leadership_slot", (
    ("seq", "Q"),
    ("role", "i"),                # Role
    ("leader", "i"),              # broker id, -1 = none
    ("leader_epoch", "i"),
    ("replica_count", "i"),
    ("isr_count", "i"),
    # KIP-73, leader side: bytes/s this broker, leading the partition, may send to followers out
    # of the ISR (leader.replication.throttled.rate, the partition listed in
    # leader.replication.throttled.replicas); 0 = not throttled. Written by the cluster worker
    # with a plain aligned store, kept by write(). Was a zero pad: no LAYOUT_VERSION bump needed
    ("leader_throttle_rate", "i"),
    ("replicas", f"{MAX_REPLICAS}i"),
    ("isr", f"{MAX_REPLICAS}i"),
    # written by the leader's disk worker from its followers' fetches (index as in replicas),
    # plain aligned 8-byte stores; reset by the cluster worker when it starts leading
    ("positions", f"{MAX_REPLICAS}q"),       # follower log end offsets, -1 = not seen
    ("caught_up_ms", f"{MAX_REPLICAS}q"),    # monotonic ms a follower last reached the leader's LEO
    # KIP-207, written by the leader's disk worker once it has stamped its epoch: the log end
    # offset its leadership began at, for epoch_start_epoch (a plain store each, the offset
    # first; a reader trusts it only for the epoch the leadership now has). Until the high
    # watermark reaches it, a new leader's HW may be below what the last leader exposed
    ("epoch_start_offset", "q"),
    ("epoch_start_epoch", "i"),
    ("epoch_start_pad", "4x"),
))


class Role:
    NONE = 0       # no LeaderAndIsr yet (or stopped): serve nothing
    LEADER = 1
    FOLLOWER = 2


def leaders_name(base: str) -> str:
    return f"/{base}-leaders"


# -- cluster mode: the cluster's metadata, as the controller's UpdateMetadata said ---------------
# Kafka's MetadataCache: every topic and partition of the cluster with its leader, not only the
# partitions this broker holds. One object, written only by the cluster worker under the header's
# seqlock; read by the network workers and the disk workers, which judge a request's partitions
# against it (appliance.shm.cluster_view). The body is a run of topic records: METADATA_TOPIC,
# the name's bytes, then `partition_count` METADATA_PARTITION records.

METADATA_MAGIC = 0x41504D44  # "APMD"
METADATA_VERSION = 2  # 2: the fenced word
METADATA_BYTES = 64 << 20  # pages are touched only as far as the body reaches (tmpfs)

METADATA_HEADER = Layout("metadata_header", (
    ("magic", "I"),
    ("version", "I"),
    ("seq", "Q"),                 # seqlock: odd while the cluster worker rewrites the body
    # 1 while this broker's ZooKeeper session is in doubt (cluster/session_fence.py): what it
    # believes it leads may have moved, so its coordinators answer nothing from memory
    ("fenced", "Q"),
    ("body_bytes", "Q"),
    ("topic_count", "Q"),
))
METADATA_TOPIC = Layout("metadata_topic", (
    ("name_len", "H"),
    ("pad", "2x"),
    ("partition_count", "I"),
))
METADATA_PARTITION = Layout("metadata_partition", (
    ("partition", "i"),
    ("leader", "i"),              # -1: none now (offline, being elected)
    ("leader_epoch", "i"),
))


def metadata_name(base: str) -> str:
    return f"/{base}-metadata"


def cluster_address(base: str) -> str:
    """The abstract Unix stream socket of the cluster worker (network workers forward to it)."""
    return f"\0{base}-cluster"


# REPLICA_APPEND body: this header, then the leader's record batches (offsets kept)
REPLICA_APPEND_HEADER = Layout("replica_append_header", (
    ("leader_high_watermark", "q"),
    ("leader_log_start_offset", "q"),  # the follower raises its own to it (bounded by its HW)
))
FOLLOWER_FETCH_BODY = Layout("follower_fetch_body", (
    ("fetch_offset", "q"),
    ("replica_id", "i"),
    ("pad", "4x"),
    # the follower's own (Fetch v5+), -1 = not sent: a held DeleteRecords waits for the ISR's
    ("log_start_offset", "q"),
))
