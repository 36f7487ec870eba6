"""`appliance configs`: kafka-configs.sh for topic and broker configs, through DescribeConfigs
and IncrementalAlterConfigs.

    appliance configs --bootstrap-server B --entity-type topics --entity-name T --describe [--all]
    appliance configs --bootstrap-server B --entity-type brokers --entity-name 0 --alter \\
        --add-config log.retention.ms=60000 --delete-config log.retention.bytes
    appliance configs ... --entity-type brokers --entity-default --alter --add-config k=v

``--add-config`` takes ``k=v`` pairs separated by commas; a list value goes in square brackets
(``cleanup.policy=[compact,delete]``). A refused change prints the broker's reason (it names the
key and the value) on one line, exit status 1.
"""

from __future__ import annotations

import argparse
from typing import Any

from appliance.cli.common import add_bootstrap, connect, metadata
from appliance.cli.main import CliError
from appliance.errors import ErrorCode

__all__ = ["add_arguments", "run", "parse_add_config"]

_TYPES = {"topics": 2, "brokers": 4, "users": -1}  # users: the SCRAM credential APIs
_SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
            4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
# what "Dynamic configs for ..." lists, as kafka-configs: a topic's own overrides; a broker's
# dynamic values at either level (the default entity only ever holds its own)
_DYNAMIC_SOURCES = {"topics": (1,), "brokers": (2, 3)}
SET, DELETE = 0, 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show an entity's configs")
    action.add_argument("--alter", action="store_true", help="change an entity's configs")
    p.add_argument("--entity-type", choices=sorted(_TYPES), required=True,
                   help="topics, brokers, or users (SCRAM credentials)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--entity-name", metavar="NAME", help="topic name or broker id")
    who.add_argument("--entity-default", action="store_true",
                     help="the cluster-wide default (brokers only)")
    p.add_argument("--add-config", metavar="K=V,...", help="configs to set: k1=v1,k2=[a,b]")
    p.add_argument("--delete-config", metavar="K,...", help="configs to remove (back to the default)")
    p.add_argument("--all", action="store_true", help="--describe: every config, not only the dynamic ones")


def parse_add_config(text: str) -> dict[str, str]:
    """``k1=v1,k2=[a,b]`` -> {"k1": "v1", "k2": "a,b"}; CliError naming a malformed pair."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise CliError(f"--add-config: unbalanced ']' in {text!r}", 2)
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise CliError(f"--add-config: unbalanced '[' in {text!r}", 2)
    items.append(cur)
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"--add-config: {item!r} is not key=value", 2)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        if key in out:
            raise CliError(f"--add-config: {key} given twice", 2)
        out[key] = value
    return out


def _entity(args: argparse.Namespace) -> str | None:
    if args.entity_default:
        if args.entity_type != "brokers":
            raise CliError("--entity-default is only for --entity-type brokers", 2)
        return ""
    if args.entity_name is not None and args.entity_type == "brokers" and not args.entity_name.isdigit():
        raise CliError(f"--entity-name {args.entity_name!r}: a broker id is an integer", 2)
    return args.entity_name


def _label(entity_type: str, name: str) -> str:
    if entity_type == "brokers":
        return "Default configs for brokers in the cluster" if name == "" else f"configs for broker {name}"
    return f"configs for topic {name}"


def _error(code: int, message: str | None, what: str) -> CliError:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    return CliError(f"{what}: {message or name}" if message else f"{what}: {name}")


def _describe(conn: Any, args: argparse.Namespace, name: str | None) -> None:
    rtype = _TYPES[args.entity_type]
    if name is None:
        md = metadata(conn, None)
        names = (sorted(t.name for t in md.topics) if args.entity_type == "topics"
                 else [str(b.node_id) for b in md.brokers])
    else:
        names = [name]
    for n in names:
        res = conn.request(32, {"resources": [{"resource_type": rtype, "resource_name": n,
                                               "configuration_keys": None}],
                                "include_synonyms": True}).results[0]
        if res.error_code:
            raise _error(res.error_code, res.error_message, f"describing {_label(args.entity_type, n)}")
        label = _label(args.entity_type, n)
        if n == "" and args.entity_type == "brokers":
            print(f"{label} are:")
        else:
            print(f"{'All' if args.all else 'Dynamic'} {label} are:")
        for c in sorted(res.configs, key=lambda c: c.name):
            if not args.all and c.config_source not in _DYNAMIC_SOURCES[args.entity_type]:
                continue
            syn = ", ".join(f"{_SOURCES.get(s.source, s.source)}:{s.name}={s.value}" for s in c.synonyms)
            print(f"  {c.name}={c.value} sensitive={str(c.is_sensitive).lower()} synonyms={{{syn}}}")


def _alter(conn: Any, args: argparse.Namespace, name: str | None) -> None:
    if name is None:
        raise CliError("--alter needs --entity-name" + (" or --entity-default" if args.entity_type == "brokers" else ""), 2)
    add = parse_add_config(args.add_config) if args.add_config else {}
    delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not add and not delete:
        raise CliError("--alter needs --add-config and/or --delete-config", 2)
    both = sorted(set(add) & set(delete))
    if both:
        raise CliError(f"{', '.join(both)}: both added and deleted", 2)
    ops = [{"name": k, "config_operation": SET, "value": v} for k, v in add.items()]
    ops += [{"name": k, "config_operation": DELETE, "value": None} for k in delete]
    r = conn.request(44, {"resources": [{"resource_type": _TYPES[args.entity_type], "resource_name": name,
                                         "configs": ops}], "validate_only": False}).responses[0]
    if r.error_code:
        raise _error(r.error_code, r.error_message, f"updating {_label(args.entity_type, name)}")
    if name == "":
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {args.entity_type[:-1]} {name}.")


def run(args: argparse.Namespace) -> int:
    name = _entity(args)
    if args.describe and (args.add_config or args.delete_config):
        raise CliError("--add-config and --delete-config go with --alter", 2)
    with connect(args) as conn:
        if args.entity_type == "users":
            from appliance.cli.user_credentials import alter_user, describe_users
            if args.describe:
                describe_users(conn, name)
            else:
                delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
                alter_user(conn, name, parse_add_config(args.add_config) if args.add_config else {}, delete)
        elif args.describe:
            _describe(conn, args, name)
        else:
            _alter(conn, args, name)
    return 0
