"""``server.properties`` with Kafka's key names: every key declared once, typed and validated.

The broker table (:data:`BROKER_KEYS`) and the topic table (:data:`TOPIC_KEYS`) are the only
places a key, its type, its default, its validator and its meaning are written. A topic key names
the broker keys it defaults from (Kafka's ``LogConfig`` synonyms), in precedence order, with the
unit factor that turns the broker value into the topic value (``log.retention.hours`` -> ms).

Keys marked "ours" are not Kafka's; they tune this appliance (write-back of page cache, shared
memory naming).

Thread-safety: :class:`BrokerConfig` and :class:`TopicConfig` are immutable after construction and
may be shared freely.
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from appliance.errors import InvalidConfigError
from appliance.records.format_version import check_format_version

__all__ = [
    "ConfigError", "ConfigKey", "TopicKey", "BROKER_KEYS", "TOPIC_KEYS", "BrokerConfig",
    "TopicConfig", "parse_properties", "render_server_properties", "validate_topic_name",
    "LONG_MAX", "INT_MAX", "NO_EFFECT", "KAFKA_ONLY_KEYS", "parse_ip_overrides",
    "parse_cpu_list", "Endpoint", "PLAINTEXT", "SECURITY_PROTOCOLS", "SERVED_PROTOCOLS",
    "parse_protocol_map",
]


_CPU_ITEM = re.compile(r"(\d{1,4})(?:-(\d{1,4}))?")


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPUs of a Linux CPU list (``taskset -c`` / ``Cpus_allowed_list`` syntax): ``"1"``,
    ``"0-3,6"``; empty means no restriction (an empty set). Raises ValueError for bad syntax or
    a range that runs backwards."""
    text = text.strip()
    if not text:
        return frozenset()
    cpus: set[int] = set()
    for item in text.split(","):
        m = _CPU_ITEM.fullmatch(item.strip())
        if m is None:
            raise ValueError(f"{item.strip()!r} is not a CPU number or a range like 0-3")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"range {item.strip()!r} runs backwards")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
DOUBLE_MAX = 1.7976931348623157e308


class ConfigError(InvalidConfigError):
    """A configuration value that cannot be used; ``str(e)`` names the key and the value.

    Attributes: ``key``, ``value`` (the raw string or object given), ``reason``.
    """

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__(f"Invalid value {value!r} for configuration {key}: {reason}")


# ---------------------------------------------------------------------------------------------
# Types: each parses a string (or passes through an already-typed value) and checks its range.

def _parse_int(raw: object, lo: int, hi: int, what: str) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"expected {what}, got a boolean")
    if isinstance(raw, int):
        v = raw
    else:
        s = str(raw).strip()
        if not re.fullmatch(r"[+-]?\d+", s):
            raise ValueError(f"expected {what}")
        v = int(s)
    if not lo <= v <= hi:
        raise ValueError(f"out of range for {what} [{lo}, {hi}]")
    return v


def _parse_double(raw: object) -> float:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    try:
        return float(str(raw).strip())
    except ValueError:
        raise ValueError("expected a number") from None


def _parse_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    s = str(raw).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError("expected true or false")


def _parse_list(raw: object) -> list[str]:
    if isinstance(raw, list | tuple):
        return [str(x).strip() for x in raw if str(x).strip()]
    s = str(raw).strip()
    return [p.strip() for p in s.split(",") if p.strip()] if s else []


PARSERS: dict[str, Callable[[object], Any]] = {
    "int": lambda r: _parse_int(r, INT_MIN, INT_MAX, "a 32-bit integer"),
    "long": lambda r: _parse_int(r, LONG_MIN, LONG_MAX, "a 64-bit integer"),
    "double": _parse_double,
    "bool": _parse_bool,
    "string": lambda r: str(r).strip(),
    "list": _parse_list,
}


# ---------------------------------------------------------------------------------------------
# Validators: return None when fine, else the reason.

Validator = Callable[[Any], str | None]


def at_least(lo: float) -> Validator:
    def check(v: Any) -> str | None:
        return None if v >= lo else f"must be at least {lo}"
    check.__doc__ = f"[{lo},...]"
    return check


def between(lo: float, hi: float) -> Validator:
    def check(v: Any) -> str | None:
        return None if lo <= v <= hi else f"must be between {lo} and {hi}"
    check.__doc__ = f"[{lo},...,{hi}]"
    return check


def one_of(*choices: str, case_insensitive: bool = False) -> Validator:
    def check(v: Any) -> str | None:
        vals = v if isinstance(v, list) else [v]
        norm = (lambda x: x.lower()) if case_insensitive else (lambda x: x)
        allowed = {norm(c) for c in choices}
        bad = [x for x in vals if norm(x) not in allowed]
        return f"must be one of {', '.join(choices)}" if bad else None
    check.__doc__ = "[" + ", ".join(choices) + "]"
    return check


def _minus_one_or_positive(v: int) -> str | None:
    return None if v == -1 or v > 0 else "must be -1 (no limit) or positive"


