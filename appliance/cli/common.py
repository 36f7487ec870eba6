"""What the client-side CLI tools share: --bootstrap-server, --property parsing, connecting."""

from __future__ import annotations

import argparse

from appliance.cli.main import CliError
from appliance.client.connection import BrokerConnection, ConnectionFailed, parse_bootstrap
from appliance.errors import ErrorCode

__all__ = ["add_bootstrap", "connect", "parse_properties_args", "check", "metadata"]


def add_bootstrap(p: argparse.ArgumentParser) -> None:
    # --broker-list: the name the 0.8-2.x console producer used for the same thing
    p.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server",
                   default="127.0.0.1:9092", metavar="HOST:PORT",
                   help="broker to connect to (default 127.0.0.1:9092)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="connect and request timeout (default 10)")


def connect(args: argparse.Namespace) -> BrokerConnection:
    try:
        servers = parse_bootstrap(args.bootstrap_server)
    except ValueError as e:
        raise CliError(f"--bootstrap-server: {e}", 2) from e
    errors = []
    for host, port in servers:
        try:
            return BrokerConnection(host, port, timeout=args.timeout)
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
