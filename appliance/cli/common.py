"""What the client-side CLI tools share: --bootstrap-server, --property parsing, connecting."""

from __future__ import annotations

import argparse
import time
from typing import Any

from appliance.cli.main import CliError
from appliance.client.connection import BrokerConnection, ConnectionFailed, parse_bootstrap
from appliance.errors import ErrorCode

__all__ = ["Brokers", "add_bootstrap", "connect", "parse_properties_args", "check", "metadata",
           "command_config", "tool_security"]


def add_bootstrap(p: argparse.ArgumentParser, zookeeper: bool = False) -> None:
    """--bootstrap-server (and its 0.8 name --broker-list); with ``zookeeper``, also 0.8's
    --zookeeper, whose registered brokers are then connected to instead."""
    # --broker-list: the name the 0.8-2.x console producer used for the same thing
    p.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server",
                   default="127.0.0.1:9092", metavar="HOST:PORT",
                   help="broker to connect to (default 127.0.0.1:9092)")
    if zookeeper:
        p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="0.8's form: the cluster's zookeeper.connect; its registered brokers "
                            "are connected to (instead of --bootstrap-server)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="connect and request timeout (default 10)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties for the connection (security.protocol=SSL, "
                        "ssl.truststore.location, ssl.keystore.location, ...), as Kafka's tools take")


def command_config(args: argparse.Namespace) -> dict[str, str]:
    """--command-config's properties ({} without it). Raises CliError naming the file."""
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    from appliance.config import parse_properties
    try:
        with open(path, encoding="latin-1") as f:
            return parse_properties(f.read())
    except OSError as e:
        raise CliError(f"--command-config {path}: {e.strerror}", 2) from e


def tool_security(args: argparse.Namespace) -> Any:
    """How --command-config secures the connections (client.security.Security; None:
    plaintext). Raises CliError naming the file and the key."""
    props = command_config(args)
    if not props:
        return None
    from appliance.client import config as cfg
    from appliance.errors import InvalidConfigError
    try:
        c = cfg.resolve(cfg.ADMIN_KEYS, {"bootstrap.servers": "unused:1", **props}, {})
        return cfg.security_of(c)
    except InvalidConfigError as e:
        raise CliError(f"--command-config {args.command_config}: {e}", 2) from e


def bootstrap_servers(args: argparse.Namespace) -> list[tuple[str, int]]:
    """--bootstrap-server as (host, port) pairs, or the brokers registered in --zookeeper when
    given; a malformed one is a usage error naming it."""
    if getattr(args, "zookeeper", None):
        from appliance.cli.zookeeper_tool import brokers_in_zookeeper
        return brokers_in_zookeeper(args.zookeeper, args.timeout, getattr(args, "verbose", False))
    try:
        return parse_bootstrap(args.bootstrap_server)
    except ValueError as e:
        raise CliError(f"--bootstrap-server: {e}", 2) from e


def connect(args: argparse.Namespace) -> BrokerConnection:
    servers = bootstrap_servers(args)
    security = tool_security(args)
    errors = []
    for host, port in servers:
        try:
            return BrokerConnection(host, port, timeout=args.timeout, security=security)
        except ConnectionFailed as e:
            errors.append(str(e))
    raise CliError("; ".join(errors))


def parse_properties_args(items: list[str], flag: str = "--property") -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{flag} {item!r}: expected key=value", 2)
        out[key] = value
    return out


def check(code: int, what: str, message: str | None = None) -> None:
    if code:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        raise CliError(f"{what}: {name}" + (f" ({message})" if message else ""))


def metadata(conn: BrokerConnection, topics: list[str] | None, auto_create: bool = False):
    return conn.request(3, {"topics": None if topics is None else [{"name": t} for t in topics],
                            "allow_auto_topic_creation": auto_create})


class Brokers:
    """Where a tool's requests go: in a cluster, partition requests (ListOffsets,
    DeleteRecords) to each partition's leader and group requests to the group's coordinator
    (the leader of its ``__consumer_offsets`` partition); with one broker, everything to the
    bootstrap connection."""

    def __init__(self, conn: BrokerConnection, timeout: float, security: Any = None) -> None:
        self.conn, self.timeout, self.security = conn, timeout, security
        self.addresses = {b.node_id: (b.host, b.port) for b in metadata(conn, []).brokers}
        self.opened: dict[int, BrokerConnection] = {}

    def to(self, node: int) -> BrokerConnection:
        if len(self.addresses) <= 1 or node not in self.addresses:
            return self.conn
        if node not in self.opened:
            self.opened[node] = BrokerConnection(*self.addresses[node], timeout=self.timeout, security=self.security)
        return self.opened[node]

    def leaders(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """{(topic, partition): leader id} from the bootstrap broker's Metadata; empty with one
        broker (everything goes to the bootstrap connection)."""
        out: dict[tuple[str, int], int] = {}
        if len(self.addresses) > 1:
            for t in metadata(self.conn, topics).topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = p.leader_id
        return out

    def coordinator(self, group: str) -> BrokerConnection:
        if len(self.addresses) <= 1:
            return self.conn
        deadline = time.monotonic() + self.timeout
        while True:  # while the offsets topic is being created or its leader elected
            r = self.conn.request(10, {"key": group, "key_type": 0})
            if r.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(r.error_code, f"finding the coordinator of group {group}")
        return self.to(r.node_id)

    def close(self) -> None:
        for c in self.opened.values():
            c.close()