def parse_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: "host:n,host:n" -> {IP address: n}. Host names
    are resolved (every address they have). Raises ValueError saying what is wrong."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{item!r} is not host:count")
        try:
            addrs = {str(ipaddress.ip_address(host))}
        except ValueError:
            try:
                addrs = {str(ipaddress.ip_address(ai[4][0].split("%")[0]))
                         for ai in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
            except OSError as e:
                raise ValueError(f"host {host!r} does not resolve: {e}") from None
        for addr in addrs:
            out[addr] = int(count)
    return out


def parses(parse: Callable[[str], Any]) -> Validator:
    """A validator from a parser: its ValueError's message is the reason."""
    def check(v: str) -> str | None:
        try:
            parse(v)
        except ValueError as e:
            return str(e)
        return None
    return check


_ip_overrides = parses(parse_ip_overrides)


def _listener_list(v: list[str]) -> str | None:
    for item in v:
        m = _LISTENER_RE.fullmatch(item)
        if m is None:
            return f"listener {item!r} is not NAME://host:port"
        if int(m.group(3)) > 65535:
            return f"listener {item!r}: port {m.group(3)} is not 0-65535"
    return None


# listener.name.<listener>.<key>, and listener.name.<listener>.<mechanism>.sasl.jaas.config
_LISTENER_PREFIXED = re.compile(r"listener\.name\.[a-z0-9_]+\.(?:(?:plain|scram-sha-256|scram-sha-512)\.)?"
                                r"(?:sasl\.jaas\.config|ssl\.[a-z.]+|sasl\.enabled\.mechanisms)")
_LISTENER_RE = re.compile(r"([A-Za-z0-9_]+)://(\[[0-9a-fA-F:.]*\]|[^:/\s]*):(\d{1,5})")

# Kafka's SecurityProtocol names, every one served (security/tls.py, security/sasl.py);
# check_served stays as the one place a protocol not built would be refused at start-up.
PLAINTEXT = "PLAINTEXT"
SECURITY_PROTOCOLS = (PLAINTEXT, "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED_PROTOCOLS = frozenset(SECURITY_PROTOCOLS)
_DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: "NAME:PROTOCOL,..." -> {NAME: PROTOCOL}, names
    upper-cased (Kafka normalises listener names so). Raises ValueError naming the entry."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, proto = (x.strip() for x in item.partition(":"))
        if not sep or not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ValueError(f"entry {item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if proto.upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"entry {item!r}: unknown security protocol {proto!r} "
                             f"(one of {', '.join(SECURITY_PROTOCOLS)})")
        if name.upper() in out:
            raise ValueError(f"listener name {name.upper()} is mapped twice")
        out[name.upper()] = proto.upper()
    return out


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: its name (upper case), host (empty: every interface), port and the
    security protocol its name maps to. ``str()`` is Kafka's "NAME://host:port"."""

    listener: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class ConfigKey:
    """One broker key: Kafka's name, type, default (None = unset), validator, one-line doc."""

    name: str
    type: str
    default: Any
    doc: str
    validator: Validator | None = None
    ours: bool = False

    def parse(self, raw: object) -> Any:
        """Typed value of ``raw``. Raises ConfigError naming the key and the raw value."""
        try:
            v = PARSERS[self.type](raw)
        except ValueError as e:
            raise ConfigError(self.name, raw, str(e)) from None
        if self.validator is not None:
            reason = self.validator(v)
            if reason:
                raise ConfigError(self.name, raw, reason)
        return v


@dataclass(frozen=True)
class TopicKey(ConfigKey):
    """A topic-level key; ``synonyms`` are (broker key, unit factor) pairs, first set one wins."""

    synonyms: tuple[tuple[str, int], ...] = field(default=())


H = 3_600_000  # ms per hour
M = 60_000     # ms per minute
_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TS_TYPES = ("CreateTime", "LogAppendTime")

# fmt: off
BROKER_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("broker.id", "int", 0, "Id of this broker in the cluster.", at_least(0)),
    ConfigKey("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"], "Addresses to listen on, NAME://host:port, comma separated.", _listener_list),
    ConfigKey("advertised.listeners", "list", None, "Addresses given to clients in metadata and registered for other brokers, NAME://host:port per listener name; a listener left out is advertised as it listens.", _listener_list),
    ConfigKey("listener.security.protocol.map", "string", _DEFAULT_PROTOCOL_MAP, "Security protocol of each listener name, NAME:PROTOCOL comma separated (PLAINTEXT and SSL are served so far).", parses(parse_protocol_map)),
    ConfigKey("inter.broker.listener.name", "string", None, "Listener other brokers connect to (controller requests, replica fetches); default: the first listener whose protocol is security.inter.broker.protocol."),
    ConfigKey("security.inter.broker.protocol", "string", PLAINTEXT, "Security protocol between brokers when inter.broker.listener.name is not set.", one_of(*SECURITY_PROTOCOLS)),
    # TLS (SSL and SASL_SSL listeners, and this broker's connections to the others on such a
    # listener): Kafka's names; PEM files or PEM text only (security/tls.py)
    ConfigKey("ssl.keystore.type", "string", "PEM", "Format of the key store: PEM (JKS and PKCS12 are Java's; convert them with openssl).", one_of("PEM", case_insensitive=True)),
    ConfigKey("ssl.keystore.location", "string", None, "PEM file holding this broker's private key and certificate chain."),
    ConfigKey("ssl.keystore.password", "string", None, "Unused with PEM (accepted for Kafka's configs)."),
    ConfigKey("ssl.keystore.certificate.chain", "string", None, "This broker's certificate chain as PEM text (with ssl.keystore.key, instead of ssl.keystore.location)."),
    ConfigKey("ssl.keystore.key", "string", None, "This broker's private key as PEM text."),
    ConfigKey("ssl.key.password", "string", None, "Password of an encrypted private key."),
    ConfigKey("ssl.truststore.type", "string", "PEM", "Format of the trust store: PEM.", one_of("PEM", case_insensitive=True)),
    ConfigKey("ssl.truststore.location", "string", None, "PEM file of the certificates (CAs) this broker trusts for client and broker certificates."),
    ConfigKey("ssl.truststore.password", "string", None, "Unused with PEM (accepted for Kafka's configs)."),
    ConfigKey("ssl.truststore.certificates", "string", None, "Trusted certificates as PEM text (instead of ssl.truststore.location)."),
    ConfigKey("ssl.client.auth", "string", "none", "Client certificates: none, requested (checked when given) or required.", one_of("none", "requested", "required", case_insensitive=True)),
    ConfigKey("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], "TLS versions accepted.", one_of("TLSv1.2", "TLSv1.3")),
    ConfigKey("ssl.protocol", "string", "TLSv1.3", "Kafka's SSLContext protocol name; the versions are ssl.enabled.protocols."),
    ConfigKey("ssl.cipher.suites", "list", None, "TLS 1.2 cipher suites (OpenSSL names); empty = OpenSSL's defaults."),
    ConfigKey("ssl.endpoint.identification.algorithm", "string", "https", "https: a broker checks the other broker's certificate names the host it connects to; empty: no check."),
    ConfigKey("ssl.principal.mapping.rules", "string", "DEFAULT", "Client certificate subject -> principal name: RULE:pattern/replacement/[LU], ..., DEFAULT (the whole RFC 2253 name)."),
    # SASL (SASL_PLAINTEXT and SASL_SSL listeners): security/sasl.py, security/credentials.py
    ConfigKey("sasl.enabled.mechanisms", "list", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], "SASL mechanisms the SASL listeners accept (Kafka's default GSSAPI is not built).", one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    ConfigKey("sasl.mechanism.inter.broker.protocol", "string", "PLAIN", "Mechanism this broker logs in to the others with on a SASL inter-broker listener.", one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    ConfigKey("sasl.jaas.config", "string", None, "PlainLoginModule line: username/password this broker logs in with, user_<name>=\"<password>\" per PLAIN user; listener.name.<listener>.<mechanism>.sasl.jaas.config per listener."),
    ConfigKey("connections.max.reauth.ms", "long", 0, "KIP-368: a SASL session lasts this long; the client must re-authenticate before (0: for ever).", at_least(0)),
    # ACLs: security/acl.py (Kafka's AclAuthorizer semantics), broker/authorization.py
    ConfigKey("authorizer.class.name", "string", "", "Kafka's authorizer class turns ACLs on: kafka.security.authorizer.AclAuthorizer (or the older kafka.security.auth.SimpleAclAuthorizer); empty: every request is allowed.", one_of("", "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")),
    ConfigKey("super.users", "string", "", "Principals every request is allowed for, User:a;User:b."),
    ConfigKey("allow.everyone.if.no.acl.found", "bool", False, "Allow a request on a resource no ACL names."),
    # Kafka 0.8's names, mapped onto listeners / advertised.listeners as Kafka 0.9-2.x does (see
    # _apply_twins); given together with their modern twin they must agree.
    ConfigKey("port", "int", 9092, "0.8 name: port to listen on when listeners is not set.", between(0, 65535)),
    ConfigKey("host.name", "string", "", "0.8 name: host to bind when listeners is not set (empty: all interfaces).", None),
    ConfigKey("advertised.host.name", "string", None, "0.8 name: host given to clients when advertised.listeners is not set (default: host.name)."),
    ConfigKey("advertised.port", "int", None, "0.8 name: port given to clients when advertised.listeners is not set (default: port).", between(0, 65535)),
    ConfigKey("log.dirs", "list", None, "Directories holding the partition logs (one disk each); wins over log.dir."),
    ConfigKey("log.dir", "string", "./data", "Log directory used when log.dirs is not set."),
    # Kafka's default is 3; the appliance's reference machine has 2 cores, and a network worker
    # per core keeps both busy without a third process stealing time from the disk worker.
    ConfigKey("num.network.threads", "int", 2, "Network worker processes (Kafka: threads; default 3 there, 2 here for 2-core machines).", at_least(1)),
    ConfigKey("num.io.threads", "int", 8, "Kafka's request handler threads; kept for compatibility (disk workers are one per log dir).", at_least(1)),
    ConfigKey("num.partitions", "int", 1, "Default partition count of auto-created topics.", at_least(1)),
    ConfigKey("default.replication.factor", "int", 1, "Default replication factor of auto-created topics.", at_least(1)),
    ConfigKey("auto.create.topics.enable", "bool", True, "Create a topic on first metadata/produce request naming it."),
    ConfigKey("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    ConfigKey("message.max.bytes", "int", 1048588, "Largest record batch accepted (after compression).", at_least(0)),
    ConfigKey("socket.request.max.bytes", "int", 104857600, "Largest request accepted on a socket.", at_least(1)),
    # Kafka's default is 100 KiB; 4 MiB measured fewer writability wake-ups per large fetch
    # response (it was hard-coded in the network worker before it became this key's default).
    ConfigKey("socket.send.buffer.bytes", "int", 4194304, "SO_SNDBUF of client sockets (-1: OS default; Kafka's default is 102400).", at_least(-1)),
    # Kafka's default is 100 KiB; a fixed SO_RCVBUF turns off Linux's receive autotuning, which
    # lets a large produce stream grow the window well past that.
    ConfigKey("socket.receive.buffer.bytes", "int", -1, "SO_RCVBUF of client sockets (-1: OS default with autotuning; Kafka's default is 102400).", at_least(-1)),
    # Kafka's names and defaults (no limit); enforced across every network worker of the broker
    ConfigKey("max.connections", "int", INT_MAX, "Connections the broker holds at once; past it, new ones wait to be accepted until one closes.", at_least(0)),
    ConfigKey("max.connections.per.ip", "int", INT_MAX, "Connections from one address; one more is closed at once.", at_least(0)),
    ConfigKey("max.connections.per.ip.overrides", "string", "", "Per-address limits, host:n,host:n (hosts are resolved at start).", _ip_overrides),
    # Kafka's is per broker (one memory pool); ours is per network worker, each its own process
    ConfigKey("queued.max.request.bytes", "long", -1, "Bytes of requests a network worker holds read but unanswered before it stops reading sockets (-1: no limit).", _minus_one_or_positive),
    # Kafka's is per broker (its request queue); ours per network worker, and a connection
    # with no request waiting is still read (appliance/broker/request_queue.py says why)
    ConfigKey("queued.max.requests", "int", 500, "Requests a network worker holds read but unanswered before it stops reading the connections that have one waiting.", at_least(1)),
    ConfigKey("connections.max.idle.ms", "long", 600000, "Close a client connection after this long with nothing read or written and no request waiting (-1: never).", _minus_one_or_positive),
    ConfigKey("fetch.max.bytes", "int", 57671680, "Largest fetch response the broker builds, whatever a request asks for (a first batch larger than it still goes out whole).", at_least(1024)),
    ConfigKey("log.segment.bytes", "int", 1073741824, "Segment file size before a roll.", at_least(14)),
    ConfigKey("log.roll.ms", "long", None, "Time before a segment is rolled; wins over log.roll.hours."),
    ConfigKey("log.roll.hours", "int", 168, "Time before a segment is rolled, in hours.", at_least(1)),
    ConfigKey("log.roll.jitter.ms", "long", None, "Largest random jitter subtracted from the roll time; wins over hours."),
    ConfigKey("log.roll.jitter.hours", "int", 0, "Largest random jitter subtracted from the roll time, in hours.", at_least(0)),
    ConfigKey("log.retention.ms", "long", None, "Time a segment is kept (-1: forever); wins over minutes and hours.", at_least(-1)),
    ConfigKey("log.retention.minutes", "int", None, "Time a segment is kept, minutes; wins over hours.", at_least(-1)),
    ConfigKey("log.retention.hours", "int", 168, "Time a segment is kept, hours.", at_least(-1)),
    ConfigKey("log.retention.bytes", "long", -1, "Largest partition size before old segments are deleted (-1: no limit)."),
    ConfigKey("log.retention.check.interval.ms", "long", 300000, "How often retention is applied.", at_least(1)),
    ConfigKey("log.cleanup.policy", "list", ["delete"], "delete and/or compact.", one_of("delete", "compact")),
    ConfigKey("log.index.size.max.bytes", "int", 10485760, "Preallocated size of each index file.", at_least(4)),
    ConfigKey("log.index.interval.bytes", "int", 4096, "Log bytes between two offset index entries.", at_least(0)),
    ConfigKey("log.flush.interval.messages", "long", LONG_MAX, "Messages appended before a forced fsync.", at_least(1)),
    ConfigKey("log.flush.interval.ms", "long", None, "Time a message may stay unflushed; defaults to log.flush.scheduler.interval.ms.", at_least(0)),
    ConfigKey("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the log flusher applies the time rule (log.flush.interval.ms, a topic's flush.ms) to every partition; at the default, as in Kafka, never (log.flush.interval.messages is checked at each append).", at_least(0)),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", "int", 60000, "How often the recovery point checkpoint is written.", at_least(0)),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", "long", 5000, "How often each log dir's high watermark checkpoint (replication-offset-checkpoint) is written.", at_least(1)),
    ConfigKey("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, "How often the log start offset checkpoint is written.", at_least(0)),
    ConfigKey("log.segment.delete.delay.ms", "long", 60000, "Delay before a .deleted segment is removed from disk.", at_least(0)),
    ConfigKey("log.preallocate", "bool", False, "Reserve disk blocks ahead of the active segment's end on every append: ours reserves 8 MiB past the end and leaves the file's size unchanged (Kafka's reserves whole segments). When off, blocks are reserved only ahead of appends of 256 KiB or more, and given back when the segment idles."),
    ConfigKey("log.message.timestamp.type", "string", "CreateTime", "CreateTime or LogAppendTime.", one_of(*_TS_TYPES)),
    ConfigKey("log.message.timestamp.difference.max.ms", "long", LONG_MAX, "Largest allowed |timestamp - broker time| for CreateTime.", at_least(0)),
    ConfigKey("log.message.downconversion.enable", "bool", True, "Down-convert batches for old fetch versions."),
    # Kafka 0.10-2.x behaviour: a pre-0.11 version stores produce as magic 0/1 message sets
    # (storage/legacy_append.py), which refuse headers and idempotent/transactional producers
    ConfigKey("log.message.format.version", "string", "3.0-IV1", "Message format of stored data, Kafka's versions 0.8.0 ... 3.0: before 0.10.0-IV1 magic 0 message sets, before 0.11 magic 1 (no headers, no idempotent or transactional producers: UNSUPPORTED_FOR_MESSAGE_FORMAT), RecordBatch v2 from 0.11.", check_format_version),
    # Kafka's throttle of the copy into a future replica (AlterReplicaLogDirs); no limit by default
    ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, "Bytes per second a disk worker copies into a partition moving onto its log dir.", at_least(1)),
    ConfigKey("log.cleaner.enable", "bool", True, "Run the log cleaner (needed for compacted topics)."),
    # Kafka's cleaner threads; here one disk worker per log dir steps its passes in turn
    ConfigKey("log.cleaner.threads", "int", 1, "Partitions of a log dir in a cleaning pass at once, their steps taking turns in the disk worker (Kafka: cleaner threads); 0 turns the cleaner off.", at_least(0)),
    ConfigKey("log.cleaner.io.max.bytes.per.second", "double", DOUBLE_MAX, "Cleaner I/O throttle."),
    ConfigKey("log.cleaner.dedupe.buffer.size", "long", 134217728, "Memory for the cleaner's offset maps of a log dir, split between its log.cleaner.threads passes.", at_least(0)),
    ConfigKey("log.cleaner.io.buffer.size", "int", 524288, "Bytes the cleaner reads from a segment at a time, split between its log.cleaner.threads passes (at least 4 KiB each).", at_least(0)),
    ConfigKey("log.cleaner.io.buffer.load.factor", "double", 0.9, "How full the cleaner's offset map may get: it holds log.cleaner.dedupe.buffer.size / 24 bytes per entry times this many keys.", between(0, 1)),
    ConfigKey("log.cleaner.backoff.ms", "long", 15000, "Cleaner sleep when there is nothing to clean.", at_least(0)),
    ConfigKey("log.cleaner.min.cleanable.ratio", "double", 0.5, "Dirty ratio above which a log is cleaned.", between(0, 1)),
    ConfigKey("log.cleaner.delete.retention.ms", "long", 86400000, "How long tombstones are kept in compacted topics.", at_least(0)),
    ConfigKey("log.cleaner.min.compaction.lag.ms", "long", 0, "Minimum age of a message before it may be compacted.", at_least(0)),
    ConfigKey("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, "Maximum age before a message must be compacted.", at_least(1)),
    ConfigKey("compression.type", "string", "producer", "Compression of stored batches; producer keeps the producer's.", one_of(*_COMPRESSION)),
    ConfigKey("num.recovery.threads.per.data.dir", "int", 8, "Threads per log dir (in its disk worker) opening and recovering partitions at start: the time is mostly disk waits.", at_least(1)),
    ConfigKey("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", at_least(1)),
    ConfigKey("offsets.topic.replication.factor", "int", 3, "Replication factor of __consumer_offsets (capped at the live broker count).", at_least(1)),
    ConfigKey("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets (set when it is created).", at_least(1)),
    ConfigKey("offsets.topic.retention.minutes", "int", None, "0.8.2 documentation's name of offsets.retention.minutes.", at_least(1)),
    ConfigKey("offsets.retention.minutes", "int", 10080, "How long committed offsets of an empty group are kept.", at_least(1)),
    ConfigKey("offsets.retention.check.interval.ms", "long", 600000, "How often the group coordinator looks for expired offsets.", at_least(1)),
    ConfigKey("offset.metadata.max.bytes", "int", 4096, "Largest metadata string an offset commit may carry (OFFSET_METADATA_TOO_LARGE past it).", at_least(0)),
    ConfigKey("offsets.load.buffer.size", "int", 5242880, "Bytes of __consumer_offsets read per step while a coordinator loads its groups (between two rounds of its disk worker).", at_least(1)),
    ConfigKey("offsets.commit.timeout.ms", "int", 5000, "Cluster mode: how long a group write waits to be replicated to the ISR before it fails (a standalone broker answers once appended).", at_least(1)),
    ConfigKey("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state (the transaction coordinators' log), set when it is created.", at_least(1)),
    ConfigKey("transaction.state.log.replication.factor", "int", 3, "Replication factor of __transaction_state (capped at the live broker count).", at_least(1)),
    ConfigKey("transaction.state.log.min.isr", "int", 2, "min.insync.replicas of __transaction_state (set when it is created).", at_least(1)),
    ConfigKey("transaction.state.log.segment.bytes", "int", 104857600, "Segment size of __transaction_state (set when it is created).", at_least(1)),
    ConfigKey("transaction.max.timeout.ms", "int", 900000, "Largest transaction timeout a producer may ask for (INVALID_TRANSACTION_TIMEOUT past it).", at_least(1)),
    ConfigKey("transactional.id.expiration.ms", "int", 604800000, "How long the coordinator keeps a transactional id with no transaction after its last update.", at_least(1)),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, "How often the transaction coordinator looks for transactions past their timeout (and aborts them) and for expired transactional ids.", at_least(1)),
    ConfigKey("group.initial.rebalance.delay.ms", "int", 3000, "Wait for more members before the first rebalance of a group."),
    ConfigKey("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a consumer may ask for."),
    ConfigKey("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a consumer may ask for."),
    ConfigKey("broker.rack", "string", "", "The rack of this broker (KIP-36): replica assignment spreads each partition's replicas across racks. Empty: none."),
    ConfigKey("zookeeper.connect", "string", "", "ZooKeeper connection string; empty = standalone single broker."),
    ConfigKey("zookeeper.session.timeout.ms", "int", 18000, "ZooKeeper session timeout."),
    ConfigKey("zookeeper.connection.timeout.ms", "int", None, "Wait for a ZooKeeper connection; defaults to the session timeout."),
    ConfigKey("zookeeper.set.acl", "bool", False, "Put Kafka's ACLs on the znodes this broker creates (its ZooKeeper login: all rights; everyone else: read, none on /config/users and /config/brokers). Needs a ZooKeeper login: the Client section of the JAAS file named by -Djava.security.auth.login.config in KAFKA_OPTS."),
    ConfigKey("replica.lag.time.max.ms", "long", 30000, "A follower not caught up for this long leaves the ISR."),
    ConfigKey("replica.selector.class", "string", "", "KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector sends a consumer that names its rack (client.rack) to an in-sync replica in that rack; empty (or LeaderSelector): consumers read from the leader. Followers serve consumers' fetches (v11+) up to their high watermark either way.", one_of("", "org.apache.kafka.common.replica.LeaderSelector", "org.apache.kafka.common.replica.RackAwareReplicaSelector")),
    ConfigKey("replica.fetch.max.bytes", "int", 1048576, "Bytes a follower fetches per partition.", at_least(0)),
    ConfigKey("replica.fetch.wait.max.ms", "int", 500, "Long-poll time of follower fetches."),
    ConfigKey("num.replica.fetchers", "int", 1, "Replica fetchers (each its own connection) per leader broker; a partition goes to one by the hash of its topic and number, as in Kafka.", at_least(1)),
    ConfigKey("replica.fetch.min.bytes", "int", 1, "Bytes a follower's fetch waits for at the leader (up to replica.fetch.wait.max.ms).", at_least(1)),
    ConfigKey("replica.socket.timeout.ms", "int", 30000, "How long a replica fetcher waits for a connection or a whole answer before it reconnects; at least replica.fetch.wait.max.ms.", at_least(1)),
    # Kafka's default is 64 KiB; a fixed SO_RCVBUF turns off Linux's receive autotuning, which
    # lets a follower catching up grow its window well past that
    ConfigKey("replica.socket.receive.buffer.bytes", "int", -1, "SO_RCVBUF of replica fetcher sockets (-1: OS default with autotuning; Kafka's default is 65536).", at_least(-1)),
    ConfigKey("min.insync.replicas", "int", 1, "Replicas that must acknowledge an acks=all produce.", at_least(1)),
    ConfigKey("unclean.leader.election.enable", "bool", False, "Allow an out-of-sync replica to become leader."),
    ConfigKey("controller.socket.timeout.ms", "int", 30000, "The controller's socket timeout towards brokers (connect, and each read of an answer); a request that times out is sent again on a new connection.", at_least(1)),
    ConfigKey("controlled.shutdown.enable", "bool", True, "Move leadership away before shutting down."),
    # Kafka's defaults are 3 and 5000: ours fit the whole attempt in 30 s, under systemd's stop timeout
    ConfigKey("controlled.shutdown.max.retries", "int", 5, "Times a stopping broker asks the controller to move its leadership away.", at_least(1)),
    ConfigKey("controlled.shutdown.retry.backoff.ms", "long", 1000, "Wait between those attempts.", at_least(0)),
    ConfigKey("auto.leader.rebalance.enable", "bool", True, "Move leadership back to preferred replicas periodically."),
    ConfigKey("leader.imbalance.per.broker.percentage", "int", 10, "Leadership off its preferred replicas a broker tolerates before the controller moves it back.", at_least(0)),
    ConfigKey("leader.imbalance.check.interval.seconds", "long", 300, "How often the controller checks the leadership balance.", at_least(1)),
    # Ours.
    ConfigKey("log.writeback.mode", "string", "auto", "Ours: page-cache write-back per log dir: auto (writeback on rotational disks), os, writeback.", one_of("auto", "os", "writeback"), ours=True),
    # 8 MiB: large enough that a SATA disk writes it as one sequential run, small enough that the
    # dirty pages of a hundred active partitions stay far below vm.dirty_background_bytes.
    ConfigKey("log.writeback.chunk.bytes", "long", 8388608, "Ours: bytes of a segment written back per sync_file_range chunk.", at_least(4096), ours=True),
    ConfigKey("log.writeback.window.bytes", "long", 134217728, "Ours: dirty bytes an active segment may run ahead of the disk in writeback mode (bursts up to this go at memory speed).", at_least(4096), ours=True),
    ConfigKey("appliance.shm.name", "string", "", "Ours: POSIX shared memory name; empty = derived from broker.id and port.", ours=True),
    ConfigKey("appliance.max.partitions", "int", 32768, "Ours: partition slots in the shared partition table (304 bytes each); a topic creation beyond them is refused whole with POLICY_VIOLATION.", at_least(1), ours=True),
    ConfigKey("appliance.cpu.affinity", "string", "", "Ours: CPUs the broker's processes run on, as a Linux CPU list (1 or 0-3,6); empty = every CPU. Keeps the broker off a co-located client's cores.", parses(parse_cpu_list), ours=True),
    ConfigKey("appliance.request.ring.bytes", "long", 67108864, "Ours: shared-memory request ring per (network worker, disk worker) pair; a produce request larger than half of it is refused.", at_least(1 << 20), ours=True),
    ConfigKey("metrics.listener", "string", "", "Ours: Prometheus endpoint, e.g. http://127.0.0.1:9308/metrics; empty = metrics off (nothing listens, nothing counts).", ours=True),
)

TOPIC_KEYS: tuple[TopicKey, ...] = (
    TopicKey("cleanup.policy", "list", None, "delete and/or compact.", one_of("delete", "compact"), synonyms=(("log.cleanup.policy", 1),)),
    TopicKey("compression.type", "string", None, "Compression of stored batches.", one_of(*_COMPRESSION), synonyms=(("compression.type", 1),)),
    TopicKey("delete.retention.ms", "long", None, "Tombstone retention of compacted topics.", at_least(0), synonyms=(("log.cleaner.delete.retention.ms", 1),)),
    TopicKey("file.delete.delay.ms", "long", None, "Delay before a deleted segment leaves the disk.", at_least(0), synonyms=(("log.segment.delete.delay.ms", 1),)),
    TopicKey("flush.messages", "long", None, "Messages between forced fsyncs.", at_least(1), synonyms=(("log.flush.interval.messages", 1),)),
    TopicKey("flush.ms", "long", None, "Time between forced fsyncs (looked at every log.flush.scheduler.interval.ms).", at_least(0), synonyms=(("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1))),
    TopicKey("index.interval.bytes", "int", None, "Log bytes between offset index entries.", at_least(0), synonyms=(("log.index.interval.bytes", 1),)),
    TopicKey("max.compaction.lag.ms", "long", None, "Maximum age before a message must be compacted.", at_least(1), synonyms=(("log.cleaner.max.compaction.lag.ms", 1),)),
    TopicKey("max.message.bytes", "int", None, "Largest record batch accepted.", at_least(0), synonyms=(("message.max.bytes", 1),)),
    TopicKey("message.downconversion.enable", "bool", None, "Down-convert for old fetch versions.", synonyms=(("log.message.downconversion.enable", 1),)),
    TopicKey("message.format.version", "string", None, "Message format of the topic's data: before 0.10.0-IV1 magic 0, before 0.11 magic 1 (no headers, no idempotent or transactional producers), v2 from 0.11; a change applies to later appends.", check_format_version, synonyms=(("log.message.format.version", 1),)),
    TopicKey("message.timestamp.difference.max.ms", "long", None, "Largest allowed timestamp skew (CreateTime).", at_least(0), synonyms=(("log.message.timestamp.difference.max.ms", 1),)),
    TopicKey("message.timestamp.type", "string", None, "CreateTime or LogAppendTime.", one_of(*_TS_TYPES), synonyms=(("log.message.timestamp.type", 1),)),
    TopicKey("min.cleanable.dirty.ratio", "double", None, "Dirty ratio above which the log is cleaned.", between(0, 1), synonyms=(("log.cleaner.min.cleanable.ratio", 1),)),
    TopicKey("min.compaction.lag.ms", "long", None, "Minimum age before compaction.", at_least(0), synonyms=(("log.cleaner.min.compaction.lag.ms", 1),)),
    TopicKey("min.insync.replicas", "int", None, "Replicas needed for acks=all.", at_least(1), synonyms=(("min.insync.replicas", 1),)),
    TopicKey("preallocate", "bool", None, "Reserve disk blocks ahead of the active segment's end on every append (off: ahead of appends of 256 KiB or more only).", synonyms=(("log.preallocate", 1),)),
    TopicKey("retention.bytes", "long", None, "Largest partition size (-1: no limit).", synonyms=(("log.retention.bytes", 1),)),
    TopicKey("retention.ms", "long", None, "Time a segment is kept (-1: forever).", at_least(-1), synonyms=(("log.retention.ms", 1), ("log.retention.minutes", M), ("log.retention.hours", H))),
    TopicKey("segment.bytes", "int", None, "Segment size before a roll.", at_least(14), synonyms=(("log.segment.bytes", 1),)),
    TopicKey("segment.index.bytes", "int", None, "Preallocated index file size.", at_least(4), synonyms=(("log.index.size.max.bytes", 1),)),
    TopicKey("segment.jitter.ms", "long", None, "Largest random jitter of the roll time.", at_least(0), synonyms=(("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", H))),
    TopicKey("segment.ms", "long", None, "Time before a segment is rolled.", at_least(1), synonyms=(("log.roll.ms", 1), ("log.roll.hours", H))),
    TopicKey("unclean.leader.election.enable", "bool", None, "Allow unclean leader election.", synonyms=(("unclean.leader.election.enable", 1),)),
)
# fmt: on

# Declared keys that are accepted (and validated) but change nothing here, with the reason; start-up
# says so for each one given explicitly, and README.md lists them.
NO_EFFECT: dict[str, str] = {
    "num.io.threads": "there is no request-handler thread pool: one disk worker per log dir does the I/O",
}

# Kafka broker keys of the seeds' 0.8.2 documentation (and its production config) that have no
# counterpart here: accepted without a value check, reported as having no effect.
KAFKA_ONLY_KEYS: dict[str, str] = {
    "background.threads": "background work (retention, flushes, checkpoints, cleaning) runs in each disk worker's loop, file deletion on one thread per log dir",
    "log.delete.delay.ms": "the 0.8.2 table lists it beside log.segment.delete.delay.ms, the key that sets that delay (here and in Kafka)",
    "controller.message.queue.size": "the controller's queue of requests to each broker (one sender thread each) is unbounded: a full one would stall the controller's event thread",
    "replica.lag.max.messages": "Kafka 0.9 removed it: a follower leaves the ISR by replica.lag.time.max.ms alone",
    "fetch.purgatory.purge.interval.requests": "a long poll waits for the disk workers' data doorbells and stops waiting once answered: nothing is left to purge",
    "producer.purgatory.purge.interval.requests": "an acks=all produce waits in its partition's list of held answers and leaves it once answered: nothing is left to purge",
    "zookeeper.sync.time.ms": "a ZooKeeper follower's lag is not a client setting in kazoo",
    "offsets.commit.required.acks": "a commit is acknowledged once the ISR has it (Kafka's -1; standalone: once appended), and no other choice is offered",
}

_BROKER_BY_NAME = {k.name: k for k in BROKER_KEYS}
_TOPIC_BY_NAME = {k.name: k for k in TOPIC_KEYS}
assert len(_BROKER_BY_NAME) == len(BROKER_KEYS) and len(_TOPIC_BY_NAME) == len(TOPIC_KEYS)
assert all(b in _BROKER_BY_NAME for k in TOPIC_KEYS for b, _ in k.synonyms)
assert all(k in _BROKER_BY_NAME for k in NO_EFFECT) and not set(KAFKA_ONLY_KEYS) & set(_BROKER_BY_NAME)


# ---------------------------------------------------------------------------------------------
# Java .properties parsing

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[str]:
    """Join continuation lines (an odd number of trailing backslashes) the way Java does."""
    buf: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f") if buf is not None else raw
        if buf is None:
            stripped = line.lstrip(" \t\f")
            if not stripped or stripped[0] in "#!":
                continue
            line = stripped
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            buf = (buf or "") + line[:-1]
            continue
        yield (buf or "") + line
        buf = None
    if buf is not None:
        yield buf


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2:i + 6] or ""):
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text into a dict (later keys win).

    Comments start with ``#`` or ``!``; a pair is ``key=value``, ``key:value`` or ``key value``;
    a line ending in an odd number of backslashes continues on the next line (its leading
    whitespace dropped); ``\\t \\n \\r \\f \\uXXXX`` and ``\\<char>`` escapes are decoded.
    """
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        key_chars: list[str] = []
        while i < len(line):
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                key_chars.append(line[i:i + 2])
                i += 2
                continue
            if c in "=: \t\f":
                break
            key_chars.append(c)
            i += 1
        # skip whitespace, then at most one separator, then whitespace
        while i < len(line) and line[i] in " \t\f":
            i += 1
        if i < len(line) and line[i] in "=:":
            i += 1
            while i < len(line) and line[i] in " \t\f":
                i += 1
        out[_unescape("".join(key_chars))] = _unescape(line[i:])
    return out


# ---------------------------------------------------------------------------------------------

class BrokerConfig:
    """The broker's typed configuration.

    Build with :meth:`load`. Unknown keys are kept (as strings) and logged as a warning.
    Immutable; safe to share between threads.
    """

    def __init__(self, values: Mapping[str, Any], raw: Mapping[str, str]) -> None:
        self._values = dict(values)
        self._raw = dict(raw)

    @classmethod
    def load(cls, path: str | None = None, overrides: Mapping[str, str] | None = None,
             warn: bool = True) -> BrokerConfig:
        """Read ``path`` (a server.properties file) if given, apply ``overrides``, validate.

        With ``warn``, logs a warning for each key given that has no effect here (naming the
        reason) and for each unknown key (with a "did you mean" suggestion).

        Raises ConfigError (a bad value, naming the key and value; a 0.8 key and its modern twin
        that disagree, naming both); OSError if ``path`` cannot be read.
        """
        raw: dict[str, str] = {}
        if path is not None:
            with open(path, encoding="latin-1") as f:  # Java reads .properties as ISO-8859-1
                raw.update(parse_properties(f.read()))
        if overrides:
            raw.update({str(k): str(v) for k, v in overrides.items()})
        values: dict[str, Any] = {}
        for key in BROKER_KEYS:
            values[key.name] = key.parse(raw[key.name]) if key.name in raw else key.default
        _apply_twins(raw, values)
        if warn:
            _warn_unused(raw)
            _warn_flush_unchecked(values)
        cfg = cls(values, raw)
        cfg._check_cross_key()
        return cfg

    def _check_cross_key(self) -> None:
        lo, hi = self["group.min.session.timeout.ms"], self["group.max.session.timeout.ms"]
        if lo > hi:
            raise ConfigError("group.min.session.timeout.ms", lo,
                              f"must not exceed group.max.session.timeout.ms ({hi})")
        if not self.listeners:
            raise ConfigError("listeners", self._raw.get("listeners", ""), "needs at least one listener")
        self._check_listeners()
        if self["replica.socket.timeout.ms"] < self["replica.fetch.wait.max.ms"]:
            raise ConfigError("replica.socket.timeout.ms", self["replica.socket.timeout.ms"],  # Kafka's check
                              f"must be at least replica.fetch.wait.max.ms "
                              f"({self['replica.fetch.wait.max.ms']}): a long poll would time out")
        if self["max.connections.per.ip"] == 0 and not self["max.connections.per.ip.overrides"]:
            raise ConfigError("max.connections.per.ip", 0,  # Kafka refuses it too
                              "0 admits nobody; set max.connections.per.ip.overrides as well")

    def _check_listeners(self) -> None:
        """Kafka's listener rules (KafkaConfig's validation), each naming the key and value."""
        pmap = parse_protocol_map(self["listener.security.protocol.map"])
        for key in ("listeners", "advertised.listeners"):
            items = self._values[key] or []
            names: set[str] = set()
            ports: set[int] = set()
            for item in items:
                m = _LISTENER_RE.fullmatch(item)
                assert m is not None  # validated at parse
                name, port = m.group(1).upper(), int(m.group(3))
                if name in names:
                    raise ConfigError(key, self._given(key), f"listener name {name} appears twice")
                names.add(name)
                if name not in pmap:
                    raise ConfigError(key, self._given(key), f"listener name {name} has no security "
                                      f"protocol in listener.security.protocol.map "
                                      f"({self['listener.security.protocol.map']!r})")
                # two listeners cannot bind one port (port 0: each gets its own from the kernel);
                # advertised addresses may share a port (a proxy in front may tell them apart)
                if key == "listeners" and port and port in ports:
                    raise ConfigError(key, self._given(key), f"port {port} is used by two listeners")
                ports.add(port)
        listening = {e.listener for e in self.listener_endpoints}
        for e in self._parsed("advertised.listeners"):
            if e.listener not in listening:
                raise ConfigError("advertised.listeners", self._given("advertised.listeners"),
                                  f"listener name {e.listener} is not among listeners "
                                  f"({', '.join(sorted(listening))})")
        name = self._values["inter.broker.listener.name"]
        if name:
            if self.is_set("security.inter.broker.protocol"):
                raise ConfigError("inter.broker.listener.name", name,
                                  "give only one of inter.broker.listener.name and "
                                  "security.inter.broker.protocol")
            if name.upper() not in listening:
                raise ConfigError("inter.broker.listener.name", name,
                                  f"not among listeners ({', '.join(sorted(listening))})")
        elif not any(e.security_protocol == self["security.inter.broker.protocol"]
                     for e in self.listener_endpoints):
            raise ConfigError("security.inter.broker.protocol", self["security.inter.broker.protocol"],
                              "no listener uses this protocol; set inter.broker.listener.name")

    def _given(self, key: str) -> object:
        return self._raw.get(key, ",".join(self._values[key] or []))

    def _parsed(self, key: str) -> list[Endpoint]:
        pmap = parse_protocol_map(self["listener.security.protocol.map"])
        out = []
        for item in self._values[key] or []:
            m = _LISTENER_RE.fullmatch(item)
            assert m is not None  # validated at parse
            name = m.group(1).upper()
            out.append(Endpoint(name, m.group(2).strip("[]"), int(m.group(3)), pmap.get(name, "")))
        return out

    def listener_value(self, listener: str, key: str) -> Any:
        """Kafka's per-listener override ``listener.name.<listener>.<key>`` (the listener's name
        in lower case), else the broker-wide key (``key`` less a leading mechanism name, as in
        ``plain.sasl.jaas.config``)."""
        raw = self._raw.get(f"listener.name.{listener.lower()}.{key}")
        if raw is not None:
            return raw
        base = key.split(".", 1)[1] if key.split(".", 1)[0] in ("plain", "scram-sha-256", "scram-sha-512") else key
        return self._values.get(base)

    def check_served(self) -> None:
        """Start-up's refusal of a listener this build cannot serve: every listener must map to
        PLAINTEXT or SSL until SASL exists. Serving such a listener without its authentication
        would hand clients that asked for it an open broker.
        Raises ConfigError naming the listener and its protocol."""
        for e in self.listener_endpoints:
            if e.security_protocol not in SERVED_PROTOCOLS:
                raise ConfigError("listeners", self._given("listeners"),
                                  f"listener {e.listener} uses {e.security_protocol}, which this "
                                  f"broker does not serve yet (PLAINTEXT and SSL; SASL is not built)")

    @property
    def listener_endpoints(self) -> list[Endpoint]:
        """Every listener with its name and security protocol, in the order given."""
        return self._parsed("listeners")

    @property
    def advertised_endpoints(self) -> list[Endpoint]:
        """What each listener tells clients and other brokers, in listeners' order: its entry in
        advertised.listeners, else the listener itself (its host may be empty: every
        interface; the caller names the machine)."""
        given = {e.listener: e for e in self._parsed("advertised.listeners")}
        return [given.get(e.listener, e) for e in self.listener_endpoints]

    @property
    def inter_broker_listener(self) -> str:
        """The listener name other brokers connect to (validated to be one of the listeners)."""
        name = self._values["inter.broker.listener.name"]
        if name:
            return name.upper()
        proto = self["security.inter.broker.protocol"]
        return next(e.listener for e in self.listener_endpoints if e.security_protocol == proto)

    def get(self, key: str) -> Any:
        """Typed value of a declared key, or the raw string of an unknown one. KeyError if absent."""
        if key in self._values:
            return self._values[key]
        return self._raw[key]

    __getitem__ = get

    def is_set(self, key: str) -> bool:
        """True when the key was given explicitly (file or override)."""
        return key in self._raw

    @property
    def log_dirs(self) -> list[str]:
        """log.dirs if set (Kafka: it wins), else [log.dir]."""
        dirs = self._values["log.dirs"]
        return list(dirs) if dirs else [self._values["log.dir"]]

    @staticmethod
    def _host_ports(items: list[str]) -> list[tuple[str, int]]:
        out = []
        for item in items:
            m = _LISTENER_RE.fullmatch(item)
            assert m is not None  # validated at load
            host = m.group(2).strip("[]")
            out.append((host, int(m.group(3))))
        return out

    @property
    def listeners(self) -> list[tuple[str, int]]:
        """(host, port) of each listener; an empty host means all interfaces."""
        return self._host_ports(self._values["listeners"])

    @property
    def advertised_listeners(self) -> list[tuple[str, int]]:
        """advertised.listeners, defaulting to listeners (Kafka)."""
        adv = self._values["advertised.listeners"]
        return self._host_ports(adv) if adv else self.listeners

    @property
    def zookeeper_connection_timeout_ms(self) -> int:
        v = self._values["zookeeper.connection.timeout.ms"]
        return v if v is not None else self._values["zookeeper.session.timeout.ms"]

    @property
    def standalone(self) -> bool:
        """True when no zookeeper.connect is configured (single broker)."""
        return not self._values["zookeeper.connect"]

    def topic_defaults(self) -> TopicConfig:
        """The topic configuration a topic without overrides gets."""
        return TopicConfig.from_overrides(self, {})

    def items(self) -> dict[str, Any]:
        """All declared keys with their typed values."""
        return dict(self._values)

    def with_values(self, changes: Mapping[str, Any]) -> BrokerConfig:
        """A copy with some typed values replaced (dynamic broker configs); ``is_set`` still
        answers for the static configuration."""
        return BrokerConfig({**self._values, **changes}, self._raw)


# 0.8 names with a modern twin: rendered commented out, since both given must agree.
_OLD_TWINS = ("port", "host.name", "advertised.host.name", "advertised.port",
              "offsets.topic.retention.minutes")


def _legacy_listener(host: str, port: int) -> str:
    return str(Endpoint(PLAINTEXT, host, port, PLAINTEXT))


def _first_host_port(items: list[str]) -> tuple[str, int]:
    m = _LISTENER_RE.fullmatch(items[0])
    assert m is not None  # validated at parse
    return m.group(2).strip("[]"), int(m.group(3))


def _apply_twins(raw: Mapping[str, str], values: dict[str, Any]) -> None:
    """Kafka 0.8's names onto the modern ones, as Kafka 0.9-2.x does (KafkaConfig):

    - no ``listeners``: PLAINTEXT://host.name:port when either 0.8 key is given (an empty
      host.name binds all interfaces), else our default (127.0.0.1:9092);
    - no ``advertised.listeners``: PLAINTEXT://advertised.host.name:advertised.port when either is
      given, each defaulting to the listener's host / port; else the listeners.

    A 0.8 key given together with its modern twin must say the same thing.
    Raises ConfigError naming both keys and both values.
    """
    def clash(old: str, new: str, what: str) -> ConfigError:
        return ConfigError(old, raw[old], f"conflicts with {new}={raw[new]!r} ({what}); "
                                          f"give only one of {old} and {new}")

    if "listeners" in raw:
        host, port = _first_host_port(values["listeners"])
        if "port" in raw and values["port"] != port:
            raise clash("port", "listeners", f"port {values['port']} vs {port}")
        if "host.name" in raw and values["host.name"] != host:
            raise clash("host.name", "listeners", f"host {values['host.name']!r} vs {host!r}")
    elif "port" in raw or "host.name" in raw:
        values["listeners"] = [_legacy_listener(values["host.name"], values["port"])]
    if "advertised.listeners" in raw:
        host, port = _first_host_port(values["advertised.listeners"])
        if "advertised.port" in raw and values["advertised.port"] != port:
            raise clash("advertised.port", "advertised.listeners",
                        f"port {values['advertised.port']} vs {port}")
        if "advertised.host.name" in raw and values["advertised.host.name"] != host:
            raise clash("advertised.host.name", "advertised.listeners",
                        f"host {values['advertised.host.name']!r} vs {host!r}")
    elif "advertised.port" in raw or "advertised.host.name" in raw:
        lhost, lport = _first_host_port(values["listeners"])
        host = values["advertised.host.name"] if "advertised.host.name" in raw else lhost
        port = values["advertised.port"] if "advertised.port" in raw else lport
        values["advertised.listeners"] = [_legacy_listener(host, port)]
    old, new = "offsets.topic.retention.minutes", "offsets.retention.minutes"
    if old in raw:
        if new in raw and values[new] != values[old]:
            raise clash(old, new, f"{values[old]} vs {values[new]} minutes")
        values[new] = values[old]


def _warn_unused(raw: Mapping[str, str]) -> None:
    """Say plainly which given keys change nothing here; suggest a name for an unknown key."""
    known = list(_BROKER_BY_NAME) + list(KAFKA_ONLY_KEYS)
    for name, value in raw.items():
        reason = NO_EFFECT.get(name) or KAFKA_ONLY_KEYS.get(name)
        # a no-effect key left at its default (as our generated server.properties has them)
        # asks for nothing the broker does not do: no warning
        if name in NO_EFFECT and _BROKER_BY_NAME[name].parse(value) == _BROKER_BY_NAME[name].default:
            continue
        if reason:
            log.warning("configuration %s=%s is accepted but has no effect here: %s",
                        name, value, reason)
        elif name not in _BROKER_BY_NAME and not _LISTENER_PREFIXED.fullmatch(name):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]}?" if close else ""
            log.warning("unknown configuration key %s (value %r) ignored%s", name, value, hint)


def _warn_flush_unchecked(values: Mapping[str, Any]) -> None:
    """log.flush.interval.ms is applied only every log.flush.scheduler.interval.ms (Kafka's
    rule, whose default is never): say so when the first is set below the second."""
    every, scheduler = values["log.flush.interval.ms"], values["log.flush.scheduler.interval.ms"]
    if every is not None and every < scheduler:
        when = "never (its default)" if scheduler == LONG_MAX else f"every {scheduler} ms"
        log.warning("log.flush.interval.ms=%d is applied only when the log flusher runs, "
                    "log.flush.scheduler.interval.ms: %s; set that key too", every, when)


def _topic_default(broker: BrokerConfig, key: TopicKey) -> Any:
    for name, factor in key.synonyms:
        v = broker.get(name)
        if v is None:
            continue
        if factor != 1:
            # Kafka: a negative retention/roll in minutes or hours means "no limit" = -1 ms.
            return -1 if v < 0 else v * factor
        return v
    raise AssertionError(f"no default for topic key {key.name}")  # every chain ends in a default


class TopicConfig:
    """A topic's typed configuration: broker defaults plus the topic's own overrides.

    Values are reachable as ``cfg["segment.bytes"]`` or ``cfg.segment_bytes``. Immutable.
    """

    def __init__(self, values: Mapping[str, Any], overrides: Mapping[str, str]) -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_overrides", dict(overrides))

    @classmethod
    def from_overrides(cls, broker: BrokerConfig, overrides: Mapping[str, str]) -> TopicConfig:
        """Validate ``overrides`` (topic key -> string) over the broker's defaults.

        Raises ConfigError for an unknown topic key or a bad value.
        """
        values: dict[str, Any] = {}
        clean: dict[str, str] = {}
        for name, raw in overrides.items():
            if name not in _TOPIC_BY_NAME:
                raise ConfigError(name, raw, "unknown topic configuration key")
        for key in TOPIC_KEYS:
            if key.name in overrides:
                values[key.name] = key.parse(overrides[key.name])
                clean[key.name] = str(overrides[key.name]).strip()
            else:
                values[key.name] = _topic_default(broker, key)
        return cls(values, clean)

    @classmethod
    def defaults(cls, **values: Any) -> TopicConfig:
        """Kafka's defaults with some typed values replaced (keys with underscores); for tests/tools."""
        base = BrokerConfig.load().topic_defaults()
        merged = dict(base._values)
        for attr, v in values.items():
            name = attr.replace("_", ".")
            if name not in _TOPIC_BY_NAME:
                raise ConfigError(name, v, "unknown topic configuration key")
            merged[name] = _TOPIC_BY_NAME[name].parse(v)
        return cls(merged, {k: _format(v) for k, v in merged.items() if base._values[k] != v})

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        try:
            return self._values[attr.replace("_", ".")]
        except KeyError:
            raise AttributeError(attr) from None

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError("TopicConfig is immutable")

    def to_properties(self) -> dict[str, str]:
        """The overrides only, as strings (what a topic.properties file holds)."""
        return dict(self._overrides)

    def __repr__(self) -> str:
        return f"TopicConfig({self._overrides!r})"


def _format(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(v)
    return str(v)


_TOPIC_NAME_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def validate_topic_name(name: str) -> None:
    """Kafka's rule: 1..249 chars of [a-zA-Z0-9._-], not '.' or '..'. Raises InvalidTopicError."""
    from appliance.errors import InvalidTopicError

    if not isinstance(name, str) or _TOPIC_NAME_RE.fullmatch(name) is None or name in (".", ".."):
        raise InvalidTopicError(f"invalid topic name {name!r}: 1-249 characters of [a-zA-Z0-9._-]")


def render_server_properties() -> str:
    """server.properties text with every broker key at its default, documented (from the table)."""
    lines = [
        "# appliance broker configuration: Kafka's key names and defaults.",
        "# Generated from appliance/config.py (BROKER_KEYS) by render_server_properties().",
        "# Keys marked 'Ours' are specific to this appliance.",
        "",
    ]
    for key in BROKER_KEYS:
        lines.append(f"# {key.doc}")
        if key.default is None or key.name in _OLD_TWINS:
            lines.append(f"#{key.name}=")
        else:
            lines.append(f"{key.name}={_format(key.default)}")
        lines.append("")
    return "\n".join(lines)
