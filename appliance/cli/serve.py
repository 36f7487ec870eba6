"""`appliance serve [--config FILE] [--override key=value ...]`."""

from __future__ import annotations

import argparse

from appliance.cli.main import CliError

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="a server.properties file (Kafka's key names)")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="set one property, after the file (repeatable)")


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--override {item!r}: expected key=value", 2)
        out[key.strip()] = value.strip()
    return out


def run(args: argparse.Namespace) -> int:
    from appliance.config import BrokerConfig, ConfigError
    from appliance.supervisor import serve

    try:
        config = BrokerConfig.load(args.config, parse_overrides(args.override))
    except ConfigError as e:
        raise CliError(str(e), 2) from e
    except OSError as e:
        raise CliError(f"--config {args.config}: {e.strerror}", 2) from e
    return serve(config)
