"""Options of the ``appliance`` data source, named as Spark's Kafka source names them.

:func:`parse_read_options` and :func:`parse_write_options` turn Spark's (case-insensitive) option
map into frozen, validated values; anything unknown or malformed raises InvalidConfigError naming
the option, so a typo never silently changes what a job reads.

Offsets JSON follows Spark's Kafka source: ``{"topic": {"0": 23, "1": -2}}`` where -2 means
earliest and -1 latest; ``assign`` is ``{"topic": [0, 1]}``; timestamps JSON is
``{"topic": {"0": 1700000000000}}`` (milliseconds).

Thread-safety: pure functions over immutable results.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from appliance.errors import InvalidConfigError

__all__ = [
    "ReadOptions", "WriteOptions", "OffsetSpec", "parse_read_options", "parse_write_options",
    "READ_OPTIONS", "WRITE_OPTIONS", "EARLIEST", "LATEST", "bool_option",
]

EARLIEST = -2
LATEST = -1

# Every option a read accepts (lower case: Spark hands options over case-insensitively).
READ_OPTIONS = frozenset({
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger",
    "minpartitions", "failondataloss", "includeheaders", "log.dirs", "shm.name", "broker.id",
    "broker.port", "read.chunk.bytes", "path", "kafka.bootstrap.servers",
    "kafka.request.timeout.ms", "progress.interval.ms", "kafka.client.rack",
    "kafka.isolation.level",
})
WRITE_OPTIONS = frozenset({
    "topic", "kafka.bootstrap.servers", "includeheaders", "kafka.acks", "kafka.compression.type",
    "batch.records", "kafka.request.timeout.ms", "path", "checkpointlocation",
    "exactlyonce", "kafka.transaction.timeout.ms", "transactionalidprefix", "test.failtaskonce",
    "test.commitpausems", "test.taskpausems",
})
#: Kafka's producer default for transaction.timeout.ms
DEFAULT_TXN_TIMEOUT_MS = 60000
_EOS_ONLY = ("kafka.transaction.timeout.ms", "transactionalidprefix", "test.failtaskonce",
             "test.commitpausems", "test.taskpausems")

# Set by Spark itself, not by users: accepted but not listed in error messages.
_IMPLICIT = frozenset({"path", "checkpointlocation"})
_COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``kind`` is 'earliest', 'latest', 'offsets' (per partition, -2/-1
    allowed), 'timestamp' (one timestamp for every partition) or 'timestamps' (per partition)."""

    kind: str
    per_partition: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, offset or ts)
    timestamp: int = 0

    def lookup(self, topic: str, partition: int) -> int | None:
        for t, p, v in self.per_partition:
            if t == topic and p == partition:
                return v
        return None

    def topics(self) -> set[str]:
        return {t for t, _, _ in self.per_partition}


