"""The clients' configuration keys, declared once with Kafka's names, defaults and checks.

Callers pass a dict with Kafka's dotted names and/or keyword arguments with underscores
(``linger_ms=5`` is ``linger.ms``). Values may be given as strings (as in a properties file).
Anything unknown or out of range raises :class:`InvalidConfigError` naming the key and value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from appliance.errors import InvalidConfigError

__all__ = ["Key", "PRODUCER_KEYS", "CONSUMER_KEYS", "ADMIN_KEYS", "resolve"]

_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    kind: str  # int | bool | str | choice | object | list
    default: Any
    doc: str
    lo: int | None = None
    hi: int | None = None
    choices: tuple | None = None
    aliases: tuple[str, ...] = ()


def _i(name: str, default: int | None, doc: str, lo: int | None = None, hi: int | None = None,
       aliases: tuple[str, ...] = ()) -> Key:
    return Key(name, "int", default, doc, lo, hi, aliases=aliases)


_COMMON = (
    Key("bootstrap.servers", "str", _UNSET, "host:port[,host:port] of brokers to start from"),
    Key("client.id", "str", "appliance", "client id sent in every request header"),
    _i("request.timeout.ms", 30000, "how long to wait for any one answer", 1),
    _i("socket.connection.setup.timeout.ms", 10000, "how long to keep trying to connect to a broker", 1),
    _i("metadata.max.age.ms", 300000, "refresh cached metadata at least this often", 0),
    _i("retry.backoff.ms", 100, "pause before retrying a failed request", 0),
)

PRODUCER_KEYS: tuple[Key, ...] = _COMMON + (
    Key("producer.type", "choice", "async", "sync: send() waits for the acknowledgement; async: queue and "
        "send in the background", choices=("sync", "async")),
    Key("acks", "choice", -1, "0: no answer, 1: leader wrote it, -1/all: all in-sync replicas",
        choices=(0, 1, -1), aliases=("request.required.acks",)),
    _i("retries", 5, "resend a batch this many times after a retriable error", 0,
       aliases=("message.send.max.retries",)),
    _i("batch.size", 16384, "send a partition's queue once it holds this many bytes", 1),
    _i("linger.ms", 5, "send a partition's queue once its oldest record waited this long", 0,
       aliases=("queue.buffering.max.ms", "queue.time")),
    _i("queue.buffering.max.messages", 100000, "records the async queue holds at most", 1),
    _i("queue.enqueue.timeout.ms", -1, "when the queue is full: 0 raise QueueFull at once, -1 block, "
       ">0 block that long then raise QueueFull", -1),
    Key("compression.type", "choice", "none", "codec of produced batches",
        choices=("none", "gzip", "snappy", "lz4", "zstd"), aliases=("compression.codec",)),
    Key("enable.idempotence", "bool", False, "InitProducerId + sequence numbers: retries never duplicate"),
    _i("max.in.flight.requests.per.connection", 5, "batches in flight per partition (1 when idempotent)", 1),
    _i("max.request.size", 1048576, "largest record batch the producer builds", 1024),
    _i("max.block.ms", 60000, "how long send() waits for metadata of a new topic", 0),
    Key("allow.auto.create.topics", "bool", True, "ask the broker to create unknown topics"),
    Key("transport", "choice", "tcp", "tcp | ipc (local broker through shared memory) | auto",
        choices=("tcp", "ipc", "auto")),
    Key("shm.name", "str", None, "IPC: the broker's shared-memory name (else found from the port)"),
    Key("log.dir", "str", None, "IPC: a log dir of the local broker (it names its shared memory there)"),
    Key("key.serializer", "object", None, "Encoder for keys (to_bytes(obj) -> bytes)", aliases=("key.serializer.class",)),
    Key("value.serializer", "object", None, "Encoder for values", aliases=("serializer.class",)),
    Key("partitioner", "object", None, "Partitioner (partition(key, num_partitions)) or callable",
        aliases=("partitioner.class",)),
    Key("callback.handler", "object", None, "CallbackHandler notified at each pipeline stage"),
)

CONSUMER_KEYS: tuple[Key, ...] = _COMMON + (
    Key("group.id", "str", None, "consumer group; None for assign()-only use"),
    Key("enable.auto.commit", "bool", True, "commit positions in the background", aliases=("auto.commit.enable",)),
    _i("auto.commit.interval.ms", 5000, "how often auto-commit runs", 1),
    Key("auto.offset.reset", "choice", "latest", "where to start without a committed offset",
        choices=("earliest", "latest", "none")),
    _i("session.timeout.ms", 10000, "the coordinator drops a member silent this long", 1),
    _i("heartbeat.interval.ms", 3000, "heartbeat period", 1),
    _i("max.poll.interval.ms", 300000, "rebalance timeout: how long members have to rejoin", 1),
    Key("partition.assignment.strategy", "list", ("range",), "assignors, preferred first: range, roundrobin, sticky"),
    _i("fetch.min.bytes", 1, "the broker waits for this many bytes", 0),
    _i("fetch.max.wait.ms", 500, "... or this long", 0),
    _i("fetch.max.bytes", 52428800, "bytes per fetch response", 1),
    _i("max.partition.fetch.bytes", 1048576, "bytes per partition per fetch", 1),
    _i("max.poll.records", 500, "records one poll() returns at most", 1),
    Key("check.crcs", "bool", True, "verify batch CRCs"),
    Key("key.deserializer", "object", None, "Decoder for keys (from_bytes(bytes) -> obj)"),
    Key("value.deserializer", "object", None, "Decoder for values"),
)

ADMIN_KEYS: tuple[Key, ...] = _COMMON


def _coerce(k: Key, value: Any) -> Any:
    def bad(why: str) -> InvalidConfigError:
        return InvalidConfigError(f"config {k.name}={value!r}: {why}")

    if k.kind == "object" or value is None and (k.default is None):
        return value
    if k.kind == "int":
        if isinstance(value, bool):
            raise bad("expected an integer")
        try:
            v = int(value)
        except (TypeError, ValueError):
            raise bad("expected an integer") from None
        if k.lo is not None and v < k.lo:
            raise bad(f"must be at least {k.lo}")
        if k.hi is not None and v > k.hi:
            raise bad(f"must be at most {k.hi}")
        return v
    if k.kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad("expected true or false")
    if k.kind == "str":
        if not isinstance(value, str) or not value:
            raise bad("expected a non-empty string")
        return value
    if k.kind == "list":
        items = value.split(",") if isinstance(value, str) else list(value)
        items = tuple(str(i).strip() for i in items if str(i).strip())
        if not items:
            raise bad("expected at least one name")
        return items
    # choice
    v = value
    if k.name == "acks" or k.name == "request.required.acks":
        v = -1 if str(value).lower() == "all" else value
        try:
            v = int(v)
        except (TypeError, ValueError):
            raise bad("expected 0, 1, -1 or all") from None
    elif isinstance(v, str):
        v = v.lower()
    if v not in k.choices:
        raise bad("expected one of " + ", ".join(map(str, k.choices)))
    return v


def resolve(keys: tuple[Key, ...], config: Mapping[str, Any] | None, kwargs: Mapping[str, Any],
            checks: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Merge ``config`` and ``kwargs`` (underscores read as dots) over the defaults.

    Raises InvalidConfigError naming the key and value for unknown keys, bad values and a
    missing bootstrap.servers."""
    by_name: dict[str, Key] = {}
    for k in keys:
        by_name[k.name] = k
        for a in k.aliases:
            by_name[a] = k
    out: dict[str, Any] = {}
    given = dict(config or {})
    given.update({name.replace("_", "."): v for name, v in kwargs.items()})
    for name, value in given.items():
        k = by_name.get(name)
        if k is None:
            raise InvalidConfigError(f"config {name}={value!r}: unknown key")
        out[k.name] = _coerce(k, value)
    for k in keys:
        if k.name not in out:
            if k.default is _UNSET:
                raise InvalidConfigError(f"config {k.name} is required")
            out[k.name] = k.default
    if checks is not None:
        checks(out)
    return out
