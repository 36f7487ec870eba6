"""The clients' configuration keys, declared once with Kafka's names, defaults and checks.

Callers pass a dict with Kafka's dotted names and/or keyword arguments with underscores
(``linger_ms=5`` is ``linger.ms``). Values may be given as strings (as in a properties file).
Anything unknown or out of range raises :class:`InvalidConfigError` naming the key and value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from appliance.errors import InvalidConfigError

__all__ = ["Key", "PRODUCER_KEYS", "PRODUCER_NO_EFFECT", "CONSUMER_KEYS", "ADMIN_KEYS", "ZK_CONSUMER_KEYS",
           "resolve", "load_properties", "security_of"]

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


_BOOTSTRAP = Key("bootstrap.servers", "str", _UNSET, "host:port[,host:port] of brokers to start from")
_COMMON = (
    _BOOTSTRAP,
    Key("client.id", "str", "appliance", "client id sent in every request header"),
    _i("request.timeout.ms", 30000, "how long to wait for any one answer", 1),
    _i("socket.connection.setup.timeout.ms", 10000, "how long to keep trying to connect to a broker", 1),
    _i("metadata.max.age.ms", 300000, "refresh cached metadata at least this often", 0),
    _i("retry.backoff.ms", 100, "pause before retrying a failed request", 0),
    # TLS to the brokers (client/tls_socket.py); PEM files only, as librdkafka takes them
    Key("security.protocol", "choice", "plaintext", "plaintext or ssl (TLS to every broker)",
        choices=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")),
    Key("ssl.truststore.location", "str", None, "PEM file of the CAs the brokers' certificates are "
        "checked against (else the system's)", aliases=("ssl.ca.location",)),
    Key("ssl.keystore.location", "str", None, "mutual TLS: PEM file with this client's certificate "
        "chain (and key, unless ssl.key.location)", aliases=("ssl.certificate.location",)),
    Key("ssl.key.location", "str", None, "mutual TLS: PEM file of this client's private key"),
    Key("ssl.key.password", "str", None, "password of an encrypted private key"),
    Key("ssl.endpoint.identification.algorithm", "choice", "https",
        "https: the broker's certificate must name the host connected to; none: not checked",
        choices=("https", "none", "")),
    Key("sasl.mechanism", "str", "PLAIN", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
    Key("sasl.username", "str", None, "SASL user name (librdkafka's key)"),
    Key("sasl.password", "str", None, "SASL password (librdkafka's key)"),
    Key("sasl.jaas.config", "str", None, "the Java clients' login line: username=\"...\" password=\"...\""),
    Key("ssl.truststore.password", "str", None, "unused with PEM (accepted for Java clients' files)"),
    Key("ssl.keystore.password", "str", None, "unused with PEM (accepted for Java clients' files)"),
    Key("ssl.truststore.type", "choice", "pem", "PEM only", choices=("pem",)),
    Key("ssl.keystore.type", "choice", "pem", "PEM only", choices=("pem",)),
)

# Producer keys of Kafka's 0.8.2 producer tables that this client accepts but does not act on,
# each with the reason (the producer logs it once when one is set)
PRODUCER_NO_EFFECT: dict[str, str] = {
    "buffer.memory": "the queue is bounded in records (queue.buffering.max.messages), not bytes",
    "reconnect.backoff.ms": "a refused connection is retried every 100 ms until "
                            "socket.connection.setup.timeout.ms",
    "metric.reporters": "the client keeps no metrics registry (callback.handler sees every batch)",
    "metrics.num.samples": "the client keeps no metrics registry",
    "metrics.sample.window.ms": "the client keeps no metrics registry",
}


def _no_effect(name: str, kind: str) -> Key:
    return Key(name, kind, None, "accepted, no effect here: " + PRODUCER_NO_EFFECT[name])


PRODUCER_KEYS: tuple[Key, ...] = (
    replace(_BOOTSTRAP, aliases=("metadata.broker.list",),
            doc=_BOOTSTRAP.doc + " (0.8.2: metadata.broker.list)"),
    Key("client.id", "str", "appliance", "client id sent in every request header"),
    _i("request.timeout.ms", 30000, "the produce request's timeout (how long the broker waits for "
       "the acks, 0.8.2's meaning) and how long to wait for any one answer", 1),
) + _COMMON[3:] + (
    Key("producer.type", "choice", "async", "sync: send() waits for the acknowledgement; async: queue and "
        "send in the background", choices=("sync", "async")),
    Key("acks", "choice", -1, "0: no answer, 1: leader wrote it, -1/all: all in-sync replicas",
        choices=(0, 1, -1), aliases=("request.required.acks",)),
    _i("timeout.ms", None, "the produce request's timeout: how long the broker waits for the acks "
       "(0.8.2's new producer; unset: request.timeout.ms)", 0),
    _i("retries", 5, "resend a batch this many times after a retriable error", 0,
       aliases=("message.send.max.retries",)),
    _i("batch.size", 16384, "send a partition's queue once it holds this many bytes", 1),
    _i("batch.num.messages", None, "send a partition's queue once it holds this many records (0.8.2; "
       "unset: bytes and time alone; set, send() takes its per-record path)", 1),
    _i("linger.ms", 5, "send a partition's queue once its oldest record waited this long", 0,
       aliases=("queue.buffering.max.ms", "queue.time")),
    _i("queue.buffering.max.messages", 100000, "records the async queue holds at most", 1),
    _i("queue.enqueue.timeout.ms", -1, "when the queue is full: 0 raise QueueFull at once, -1 block, "
       ">0 block that long then raise QueueFull", -1),
    Key("block.on.buffer.full", "bool", None, "false: a full queue raises QueueFull at once (as "
        "queue.enqueue.timeout.ms=0, unless that is set); true: block (the default)"),
    Key("compression.type", "choice", "none", "codec of produced batches (0.8.2 also 0-3 for none, "
        "gzip, snappy, lz4)", choices=("none", "gzip", "snappy", "lz4", "zstd"), aliases=("compression.codec",)),
    Key("compressed.topics", "list", None, "compress only batches of these topics (0.8.2); unset: "
        "every topic"),
    _i("topic.metadata.refresh.interval.ms", None, "0.8.2's periodic metadata refresh: replaces "
       "metadata.max.age.ms; negative: never periodically, 0: before every send; also how long a "
       "null key keeps its random partition under kafka.producer.DefaultPartitioner"),
    _i("send.buffer.bytes", None, "SO_SNDBUF of the producer's broker sockets (unset: the OS's)", 1),
    _i("receive.buffer.bytes", None, "SO_RCVBUF of the producer's broker sockets (unset: the OS's)", 1),
    _no_effect("buffer.memory", "int"),
    _no_effect("reconnect.backoff.ms", "int"),
    _no_effect("metric.reporters", "list"),
    _no_effect("metrics.num.samples", "int"),
    _no_effect("metrics.sample.window.ms", "int"),
    Key("enable.idempotence", "bool", False, "InitProducerId + sequence numbers: retries never duplicate"),
    Key("transactional.id", "str", None, "transactions (KIP-98): init_transactions(), begin/commit/abort; "
        "implies enable.idempotence; a new instance with the same id fences the old one"),
    _i("transaction.timeout.ms", 60000, "the coordinator aborts a transaction open longer than this", 1),
    _i("max.in.flight.requests.per.connection", 5, "batches in flight per partition (1 when idempotent)", 1),
    _i("max.request.size", 1048576, "largest record batch the producer builds", 1024),
    _i("max.block.ms", 60000, "how long send() waits for metadata of a new topic", 0,
       aliases=("metadata.fetch.timeout.ms",)),
    Key("allow.auto.create.topics", "bool", True, "ask the broker to create unknown topics"),
    Key("transport", "choice", "tcp", "tcp | ipc (local broker through shared memory) | auto",
        choices=("tcp", "ipc", "auto")),
    Key("shm.name", "str", None, "IPC: the broker's shared-memory name (else found from the port)"),
    Key("log.dir", "str", None, "IPC: a log dir of the local broker (it names its shared memory there)"),
    Key("key.serializer", "object", None, "Encoder for keys (to_bytes(obj) -> bytes), or a Kafka "
        "serializer class name; unset: DefaultEncoder, or serializer.class's when that is set"),
    Key("value.serializer", "object", None, "Encoder for values, or a Kafka serializer class name"),
    Key("key.serializer.class", "object", None, "0.8.2: encoder class for keys (kafka.serializer."
        "StringEncoder, DefaultEncoder, NullEncoder) or an Encoder; unset: serializer.class's"),
    Key("serializer.class", "object", None, "0.8.2: encoder class for values (kafka.serializer."
        "StringEncoder, DefaultEncoder, NullEncoder) or an Encoder; keys too unless "
        "key.serializer(.class) is set"),
    Key("serializer.encoding", "str", "UTF8", "0.8.2: the charset kafka.serializer.StringEncoder uses"),
    Key("partitioner", "object", None, "Partitioner (partition(key, num_partitions)) or callable, "
        "given the encoded key; or a Kafka partitioner class name"),
    Key("partitioner.class", "object", None, "0.8.2: kafka.producer.DefaultPartitioner (abs(Java "
        "hashCode of the key as given) % partitions), kafka.producer.ByteArrayPartitioner, or a "
        "partitioner object as for partitioner"),
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
    Key("isolation.level", "choice", "read_uncommitted", "read_committed: only committed transactions' "
        "records, up to the last stable offset; read_uncommitted: everything written",
        choices=("read_uncommitted", "read_committed")),
    Key("key.deserializer", "object", None, "Decoder for keys (from_bytes(bytes) -> obj)"),
    Key("value.deserializer", "object", None, "Decoder for values"),
)

ADMIN_KEYS: tuple[Key, ...] = _COMMON

# The 0.8.2 high-level (ZooKeeper) consumer's consumer.properties, as the 0.8.2 documentation's
# consumer config table lists them, with what each does in appliance.client.zk_consumer.
ZK_CONSUMER_KEYS: tuple[Key, ...] = (
    Key("group.id", "str", _UNSET, "the consumer group: its registrations, owners and offsets live under "
        "/consumers/<group.id> in ZooKeeper"),
    Key("zookeeper.connect", "str", _UNSET, "host:port[,host:port][/chroot] of the ZooKeeper the brokers "
        "register in; the consumer finds brokers, topics and the other group members there"),
    Key("bootstrap.servers", "str", None, "not used by the ZooKeeper consumer: with zookeeper.connect set, "
        "brokers are found in ZooKeeper (zookeeper.connect takes precedence, said once in the log)"),
    Key("consumer.id", "str", None, "this consumer's id in the group (default <group>_<hostname>-<ms>-<random>, "
        "as Kafka makes it); its threads are <consumer.id>-<n>"),
    Key("client.id", "str", None, "client id sent in every request header (default: the group.id)"),
    _i("socket.timeout.ms", 30000, "how long a fetch or offset request waits for the broker's answer, "
       "on top of fetch.wait.max.ms", 1),
    _i("socket.receive.buffer.bytes", 65536, "SO_RCVBUF of the connections to the brokers (-1: the OS default)", -1),
    _i("fetch.message.max.bytes", 1048576, "bytes fetched per partition per request; also the most one "
       "queued chunk holds", 1),
    _i("num.consumer.fetchers", 1, "accepted, no effect here: one fetcher thread serves all leaders (it sends "
       "to every leader at once and waits for the answers together)", 1),
    Key("auto.commit.enable", "bool", True, "commit the consumed offsets every auto.commit.interval.ms "
        "(and at rebalance and shutdown)"),
    _i("auto.commit.interval.ms", 60000, "how often auto-commit runs", 1),
    _i("queued.max.message.chunks", 10, "fetched chunks each stream may hold unread; a partition is not "
       "fetched while its stream's queue is full", 1),
    _i("rebalance.max.retries", 4, "rebalance attempts (a claim that meets another owner's node is "
       "retried) before ConsumerRebalanceFailed", 1),
    _i("fetch.min.bytes", 1, "the broker answers a fetch once it has this many bytes", 0),
    _i("fetch.wait.max.ms", 100, "... or after this long", 0),
    _i("rebalance.backoff.ms", 2000, "pause between rebalance attempts", 0),
    _i("refresh.leader.backoff.ms", 200, "pause before looking up a partition's leader again after "
       "NOT_LEADER or a broken connection", 0),
    Key("auto.offset.reset", "choice", "largest", "where to start without a committed offset or after "
        "OFFSET_OUT_OF_RANGE: smallest (= earliest) or largest (= latest)",
        choices=("smallest", "largest", "earliest", "latest")),
    _i("consumer.timeout.ms", -1, "a stream's iterator raises ConsumerTimeout after this long without a "
       "message (-1: wait forever)", -1),
    Key("exclude.internal.topics", "bool", True, "a whitelist/blacklist never matches internal topics "
        "(__consumer_offsets)"),
    Key("partition.assignment.strategy", "choice", "range", "range: per topic, consecutive partitions to the "
        "sorted thread ids; roundrobin: all partitions dealt to the sorted thread ids in turn",
        choices=("range", "roundrobin")),
    _i("zookeeper.session.timeout.ms", 6000, "the ZooKeeper session timeout: a consumer silent this long "
       "loses its registration and owner nodes, and the group rebalances", 1),
    _i("zookeeper.connection.timeout.ms", 6000, "how long to wait for ZooKeeper at start before failing "
       "with ZooKeeperUnreachable", 1),
    _i("zookeeper.sync.time.ms", 2000, "accepted, no effect here: it tuned the ZooKeeper follower lag Kafka's "
       "ZkClient tolerated; kazoo reads from whichever server it is connected to", 0),
    Key("offsets.storage", "choice", "zookeeper", "where offsets are committed and read: zookeeper "
        "(/consumers/<group>/offsets/<topic>/<partition>) or kafka (OffsetCommit to the group coordinator)",
        choices=("zookeeper", "kafka")),
    _i("offsets.channel.backoff.ms", 1000, "pause before retrying an offset commit/fetch or finding the "
       "coordinator again", 0),
    _i("offsets.channel.socket.timeout.ms", 10000, "how long an OffsetCommit, OffsetFetch or FindCoordinator "
       "waits for its answer", 1),
    _i("offsets.commit.max.retries", 5, "retries of a failed commit at shutdown (auto-commit just tries "
       "again next interval)", 0),
    Key("dual.commit.enabled", "bool", True, "with offsets.storage=kafka, commit to ZooKeeper too, and read "
        "the larger of the two offsets (the migration from ZooKeeper to Kafka)"),
)


_CODEC_NUMBERS = {"0": "none", "1": "gzip", "2": "snappy", "3": "lz4"}


def load_properties(path: str) -> dict[str, str]:
    """A client ``.properties`` file (e.g. 0.8.2's producer.properties) as a config dict.
    Raises OSError."""
    from appliance.config import parse_properties

    with open(path, encoding="utf-8") as f:
        return parse_properties(f.read())


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
        if not items and k.default is None:  # compressed.topics= (empty) in a properties file
            return None
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
        if k.name == "compression.type" and v in _CODEC_NUMBERS:  # 0.8.2's compression.codec=1
            v = _CODEC_NUMBERS[v]
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


def security_of(c: Mapping[str, Any]) -> Any:
    """The client.security.Security a resolved client config asks for, or None for plaintext.
    Raises InvalidConfigError naming the key whose file or value cannot be used."""
    proto = c.get("security.protocol", "plaintext")
    if proto == "plaintext":
        return None
    from appliance.client.security import Security
    tls = _tls_context(c) if proto in ("ssl", "sasl_ssl") else None
    sasl = None
    if proto in ("sasl_plaintext", "sasl_ssl"):
        mechanism = str(c.get("sasl.mechanism") or "PLAIN").upper()
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise InvalidConfigError(f"config sasl.mechanism={mechanism!r}: expected PLAIN, "
                                     "SCRAM-SHA-256 or SCRAM-SHA-512")
        user, password = c.get("sasl.username"), c.get("sasl.password")
        if (user is None or password is None) and c.get("sasl.jaas.config"):
            from appliance.security.sasl_client import login_of
            try:
                user, password = login_of(c["sasl.jaas.config"])
            except ValueError as e:
                raise InvalidConfigError(f"config sasl.jaas.config: {e}") from None
        if user is None or password is None:
            raise InvalidConfigError(f"config security.protocol={proto.upper()}: sasl.username and "
                                     "sasl.password (or sasl.jaas.config) are required")
        sasl = (mechanism, user, password)
    return Security(tls, sasl)


def _tls_context(c: Mapping[str, Any]) -> Any:
    import ssl

    from appliance.client.tls_socket import client_tls_context
    for key in ("ssl.truststore.location", "ssl.keystore.location", "ssl.key.location"):
        path = c.get(key)
        if path is not None:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                raise InvalidConfigError(f"config {key}={path!r}: {e.strerror}") from None
    try:
        return client_tls_context(c.get("ssl.truststore.location"), c.get("ssl.keystore.location"),
                                  c.get("ssl.key.location"), c.get("ssl.key.password"),
                                  check_hostname=c.get("ssl.endpoint.identification.algorithm") == "https")
    except ssl.SSLError as e:
        raise InvalidConfigError(f"config ssl.keystore.location={c.get('ssl.keystore.location')!r}: "
                                 f"{e.reason or e} (not PEM, a key that does not match, or a wrong "
                                 "ssl.key.password)") from None