@dataclass(frozen=True)
class ReadOptions:
    log_dirs: tuple[str, ...]
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[tuple[str, int], ...] | None
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: str  # 'error' or 'latest': no offset found for a starting timestamp
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    shm_name: str | None
    chunk_bytes: int
    bootstrap_servers: str | None = None  # set: plan from the broker, read remotely if not local
    request_timeout_ms: int = 30000
    progress_interval_ms: int = 10000  # a long task logs its progress this often
    client_rack: str = ""  # a remote read asks for a replica in this rack (KIP-392)
    # kafka.isolation.level: read_committed (default) reads below the LSO and skips aborted
    # transactions; read_uncommitted reads up to the HW, every data batch
    read_committed: bool = True

    @property
    def remote(self) -> bool:
        """Whether offsets are planned from the broker (kafka.bootstrap.servers given)."""
        return self.bootstrap_servers is not None

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is selected by subscribe / subscribePattern / assign."""
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        assert self.assign is not None
        return any(t == topic for t, _ in self.assign)


@dataclass(frozen=True)
class WriteOptions:
    bootstrap_servers: str
    topic: str | None
    acks: int
    compression: str
    batch_records: int
    timeout_ms: int
    exactly_once: bool = False
    txn_timeout_ms: int = DEFAULT_TXN_TIMEOUT_MS
    txn_id_prefix: str | None = None  # None: derived from the streaming query's id
    checkpoint: str | None = None  # Spark's checkpointLocation, when given as an option
    fail_task_once: tuple[int, int] | None = None  # tests: (partition id, batch id) to fail
    commit_pause_ms: int = 0  # tests: the driver pauses after the first of a batch's EndTxn
    task_pause_ms: int = 0  # tests: a task pauses with its transaction open, records written


def _bad(name: str, value: object, why: str) -> InvalidConfigError:
    return InvalidConfigError(f"option {name}={value!r}: {why}")


def _check_known(options: Mapping[str, str], known: frozenset[str], what: str) -> dict[str, str]:
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in known)
    if unknown:
        raise InvalidConfigError(
            f"unknown option(s) for an appliance {what}: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known - _IMPLICIT))})")
    return opts


def bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise _bad(name, raw, "expected true or false")
    return v == "true"


def _int_option(opts: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        v = int(raw.strip())
    except ValueError:
        raise _bad(name, raw, "expected an integer") from None
    if v < minimum:
        raise _bad(name, raw, f"must be >= {minimum}")
    return v


def _json(name: str, raw: str) -> object:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise _bad(name, raw, f"malformed JSON ({e.msg} at char {e.pos})") from None


def _per_partition(name: str, raw: str, *, allow: tuple[int, ...], value_min: int
                   ) -> tuple[tuple[str, int, int], ...]:
    doc = _json(name, raw)
    if not isinstance(doc, dict) or not doc:
        raise _bad(name, raw, 'expected a JSON object like {"topic": {"0": 23}}')
    out = []
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise _bad(name, raw, f'topic {topic!r}: expected an object of "partition": value')
        for p, v in parts.items():
            if not (isinstance(p, str) and p.isdigit()):
                raise _bad(name, raw, f"topic {topic!r}: partition {p!r} is not a number")
            if isinstance(v, bool) or not isinstance(v, int) or (v < value_min and v not in allow):
                raise _bad(name, raw, f"{topic}-{p}: value {v!r} is not allowed here")
            out.append((topic, int(p), v))
    return tuple(out)


def _offset_spec(opts: Mapping[str, str], prefix: str, default: str) -> OffsetSpec:
    start = prefix == "starting"
    names = {
        "offsets": f"{prefix}offsets", "ts": f"{prefix}timestamp",
        "by_ts": f"{prefix}offsetsbytimestamp",
    }
    given = [n for n in names.values() if n in opts]
    # Spark gives timestamps precedence; we refuse the ambiguity instead of guessing.
    if len(given) > 1:
        raise InvalidConfigError(f"options {', '.join(given)} are exclusive: set only one")
    if names["ts"] in opts:
        raw = opts[names["ts"]]
        try:
            ts = int(raw.strip())
        except ValueError:
            raise _bad(f"{prefix}Timestamp", raw, "expected milliseconds since the epoch") from None
        if ts < 0:
            raise _bad(f"{prefix}Timestamp", raw, "must be >= 0")
        return OffsetSpec("timestamp", timestamp=ts)
    if names["by_ts"] in opts:
        return OffsetSpec("timestamps", _per_partition(
            f"{prefix}OffsetsByTimestamp", opts[names["by_ts"]], allow=(), value_min=0))
    raw = opts.get(names["offsets"], default).strip()
    if raw.lower() == "earliest":
        if not start:
            raise _bad("endingOffsets", raw, "earliest is not allowed as an ending offset")
        return OffsetSpec("earliest")
    if raw.lower() == "latest":
        return OffsetSpec("latest")
    allow = (EARLIEST, LATEST) if start else (LATEST,)
    return OffsetSpec("offsets", _per_partition(f"{prefix}Offsets", raw, allow=allow, value_min=0))


def _topics_list(raw: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not topics:
        raise _bad("subscribe", raw, "no topic named")
    return topics


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate the options of a batch (``streaming=False``) or streaming read.

    Raises InvalidConfigError naming the option for unknown names, bad values, malformed JSON,
    zero or several of subscribe/subscribePattern/assign, or a missing log.dirs.
    """
    opts = _check_known(options, READ_OPTIONS, "read")
    raw_dirs = opts.get("log.dirs", "")
    dirs = tuple(d.strip() for d in raw_dirs.split(",") if d.strip())
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip() or None
    if bootstrap is not None:
        from appliance.client.connection import parse_bootstrap

        try:
            parse_bootstrap(bootstrap)
        except ValueError as e:
            raise _bad("kafka.bootstrap.servers", bootstrap, str(e)) from None
    if not dirs and bootstrap is None:
        raise InvalidConfigError("option log.dirs or kafka.bootstrap.servers is required: the "
                                 "comma-separated log directories of the broker whose topics "
                                 "to read in place, and/or the broker to fetch them from")
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(chosen) != 1:
        raise InvalidConfigError(
            "exactly one of the options subscribe, subscribePattern, assign must be set "
            f"(got {', '.join(chosen) or 'none'})")
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = _topics_list(opts["subscribe"])
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as e:
            raise _bad("subscribePattern", pattern, f"bad regular expression: {e}") from None
    else:
        raw = opts["assign"]
        doc = _json("assign", raw)
        if not isinstance(doc, dict) or not doc:
            raise _bad("assign", raw, 'expected a JSON object like {"topic": [0, 1]}')
        pairs = []
        for topic, parts in doc.items():
            if not isinstance(parts, list) or not all(
                    isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
                raise _bad("assign", raw, f"topic {topic!r}: expected a list of partition numbers")
            pairs += [(topic, p) for p in parts]
        assign = tuple(pairs)
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    ending = _offset_spec(opts, "ending", "latest")
    if streaming and ending.kind != "latest" or streaming and any(
            k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        raise InvalidConfigError("ending offsets options are not valid for streaming queries")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise _bad("startingOffsetsByTimestampStrategy", strategy, "expected error or latest")
    max_per_trigger = _int_option(opts, "maxOffsetsPerTrigger", 1)
    if max_per_trigger is not None and not streaming:
        raise InvalidConfigError("option maxOffsetsPerTrigger is only valid for streaming queries")
    shm = opts.get("shm.name")
    bid, port = _int_option(opts, "broker.id", 0), _int_option(opts, "broker.port", 1)
    if shm is None and (bid is not None or port is not None):
        if bid is None or port is None:
            raise InvalidConfigError("options broker.id and broker.port go together (they name "
                                     "the broker's shared memory appliance-b<id>-p<port>)")
        shm = f"appliance-b{bid}-p{port}"
    if shm is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", shm):
        raise _bad("shm.name", shm, "use 1-64 of [A-Za-z0-9_.-]")
    return ReadOptions(
        log_dirs=dirs, subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting=starting, ending=ending, timestamp_strategy=strategy,
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_int_option(opts, "minPartitions", 1),
        fail_on_data_loss=bool_option(opts, "failOnDataLoss", True),
        include_headers=bool_option(opts, "includeHeaders", False),
        shm_name=shm,
        chunk_bytes=_int_option(opts, "read.chunk.bytes", 4096) or (8 << 20),
        bootstrap_servers=bootstrap,
        request_timeout_ms=_int_option(opts, "kafka.request.timeout.ms", 1) or 30000,
        progress_interval_ms=_int_option(opts, "progress.interval.ms", 1) or 10000,
        client_rack=_rack(opts.get("kafka.client.rack", "")),
        read_committed=_isolation(opts.get("kafka.isolation.level", "read_committed")),
    )


def _isolation(raw: str) -> bool:
    """kafka.isolation.level (the consumer's isolation.level, which Spark's Kafka source passes
    through with the ``kafka.`` prefix): True for read_committed."""
    level = raw.strip().lower()
    if level not in ("read_committed", "read_uncommitted"):
        raise _bad("kafka.isolation.level", raw, "expected read_committed or read_uncommitted")
    return level == "read_committed"


def _rack(raw: str) -> str:
    rack = raw.strip()
    if len(rack) > 255 or any(ord(ch) < 32 for ch in rack):
        raise _bad("kafka.client.rack", raw, "expected a rack name of at most 255 printable characters")
    return rack


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate the options of a write. Raises InvalidConfigError naming the option."""
    opts = _check_known(options, WRITE_OPTIONS, "write")
    servers = opts.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise InvalidConfigError("option kafka.bootstrap.servers is required for writes")
    acks_raw = opts.get("kafka.acks", "all").strip().lower()
    acks = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(acks_raw)
    if acks is None:
        raise _bad("kafka.acks", acks_raw, "expected all, -1, 0 or 1")
    comp = opts.get("kafka.compression.type", "none").strip().lower()
    if comp not in _COMPRESSION:
        raise _bad("kafka.compression.type", comp, f"expected one of {', '.join(_COMPRESSION)}")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise _bad("topic", topic, "empty topic name")
    eos = bool_option(opts, "exactlyOnce", False)
    if not eos:
        given = [k for k in _EOS_ONLY if k in opts]
        if given:
            raise InvalidConfigError(f"option(s) {', '.join(given)} only apply with "
                                     "exactlyOnce=true")
    elif acks != -1:
        raise _bad("kafka.acks", acks_raw, "exactlyOnce=true needs acks=all (transactions "
                   "are idempotent, which needs acks=all)")
    prefix = opts.get("transactionalidprefix")
    if prefix is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,200}", prefix.strip()):
        raise _bad("transactionalIdPrefix", prefix, "use 1-200 of [A-Za-z0-9_.-]")
    return WriteOptions(
        bootstrap_servers=servers, topic=topic.strip() if topic else None, acks=acks,
        compression=comp, batch_records=_int_option(opts, "batch.records", 1) or 4096,
        timeout_ms=_int_option(opts, "kafka.request.timeout.ms", 1) or 30000,
        exactly_once=eos,
        txn_timeout_ms=(_int_option(opts, "kafka.transaction.timeout.ms", 1)
                        or DEFAULT_TXN_TIMEOUT_MS),
        txn_id_prefix=prefix.strip() if prefix else None,
        checkpoint=opts.get("checkpointlocation"),
        fail_task_once=_task_and_batch(opts.get("test.failtaskonce")),
        commit_pause_ms=_int_option(opts, "test.commitPauseMs", 0) or 0,
        task_pause_ms=_int_option(opts, "test.taskPauseMs", 0) or 0,
    )


def _task_and_batch(raw: str | None) -> tuple[int, int] | None:
    if raw is None:
        return None
    part, sep, batch = raw.strip().partition(":")
    if not sep or not part.isdigit() or not batch.isdigit():
        raise _bad("test.failTaskOnce", raw, "expected <partition id>:<batch id>")
    return int(part), int(batch)
